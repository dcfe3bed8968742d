#pragma once
// Noticing peers that died, from MPI alone: one zero-byte receive from every peer, on a tag no
// rank ever sends on, posted for the length of an iteration. Under MPICH 4.0.2 ch3 with every
// rank an MPI world of its own (docs/recovery.md, "When a rank dies: what MPICH lets the
// survivors do"), a receive from a SIGKILLed peer fails within milliseconds with
// MPIX_ERR_PROC_FAILED, whether it was posted before the death or after, while the receives
// from live peers stay pending and are cancelled at once at the end. A peer that is alive but
// silent (stopped, its network cut) fails nothing: noticing it is the control plane's task,
// whose word (LossNotices, loss_notices.hpp) a watch on the job's communicator heeds when
// polled: a rank the control plane names lost is lost here too, as if its receive had failed.
//
// Not thread-safe: used by one thread at a time (the application's between iterations, the
// communication thread during one), which is what MPI_THREAD_SERIALIZED asks.

#include <mpi.h>

#include "bellows/runtime/loss_verdict.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace bellows::runtime {

/// Whether a watch's communicator is numbered as the job is (the control plane's notices name
/// its ranks) or otherwise (the survivors' communicator during a recovery, before the job's
/// numbering follows it).
enum class ControlPlaneWord {
  heeded,   ///< the communicator is the job's: notices of lost ranks count as losses
  ignored,  ///< another numbering: only MPI's errors count
};

class PeerWatch {
 public:
  /// `comm` must return errors (ErrorsReturned) while the watch is armed.
  PeerWatch(MPI_Comm comm, int rank, int size, ControlPlaneWord word = ControlPlaneWord::heeded);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// Posts the receive from every peer not yet known lost (nothing when already armed).
  void arm();
  /// Tests the receives and reads the control plane's notices (when heeded); true when a peer
  /// was found lost by this call.
  bool poll();
  /// Cancels the receives still pending (those from live peers).
  void disarm();
  /// Peers found lost since construction, in rank order.
  [[nodiscard]] const std::vector<int>& lost() const noexcept { return lost_; }
  /// The first failure's text, e.g. "rank 2: MPIX_ERR_PROC_FAILED (101): ..." or "rank 2:
  /// named lost by the control plane (failure 3)".
  [[nodiscard]] const std::string& first_failure() const noexcept { return first_failure_; }
  /// When the first peer was found lost (the epoch when none was).
  [[nodiscard]] std::chrono::steady_clock::time_point first_loss_at() const noexcept {
    return first_loss_at_;
  }

 private:
  void mark_lost(std::size_t r, const std::string& why);

  MPI_Comm comm_;
  int rank_;
  ControlPlaneWord word_;
  std::vector<MPI_Request> requests_;  ///< per rank; MPI_REQUEST_NULL: none posted
  std::vector<char> lost_flags_;       ///< per rank
  std::vector<int> lost_;
  std::string first_failure_;
  std::chrono::steady_clock::time_point first_loss_at_{};
  char sink_ = 0;  ///< what a receive would write (nobody sends)
};

/// Holds a communicator's error handler at MPI_ERRORS_RETURN while it lives (an iteration),
/// and puts the one it had back after. The runtime holds its own communicator so, and also
/// MPI_COMM_WORLD: MPICH 4.0.2 raises the errors of calls that complete several requests at
/// once (MPI_Testsome, MPI_Testall) on MPI_COMM_WORLD's handler, not on the requests'
/// communicator, so a transfer with a dead peer would otherwise abort the rank. Between
/// iterations an MPI error ends the rank as before.
class ErrorsReturned {
 public:
  explicit ErrorsReturned(MPI_Comm comm);
  ~ErrorsReturned();
  ErrorsReturned(const ErrorsReturned&) = delete;
  ErrorsReturned& operator=(const ErrorsReturned&) = delete;

 private:
  MPI_Comm comm_;
  MPI_Errhandler saved_ = MPI_ERRHANDLER_NULL;
};

/// How long an MPI failure that names no lost peer waits for the watch or the control plane
/// to name one (loss_verdict.hpp): the controller's default heartbeat timeout (5 s) and as
/// long again. A survivor that learnt of a death from a failed collective may find the dead
/// rank only through the control plane's word, which comes late on a loaded host.
inline constexpr std::chrono::seconds kLossVerdictLimit{10};

/// Polls `watch` (and through it the control plane's word) every millisecond until
/// decide_loss_verdict() says report_lost (`grace` after the first peer found lost) or
/// unexplained (kLossVerdictLimit after `failed_at` with none found).
[[nodiscard]] LossVerdict wait_for_loss_verdict(PeerWatch& watch, std::chrono::steady_clock::time_point failed_at,
                                                std::chrono::milliseconds grace);

/// kLossVerdictLimit as error texts name it: "10 s".
[[nodiscard]] std::string loss_verdict_limit_text();

/// How a collective waited on under a PeerWatch ended (complete_watched).
struct WatchedCompletion {
  bool completed = false;   ///< it completed: its result stands on every rank that got it
  int failed_code = MPI_SUCCESS;  ///< MPI's error when it failed (MPI_SUCCESS otherwise)
  std::vector<int> lost;    ///< the peers the watch found lost when it did not complete
};

/// Completes `request`, which a collective posted with result `posted`, without spinning while
/// `watch` (armed) watches every peer. Not completed when it failed (then the watch is waited
/// on for a verdict, wait_for_loss_verdict; none named within kLossVerdictLimit leaves `lost`
/// empty with `failed_code` set), or
/// when it was still pending `grace` after the watch found a peer lost (the request, if
/// pending, is left to MPI). Each caller says what a failure with no peer lost means.
[[nodiscard]] WatchedCompletion complete_watched(int posted, MPI_Request& request, PeerWatch& watch,
                                                 std::chrono::milliseconds grace);

/// "MPIX_ERR_PROC_FAILED (101): <MPI_Error_string>" for an MPI error code.
[[nodiscard]] std::string describe_mpi_error(int code);

}  // namespace bellows::runtime
