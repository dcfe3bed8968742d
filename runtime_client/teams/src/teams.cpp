#include "bellows/runtime/teams.hpp"

#include <metis.h>

#include <algorithm>
#include <cmath>
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
/// A team's load may pass its share of the job's load by this fraction when ranks are
/// swapped between teams to cut fewer bytes (METIS' own default tolerance is 3 %).
constexpr double kTeamLoadTolerance = 0.05;
/// A rank's load may pass its team's average by this fraction (rounding) and keep a tile.
constexpr double kLoadTolerance = 1e-9;

std::string number(double value) {
  std::string text = std::to_string(value);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

std::size_t at(int index) { return static_cast<std::size_t>(index); }

void check_traffic(std::span<const TileTraffic> traffic, std::size_t tiles, const char* where) {
  for (std::size_t e = 0; e < traffic.size(); ++e) {
    const TileTraffic& t = traffic[e];
    for (const int tile : {t.reader, t.read}) {
      if (tile < 0 || static_cast<std::size_t>(tile) >= tiles) {
        throw std::invalid_argument(std::string(where) + ": traffic entry " + std::to_string(e) +
                                    " names tile " + std::to_string(tile) + ", not one of the " +
                                    std::to_string(tiles) + " tiles");
      }
    }
    if (!std::isfinite(t.bytes) || t.bytes < 0.0) {
      throw std::invalid_argument(std::string(where) + ": traffic entry " + std::to_string(e) +
                                  " (tile " + std::to_string(t.reader) + " reading tile " +
                                  std::to_string(t.read) + ") has " + number(t.bytes) +
                                  " bytes; bytes are finite and not negative");
    }
  }
}

void check_team_size(int ranks, int team_size, const char* where) {
  if (ranks < 1) {
    throw std::invalid_argument(std::string(where) + ": " + std::to_string(ranks) +
                                " ranks; a job has at least 1");
  }
  if (team_size < 1 || team_size > ranks) {
    throw std::invalid_argument(std::string(where) + ": team size " + std::to_string(team_size) +
                                " is not between 1 and the job's " + std::to_string(ranks) +
                                " ranks");
  }
}

int team_count(int ranks, int team_size) { return (ranks + team_size - 1) / team_size; }

int team_ranks(int team, int ranks, int team_size) {
  return std::min(team_size, ranks - team * team_size);
}

void check_request(const TeamRequest& request) {
  check_team_size(request.ranks, request.team_size, "plan_teams");
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
  const int teams = team_count(request.ranks, request.team_size);
  if (request.unit == TeamUnit::tiles && tiles < static_cast<std::size_t>(teams)) {
    throw std::invalid_argument("plan_teams: " + std::to_string(tiles) + " tiles cannot fill " +
                                std::to_string(teams) + " teams of " +
                                std::to_string(request.team_size) + " ranks");
  }
}

/// One iteration's messages: per (tile, receiving rank), the tile's bytes.
std::map<std::pair<int, int>, double> messages(std::span<const TileTraffic> traffic,
                                               std::span<const int> holders) {
  std::map<std::pair<int, int>, double> sent;
  for (const TileTraffic& t : traffic) {
    const int receiver = holders[at(t.reader)];
    if (holders[at(t.read)] == receiver) continue;
    double& bytes = sent[{t.read, receiver}];
    bytes = std::max(bytes, t.bytes);
  }
  return sent;
}

idx_t scaled(double value, double total) {
  return static_cast<idx_t>(std::max(1.0, std::round(value / total * kWeightScale)));
}

/// Whether a graph has an edge for METIS to weigh: without one, any grouping cuts nothing.
bool any_bytes(const std::map<std::pair<int, int>, double>& pairs) {
  return std::any_of(pairs.begin(), pairs.end(), [](const auto& pair) { return pair.second > 0.0; });
}

/// A weighted undirected graph in METIS' compressed form.
struct MetisGraph {
  std::vector<idx_t> xadj;
  std::vector<idx_t> adjncy;
  std::vector<idx_t> adjwgt;
  std::vector<idx_t> vwgt;  ///< vertex by vertex, `constraints` weights each
  idx_t constraints = 1;
};

/// `pairs` (lower vertex, higher vertex) -> bytes, into METIS' adjacency.
void add_edges(const std::map<std::pair<int, int>, double>& pairs, std::size_t vertices,
               MetisGraph& graph) {
  double total = 0.0;
  for (const auto& [pair, bytes] : pairs) total += bytes;
  std::vector<std::vector<std::pair<idx_t, idx_t>>> neighbours(vertices);
  for (const auto& [pair, bytes] : pairs) {
    if (bytes <= 0.0) continue;
    const idx_t weight = scaled(bytes, total);
    neighbours[at(pair.first)].emplace_back(pair.second, weight);
    neighbours[at(pair.second)].emplace_back(pair.first, weight);
  }
  graph.xadj.assign(1, 0);
  for (const auto& list : neighbours) {
    for (const auto& [vertex, weight] : list) {
      graph.adjncy.push_back(vertex);
      graph.adjwgt.push_back(weight);
    }
    graph.xadj.push_back(static_cast<idx_t>(graph.adjncy.size()));
  }
}

/// Per vertex: its part, part p targeting team p's share of the ranks in every constraint.
std::vector<int> metis_parts(MetisGraph& graph, const TeamRequest& request, int teams) {
  const std::size_t vertices = graph.xadj.size() - 1;
  std::vector<real_t> target;
  for (int p = 0; p < teams; ++p) {
    for (idx_t c = 0; c < graph.constraints; ++c) {
      target.push_back(static_cast<real_t>(team_ranks(p, request.ranks, request.team_size)) /
                       static_cast<real_t>(request.ranks));
    }
  }
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_NUMBERING] = 0;
  options[METIS_OPTION_SEED] = kMetisSeed;
  idx_t count = static_cast<idx_t>(vertices);
  idx_t parts = teams;
  idx_t cut = 0;
  std::vector<idx_t> part(vertices, 0);
  const int status = METIS_PartGraphKway(&count, &graph.constraints, graph.xadj.data(),
                                         graph.adjncy.data(), graph.vwgt.data(), nullptr,
                                         graph.adjwgt.data(), &parts, target.data(), nullptr,
                                         options, &cut, part.data());
  if (status != METIS_OK) {
    throw std::runtime_error("plan_teams: METIS_PartGraphKway failed (status " +
                             std::to_string(status) + ") partitioning " +
                             std::to_string(vertices) + " vertices into " +
                             std::to_string(teams) + " teams");
  }
  return {part.begin(), part.end()};
}

