// gemm: C = A * B with tiled tasks over MPI ranks.
//   mpiexec -n 2 ./gemm --n 4096 --tile 256 --verify

#include <cfloat>
#include <cstdio>
#include <span>

#include "bellows/examples/app.hpp"
#include "bellows/examples/elastic.hpp"
#include "bellows/examples/tile_auto.hpp"
#include "bellows/examples/verify.hpp"
#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"

namespace be = bellows::examples;
namespace br = bellows::runtime;

namespace {

int run(int argc, char** argv) {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  int exit_code = 0;
  auto options = be::parse_app_options("gemm", "Tiled GEMM C = A * B on libbellows", argc,
                                             argv, world_size, world_rank == 0, exit_code);
  if (!options) return exit_code;
  br::ElasticSession session(argc, argv);
  be::ScheduledResizes resizes(*options, session);
  const MPI_Comm comm = session.communicator();
  const int rank = session.rank();

  const auto tile_auto = be::apply_tile_auto(br::TileGraph::gemm, *options,
                                              session.communicator(), session.grid_ranks(), rank);
  const auto grid = be::grid_for(*options, session.grid_ranks());
  const int n = options->n, tile = options->tile;
  br::TiledMatrix a(0, n, n, tile, grid, rank), b(1, n, n, tile, grid, rank),
      c(2, n, n, tile, grid, rank);
  be::fill_random(a, options->seed);
  be::fill_random(b, options->seed + 1);

  br::Runtime runtime(comm, be::runtime_options(*options));
  session.attach(runtime);
  runtime.add_collection(a);
  runtime.add_collection(b);
  runtime.add_collection(c);
  runtime.add_task_class(std::make_unique<be::GemmTasks>(0, a, b, c));

  std::vector<be::IterationResult> iterations;
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  // The job's end is watched as an iteration is: a rank lost after the last iteration (in its
  // tail or in the gather) is recovered from like any (docs/recovery.md, "The end of a job").
  const br::TiledMatrix* result[] = {&c};
  const auto ended = be::run_elastic_iterations(*options, session, runtime, resizes,
                                                options->verify ? std::span<const br::TiledMatrix* const>(result)
                                                                : std::span<const br::TiledMatrix* const>(),
                                                flops, iterations);
  if (!ended) return 0;  // this rank left the job
  const br::JobEnd& end = *ended;

  std::optional<bool> verified;
  double error = 0.0;
  if (options->verify) {
    if (session.rank() == 0) {
      const auto& full = end.gathered.at(0);
      error = be::gemm_max_relative_error(full, n, n, n, options->seed);
      verified = error <= 16.0 * n * DBL_EPSILON;
    }
  }
  const auto& stats = end.stats;
  auto extra = be::runtime_extra(runtime);
  if (!session.telemetry().empty()) extra["resizes"] = session.telemetry();
  if (tile_auto && session.rank() == 0) extra["tile_auto"] = be::tile_choice_json(*tile_auto);
  if (session.rank() == 0) {
    be::print_report("gemm", *options, session.size(), iterations, verified, error, stats,
                     extra);
  }
  int failed = verified.has_value() && !*verified ? 1 : 0;
  MPI_Bcast(&failed, 1, MPI_INT, 0, session.communicator());
  return failed;
}

}  // namespace

int main(int argc, char** argv) { return be::run_example("gemm", argc, argv, run); }
