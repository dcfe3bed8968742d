#pragma once
// A communicator's numbers as values, for initialising members and constants.

#include <mpi.h>

namespace bellows::runtime {

/// This process's rank in `comm`.
inline int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

/// How many processes `comm` holds.
inline int size_of(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

}  // namespace bellows::runtime