// ---------------------------------------------------------------- teams of ranks

/// Moves ranks out of teams above their size into teams below it, each time the rank and
/// team that add the fewest crossing bytes (ties: lower rank, lower team).
void make_teams_exact(const TeamRequest& request, const std::vector<std::vector<double>>& bytes,
                      std::vector<int>& team, int teams) {
  std::vector<int> members(at(teams), 0);
  for (const int t : team) ++members[at(t)];
  const auto size = [&request](int t) { return team_ranks(t, request.ranks, request.team_size); };
  for (;;) {
    std::tuple<double, int, int> best{0.0, -1, -1};
    for (int r = 0; r < request.ranks; ++r) {
      const int from = team[at(r)];
      if (members[at(from)] <= size(from)) continue;
      for (int to = 0; to < teams; ++to) {
        if (members[at(to)] >= size(to)) continue;
        double added = 0.0;
        for (int other = 0; other < request.ranks; ++other) {
          if (other == r) continue;
          if (team[at(other)] == from) added += bytes[at(r)][at(other)];
          if (team[at(other)] == to) added -= bytes[at(r)][at(other)];
        }
        const std::tuple<double, int, int> candidate{added, r, to};
        if (std::get<1>(best) < 0 || candidate < best) best = candidate;
      }
    }
    const auto [added, rank, to] = best;
    if (rank < 0) return;
    --members[at(team[at(rank)])];
    ++members[at(to)];
    team[at(rank)] = to;
  }
}

