#pragma once
// Carrying on without the dead: the survivors of the job's communicator build a communicator of
// their own once they know who is gone (from the control plane, or from MPI errors: the runtime's
// IterationReport::lost_ranks), after agree_on_lost() has settled them on one set. Written for and tested on MPICH 4.0.2 ch3:nemesis with hydra, where every rank
// is an MPI world of its own (docs/recovery.md, "When a rank dies: what MPICH lets the survivors
// do", has the measurements these rules come from):
//
// - A SIGKILLed peer's sockets close, and ch3 fails what involves it within milliseconds:
//   receives from it and collectives (blocking or not) on a communicator that contains it
//   return MPIX_ERR_PROC_FAILED. But a small send to it may complete as if delivered, a receive
//   from MPI_ANY_SOURCE never completes, and MPI_Allreduce may return MPI_SUCCESS with a wrong
//   result. So no collective of the old communicator is used here, only point-to-point messages
//   between survivors, which keep working on it.
// - A peer that is alive but silent (stopped, or its network cut) fails nothing: every call that
//   needs it waits forever. Hence the deadline, and nonblocking calls until every survivor has
//   answered.
// - MPI_Comm_create_group is collective over the survivors only and works on the old
//   communicator, the first rank dead included.
// - Afterwards MPI_Comm_free of the old communicator is local and returns at once; its
//   MPI_Comm_disconnect waits forever while a dead peer is silent rather than gone. A survivor's
//   MPI_Finalize waits until every peer it ever connected to is gone: make sure the dead are
//   killed (their node's daemon does) before the survivors finalize. A peer on a node cut
//   from the network can be killed but its sockets cannot close: rebuild_after_loss() shuts
//   the survivor's own connections to the nodes the control plane named lost down
//   (peer_connections.hpp), which ends them as a death would.

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace bellows::runtime {

/// Timings of one rebuild, as seen by the calling survivor.
struct RebuildReport {
  int old_size = 0;
  int old_rank = -1;
  int new_size = 0;
  int new_rank = -1;
  /// The survivors checking in with the first survivor and its go (point-to-point messages on
  /// the old communicator), from the call until this rank had the go.
  double check_in_seconds = 0.0;
  double create_seconds = 0.0;  ///< MPI_Comm_create_group over the survivors
  double total_seconds = 0.0;
  /// rebuild_after_loss(): the TCP sockets to nodes the control plane named lost that it
  /// shut down once the survivors had their communicator (shut_down_connections_to()).
  std::size_t connections_shut_down = 0;
};

/// The survivors' agreement on who is lost, for rebuild_without(): ranks that noticed the deaths
/// at different moments may hold different sets. Collective over the ranks of `job` that `seen`
/// and the deaths it finds leave alive, each passing the lost ranks it has seen (in any order)
/// and a deadline of its own. In rounds, each survivor sends its set to every rank it holds
/// alive and receives theirs (point-to-point on `job`, nonblocking, sleeping between tests); a
/// receive that fails (MPIX_ERR_PROC_FAILED: that peer died too) adds the peer. Every survivor
/// hears every other survivor's set, so all see alike whether the sets were all equal, with no
/// receive failed: then they stop with that set; otherwise each takes the union and goes
/// again. `job` must return errors (MPI_ERRORS_RETURN). Returns the agreed set, ascending; `rounds` receives the rounds it took (1 when all
/// agreed at once). The control plane's word (loss_notices.hpp) counts as seen, and a peer
/// that it or another survivor's set names lost is not waited for in a round (a silent peer,
/// stopped or cut off, never answers nor fails): it counts as failed. A rank that is alive but
/// named lost by another survivor is sent nothing and gives up at its deadline. Throws RebuildError when a survivor does not answer by the deadline (naming
/// it), or when the calling rank finds itself named lost; std::invalid_argument for a rank out
/// of range in `seen`.
[[nodiscard]] std::vector<int> agree_on_lost(MPI_Comm job, std::span<const int> seen,
                                             std::chrono::steady_clock::time_point deadline,
                                             int* rounds = nullptr);

/// Thrown by rebuild_without() when the survivors did not all check in before the deadline, or
/// when they named different dead sets. The old communicator is left to the caller, untouched.
class RebuildError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown by rebuild_without() when a survivor died during the rebuild itself: its check-in or
/// the first survivor's answer failed with a dead peer (MPIX_ERR_PROC_FAILED), or
/// MPI_Comm_create_group did. The old communicator is left to the caller, untouched, and every
/// survivor that is told of it (the first survivor tells those that checked in or were about
/// to) may agree again, which finds the new loss, and rebuild without the larger set:
/// rebuild_after_loss() does.
class LostDuringRebuild : public RebuildError {
 public:
  using RebuildError::RebuildError;
};

/// The survivors' communicator: `job` without the ranks in `dead`, the survivors in their old
/// order (the first survivor is rank 0). Collective over the survivors, each passing the same
/// dead set (in any order) and a deadline of its own; the dead take no part.
///
/// Order of events: the dead set is checked (survivors_without; std::invalid_argument on a bad
/// set, or when the calling rank is in it); each survivor sends the dead set it holds to the
/// first survivor, which answers every survivor with a go once all have checked in with the
/// same set (nonblocking calls, sleeping between tests, so that a survivor never waits past its
/// deadline); then MPI_Comm_create_group over the survivors, a barrier over the new
/// communicator while each member is watched (a zero-byte receive from each), and
/// MPI_Comm_free of `job`.
///
/// On success `job` is consumed (freed, never disconnected: see above) and the caller owns the
/// result, which carries MPI_ERRORS_ARE_FATAL. Never disconnect another communicator that
/// contains a dead rank, and cancel receives still posted on it, those from MPI_ANY_SOURCE above
/// all. Free it only when no message can still be on its way on it: a freed communicator's
/// context id may be given to the next one created, where such a message would match its
/// receives. Runtime::recover() therefore keeps its duplicate, unused, until the process exits.
///
/// Throws RebuildError, with `job` untouched, when the deadline passes before the go (the text
/// names the survivors that did not check in) or when a survivor named another dead set (both
/// sets named); the first survivor tells the survivors that checked in, so that they fail at
/// once instead of at their deadline. Throws LostDuringRebuild, with `job` untouched, when a
/// survivor died during the rebuild. Throws MpiError when another MPI call fails. Once a
/// survivor has the go it enters MPI_Comm_create_group, which is blocking: a survivor that
/// gives up at its deadline in the instant the go is sent can leave the others waiting there;
/// treat a RebuildError other than LostDuringRebuild on any survivor as the end of the job.
[[nodiscard]] MPI_Comm rebuild_without(MPI_Comm job, std::span<const int> dead,
                                       std::chrono::steady_clock::time_point deadline,
                                       RebuildReport* report = nullptr);

/// What the survivors of a loss do before Runtime::recover(): agree_on_lost() from the lost
/// ranks this rank has seen (`seen`, e.g. IterationReport::lost_ranks), then rebuild_without()
/// the agreed set; when a survivor dies during the rebuild (LostDuringRebuild) they agree
/// again, which adds it, and rebuild without the larger set, until they have their
/// communicator or one of the calls throws. One deadline for all of it. `lost` receives the set
/// the communicator was rebuilt without (old ranks of `job`, ascending), `attempts` the
/// rebuilds tried (1 without a second loss). Unlike rebuild_without(), `job` is left to the
/// caller, not freed: when Runtime::recover() then finds more survivors lost
/// (LostDuringRecovery), every survivor calls this again on the same `job` with `lost` and
/// the newly lost (LostDuringRecovery::lost_ranks), so that those who had the new
/// communicator and those whose rebuild failed meet on one communicator. Free `job` (never
/// disconnect it) once recover() succeeded; leave the abandoned survivors' communicators
/// unfreed. Throws what agree_on_lost() and rebuild_without() throw, RebuildError when the
/// deadline passes between tries.
[[nodiscard]] MPI_Comm rebuild_after_loss(MPI_Comm job, std::span<const int> seen,
                                          std::chrono::steady_clock::time_point deadline,
                                          std::vector<int>& lost, int* attempts = nullptr,
                                          RebuildReport* report = nullptr);

}  // namespace bellows::runtime
