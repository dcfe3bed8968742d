#pragma once
// The two versions of the METG benchmark's stencil (bench/metg.cpp): libbellows and
// hand-written MPI. Each runs one granularity point and says how long it took.

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "bellows/runtime/options.hpp"
#include "metg_stencil.hpp"

namespace bellows::bench {

/// What libbellows' statistics say about the measured repetitions of a point, summed over
/// ranks and repetitions (RankStats).
struct RuntimeCounters {
  double busy_seconds = 0.0;      ///< workers from taking a task to the end of its body
  double idle_seconds = 0.0;      ///< workers waiting for a ready task
  double comm_cpu_seconds = 0.0;  ///< CPU time of the communication and copy threads
  std::uint64_t messages_sent = 0;
  std::uint64_t bytes_sent = 0;
};

/// One granularity point, the same on every rank unless noted.
struct PointTiming {
  std::vector<double> seconds;      ///< each measured repetition: the slowest rank's wall time
  std::int64_t tasks_executed = 0;  ///< per repetition, summed over ranks
  double checksum = 0.0;            ///< the last timestep's values summed in column order
  RuntimeCounters counters;         ///< libbellows only
};

/// The stencil in libbellows (one task class; one worker per rank), run once to warm up and
/// then `repeat` times. Collective over `comm`.
PointTiming run_bellows_point(const StencilShape& shape, std::int64_t iterations, int repeat,
                              MPI_Comm comm, const runtime::RuntimeOptions& options);

/// The stencil as hand-written MPI (Task Bench's "MPI" baseline): each rank loops over its
/// columns timestep by timestep, computes its two boundary columns first, sends them to its
/// neighbours with nonblocking sends, then computes its interior while they travel. Run once to
/// warm up and then `repeat` times. Collective over `comm`.
PointTiming run_mpi_point(const StencilShape& shape, std::int64_t iterations, int repeat,
                          MPI_Comm comm);

/// Sums each rank's values of the last timestep (zero for columns it does not own) to rank 0
/// and adds them up there in column order; 0 on other ranks. Collective over `comm`.
double last_step_checksum(const std::vector<double>& last_step, MPI_Comm comm);

}  // namespace bellows::bench
