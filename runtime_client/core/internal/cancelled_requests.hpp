#pragma once
// Letting go of point-to-point requests nobody waits for any more (an abandoned iteration, an
// agreement or a rebuild past its deadline) without waiting on their peers. MPI_Cancel
// completes a receive that has not matched a message at once. One that has matched the
// announcement of a large message whose data has not all arrived cannot be cancelled: MPICH
// 4.0.2 ch3 completes it only when the data comes, and never when the sender died in between,
// so an MPI_Wait on it hangs for good. Such a request is freed after a grace instead, and its
// buffer must outlive it (until the process exits: MPI may still use it). A send is let go
// the same way (MPI_Cancel applies to it too).

#include <mpi.h>

#include <chrono>
#include <span>
#include <thread>
#include <vector>

namespace bellows::runtime {

/// How long cancelled requests are given to complete before those left are freed.
inline constexpr std::chrono::milliseconds kCancelGrace{20};

/// Cancels every request of `requests` (MPI_REQUEST_NULL entries are skipped) and waits at
/// most `grace` for them to complete. A request still pending then is freed. Every entry is
/// MPI_REQUEST_NULL after the call; the result is 1 for each request that was freed still
/// pending, whose buffer the caller must keep until the process exits.
inline std::vector<char> cancel_requests(std::span<MPI_Request> requests,
                                         std::chrono::milliseconds grace = kCancelGrace) {
  std::vector<char> freed_pending(requests.size(), 0);
  for (MPI_Request& request : requests) {
    if (request != MPI_REQUEST_NULL) MPI_Cancel(&request);
  }
  const auto give_up = std::chrono::steady_clock::now() + grace;
  for (;;) {
    bool open = false;
    for (MPI_Request& request : requests) {
      if (request == MPI_REQUEST_NULL) continue;
      int done = 0;
      // An error completes the request too (a receive from a dead peer): MPI freed it.
      if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) {
        request = MPI_REQUEST_NULL;
      } else {
        open = true;
      }
    }
    if (!open || std::chrono::steady_clock::now() >= give_up) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    MPI_Request_free(&requests[i]);
    freed_pending[i] = 1;
  }
  return freed_pending;
}

/// One request: true when it was freed still pending (keep its buffer until exit).
inline bool cancel_request(MPI_Request& request, std::chrono::milliseconds grace = kCancelGrace) {
  return cancel_requests(std::span<MPI_Request>(&request, 1), grace).front() != 0;
}

}  // namespace bellows::runtime
