// TeamLB's teams (bellows/runtime/teams.hpp) on the task graphs of the examples: how many of
// an iteration's bytes cross teams, against teams of consecutive ranks and against the
// load-blind partition, and the message log that would follow.
//
// For each graph (GEMM, Cholesky, block-sparse GEMM with the bspgemm example's skewed
// pattern), each rank count and each team size, the tiles start on the 2D block-cyclic grid
// of the examples (BlockCyclic2D::square_for) and every task runs on the owner of the tile it
// writes. Each tile weighs the seconds of the tasks that write it (flops at --gflops per
// rank); a task writing tile w and reading tile r is the traffic entry (w reads r), r's bytes;
// a rank receives a tile once per iteration however many of its tasks read it. Per row:
//   cut    the share of the bytes sent between ranks that crosses teams (the paper's edge
//          cut ratio), for
//            tlb  TeamLB over the ranks' message graph (TeamUnit::ranks), balanced in teams
//            tlb_0  TeamLB's teams with the tiles not moved yet (the partition alone)
//            ref  the same partitioner blind to load (TeamWeighting::uniform): the reference
//            con  teams of consecutive ranks over the block-cyclic layout
//            obj  TeamLB over the tile graph, as the paper partitions objects (TeamUnit::tiles)
//          and tlb/rf, TeamLB's cut over the reference's; xb/rf, its crossing bytes over the
//          reference's (TeamLB holds both within 1 + --cut-bound)
//   log    what senders would log per iteration (every tile sent to a rank of another team),
//          mean MiB per rank, for tlb, con and obj; r_tlb and r_con: relative to logging every
//          message of the block-cyclic layout (team size 1 there)
//   I      load imbalance (max - avg) / avg over all ranks: block-cyclic, after tlb, after obj;
//          Itm_tlb: the worst team's I after tlb (inside the team)
//   moved  the share of tiles TeamLB's plan (tlb) moves; ms: its planning time
//
//   ./bellows_teams_bench --tiles 32 --ranks 16,64 --team-sizes 1,4,8,16
//
// Prints a table, then as the last line a JSON object with the same numbers.
//
// With --noise-rounds R, instead: what TeamLB's plan is worth when the seconds it weighs are
// measured on a noisy host, weighing one iteration against the median of a window
// (TileLoadHistory, --window iterations, MessageLogOptions::load_window's default). Each
// measured iteration multiplies every tile's seconds by exp(N(0, --noise-sigma)), and each
// rank's tiles, with chance --spike-chance, by a spike drawn from [1.5, --spike-max] (a rank
// preempted for part of the iteration). Each plan is made as the runtime makes it (rank
// slowness from the measured seconds and flops, rank_slowness(); tiles at the median speed)
// and judged by the noiseless seconds with its holders. Per row, the medians over R rounds:
//   I_exact  I over all ranks of the plan made from the noiseless seconds
//   I_one    of the plan made from one measured iteration
//   I_med    of the plan made from the median of the window's iterations
//   one/med  the heaviest rank's noiseless seconds under I_one's plan over under I_med's
//            (above 1: weighing one iteration makes the iteration longer)
//
//   ./bellows_teams_bench --tiles 16 --ranks 16 --team-sizes 4,8 --noise-rounds 20

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bellows/runtime/block_cyclic.hpp"
#include "bellows/runtime/options.hpp"
#include "bellows/runtime/team_load.hpp"
#include "bellows/runtime/teams.hpp"
#include "bspgemm_tasks.hpp"

namespace br = bellows::runtime;
namespace be = bellows::examples;

