#pragma once
// The runtime's setup on a communicator that an expand or a shrink made, watched for lost
// members: the steps of expand_onto() on the ranks from before the expand, of a new rank's
// Runtime constructor (attach) and join_expansion(), and of the survivors' first checkpoint
// under a shrink (attach_shrunk_checkpointed). Each collective is completed asleep under a PeerWatch
// (armed, errors returned), and a member lost gives the setup up: its lost ranks are returned,
// or thrown as MembersLost from a step that cannot return them (a constructor). A collective
// given up is left to MPI (a nonblocking collective's request can be neither cancelled nor
// freed), which may still write into its buffers: those are then kept until the process exits.

#include <mpi.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "peer_watch.hpp"

namespace bellows::runtime {

/// How long a watched setup collective still pending when the watch found a member lost is
/// given to complete after all, and how long after the first member found lost a failed one
/// waits for others (one that failed with none found waits for a verdict, kLossVerdictLimit).
inline constexpr auto kSetupLossGrace = std::chrono::milliseconds(100);

/// Members of the communicator lost during a watched setup step that cannot return them.
class MembersLost : public std::runtime_error {
 public:
  /// `lost`: the members lost, ascending; `step`: the step that found them ("the same-host
  /// probe's MPI_Ibcast").
  MembersLost(std::vector<int> lost, const std::string& step);
  [[nodiscard]] const std::vector<int>& lost() const noexcept { return lost_; }

 private:
  std::vector<int> lost_;
};

/// Completes `request`, which `call` posted with result `posted`, asleep while `watch` (armed)
/// watches every member. Returns the members lost (empty: it completed); throws
/// std::runtime_error naming `call` when it failed and no member was found lost within
/// kLossVerdictLimit (peer_watch.hpp); kSetupLossGrace is the wait after the first one found.
/// `stretch` begins that error's text ("runtime setup: MPI_Ibcast failed (...) and no member
/// was found lost").
std::vector<int> completed_watched(int posted, MPI_Request& request, PeerWatch& watch, const char* call,
                                   const char* stretch = "runtime setup: ");

/// A duplicate of a communicator made in a watched stretch: `comm` is the duplicate, or
/// MPI_COMM_NULL when members were lost (`lost`, ascending).
struct WatchedDuplicate {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<int> lost;
};

/// Duplicates `comm` (MPI_Comm_idup, completed_watched under `watch`) and gives the duplicate
/// `handler`, the error handler `comm` had before the stretch set errors to return on it (as a
/// duplicate made outside the stretch would have); `handler` is freed either way. A duplicate
/// still pending when a member was found lost is left to MPI: it holds the dead. `stretch` as
/// for completed_watched.
WatchedDuplicate duplicate_watched(MPI_Comm comm, MPI_Errhandler handler, PeerWatch& watch,
                                   const char* stretch = "runtime setup: ");

/// The watched stretch of a setup on `comm`, held while it lives: MPI_COMM_WORLD and `comm`
/// return errors (ErrorsReturned), a PeerWatch over `comm`'s members is armed, and `comm` is
/// duplicated under it (duplicate_watched: the duplicate takes the handler `comm` had before
/// the stretch), the duplicate returning errors too. Its end undoes them on every path, in
/// reverse order: the duplicate's handler (unless restore_duplicate_errhandler() did before),
/// the watch's receives cancelled, `comm`'s handler, MPI_COMM_WORLD's. Freeing the duplicate
/// is the caller's.
class WatchedSetup {
 public:
  /// `word` as for PeerWatch (ignored on a communicator not numbered as the job is), `stretch`
  /// as for completed_watched. Throws as duplicate_watched does, with the stretch undone.
  explicit WatchedSetup(MPI_Comm comm, ControlPlaneWord word = ControlPlaneWord::heeded,
                        const char* stretch = "runtime setup: ");
  WatchedSetup(const WatchedSetup&) = delete;
  WatchedSetup& operator=(const WatchedSetup&) = delete;

  /// The members lost while `comm` was duplicated, ascending; empty: duplicate() holds it.
  [[nodiscard]] const std::vector<int>& lost_in_duplicate() const noexcept { return duplicate_.lost; }
  /// The duplicate (MPI_COMM_NULL when members were lost), returning errors until
  /// restore_duplicate_errhandler() or the stretch's end.
  [[nodiscard]] MPI_Comm duplicate() const noexcept { return duplicate_.comm; }
  /// The armed watch over `comm`'s members, for every collective of the setup.
  [[nodiscard]] PeerWatch& watch() noexcept { return watch_; }
  /// Gives the duplicate its own handler back now: a setup given up does before it frees it.
  void restore_duplicate_errhandler() noexcept { duplicate_errors_returned_.reset(); }

 private:
  WatchedSetup(MPI_Comm comm, MPI_Errhandler handler, ControlPlaneWord word, const char* stretch);

  ErrorsReturned world_errors_returned_;
  ErrorsReturned errors_returned_;
  PeerWatch watch_;
  WatchedDuplicate duplicate_;
  std::optional<ErrorsReturned> duplicate_errors_returned_;
};

/// Keeps the buffers of a collective given up until the process exits (see the top).
template <typename Buffers>
void keep_until_exit(std::unique_ptr<Buffers> buffers) {
  static std::vector<std::unique_ptr<Buffers>> kept;
  kept.push_back(std::move(buffers));
}

}  // namespace bellows::runtime
