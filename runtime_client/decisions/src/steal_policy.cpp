#include "bellows/runtime/steal_policy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace bellows::runtime {

bool StealPolicy::starving(const StealOptions& options, std::size_t ready) noexcept {
  const auto count = static_cast<std::int64_t>(ready);
  return count < options.device_threshold || count < options.node_threshold;
}

std::size_t StealPolicy::tasks_kept(const StealOptions& options) noexcept {
  // Both thresholds are validated non-negative (validate(StealOptions)).
  return static_cast<std::size_t>(std::max(options.device_threshold, options.node_threshold));
}

bool StealPolicy::has_tasks_to_spare(const StealOptions& options, std::size_t ready) noexcept {
  return ready > tasks_kept(options);
}

std::size_t StealPolicy::tasks_to_give(const StealOptions& options, std::size_t ready,
                                       int wanted) noexcept {
  const std::size_t keep = tasks_kept(options);
  const std::size_t spare = ready > keep ? ready - keep : 0;
  return std::min(static_cast<std::size_t>(std::max(wanted, 0)), spare);
}

std::vector<std::size_t> StealPolicy::choose_gifts(const StealOptions& options,
                                                   std::span<const GiftCandidate> queue,
                                                   const GiftContext& context, int wanted) {
  std::vector<std::size_t> chosen;
  const std::size_t limit = tasks_to_give(options, queue.size(), wanted);
  if (limit == 0) return chosen;
  std::vector<std::size_t> order;
  for (std::size_t i = queue.size(); i-- > 0;) {
    if (queue[i].movable) order.push_back(i);  // back first
  }
  if (!options.cost_rule) {
    if (order.size() > limit) order.resize(limit);
    return order;
  }
  // Locality first; among equal fetches the back of the queue first (stable).
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return queue[a].fetch_seconds < queue[b].fetch_seconds;
  });
  const double lanes = static_cast<double>(std::max(context.lanes, 1));
  std::vector<double> ahead(queue.size() + 1, 0.0);  // run time of the tasks before position i
  for (std::size_t i = 0; i < queue.size(); ++i) ahead[i + 1] = ahead[i] + queue[i].run_seconds;
  const double weight = move_weight(context.compute_share, context.mean_compute_share);
  double thief_clock = context.reply_seconds;  // when the thief is done with the gifts so far
  double thief_load = context.thief_load_seconds;
  double victim_load = context.victim_load_seconds;
  for (const std::size_t i : order) {
    if (chosen.size() == limit) break;
    const GiftCandidate& c = queue[i];
    double given_ahead = 0.0;
    for (const std::size_t j : chosen) given_ahead += j < i ? queue[j].run_seconds : 0.0;
    // The outranking tasks not yet queued run first only when they become ready in time:
    // counted as far as the victim is held back by its compute (1 - weight), not its tiles.
    const double outranking_later = std::max(c.outranking_seconds - ahead[i], 0.0);
    const double victim_starts =
        (ahead[i] + (1.0 - weight) * outranking_later - given_ahead) / lanes;
    if (c.run_seconds <= weight * (c.fetch_seconds + c.return_seconds)) continue;
    const double thief_run = c.thief_run_seconds < 0.0 ? c.run_seconds : c.thief_run_seconds;
    const double thief_cost = c.fetch_seconds + thief_run;
    if (thief_clock + thief_cost + c.return_seconds >= victim_starts) continue;
    if (thief_load + thief_cost + c.return_seconds >= victim_load - c.run_seconds / lanes) continue;
    chosen.push_back(i);
    thief_clock += thief_cost;
    thief_load += thief_cost;
    victim_load -= c.run_seconds / lanes;
  }
  return chosen;
}

double StealPolicy::thief_run_seconds(double victim_run, double thief_fit,
                                      double victim_fit) noexcept {
  if (!(thief_fit > 0.0 && victim_fit > 0.0)) return victim_run;
  const double ratio = thief_fit / victim_fit;
  if (ratio <= kSameSpeedWithin && ratio >= 1.0 / kSameSpeedWithin) return victim_run;
  return victim_run * ratio;
}

double StealPolicy::move_weight(double victim_share, double mean_share) noexcept {
  const double waits = 1.0 - std::clamp(victim_share, 0.0, 1.0);
  const double mean_waits = 1.0 - std::clamp(mean_share, 0.0, 1.0);
  if (!(mean_waits > 0.0) || waits >= mean_waits) return 1.0;
  return waits / mean_waits;
}

StealPolicy::StealPolicy(const StealOptions& options, int rank, int size)
    : options_(options), rank_(rank), size_(size) {
  std::seed_seq seed{options_.seed, static_cast<unsigned>(rank_), 0xBE11u};
  random_.seed(seed);
}

void StealPolicy::start_iteration() noexcept {
  if (stretched_) return;  // requests do not pay: the backoff runs on across iterations
  doubling_backoff_us_ = 0;
  backoff_us_ = 0;
  next_ask_at_ = Time{0};
}

bool StealPolicy::should_ask(Time now, const ThiefView& view) const noexcept {
  return !view.request_outstanding && !view.iteration_over && view.roots_queued &&
         now >= next_ask_at_ && starving(options_, view.ready) && asking_pays(options_, view);
}

