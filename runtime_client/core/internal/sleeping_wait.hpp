#pragma once
// Waiting for a nonblocking MPI operation without spinning: MPICH ch3's blocking calls
// poll without pause, which starves other processes that share the cores.

#include <mpi.h>

#include <chrono>
#include <thread>

namespace bellows::runtime {

/// Tests `request` until it completes, calling pause() between tests. Returns the first
/// error code MPI_Test returns, else MPI_SUCCESS.
template <typename Pause>
int wait_sleeping(MPI_Request& request, Pause&& pause) {
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    pause();
  }
}

/// Tests `request` until it completes, sleeping `pause` between tests: how the runtime
/// waits in collectives between iterations, where ranks arrive at different times.
inline int wait_asleep(MPI_Request& request,
                       std::chrono::microseconds pause = std::chrono::microseconds(100)) {
  return wait_sleeping(request, [pause] { std::this_thread::sleep_for(pause); });
}

/// Tests every request until all complete, sleeping `pause` between rounds.
inline int wait_all_asleep(MPI_Request* requests, int count,
                           std::chrono::microseconds pause = std::chrono::microseconds(100)) {
  for (;;) {
    int done = 0;
    const int rc = MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace bellows::runtime
