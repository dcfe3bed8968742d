#pragma once
// Waiting for a nonblocking MPI operation without spinning: MPICH ch3's blocking calls
// poll without pause, which starves other processes that share the cores.

#include <mpi.h>

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

}  // namespace bellows::runtime