bool StealPolicy::asking_pays(const StealOptions& options, const ThiefView& view) noexcept {
  return !options.cost_rule || (view.expected_idle_seconds > view.round_trip_seconds &&
                                view.task_seconds > move_weight(view.busiest_compute_share,
                                                                view.mean_compute_share) *
                                                        view.tile_move_seconds);
}

int StealPolicy::tasks_to_ask(const StealOptions& options, const ThiefView& view) noexcept {
  if (options.cost_rule && view.task_seconds <= options.chunk * view.tile_move_seconds) return 1;
  return options.chunk;
}

std::optional<int> StealPolicy::choose_victim() {
  if (options_.policy == VictimPolicy::last_victim && last_victim_ >= 0) return last_victim_;
  return random_rank_except(rank_, rank_);
}

void StealPolicy::reply_received(int victim, std::size_t tasks) noexcept {
  if (tasks > 0) last_victim_ = victim;
}

StealPolicy::Time StealPolicy::request_answered(Time now, std::uint64_t tasks, Time round_trip,
                                                double task_seconds, int visits) {
  tasks_per_request_ += (static_cast<double>(tasks) - tasks_per_request_) / kRequestMemory;
  visits_per_request_ += (static_cast<double>(std::max(visits, 1)) - visits_per_request_) / kRequestMemory;
  if (tasks == 0) {
    // The last victim had nothing (nor had the victims it forwarded to): try at random.
    last_victim_ = -1;
    int first = options_.min_backoff_us;
    int longest = options_.max_backoff_us;
    double stretch = 1.0;
    if (options_.cost_rule) {
      // Never shorter than the round trips, nor the ceiling (clamped to stay an int).
      const auto trips = std::chrono::duration_cast<std::chrono::microseconds>(round_trip).count() *
                         kBackoffRoundTrips;
      const int trips_us = static_cast<int>(
          std::clamp<std::int64_t>(trips, 0, std::numeric_limits<int>::max() / 2));
      first = std::max(first, trips_us);
      longest = std::max(longest, trips_us);
      const double cost = request_cost_seconds();
      const double yield = request_yield_seconds(task_seconds);
      if (cost > yield) {
        stretch = yield > 0.0 ? std::min(cost / yield, kMaxBackoffStretch) : kMaxBackoffStretch;
      }
    }
    doubling_backoff_us_ = doubling_backoff_us_ == 0
                               ? first
                               : std::clamp(2 * doubling_backoff_us_, first, longest);
    backoff_us_ = static_cast<int>(std::min<double>(doubling_backoff_us_ * stretch,
                                                    std::numeric_limits<int>::max() / 2));
    stretched_ = stretch > 1.0;
  } else {
    stretched_ = false;
    doubling_backoff_us_ = 0;
    backoff_us_ = 0;
  }
  next_ask_at_ = now + std::chrono::microseconds(backoff_us_);
  return next_ask_at_;
}

double StealPolicy::request_cost_seconds() const noexcept {
  return visits_per_request_ * options_.request_visit_cost_us * 1e-6;
}

double StealPolicy::request_yield_seconds(double task_seconds) const noexcept {
  if (!std::isfinite(task_seconds)) return std::numeric_limits<double>::infinity();
  return tasks_per_request_ * task_seconds;
}

std::optional<int> StealPolicy::last_victim() const noexcept {
  if (last_victim_ < 0) return std::nullopt;
  return last_victim_;
}

std::optional<StealPolicy::Forward> StealPolicy::forward_to(int thief, int hops, int given,
                                                            int wanted) {
  if (given >= wanted || hops >= options_.max_hops) return std::nullopt;
  const bool known = options_.policy == VictimPolicy::last_victim && last_victim_ >= 0 &&
                     last_victim_ != thief && last_victim_ != rank_;
  const auto next = known ? std::optional<int>(last_victim_) : random_rank_except(rank_, thief);
  if (!next) return std::nullopt;
  return Forward{*next, wanted - given, hops + 1};
}

void StealPolicy::confine_to(std::vector<int> partners) {
  std::sort(partners.begin(), partners.end());
  partners_ = std::move(partners);
  confined_ = true;
  if (last_victim_ >= 0 && !std::binary_search(partners_.begin(), partners_.end(), last_victim_)) {
    last_victim_ = -1;
  }
}

std::optional<int> StealPolicy::random_rank_except(int a, int b) {
  if (confined_) {
    std::vector<int> candidates;
    for (const int r : partners_) {
      if (r != a && r != b) candidates.push_back(r);
    }
    if (candidates.empty()) return std::nullopt;
    return candidates[static_cast<std::size_t>(random_() % candidates.size())];
  }
  const int excluded = a == b ? 1 : 2;
  const int candidates = size_ - excluded;
  if (candidates <= 0) return std::nullopt;
  int pick = static_cast<int>(random_() % static_cast<std::uint64_t>(candidates));
  for (int r = 0; r < size_; ++r) {
    if (r == a || r == b) continue;
    if (pick-- == 0) return r;
  }
  return std::nullopt;
}

}  // namespace bellows::runtime
