#pragma once
// Teams for message logging, chosen as TeamLB chooses them: Meneses, Kale and Bronevetsky,
// "Dynamic Load Balance for Optimized Message Logging in Fault Tolerant HPC Applications",
// section IV. Ranks are grouped into teams; only tiles sent between teams would be logged, so
// the teams should hold the tiles that talk to each other, and each team's ranks should carry
// equal work.
//
// What is partitioned: tiles, as the paper partitions objects (IV-A), not ranks. The teams are
// fixed sets of consecutive ranks (team t is ranks t*T .. t*T+T-1, the last team smaller when
// T does not divide the ranks). The tile graph (vertices: tiles weighted by the seconds of the
// tasks that write them; edges: the bytes two tiles exchange per iteration) is cut by METIS
// (METIS_PartGraphKway) into one part per team, each part's target weight in proportion to
// its team's ranks, so that the bytes crossing parts are few and the parts' loads even. Each
// part goes to the team of its size whose ranks already hold most of its tiles, so that few
// tiles move. Then, inside each team, the tiles go to the team's ranks greedily (IV-B): the
// heaviest first, each to the rank least loaded so far (which keeps I = (max - avg) / avg of
// the team's loads lowest), a tie going to the tile's current holder, then to the rank with
// the fewest tiles, then to the lowest rank. One departure from the paper, so that a team
// already balanced keeps its tiles: a tile stays with its holder, when the holder is in its
// team, as long as the holder's load stays within the team's average. So a tile with no
// work (an input only read) stays with a holder in its team, or else goes to the team's rank
// with the fewest tiles. Partitioning tiles rather than ranks lets teams be exactly T ranks while
// the graph follows the data; it also means a plan may move most tiles off the block-cyclic
// grid (regrid.hpp says what that costs in panel traffic).
//
// Why ranks are grouped consecutively: the paper's teams are runs of consecutive PEs too
// (section V); which ranks share a team matters to the logging only through the tiles they
// hold, and the plan chooses those.
//
// The reference: the same partitioner with every tile weighing 1 (TeamWeighting::tiles), the
// partition "without considering the load of the objects" that the paper compares TeamLB's
// edge cut with (section V: 0.26 against 0.18 on NPB-BT multi-zone). The baseline: teams of
// consecutive ranks over the tiles where they are now (consecutive_teams()).
//
// Nothing here sends a message, reads a clock or takes a lock; METIS is called with a fixed
// seed, so every rank computes the same plan from the same inputs.

#include <cstddef>
#include <span>
#include <vector>

namespace bellows::runtime {

/// The bytes two tiles exchange per iteration: what a task writing one reads of the other,
/// counted in either direction. An entry joining a tile to itself is allowed and never
/// crosses a team.
struct TileTraffic {
  int first = -1;   ///< a tile, 0 .. tiles-1
  int second = -1;  ///< another tile, 0 .. tiles-1
  double bytes = 0.0;
};

/// What the partitioner weighs tiles by.
enum class TeamWeighting {
  load,   ///< the seconds of the tasks that write the tile: TeamLB
  tiles,  ///< every tile alike: the reference partition, blind to load
};

/// What plan_teams() decides from: one iteration (or an average of past ones) of a job.
struct TeamRequest {
  int ranks = 0;      ///< the job's ranks, 0 .. ranks-1
  int team_size = 0;  ///< T: ranks per team, 1 (message logging) .. ranks (one team)
  /// Per tile: the measured compute seconds of the tasks that write it, >= 0.
  std::span<const double> tile_seconds;
  /// Per tile: the rank that holds it now.
  std::span<const int> tile_holders;
  /// The bytes between tiles; several entries for one pair add up.
  std::span<const TileTraffic> traffic;
  TeamWeighting weighting = TeamWeighting::load;
};

/// A tile that changes rank.
struct TileMove {
  int tile = -1;
  int from = -1;
  int to = -1;
  friend bool operator==(const TileMove&, const TileMove&) = default;
};

/// The bytes of a traffic graph that cross teams.
struct EdgeCut {
  double crossing_bytes = 0.0;  ///< bytes between tiles of different teams
  double total_bytes = 0.0;     ///< all bytes of the graph, self entries included
  /// crossing_bytes / total_bytes, 0 for a graph without bytes.
  [[nodiscard]] double fraction() const noexcept {
    return total_bytes > 0.0 ? crossing_bytes / total_bytes : 0.0;
  }
};

/// The teams and where the tiles go.
struct TeamPlan {
  int team_size = 0;
  std::vector<int> rank_team;     ///< per rank: its team, rank / team_size
  std::vector<int> tile_team;     ///< per tile: the team that holds it after the plan
  std::vector<int> tile_holders;  ///< per tile: the rank that holds it after the plan
  std::vector<TileMove> moves;    ///< tiles whose holder changes, by tile
  EdgeCut cut;                    ///< of the traffic, over tile_team
  /// Per team: I of its ranks' loads (seconds of the tiles they hold) with the tiles where
  /// they were, and after the plan.
  std::vector<double> imbalance_before;
  std::vector<double> imbalance_after;
};

/// Partitions the tiles into teams and balances each team (see the file comment). Throws
/// std::invalid_argument, naming the value, for ranks < 1, a team size outside 1 .. ranks,
/// tile seconds and holders of different counts, a holder outside the ranks, negative or
/// non-finite seconds or bytes, a traffic entry naming a tile that does not exist, or fewer
/// tiles than teams; std::runtime_error when METIS reports an error.
[[nodiscard]] TeamPlan plan_teams(const TeamRequest& request);

/// The baseline: per tile, the team of its current holder with teams of `team_size`
/// consecutive ranks (holder / team_size). Throws std::invalid_argument for a team size
/// below 1 or a negative holder.
[[nodiscard]] std::vector<int> consecutive_teams(std::span<const int> tile_holders, int team_size);

/// The bytes of `traffic` between tiles of different teams (tile_team: per tile, its team).
/// Throws std::invalid_argument for a traffic entry naming a tile outside tile_team, or
/// negative bytes.
[[nodiscard]] EdgeCut edge_cut(std::span<const TileTraffic> traffic, std::span<const int> tile_team);

/// I = (max - avg) / avg of `loads`: 0 for no loads or a zero average.
[[nodiscard]] double load_imbalance(std::span<const double> loads) noexcept;

}  // namespace bellows::runtime
