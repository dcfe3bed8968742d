// The METG stencil as hand-written MPI: Task Bench's "MPI" baseline on the same graph and busy
// loop as the libbellows version (metg_bellows.cpp).

#include <array>
#include <numeric>
#include <utility>

#include "metg.hpp"

namespace bellows::bench {
namespace {

// One rank's columns of two consecutive timesteps, each with a halo slot on either side (the
// neighbours' boundary columns): index 0 is column first-1, index columns+1 is column last+1.
class RankColumns {
 public:
  RankColumns(const StencilShape& shape, int rank)
      : shape_(shape), rank_(rank), columns_(shape.columns_per_rank()),
        first_(shape.first_column(rank)),
        previous_(static_cast<std::size_t>(columns_) + 2), current_(previous_.size()) {}

  // Runs every timestep and returns the last one's values of this rank's columns (the others
  // zero).
  std::vector<double> run(std::int64_t iterations, MPI_Comm comm) {
    const int left = rank_ > 0 ? rank_ - 1 : MPI_PROC_NULL;
    const int right = rank_ + 1 < shape_.ranks ? rank_ + 1 : MPI_PROC_NULL;
    // 0, 1: receives from the left and the right; 2, 3: sends to them.
    std::array<MPI_Request, 4> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                                        MPI_REQUEST_NULL};
    for (int step = 0; step < shape_.steps; ++step) {
      // The halo of step-1 and the sends from the buffer this step overwrites are done.
      MPI_Waitall(4, requests.data(), MPI_STATUSES_IGNORE);
      std::swap(previous_, current_);
      const bool more = step + 1 < shape_.steps;
      if (more) {
        MPI_Irecv(&current_.front(), 2, MPI_DOUBLE, left, 0, comm, &requests[0]);
        MPI_Irecv(&current_.back(), 2, MPI_DOUBLE, right, 0, comm, &requests[1]);
      }
      compute(step, 1, iterations);
      if (more) MPI_Isend(&current_[1], 2, MPI_DOUBLE, left, 0, comm, &requests[2]);
      if (columns_ > 1) compute(step, columns_, iterations);
      if (more) MPI_Isend(&current_[static_cast<std::size_t>(columns_)], 2, MPI_DOUBLE, right, 0,
                          comm, &requests[3]);
      for (int i = 2; i < columns_; ++i) compute(step, i, iterations);
    }
    MPI_Waitall(4, requests.data(), MPI_STATUSES_IGNORE);
    std::vector<double> last(static_cast<std::size_t>(shape_.width), 0.0);
    for (int i = 1; i <= columns_; ++i) {
      last[static_cast<std::size_t>(first_ + i - 1)] = current_[static_cast<std::size_t>(i)].value;
    }
    return last;
  }

 private:
  // Task (step, column first+i-1) into current_[i], from previous_.
  void compute(int step, int i, std::int64_t iterations) {
    const int column = first_ + i - 1;
    const double seed = step == 0 ? first_seed(column)
                                  : stencil_seed(shape_, column, [&](int c) {
                                      return previous_[static_cast<std::size_t>(c - first_ + 1)].value;
                                    });
    current_[static_cast<std::size_t>(i)] =
        StencilOutput{busy_loop(seed, iterations), static_cast<double>(step)};
  }

  StencilShape shape_;
  int rank_;
  int columns_;
  int first_;
  std::vector<StencilOutput> previous_;
  std::vector<StencilOutput> current_;
};

}  // namespace

double last_step_checksum(const std::vector<double>& last_step, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::vector<double> all(last_step.size(), 0.0);
  // Every column is non-zero on one rank only, so the reduction adds exact zeros.
  MPI_Reduce(last_step.data(), all.data(), static_cast<int>(all.size()), MPI_DOUBLE, MPI_SUM, 0,
             comm);
  return rank == 0 ? std::accumulate(all.begin(), all.end(), 0.0) : 0.0;
}

PointTiming run_mpi_point(const StencilShape& shape, std::int64_t iterations, int repeat,
                          MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  PointTiming timing;
  std::vector<double> last;
  for (int r = 0; r <= repeat; ++r) {  // r == 0 warms up
    RankColumns columns(shape, rank);
    MPI_Barrier(comm);
    const double start = MPI_Wtime();
    last = columns.run(iterations, comm);
    double elapsed = MPI_Wtime() - start, slowest = 0.0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (r > 0) timing.seconds.push_back(slowest);
  }
  timing.tasks_executed = shape.tasks();
  timing.checksum = last_step_checksum(last, comm);
  return timing;
}

}  // namespace bellows::bench
