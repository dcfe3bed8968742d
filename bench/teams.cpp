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

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bellows/runtime/block_cyclic.hpp"
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
};

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
  CLI11_PARSE(app, argc, argv);

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
