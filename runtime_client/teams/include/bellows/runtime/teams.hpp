#pragma once
// Teams for message logging, chosen as TeamLB chooses them: Meneses, Kale and Bronevetsky,
// "Dynamic Load Balance for Optimized Message Logging in Fault Tolerant HPC Applications",
// section IV. Ranks are grouped into teams; only tiles sent between teams would be logged
// (by the sender, until the next checkpoint), so the teams should hold the ranks and tiles
// that talk to each other, and each team's ranks should carry equal work.
//
// What crosses: a rank receives a tile once per iteration however many of its tasks read it
// (remote tiles are fetched once per iteration and cached, docs/runtime.md), so the bytes of
// a layout are its messages: one per (tile, receiving rank other than the tile's holder). The
// edge cut of a plan is the share of those bytes sent between teams, as section V measures
// it ("of the total number of bytes sent between different ranks").
//
// Two ways to choose, both with METIS_PartGraphKway and a fixed seed:
//
//   TeamUnit::ranks  (the default) the graph of ranks: each rank weighs the seconds of the
//       tiles it holds, each pair of ranks the bytes of their messages. METIS cuts it into
//       teams balanced in ranks and in load (two constraints); teams are then made exactly
//       T ranks (the last team smaller when T does not divide the ranks) by moving the rank
//       whose move adds the fewest crossing bytes, and improved by swapping two ranks of
//       different teams while a swap lowers the crossing bytes without taking a team's load
//       more than 5 % past its share of the job's (the best swap first). METIS is a
//       heuristic and can miss a grouping as plain as a row of the process grid, so teams of
//       consecutive ranks, improved alike, are the other candidate: the grouping with the
//       lesser load excess, then the fewer crossing bytes, is TeamLB's own (METIS' on a
//       tie). The tiles stay where they are, except for the balancing inside each team, so a
//       block-cyclic layout keeps the reuse it has.
//
//       The bound on the cut. Evening loads costs bytes: a team mixed for balance, and a
//       tile moved inside it, needs panels from other teams. So the plan is the most
//       balanced of several, each balanced inside its teams as below, whose crossing bytes
//       and edge cut are each at most (1 + TeamRequest::cut_bound) times the load-blind
//       partition's (the reference below; 10 % by default, the paper's own gap being 0.26
//       against 0.18). Most balanced: the least loaded most loaded rank, then the fewer
//       crossing bytes, then the earlier in this order: TeamLB's own grouping; the
//       reference's, which is always within the bound; consecutive teams and METIS' teams
//       under imbalance tolerances of 3, 10 and 25 %, each as it is and improved by swaps
//       under load tolerances of 5, 10 and 25 %; and the groupings on the way from the
//       reference's teams by swaps that lower the heaviest team's load per rank while the
//       ranks' graph crosses at most (1 + cut_bound) times the reference's bytes. A zero
//       bound thus keeps the reference's cut (or a lesser one).
//   TeamUnit::tiles  the paper's own (IV-A: objects partitioned into teams of consecutive
//       PEs). The graph of tiles: each tile weighs the seconds of the tasks that write it,
//       each pair the bytes one reads of the other. METIS cuts it into one part per team of
//       consecutive ranks (team t: ranks t*T .. t*T+T-1), part targets in proportion to the
//       team's ranks; each part goes to the team of its size whose ranks already hold most
//       of its tiles. The tile graph cannot see that a rank receives a tile once for all of
//       its readers, so this may scatter a grid's tiles and send more (bench/teams.cpp
//       measures by how much).
//
// Then, inside each team, its tiles go to its ranks greedily (IV-B): the heaviest first, each
// to the rank least loaded so far (which keeps I = (max - avg) / avg of the team's loads
// lowest), a tie going to the tile's holder, then to the rank with the fewest tiles, then to
// the lowest rank. One departure from the paper, so that a team already balanced keeps its
// tiles: a tile stays with its holder, when the holder is in its team, as long as the
// holder's load stays within the team's average. So a tile with no work (an input only read)
// stays with a holder in its team, or else goes to the team's rank with the fewest tiles.
// With ranks of different speeds (TeamRequest::rank_slowness), a tile's seconds on a rank are
// its seconds times the rank's slowness, the team's average is what each rank would carry
// with the team's seconds spread in proportion to its speed, and the least loaded rank is the
// one that would finish the tile first.
//
// The reference: the same partition with every rank (or tile) weighing 1
// (TeamWeighting::uniform), the partition "without considering the load of the objects" that
// the paper compares TeamLB's edge cut with (section V: 0.26 against 0.18 on NPB-BT
// multi-zone), balanced inside its teams as TeamLB's are. The baseline: teams of consecutive ranks over the
// tiles where they are (consecutive_teams(), message_cut()).
//
// Nothing here sends a message, reads a clock or takes a lock; every rank computes the same
// plan from the same inputs.

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace bellows::runtime {

/// What one tile's tasks read of another per iteration: the tasks writing `reader` read
/// `bytes` of tile `read` (its size). An entry reading the tile itself is allowed and never
/// travels.
struct TileTraffic {
  int reader = -1;  ///< a tile, 0 .. tiles-1: the one whose writing tasks read
  int read = -1;    ///< a tile, 0 .. tiles-1: the one read
  double bytes = 0.0;
};

/// What the partitioner weighs.
enum class TeamWeighting {
  load,     ///< seconds of work (and, for ranks, also the rank count): TeamLB
  uniform,  ///< every rank or tile alike: the reference, blind to load
};

/// What the partitioner partitions (see the file comment).
enum class TeamUnit {
  ranks,  ///< the ranks' message graph; tiles move only inside a team
  tiles,  ///< the tiles' traffic graph, onto teams of consecutive ranks (section IV-A)
};

/// What plan_teams() decides from: one iteration (or an average of past ones) of a job.
struct TeamRequest {
  int ranks = 0;      ///< the job's ranks, 0 .. ranks-1
  int team_size = 0;  ///< T: ranks per team, 1 (message logging) .. ranks (one team)
  /// Per tile: the measured compute seconds of the tasks that write it, >= 0.
  std::span<const double> tile_seconds;
  /// Per tile: the rank that holds it now.
  std::span<const int> tile_holders;
  /// What tiles read of each other; several entries for one pair count once per rank.
  std::span<const TileTraffic> traffic;
  TeamWeighting weighting = TeamWeighting::load;
  TeamUnit unit = TeamUnit::ranks;
  /// Partitioning ranks and weighing load: how far the plan's crossing bytes and edge cut
  /// may each pass the load-blind partition's, as a fraction (0.10: at most 1.10 times).
  /// 0 keeps the load-blind partition's cut or less. Finite and not negative.
  double cut_bound = 0.10;
  /// Per rank: how many times longer than `tile_seconds` its tiles' tasks take there (a
  /// rank slowed down, TileLoadHistory's rank_slowness()); `tile_seconds` are then the
  /// seconds at slowness 1, a rank's load is its tiles' seconds times its slowness, and the
  /// balancing inside a team gives a slower rank fewer seconds of tiles. Empty: 1 for every
  /// rank. Else one per rank, each finite and above 0.
  std::span<const double> rank_slowness = {};
};

/// A tile that changes rank.
struct TileMove {
  int tile = -1;
  int from = -1;
  int to = -1;
  friend bool operator==(const TileMove&, const TileMove&) = default;
};

/// The bytes of one iteration's messages (see the file comment) that cross teams.
struct EdgeCut {
  double crossing_bytes = 0.0;  ///< bytes sent to a rank of another team
  double total_bytes = 0.0;     ///< bytes sent between different ranks
  /// Per rank: the bytes it sends to other teams, what it would log until a checkpoint.
  std::vector<double> logged_bytes;
  /// crossing_bytes / total_bytes, 0 when nothing is sent.
  [[nodiscard]] double fraction() const noexcept {
    return total_bytes > 0.0 ? crossing_bytes / total_bytes : 0.0;
  }
};

/// The teams and where the tiles go.
struct TeamPlan {
  int team_size = 0;
  std::vector<int> rank_team;     ///< per rank: its team, 0 .. teams-1
  std::vector<int> tile_holders;  ///< per tile: the rank that holds it after the plan
  std::vector<TileMove> moves;    ///< tiles whose holder changes, by tile
  EdgeCut cut;                    ///< of the messages with the plan's holders and teams
  /// Per team: I of its ranks' loads (seconds of the tiles they hold) with the tiles where
  /// they were, and after the plan.
  std::vector<double> imbalance_before;
  std::vector<double> imbalance_after;
  /// The request's cut_bound, and, partitioning ranks, the cut of the load-blind partition
  /// (TeamWeighting::uniform, balanced inside its teams alike) that `cut` was held within
  /// (1 + cut_bound) of: the plan's own cut when weighing uniformly. Partitioning tiles, no
  /// bound applies and there is none.
  double cut_bound = 0.0;
  std::optional<EdgeCut> reference_cut;
};

/// One plan TeamLB weighs: its cut and the seconds of its most loaded rank.
struct TeamCandidate {
  EdgeCut cut;
  double heaviest_rank_seconds = 0.0;
};

/// The index of the most balanced candidate (the least heaviest_rank_seconds) whose crossing
/// bytes and edge cut are each at most (1 + bound) times the reference's; among equally
/// balanced ones, the fewest crossing bytes, then the first. Throws std::invalid_argument for
/// a bound that is negative or not finite, or when no candidate is within the bound.
[[nodiscard]] std::size_t most_balanced_within(std::span<const TeamCandidate> candidates,
                                               const EdgeCut& reference, double bound);

/// Chooses teams and balances each (see the file comment). Throws std::invalid_argument,
/// naming the value, for ranks < 1, a team size outside 1 .. ranks, tile seconds and holders
/// of different counts, a holder outside the ranks, negative or non-finite seconds or bytes,
/// a traffic entry naming a tile that does not exist, a cut bound that is negative or not
/// finite, slowness not one per rank or not finite and above 0, or, partitioning tiles,
/// fewer tiles than teams; std::runtime_error when METIS
/// reports an error.
[[nodiscard]] TeamPlan plan_teams(const TeamRequest& request);

/// The baseline: per rank, its team among teams of `team_size` consecutive ranks
/// (rank / team_size). Throws std::invalid_argument for ranks < 1 or a team size outside
/// 1 .. ranks.
[[nodiscard]] std::vector<int> consecutive_teams(int ranks, int team_size);

/// The messages of one iteration with tiles on `tile_holders` and ranks in `rank_team`, and
/// the bytes among them that cross teams. Throws std::invalid_argument for a traffic entry
/// naming a tile outside tile_holders, a holder outside rank_team, or negative bytes.
[[nodiscard]] EdgeCut message_cut(std::span<const TileTraffic> traffic,
                                  std::span<const int> tile_holders,
                                  std::span<const int> rank_team);

/// I = (max - avg) / avg of `loads`: 0 for no loads or a zero average.
[[nodiscard]] double load_imbalance(std::span<const double> loads) noexcept;

}  // namespace bellows::runtime
