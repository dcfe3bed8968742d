// The victim side of inter-rank work stealing: what a rank tells its victims of itself when it
// asks (thief_costs), and which of its queued tasks it gives a thief (give_tasks), each
// priced by the cost model and chosen by StealPolicy::choose_gifts (steal_policy.hpp). The
// messages that carry requests and gifts are the communication engine's (comm_engine_steal.cpp).

#include <functional>
#include <map>

#include "engine.hpp"

namespace bellows::runtime {

Engine::ThiefCosts Engine::thief_costs() const {
  ThiefCosts costs;
  costs.load_seconds = remaining_work_seconds();
  std::lock_guard lock(cost_mutex_);
  const CostSummary summary = cost_model_.summary();
  if (summary.task_samples > 0) {
    const double per_lane = 1.0 / lanes();
    costs.task_overhead_seconds = summary.task_overhead_us * 1e-6 * per_lane;
    costs.seconds_per_flop = summary.seconds_per_gflop * 1e-9 * per_lane;
  }
  return costs;
}

std::vector<std::unique_ptr<ReadyTask>> Engine::give_tasks(int wanted, int thief,
                                                           const ThiefCosts& thief_costs,
                                                           std::size_t& left,
                                                           std::size_t& refused) {
  refused = 0;
  StealPolicy::GiftContext context;
  context.lanes = lanes();
  context.thief_load_seconds = thief_costs.load_seconds;
  context.victim_load_seconds = remaining_work_seconds();
  context.reply_seconds = round_trip_seconds() / 2;
  {
    std::lock_guard cost_lock(cost_mutex_);
    context.compute_share = compute_share_;
    context.mean_compute_share = mean_compute_share_;
  }
  const auto choose = [&](const std::vector<const ReadyTask*>& queue) {
    // Priced only near the back: the tasks a thief could take first. Those further ahead
    // still count for when the victim would start the others.
    constexpr std::size_t kPriced = 64;
    std::vector<StealPolicy::GiftCandidate> candidates(queue.size());
    std::vector<InputSource> specs;
    std::lock_guard cost_lock(cost_mutex_);
    const bool thief_measured = thief_costs.task_overhead_seconds > 0.0 || thief_costs.seconds_per_flop > 0.0;
    const bool measured_here = cost_model_.recent_task_seconds().has_value();
    // What is still to run here at each priority, summed over the priorities above it.
    std::map<std::int64_t, PriorityWork, std::greater<>> above;
    if (options_.steal.cost_rule) {
      std::lock_guard priority_lock(priority_mutex_);
      PriorityWork sum;
      for (const auto& [priority, work] : remaining_by_priority_) {
        above[priority] = sum;
        sum.tasks += work.tasks;
        sum.flops += work.flops;
      }
    }
    for (std::size_t i = 0; i < queue.size(); ++i) {
      const ReadyTask& task = *queue[i];
      auto& c = candidates[i];
      c.run_seconds = cost_model_.task_seconds(task.key.task_class, task.flops);
      c.movable = !task.migrated && queue.size() - i <= kPriced && !reads_host_stale_tile(task);
      if (!c.movable || !options_.steal.cost_rule) continue;
      if (thief_measured && measured_here) {
        // Both fits per lane, as the thief's comes.
        c.thief_run_seconds = StealPolicy::thief_run_seconds(
            c.run_seconds,
            thief_costs.task_overhead_seconds + thief_costs.seconds_per_flop * task.flops,
            cost_model_.work_seconds(1.0, task.flops) / lanes());
      }
      if (const auto it = above.find(task.priority); it != above.end()) {
        c.outranking_seconds = cost_model_.work_seconds(static_cast<double>(it->second.tasks),
                                                        it->second.flops);
      }
      specs.clear();
      task.task_class->inputs(task.key, specs);
      for (std::size_t slot = 0; slot < task.tiles.size() && slot < specs.size(); ++slot) {
        const TilePtr& tile = task.tiles[slot];
        if (specs[slot].kind == InputSource::Kind::scratch || !tile || tile->elements() == 0) {
          continue;  // made by the thief, or a control token
        }
        c.fetch_seconds += cost_model_.transfer_seconds(thief, tile->bytes());
        if (task.writable >> slot & 1U) {
          c.return_seconds += cost_model_.transfer_seconds(thief, tile->bytes());
        }
      }
    }
    auto chosen = StealPolicy::choose_gifts(options_.steal, candidates, context, wanted);
    const std::size_t allowed = StealPolicy::tasks_to_give(options_.steal, queue.size(), wanted);
    refused = allowed > chosen.size() ? allowed - chosen.size() : 0;
    return chosen;
  };
  // A thief takes from the rank's GPU with the most tasks queued (the CPU workers' queue of
  // hybrid mode is never given away); `left` counts what all the GPUs still hold.
  std::size_t victim = 0;
  std::size_t others = 0;
  for (std::size_t g = 1; g < std::max<std::size_t>(gpus_, 1); ++g) {
    if (devices_[g]->ready_count() > devices_[victim]->ready_count()) victim = g;
  }
  for (std::size_t g = 0; g < std::max<std::size_t>(gpus_, 1); ++g) {
    if (g != victim) others += devices_[g]->ready_count();
  }
  auto tasks = devices_[victim]->steal_chosen(choose, left);
  left += others;
  if (tasks.empty()) return tasks;
  double flops = 0.0;
  for (const auto& t : tasks) {
    record_migration(t->key, thief);
    leaves_remaining_work(t->priority, t->flops);
    flops += t->flops;
  }
  if (devices_.size() > 1) {
    std::lock_guard cost_lock(cost_mutex_);
    for (const auto& t : tasks) backlog_seconds_[t->device_index] -= t->predicted_seconds;
  }
  remaining_flops_.fetch_sub(flops, std::memory_order_relaxed);
  const auto remaining =
      local_remaining_.fetch_sub(static_cast<std::int64_t>(tasks.size()), std::memory_order_acq_rel) -
      static_cast<std::int64_t>(tasks.size());
  if (remaining < 0) {
    throw std::logic_error("rank " + std::to_string(rank_) + " gave away more tasks than it had");
  }
  if (trace_) {
    trace_->sample(iteration_clock(), left, completed_this_iteration_.load());
  }
  return tasks;
}

bool Engine::reads_host_stale_tile(const ReadyTask& task) const {
  if (options_.device != DeviceKind::cuda) return false;  // elsewhere residency is a model
  for (const auto& t : task.tiles) {
    if (t && t->elements() > 0 && !(t->residency() & Tile::kOnHost)) return true;
  }
  return false;
}

}  // namespace bellows::runtime