/// Numbers full teams by their lowest rank; a smaller last team keeps the last number.
void number_by_lowest_rank(const TeamRequest& request, std::vector<int>& team, int teams) {
  std::vector<int> lowest(at(teams), request.ranks);
  for (int r = request.ranks - 1; r >= 0; --r) lowest[at(team[at(r)])] = r;
  std::vector<int> order(at(teams));
  std::iota(order.begin(), order.end(), 0);
  const bool short_last = request.ranks % request.team_size != 0;
  std::sort(order.begin(), order.end() - (short_last ? 1 : 0),
            [&lowest](int a, int b) { return lowest[at(a)] < lowest[at(b)]; });
  std::vector<int> number(at(teams));
  for (int i = 0; i < teams; ++i) number[at(order[at(i)])] = i;
  for (int& t : team) t = number[at(t)];
}

/// The ranks' message graph: bytes between each pair (both ways), and each rank's load.
struct RankGraph {
  std::vector<std::vector<double>> bytes;
  std::vector<double> load;
};

/// How far a grouping is from what is asked: teams' loads beyond their share of the job's
/// load by more than the tolerance (0 when weighing uniformly), then the crossing bytes.
std::pair<double, double> grouping_cost(const TeamRequest& request, const RankGraph& graph,
                                        const std::vector<int>& team, int teams) {
  double crossing = 0.0;
  for (int r = 0; r < request.ranks; ++r) {
    for (int s = r + 1; s < request.ranks; ++s) {
      if (team[at(r)] != team[at(s)]) crossing += graph.bytes[at(r)][at(s)];
    }
  }
  double excess = 0.0;
  const double total = std::accumulate(graph.load.begin(), graph.load.end(), 0.0);
  if (request.weighting == TeamWeighting::load && total > 0.0) {
    std::vector<double> team_load(at(teams), 0.0);
    for (int r = 0; r < request.ranks; ++r) team_load[at(team[at(r)])] += graph.load[at(r)];
    for (int t = 0; t < teams; ++t) {
      const double share = total * team_ranks(t, request.ranks, request.team_size) / request.ranks;
      excess = std::max(excess, team_load[at(t)] / share - (1.0 + kTeamLoadTolerance));
    }
  }
  return {std::max(0.0, excess), crossing};
}

/// Swaps two ranks of different teams while a swap lowers the crossing bytes, the best swap
/// first (ties: lower ranks), never taking a team's load past its share of the job's load
/// with the tolerance, or past its former load where it was already there.
void refine_by_swaps(const TeamRequest& request, const RankGraph& graph, std::vector<int>& team,
                     int teams) {
  const auto ranks = at(request.ranks);
  // toward[r][t]: the bytes between rank r and the ranks of team t.
  std::vector<std::vector<double>> toward(ranks, std::vector<double>(at(teams), 0.0));
  std::vector<double> team_load(at(teams), 0.0);
  double total_bytes = 0.0;
  for (std::size_t r = 0; r < ranks; ++r) {
    team_load[at(team[r])] += graph.load[r];
    for (std::size_t s = 0; s < ranks; ++s) {
      toward[r][at(team[s])] += graph.bytes[r][s];
      total_bytes += graph.bytes[r][s];
    }
  }
  const double total_load = std::accumulate(graph.load.begin(), graph.load.end(), 0.0);
  const bool weigh_load = request.weighting == TeamWeighting::load && total_load > 0.0;
  const auto cap = [&](int t) {
    return total_load * team_ranks(t, request.ranks, request.team_size) / request.ranks *
           (1.0 + kTeamLoadTolerance);
  };
  const double least_gain = total_bytes * 1e-12;
  for (;;) {
    double best_gain = least_gain;
    int best_r = -1;
    int best_s = -1;
    for (int r = 0; r < request.ranks; ++r) {
      for (int s = r + 1; s < request.ranks; ++s) {
        const int a = team[at(r)];
        const int b = team[at(s)];
        if (a == b) continue;
        const double gain = toward[at(r)][at(b)] - toward[at(r)][at(a)] + toward[at(s)][at(a)] -
                            toward[at(s)][at(b)] - 2.0 * graph.bytes[at(r)][at(s)];
        if (gain <= best_gain) continue;
        if (weigh_load) {
          const double moved = graph.load[at(s)] - graph.load[at(r)];
          const double new_a = team_load[at(a)] + moved;
          const double new_b = team_load[at(b)] - moved;
          if (new_a > std::max(cap(a), team_load[at(a)]) ||
              new_b > std::max(cap(b), team_load[at(b)])) {
            continue;
          }
        }
        best_gain = gain;
        best_r = r;
        best_s = s;
      }
    }
    if (best_r < 0) return;
    const int a = team[at(best_r)];
    const int b = team[at(best_s)];
    for (std::size_t x = 0; x < ranks; ++x) {
      toward[x][at(a)] += graph.bytes[x][at(best_s)] - graph.bytes[x][at(best_r)];
      toward[x][at(b)] += graph.bytes[x][at(best_r)] - graph.bytes[x][at(best_s)];
    }
    const double moved = graph.load[at(best_s)] - graph.load[at(best_r)];
    team_load[at(a)] += moved;
    team_load[at(b)] -= moved;
    team[at(best_r)] = b;
    team[at(best_s)] = a;
  }
}

