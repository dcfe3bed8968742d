// gemm: C = A * B with tiled tasks over MPI ranks.
//   mpiexec -n 2 ./gemm --n 4096 --tile 256 --verify

#include <cblas.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <exception>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"

namespace be = bellows::examples;
namespace br = bellows::runtime;

namespace {

/// max |C - A*B| / max |A*B| against OpenBLAS on the whole matrices.
double gemm_error(const std::vector<double>& c, int n, unsigned seed) {
  std::vector<double> a(static_cast<std::size_t>(n) * n), b(a.size()), ref(a.size());
  for (long j = 0; j < n; ++j) {
    for (long i = 0; i < n; ++i) {
      a[static_cast<std::size_t>(j * n + i)] = be::random_entry(seed, i, j);
      b[static_cast<std::size_t>(j * n + i)] = be::random_entry(seed + 1, i, j);
    }
  }
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data(), n, b.data(), n,
              0.0, ref.data(), n);
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(c[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0.0 ? diff / scale : diff;
}

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
      error = gemm_error(full, n, options->seed);
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
