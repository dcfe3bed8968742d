#include "bellows/runtime/teams.hpp"

#include <metis.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace bellows::runtime {

namespace {

/// METIS' integer weights: each kind of weight is scaled so that its total stays under
/// this, well inside a 32-bit idx_t; a nonzero weight never rounds to 0.
constexpr double kWeightScale = static_cast<double>(1 << 28);
/// Every rank computes the same partition.
constexpr idx_t kMetisSeed = 1;
/// A rank's load may pass its team's average by this fraction (rounding) and keep a tile.
constexpr double kLoadTolerance = 1e-9;

std::string number(double value) {
  std::string text = std::to_string(value);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

void check_traffic(std::span<const TileTraffic> traffic, std::size_t tiles, const char* where) {
  for (std::size_t e = 0; e < traffic.size(); ++e) {
    const TileTraffic& t = traffic[e];
    for (const int tile : {t.first, t.second}) {
      if (tile < 0 || static_cast<std::size_t>(tile) >= tiles) {
        throw std::invalid_argument(std::string(where) + ": traffic entry " + std::to_string(e) +
                                    " names tile " + std::to_string(tile) + ", not one of the " +
                                    std::to_string(tiles) + " tiles");
      }
    }
    if (!std::isfinite(t.bytes) || t.bytes < 0.0) {
      throw std::invalid_argument(std::string(where) + ": traffic entry " + std::to_string(e) +
                                  " (tiles " + std::to_string(t.first) + " and " +
                                  std::to_string(t.second) + ") has " + number(t.bytes) +
                                  " bytes; bytes are finite and not negative");
    }
  }
}

void check_request(const TeamRequest& request) {
  if (request.ranks < 1) {
    throw std::invalid_argument("plan_teams: " + std::to_string(request.ranks) +
                                " ranks; a job has at least 1");
  }
  if (request.team_size < 1 || request.team_size > request.ranks) {
    throw std::invalid_argument("plan_teams: team size " + std::to_string(request.team_size) +
                                " is not between 1 and the job's " +
                                std::to_string(request.ranks) + " ranks");
  }
  const std::size_t tiles = request.tile_seconds.size();
  if (request.tile_holders.size() != tiles) {
    throw std::invalid_argument("plan_teams: " + std::to_string(request.tile_holders.size()) +
                                " tile holders for " + std::to_string(tiles) +
                                " tiles' seconds; there is one of each per tile");
  }
  for (std::size_t t = 0; t < tiles; ++t) {
    const int holder = request.tile_holders[t];
    if (holder < 0 || holder >= request.ranks) {
      throw std::invalid_argument("plan_teams: tile " + std::to_string(t) + " is held by rank " +
                                  std::to_string(holder) + ", not one of the job's " +
                                  std::to_string(request.ranks) + " ranks");
    }
    const double seconds = request.tile_seconds[t];
    if (!std::isfinite(seconds) || seconds < 0.0) {
      throw std::invalid_argument("plan_teams: tile " + std::to_string(t) + " has " +
                                  number(seconds) +
                                  " seconds of work; seconds are finite and not negative");
    }
  }
  check_traffic(request.traffic, tiles, "plan_teams");
  const int teams = (request.ranks + request.team_size - 1) / request.team_size;
  if (tiles < static_cast<std::size_t>(teams)) {
    throw std::invalid_argument("plan_teams: " + std::to_string(tiles) + " tiles cannot fill " +
                                std::to_string(teams) + " teams of " +
                                std::to_string(request.team_size) + " ranks");
  }
}

int team_ranks(int team, int ranks, int team_size) {
  return std::min(team_size, ranks - team * team_size);
}

/// The tile graph in METIS' compressed form: pairs merged, self entries dropped.
struct MetisGraph {
  std::vector<idx_t> xadj;
  std::vector<idx_t> adjncy;
  std::vector<idx_t> adjwgt;
  std::vector<idx_t> vwgt;
};

MetisGraph metis_graph(const TeamRequest& request) {
  const std::size_t tiles = request.tile_seconds.size();
  std::map<std::pair<int, int>, double> pairs;
  double total_bytes = 0.0;
  for (const TileTraffic& t : request.traffic) {
    if (t.first == t.second || t.bytes <= 0.0) continue;
    pairs[std::minmax(t.first, t.second)] += t.bytes;
    total_bytes += t.bytes;
  }
  const auto scaled = [](double value, double total) {
    return static_cast<idx_t>(std::max(1.0, std::round(value / total * kWeightScale)));
  };
  std::vector<std::vector<std::pair<idx_t, idx_t>>> neighbours(tiles);
  for (const auto& [pair, bytes] : pairs) {
    const idx_t weight = scaled(bytes, total_bytes);
    neighbours[static_cast<std::size_t>(pair.first)].emplace_back(pair.second, weight);
    neighbours[static_cast<std::size_t>(pair.second)].emplace_back(pair.first, weight);
  }
  MetisGraph graph;
  graph.xadj.push_back(0);
  for (const auto& list : neighbours) {
    for (const auto& [tile, weight] : list) {
      graph.adjncy.push_back(tile);
      graph.adjwgt.push_back(weight);
    }
    graph.xadj.push_back(static_cast<idx_t>(graph.adjncy.size()));
  }
  const double total_seconds =
      std::accumulate(request.tile_seconds.begin(), request.tile_seconds.end(), 0.0);
  graph.vwgt.assign(tiles, 1);
  if (request.weighting == TeamWeighting::load && total_seconds > 0.0) {
    for (std::size_t t = 0; t < tiles; ++t) {
      const double seconds = request.tile_seconds[t];
      graph.vwgt[t] = seconds > 0.0 ? scaled(seconds, total_seconds) : 0;
    }
  }
  return graph;
}

/// Per tile: its METIS part, part p targeting team p's share of the ranks.
std::vector<int> partition(const TeamRequest& request, int teams) {
  const std::size_t tiles = request.tile_seconds.size();
  if (teams == 1) return std::vector<int>(tiles, 0);
  MetisGraph graph = metis_graph(request);
  std::vector<real_t> target(static_cast<std::size_t>(teams));
  for (int p = 0; p < teams; ++p) {
    target[static_cast<std::size_t>(p)] =
        static_cast<real_t>(team_ranks(p, request.ranks, request.team_size)) /
        static_cast<real_t>(request.ranks);
  }
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_NUMBERING] = 0;
  options[METIS_OPTION_SEED] = kMetisSeed;
  idx_t vertices = static_cast<idx_t>(tiles);
  idx_t constraints = 1;
  idx_t parts = teams;
  idx_t cut = 0;
  std::vector<idx_t> part(tiles, 0);
  const int status = METIS_PartGraphKway(
      &vertices, &constraints, graph.xadj.data(), graph.adjncy.data(), graph.vwgt.data(),
      nullptr, graph.adjncy.empty() ? nullptr : graph.adjwgt.data(), &parts, target.data(),
      nullptr, options, &cut, part.data());
  if (status != METIS_OK) {
    throw std::runtime_error("plan_teams: METIS_PartGraphKway failed (status " +
                             std::to_string(status) + ") partitioning " + std::to_string(tiles) +
                             " tiles into " + std::to_string(teams) + " teams");
  }
  return {part.begin(), part.end()};
}

/// Per part: the team it becomes. Pairs (part, team) of equal size go greedily by the tiles
/// of the part that the team's ranks hold now, most first, ties to the lower part, then the
/// lower team; parts left go to teams left of their size in order.
std::vector<int> teams_for_parts(const TeamRequest& request, std::span<const int> part, int teams) {
  const auto count = static_cast<std::size_t>(teams);
  std::vector<std::vector<long>> held(count, std::vector<long>(count, 0));
  for (std::size_t t = 0; t < part.size(); ++t) {
    ++held[static_cast<std::size_t>(part[t])]
          [static_cast<std::size_t>(request.tile_holders[t] / request.team_size)];
  }
  std::vector<std::tuple<long, int, int>> pairs;  // (-held, part, team)
  for (int p = 0; p < teams; ++p) {
    for (int t = 0; t < teams; ++t) {
      if (team_ranks(p, request.ranks, request.team_size) !=
          team_ranks(t, request.ranks, request.team_size)) {
        continue;
      }
      pairs.emplace_back(-held[static_cast<std::size_t>(p)][static_cast<std::size_t>(t)], p, t);
    }
  }
  std::sort(pairs.begin(), pairs.end());
  std::vector<int> team_of_part(count, -1);
  std::vector<bool> team_taken(count, false);
  for (const auto& [negative_held, p, t] : pairs) {
    if (team_of_part[static_cast<std::size_t>(p)] >= 0 || team_taken[static_cast<std::size_t>(t)]) {
      continue;
    }
    team_of_part[static_cast<std::size_t>(p)] = t;
    team_taken[static_cast<std::size_t>(t)] = true;
  }
  return team_of_part;
}

/// IV-B inside one team: its tiles to its ranks (see the file comment).
void balance_team(const TeamRequest& request, int team, std::span<const int> tile_team,
                  std::vector<int>& holders) {
  const int first_rank = team * request.team_size;
  const int size = team_ranks(team, request.ranks, request.team_size);
  std::vector<int> tiles;
  for (std::size_t t = 0; t < tile_team.size(); ++t) {
    if (tile_team[t] == team) tiles.push_back(static_cast<int>(t));
  }
  std::stable_sort(tiles.begin(), tiles.end(), [&request](int a, int b) {
    return request.tile_seconds[static_cast<std::size_t>(a)] >
           request.tile_seconds[static_cast<std::size_t>(b)];
  });
  double team_seconds = 0.0;
  for (const int tile : tiles) team_seconds += request.tile_seconds[static_cast<std::size_t>(tile)];
  const double average = team_seconds / static_cast<double>(size);
  std::vector<double> load(static_cast<std::size_t>(size), 0.0);
  std::vector<int> tile_count(static_cast<std::size_t>(size), 0);
  for (const int tile : tiles) {
    const double seconds = request.tile_seconds[static_cast<std::size_t>(tile)];
    const int holder = request.tile_holders[static_cast<std::size_t>(tile)] - first_rank;
    const bool holder_in_team = holder >= 0 && holder < size;
    // The holder while it stays within the average; else the rank with the least key: a
    // tile with work goes to the least loaded rank, a tile without work (which changes no
    // load) to the rank with the fewest tiles; either way its holder first among equals.
    const auto key = [&](int r) {
      const auto u = static_cast<std::size_t>(r);
      return std::tuple(seconds > 0.0 ? load[u] : 0.0, r != holder, tile_count[u], r);
    };
    int chosen = 0;
    const bool holder_has_room =
        holder_in_team &&
        load[static_cast<std::size_t>(holder)] + seconds <= average * (1.0 + kLoadTolerance);
    if (holder_has_room) {
      chosen = holder;
    } else {
      for (int r = 1; r < size; ++r) {
        if (key(r) < key(chosen)) chosen = r;
      }
    }
    load[static_cast<std::size_t>(chosen)] += seconds;
    ++tile_count[static_cast<std::size_t>(chosen)];
    holders[static_cast<std::size_t>(tile)] = first_rank + chosen;
  }
}

/// Per team: I of its ranks' loads with the tiles held by `holders`.
std::vector<double> team_imbalances(const TeamRequest& request, std::span<const int> holders,
                                    int teams) {
  std::vector<double> rank_load(static_cast<std::size_t>(request.ranks), 0.0);
  for (std::size_t t = 0; t < holders.size(); ++t) {
    rank_load[static_cast<std::size_t>(holders[t])] += request.tile_seconds[t];
  }
  std::vector<double> imbalance;
  for (int team = 0; team < teams; ++team) {
    imbalance.push_back(load_imbalance(
        std::span<const double>(rank_load)
            .subspan(static_cast<std::size_t>(team * request.team_size),
                     static_cast<std::size_t>(team_ranks(team, request.ranks, request.team_size)))));
  }
  return imbalance;
}

}  // namespace

