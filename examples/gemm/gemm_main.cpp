// gemm: C = A * B with tiled tasks over MPI ranks.
//   mpiexec -n 2 ./gemm --n 4096 --tile 256 --verify

#include <cfloat>
#include <cstdio>
#include <exception>

#include "bellows/examples/app.hpp"
#include "bellows/examples/verify.hpp"
#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"

namespace be = bellows::examples;
namespace br = bellows::runtime;

namespace {

int run(int argc, char** argv) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int exit_code = 0;
  const auto options = be::parse_app_options("gemm", "Tiled GEMM C = A * B on libbellows", argc,
                                             argv, size, rank == 0, exit_code);
  if (!options) return exit_code;

  const auto grid = be::grid_for(*options, size);
  const int n = options->n, tile = options->tile;
  br::TiledMatrix a(0, n, n, tile, grid, rank), b(1, n, n, tile, grid, rank),
      c(2, n, n, tile, grid, rank);
  be::fill_random(a, options->seed);
  be::fill_random(b, options->seed + 1);

  br::Runtime runtime(MPI_COMM_WORLD, be::runtime_options(*options));
  runtime.add_collection(a);
  runtime.add_collection(b);
  runtime.add_collection(c);
  runtime.add_task_class(std::make_unique<be::GemmTasks>(0, a, b, c));

  std::vector<be::IterationResult> iterations;
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  for (int it = 0; it < options->iterations; ++it) {
    const auto report = runtime.run_iteration();
    iterations.push_back({report.seconds, flops / report.seconds * 1e-9, report.ranks});
  }

  std::optional<bool> verified;
  double error = 0.0;
  if (options->verify) {
    const auto full = c.gather_to_root(runtime.communicator());
    if (rank == 0) {
      error = be::gemm_max_relative_error(full, n, n, n, options->seed);
      verified = error <= 16.0 * n * DBL_EPSILON;
    }
  }
  const auto stats = runtime.gather_stats();
  if (rank == 0) be::print_report("gemm", *options, size, iterations, verified, error, stats);
  int failed = verified.has_value() && !*verified ? 1 : 0;
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  be::init_mpi(argc, argv);
  int code = 1;
  try {
    code = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm: error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
