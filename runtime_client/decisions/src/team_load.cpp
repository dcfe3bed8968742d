#include "bellows/runtime/team_load.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace bellows::runtime {

namespace {

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %%", fraction * 100.0);
  return text;
}

void require_finite_not_negative(double value, const std::string& what) {
  if (!std::isfinite(value) || value < 0.0) {
    throw std::invalid_argument(what + " must be finite and not negative, got " + number(value));
  }
}

/// The median of `values` (the mean of the middle two for an even count), 0 for none;
/// sorts them.
double median_of(std::vector<double>& values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

double heaviest(std::span<const double> seconds, const char* which) {
  double most = 0.0;
  for (std::size_t r = 0; r < seconds.size(); ++r) {
    require_finite_not_negative(seconds[r], std::string("replan_decision: rank ") + std::to_string(r) +
                                                "'s seconds " + which);
    most = std::max(most, seconds[r]);
  }
  return most;
}

}  // namespace

TileLoadHistory::TileLoadHistory(int window) : window_(window) {
  if (window < 1) {
    throw std::invalid_argument("TileLoadHistory: the window must be at least 1 iteration, got " +
                                std::to_string(window));
  }
}

void TileLoadHistory::add_iteration(std::span<const double> seconds, std::span<const double> tasks) {
  if (seconds.size() != tasks.size()) {
    throw std::invalid_argument("TileLoadHistory: " + std::to_string(seconds.size()) + " tiles' seconds but " +
                                std::to_string(tasks.size()) + " tiles' task counts");
  }
  if (iterations_ > 0 && seconds.size() != kept_.size()) {
    throw std::invalid_argument("TileLoadHistory: an iteration of " + std::to_string(seconds.size()) +
                                " tiles, the history holds " + std::to_string(kept_.size()));
  }
  for (std::size_t t = 0; t < seconds.size(); ++t) {
    require_finite_not_negative(seconds[t], "TileLoadHistory: tile " + std::to_string(t) + "'s seconds");
    require_finite_not_negative(tasks[t], "TileLoadHistory: tile " + std::to_string(t) + "'s task count");
  }
  kept_.resize(seconds.size());
  for (std::size_t t = 0; t < seconds.size(); ++t) {
    if (tasks[t] <= 0.0) continue;  // not seen: its history stands
    auto& samples = kept_[t];
    samples.push_back(seconds[t]);
    if (samples.size() > static_cast<std::size_t>(window_)) samples.pop_front();
  }
  iterations_ = std::min(iterations_ + 1, window_);
}

std::vector<double> TileLoadHistory::loads() const {
  std::vector<double> out(kept_.size(), 0.0);
  std::vector<double> sorted;
  for (std::size_t t = 0; t < kept_.size(); ++t) {
    if (kept_[t].empty()) continue;
    sorted.assign(kept_[t].begin(), kept_[t].end());
    out[t] = median_of(sorted);
  }
  return out;
}

void TileLoadHistory::clear() noexcept {
  kept_.clear();
  iterations_ = 0;
}

std::vector<double> rank_slowness(std::span<const double> seconds, std::span<const double> flops,
                                  double tolerance) {
  if (seconds.size() != flops.size()) {
    throw std::invalid_argument("rank_slowness: seconds of " + std::to_string(seconds.size()) + " ranks but flops of " +
                                std::to_string(flops.size()));
  }
  require_finite_not_negative(tolerance, "rank_slowness: the tolerance");
  std::vector<double> per_flop;
  for (std::size_t r = 0; r < seconds.size(); ++r) {
    require_finite_not_negative(seconds[r], "rank_slowness: rank " + std::to_string(r) + "'s seconds");
    require_finite_not_negative(flops[r], "rank_slowness: rank " + std::to_string(r) + "'s flops");
    if (seconds[r] > 0.0 && flops[r] > 0.0) per_flop.push_back(seconds[r] / flops[r]);
  }
  std::vector<double> out(seconds.size(), 1.0);
  if (per_flop.empty()) return out;
  const double median = median_of(per_flop);
  for (std::size_t r = 0; r < seconds.size(); ++r) {
    if (!(seconds[r] > 0.0 && flops[r] > 0.0)) continue;
    const double slowness = seconds[r] / flops[r] / median;
    if (std::abs(slowness - 1.0) > tolerance) out[r] = slowness;
  }
  return out;
}

