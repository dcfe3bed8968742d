#pragma once
// MPICH's error class for an operation that needed a dead process.

#include <mpi.h>

namespace bellows::runtime {

/// MPICH's MPIX_ERR_PROC_FAILED (4.0.2 defines it as 101; mpi.h does not name it without
/// MPIX's fault-tolerance extensions).
inline constexpr int kProcFailedClass = 101;

/// True when `rc`, an MPI return code, says the operation needed a process that died.
inline bool peer_failed(int rc) {
  int error_class = 0;
  MPI_Error_class(rc, &error_class);
  return error_class == kProcFailedClass;
}

}  // namespace bellows::runtime
