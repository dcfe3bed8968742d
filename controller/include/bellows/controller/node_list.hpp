#pragma once
// Node lists as a batch system writes them, and the node bookkeeping of a resize that needs
// no batch system: Slurm's hostlist syntax ("n[1-3,7],gpu05"), the plan of a release (which
// nodes stay, or which listed node is the first to refuse), and a job's nodes in allocation
// order. Pure functions, tested without Slurm; the Slurm backend builds on them.

#include "bellows/controller/resource_manager.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace bellows::controller {

/// Expands a Slurm hostlist into node names in the order written: "n[1-3,7],login" gives
/// n1 n2 n3 n7 login; zero padding is kept ("n[08-10]" gives n08 n09 n10). One bracket
/// group per name. An empty text gives no node. Throws std::invalid_argument naming the
/// problem ("hostlist 'n[3-1]': range 3-1 runs backwards").
[[nodiscard]] std::vector<std::string> expand_hostlist(std::string_view hostlist);

/// Writes node names as a Slurm hostlist: runs of names with the same prefix and the same
/// number width are folded into ranges ("n1 n2 n3 n7" gives "n[1-3,7]"), in the order of
/// first appearance. expand_hostlist(compress_hostlist(v)) == v when v holds no duplicates
/// and names of one prefix appear in increasing order.
[[nodiscard]] std::string compress_hostlist(const std::vector<std::string>& nodes);

/// The names joined with commas, for texts: "n3,n4".
[[nodiscard]] std::string join_nodes(const std::vector<std::string>& nodes);

/// What a release of `leaving` from a job holding `held` (its batch host `batch_host`)
/// comes to: status ok and the nodes that stay (in held's order), or the refusal that names
/// the first offending node in leaving's order: bad_request for an empty list, a node
/// listed twice or the batch host; not_owner for a node that exists but is not the job's;
/// unknown_node for a name not in `known` (every node of the cluster). Nothing changes on
/// a refusal (all or nothing).
struct ReleasePlan {
  RmStatus status;
  std::vector<std::string> remaining;
};
[[nodiscard]] ReleasePlan plan_release(const std::string& job, const std::vector<std::string>& held,
                                       const std::string& batch_host,
                                       const std::vector<std::string>& leaving,
                                       const std::vector<std::string>& known);

/// Which of `leaving` the batch system took out of the job itself as they failed: those not in
/// `held_now` (what the job and its running companions hold, as the batch system lists them
/// now) and in `failed` (down or not responding). Slurm does so to a node that goes DOWN in a
/// no-kill job of more than one node. A node missing from the job but healthy is not among
/// them: a release refuses it as not the job's. In `leaving`'s order.
[[nodiscard]] std::vector<std::string> taken_out_on_failure(const std::vector<std::string>& leaving,
                                                            const std::vector<std::string>& held_now,
                                                            const std::vector<std::string>& failed);

/// A job's nodes in allocation order: the batch host first, then the nodes it had before
/// any grant recorded in `granted` (in the batch system's order), then the granted nodes in
/// the order they were granted. `held` is the batch system's list (any order); `granted`
/// may name nodes the job no longer holds, which are left out.
[[nodiscard]] std::vector<std::string> allocation_order(const std::vector<std::string>& held,
                                                        const std::string& batch_host,
                                                        const std::vector<std::string>& granted);

}  // namespace bellows::controller
