// TeamLB between iterations (MessageLogOptions::plan_teams): the decision is plan_teams()
// (runtime_client/teams); this file gathers its inputs, broadcasts its choice and carries it
// out with the machinery of a re-grid (pending_moves_, applied at the next iteration's start).
//
// The inputs: the tiles of every collection, numbered as for_each_task_by_tile numbers them,
// on their holders; per tile the compute seconds measured for the tasks it decides in each
// iteration of the window (task_seconds_by_iteration_: the one iteration after an attach, up
// to MessageLogOptions::load_window later; each rank adds up its own, a stolen task where it
// ran, and the first rank sums them and weighs each tile by its median over the window,
// TileLoadHistory, each rank's slowness from its tiles' seconds per flop class by class,
// rank_slowness_by_class);
// and per task, the tiles it reads: a collection tile, or the tile that decides the
// producing task. A rank receives a tile once per iteration for all its readers, which is how
// plan_teams() counts bytes, so its prediction is the log's size (runtime_teams_message_log_np*
// checks this for GEMM, for the first iteration under a plan on Cholesky and under a re-plan
// on GEMM).
//
// A re-plan (replan_due): at a boundary that takes a checkpoint, once a full window was
// weighed since the last plan, the first rank plans again and replan_decision() compares the
// heaviest rank's predicted seconds under the teams and holders now with the plan's. A plan
// that does not pay is shared as an empty one, and every rank keeps its teams, tiles, log and
// checkpoints. One that pays is applied as the first plan is: the log kept under the old teams
// is dropped and the copies are set aside (before_plan_), the moves are carried out as the next
// iteration starts, and the checkpoint of that boundary, under the new teams, completes before
// its tasks send anything, so no roll-back mixes logs kept under two groupings. A rank lost
// before that checkpoint is complete gives the plan up: every rank rolls back to the copies
// set aside, under the tiles' owners and teams from before it (settle_plan_before_recovery).
//
// The plan is shared as the runtime's other collectives between iterations are: each one
// completes asleep under the armed watch (wait_watching_peers), and nothing of it is applied
// until a barrier says that every rank holds it. A rank lost on the way gives the plan up on
// every survivor (a rank lost before that barrier stops every other rank in it), and the
// iteration reports the loss, recovered from as one lost in it (docs/teams.md).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "bellows/runtime/message_logging.hpp"
#include "bellows/runtime/team_load.hpp"
#include "bellows/runtime/teams.hpp"
#include "comm_engine.hpp"
#include "engine.hpp"
#include "watched_setup.hpp"