std::vector<int> rank_teams(const TeamRequest& request, int teams) {
  if (teams == 1 || request.team_size == 1) {
    return consecutive_teams(request.ranks, request.team_size);
  }
  RankGraph ranks{std::vector<std::vector<double>>(at(request.ranks),
                                                   std::vector<double>(at(request.ranks), 0.0)),
                  std::vector<double>(at(request.ranks), 0.0)};
  std::map<std::pair<int, int>, double> pairs;
  for (const auto& [message, size] : messages(request.traffic, request.tile_holders)) {
    const int sender = request.tile_holders[at(message.first)];
    const int receiver = message.second;
    pairs[std::minmax(sender, receiver)] += size;
    ranks.bytes[at(sender)][at(receiver)] += size;
    ranks.bytes[at(receiver)][at(sender)] += size;
  }
  if (!any_bytes(pairs)) return consecutive_teams(request.ranks, request.team_size);
  for (std::size_t t = 0; t < request.tile_holders.size(); ++t) {
    ranks.load[at(request.tile_holders[t])] += request.tile_seconds[t];
  }
  const double total_load = std::accumulate(ranks.load.begin(), ranks.load.end(), 0.0);

  MetisGraph graph;
  add_edges(pairs, at(request.ranks), graph);
  graph.constraints = request.weighting == TeamWeighting::load && total_load > 0.0 ? 2 : 1;
  for (const double seconds : ranks.load) {
    graph.vwgt.push_back(1);
    if (graph.constraints == 2) graph.vwgt.push_back(seconds > 0.0 ? scaled(seconds, total_load) : 0);
  }
  std::vector<int> partitioned = metis_parts(graph, request, teams);
  make_teams_exact(request, ranks.bytes, partitioned, teams);
  refine_by_swaps(request, ranks, partitioned, teams);
  // METIS is a heuristic, and on a few dozen ranks it can miss a grouping as plain as the
  // consecutive one (a row of the process grid): that one, refined alike, is the other
  // candidate, and the cheaper grouping is taken (METIS' on a tie).
  std::vector<int> consecutive = consecutive_teams(request.ranks, request.team_size);
  refine_by_swaps(request, ranks, consecutive, teams);
  std::vector<int> team =
      grouping_cost(request, ranks, consecutive, teams) < grouping_cost(request, ranks, partitioned, teams)
          ? std::move(consecutive)
          : std::move(partitioned);
  number_by_lowest_rank(request, team, teams);
  return team;
}

// ---------------------------------------------------------------- tiles onto teams

