#pragma once
// What a node's daemon does once its connection to the job's controller is lost.
//
// A daemon cannot tell a controller that died from its own node cut off from the network, but
// it can tell a controller's host that still answers from one that answers nothing:
//
//   - The host answers (a connection to the controller's port is refused, or accepted): the
//     controller's process is gone and the network is fine. The job runs on at its size, so
//     the node's ranks are kept while they run, and the daemon exits once they have ended.
//   - The host answers nothing (the connection times out, or there is no route to it): this
//     node is cut off, or the controller's host is gone. The controller, if it lives, lost
//     this node by the same heartbeats that closed the daemon's connection and told the
//     survivors; they recovered without this node's ranks, which compute for nobody and which
//     nothing else can stop while the node is cut off (under Slurm, slurmctld's kill of the
//     job's step there cannot reach the node either; it would only come with the node's
//     registration once the network is back). So after `unreachable_seconds` of that, the
//     daemon ends its ranks and exits. When it was the controller's host that died, the job
//     has lost its first node: under Slurm another node's daemon may take it over once
//     slurmctld sets that host DOWN, so while keep_ranks_for_takeover (first_node_takeover.hpp)
//     says a takeover may still come, the ranks are kept (kept_for_takeover).
//
// Every limit follows the job's recovery.heartbeat_timeout (controller_loss_limits): a job
// that finds a silent node lost after 2 s also ends that node's ranks a few seconds later,
// and the 5 s default keeps the limits it always had (2 s of grace, 5 s of silence, a probe
// a second).
//
// Pure: the daemon measures the times and probes the host; this decides.

#include <cstddef>

namespace bellows::runtime {

/// What the daemon does now.
enum class ControllerLossAction {
  wait,        ///< within the grace: a controller that comes back is no loss
  keep_ranks,  ///< the controller is gone but its host answers (or a takeover may come): serve the ranks
  end_ranks,   ///< the controller's host has answered nothing for too long: end them and exit
  stop,        ///< no rank of the node runs: exit
};

/// What the daemon knows of the loss.
struct ControllerLossFacts {
  /// Seconds since the connection to the controller was lost.
  double lost_seconds = 0.0;
  /// Seconds since the controller's host last answered (a refused connection counts as an
  /// answer), counted from the first probe that got none; 0 while it answers.
  double unreachable_seconds = 0.0;
  /// Ranks of the node that run (attached, or started by the daemon and not ended).
  std::size_t ranks_running = 0;
  /// The controller's host answers nothing, but a takeover of the job may still come
  /// (runtime::keep_ranks_for_takeover): the ranks are kept past the unreachable limit.
  bool kept_for_takeover = false;
};

/// The limits the daemon runs with.
struct ControllerLossLimits {
  /// How long the connection may be lost before the controller counts as gone.
  double grace_seconds = 2.0;
  /// How long the controller's host may answer nothing, once the controller counts as gone,
  /// before the node's ranks are ended. 0: never ended (the ranks run until they end).
  double unreachable_seconds = 5.0;
  /// How often the controller's host is probed, and how long one probe waits for an answer.
  double probe_interval_seconds = 1.0;
};

/// The limits of a daemon whose connection to its controller closes after
/// `heartbeat_timeout_seconds` of silence (the job's recovery.heartbeat_timeout, which the
/// daemon gets as --heartbeat-timeout): a grace of two heartbeat intervals (0.4 of the
/// timeout), a host silent for as long as the timeout itself, and a probe every heartbeat
/// interval (a fifth of the timeout), kept within 0.25 to 1 s (a connection within reach is
/// answered in well under 0.25 s; a probe a second is often enough for any timeout). At the
/// default 5 s: 2 s, 5 s and 1 s. A node cut off at time 0 then ends its ranks after about
/// 2.4 times the timeout (the timeout, the grace, the silence), plus up to a probe interval:
/// 12-13 s at 5 s, 5-5.5 s at 2 s. A timeout that is not positive gets the default's limits.
[[nodiscard]] ControllerLossLimits controller_loss_limits(double heartbeat_timeout_seconds) noexcept;

/// The action for `facts` under `limits` (see the file's comment).
[[nodiscard]] ControllerLossAction on_controller_loss(const ControllerLossFacts& facts,
                                                      const ControllerLossLimits& limits) noexcept;

/// "wait", "keep_ranks", "end_ranks" or "stop".
[[nodiscard]] const char* to_string(ControllerLossAction action) noexcept;

}  // namespace bellows::runtime
