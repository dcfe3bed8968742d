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

/// The fastest of the timed calls of `kernel` (after one warm-up call), in thread CPU time: at
/// least 2, and more while the calls so far took less than kTileAutoSecondsPerKernel. The
/// fastest, not the mean: the host's other work slows some calls down, never speeds one up.
double fastest_call_seconds(const std::function<void()>& kernel) {
  kernel();
  double fastest = 1e300, spent = 0.0;
  for (int calls = 0; calls < 2 || spent < kTileAutoSecondsPerKernel; ++calls) {
    const double start = thread_cpu_seconds();
    kernel();
    const double seconds = thread_cpu_seconds() - start;
    fastest = std::min(fastest, seconds);
    spent += seconds;
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

}  // namespace

MeasuredTileChoice choose_tile_by_measuring(runtime::TileGraph graph, const AppOptions& options,
                                            MPI_Comm comm, int ranks) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MeasuredTileChoice measured;
  MPI_Barrier(comm);  // every rank measures at once, as the job will run
  const auto start = Clock::now();
  for (const int b : runtime::tile_size_candidates(options.n)) {
    measured.speeds.push_back(measure(b, graph == runtime::TileGraph::cholesky));
  }
  measured.copy_gbytes_per_s = copy_bytes_per_second() / 1e9;
  measured.measuring_seconds = seconds_since(start);
  int tile = 0;
  if (rank == 0) {
    runtime::TileProblem problem;
    problem.graph = graph;
    problem.n = options.n;
    problem.ranks = ranks;
    problem.workers_per_rank = options.workers;
    problem.task_overhead_seconds = kTileAutoTaskOverheadSeconds;
    problem.seconds_per_tile_byte = 1.0 / (measured.copy_gbytes_per_s * 1e9);
    measured.choice = runtime::choose_tile_size(problem, measured.speeds);
    tile = measured.choice.tile;
  } else {
    measured.speeds.clear();
  }
  MPI_Bcast(&tile, 1, MPI_INT, 0, comm);
  measured.choice.tile = tile;
  return measured;
}

std::optional<MeasuredTileChoice> apply_tile_auto(runtime::TileGraph graph, AppOptions& options,
                                                  MPI_Comm comm, int ranks, int rank) {
  if (!options.tile_auto) return std::nullopt;
  auto measured = choose_tile_by_measuring(graph, options, comm, ranks);
  options.tile = measured.choice.tile;
  if (rank == 0 && !options.quiet) std::printf("%s\n", describe_tile_choice(measured).c_str());
  return measured;
}

std::string describe_tile_choice(const MeasuredTileChoice& measured) {
  std::string candidates, predicted, gemm, panel;
  char number[64];
  for (std::size_t i = 0; i < measured.speeds.size(); ++i) {
    const auto& s = measured.speeds[i];
    const auto& p = measured.choice.predictions.at(i);
    const std::string sep = i == 0 ? "" : ", ";
    if (i > 0) candidates += ' ';
    candidates += std::to_string(s.tile);
    std::snprintf(number, sizeof number, "%d %.3f", p.tile, p.predicted_seconds);
    predicted += sep + number;
    std::snprintf(number, sizeof number, "%d %.1f", s.tile, s.gemm_gflops);
    gemm += sep + number;
    std::snprintf(number, sizeof number, "%d %.1f", s.tile, s.panel_gflops);
    panel += sep + number;
  }
  std::string line = "tile auto: " + std::to_string(measured.choice.tile) + " of " + candidates +
                     " (predicted s: " + predicted + "; GEMM GFLOP/s: " + gemm;
  if (!measured.speeds.empty() && measured.speeds.front().panel_gflops > 0.0) {
    line += "; TRSM GFLOP/s: " + panel;
  }
  std::snprintf(number, sizeof number, "; copies %.1f GB/s; measured in %.2f s)",
                measured.copy_gbytes_per_s, measured.measuring_seconds);
  return line + number;
}

nlohmann::json tile_choice_json(const MeasuredTileChoice& measured) {
  nlohmann::json candidates = nlohmann::json::array();
  for (std::size_t i = 0; i < measured.speeds.size(); ++i) {
    const auto& s = measured.speeds[i];
    const auto& p = measured.choice.predictions.at(i);
    candidates.push_back({{"tile", s.tile},
                          {"gemm_gflops", s.gemm_gflops},
                          {"panel_gflops", s.panel_gflops},
                          {"predicted_seconds", p.predicted_seconds},
                          {"tasks", p.tasks}});
  }
  return {{"chosen", measured.choice.tile},
          {"candidates", candidates},
          {"task_overhead_us", kTileAutoTaskOverheadSeconds * 1e6},
          {"copy_gbytes_per_s", measured.copy_gbytes_per_s},
          {"measuring_seconds", measured.measuring_seconds}};
}

}  // namespace bellows::examples
