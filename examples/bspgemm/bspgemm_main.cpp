// bspgemm: block-sparse C = A * B with tiled tasks over MPI ranks. The sparsity pattern
// of the tiles decides how much work each rank owns, so ranks end up imbalanced.
//   mpiexec -n 4 ./bspgemm --n 2048 --tile 128 --pattern skewed --density 0.5 --verify
//
// With --kernel emulated the JSON report also carries the modeled work: the total, the
// perfect-balance bound and the most any rank owns (see ModeledWork), to compare with
// the measured iteration time.

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/runtime.hpp"
#include "bspgemm_tasks.hpp"
#include "bspgemm_verify.hpp"

namespace be = bellows::examples;
namespace br = bellows::runtime;

namespace {

/// What bspgemm adds to the shared command line.
struct SparseOptions {
  double density = 0.5;
  std::string pattern_name = "skewed";
  be::SparsityPattern pattern = be::SparsityPattern::skewed;
  int k = 0;             ///< inner dimension; the matrix order n unless --k is given
  bool k_given = false;
  double thin_fraction = 0.0;  ///< share of k slabs that are thin (thin_slab_widths)
  int thin_width = 8;          ///< nonzero columns of A / rows of B in a thin slab
};

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

be::ExtraOptions extra_options(SparseOptions& s) {
  auto k_option = std::make_shared<CLI::Option*>(nullptr);
  be::ExtraOptions extra;
  extra.add = [&s, k_option](CLI::App& cli) {
    cli.add_option("--density", s.density,
                   "mean fraction of nonzero tiles of A and of B, in (0, 1] (default 0.5)");
    cli.add_option("--pattern", s.pattern_name,
                   "nonzero tiles: random, banded or skewed (default skewed)");
    *k_option = cli.add_option("--k", s.k, "inner dimension: A is n x k, B is k x n (default n)");
    cli.add_option("--thin-fraction", s.thin_fraction,
                   "share of k tile slabs that are thin: only --thin-width columns of A and rows "
                   "of B nonzero, stored dense (default 0)");
    cli.add_option("--thin-width", s.thin_width, "nonzero width of a thin slab (default 8)");
  };
  extra.check = [&s, k_option]() -> std::string {
    if (!(s.density > 0.0 && s.density <= 1.0)) {
      return "--density must be in (0, 1], got " + format_number(s.density);
    }
    if (!be::parse_sparsity_pattern(s.pattern_name, s.pattern)) {
      return "--pattern must be random, banded or skewed, got '" + s.pattern_name + "'";
    }
    s.k_given = *k_option != nullptr && (*k_option)->count() > 0;
    if (s.k_given && s.k <= 0) return "--k must be positive, got " + std::to_string(s.k);
    if (!(s.thin_fraction >= 0.0 && s.thin_fraction <= 1.0)) {
      return "--thin-fraction must be in [0, 1], got " + format_number(s.thin_fraction);
    }
    if (s.thin_width <= 0) return "--thin-width must be positive, got " + std::to_string(s.thin_width);
    return {};
  };
  return extra;
}

int run(int argc, char** argv) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int exit_code = 0;
  SparseOptions sparse;
  const auto options = be::parse_app_options(
      "bspgemm", "Block-sparse tiled GEMM C = A * B on libbellows", argc, argv, size, rank == 0,
      exit_code, extra_options(sparse));
  if (!options) return exit_code;

  if (!options->resize.empty()) {
    if (rank == 0) {
      std::fprintf(stderr, "bspgemm: error: --resize works with gemm and cholesky; bspgemm runs "
                           "on a fixed set of ranks\n");
    }
    return 2;
  }
  const auto grid = be::grid_for(*options, size);
  const int n = options->n, tile = options->tile;
  const int k = sparse.k_given ? sparse.k : n;
  const auto tiles = [tile](int order) { return (order + tile - 1) / tile; };
  const be::TilePattern pattern(tiles(n), tiles(k), tiles(n), sparse.pattern, sparse.density,
                                options->seed);
  br::TiledMatrix a(0, n, k, tile, grid, rank,
                    [&pattern](int i, int kk) { return pattern.a_nonzero(i, kk); });
  br::TiledMatrix b(1, k, n, tile, grid, rank,
                    [&pattern](int kk, int j) { return pattern.b_nonzero(kk, j); });
  br::TiledMatrix c(2, n, n, tile, grid, rank,
                    [&pattern](int i, int j) { return pattern.c_nonzero(i, j); });
  be::fill_random(a, options->seed);
  be::fill_random(b, options->seed + 1);
  const auto widths =
      be::thin_slab_widths(tiles(k), tile, sparse.thin_fraction, sparse.thin_width, options->seed);
  be::zero_thin_padding(a, b, widths);

