#include "bellows/runtime/teams.hpp"

#include <metis.h>

#include <algorithm>
#include <array>
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
/// The other groupings TeamLB weighs: METIS' teams under these imbalance tolerances and from
/// these seeds, and each grouping improved by swaps under these load tolerances.
constexpr std::array<real_t, 3> kMetisTolerances{1.03F, 1.10F, 1.25F};
constexpr std::array<idx_t, 1> kMetisSeeds{kMetisSeed};
constexpr std::array<double, 3> kSwapTolerances{0.05, 0.10, 0.25};
/// Relative rounding in comparing plans' loads and bytes.
constexpr double kRounding = 1e-12;
/// A rank's load may pass its team's average by this fraction (rounding) and keep a tile.
constexpr double kLoadTolerance = 1e-9;

std::string number(double value) {
  std::string text = std::to_string(value);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

std::size_t at(int index) { return static_cast<std::size_t>(index); }

/// How many times longer than its seconds a tile takes on `rank` (TeamRequest::rank_slowness).
double slowness_of(const TeamRequest& request, int rank) {
  return request.rank_slowness.empty() ? 1.0 : request.rank_slowness[at(rank)];
}

/// Tile `tile`'s seconds on `rank`.
double seconds_on(const TeamRequest& request, std::size_t tile, int rank) {
  return request.rank_slowness.empty() ? request.tile_seconds[tile]
                                       : request.tile_seconds[tile] * slowness_of(request, rank);
}

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
  if (!request.rank_slowness.empty() && request.rank_slowness.size() != at(request.ranks)) {
    throw std::invalid_argument("plan_teams: slowness of " + std::to_string(request.rank_slowness.size()) +
                                " ranks for a job of " + std::to_string(request.ranks) +
                                "; give one per rank, or none");
  }
  for (std::size_t r = 0; r < request.rank_slowness.size(); ++r) {
    const double slowness = request.rank_slowness[r];
    if (!std::isfinite(slowness) || slowness <= 0.0) {
      throw std::invalid_argument("plan_teams: rank " + std::to_string(r) + " has slowness " + number(slowness) +
                                  "; a slowness is finite and above 0");
    }
  }
  if (!std::isfinite(request.cut_bound) || request.cut_bound < 0.0) {
    throw std::invalid_argument("plan_teams: cut bound " + number(request.cut_bound) +
                                " is not a finite fraction of 0 or more");
  }
  const int teams = team_count(request.ranks, request.team_size);
  if (request.unit == TeamUnit::tiles && tiles < static_cast<std::size_t>(teams)) {
    throw std::invalid_argument("plan_teams: " + std::to_string(tiles) + " tiles cannot fill " +
                                std::to_string(teams) + " teams of " +
                                std::to_string(request.team_size) + " ranks");
  }
}

/// One message of an iteration: a tile sent to a rank that reads it.
struct Message {
  int tile = -1;
  int receiver = -1;
  double bytes = 0.0;
};