std::vector<double> rank_slowness_by_class(std::span<const double> seconds, std::span<const double> flops,
                                           std::size_t classes, double tolerance) {
  if (classes == 0) throw std::invalid_argument("rank_slowness_by_class: no task classes");
  if (seconds.size() != flops.size()) {
    throw std::invalid_argument("rank_slowness_by_class: " + std::to_string(seconds.size()) + " seconds but " +
                                std::to_string(flops.size()) + " flops");
  }
  if (seconds.size() % classes != 0) {
    throw std::invalid_argument("rank_slowness_by_class: " + std::to_string(seconds.size()) +
                                " values are not a whole number of ranks of " + std::to_string(classes) +
                                " classes");
  }
  require_finite_not_negative(tolerance, "rank_slowness_by_class: the tolerance");
  const std::size_t ranks = seconds.size() / classes;
  const auto ran = [&](std::size_t r, std::size_t c) {
    return seconds[r * classes + c] > 0.0 && flops[r * classes + c] > 0.0;
  };
  for (std::size_t r = 0; r < ranks; ++r) {
    for (std::size_t c = 0; c < classes; ++c) {
      const std::string which = "rank_slowness_by_class: rank " + std::to_string(r) + "'s ";
      const std::string of = " of class " + std::to_string(c);
      require_finite_not_negative(seconds[r * classes + c], which + "seconds" + of);
      require_finite_not_negative(flops[r * classes + c], which + "flops" + of);
    }
  }
  const auto per_flop = [&](std::size_t r, std::size_t c) { return seconds[r * classes + c] / flops[r * classes + c]; };
  // Per class: the median rank's seconds per flop among the ranks that ran it (0: none did),
  // and whether enough ranks ran it for that median to tell a rank's speed.
  std::vector<double> median(classes, 0.0);
  std::vector<bool> told_by_many(classes, false);
  std::vector<double> values;
  for (std::size_t c = 0; c < classes; ++c) {
    values.clear();
    for (std::size_t r = 0; r < ranks; ++r) {
      if (ran(r, c)) values.push_back(per_flop(r, c));
    }
    median[c] = median_of(values);
    told_by_many[c] = values.size() >= kRanksForAClassMedian;
  }
  // A rank's measured seconds in the classes `counted` over what its flops of them would
  // take at the `reference` seconds per flop of each; 0 when it ran none of them.
  const auto ratio = [&](std::size_t r, const std::vector<double>& reference, const auto& counted) {
    double measured = 0.0, at_reference = 0.0;
    for (std::size_t c = 0; c < classes; ++c) {
      if (!ran(r, c) || !counted(c)) continue;
      measured += seconds[r * classes + c];
      at_reference += flops[r * classes + c] * reference[c];
    }
    return at_reference > 0.0 ? measured / at_reference : 0.0;
  };
  // First from the classes many ranks ran; 0: the rank ran none of them.
  std::vector<double> slowness(ranks, 0.0);
  for (std::size_t r = 0; r < ranks; ++r) {
    slowness[r] = ratio(r, median, [&](std::size_t c) { return told_by_many[c]; });
  }
  // The ranks that ran only classes few ranks ran: against each such class's median speed
  // of its ranks read above, their slowness taken out; its plain median where none was read.
  std::vector<double> reference = median;
  for (std::size_t c = 0; c < classes; ++c) {
    if (told_by_many[c]) continue;
    values.clear();
    for (std::size_t r = 0; r < ranks; ++r) {
      if (ran(r, c) && slowness[r] > 0.0) values.push_back(per_flop(r, c) / slowness[r]);
    }
    if (!values.empty()) reference[c] = median_of(values);
  }
  std::vector<double> out(ranks, 1.0);
  for (std::size_t r = 0; r < ranks; ++r) {
    const double read = slowness[r] > 0.0 ? slowness[r] : ratio(r, reference, [](std::size_t) { return true; });
    if (read > 0.0 && std::abs(read - 1.0) > tolerance) out[r] = read;
  }
  return out;
}

ReplanDecision replan_decision(const ReplanFacts& facts) {
  if (facts.rank_seconds_now.empty() || facts.rank_seconds_now.size() != facts.rank_seconds_planned.size()) {
    throw std::invalid_argument("replan_decision: seconds of " + std::to_string(facts.rank_seconds_now.size()) +
                                " ranks now and of " + std::to_string(facts.rank_seconds_planned.size()) +
                                " planned; both need the job's ranks");
  }
  require_finite_not_negative(facts.crossing_bytes_now, "replan_decision: the bytes crossing teams now");
  require_finite_not_negative(facts.crossing_bytes_planned, "replan_decision: the planned bytes crossing teams");
  if (facts.crossing_bytes_reference >= 0.0 || !std::isfinite(facts.crossing_bytes_reference)) {
    require_finite_not_negative(facts.crossing_bytes_reference, "replan_decision: the reference's crossing bytes");
  }
  require_finite_not_negative(facts.cut_bound, "replan_decision: the cut bound");
  require_finite_not_negative(facts.min_gain, "replan_decision: the least gain");
  const double now = heaviest(facts.rank_seconds_now, "now");
  const double planned = heaviest(facts.rank_seconds_planned, "planned");

  ReplanDecision decision;
  decision.gain = now > 0.0 ? (now - planned) / now : 0.0;
  const std::string fall = "the heaviest rank's predicted seconds go from " + number(now) + " to " + number(planned) +
                           " (" + percent(decision.gain) + ")";
  if (!(decision.gain > facts.min_gain)) {
    decision.reason = fall + ", not more than the " + percent(facts.min_gain) + " that pays for a re-plan";
    return decision;
  }
  const bool against_reference = facts.crossing_bytes_reference >= 0.0;
  const double base = against_reference ? facts.crossing_bytes_reference : facts.crossing_bytes_now;
  const double limit = (1.0 + facts.cut_bound) * base;
  if (facts.crossing_bytes_planned > limit) {
    decision.reason = fall + ", but the plan's " + number(facts.crossing_bytes_planned) +
                      " bytes crossing teams pass " + number(limit) + ", (1 + " + number(facts.cut_bound) +
                      ") times the " + (against_reference ? "load-blind partition's " : "bytes crossing now, ") +
                      number(base);
    return decision;
  }
  decision.replan = true;
  decision.reason = fall + ", more than the " + percent(facts.min_gain) + " that pays for a re-plan";
  return decision;
}

}  // namespace bellows::runtime