namespace {

struct Task {
  int written = -1;
  std::vector<int> read;
  double flops = 0.0;
};

/// One iteration of an example as tiles and tasks, the tiles on their block-cyclic ranks.
struct Workload {
  std::string name;
  std::vector<int> holders;
  std::vector<Task> tasks;
};

/// Tiles of `collections` square collections of `tiles` x `tiles`, numbered collection by
/// collection, row-major; holders on `grid`.
struct TileIndex {
  int tiles = 0;
  [[nodiscard]] int operator()(int collection, int m, int n) const {
    return (collection * tiles + m) * tiles + n;
  }
};

std::vector<int> block_cyclic_holders(int collections, int tiles, const br::BlockCyclic2D& grid) {
  std::vector<int> holders;
  for (int c = 0; c < collections; ++c) {
    for (int m = 0; m < tiles; ++m) {
      for (int n = 0; n < tiles; ++n) holders.push_back(grid.owner(m, n));
    }
  }
  return holders;
}

/// C(i,j) += A(i,k) B(k,j) for every k: tasks on C's owner (examples/gemm).
Workload gemm(int tiles, int tile, const br::BlockCyclic2D& grid) {
  const TileIndex at{tiles};
  Workload w{"gemm", block_cyclic_holders(3, tiles, grid), {}};
  const double flops = 2.0 * tile * tile * static_cast<double>(tile);
  for (int i = 0; i < tiles; ++i) {
    for (int j = 0; j < tiles; ++j) {
      for (int k = 0; k < tiles; ++k) w.tasks.push_back({at(2, i, j), {at(0, i, k), at(1, k, j)}, flops});
    }
  }
  return w;
}

/// Right-looking lower Cholesky (examples/cholesky): POTRF(k), TRSM(m,k), SYRK(m,k),
/// GEMM(m,n,k), each on the owner of the tile it updates. Tiles above the diagonal are
/// never touched; they stay in the graph without work or traffic.
Workload cholesky(int tiles, int tile, const br::BlockCyclic2D& grid) {
  const TileIndex at{tiles};
  Workload w{"cholesky", block_cyclic_holders(1, tiles, grid), {}};
  const double b3 = static_cast<double>(tile) * tile * tile;
  for (int k = 0; k < tiles; ++k) {
    w.tasks.push_back({at(0, k, k), {}, b3 / 3.0});
    for (int m = k + 1; m < tiles; ++m) w.tasks.push_back({at(0, m, k), {at(0, k, k)}, b3});
    for (int m = k + 1; m < tiles; ++m) {
      w.tasks.push_back({at(0, m, m), {at(0, m, k)}, b3});
      for (int n = k + 1; n < m; ++n) {
        w.tasks.push_back({at(0, m, n), {at(0, m, k), at(0, n, k)}, 2.0 * b3});
      }
    }
  }
  return w;
}

/// Block-sparse C = A B with the bspgemm example's pattern: a task per nonzero product.
Workload bspgemm(int tiles, int tile, const br::BlockCyclic2D& grid, double density,
                 unsigned seed) {
  const be::TilePattern pattern(tiles, tiles, tiles, be::SparsityPattern::skewed, density, seed);
  const TileIndex at{tiles};
  Workload w{"bspgemm", block_cyclic_holders(3, tiles, grid), {}};
  const double flops = 2.0 * tile * tile * static_cast<double>(tile);
  for (int i = 0; i < tiles; ++i) {
    for (int j = 0; j < tiles; ++j) {
      for (const std::int32_t k : pattern.ks(i, j)) {
        w.tasks.push_back({at(2, i, j), {at(0, i, k), at(1, k, j)}, flops});
      }
    }
  }
  return w;
}

double imbalance(const std::vector<int>& holders, const std::vector<double>& seconds, int ranks) {
  std::vector<double> loads(static_cast<std::size_t>(ranks), 0.0);
  for (std::size_t t = 0; t < holders.size(); ++t) {
    loads[static_cast<std::size_t>(holders[t])] += seconds[t];
  }
  return br::load_imbalance(loads);
}

struct Options {
  int tiles = 32;
  int tile = 256;
  std::vector<int> ranks{16, 64};
  std::vector<int> team_sizes{1, 4, 8, 16};
  double gflops = 10.0;
  double density = 0.5;
  unsigned seed = 42;
  double cut_bound = 0.10;
  int noise_rounds = 0;
  int window = br::MessageLogOptions{}.load_window;
  double noise_sigma = 0.10;
  double spike_chance = 0.20;
  double spike_max = 4.0;
};

/// One iteration's seconds per tile as a noisy host measures them (see the file comment).
std::vector<double> measured(const std::vector<double>& exact, const std::vector<int>& holders, int ranks,
                             const Options& o, std::mt19937_64& random) {
  std::normal_distribution<double> jitter(0.0, o.noise_sigma);
  std::uniform_real_distribution<double> chance(0.0, 1.0);
  std::uniform_real_distribution<double> spike(1.5, std::max(1.5, o.spike_max));
  std::vector<double> rank_factor(static_cast<std::size_t>(ranks), 1.0);
  for (double& f : rank_factor) f = chance(random) < o.spike_chance ? spike(random) : 1.0;
  std::vector<double> out(exact.size(), 0.0);
  for (std::size_t t = 0; t < exact.size(); ++t) {
    out[t] = exact[t] * std::exp(jitter(random)) * rank_factor[static_cast<std::size_t>(holders[t])];
  }
  return out;
}

/// The plan the runtime makes from `seconds` measured per tile (engine_teams.cpp): each rank's
/// slowness from its tiles' seconds and flops, each tile at the median rank's speed.
br::TeamPlan plan_as_the_runtime(const std::vector<double>& seconds, const std::vector<double>& flops,
                                 const std::vector<int>& holders, const std::vector<br::TileTraffic>& traffic,
                                 int ranks, int team_size, double cut_bound) {
  std::vector<double> rank_seconds(static_cast<std::size_t>(ranks), 0.0), rank_flops(rank_seconds);
  for (std::size_t t = 0; t < seconds.size(); ++t) {
    rank_seconds[static_cast<std::size_t>(holders[t])] += seconds[t];
    rank_flops[static_cast<std::size_t>(holders[t])] += flops[t];
  }
  const auto slowness = br::rank_slowness(rank_seconds, rank_flops);
  std::vector<double> loads(seconds.size(), 0.0);
  for (std::size_t t = 0; t < seconds.size(); ++t) loads[t] = seconds[t] / slowness[static_cast<std::size_t>(holders[t])];
  br::TeamRequest request{ranks, team_size, loads, holders, traffic, br::TeamWeighting::load, br::TeamUnit::ranks,
                          cut_bound};
  request.rank_slowness = slowness;
  return br::plan_teams(request);
}

double heaviest(const std::vector<int>& holders, const std::vector<double>& seconds, int ranks) {
  std::vector<double> loads(static_cast<std::size_t>(ranks), 0.0);
  for (std::size_t t = 0; t < holders.size(); ++t) loads[static_cast<std::size_t>(holders[t])] += seconds[t];
  return *std::max_element(loads.begin(), loads.end());
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

/// The --noise-rounds report (see the file comment).
int noise_report(const Options& o) {
  const double tile_bytes = 8.0 * o.tile * static_cast<double>(o.tile);
  std::mt19937_64 random(o.seed);
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-8s %5s %3s | %7s %7s %7s | %7s\n", "graph", "ranks", "T", "I_exact", "I_one", "I_med", "one/med");
  for (const int ranks : o.ranks) {
    const auto grid = br::BlockCyclic2D::square_for(ranks);
    const std::vector<Workload> workloads{gemm(o.tiles, o.tile, grid), cholesky(o.tiles, o.tile, grid),
                                          bspgemm(o.tiles, o.tile, grid, o.density, o.seed)};
    for (const Workload& w : workloads) {
      std::vector<double> exact(w.holders.size(), 0.0), flops(w.holders.size(), 0.0);
      std::vector<br::TileTraffic> traffic;
      for (const Task& task : w.tasks) {
        exact[static_cast<std::size_t>(task.written)] += task.flops / (o.gflops * 1e9);
        flops[static_cast<std::size_t>(task.written)] += task.flops;
        for (const int tile : task.read) traffic.push_back({task.written, tile, tile_bytes});
      }
      for (const int team_size : o.team_sizes) {
        if (team_size <= 1 || team_size > ranks) continue;  // a team of one has nothing to balance
        const br::TeamPlan ideal = plan_as_the_runtime(exact, flops, w.holders, traffic, ranks, team_size, o.cut_bound);
        std::vector<double> i_one, i_med, ratio;
        for (int round = 0; round < o.noise_rounds; ++round) {
          br::TileLoadHistory history(o.window);
          const std::vector<double> tasks(exact.size(), 1.0);
          std::vector<double> last;
          for (int k = 0; k < o.window; ++k) {
            last = measured(exact, w.holders, ranks, o, random);
            history.add_iteration(last, tasks);
          }
          const br::TeamPlan one = plan_as_the_runtime(last, flops, w.holders, traffic, ranks, team_size, o.cut_bound);
          const br::TeamPlan med =
              plan_as_the_runtime(history.loads(), flops, w.holders, traffic, ranks, team_size, o.cut_bound);
          i_one.push_back(imbalance(one.tile_holders, exact, ranks));
          i_med.push_back(imbalance(med.tile_holders, exact, ranks));
          ratio.push_back(heaviest(one.tile_holders, exact, ranks) / heaviest(med.tile_holders, exact, ranks));
        }
        const double i_exact = imbalance(ideal.tile_holders, exact, ranks);
        std::printf("%-8s %5d %3d | %7.3f %7.3f %7.3f | %7.3f\n", w.name.c_str(), ranks, team_size, i_exact,
                    median(i_one), median(i_med), median(ratio));
        rows.push_back({{"graph", w.name},
                        {"ranks", ranks},
                        {"team_size", team_size},
                        {"imbalance_exact", i_exact},
                        {"imbalance_one_iteration", median(i_one)},
                        {"imbalance_window_median", median(i_med)},
                        {"heaviest_one_over_median", median(ratio)},
                        {"heaviest_one_over_median_worst", *std::max_element(ratio.begin(), ratio.end())}});
      }
    }
  }
  const nlohmann::json report{{"tiles_per_dimension", o.tiles},
                              {"tile", o.tile},
                              {"gflops_per_rank", o.gflops},
                              {"cut_bound", o.cut_bound},
                              {"noise", {{"rounds", o.noise_rounds},
                                         {"window", o.window},
                                         {"sigma", o.noise_sigma},
                                         {"spike_chance", o.spike_chance},
                                         {"spike_max", o.spike_max},
                                         {"seed", o.seed}}},
                              {"rows", rows}};
  std::printf("%s\n", report.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"TeamLB's teams on the examples' task graphs: edge cut and message log"};
  app.add_option("--tiles", o.tiles, "tiles per matrix dimension (default 32)")->check(CLI::PositiveNumber);
  app.add_option("--tile", o.tile, "tile order (default 256)")->check(CLI::PositiveNumber);
  app.add_option("--ranks", o.ranks, "rank counts (default 16,64)")->delimiter(',');
  app.add_option("--team-sizes", o.team_sizes, "team sizes (default 1,4,8,16)")->delimiter(',');
  app.add_option("--gflops", o.gflops, "compute rate per rank for tile seconds (default 10)")
      ->check(CLI::PositiveNumber);
  app.add_option("--density", o.density, "bspgemm's density (default 0.5)");
  app.add_option("--seed", o.seed, "bspgemm's pattern seed (default 42)");
  app.add_option("--cut-bound", o.cut_bound,
                 "TeamLB's bound on its cut over the load-blind partition's (default 0.10)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--noise-rounds", o.noise_rounds,
                 "instead of the table: one iteration against the window's median under noise, this many rounds")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--window", o.window, "the window's iterations (default: MessageLogOptions::load_window's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--noise-sigma", o.noise_sigma, "per tile: seconds times exp(N(0, sigma)) (default 0.10)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--spike-chance", o.spike_chance, "per rank and iteration: the chance of a spike (default 0.20)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--spike-max", o.spike_max, "a spike multiplies a rank's seconds by 1.5 to this (default 4)")
      ->check(CLI::Range(1.5, 100.0));
  CLI11_PARSE(app, argc, argv);
  if (o.noise_rounds > 0) return noise_report(o);

  const double tile_bytes = 8.0 * o.tile * static_cast<double>(o.tile);
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-8s %5s %3s | %7s %7s %7s %7s %7s %6s %6s | %8s %8s %8s %6s %6s | %5s %5s %5s %7s | %5s %5s\n",
              "graph", "ranks", "T", "cut_tlb", "tlb_0", "cut_ref", "cut_con", "cut_obj", "tlb/rf",
              "xb/rf", "log_tlb", "log_con", "log_obj", "r_tlb", "r_con", "I_bc", "I_tlb", "I_obj",
              "Itm_tlb", "moved", "ms");
  for (const int ranks : o.ranks) {
    const auto grid = br::BlockCyclic2D::square_for(ranks);
    const std::vector<Workload> workloads{gemm(o.tiles, o.tile, grid),
                                          cholesky(o.tiles, o.tile, grid),
                                          bspgemm(o.tiles, o.tile, grid, o.density, o.seed)};
    for (const Workload& w : workloads) {
      std::vector<double> seconds(w.holders.size(), 0.0);
      std::vector<br::TileTraffic> traffic;
      for (const Task& task : w.tasks) {
        seconds[static_cast<std::size_t>(task.written)] += task.flops / (o.gflops * 1e9);
        for (const int tile : task.read) traffic.push_back({task.written, tile, tile_bytes});
      }
      // Logging every message of the block-cyclic layout: team size 1.
      const br::EdgeCut every_message =
          br::message_cut(traffic, w.holders, br::consecutive_teams(ranks, 1));
      for (const int team_size : o.team_sizes) {
        if (team_size > ranks) continue;
        br::TeamRequest request{ranks, team_size, seconds, w.holders, traffic,
                                br::TeamWeighting::load, br::TeamUnit::ranks, o.cut_bound};
        const auto started = std::chrono::steady_clock::now();
        const br::TeamPlan teamlb = br::plan_teams(request);
        const double plan_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
                .count();
        request.weighting = br::TeamWeighting::uniform;
        const br::TeamPlan reference = br::plan_teams(request);
        request.weighting = br::TeamWeighting::load;
        request.unit = br::TeamUnit::tiles;
        const br::TeamPlan objects = br::plan_teams(request);
        const br::EdgeCut consecutive =
            br::message_cut(traffic, w.holders, br::consecutive_teams(ranks, team_size));
        // TeamLB's teams with every tile where it was: the partition alone.
        const br::EdgeCut teams_only = br::message_cut(traffic, w.holders, teamlb.rank_team);

        const auto mean_mib = [ranks](const br::EdgeCut& cut) {
          return cut.crossing_bytes / ranks / 1048576.0;
        };
        const auto versus_every_message = [&every_message](const br::EdgeCut& cut) {
          return every_message.crossing_bytes > 0.0
                     ? cut.crossing_bytes / every_message.crossing_bytes
                     : 0.0;
        };
        const double ratio = reference.cut.fraction() > 0.0
                                 ? teamlb.cut.fraction() / reference.cut.fraction()
                                 : 0.0;
        const double bytes_ratio = reference.cut.crossing_bytes > 0.0
                                       ? teamlb.cut.crossing_bytes / reference.cut.crossing_bytes
                                       : 0.0;
        const double i_team = *std::max_element(teamlb.imbalance_after.begin(),
                                                teamlb.imbalance_after.end());
        const double i_bc = imbalance(w.holders, seconds, ranks);
        const double i_tlb = imbalance(teamlb.tile_holders, seconds, ranks);
        const double i_obj = imbalance(objects.tile_holders, seconds, ranks);
        const double moved = static_cast<double>(teamlb.moves.size()) /
                             static_cast<double>(teamlb.tile_holders.size());
        std::printf(
            "%-8s %5d %3d | %7.3f %7.3f %7.3f %7.3f %7.3f %6.2f %6.2f | %7.1fM %7.1fM %7.1fM %6.3f %6.3f | "
            "%5.2f %5.2f %5.2f %7.2f | %5.2f %5.1f\n",
            w.name.c_str(), ranks, team_size, teamlb.cut.fraction(), teams_only.fraction(),
            reference.cut.fraction(),
            consecutive.fraction(), objects.cut.fraction(), ratio, bytes_ratio, mean_mib(teamlb.cut),
            mean_mib(consecutive), mean_mib(objects.cut), versus_every_message(teamlb.cut),
            versus_every_message(consecutive), i_bc, i_tlb, i_obj, i_team, moved, plan_ms);
        rows.push_back({{"graph", w.name},
                        {"ranks", ranks},
                        {"team_size", team_size},
                        {"tiles", w.holders.size()},
                        {"tasks", w.tasks.size()},
                        {"cut_teamlb", teamlb.cut.fraction()},
                        {"cut_teamlb_before_moves", teams_only.fraction()},
                        {"cut_reference", reference.cut.fraction()},
                        {"crossing_bytes_teamlb_over_reference", bytes_ratio},
                        {"cut_consecutive", consecutive.fraction()},
                        {"cut_teamlb_tiles", objects.cut.fraction()},
                        {"log_bytes_per_rank_teamlb", teamlb.cut.crossing_bytes / ranks},
                        {"log_bytes_per_rank_consecutive", consecutive.crossing_bytes / ranks},
                        {"log_bytes_per_rank_teamlb_tiles", objects.cut.crossing_bytes / ranks},
                        {"log_bytes_per_rank_every_message", every_message.crossing_bytes / ranks},
                        {"log_bytes_per_rank_teamlb_before_moves", teams_only.crossing_bytes / ranks},
                        {"rank_team_teamlb", teamlb.rank_team},
                        {"sent_bytes_per_rank_teamlb", teamlb.cut.total_bytes / ranks},
                        {"sent_bytes_per_rank_teamlb_tiles", objects.cut.total_bytes / ranks},
                        {"imbalance_block_cyclic", i_bc},
                        {"imbalance_teamlb", i_tlb},
                        {"imbalance_teamlb_tiles", i_obj},
                        {"worst_team_imbalance_teamlb", i_team},
                        {"tiles_moved_teamlb", teamlb.moves.size()},
                        {"tiles_moved_teamlb_tiles", objects.moves.size()},
                        {"plan_ms", plan_ms}});
      }
    }
  }
  const nlohmann::json report{{"tiles_per_dimension", o.tiles},
                              {"tile", o.tile},
                              {"gflops_per_rank", o.gflops},
                              {"cut_bound", o.cut_bound},
                              {"bspgemm", {{"pattern", "skewed"}, {"density", o.density}, {"seed", o.seed}}},
                              {"rows", rows}};
  std::printf("%s\n", report.dump().c_str());
  return 0;
}