  br::Runtime runtime(MPI_COMM_WORLD, be::runtime_options(*options));
  runtime.add_collection(a);
  runtime.add_collection(b);
  runtime.add_collection(c);
  auto owned_tasks = std::make_unique<be::BspgemmTasks>(0, pattern, a, b, c, widths);
  const be::BspgemmTasks& tasks = *owned_tasks;
  runtime.add_task_class(std::move(owned_tasks));

  std::vector<be::IterationResult> iterations;
  const double flops = tasks.total_flops();
  for (int it = 0; it < options->iterations; ++it) {
    const auto report = runtime.run_iteration();
    iterations.push_back(be::iteration_result(report, flops));
  }

  // The job's end, watched: bspgemm does not recover from a lost rank, so one lost there is
  // refused with its name instead of leaving the others waiting for it.
  const br::TiledMatrix* result[] = {&c};
  const br::JobEnd end = runtime.finish(options->verify ? std::span<const br::TiledMatrix* const>(result)
                                                         : std::span<const br::TiledMatrix* const>());
  if (!end.completed()) {
    std::string lost;
    for (const int r : end.report.lost_ranks) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
    std::fprintf(stderr, "bspgemm: error: ranks {%s} were lost at the job's end, and bspgemm does not recover\n",
                 lost.c_str());
    return 1;
  }
  std::optional<bool> verified;
  double error = 0.0;
  if (options->verify) {
    if (rank == 0) {
      const auto& full = end.gathered.at(0);
      error = be::bspgemm_max_relative_error(full, pattern, n, n, k, tile, options->seed, widths);
      verified = error <= 16.0 * k * DBL_EPSILON;
    }
  }
  const auto& stats = end.stats;
  if (rank == 0) {
    nlohmann::json extra = {
        {"pattern", std::string(be::to_string(pattern.pattern()))},
        {"density", pattern.density()},
        {"k", k},
        {"a_tiles", pattern.mt() * pattern.kt()},
        {"b_tiles", pattern.kt() * pattern.nt()},
        {"a_nonzero_tiles", pattern.a_nonzeros()},
        {"b_nonzero_tiles", pattern.b_nonzeros()},
        {"tasks", pattern.products()},
        {"flops", flops},
        {"thin_fraction", sparse.thin_fraction},
        {"thin_slabs", std::count_if(widths.begin(), widths.end(), [tile](int w) { return w < tile; })},
    };
    if (options->kernel == br::DeviceKind::emulated) {
      const auto model = tasks.modeled_work(size, options->emulated_gflops, options->emulated_lanes);
      extra["work_seconds"] = model.work_seconds;
      extra["critical_path_seconds"] = model.critical_path_seconds;
      extra["balanced_bound_seconds"] = model.balanced_bound_seconds;
      extra["max_rank_work_seconds"] = model.max_rank_work_seconds;
    }
    if (!options->quiet) {
      std::printf("bspgemm: %s pattern, density %g: %zu of %d A tiles and %zu of %d B tiles "
                  "nonzero, %zu tasks\n",
                  std::string(be::to_string(pattern.pattern())).c_str(), pattern.density(),
                  pattern.a_nonzeros(), pattern.mt() * pattern.kt(), pattern.b_nonzeros(),
                  pattern.kt() * pattern.nt(), pattern.products());
      if (extra.contains("work_seconds")) {
        std::printf("  modeled: work %.4f s, balanced bound %.4f s, busiest rank %.4f s\n",
                    extra["work_seconds"].get<double>(),
                    extra["balanced_bound_seconds"].get<double>(),
                    extra["max_rank_work_seconds"].get<double>());
      }
    }
    be::print_report("bspgemm", *options, size, iterations, verified, error, stats, extra);
  }
  int failed = verified.has_value() && !*verified ? 1 : 0;
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return failed;
}

}  // namespace

int main(int argc, char** argv) { return be::run_example("bspgemm", argc, argv, run); }
