// cholesky: tiled lower Cholesky factorisation A = L * L^T over MPI ranks.
//   mpiexec -n 2 ./cholesky --n 4096 --tile 256 --verify

#include <cstdio>
#include <exception>

#include "bellows/examples/app.hpp"
#include "bellows/examples/verify.hpp"
#include "bellows/runtime/runtime.hpp"
#include "cholesky_tasks.hpp"

namespace be = bellows::examples;
namespace br = bellows::runtime;

namespace {

int run(int argc, char** argv) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int exit_code = 0;
  const auto options = be::parse_app_options(
      "cholesky", "Tiled Cholesky factorisation A = L * L^T on libbellows", argc, argv, size,
      rank == 0, exit_code);
  if (!options) return exit_code;

  const auto grid = be::grid_for(*options, size);
  const int n = options->n, tile = options->tile;
  const auto lower = [](int m, int k) { return m >= k; };
  br::TiledMatrix a(0, n, n, tile, grid, rank, lower), l(1, n, n, tile, grid, rank, lower);
  be::fill_spd(a, options->seed);

  br::Runtime runtime(MPI_COMM_WORLD, be::runtime_options(*options));
  runtime.add_collection(a);
  runtime.add_collection(l);
  for (auto& cls : be::make_cholesky_tasks(a, l)) runtime.add_task_class(std::move(cls));

  std::vector<be::IterationResult> iterations;
  const double flops = static_cast<double>(n) * n * n / 3.0;
  for (int it = 0; it < options->iterations; ++it) {
    const auto report = runtime.run_iteration();
    iterations.push_back({report.seconds, flops / report.seconds * 1e-9, report.ranks});
  }

  std::optional<bool> verified;
  double residual = 0.0;
  if (options->verify) {
    const auto full = l.gather_to_root(runtime.communicator());
    if (rank == 0) {
      residual = be::cholesky_scaled_residual(full, n, options->seed);
      // LAPACK's own test suite accepts scaled residuals below 30.
      verified = residual < 30.0;
    }
  }
  const auto stats = runtime.gather_stats();
  if (rank == 0) be::print_report("cholesky", *options, size, iterations, verified, residual, stats);
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
    std::fprintf(stderr, "cholesky: error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
