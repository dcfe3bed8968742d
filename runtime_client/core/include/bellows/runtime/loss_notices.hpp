#pragma once
// Ranks the control plane says are lost (a RanksLostEvent: the controller stopped hearing from
// their node, or the daemon saw their process end), handed to the runtime so that it treats
// them as lost exactly as if MPI had reported them (PeerWatch, agree_on_lost). A rank that is
// alive but silent (stopped, its node cut from the network) fails no MPI call, so without this
// word the survivors would wait for it for ever.
//
// Numbering: a notice names the job's ranks as of its failure, which are the ranks of the
// job's communicator until the survivors rebuild it. A rebuild (rebuild_after_loss) renumbers
// the notices told before it: the ranks it left out are dropped, the others take their numbers
// among the survivors, and a notice left naming nobody is settled. A notice told later whose
// failure id is not above the highest one settled is ignored. So is one that comes after a
// rebuild that no notice led to (MPI found the loss first, as it does for a rank that died)
// and that names only ranks that rebuild left out: it is that loss, told late, and settles
// that rebuild. A shrink renumbers the notices pending across it the same way
// (renumber_at_shrink), so that they name the ranks of the shrunk communicator.
//
// Thread safety: every method may be called from any thread (tell() runs on PMIx's event
// thread, the others on the thread that drives MPI).

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace bellows::runtime {

class LossNotices {
 public:
  /// One failure the control plane reported.
  struct Notice {
    std::uint64_t failure_id = 0;
    std::vector<int> ranks;  ///< job ranks as of the failure
  };

  /// Takes the control plane's word that `ranks` are lost (failure `failure_id`). Ignored when
  /// that failure is settled already, or when it names only ranks that the oldest rebuild no
  /// notice led to left out (then it settles that rebuild and its failure id). Throws
  /// std::invalid_argument for a negative rank.
  void tell(std::uint64_t failure_id, std::vector<int> ranks);
  /// Records the nodes (host names) a notice named, whatever became of the notice: the
  /// survivors shut their connections to those hosts down once they rebuilt without them
  /// (peer_connections.hpp). Empty names are skipped.
  void tell_nodes(const std::vector<std::string>& nodes);
  /// Every node a notice has named since the start (or clear()), sorted, without repeats.
  [[nodiscard]] std::vector<std::string> nodes_lost() const;
  /// The ranks below `size` that unsettled notices name, ascending and without repeats.
  [[nodiscard]] std::vector<int> ranks_lost(int size) const;
  /// "failure 4" for the first unsettled notice naming `rank` ("" when none does).
  [[nodiscard]] std::string which_failure(int rank) const;
  /// The survivors rebuilt the job's communicator without `left_out` (old ranks): each notice
  /// drops those ranks and renumbers the rest as the survivors' communicator numbers them; a
  /// notice left empty is settled (a later notice of a failure id up to the highest settled
  /// is ignored). When no notice named a rank of `left_out`, the rebuild is remembered until
  /// a notice of its loss comes (see tell()).
  void renumber_without(const std::vector<int>& left_out);
  /// The job shrank without `leaving` (ranks before the shrink), which left on purpose: each
  /// notice drops them and renumbers the rest as the shrunk communicator numbers them, as a
  /// rebuild does; a notice left empty is settled. Unlike a rebuild, a shrink is no loss: it
  /// is not remembered as one that a later notice could name. Throws std::invalid_argument
  /// for a negative rank.
  void renumber_at_shrink(const std::vector<int>& leaving);
  /// Failures up to `failure_id` are handled (e.g. the job reported them recovered).
  void settle_through(std::uint64_t failure_id);
  /// The highest failure id settled (0: none).
  [[nodiscard]] std::uint64_t settled_through() const;
  /// Drops every notice and forgets what was settled (tests).
  void clear();

 private:
  mutable std::mutex mutex_;
  std::vector<Notice> notices_;
  std::uint64_t settled_through_ = 0;
  /// Rebuilds no notice led to, oldest first: the ranks each left out (its numbering).
  std::vector<std::vector<int>> unexplained_rebuilds_;
  std::vector<std::string> nodes_lost_;

  /// Drops `gone` (sorted) from every notice and renumbers the rest; settles the notices left
  /// empty. Returns whether a notice named a rank of `gone`. Called with mutex_ held.
  bool drop_and_renumber(const std::vector<int>& gone);
};

/// The process's notices: the control plane's channel tells them, every PeerWatch and
/// agree_on_lost on the job's communicator reads them.
[[nodiscard]] LossNotices& loss_notices();

}  // namespace bellows::runtime
