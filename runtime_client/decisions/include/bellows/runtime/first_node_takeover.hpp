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
// Pure: the daemon reads the facts from slurmctld; this decides.

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

}  // namespace bellows::runtime
