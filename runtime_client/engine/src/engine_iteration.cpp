// An iteration from start to end (Runtime::run_iteration): the per-iteration state reset,
// the barrier, the roots queued, the devices and the communication thread started and
// joined, the end-of-iteration reductions that fill the report, and, after an expand, the
// tasks the new ranks stole pinned to them (pin_new_placements). A peer lost on the way
// ends the iteration in abandon_iteration (engine_recovery.cpp).

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/runtime/message_logging.hpp"
#include "comm_engine.hpp"
#include "engine.hpp"
#include "peer_watch.hpp"
#include "rank_set_text.hpp"
#include "sleeping_wait.hpp"

namespace bellows::runtime {

IterationReport Engine::run_iteration() {
  if (!lost_in_attach_.empty()) {
    throw std::runtime_error("run_iteration: ranks " + rank_set_text(lost_in_attach_) +
                             " were lost while the runtime attached to its communicator (its constructor)");
  }
  if (comm_ == MPI_COMM_NULL) {
    throw std::logic_error("run_iteration on a runtime that is between the halves of a shrink "
                           "or has left the job");
  }
  if (!lost_ranks_.empty()) {
    throw std::logic_error("run_iteration after iteration " + std::to_string(iteration_) +
                           " lost ranks " + rank_set_text(lost_ranks_) +
                           ": call recover() on the survivors' communicator first");
  }
  // A dead peer must not end this rank: during the iteration errors come back to the runtime,
  // which abandons the iteration (IterationReport::lost_ranks) instead of the job.
  const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
  const ErrorsReturned errors_returned(comm_);
  if (team_replay_ && !replaying(iteration_ + 1)) end_team_replay();
  iteration_memory_.start();
  // The watch from here: TeamLB's plan, the tile moves after a resize and the task count are
  // collectives too, and a peer lost in them is this iteration's loss.
  watch_->arm();
  if (!watch_->lost().empty()) {
    // Found lost by recover() while it checkpointed the state it restored.
    ++iteration_;
    return abandon_iteration(false);
  }
  const bool plan_due = options_.message_log.enabled && options_.message_log.plan_teams && !teams_planned_ &&
                        iterations_since_attach_ >= 1 && size_ > 1;
  if ((plan_due || replan_due()) && !plan_teams_between_iterations(!plan_due)) {
    ++iteration_;
    return abandon_iteration(false);
  }
  if (resize_under_way_) resize_under_way_->phase = ResizePhase::first_iteration_start;
  if (!pending_moves_.empty() && !apply_tile_moves()) {
    ++iteration_;
    return abandon_iteration(false);
  }
  // With logging between teams, the tiles as this iteration starts: what this rank keeps if
  // a loss in it rolls back only other teams (pointers only; a task writes a new tile).
  keep_tiles_at_start();
  if (options_.offload.enabled) plan_offloads();
  if (!local_tasks_known_ && !prepare_local_tasks()) {
    ++iteration_;
    return abandon_iteration(false);
  }
  ++iteration_;
  apply_slowdown();
  cache_.clear();
  remaining_flops_.store(local_flops_, std::memory_order_relaxed);
  local_remaining_.store(local_task_count_, std::memory_order_release);
  {
    std::lock_guard lock(priority_mutex_);
    remaining_by_priority_ = local_by_priority_;
  }
  completed_unreported_.store(0);
  completed_this_iteration_.store(0);
  ready_samples_sum_.store(0);
  first_task_steady_ns_.store(0);
  roots_queued_.store(false, std::memory_order_release);
  if (trace_) trace_->begin_iteration(iteration_);
  {
    std::lock_guard lock(cost_mutex_);
    compute_seconds_this_iteration_ = 0.0;
    flops_this_iteration_ = 0.0;
    tasks_measured_this_iteration_ = 0;
    // TeamLB plans after this iteration when it has not planned since the attach, and weighs
    // it for a re-plan later when it may plan again.
    measuring_task_seconds_ = options_.message_log.enabled && options_.message_log.plan_teams &&
                              (!teams_planned_ || options_.message_log.replan);
    task_seconds_this_iteration_.clear();
  }

  if (link_) {
    // Collections are the application's host memory, which it may read or write between
    // iterations: each iteration starts with none of their tiles in device memory.
    for (auto* coll : collections_) {
      coll->for_each_local_tile([](int, int, Tile& t) { t.set_residency(Tile::kOnHost); });
    }
  }
  watch_->arm();
  if (!comm_engine_->barrier_without_spinning(*watch_)) return abandon_iteration(false);
  iteration_start_ = Clock::now();
  // The boundary after iteration_ - 1: the checkpoint's transfers overlap this iteration,
  // except for the first one after a resize, which completes before the tasks start, as does
  // the first one after a team roll-back's replay (until it is complete, a loss rolls every
  // rank back to the checkpoint re-homed for the replay).
  // Not while some teams replay: the ranks are at different iterations until it ends.
  if (!replaying(iteration_) && checkpoints_->due(iteration_ - 1)) {
    const bool first_since_resize =
        (!checkpoints_->last_complete() || replay_checkpoint_) && iteration_ > 1 && !collections_.empty();
    if (first_since_resize && resize_under_way_) resize_under_way_->phase = ResizePhase::first_checkpoint;
    checkpoints_->take(iteration_ - 1, collections_);
    if (first_since_resize && !complete_checkpoint_before_tasks()) return abandon_iteration(false);
  }
  if (resize_under_way_) resize_under_way_->phase = ResizePhase::first_iteration_tasks;
  for (auto& d : devices_) d->start();
  comm_engine_->start(*watch_);
  if (replaying(iteration_) && !team_replay_->here) replay_logged_outputs();
  {
    std::vector<TileIndex> fetches;
    for (const auto& key : local_roots_) {
      fetches.clear();
      std::unique_lock lock(mutex_);
      PendingTask& p = instantiate(key, fetches);
      if (p.missing == 0) {
        PendingTask ready = std::move(p);
        pending_.erase(key);
        lock.unlock();
        make_ready(key, std::move(ready));
      } else {
        lock.unlock();
      }
      request_fetches(fetches);
    }
  }
  roots_queued_.store(true, std::memory_order_release);
  comm_engine_->notify();
  comm_engine_->join();
  if (comm_engine_->abandoned()) return abandon_iteration(true);
  for (auto& d : devices_) d->stop();
  const double checkpoint_seconds = checkpoints_->complete_transfers([this] {
    watch_->poll();
    return !watch_->lost().empty();
  });
  if (checkpoint_seconds < 0.0) return abandon_iteration(false);
  const double elapsed = iteration_clock();
  const MemoryStats memory = iteration_memory_.since_start();

  if (!pending_.empty()) {
    const auto& [key, p] = *pending_.begin();
    throw std::logic_error("iteration " + std::to_string(iteration_) + " ended on rank " +
                           std::to_string(rank_) + " with " + std::to_string(pending_.size()) +
                           " tasks waiting for inputs, e.g. " +
                           describe(task_class(key.task_class), key) + " missing " +
                           std::to_string(p.missing));
  }

  IterationReport report;
  report.iteration = iteration_;
  report.ranks = size_;
  report.local = devices_.front()->take_stats();
  for (std::size_t d = 1; d < devices_.size(); ++d) report.local.add(devices_[d]->take_stats());
  report.local.add(comm_engine_->take_stats());
  report.local.rank = rank_;
  report.local.memory = memory;
  if (replaying(iteration_)) report.replaying_ranks = team_replay_->replaying;
  if (iteration_ <= completed_before_loss_) report.local.tasks_rerun = report.local.tasks_executed;
  report.local.tasks_offloaded = tasks_offloaded_;
  report.local.tasks_offloaded_here = tasks_offloaded_here_;
  report.local.cost = cost_summary();
  if (const auto samples = completed_this_iteration_.load(); samples > 0) {
    report.local.ready_tasks_mean =
        static_cast<double>(ready_samples_sum_.load()) / static_cast<double>(samples);
  }
  report.first_task_steady_ns = first_task_steady_ns_.load();
  report.start_steady_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(iteration_start_.time_since_epoch()).count();
  double compute_share = 0.0;
  {
    std::lock_guard lock(cost_mutex_);
    if (elapsed > 0.0) {
      compute_share = std::clamp(
          compute_seconds_this_iteration_ / (elapsed * static_cast<double>(lanes())), 0.0, 1.0);
    }
  }
  // The end-of-iteration reductions, into buffers of their own: when a peer dies during
  // them they may never complete, and are then left to MPI for the life of the process.
  auto sums = std::make_unique<EndOfIterationSums>();
  sums->mine = {elapsed, report.local.flops, compute_share, compute_share, checkpoint_seconds};
  const std::array<MPI_Op, EndOfIterationSums::kCount> operations{MPI_MAX, MPI_SUM, MPI_MAX, MPI_SUM,
                                                                  MPI_MAX};
  bool reductions_failed = false;
  for (std::size_t i = 0; i < EndOfIterationSums::kCount; ++i) {
    if (MPI_Iallreduce(&sums->mine[i], &sums->all[i], 1, MPI_DOUBLE, operations[i], comm_,
                       &sums->requests[i]) != MPI_SUCCESS) {
      reductions_failed = true;
    }
  }
  if (reductions_failed || !wait_for_reductions(*sums)) {
    EndOfIterationSums::keep_until_exit(std::move(sums));
    return abandon_iteration(false);
  }
  // MPI_Allreduce over a communicator that holds a dead rank may succeed with a wrong
  // result: a peer the watch now knows lost voids every value.
  watch_->poll();
  if (!watch_->lost().empty()) return abandon_iteration(false);
  watch_->disarm();
  report.seconds = sums->all[0];
  report.total_flops = sums->all[1];
  const double busiest_compute_share = sums->all[2];
  const double summed_compute_share = sums->all[3];
  const double slowest_checkpoint = sums->all[4];
  checkpoints_->iteration_ended(report.seconds, slowest_checkpoint);
  report.local.checkpoint = checkpoints_->take_stats();
  if (options_.message_log.enabled) log_iteration_ended(report);
  {
    std::lock_guard lock(cost_mutex_);
    compute_share_ = compute_share;
    previous_seconds_per_flop_ = measured_seconds_per_flop();
    busiest_compute_share_ = busiest_compute_share;
    mean_compute_share_ = summed_compute_share / static_cast<double>(size_);
    report.busiest_compute_share = busiest_compute_share_;
    report.mean_compute_share = mean_compute_share_;
  }
  previous_iteration_seconds_ = report.seconds;
  if (options_.offload.enabled) {
    const std::uint64_t held_back = offload_feedback_.held_back();
    offload_feedback_.iteration_ended(offload_moved_, report.seconds, size_);
    report.local.offload_plans_held_back = rank_ == 0 ? offload_feedback_.held_back() - held_back : 0;
  }
  total_stats_.add(report.local);
  if (!replaying(iteration_)) {
    ++iterations_since_attach_;  // TeamLB measures a full iteration
    std::lock_guard lock(cost_mutex_);
    if (measuring_task_seconds_) {
      task_seconds_by_iteration_.push_back(std::move(task_seconds_this_iteration_));
      task_seconds_this_iteration_.clear();
      while (task_seconds_by_iteration_.size() > static_cast<std::size_t>(options_.message_log.load_window)) {
        task_seconds_by_iteration_.pop_front();
      }
    }
  }
  resize_under_way_.reset();  // the first iteration after it completed
  before_plan_.reset();
  if (trace_) trace_->flush();
  // The offloads were for this iteration only: the next plan starts from the fixed mapping.
  withdraw_offloads();
  // After an expand without rebalancing, what new ranks stole becomes theirs. With it, the
  // new ranks own tiles and a steal stays a steal: pinning it too measured 10-20 % slower
  // GEMM iterations after a +4 or +8 expand (each pinned task runs away from its tile for
  // good: 15-20 % more messages). The steals of this iteration are forgotten either way.
  if (first_new_rank_ >= 0 && !options_.rebalance_on_resize) {
    pin_new_placements();
  } else {
    std::lock_guard lock(migrations_mutex_);
    stolen_this_iteration_.clear();
  }
  return report;
}

void Engine::replay_logged_outputs() {
  // Every rank passed this iteration's barrier: the ranks replaying have their tasks of it
  // ready to receive inputs, and find each consumer named here as for any activation.
  std::vector<Successor> successors;
  for (const auto& output : team_replay_->logged_outputs) {
    if (output.iteration != iteration_) continue;
    successors.clear();
    task_class(output.producer.task_class).successors(output.producer, output.slot, successors);
    std::map<int, std::vector<wire::Target>> targets_by_rank;
    for (const Successor& s : successors) {
      wire::Target t;
      int dest = -1;
      if (s.kind == Successor::Kind::task) {
        dest = rank_of(s.consumer);
        t.consumer = s.consumer;
        t.slot = s.consumer_slot;
      } else {
        dest = collection(s.tile.collection).owner(s.tile.m, s.tile.n);
        t.to_collection = true;
        t.tile = s.tile;
      }
      if (!std::binary_search(team_replay_->replaying.begin(), team_replay_->replaying.end(), dest)) continue;
      targets_by_rank[dest].push_back(t);
    }
    const wire::Producer named{output.producer, static_cast<std::uint8_t>(output.slot),
                               static_cast<std::uint32_t>(output.iteration)};
    for (auto& [dest, targets] : targets_by_rank) {
      if (output.tile) bytes_replayed_.fetch_add(output.tile->bytes(), std::memory_order_relaxed);
      comm_engine_->send_activation(dest, output.tile, std::move(targets), named);
    }
  }
}

void Engine::end_team_replay() {
  // Every rank runs the interrupted iteration together: the tasks are counted again, and
  // stealing goes back to the teams.
  pending_moves_ = std::move(team_replay_->moves_after);
  for (const TileMove& move : pending_moves_) {
    ++last_rebalance_.tiles;
    last_rebalance_.tasks += move.tasks;
  }
  team_replay_.reset();
  local_tasks_known_ = false;
  comm_engine_->confine_steals(
      steal_partners(message_log_.rank_team(), rank_, options_.message_log.steal_across_teams));
}

bool Engine::complete_checkpoint_before_tasks() {
  // A resize (expand_onto, prepare_shrink) dropped the copies from before it, which match
  // neither the new numbers nor the new tiles: until this checkpoint is complete, a loss would
  // find nothing to roll back to (a re-grid, TeamLB's plan, keeps them until then in
  // before_plan_, and a loss gives the plan up). So its transfers complete here, under the watch, and a
  // barrier tells every rank that every rank completed them. Its cost then lies before the
  // iteration's tasks instead of under them; it does not set the interval (as the one that
  // ends a recovery, checkpoint_recovered_state).
  const double seconds = checkpoints_->complete_transfers([this] {
    watch_->poll();
    return !watch_->lost().empty();
  });
  if (seconds < 0.0) return false;  // abandon_iteration drops what did not arrive
  if (!comm_engine_->barrier_without_spinning(*watch_)) return false;
  checkpoints_->confirmed_complete();
  before_plan_.reset();  // every rank holds its copies under TeamLB's teams: the plan stands
  replay_checkpoint_.reset();  // and the state after a replay has its copies
  return true;
}

void Engine::log_iteration_ended(IterationReport& report) {
  // The checkpoint taken at this iteration's start is now complete everywhere.
  if (const auto checkpoint = checkpoints_->last_complete()) {
    message_log_.release_through(*checkpoint);
    received_versions_.release_through(*checkpoint);
  }
  report.local.message_log = message_log_.take_iteration_stats();
  report.local.message_log.bytes_replayed = bytes_replayed_.exchange(0, std::memory_order_relaxed);
  report.local.message_log.copies_dropped = copies_dropped_.exchange(0, std::memory_order_relaxed);
  // Per failure: what the replay after the latest recovery served from this rank's log, and
  // the copies it dropped (a replay is over before another loss can be recovered from).
  if (!recoveries_.empty()) {
    recoveries_.back().bytes_replayed += report.local.message_log.bytes_replayed;
    recoveries_.back().copies_dropped += report.local.message_log.copies_dropped;
  }
  if (!options_.trace_path.empty()) {
    const auto& log = report.local.message_log;
    const nlohmann::json line{
        {"event", "message_log"},
        {"rank", rank_},
        {"iteration", iteration_},
        {"team", message_log_.rank_team()[static_cast<std::size_t>(rank_)]},
        {"messages_logged", log.messages_logged},
        {"bytes_logged", log.bytes_logged},
        {"determinants_logged", log.determinants_logged},
        {"entries_held", log.entries_held},
        {"bytes_held", log.bytes_held}};
    (void)Trace::append(options_.trace_path, rank_, line.dump() + "\n");
  }
}

void Engine::pin_new_placements() {
  // (class, i0, i1, i2, rank) per task a new rank stole in this iteration.
  std::vector<std::int32_t> mine;
  {
    std::lock_guard lock(migrations_mutex_);
    if (rank_ >= first_new_rank_) {
      for (const auto& key : stolen_this_iteration_) {
        mine.insert(mine.end(), {static_cast<std::int32_t>(key.task_class), key.index[0],
                                 key.index[1], key.index[2], rank_});
      }
    }
    stolen_this_iteration_.clear();
  }
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size_)), offsets(counts.size());
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_, &request);
  wait_asleep(request);
  int total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = total;
    total += counts[r];
  }
  if (total == 0) return;
  std::vector<std::int32_t> all(static_cast<std::size_t>(total));
  MPI_Iallgatherv(mine.data(), count, MPI_INT32_T, all.data(), counts.data(), offsets.data(),
                  MPI_INT32_T, comm_, &request);
  wait_asleep(request);
  for (std::size_t i = 0; i + 4 < all.size(); i += 5) {
    const TaskKey key{static_cast<TaskClassId>(all[i]), {all[i + 1], all[i + 2], all[i + 3]}};
    pinned_.emplace(key, all[i + 4]);  // a pinned task is never stolen, so never re-pinned
  }
  local_tasks_known_ = false;  // this rank's own tasks changed
}

void Engine::keep_tiles_at_start() {
  if (!message_log_.active() || collections_.empty()) return;
  const auto started = MessageLog::Clock::now();
  tiles_at_start_.remember(iteration_ + 1, collections_);
  message_log_.add_seconds(std::chrono::duration<double>(MessageLog::Clock::now() - started).count());
}

}  // namespace bellows::runtime