TeamPlan plan_teams(const TeamRequest& request) {
  check_request(request);
  const int teams = (request.ranks + request.team_size - 1) / request.team_size;
  const std::vector<int> part = partition(request, teams);
  const std::vector<int> team_of_part = teams_for_parts(request, part, teams);

  TeamPlan plan;
  plan.team_size = request.team_size;
  for (int r = 0; r < request.ranks; ++r) plan.rank_team.push_back(r / request.team_size);
  plan.tile_team.reserve(part.size());
  for (const int p : part) plan.tile_team.push_back(team_of_part[static_cast<std::size_t>(p)]);
  plan.tile_holders.assign(request.tile_holders.begin(), request.tile_holders.end());
  for (int team = 0; team < teams; ++team) {
    balance_team(request, team, plan.tile_team, plan.tile_holders);
  }
  for (std::size_t t = 0; t < plan.tile_holders.size(); ++t) {
    if (plan.tile_holders[t] != request.tile_holders[t]) {
      plan.moves.push_back({static_cast<int>(t), request.tile_holders[t], plan.tile_holders[t]});
    }
  }
  plan.cut = edge_cut(request.traffic, plan.tile_team);
  plan.imbalance_before = team_imbalances(request, request.tile_holders, teams);
  plan.imbalance_after = team_imbalances(request, plan.tile_holders, teams);
  return plan;
}

