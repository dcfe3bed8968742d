#include "bellows/examples/tile_auto.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <vector>

#include "bellows/kernels/tile_kernels.hpp"

namespace bellows::examples {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// CPU seconds of the calling thread: unlike wall time, not counting the time other processes
/// of a loaded host hold its core, which would count against long calls (big tiles) more often
/// than against short ones.
double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

/// The fastest call of `kernel` (after one warm-up call), in thread CPU time, from at least 2
/// timed samples, and more while they took less than kTileAutoSecondsPerKernel. A sample times
/// as many calls as it takes to last kShortestSample: the thread CPU clock may advance in steps
/// longer than a small tile's call, which alone could read as taking no time. The fastest, not
/// the mean: the host's other work slows some calls down, never speeds one up.
double fastest_call_seconds(const std::function<void()>& kernel) {
  constexpr double kShortestSample = 1e-4;
  kernel();
  double fastest = 1e300, spent = 0.0;
  int calls_per_sample = 1;
  for (int samples = 0; samples < 2 || spent < kTileAutoSecondsPerKernel;) {
    const double start = thread_cpu_seconds();
    for (int call = 0; call < calls_per_sample; ++call) kernel();
    const double seconds = thread_cpu_seconds() - start;
    spent += seconds;
    if (seconds < kShortestSample) {
      calls_per_sample *= 2;
      continue;
    }
    fastest = std::min(fastest, seconds / calls_per_sample);
    ++samples;
  }
  return fastest;
}

void fill_tile(runtime::Tile& tile, unsigned seed, double diagonal) {
  for (int j = 0; j < tile.cols(); ++j) {
    for (int i = 0; i < tile.rows(); ++i) tile.at(i, j) = random_entry(seed, i, j);
    if (j < tile.rows()) tile.at(j, j) += diagonal;
  }
}

/// One core's speeds at tile order b: GEMM, and TRSM when `panel` (0 otherwise).
runtime::TileCandidate measure(int b, bool panel) {
  runtime::Tile a(b, b), bt(b, b), c(b, b);
  fill_tile(a, 1, 0.0);
  fill_tile(bt, 2, 0.0);
  fill_tile(c, 3, 0.0);
  const double b3 = static_cast<double>(b) * b * b;
  runtime::TileCandidate candidate;
  candidate.tile = b;
  candidate.gemm_gflops =
      2.0 * b3 / fastest_call_seconds([&] { kernels::gemm_nn(a, bt, 1.0, c); }) / 1e9;
  if (panel) {
    // L well conditioned (b on its diagonal); A restored before each call so that repeated
    // solves do not shrink it into subnormal numbers.
    runtime::Tile l(b, b), original(b, b);
    fill_tile(l, 4, b);
    fill_tile(original, 5, 0.0);
    candidate.panel_gflops = b3 / fastest_call_seconds([&] {
                               std::memcpy(a.data(), original.data(), a.bytes());
                               kernels::trsm_right_lower_trans(l, a);
                             }) / 1e9;
  }
  return candidate;
}

/// One core's memory copy bandwidth, bytes a second: the fastest of 3 copies of 64 MiB (more
/// than a cache holds, as tiles come from memory or a peer's slab in a run).
double copy_bytes_per_second() {
  const std::size_t bytes = std::size_t{64} << 20;
  std::vector<char> from(bytes, 1), to(bytes, 0);
  const double seconds = fastest_call_seconds([&] { std::memcpy(to.data(), from.data(), bytes); });
  return static_cast<double>(bytes) / seconds;
}

std::string grid_text(const runtime::BlockCyclic2D& grid) {
  return std::to_string(grid.rows) + "x" + std::to_string(grid.cols);
}

/// The prediction of each candidate tile on its best grid, in the candidates' order.
std::vector<runtime::TilePrediction> best_per_tile(const MeasuredTileChoice& measured) {
  std::vector<runtime::TilePrediction> best;
  for (const auto& s : measured.speeds) {
    const runtime::TilePrediction* tile_best = nullptr;
    for (const auto& p : measured.choice.predictions) {
      if (p.tile == s.tile && (!tile_best || p.predicted_seconds < tile_best->predicted_seconds)) {
        tile_best = &p;
      }
    }
    if (tile_best) best.push_back(*tile_best);
  }
  return best;
}

}  // namespace

MeasuredTileChoice choose_tile_by_measuring(runtime::TileGraph graph, const AppOptions& options,
                                            MPI_Comm comm, int ranks) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MeasuredTileChoice measured;
  measured.grids = options.grid.empty() ? runtime::process_grid_candidates(ranks)
                                        : std::vector{grid_for(options, ranks)};
  MPI_Barrier(comm);  // every rank measures at once, as the job will run
  const auto start = Clock::now();
  for (const int b : runtime::tile_size_candidates(options.n)) {
    measured.speeds.push_back(measure(b, graph == runtime::TileGraph::cholesky));
  }
  measured.copy_gbytes_per_s = copy_bytes_per_second() / 1e9;
  const double seconds_per_tile_byte = 1.0 / (measured.copy_gbytes_per_s * 1e9);
  const auto& smallest = measured.speeds.front();
  measured.overhead = measure_task_overhead(smallest.tile, smallest.gemm_gflops, options);
  measured.measuring_seconds = seconds_since(start);
  int chosen[3] = {0, 0, 0};  // tile, grid rows, grid columns
  if (rank == 0) {
    runtime::TileProblem problem;
    problem.graph = graph;
    problem.n = options.n;
    problem.ranks = ranks;
    problem.workers_per_rank = options.workers;
    problem.task_overhead_seconds = measured.overhead.overhead_seconds;
    problem.seconds_per_tile_byte = seconds_per_tile_byte;
    problem.grids = measured.grids;
    measured.choice = runtime::choose_tile_size(problem, measured.speeds);
    chosen[0] = measured.choice.tile;
    chosen[1] = measured.choice.grid.rows;
    chosen[2] = measured.choice.grid.cols;
  } else {
    measured.speeds.clear();
  }
  MPI_Bcast(chosen, 3, MPI_INT, 0, comm);
  measured.choice.tile = chosen[0];
  measured.choice.grid = runtime::BlockCyclic2D{chosen[1], chosen[2]};
  return measured;
}

