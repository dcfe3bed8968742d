#pragma once
// What a bag's run does about lost peers (task_bag.hpp): waits bounded by the watch on every
// peer (PeerWatch), the duplicate communicator of one pass, the buffers of collectives a loss
// leaves pending (kept until the process exits), and the gather of what the survivors finished.
// Used by the driver thread only (MPI_THREAD_SERIALIZED).

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bellows/runtime/bag_rerun.hpp"
#include "peer_watch.hpp"

namespace bellows::runtime::bag {

using Clock = std::chrono::steady_clock;
// The driver's longest sleep while nothing happens (its workers wake it sooner).
constexpr auto kDriverNap = std::chrono::microseconds(50);
// After the first peer found lost, how long a rank keeps watching before it names the lost:
// ranks that died together are then named together (the runtime's kLossGrace too).
constexpr auto kLossGrace = std::chrono::milliseconds(100);
// How often the driver tests the watch on its peers while it runs.
constexpr auto kWatchInterval = std::chrono::milliseconds(1);

inline std::string seconds_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Communicators given up after a loss: messages of the abandoned pass may still arrive on
// them, and MPICH gives a freed communicator's context id to the next one created, where they
// would match its receives. Kept, unused, until the process exits.
inline std::vector<MPI_Comm>& abandoned_communicators() {
  static std::vector<MPI_Comm> kept;
  return kept;
}

// Buffers of collectives left pending after a loss (a pending collective may be neither freed
// nor cancelled, and may still read or write them): kept until the process exits.
template <typename Buffers>
void keep_until_exit(std::unique_ptr<Buffers> buffers) {
  static std::vector<std::unique_ptr<Buffers>> kept;
  kept.push_back(std::move(buffers));
}

// Every wait of a pass, bounded by the watch on its peers (a dead one fails its receive within
// milliseconds) and by the run's deadline. An MPI call that fails is taken as a sign of a loss;
// settle() then says who is lost, or throws when nobody is.
class Watched {
 public:
  Watched(MPI_Comm comm, int rank, int size, std::optional<Clock::time_point> deadline,
          double timeout_seconds)
      : watch_(comm, rank, size), deadline_(deadline), timeout_seconds_(timeout_seconds) {
    watch_.arm();
  }

  // Waits for `request`; false when a peer is lost or the request failed (the request is then
  // left alone: a pending collective may be neither freed nor cancelled).
  bool wait(MPI_Request& request, const char* call) {
    for (;;) {
      if (poll()) return false;
      int done = 0;
      if (!ok(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call)) return false;
      if (done) return true;
      check_deadline();
      std::this_thread::sleep_for(kDriverNap);
    }
  }
  // Waits for `request` like wait(), but trusts a completion over the watch: a peer that died
  // after sending its part leaves a result that is whole. The caller checks it (a collective
  // over a dead peer may also complete with garbage).
  bool finish(MPI_Request& request, const char* call) {
    for (;;) {
      int done = 0;
      if (!ok(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call)) return false;
      if (done) return true;
      if (poll()) return false;
      check_deadline();
      std::this_thread::sleep_for(kDriverNap);
    }
  }
  // Keeps `what` as the failure settle() reports when no peer is lost.
  void fail(const std::string& what) {
    if (failure_.empty()) {
      failure_ = what;
      failed_at_ = Clock::now();
    }
  }
  // True when `rc` is MPI_SUCCESS; otherwise the first failure is kept for settle().
  bool ok(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return true;
    if (failure_.empty()) {
      failure_ = std::string(call) + ": " + describe_mpi_error(rc);
      failed_at_ = Clock::now();
    }
    return false;
  }
  // True when a peer is known lost (found now or before).
  bool poll() {
    watch_.poll();
    last_poll_ = Clock::now();
    return !watch_.lost().empty();
  }
  // poll(), at most every kWatchInterval: the driver's loop turns far more often, and each
  // test of a receive drives MPI's progress engine.
  bool poll_now_and_then() {
    if (Clock::now() - last_poll_ < kWatchInterval) return !watch_.lost().empty();
    return poll();
  }
  void check_deadline() const {
    if (deadline_ && Clock::now() > *deadline_) {
      throw std::runtime_error("task bag: the run did not end within " + seconds_text(timeout_seconds_) +
                               " s (timeout_seconds)");
    }
  }
  // After a loss or a failed call: waits for the verdict on who is lost, as the runtime does
  // (wait_for_loss_verdict, peer_watch.hpp): kLossGrace after the first peer found lost, so
  // that ranks that died together are named together, and up to kLossVerdictLimit for a
  // failure that names nobody yet (the watch or the control plane's word may name the dead
  // late). Returns the lost (ranks of the watched communicator, ascending). Throws
  // std::runtime_error naming the call when no peer is lost within the limit.
  std::vector<int> settle() {
    const auto failed_at = failure_.empty() ? Clock::now() : failed_at_;
    if (wait_for_loss_verdict(watch_, failed_at, kLossGrace) != LossVerdict::report_lost) {
      throw std::runtime_error("task bag: " + failure_ + ", and no peer was found lost within " +
                               loss_verdict_limit_text() +
                               " (neither by this rank's watch nor by the control plane)");
    }
    noticed_at_ = failure_.empty() ? watch_.first_loss_at() : std::min(failed_at_, watch_.first_loss_at());
    return watch_.lost();
  }
  [[nodiscard]] Clock::time_point noticed_at() const noexcept { return noticed_at_; }

 private:
  PeerWatch watch_;
  std::optional<Clock::time_point> deadline_;
  double timeout_seconds_;
  std::string failure_;
  Clock::time_point failed_at_{};
  Clock::time_point noticed_at_{};
  Clock::time_point last_poll_{};
};

// A duplicate of a communicator for one pass, freed at its end; abandoned (never freed) after
// a loss.
class RunCommunicator {
 public:
  RunCommunicator() = default;
  ~RunCommunicator() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  RunCommunicator(const RunCommunicator&) = delete;
  RunCommunicator& operator=(const RunCommunicator&) = delete;
  // False when a peer was lost before the duplicate was made.
  bool duplicate(MPI_Comm comm, Watched& watched) {
    // A duplicate left unfinished may still write its handle: where it writes outlives the
    // call (a deque keeps each element in place as others are added).
    static std::deque<MPI_Comm> pending;
    pending.push_back(MPI_COMM_NULL);
    MPI_Request request = MPI_REQUEST_NULL;
    if (!watched.ok(MPI_Comm_idup(comm, &pending.back(), &request), "MPI_Comm_idup") ||
        !watched.wait(request, "MPI_Comm_idup")) {
      return false;  // the handle's place is left to MPI
    }
    comm_ = pending.back();
    pending.pop_back();
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    return true;
  }
  void abandon() {
    if (comm_ != MPI_COMM_NULL) abandoned_communicators().push_back(comm_);
    comm_ = MPI_COMM_NULL;
  }
  [[nodiscard]] MPI_Comm get() const noexcept { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

/// The ranges every survivor finished in run `run_number`, gathered over `comm` (`size`
/// ranks); nullopt when a peer was lost meanwhile (`watched` then names it), or when the
/// counts gathered cannot be (more bounds than a bag of `bag_tasks` allows). Throws
/// std::runtime_error, on every survivor alike, when they are not all recovering the same run.
[[nodiscard]] std::optional<std::vector<BagFinished>> gather_finished(
    MPI_Comm comm, int size, const BagFinishedRanges& finished, std::int64_t bag_tasks,
    std::int64_t run_number, Watched& watched);

}  // namespace bellows::runtime::bag