/// Per tile: its team, the tile graph cut by METIS and the parts given to teams.
std::vector<int> tile_teams(const TeamRequest& request, int teams) {
  const std::size_t tiles = request.tile_seconds.size();
  if (teams == 1) return std::vector<int>(tiles, 0);
  std::map<std::pair<int, int>, double> pairs;
  for (const TileTraffic& t : request.traffic) {
    if (t.reader != t.read) pairs[std::minmax(t.reader, t.read)] += t.bytes;
  }
  std::vector<int> part;
  if (!any_bytes(pairs)) {
    part.assign(request.tile_holders.begin(), request.tile_holders.end());
    for (int& p : part) p /= request.team_size;
  } else {
    MetisGraph graph;
    add_edges(pairs, tiles, graph);
    const double total_seconds =
        std::accumulate(request.tile_seconds.begin(), request.tile_seconds.end(), 0.0);
    graph.vwgt.assign(tiles, 1);
    if (request.weighting == TeamWeighting::load && total_seconds > 0.0) {
      for (std::size_t t = 0; t < tiles; ++t) {
        const double seconds = request.tile_seconds[t];
        graph.vwgt[t] = seconds > 0.0 ? scaled(seconds, total_seconds) : 0;
      }
    }
    part = metis_parts(graph, request, teams);
  }

  // Parts to teams of their size, by the tiles of the part the team's ranks hold now, most
  // first (ties: lower part, lower team).
  std::vector<std::vector<long>> held(at(teams), std::vector<long>(at(teams), 0));
  for (std::size_t t = 0; t < tiles; ++t) {
    ++held[at(part[t])][at(request.tile_holders[t] / request.team_size)];
  }
  std::vector<std::tuple<long, int, int>> pairings;  // (-held, part, team)
  for (int p = 0; p < teams; ++p) {
    for (int t = 0; t < teams; ++t) {
      if (team_ranks(p, request.ranks, request.team_size) ==
          team_ranks(t, request.ranks, request.team_size)) {
        pairings.emplace_back(-held[at(p)][at(t)], p, t);
      }
    }
  }
  std::sort(pairings.begin(), pairings.end());
  std::vector<int> team_of_part(at(teams), -1);
  std::vector<bool> taken(at(teams), false);
  for (const auto& [negative_held, p, t] : pairings) {
    if (team_of_part[at(p)] >= 0 || taken[at(t)]) continue;
    team_of_part[at(p)] = t;
    taken[at(t)] = true;
  }
  for (int& p : part) p = team_of_part[at(p)];
  return part;
}

// ---------------------------------------------------------------- inside a team

/// IV-B inside one team: its tiles to its ranks (see the file comment).
void balance_team(const TeamRequest& request, const std::vector<int>& ranks,
                  std::vector<int> tiles, std::vector<int>& holders) {
  std::stable_sort(tiles.begin(), tiles.end(), [&request](int a, int b) {
    return request.tile_seconds[at(a)] > request.tile_seconds[at(b)];
  });
  const auto size = static_cast<int>(ranks.size());
  double team_seconds = 0.0;
  for (const int tile : tiles) team_seconds += request.tile_seconds[at(tile)];
  const double average = team_seconds / static_cast<double>(size);
  std::vector<double> load(ranks.size(), 0.0);
  std::vector<int> tile_count(ranks.size(), 0);
  for (const int tile : tiles) {
    const double seconds = request.tile_seconds[at(tile)];
    const auto found = std::find(ranks.begin(), ranks.end(), request.tile_holders[at(tile)]);
    const int holder = found == ranks.end() ? -1 : static_cast<int>(found - ranks.begin());
    // The holder while it stays within the average; else the rank with the least key: a
    // tile with work goes to the least loaded rank, a tile without work (which changes no
    // load) to the rank with the fewest tiles; either way its holder first among equals.
    const auto key = [&](int r) {
      return std::tuple(seconds > 0.0 ? load[at(r)] : 0.0, r != holder, tile_count[at(r)], r);
    };
    int chosen = 0;
    if (holder >= 0 && load[at(holder)] + seconds <= average * (1.0 + kLoadTolerance)) {
      chosen = holder;
    } else {
      for (int r = 1; r < size; ++r) {
        if (key(r) < key(chosen)) chosen = r;
      }
    }
    load[at(chosen)] += seconds;
    ++tile_count[at(chosen)];
    holders[at(tile)] = ranks[at(chosen)];
  }
}

