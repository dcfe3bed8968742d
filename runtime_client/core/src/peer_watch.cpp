#include "peer_watch.hpp"

#include "cancelled_requests.hpp"
#include "proc_failed.hpp"

#include "bellows/runtime/loss_notices.hpp"

#include <algorithm>
#include <thread>

namespace bellows::runtime {
namespace {

/// Above the communication engine's data tags and the checkpoint's; no rank sends on it.
constexpr int kPeerWatchTag = 32200;

}  // namespace

std::string describe_mpi_error(int code) {
  int error_class = 0;
  MPI_Error_class(code, &error_class);
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  const std::string name = error_class == kProcFailedClass ? "MPIX_ERR_PROC_FAILED"
                                                            : "MPI error class";
  return name + " (" + std::to_string(error_class) + "): " + std::string(text, static_cast<std::size_t>(length));
}

ErrorsReturned::ErrorsReturned(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_get_errhandler(comm_, &saved_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

ErrorsReturned::~ErrorsReturned() {
  MPI_Comm_set_errhandler(comm_, saved_);
  MPI_Errhandler_free(&saved_);
}

PeerWatch::PeerWatch(MPI_Comm comm, int rank, int size, ControlPlaneWord word)
    : comm_(comm),
      rank_(rank),
      word_(word),
      requests_(static_cast<std::size_t>(size), MPI_REQUEST_NULL),
      lost_flags_(static_cast<std::size_t>(size), 0) {}

PeerWatch::~PeerWatch() { disarm(); }

void PeerWatch::arm() {
  for (std::size_t r = 0; r < requests_.size(); ++r) {
    if (static_cast<int>(r) == rank_ || lost_flags_[r] || requests_[r] != MPI_REQUEST_NULL) continue;
    const int rc = MPI_Irecv(&sink_, 1, MPI_CHAR, static_cast<int>(r), kPeerWatchTag, comm_, &requests_[r]);
    if (rc != MPI_SUCCESS) requests_[r] = MPI_REQUEST_NULL;  // poll() posts nothing: a later arm() retries
  }
}

bool PeerWatch::poll() {
  bool found = false;
  for (std::size_t r = 0; r < requests_.size(); ++r) {
    if (requests_[r] == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Status status{};
    const int rc = MPI_Test(&requests_[r], &done, &status);
    if (rc == MPI_SUCCESS && !done) continue;
    // An error, or (never expected: nobody sends on this tag) a message.
    const int code = rc != MPI_SUCCESS ? rc : status.MPI_ERROR;
    requests_[r] = MPI_REQUEST_NULL;
    mark_lost(r, code == MPI_SUCCESS ? std::string("a message on the watch tag") : describe_mpi_error(code));
    found = true;
  }
  if (word_ == ControlPlaneWord::heeded) {
    for (const int told : loss_notices().ranks_lost(static_cast<int>(requests_.size()))) {
      const auto r = static_cast<std::size_t>(told);
      if (told == rank_ || lost_flags_[r]) continue;
      // Its receive never fails (the peer is silent, not dead to MPI): nobody sends on the
      // tag, so cancelling it completes it at once.
      if (requests_[r] != MPI_REQUEST_NULL) (void)cancel_request(requests_[r]);
      mark_lost(r, "named lost by the control plane (" + loss_notices().which_failure(told) + ")");
      found = true;
    }
  }
  return found;
}

void PeerWatch::mark_lost(std::size_t r, const std::string& why) {
  lost_flags_[r] = 1;
  lost_.insert(std::upper_bound(lost_.begin(), lost_.end(), static_cast<int>(r)), static_cast<int>(r));
  if (first_failure_.empty()) {
    first_failure_ = "rank " + std::to_string(r) + ": " + why;
    first_loss_at_ = std::chrono::steady_clock::now();
  }
}

void PeerWatch::disarm() {
  // Nobody sends on the tag: every receive cancels at once, and none writes into the sink.
  (void)cancel_requests(requests_);
}

LossVerdict wait_for_loss_verdict(PeerWatch& watch, std::chrono::steady_clock::time_point failed_at,
                                  std::chrono::milliseconds grace) {
  LossVerdictLimits limits;
  limits.grace_seconds = std::chrono::duration<double>(grace).count();
  limits.verdict_seconds = std::chrono::duration<double>(kLossVerdictLimit).count();
  for (;;) {
    watch.poll();
    const auto now = std::chrono::steady_clock::now();
    LossVerdictFacts facts;
    facts.peer_found_lost = !watch.lost().empty();
    facts.seconds_since_first_loss =
        facts.peer_found_lost ? std::chrono::duration<double>(now - watch.first_loss_at()).count() : 0.0;
    facts.seconds_since_failure = std::chrono::duration<double>(now - failed_at).count();
    const LossVerdict verdict = decide_loss_verdict(facts, limits);
    if (verdict != LossVerdict::wait) return verdict;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::string loss_verdict_limit_text() { return std::to_string(kLossVerdictLimit.count()) + " s"; }

WatchedCompletion complete_watched(int posted, MPI_Request& request, PeerWatch& watch,
                                   std::chrono::milliseconds grace) {
  std::chrono::steady_clock::time_point give_up{};
  for (;;) {
    int done = 0;
    const int rc = posted != MPI_SUCCESS ? posted : MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && done) return {true, MPI_SUCCESS, {}};
    watch.poll();
    const auto now = std::chrono::steady_clock::now();
    if (rc != MPI_SUCCESS) {
      (void)wait_for_loss_verdict(watch, now, grace);
      return {false, rc, watch.lost()};
    }
    if (!watch.lost().empty()) {
      if (give_up == std::chrono::steady_clock::time_point{}) give_up = now + grace;
      if (now >= give_up) return {false, MPI_SUCCESS, watch.lost()};
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace bellows::runtime
