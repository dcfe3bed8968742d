#pragma once
// The controller's bookkeeping of PMIx fences across the job's nodes: which nodes must
// contribute, which fence is complete, and what a lost rank or node does to each fence still
// waiting. A decision unit: values in, messages to send out; no I/O, threads or clock.
//
// A fence is known by its participant set (as the clients gave it to PMIx_Fence: namespaces
// with ranks, or with the wildcard for all of a namespace's ranks). Each daemon contributes once
// its local participants entered the fence (FenceContribution), saying which participants it
// hosts. The fence is complete when the contributions cover every participant; then every
// contributing node gets the blobs of all contributions (or none, without PMIX_COLLECT_DATA).
// Several fences may be in flight: different participant sets apart, and for one set in order
// (a node's n-th contribution to a set belongs to the set's n-th fence), as PRRTE matches them.
//
// A loss ends a fence with participant_lost when a participant it still waits for is lost: a
// lost rank of the job's namespace, a participant that an earlier contribution placed on a lost
// node, or, while a participant's node is unknown (it never contributed), a lost node that has
// not contributed to the fence. Lost nodes are remembered until they contribute again, so that a
// fence entered after the loss fails at once rather than waiting for them.
//
// The job's ranks need not be 0..n-1: a PMIx rank number that left is not given again, so after
// a shrink and a grow the job may be ranks 0, 1 and 4. Once told the job's ranks (job_changed),
// the book reads the wildcard of the job's namespace as those ranks, not as 0..size-1, refuses a
// fence that names a rank that left, and ends a fence still waiting for one when it leaves.
// Until then, and for another namespace, the wildcard means 0..size-1 of the namespace size the
// contributions give.

#include <bellows/protocol/messages.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace bellows::controller {

/// A FenceRelease for the daemon of `node`.
struct FenceReleaseFor {
  std::string node;
  protocol::FenceRelease release;
  bool operator==(const FenceReleaseFor&) const = default;
};

/// Thread safety: none; one thread (the controller's loop) uses it.
class FenceBook {
 public:
  /// `job_nspace`: the namespace whose ranks RanksLost names (the job's).
  explicit FenceBook(std::string job_nspace);

  /// Takes `node`'s contribution; returns the releases to send now: none while the fence waits,
  /// one per contributing node once it is complete or doomed, or the contributor's alone when
  /// its contribution is refused (it names the fence's participants with other namespace sizes
  /// or another PMIX_COLLECT_DATA than an earlier contribution, or hosts none of them).
  std::vector<FenceReleaseFor> contribute(const std::string& node, const protocol::FenceContribution& contribution);

  /// Ranks of the job's namespace and nodes are lost (RanksLost, `reason` its text): the fences
  /// that still wait for one of them end; returns their releases (to nodes not lost).
  std::vector<FenceReleaseFor> lost(const std::vector<std::uint32_t>& lost_ranks,
                                    const std::vector<std::string>& lost_nodes, const std::string& reason);

  /// The job's ranks are now `ranks` (the committed ones: what the wildcard of the job's
  /// namespace means from now on), and the numbers `departed` left it for good. Fences begun
  /// before keep their participants, but those still waiting for a departed rank end with
  /// participant_lost; returns their releases.
  std::vector<FenceReleaseFor> job_changed(const std::vector<std::uint32_t>& ranks,
                                           const std::vector<std::uint32_t>& departed);

  /// Fences waiting for contributions.
  [[nodiscard]] std::size_t pending() const;
  /// The participants pending fence `index` (in the order they began) still waits for, as
  /// "nspace:rank" (for tests and logs).
  [[nodiscard]] std::vector<std::string> waiting_for(std::size_t index) const;

 private:
  struct Member {
    std::string nspace;
    std::uint32_t rank = 0;
    auto operator<=>(const Member&) const = default;
  };
  struct Contribution {
    std::string node;
    std::uint64_t id = 0;
    std::string data;
  };
  struct Fence {
    std::uint64_t serial = 0;  ///< order of creation, for waiting_for()
    std::string participants;  ///< as text, for messages
    std::map<std::string, std::uint32_t> sizes;
    bool collect = false;
    std::set<Member> missing;
    std::vector<Contribution> contributions;
  };
  using Key = std::vector<std::pair<std::string, std::uint32_t>>;

  std::vector<FenceReleaseFor> finish(const Fence& fence, protocol::CollectiveStatus status,
                                      const std::string& text) const;
  /// Why the fence cannot complete any more (a participant it waits for is one of
  /// `lost_ranks` of the job's namespace, or on a lost node), or "" while it may.
  [[nodiscard]] std::string doomed(const Fence& fence, const std::set<std::uint32_t>& lost_ranks) const;
  void drop_empty_keys();
  /// The ranks a participant (nspace, rank) stands for: itself, or for the wildcard the job's
  /// ranks (job's namespace, once known) or 0..size-1.
  [[nodiscard]] std::vector<std::uint32_t> ranks_of(const std::string& nspace, std::uint32_t rank,
                                                    std::uint32_t size) const;

  std::string job_nspace_;
  std::map<Key, std::deque<Fence>> fences_;
  std::map<Member, std::string> hosts_;       ///< where contributions placed participants
  std::map<std::string, std::string> lost_nodes_;  ///< lost node -> the loss's reason
  std::uint64_t next_serial_ = 0;
  bool job_ranks_known_ = false;
  std::set<std::uint32_t> job_ranks_;     ///< the job's ranks now, once job_changed told them
  std::set<std::uint32_t> departed_;      ///< numbers of the job's namespace that left it
};

}  // namespace bellows::controller