/// Per team: I of its ranks' loads with the tiles on `holders`.
std::vector<double> team_imbalances(const TeamRequest& request, std::span<const int> holders,
                                    const std::vector<int>& rank_team, int teams) {
  std::vector<double> rank_load(at(request.ranks), 0.0);
  for (std::size_t t = 0; t < holders.size(); ++t) {
    rank_load[at(holders[t])] += request.tile_seconds[t];
  }
  std::vector<std::vector<double>> loads(at(teams));
  for (int r = 0; r < request.ranks; ++r) loads[at(rank_team[at(r)])].push_back(rank_load[at(r)]);
  std::vector<double> imbalance;
  for (const auto& team_loads : loads) imbalance.push_back(load_imbalance(team_loads));
  return imbalance;
}

}  // namespace

TeamPlan plan_teams(const TeamRequest& request) {
  check_request(request);
  const int teams = team_count(request.ranks, request.team_size);
  TeamPlan plan;
  plan.team_size = request.team_size;
  std::vector<int> tile_team;
  if (request.unit == TeamUnit::ranks) {
    plan.rank_team = rank_teams(request, teams);
    for (const int holder : request.tile_holders) tile_team.push_back(plan.rank_team[at(holder)]);
  } else {
    plan.rank_team = consecutive_teams(request.ranks, request.team_size);
    tile_team = tile_teams(request, teams);
  }

  plan.tile_holders.assign(request.tile_holders.begin(), request.tile_holders.end());
  for (int team = 0; team < teams; ++team) {
    std::vector<int> ranks;
    for (int r = 0; r < request.ranks; ++r) {
      if (plan.rank_team[at(r)] == team) ranks.push_back(r);
    }
    std::vector<int> tiles;
    for (std::size_t t = 0; t < tile_team.size(); ++t) {
      if (tile_team[t] == team) tiles.push_back(static_cast<int>(t));
    }
    balance_team(request, ranks, std::move(tiles), plan.tile_holders);
  }
  for (std::size_t t = 0; t < plan.tile_holders.size(); ++t) {
    if (plan.tile_holders[t] != request.tile_holders[t]) {
      plan.moves.push_back({static_cast<int>(t), request.tile_holders[t], plan.tile_holders[t]});
    }
  }
  plan.cut = message_cut(request.traffic, plan.tile_holders, plan.rank_team);
  plan.imbalance_before = team_imbalances(request, request.tile_holders, plan.rank_team, teams);
  plan.imbalance_after = team_imbalances(request, plan.tile_holders, plan.rank_team, teams);
  return plan;
}

std::vector<int> consecutive_teams(int ranks, int team_size) {
  check_team_size(ranks, team_size, "consecutive_teams");
  std::vector<int> teams;
  for (int r = 0; r < ranks; ++r) teams.push_back(r / team_size);
  return teams;
}

EdgeCut message_cut(std::span<const TileTraffic> traffic, std::span<const int> tile_holders,
                    std::span<const int> rank_team) {
  check_traffic(traffic, tile_holders.size(), "message_cut");
  for (std::size_t t = 0; t < tile_holders.size(); ++t) {
    if (tile_holders[t] < 0 || static_cast<std::size_t>(tile_holders[t]) >= rank_team.size()) {
      throw std::invalid_argument("message_cut: tile " + std::to_string(t) + " is held by rank " +
                                  std::to_string(tile_holders[t]) + ", not one of the " +
                                  std::to_string(rank_team.size()) + " ranks with a team");
    }
  }
  EdgeCut cut;
  cut.logged_bytes.assign(rank_team.size(), 0.0);
  for (const auto& [message, bytes] : messages(traffic, tile_holders)) {
    const int sender = tile_holders[at(message.first)];
    cut.total_bytes += bytes;
    if (rank_team[at(sender)] != rank_team[at(message.second)]) {
      cut.crossing_bytes += bytes;
      cut.logged_bytes[at(sender)] += bytes;
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