std::vector<int> consecutive_teams(std::span<const int> tile_holders, int team_size) {
  if (team_size < 1) {
    throw std::invalid_argument("consecutive_teams: team size " + std::to_string(team_size) +
                                " is below 1");
  }
  std::vector<int> teams;
  teams.reserve(tile_holders.size());
  for (std::size_t t = 0; t < tile_holders.size(); ++t) {
    if (tile_holders[t] < 0) {
      throw std::invalid_argument("consecutive_teams: tile " + std::to_string(t) +
                                  " is held by rank " + std::to_string(tile_holders[t]));
    }
    teams.push_back(tile_holders[t] / team_size);
  }
  return teams;
}

EdgeCut edge_cut(std::span<const TileTraffic> traffic, std::span<const int> tile_team) {
  check_traffic(traffic, tile_team.size(), "edge_cut");
  EdgeCut cut;
  for (const TileTraffic& t : traffic) {
    cut.total_bytes += t.bytes;
    if (tile_team[static_cast<std::size_t>(t.first)] != tile_team[static_cast<std::size_t>(t.second)]) {
      cut.crossing_bytes += t.bytes;
    }
  }
  return cut;
}

double load_imbalance(std::span<const double> loads) noexcept {
  if (loads.empty()) return 0.0;
  const double average =
      std::accumulate(loads.begin(), loads.end(), 0.0) / static_cast<double>(loads.size());
  if (average <= 0.0) return 0.0;
  return (*std::max_element(loads.begin(), loads.end()) - average) / average;
}

}  // namespace bellows::runtime