/// One iteration's messages: one per (tile, receiving rank), the tile's bytes, ordered by
/// tile, then receiver.
std::vector<Message> messages(std::span<const TileTraffic> traffic, std::span<const int> holders) {
  // Bucketed by tile (a counting sort), then each tile's messages sorted by receiver.
  std::vector<std::size_t> first(holders.size() + 1, 0);
  const auto travels = [&holders](const TileTraffic& t) {
    return holders[at(t.read)] != holders[at(t.reader)];
  };
  for (const TileTraffic& t : traffic) {
    if (travels(t)) ++first[at(t.read) + 1];
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  std::vector<Message> sent(first.back());
  std::vector<std::size_t> next(first.begin(), first.end() - 1);
  for (const TileTraffic& t : traffic) {
    if (travels(t)) sent[next[at(t.read)]++] = {t.read, holders[at(t.reader)], t.bytes};
  }
  for (std::size_t tile = 0; tile < holders.size(); ++tile) {
    std::sort(sent.begin() + static_cast<std::ptrdiff_t>(first[tile]),
              sent.begin() + static_cast<std::ptrdiff_t>(first[tile + 1]),
              [](const Message& a, const Message& b) { return a.receiver < b.receiver; });
  }
  std::size_t kept = 0;
  for (const Message& message : sent) {
    if (kept > 0 && sent[kept - 1].tile == message.tile &&
        sent[kept - 1].receiver == message.receiver) {
      sent[kept - 1].bytes = std::max(sent[kept - 1].bytes, message.bytes);
    } else {
      sent[kept++] = message;
    }
  }
  sent.resize(kept);
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

/// METIS' own choice of imbalance tolerance (1.03 for k-way).
constexpr real_t kMetisDefaultTolerance = 0.0F;

/// Per vertex: its part, part p targeting team p's share of the ranks in every constraint,
/// each constraint within `tolerance` (1.10: 10 % over the target; kMetisDefaultTolerance:
/// METIS' default), from `seed`.
std::vector<int> metis_parts(MetisGraph& graph, const TeamRequest& request, int teams,
                             real_t tolerance = kMetisDefaultTolerance, idx_t seed = kMetisSeed) {
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
  options[METIS_OPTION_SEED] = seed;
  std::vector<real_t> tolerances(static_cast<std::size_t>(graph.constraints), tolerance);
  idx_t count = static_cast<idx_t>(vertices);
  idx_t parts = teams;
  idx_t cut = 0;
  std::vector<idx_t> part(vertices, 0);
  const int status = METIS_PartGraphKway(&count, &graph.constraints, graph.xadj.data(),
                                         graph.adjncy.data(), graph.vwgt.data(), nullptr,
                                         graph.adjwgt.data(), &parts, target.data(),
                                         tolerance > 0.0F ? tolerances.data() : nullptr, options,
                                         &cut, part.data());
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

/// A grouping being improved by swaps: each rank's team, the bytes between each rank and the
/// ranks of each team, and each team's load, kept in step by swap().
struct SwapState {
  SwapState(const RankGraph& ranks_graph, std::vector<int> teams_of_ranks, int teams)
      : graph(ranks_graph), team(std::move(teams_of_ranks)),
        toward(team.size(), std::vector<double>(at(teams), 0.0)), team_load(at(teams), 0.0) {
    for (std::size_t r = 0; r < team.size(); ++r) {
      team_load[at(team[r])] += graph.load[r];
      for (std::size_t s = 0; s < team.size(); ++s) toward[r][at(team[s])] += graph.bytes[r][s];
    }
  }
  /// The gain of a swap: how many fewer bytes cross between the teams once ranks r and s (of
  /// different teams) trade teams (negative: more).
  [[nodiscard]] double gain(int r, int s) const {
    const int a = team[at(r)];
    const int b = team[at(s)];
    return toward[at(r)][at(b)] - toward[at(r)][at(a)] + toward[at(s)][at(a)] - toward[at(s)][at(b)] -
           2.0 * graph.bytes[at(r)][at(s)];
  }
  /// Ranks r and s (of different teams) trade teams.
  void swap(int r, int s) {
    const int a = team[at(r)];
    const int b = team[at(s)];
    for (std::size_t x = 0; x < team.size(); ++x) {
      toward[x][at(a)] += graph.bytes[x][at(s)] - graph.bytes[x][at(r)];
      toward[x][at(b)] += graph.bytes[x][at(r)] - graph.bytes[x][at(s)];
    }
    const double moved = graph.load[at(s)] - graph.load[at(r)];
    team_load[at(a)] += moved;
    team_load[at(b)] -= moved;
    team[at(r)] = b;
    team[at(s)] = a;
  }
  const RankGraph& graph;
  std::vector<int> team;
  std::vector<std::vector<double>> toward;  ///< toward[r][t]: bytes between rank r and team t's ranks
  std::vector<double> team_load;
};

/// Swaps two ranks of different teams while a swap lowers the crossing bytes, the best swap
/// first (ties: lower ranks), never taking a team's load more than `load_tolerance` past its
/// share of the job's load, or past its former load where it was already there.
void refine_by_swaps(const TeamRequest& request, const RankGraph& graph, std::vector<int>& team,
                     int teams, double load_tolerance = kTeamLoadTolerance) {
  SwapState state(graph, team, teams);
  const auto& team_load = state.team_load;
  double total_bytes = 0.0;
  for (const auto& row : graph.bytes) total_bytes += std::accumulate(row.begin(), row.end(), 0.0);
  const double total_load = std::accumulate(graph.load.begin(), graph.load.end(), 0.0);
  const bool weigh_load = request.weighting == TeamWeighting::load && total_load > 0.0;
  const auto cap = [&](int t) {
    return total_load * team_ranks(t, request.ranks, request.team_size) / request.ranks *
           (1.0 + load_tolerance);
  };
  const double least_gain = total_bytes * 1e-12;
  for (;;) {
    double best_gain = least_gain;
    int best_r = -1;
    int best_s = -1;
    for (int r = 0; r < request.ranks; ++r) {
      for (int s = r + 1; s < request.ranks; ++s) {
        const int a = state.team[at(r)];
        const int b = state.team[at(s)];
        if (a == b) continue;
        const double gain = state.gain(r, s);
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
    if (best_r < 0) break;
    state.swap(best_r, best_s);
  }
  team = std::move(state.team);
}

/// The ranks' message graph of the layout `request` starts from.
RankGraph rank_graph(const TeamRequest& request) {
  RankGraph ranks{std::vector<std::vector<double>>(at(request.ranks),
                                                   std::vector<double>(at(request.ranks), 0.0)),
                  std::vector<double>(at(request.ranks), 0.0)};
  for (const Message& message : messages(request.traffic, request.tile_holders)) {
    const int sender = request.tile_holders[at(message.tile)];
    ranks.bytes[at(sender)][at(message.receiver)] += message.bytes;
    ranks.bytes[at(message.receiver)][at(sender)] += message.bytes;
  }
  for (std::size_t t = 0; t < request.tile_holders.size(); ++t) {
    ranks.load[at(request.tile_holders[t])] += seconds_on(request, t, request.tile_holders[t]);
  }
  return ranks;
}

/// Whether any two ranks exchange bytes: without, any grouping cuts nothing.
bool any_bytes(const RankGraph& graph) {
  return std::any_of(graph.bytes.begin(), graph.bytes.end(), [](const std::vector<double>& row) {
    return std::any_of(row.begin(), row.end(), [](double bytes) { return bytes > 0.0; });
  });
}

/// Whether partitioning ranks has a choice to make: several teams of several ranks that
/// exchange bytes. Otherwise the teams are consecutive.
bool ranks_to_partition(const TeamRequest& request, int teams, const RankGraph& graph) {
  return teams > 1 && request.team_size > 1 && any_bytes(graph);
}

/// METIS over the ranks' graph, weighing the ranks' load when the request does (a second
/// constraint), made exactly T ranks per team; not yet numbered.
std::vector<int> metis_teams(const TeamRequest& request, const RankGraph& ranks, int teams,
                             real_t tolerance, idx_t seed) {
  std::map<std::pair<int, int>, double> pairs;
  for (int r = 0; r < request.ranks; ++r) {
    for (int s = r + 1; s < request.ranks; ++s) {
      if (ranks.bytes[at(r)][at(s)] > 0.0) pairs[{r, s}] = ranks.bytes[at(r)][at(s)];
    }
  }
  const double total_load = std::accumulate(ranks.load.begin(), ranks.load.end(), 0.0);
  MetisGraph graph;
  add_edges(pairs, at(request.ranks), graph);
  graph.constraints = request.weighting == TeamWeighting::load && total_load > 0.0 ? 2 : 1;
  for (const double seconds : ranks.load) {
    graph.vwgt.push_back(1);
    if (graph.constraints == 2) graph.vwgt.push_back(seconds > 0.0 ? scaled(seconds, total_load) : 0);
  }
  std::vector<int> team = metis_parts(graph, request, teams, tolerance, seed);
  make_teams_exact(request, ranks.bytes, team, teams);
  return team;
}

/// The partition itself: METIS' teams and consecutive teams, each improved by swaps, the
/// one with the lesser load excess, then the fewer crossing bytes (METIS' on a tie). Under
/// TeamWeighting::uniform this is the load-blind reference.
std::vector<int> rank_teams(const TeamRequest& request, const RankGraph& ranks, int teams) {
  if (!ranks_to_partition(request, teams, ranks)) {
    return consecutive_teams(request.ranks, request.team_size);
  }
  std::vector<int> partitioned =
      metis_teams(request, ranks, teams, kMetisDefaultTolerance, kMetisSeed);
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

/// From `team`, swaps two ranks of different teams while a swap lowers the load of the
/// heaviest team (per rank of it), the swap leaving it lowest first (ties: the fewer crossing
/// bytes, lower ranks), never taking the crossing bytes of the ranks' graph past `allowed`.
/// Returns every grouping on the way, not yet numbered.
std::vector<std::vector<int>> swaps_toward_balance(const TeamRequest& request,
                                                   const RankGraph& graph, std::vector<int> team,
                                                   int teams, double allowed) {
  const auto ranks = at(request.ranks);
  SwapState state(graph, std::move(team), teams);
  const auto& team_load = state.team_load;
  double crossing = 0.0;
  for (std::size_t r = 0; r < ranks; ++r) {
    for (std::size_t s = r + 1; s < ranks; ++s) crossing += state.team[r] != state.team[s] ? graph.bytes[r][s] : 0.0;
  }
  std::vector<double> per_rank(at(teams));
  for (int t = 0; t < teams; ++t) per_rank[at(t)] = 1.0 / team_ranks(t, request.ranks, request.team_size);
  const auto heaviest = [&](int a, double load_a, int b, double load_b) {
    double most = 0.0;
    for (int t = 0; t < teams; ++t) {
      const double load = t == a ? load_a : t == b ? load_b : team_load[at(t)];
      most = std::max(most, load * per_rank[at(t)]);
    }
    return most;
  };
  std::vector<std::vector<int>> visited;
  for (std::size_t step = 0; step < ranks; ++step) {
    const double now = heaviest(-1, 0.0, -1, 0.0);
    std::tuple<double, double, int, int> best{now * (1.0 - 1e-9), 0.0, -1, -1};
    for (int r = 0; r < request.ranks; ++r) {
      for (int s = r + 1; s < request.ranks; ++s) {
        const int a = state.team[at(r)];
        const int b = state.team[at(s)];
        if (a == b) continue;
        const double gain = state.gain(r, s);
        const double after = crossing - gain;
        if (after > allowed) continue;
        const double moved = graph.load[at(s)] - graph.load[at(r)];
        const std::tuple<double, double, int, int> candidate{
            heaviest(a, team_load[at(a)] + moved, b, team_load[at(b)] - moved), after, r, s};
        if (candidate < best) best = candidate;
      }
    }
    const auto [most, after, r, s] = best;
    if (r < 0) break;
    state.swap(r, s);
    crossing = after;
    visited.push_back(state.team);
  }
  return visited;
}

/// The other groupings TeamLB weighs (see the file comment), numbered, without repeats.
std::vector<std::vector<int>> other_groupings(const TeamRequest& request, const RankGraph& ranks,
                                              int teams, const std::vector<int>& reference) {
  std::vector<std::vector<int>> raw;
  raw.push_back(consecutive_teams(request.ranks, request.team_size));
  for (const real_t tolerance : kMetisTolerances) {
    for (const idx_t seed : kMetisSeeds) raw.push_back(metis_teams(request, ranks, teams, tolerance, seed));
  }
  std::vector<std::vector<int>> groupings;
  for (const std::vector<int>& team : raw) {
    groupings.push_back(team);
    for (const double tolerance : kSwapTolerances) {
      groupings.push_back(team);
      refine_by_swaps(request, ranks, groupings.back(), teams, tolerance);
    }
  }
  double reference_crossing = 0.0;
  for (int r = 0; r < request.ranks; ++r) {
    for (int s = r + 1; s < request.ranks; ++s) {
      if (reference[at(r)] != reference[at(s)]) reference_crossing += ranks.bytes[at(r)][at(s)];
    }
  }
  for (std::vector<int>& team : swaps_toward_balance(request, ranks, reference, teams,
                                                     reference_crossing * (1.0 + request.cut_bound))) {
    groupings.push_back(std::move(team));
  }
  for (std::vector<int>& team : groupings) number_by_lowest_rank(request, team, teams);
  std::sort(groupings.begin(), groupings.end());
  groupings.erase(std::unique(groupings.begin(), groupings.end()), groupings.end());
  return groupings;
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
  // The load every rank would carry with the team's seconds spread in proportion to its
  // speed: the average when the ranks are alike.
  double speed = 0.0;
  for (const int rank : ranks) speed += 1.0 / slowness_of(request, rank);
  const double average = request.rank_slowness.empty() ? team_seconds / static_cast<double>(size)
                                                       : team_seconds / speed;
  std::vector<double> load(ranks.size(), 0.0);
  std::vector<int> tile_count(ranks.size(), 0);
  for (const int tile : tiles) {
    const double seconds = request.tile_seconds[at(tile)];
    const auto found = std::find(ranks.begin(), ranks.end(), request.tile_holders[at(tile)]);
    const int holder = found == ranks.end() ? -1 : static_cast<int>(found - ranks.begin());
    const auto on = [&](int r) { return seconds * slowness_of(request, ranks[at(r)]); };
    // The holder while it stays within the average; else the rank with the least key: a
    // tile with work goes to the least loaded rank (with ranks of different speeds, the
    // one that would finish it first), a tile without work (which changes no load) to the
    // rank with the fewest tiles; either way its holder first among equals.
    const auto key = [&](int r) {
      const double loaded = request.rank_slowness.empty() ? load[at(r)] : load[at(r)] + on(r);
      return std::tuple(seconds > 0.0 ? loaded : 0.0, r != holder, tile_count[at(r)], r);
    };
    int chosen = 0;
    if (holder >= 0 && load[at(holder)] + on(holder) <= average * (1.0 + kLoadTolerance)) {
      chosen = holder;
    } else {
      for (int r = 1; r < size; ++r) {
        if (key(r) < key(chosen)) chosen = r;
      }
    }
    load[at(chosen)] += on(chosen);
    ++tile_count[at(chosen)];
    holders[at(tile)] = ranks[at(chosen)];
  }
}

/// Per team: I of its ranks' loads with the tiles on `holders`.
std::vector<double> team_imbalances(const TeamRequest& request, std::span<const int> holders,
                                    const std::vector<int>& rank_team, int teams) {
  std::vector<double> rank_load(at(request.ranks), 0.0);
  for (std::size_t t = 0; t < holders.size(); ++t) rank_load[at(holders[t])] += seconds_on(request, t, holders[t]);
  std::vector<std::vector<double>> loads(at(teams));
  for (int r = 0; r < request.ranks; ++r) loads[at(rank_team[at(r)])].push_back(rank_load[at(r)]);
  std::vector<double> imbalance;
  for (const auto& team_loads : loads) imbalance.push_back(load_imbalance(team_loads));
  return imbalance;
}

/// I of `ranks`' loads from `tiles` on `holders` (the tiles all held by those ranks).
double imbalance_of(const TeamRequest& request, const std::vector<int>& ranks,
                    const std::vector<int>& tiles, std::span<const int> holders) {
  std::vector<double> loads(ranks.size(), 0.0);
  for (const int tile : tiles) {
    const auto found = std::find(ranks.begin(), ranks.end(), holders[at(tile)]);
    loads[static_cast<std::size_t>(found - ranks.begin())] += seconds_on(request, at(tile), holders[at(tile)]);
  }
  return load_imbalance(loads);
}

/// The plan with ranks in `rank_team` and each tile in the team `tile_team` names, balanced
/// inside each team.
TeamPlan balanced_plan(const TeamRequest& request, std::vector<int> rank_team,
                       const std::vector<int>& tile_team, int teams) {
  TeamPlan plan;
  plan.team_size = request.team_size;
  plan.rank_team = std::move(rank_team);
  plan.cut_bound = request.cut_bound;
  plan.tile_holders.assign(request.tile_holders.begin(), request.tile_holders.end());
  std::vector<std::vector<int>> ranks_of(at(teams));
  for (int r = 0; r < request.ranks; ++r) ranks_of[at(plan.rank_team[at(r)])].push_back(r);
  std::vector<std::vector<int>> tiles_of(at(teams));
  for (std::size_t t = 0; t < tile_team.size(); ++t) {
    tiles_of[at(tile_team[t])].push_back(static_cast<int>(t));
  }
  for (int team = 0; team < teams; ++team) {
    const std::vector<int>& ranks = ranks_of[at(team)];
    const std::vector<int>& tiles = tiles_of[at(team)];
    balance_team(request, ranks, tiles, plan.tile_holders);
    // A team whose tiles all sat on its ranks keeps them there when the greedy pass leaves it
    // less balanced than it was (it can, by a little, on a team that was balanced already).
    const bool held_inside = std::all_of(tiles.begin(), tiles.end(), [&](int tile) {
      return std::find(ranks.begin(), ranks.end(), request.tile_holders[at(tile)]) != ranks.end();
    });
    if (held_inside && imbalance_of(request, ranks, tiles, plan.tile_holders) >
                           imbalance_of(request, ranks, tiles, request.tile_holders)) {
      for (const int tile : tiles) plan.tile_holders[at(tile)] = request.tile_holders[at(tile)];
    }
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

/// The plan with ranks in `rank_team`, the tiles staying in their holder's team.
TeamPlan plan_for_ranks(const TeamRequest& request, std::vector<int> rank_team, int teams) {
  std::vector<int> tile_team;
  tile_team.reserve(request.tile_holders.size());
  for (const int holder : request.tile_holders) tile_team.push_back(rank_team[at(holder)]);
  return balanced_plan(request, std::move(rank_team), tile_team, teams);
}

/// The seconds of the most loaded rank with the plan's tiles.
double heaviest_rank(const TeamRequest& request, const TeamPlan& plan) {
  std::vector<double> load(at(request.ranks), 0.0);
  for (std::size_t t = 0; t < plan.tile_holders.size(); ++t) {
    load[at(plan.tile_holders[t])] += seconds_on(request, t, plan.tile_holders[t]);
  }
  return *std::max_element(load.begin(), load.end());
}

/// TeamLB partitioning ranks and weighing load: the most balanced of its groupings whose cut
/// stays within the bound of the load-blind partition's (see the file comment).
TeamPlan bounded_rank_plan(const TeamRequest& request, int teams) {
  const RankGraph ranks = rank_graph(request);
  TeamRequest blind = request;
  blind.weighting = TeamWeighting::uniform;
  TeamPlan reference = plan_for_ranks(request, rank_teams(blind, ranks, teams), teams);
  if (!ranks_to_partition(request, teams, ranks)) {
    reference.reference_cut = reference.cut;
    return reference;
  }
  std::vector<TeamCandidate> weighed;
  std::vector<TeamPlan> plans;
  const auto weigh = [&](TeamPlan plan) {
    weighed.push_back({plan.cut, heaviest_rank(request, plan)});
    plans.push_back(std::move(plan));
  };
  // TeamLB's own grouping first, so that it wins a tie, then the reference, which is always
  // within the bound.
  std::vector<int> teamlb = rank_teams(request, ranks, teams);
  weigh(plan_for_ranks(request, teamlb, teams));
  if (reference.rank_team != teamlb) weigh(reference);
  for (std::vector<int>& team : other_groupings(request, ranks, teams, reference.rank_team)) {
    if (team != teamlb && team != reference.rank_team) weigh(plan_for_ranks(request, std::move(team), teams));
  }
  TeamPlan chosen = std::move(plans[most_balanced_within(weighed, reference.cut, request.cut_bound)]);
  chosen.reference_cut = reference.cut;
  return chosen;
}

}  // namespace

std::size_t most_balanced_within(std::span<const TeamCandidate> candidates,
                                 const EdgeCut& reference, double bound) {
  if (!std::isfinite(bound) || bound < 0.0) {
    throw std::invalid_argument("most_balanced_within: cut bound " + number(bound) +
                                " is not a finite fraction of 0 or more");
  }
  const auto within = [&](const EdgeCut& cut) {
    const double slack = (1.0 + bound) * (1.0 + kRounding);
    return cut.crossing_bytes <= reference.crossing_bytes * slack &&
           cut.fraction() <= reference.fraction() * slack;
  };
  std::size_t chosen = candidates.size();
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const TeamCandidate& candidate = candidates[c];
    if (!within(candidate.cut)) continue;
    if (chosen == candidates.size()) {
      chosen = c;
      continue;
    }
    const TeamCandidate& best = candidates[chosen];
    const double rounding = kRounding * std::max(best.heaviest_rank_seconds, 1e-300);
    if (candidate.heaviest_rank_seconds < best.heaviest_rank_seconds - rounding ||
        (candidate.heaviest_rank_seconds <= best.heaviest_rank_seconds + rounding &&
         candidate.cut.crossing_bytes < best.cut.crossing_bytes * (1.0 - kRounding))) {
      chosen = c;
    }
  }
  if (chosen == candidates.size()) {
    throw std::invalid_argument("most_balanced_within: none of the " +
                                std::to_string(candidates.size()) +
                                " candidates' cuts is within " + number(bound) +
                                " of the reference's " + number(reference.crossing_bytes) +
                                " crossing bytes");
  }
  return chosen;
}

TeamPlan plan_teams(const TeamRequest& request) {
  check_request(request);
  const int teams = team_count(request.ranks, request.team_size);
  if (request.unit == TeamUnit::tiles) {
    return balanced_plan(request, consecutive_teams(request.ranks, request.team_size),
                         tile_teams(request, teams), teams);
  }
  if (request.weighting == TeamWeighting::uniform) {
    TeamPlan plan = plan_for_ranks(request, rank_teams(request, rank_graph(request), teams), teams);
    plan.reference_cut = plan.cut;
    return plan;
  }
  return bounded_rank_plan(request, teams);
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
  for (const Message& message : messages(traffic, tile_holders)) {
    const int sender = tile_holders[at(message.tile)];
    cut.total_bytes += message.bytes;
    if (rank_team[at(sender)] != rank_team[at(message.receiver)]) {
      cut.crossing_bytes += message.bytes;
      cut.logged_bytes[at(sender)] += message.bytes;
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
