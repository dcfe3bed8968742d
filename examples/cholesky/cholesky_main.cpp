// cholesky: tiled lower Cholesky factorisation A = L * L^T over MPI ranks.
//   mpiexec -n 2 ./cholesky --n 4096 --tile 256 --verify

#include <cstdio>
#include <span>

#include "bellows/examples/app.hpp"
#include "bellows/examples/elastic.hpp"
#include "bellows/examples/tile_auto.hpp"
#include "bellows/examples/verify.hpp"
#include "bellows/runtime/runtime.hpp"
#include "cholesky_tasks.hpp"

namespace be = bellows::examples;
namespace br = bellows::runtime;

namespace {

int run(int argc, char** argv) {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  int exit_code = 0;
  auto options = be::parse_app_options(
      "cholesky", "Tiled Cholesky factorisation A = L * L^T on libbellows", argc, argv, world_size,
      world_rank == 0, exit_code);
  if (!options) return exit_code;
  br::ElasticSession session(argc, argv);
  be::ScheduledResizes resizes(*options, session);
  const int rank = session.rank();

  const auto tile_auto = be::apply_tile_auto(br::TileGraph::cholesky, *options,
                                              session.communicator(), session.grid_ranks(), rank);
  const auto grid = be::grid_for(*options, session.grid_ranks());
  const int n = options->n, tile = options->tile;
  const auto lower = [](int m, int k) { return m >= k; };
  br::TiledMatrix a(0, n, n, tile, grid, rank, lower), l(1, n, n, tile, grid, rank, lower);
  be::fill_spd(a, options->seed);

  br::Runtime runtime(session.communicator(), be::runtime_options(*options));
  session.attach(runtime);
  runtime.add_collection(a);
  runtime.add_collection(l);
  for (auto& cls : be::make_cholesky_tasks(a, l)) runtime.add_task_class(std::move(cls));

  std::vector<be::IterationResult> iterations;
  const double flops = static_cast<double>(n) * n * n / 3.0;
  // The job's end is watched as an iteration is: a rank lost after the last iteration (in its
  // tail or in the gather) is recovered from like any (docs/recovery.md, "The end of a job").
  const br::TiledMatrix* result[] = {&l};
  const auto ended = be::run_elastic_iterations(*options, session, runtime, resizes,
                                                options->verify ? std::span<const br::TiledMatrix* const>(result)
                                                                : std::span<const br::TiledMatrix* const>(),
                                                flops, iterations);
  if (!ended) return 0;  // this rank left the job
  const br::JobEnd& end = *ended;

  std::optional<bool> verified;
  double residual = 0.0;
  if (options->verify) {
    if (session.rank() == 0) {
      const auto& full = end.gathered.at(0);
      residual = be::cholesky_scaled_residual(full, n, options->seed);
      // LAPACK's own test suite accepts scaled residuals below 30.
      verified = residual < 30.0;
    }
  }
  const auto& stats = end.stats;
  auto extra = be::runtime_extra(runtime);
  if (!session.telemetry().empty()) extra["resizes"] = session.telemetry();
  if (tile_auto && session.rank() == 0) extra["tile_auto"] = be::tile_choice_json(*tile_auto);
  if (session.rank() == 0) {
    be::print_report("cholesky", *options, session.size(), iterations, verified, residual, stats,
                     extra);
  }
  int failed = verified.has_value() && !*verified ? 1 : 0;
  MPI_Bcast(&failed, 1, MPI_INT, 0, session.communicator());
  return failed;
}

}  // namespace

int main(int argc, char** argv) { return be::run_example("cholesky", argc, argv, run); }
