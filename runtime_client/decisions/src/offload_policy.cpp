#include "bellows/runtime/offload_policy.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace bellows::runtime {
namespace {

void check_value(double value, const char* what, std::size_t index) {
  if (!std::isfinite(value) || value < 0.0) {
    throw std::invalid_argument(std::string("offload plan: ") + what + " of " +
                                std::to_string(index) + " must be finite and not negative, got " +
                                std::to_string(value));
  }
}

}  // namespace

double OffloadPolicy::transfer_seconds(const OffloadRank& receiver,
                                       const OffloadCandidate& candidate) noexcept {
  return static_cast<double>(candidate.transfers) * receiver.transfer_latency_seconds +
         static_cast<double>(candidate.bytes) * receiver.seconds_per_byte;
}

bool OffloadPolicy::drifted(const Drift& drift, const OffloadOptions& options) noexcept {
  return drift.planned_makespan_seconds > 0.0 && drift.planned_seconds_per_flop > 0.0 &&
         drift.seconds_per_flop > drift.planned_seconds_per_flop * kDriftSlowdown &&
         drift.predicted_work_seconds > drift.planned_makespan_seconds * (1.0 + options.min_imbalance);
}

std::vector<int> OffloadPolicy::invitation_order(std::span<const double> planned_loads, int self) {
  std::vector<int> order;
  for (int r = 0; r < static_cast<int>(planned_loads.size()); ++r) {
    if (r != self) order.push_back(r);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return planned_loads[static_cast<std::size_t>(a)] < planned_loads[static_cast<std::size_t>(b)];
  });
  return order;
}

OffloadPlan OffloadPolicy::plan(std::span<const OffloadRank> ranks,
                                std::span<const OffloadCandidate> candidates,
                                const OffloadOptions& options,
                                double previous_iteration_seconds) {
  const std::size_t size = ranks.size();
  for (std::size_t r = 0; r < size; ++r) {
    check_value(ranks[r].load_seconds, "the load of rank", r);
    check_value(ranks[r].seconds_per_flop, "the seconds per flop of rank", r);
    check_value(ranks[r].transfer_latency_seconds, "the transfer latency of rank", r);
    check_value(ranks[r].seconds_per_byte, "the seconds per byte of rank", r);
  }
  // Each overloaded rank's candidates, in index order.
  std::vector<std::vector<std::size_t>> offered(size);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const int rank = candidates[i].rank;
    if (rank < 0 || static_cast<std::size_t>(rank) >= size) {
      throw std::invalid_argument("offload plan: candidate " + std::to_string(i) + " names rank " +
                                  std::to_string(rank) + " of " + std::to_string(size));
    }
    check_value(candidates[i].flops, "the flops of candidate", i);
    offered[static_cast<std::size_t>(rank)].push_back(i);
  }

  OffloadPlan plan;
  std::vector<double>& load = plan.loads_after;
  load.resize(size);
  double sum = 0.0;
  for (std::size_t r = 0; r < size; ++r) {
    load[r] = ranks[r].load_seconds;
    sum += load[r];
  }
  if (size == 0) return plan;
  plan.makespan_before = *std::max_element(load.begin(), load.end());
  plan.makespan_after = plan.makespan_before;
  const double mean = sum / static_cast<double>(size);
  if (!(mean > 0.0) || plan.makespan_before - mean <= options.min_imbalance * mean) return plan;
  if (previous_iteration_seconds > 0.0 &&
      plan.makespan_before < options.min_compute_share * previous_iteration_seconds) {
    return plan;
  }

  std::vector<char> overloaded(size), underloaded(size), done(size, 0);
  for (std::size_t r = 0; r < size; ++r) {
    overloaded[r] = load[r] > mean;
    underloaded[r] = load[r] < mean;
  }
  for (;;) {
    // The most loaded overloaded rank that may still push, and the least loaded receiver.
    std::size_t from = size, to = size;
    for (std::size_t r = 0; r < size; ++r) {
      if (overloaded[r] && !done[r] && !offered[r].empty() && (from == size || load[r] > load[from])) {
        from = r;
      }
      if (underloaded[r] && (to == size || load[r] < load[to])) to = r;
    }
    if (from == size || to == size) break;
    const OffloadRank& donor = ranks[from];
    const OffloadRank& receiver = ranks[to];
    const double before = std::max(load[from], load[to]);
    std::size_t best = offered[from].size();
    double best_net = 0.0, best_donor = 0.0, best_receiver = 0.0, best_transfer = 0.0;
    for (std::size_t k = 0; k < offered[from].size(); ++k) {
      const OffloadCandidate& c = candidates[offered[from][k]];
      const double off_donor = c.flops * donor.seconds_per_flop;
      const double on_receiver = c.flops * receiver.seconds_per_flop;
      const double transfer = transfer_seconds(receiver, c);
      const double gain = before - std::max(load[from] - off_donor, load[to] + on_receiver);
      if (!(gain > transfer)) continue;
      const double net = before - std::max(load[from] - off_donor, load[to] + on_receiver + transfer);
      if (best == offered[from].size() || net > best_net) {
        best = k;
        best_net = net;
        best_donor = off_donor;
        best_receiver = on_receiver;
        best_transfer = transfer;
      }
    }
    if (best == offered[from].size()) {
      done[from] = 1;
      continue;
    }
    const std::size_t index = offered[from][best];
    offered[from].erase(offered[from].begin() + static_cast<std::ptrdiff_t>(best));
    load[from] -= best_donor;
    load[to] += best_receiver + best_transfer;
    plan.moves.push_back(OffloadMove{index, static_cast<int>(from), static_cast<int>(to), best_net,
                                     best_transfer});
  }
  plan.makespan_after = *std::max_element(load.begin(), load.end());
  return plan;
}

void OffloadFeedback::iteration_ended(bool moved, double seconds, int ranks) noexcept {
  if (ranks != ranks_) {
    // The job's first iteration at this size is no reference: it also pays for the first
    // touch of its tile buffers and runs on the cost model's first samples.
    const std::uint64_t held_back = held_back_;
    *this = OffloadFeedback{};
    ranks_ = ranks;
    held_back_ = held_back;
    return;
  }
  if (!moved) {
    if (skip_left_ > 0) {
      --skip_left_;
      ++held_back_;
    }
    unplanned_seconds_ = seconds;
    return;
  }
  if (unplanned_seconds_ > 0.0 && seconds > unplanned_seconds_) {
    skip_left_ = next_skip_;
    next_skip_ = std::min(2 * next_skip_, kMaxSkip);
  } else {
    next_skip_ = 1;
  }
}

bool OffloadPolicy::may_invite(double seconds_since_last, double round_trip_seconds) noexcept {
  return seconds_since_last < 0.0 || seconds_since_last >= kInvitationRoundTrips * round_trip_seconds;
}

}  // namespace bellows::runtime