std::optional<MeasuredTileChoice> apply_tile_auto(runtime::TileGraph graph, AppOptions& options,
                                                  MPI_Comm comm, int ranks, int rank) {
  if (!options.tile_auto) return std::nullopt;
  auto measured = choose_tile_by_measuring(graph, options, comm, ranks);
  options.tile = measured.choice.tile;
  options.grid = grid_text(measured.choice.grid);
  if (rank == 0 && !options.quiet) std::printf("%s\n", describe_tile_choice(measured).c_str());
  return measured;
}

std::string describe_tile_choice(const MeasuredTileChoice& measured) {
  std::string candidates, grids, predicted, gemm, panel;
  char number[64];
  const auto best = best_per_tile(measured);
  for (std::size_t i = 0; i < measured.speeds.size(); ++i) {
    const auto& s = measured.speeds[i];
    const auto& p = best.at(i);
    const std::string sep = i == 0 ? "" : ", ";
    if (i > 0) candidates += ' ';
    candidates += std::to_string(s.tile);
    std::snprintf(number, sizeof number, "%d %.3f", p.tile, p.predicted_seconds);
    predicted += sep + number;
    if (measured.grids.size() > 1) {
      predicted += ' ';
      predicted += grid_text(p.grid);
    }
    std::snprintf(number, sizeof number, "%d %.1f", s.tile, s.gemm_gflops);
    gemm += sep + number;
    std::snprintf(number, sizeof number, "%d %.1f", s.tile, s.panel_gflops);
    panel += sep + number;
  }
  for (std::size_t i = 0; i < measured.grids.size(); ++i) {
    if (i > 0) grids += ' ';
    grids += grid_text(measured.grids[i]);
  }
  std::string line = "tile auto: " + std::to_string(measured.choice.tile) + " of " + candidates +
                     ", grid " + grid_text(measured.choice.grid) + " of " + grids +
                     " (predicted s, each tile on its best grid: " + predicted +
                     "; GEMM GFLOP/s: " + gemm;
  if (!measured.speeds.empty() && measured.speeds.front().panel_gflops > 0.0) {
    line += "; TRSM GFLOP/s: " + panel;
  }
  const auto& o = measured.overhead;
  char tail[256];
  std::snprintf(tail, sizeof tail,
                "; copies %.1f GB/s; task overhead %.1f us (tile %d: %.1f us a task, kernel %.1f "
                "us, measured in %.2f s); measured in %.2f s)",
                measured.copy_gbytes_per_s, o.overhead_seconds * 1e6, o.tile,
                o.seconds_per_task * 1e6, o.kernel_seconds * 1e6, o.measuring_seconds,
                measured.measuring_seconds);
  return line + tail;
}

nlohmann::json tile_choice_json(const MeasuredTileChoice& measured) {
  nlohmann::json candidates = nlohmann::json::array();
  const auto best = best_per_tile(measured);
  for (std::size_t i = 0; i < measured.speeds.size(); ++i) {
    const auto& s = measured.speeds[i];
    const auto& p = best.at(i);
    candidates.push_back({{"tile", s.tile},
                          {"gemm_gflops", s.gemm_gflops},
                          {"panel_gflops", s.panel_gflops},
                          {"predicted_seconds", p.predicted_seconds},
                          {"grid", grid_text(p.grid)},
                          {"tasks", p.tasks}});
  }
  nlohmann::json predictions = nlohmann::json::array();
  for (const auto& p : measured.choice.predictions) {
    predictions.push_back({{"tile", p.tile},
                           {"grid", grid_text(p.grid)},
                           {"predicted_seconds", p.predicted_seconds},
                           {"imbalance", p.imbalance},
                           {"communication_seconds", p.communication_seconds}});
  }
  nlohmann::json grids = nlohmann::json::array();
  for (const auto& g : measured.grids) grids.push_back(grid_text(g));
  const auto& o = measured.overhead;
  return {{"chosen", measured.choice.tile},
          {"grid", grid_text(measured.choice.grid)},
          {"candidates", candidates},
          {"predictions", predictions},
          {"grids", grids},
          {"task_overhead_us", o.overhead_seconds * 1e6},
          {"task_overhead",
           {{"tile", o.tile},
            {"seconds_per_task_us", o.seconds_per_task * 1e6},
            {"kernel_us", o.kernel_seconds * 1e6},
            {"measuring_seconds", o.measuring_seconds}}},
          {"copy_gbytes_per_s", measured.copy_gbytes_per_s},
          {"measuring_seconds", measured.measuring_seconds}};
}

}  // namespace bellows::examples
