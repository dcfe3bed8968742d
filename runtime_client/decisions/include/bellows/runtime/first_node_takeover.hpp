#pragma once
// Which node's daemon starts the controller that takes a Slurm job over once the job's first
// node (its batch host, where the batch script and `bellows run` ran) is lost.
//
// Slurm 22.05 takes a failed node out of a no-kill job of more than one node, the batch host
// included, and keeps the job RUNNING on the others (docs/slurm.md, "The job's first node").
// Every daemon left then finds its controller gone while its ranks run. Exactly one of them
// starts `bellows run --attach` on its own node; the others wait for it, following the job's
// controller contact. Each daemon asks slurmctld the same question and decides alone, so the
// answer must be the same on every node for the same facts: the first node Slurm still gives
// the job, in the order slurmctld lists them.
//
// A dead host answers nothing: its death is no refused connection but silence, and slurmctld
// sets it DOWN only once it has not answered for SlurmdTimeout (300 s by default), long after
// a daemon ends its ranks for a silent controller host (controller_loss.hpp: the heartbeat
// timeout, its grace and as long again). keep_ranks_for_takeover says when the daemon keeps
// them instead, waiting for slurmctld's word: while a takeover may still come, for at most a
// bounded grace (takeover_grace_seconds).
//
// The controller that takes the job over runs without the lost node, whose ranks the
// survivors may not know lost: a silent peer fails no MPI call, and the controller that would
// have told them died with the node. lost_ranks_after_takeover says which of the lost node's
// ranks it names lost to them (the same RanksLost a controller sends when a node is lost),
// once they are back: only ranks no survivor reports as its own (when MPI found the loss, the
// survivors rebuilt without it and renumbered), once.
//
// Pure: the daemon reads the facts from slurmctld; this decides.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bellows::runtime {

/// What slurmctld says of the job and of its batch host.
struct FirstNodeLossFacts {
  std::string job_state;         ///< JobState ("RUNNING", ...); "" when unknown
  bool batch_job = false;        ///< BatchFlag=1
  std::string batch_host;        ///< BatchHost ("" or "(null)" when none)
  std::string batch_host_state;  ///< that node's State ("DOWN+NOT_RESPONDING", ...); "" when unknown
  /// The nodes Slurm gives the job now, in slurmctld's order (NodeList expanded).
  std::vector<std::string> job_nodes;
};

/// Whether the job's controller is to be started again elsewhere, on which node, and why (in
/// words for the daemon's log and the job's output).
struct FirstNodeTakeover {
  bool take_over = false;
  std::string node;  ///< the node whose daemon starts it (when take_over)
  std::string why;
};

/// take_over when the job is a RUNNING batch job whose batch host is DOWN and no longer among
/// its nodes (Slurm took it out: no-kill) and some node is left; the node is the first of
/// job_nodes. Otherwise not, saying why.
[[nodiscard]] FirstNodeTakeover plan_first_node_takeover(const FirstNodeLossFacts& facts);

/// What a daemon knows once its controller's host has answered nothing for the daemon's
/// unreachable limit (ControllerLossLimits::unreachable_seconds) while its ranks run.
struct SilentControllerFacts {
  /// What slurmctld said at the daemon's last question about the job; nullopt when it has not
  /// answered (yet: a node cut off from slurmctld too never hears), or the daemon does not run
  /// in a Slurm job.
  std::optional<FirstNodeLossFacts> slurmctld_said;
  /// The controller is the one the job started with on its batch host (not one that took the
  /// job over on another node: only the batch host's loss has a takeover).
  bool controller_on_batch_host = true;
  /// How long the controller's host has answered nothing.
  double silent_seconds = 0.0;
  /// How long the daemon keeps its ranks for a batch host that slurmctld has not set DOWN
  /// (takeover_grace_seconds).
  double grace_seconds = 0.0;
};

/// Whether the daemon keeps its ranks running for a takeover, and why, in words for its log.
struct SilentControllerVerdict {
  bool keep_ranks = false;
  std::string why;
};

/// keep_ranks while a takeover may still come: slurmctld answered, the job is a RUNNING batch
/// job with a batch host, and that host is DOWN (the takeover's own condition follows: Slurm
/// takes it out of the job), or is not DOWN yet and the host has been silent for less than the
/// grace (slurmctld finds a silent node DOWN only after SlurmdTimeout). Otherwise the ranks
/// end, saying why: no answer from slurmctld (this node is cut off from it too), the job not
/// RUNNING or unknown (gone, ending, requeued), no batch job or host, a controller that took
/// the job over, or the grace passed with the batch host not DOWN (slurmctld hears from it:
/// only this node cannot reach it).
[[nodiscard]] SilentControllerVerdict keep_ranks_for_takeover(const SilentControllerFacts& facts);

/// The grace of keep_ranks_for_takeover: `configured` when given (bellowsd --takeover-grace,
/// BELLOWS_TAKEOVER_GRACE), else one and a half times Slurm's SlurmdTimeout: slurmctld sets a
/// node DOWN once it has not answered for SlurmdTimeout, and notices at its pings, every
/// third of it, so within 4/3 of it after its death. An unknown or not positive SlurmdTimeout
/// counts as Slurm's default, 300 s (450 s of grace); a configured grace below 0 counts as 0.
[[nodiscard]] double takeover_grace_seconds(std::optional<double> configured, std::optional<double> slurmd_timeout_seconds);

/// What the controller that took a job over after its first node was lost knows of that
/// node's ranks and of the survivors.
struct TakeoverLossFacts {
  /// The node lost (the job's first node, out of the job) and the job ranks it held, as the
  /// job's record says (the first node holds the job's first rank, 0; none when that rank was
  /// lost before).
  std::string lost_node;
  std::vector<std::uint32_t> lost_node_ranks;
  /// The ranks the surviving daemons report as their own (each rank's last metrics report,
  /// sent again when its daemon came back).
  std::vector<std::uint32_t> survivor_ranks;
  /// Every surviving node's daemon is back and has reported its rank.
  bool every_survivor_reported = false;
  /// The takeover's window for the daemons to come back has passed: what is reported by then
  /// is all there will be.
  bool return_window_over = false;
  /// The loss was declared (or found to need no declaration) already.
  bool decided_already = false;
  /// The job's size already counts the lost node's ranks out (the takeover counted the job's
  /// ranks without them).
  bool size_counts_them_out = true;
};

enum class TakeoverLossAction {
  wait,     ///< survivors still to come back or to report their ranks
  declare,  ///< tell the survivors `ranks` are lost, as a failure of the new controller
  nothing,  ///< nothing to tell (decided already, no rank held, or every one renumbered)
};

/// What lost_ranks_after_takeover decided, with why in words for the controller's log.
struct TakeoverLossDeclaration {
  TakeoverLossAction action = TakeoverLossAction::wait;
  /// declare: the lost node's ranks no survivor reports as its own, ascending.
  std::vector<std::uint32_t> ranks;
  /// declare: whether the failure lowers the job's size by them (not when the size counts
  /// them out already: one loss lowers it once).
  bool lower_job_size = false;
  std::string why;
};

/// nothing once decided, or when the lost node held no rank; wait until every survivor has
/// reported its rank (or the return window is over); then declare the lost node's ranks that
/// no survivor reports as its own, or nothing when every one of them is (the survivors found
/// the loss through MPI and renumbered: the ranks are theirs now).
[[nodiscard]] TakeoverLossDeclaration lost_ranks_after_takeover(const TakeoverLossFacts& facts);

}  // namespace bellows::runtime