namespace bellows::runtime {

namespace {

/// Per tile number: its collection and position.
struct TilePlace {
  CollectionId collection = 0;
  int m = 0;
  int n = 0;
};

/// The buffers of the plan's collectives, of their own: when a rank is lost in one, it may
/// never complete, and they are then left to MPI until the process exits (keep_until_exit).
struct SharedPlan {
  /// Per iteration of the window, per tile: the seconds this rank measured; then, alike, the
  /// tasks it measured; then both again per tile and task class (tile t's class c at
  /// t * classes + c), for each rank's slowness class by class.
  std::vector<double> mine;
  std::vector<double> seconds;  ///< the same summed over the ranks, on the first rank
  /// Of `decided`; -1: plan_teams() refused on the first rank; 0: a re-plan that does not pay.
  std::int64_t length = 0;
  std::vector<std::int32_t> decided;
  std::vector<double> predicted;
  MPI_Request request = MPI_REQUEST_NULL;
};

}  // namespace

bool Engine::replan_due() const {
  const auto& log = options_.message_log;
  return log.enabled && log.plan_teams && log.replan && teams_planned_ && size_ > 1 &&
         task_seconds_by_iteration_.size() >= static_cast<std::size_t>(log.load_window) && !team_replay_ &&
         !resize_under_way_ && pending_moves_.empty() && checkpoints_->due(iteration_);
}

bool Engine::plan_teams_between_iterations(bool replan) {
  teams_planned_ = true;
  // The tiles, numbered as for_each_task_by_tile numbers them, and the tile deciding each
  // task: every rank needs them to add up its measured seconds per tile.
  std::vector<TilePlace> places;
  std::vector<int> holders;
  std::vector<double> tile_bytes;
  std::vector<std::size_t> base;
  for (std::size_t c = 0; c < collections_.size(); ++c) {
    const auto* coll = collections_[c];
    const auto first = places.size();
    base.push_back(first);
    places.resize(first + static_cast<std::size_t>(coll->tile_rows() * coll->tile_cols()));
    holders.resize(places.size(), 0);
    tile_bytes.resize(places.size(), 0.0);
    for (int n = 0; n < coll->tile_cols(); ++n) {
      for (int m = 0; m < coll->tile_rows(); ++m) {
        const auto s = first + coll->slot(m, n);
        places[s] = TilePlace{static_cast<CollectionId>(c), m, n};
        holders[s] = coll->owner(m, n);
        tile_bytes[s] = static_cast<double>(coll->rows_of_tile(m)) * coll->cols_of_tile(n) *
                        sizeof(double);
      }
    }
  }
  struct Decided {
    const TaskClass* cls;
    TaskKey key;
    int tile;
  };
  std::vector<Decided> tasks;
  std::unordered_map<TaskKey, int> tile_of;
  for_each_task_by_tile([&](const TaskClass& cls, const TaskKey& key, int tile) {
    tasks.push_back(Decided{&cls, key, tile});
    tile_of.emplace(key, tile);
  });
  // Per iteration of the window and tile: the compute seconds this rank measured for the
  // tasks the tile decides (a stolen task counts where it ran) and how many ran, summed over
  // the ranks on the first.
  auto shared = std::make_unique<SharedPlan>();
  std::vector<double>& mine = shared->mine;
  const std::size_t tiles = places.size();
  const std::size_t classes = class_count();
  const std::size_t window = task_seconds_by_iteration_.size();
  const std::size_t by_class = 2 * window * tiles;  // where the per-class blocks start
  mine.assign(by_class + 2 * window * tiles * classes, 0.0);
  {
    std::lock_guard lock(cost_mutex_);
    for (std::size_t k = 0; k < window; ++k) {
      for (const auto& [key, seconds] : task_seconds_by_iteration_[k]) {
        const auto it = tile_of.find(key);
        if (it == tile_of.end() || it->second < 0) continue;
        const auto tile = static_cast<std::size_t>(it->second);
        mine[k * tiles + tile] += seconds;
        mine[(window + k) * tiles + tile] += 1.0;
        const std::size_t pair = tile * classes + static_cast<std::size_t>(key.task_class);
        mine[by_class + k * tiles * classes + pair] += seconds;
        mine[by_class + (window + k) * tiles * classes + pair] += 1.0;
      }
    }
  }
  std::vector<double>& seconds = shared->seconds;
  seconds.assign(mine.size(), 0.0);
  MPI_Request& request = shared->request;
  // A collective posted and completed under the watch; a rank lost gives the plan up.
  const auto completed = [&](int posted) {
    return posted == MPI_SUCCESS && wait_watching_peers(std::span<MPI_Request>(&request, 1));
  };
  const auto given_up = [&] {
    keep_until_exit(std::move(shared));
    return false;
  };
  if (!completed(MPI_Ireduce(mine.data(), seconds.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_SUM, 0,
                             comm_, &request))) {
    return given_up();
  }

  // [rank_team per rank, then per move (collection, m, n, to, tasks)], from the first rank.
  std::vector<std::int32_t>& decided = shared->decided;
  TeamsApplied applied;
  std::string failure;  // the first rank's: why plan_teams() refused
  if (rank_ == 0) {
    std::vector<std::uint32_t> tasks_of_tile(places.size(), 0);
    std::vector<double> tile_flops(places.size(), 0.0);
    std::vector<double> tile_class_flops(places.size() * classes, 0.0);  // tile t's class c at t * classes + c
    std::vector<TileTraffic> traffic;
    std::vector<InputSource> inputs;
    for (const auto& t : tasks) {
      if (t.tile < 0) continue;  // no tile decides it: it goes nowhere with the tiles
      ++tasks_of_tile[static_cast<std::size_t>(t.tile)];
      tile_flops[static_cast<std::size_t>(t.tile)] += t.cls->flops(t.key);
      tile_class_flops[static_cast<std::size_t>(t.tile) * classes + static_cast<std::size_t>(t.key.task_class)] +=
          t.cls->flops(t.key);
      inputs.clear();
      t.cls->inputs(t.key, inputs);
      for (const auto& in : inputs) {
        int read = -1;
        if (in.kind == InputSource::Kind::collection) {
          read = static_cast<int>(base.at(in.tile.collection) +
                                  collections_.at(in.tile.collection)->slot(in.tile.m, in.tile.n));
        } else if (in.kind == InputSource::Kind::task) {
          const auto it = tile_of.find(in.producer);
          if (it != tile_of.end()) read = it->second;
        }
        if (read >= 0) traffic.push_back(TileTraffic{t.tile, read, tile_bytes[static_cast<std::size_t>(read)]});
      }
    }
    const int team_size = options_.message_log.team_size == 0
                              ? size_
                              : std::min(options_.message_log.team_size, size_);
    TeamPlan plan;
    bool keep_teams = false;
    try {
      TileLoadHistory history(options_.message_log.load_window);
      for (std::size_t k = 0; k < window; ++k) {
        history.add_iteration(std::span<const double>(seconds).subspan(k * tiles, tiles),
                              std::span<const double>(seconds).subspan((window + k) * tiles, tiles));
      }
      // Each tile at the speed of the job's median rank, and each rank's slowness, class by
      // class so that a rank's mix of kernels does not read as slowness (rank_slowness_by_class):
      // a tile that leaves a slowed rank takes its seconds at its new rank's speed (a stolen
      // task's seconds count on the tile's holder here). Each (tile, class) weighs the median
      // of its seconds over the window, as each tile does.
      const auto measured = history.loads();
      TileLoadHistory class_history(options_.message_log.load_window);
      const std::span<const double> class_seconds = std::span<const double>(seconds).subspan(by_class);
      for (std::size_t k = 0; k < window; ++k) {
        class_history.add_iteration(class_seconds.subspan(k * tiles * classes, tiles * classes),
                                    class_seconds.subspan((window + k) * tiles * classes, tiles * classes));
      }
      const auto measured_by_class = class_history.loads();
      std::vector<double> rank_measured(static_cast<std::size_t>(size_) * classes, 0.0);
      std::vector<double> rank_flops(static_cast<std::size_t>(size_) * classes, 0.0);
      for (std::size_t t = 0; t < tiles; ++t) {
        const auto on = static_cast<std::size_t>(holders[t]);
        for (std::size_t c = 0; c < classes; ++c) {
          rank_measured[on * classes + c] += measured_by_class[t * classes + c];
          rank_flops[on * classes + c] += tile_class_flops[t * classes + c];
        }
      }
      const auto slowness = rank_slowness_by_class(rank_measured, rank_flops, classes);
      applied.rank_slowness = slowness;
      std::vector<double> loads(tiles, 0.0);
      for (std::size_t t = 0; t < tiles; ++t) loads[t] = measured[t] / slowness[static_cast<std::size_t>(holders[t])];
      TeamRequest weighed{size_, team_size, loads, holders, traffic, TeamWeighting::load, TeamUnit::ranks};
      weighed.rank_slowness = slowness;
      plan = plan_teams(weighed);
      // The heaviest rank now and under the plan, for the gain it predicts.
      std::vector<double> rank_seconds_now(static_cast<std::size_t>(size_), 0.0);
      std::vector<double> rank_seconds_planned(static_cast<std::size_t>(size_), 0.0);
      for (std::size_t t = 0; t < tiles; ++t) {
        const auto now_on = static_cast<std::size_t>(holders[t]);
        const auto planned_on = static_cast<std::size_t>(plan.tile_holders[t]);
        rank_seconds_now[now_on] += loads[t] * slowness[now_on];
        rank_seconds_planned[planned_on] += loads[t] * slowness[planned_on];
      }
      const auto now = message_cut(traffic, holders, message_log_.rank_team());
      const auto decision = replan_decision(
          ReplanFacts{rank_seconds_now, rank_seconds_planned, now.crossing_bytes, plan.cut.crossing_bytes,
                      plan.reference_cut ? plan.reference_cut->crossing_bytes : -1.0, plan.cut_bound,
                      options_.message_log.replan_min_gain});
      applied.predicted_gain = decision.gain;
      keep_teams = replan && !decision.replan;
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (keep_teams) plan = TeamPlan{};  // shared as an empty plan: every rank keeps what it has
    decided.assign(plan.rank_team.begin(), plan.rank_team.end());
    for (const auto& move : plan.moves) {
      const auto& at = places[static_cast<std::size_t>(move.tile)];
      decided.insert(decided.end(), {static_cast<std::int32_t>(at.collection), at.m, at.n, move.to,
                                     static_cast<std::int32_t>(tasks_of_tile[static_cast<std::size_t>(move.tile)])});
    }
    applied.tiles_moved = plan.moves.size();
    applied.predicted_cut = plan.cut.fraction();
    applied.predicted_logged_bytes = plan.cut.logged_bytes;
    for (const double i : plan.imbalance_before) applied.imbalance_before = std::max(applied.imbalance_before, i);
    for (const double i : plan.imbalance_after) applied.imbalance_after = std::max(applied.imbalance_after, i);
  }
  // A length of -1 tells every rank that the plan failed, so that none waits for the rest.
  std::int64_t& length = shared->length;
  length = failure.empty() ? static_cast<std::int64_t>(decided.size()) : -1;
  if (!completed(MPI_Ibcast(&length, 1, MPI_INT64_T, 0, comm_, &request))) return given_up();
  if (length < 0) {
    throw std::runtime_error("TeamLB between iterations: plan_teams() refused on the first rank" +
                             (failure.empty() ? std::string() : ": " + failure));
  }
  if (length == 0) return true;  // a re-plan that does not pay: the teams and tiles stay
  decided.resize(static_cast<std::size_t>(length));
  if (!completed(MPI_Ibcast(decided.data(), static_cast<int>(length), MPI_INT32_T, 0, comm_, &request))) {
    return given_up();
  }

  // The plan's predictions, [cut, I before, I after, gain, logged bytes per rank, slowness
  // per rank], from the first rank.
  constexpr std::size_t kLogged = 4;
  const auto ranks = static_cast<std::size_t>(size_);
  std::vector<double>& predicted = shared->predicted;
  predicted.assign(kLogged + 2 * ranks, 0.0);
  if (rank_ == 0) {
    predicted[0] = applied.predicted_cut;
    predicted[1] = applied.imbalance_before;
    predicted[2] = applied.imbalance_after;
    predicted[3] = applied.predicted_gain;
    std::copy(applied.predicted_logged_bytes.begin(), applied.predicted_logged_bytes.end(),
              predicted.begin() + kLogged);
    std::copy(applied.rank_slowness.begin(), applied.rank_slowness.end(), predicted.begin() + kLogged + ranks);
  }
  if (!completed(MPI_Ibcast(predicted.data(), static_cast<int>(predicted.size()), MPI_DOUBLE, 0, comm_, &request))) {
    return given_up();
  }
  // Every rank holds the plan: a rank that stops sharing it stops every other one here, so
  // that none applies it while another gives it up.
  if (!completed(MPI_Ibarrier(comm_, &request))) return given_up();
  applied.predicted_cut = predicted[0];
  applied.imbalance_before = predicted[1];
  applied.imbalance_after = predicted[2];
  applied.predicted_gain = predicted[3];
  applied.predicted_logged_bytes.assign(predicted.begin() + kLogged, predicted.begin() + kLogged + ranks);
  applied.rank_slowness.assign(predicted.begin() + kLogged + ranks, predicted.end());
  applied.before_iteration = iteration_ + 1;
  applied.iterations_weighed = static_cast<int>(window);
  applied.replanned = replan;
  applied.rank_team.assign(decided.begin(), decided.begin() + size_);
  pending_moves_.clear();
  for (auto at = static_cast<std::size_t>(size_); at + 5 <= decided.size(); at += 5) {
    pending_moves_.push_back(TileMove{static_cast<CollectionId>(decided[at]), decided[at + 1],
                                      decided[at + 2], decided[at + 3],
                                      static_cast<std::uint32_t>(decided[at + 4])});
  }
  applied.tiles_moved = pending_moves_.size();
  // The new teams log from the next checkpoint on: the log kept under the old ones is
  // dropped, and the next boundary (after the moves) takes a checkpoint under them. The copies
  // from before, the tiles' owners before the moves and the old teams are kept until that
  // checkpoint is complete everywhere: a loss meanwhile gives the plan up and rolls back to
  // them (settle_plan_before_recovery).
  StateBeforePlan before;
  before.boundary = iteration_;
  before.rank_team = message_log_.rank_team();
  for (const auto* c : collections_) {
    before.placements.push_back(c->placement());
    before.tile_owners.push_back(c->tile_owners());
  }
  before.teams_applied = teams_applied_;
  std::vector<std::string> nodes = checkpoints_->nodes();
  before.checkpoints = std::move(checkpoints_);
  checkpoints_ = std::make_unique<BuddyCheckpoints>(options_.checkpoint, node_of(options_.checkpoint));
  MessageLogOptions planned = options_.message_log;
  planned.rank_team = applied.rank_team;
  message_log_.attach(resolve_teams(planned, size_), rank_);
  comm_engine_->confine_steals(steal_partners(message_log_.rank_team(), rank_,
                                              options_.message_log.steal_across_teams));
  checkpoints_->set_teams(message_log_.rank_team());
  checkpoints_->attach(comm_, std::move(nodes));
  if (checkpoints_->enabled()) before_plan_ = std::move(before);
  resize_under_way_ = ResizeUnderWay{ResizeKind::regrid, ResizePhase::attach};
  teams_applied_ = std::move(applied);
  {
    std::lock_guard lock(cost_mutex_);
    task_seconds_by_iteration_.clear();  // the tiles move: the next window weighs them where they go
  }
  return true;
}

}  // namespace bellows::runtime
