// The policy engine: one decision per tick from the node metrics.

#include "bellows/policy/engine.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "bellows/policy/scaling.hpp"
#include "text.hpp"

namespace bellows::policy {

std::string_view to_string(Action action) noexcept {
  switch (action) {
    case Action::hold: return "hold";
    case Action::expand: return "expand";
    case Action::shrink: return "shrink";
  }
  return "?";
}

namespace {

using detail::format_number;

constexpr std::size_t kExpandTriggers = 4;
constexpr std::size_t kShrinkTriggers = 5;

// The job-wide measures the triggers compare against their thresholds.
struct Measures {
  double ready_per_node = 0.0;
  double busy_fraction = 0.0;
  std::uint64_t steals_sent = 0;
  std::uint64_t steals_failed = 0;
  int idle_nodes = 0;
  int pending_jobs = 0;
  std::optional<double> efficiency;

  std::optional<double> failure_ratio() const {
    if (steals_sent == 0) return std::nullopt;
    return static_cast<double>(steals_failed) / static_cast<double>(steals_sent);
  }
};

// One trigger at one tick.
struct Trigger {
  const char* key = "";
  bool written = false;
  bool holds = false;
  /// "<key>: <measured> <op> <threshold>", or why it cannot hold.
  std::string text;
};

Trigger above(const char* key, const std::optional<double>& threshold, double value) {
  if (!threshold) return {key, false, false, {}};
  const bool holds = value > *threshold;
  return {key, true, holds,
          std::string(key) + ": " + format_number(value) + (holds ? " > " : " <= ") +
              format_number(*threshold)};
}

Trigger below(const char* key, const std::optional<double>& threshold,
              const std::optional<double>& value, const char* missing) {
  if (!threshold) return {key, false, false, {}};
  if (!value) return {key, true, false, std::string(key) + ": " + missing};
  const bool holds = *value < *threshold;
  return {key, true, holds,
          std::string(key) + ": " + format_number(*value) + (holds ? " < " : " >= ") +
              format_number(*threshold)};
}

Trigger above_opt(const char* key, const std::optional<double>& threshold,
                  const std::optional<double>& value, const char* missing) {
  if (!threshold) return {key, false, false, {}};
  if (!value) return {key, true, false, std::string(key) + ": " + missing};
  return above(key, threshold, *value);
}

Trigger at_least(const char* key, const std::optional<int>& threshold, int value) {
  if (!threshold) return {key, false, false, {}};
  const bool holds = value >= *threshold;
  return {key, true, holds,
          std::string(key) + ": " + std::to_string(value) + (holds ? " >= " : " < ") +
              std::to_string(*threshold)};
}

std::array<Trigger, kExpandTriggers> expand_triggers(const ExpandTriggers& t, const Measures& m) {
  return {above("expand.ready_tasks_per_node_above", t.ready_tasks_per_node_above, m.ready_per_node),
          above("expand.busy_fraction_above", t.busy_fraction_above, m.busy_fraction),
          below("expand.steal_failure_ratio_below", t.steal_failure_ratio_below,
                m.failure_ratio(), "no steal requests this tick"),
          at_least("expand.idle_nodes_at_least", t.idle_nodes_at_least, m.idle_nodes)};
}

std::array<Trigger, kShrinkTriggers> shrink_triggers(const ShrinkTriggers& t, const Measures& m) {
  return {below("shrink.ready_tasks_per_node_below", t.ready_tasks_per_node_below,
                m.ready_per_node, ""),
          below("shrink.busy_fraction_below", t.busy_fraction_below, m.busy_fraction, ""),
          above_opt("shrink.steal_failure_ratio_above", t.steal_failure_ratio_above,
                    m.failure_ratio(), "no steal requests this tick"),
          below("shrink.iteration_efficiency_below", t.iteration_efficiency_below, m.efficiency,
                "not measured since the last expand"),
          at_least("shrink.pending_jobs_at_least", t.pending_jobs_at_least, m.pending_jobs)};
}

// The outcome of one direction at one tick.
struct Direction {
  bool fired = false;
  /// The triggers that fired (and why), "; "-separated.
  std::string fired_text;
  /// The triggers that hold but have not held long enough.
  std::string waiting_text;
};

template <std::size_t N>
Direction evaluate(const std::array<Trigger, N>& triggers, std::vector<int>& streaks,
                   Combine combine, int hysteresis) {
  Direction out;
  int written = 0;
  int fired = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const Trigger& t = triggers[i];
    streaks[i] = t.holds ? streaks[i] + 1 : 0;
    if (!t.written) continue;
    ++written;
    if (!t.holds) continue;
    std::string& into = streaks[i] >= hysteresis ? out.fired_text : out.waiting_text;
    if (!into.empty()) into += "; ";
    into += t.text;
    if (streaks[i] >= hysteresis) {
      ++fired;
      into += " (held " + std::to_string(streaks[i]) + (streaks[i] == 1 ? " tick)" : " ticks)");
    } else {
      into += " (held " + std::to_string(streaks[i]) + " of " + std::to_string(hysteresis) +
              " ticks)";
    }
  }
  out.fired = combine == Combine::any ? fired > 0 : written > 0 && fired == written;
  if (!out.fired && fired > 0) {
    // combine: all, and some triggers have not fired yet.
    std::string waiting = out.fired_text;
    if (!out.waiting_text.empty()) waiting += "; " + out.waiting_text;
    out.waiting_text = waiting + "; combine all: " + std::to_string(fired) + " of " +
                       std::to_string(written) + " triggers fired";
    out.fired_text.clear();
  }
  return out;
}

Decision hold(std::string why) { return {Action::hold, 0, "hold: " + why, {}}; }

void check_input(const TickInput& in) {
  if (in.nodes < 1) {
    throw std::invalid_argument("tick input: nodes must be at least 1, got " +
                                std::to_string(in.nodes));
  }
  if (in.idle_nodes < 0) {
    throw std::invalid_argument("tick input: idle_nodes must not be negative, got " +
                                std::to_string(in.idle_nodes));
  }
  if (in.pending_jobs < 0) {
    throw std::invalid_argument("tick input: pending_jobs must not be negative, got " +
                                std::to_string(in.pending_jobs));
  }
  for (const NodeMetrics& node : in.metrics) {
    // Built only when something is wrong: this loop runs over every node every tick.
    auto where = [&node] {
      return "tick input: node '" + node.name + "' (index " + std::to_string(node.index) + "): ";
    };
    // The same check as the metrics message's (protocol::check): a caller that built the
    // input itself, not from a checked message, is held to the same rules.
    if (const auto problem = protocol::check(node.metrics); !problem.empty()) {
      throw std::invalid_argument(where() + problem);
    }
  }
}

// The names of up to `count` nodes to release, in the policy's order; never index 0.
std::vector<std::string> pick_release(std::span<const NodeMetrics> metrics, ReleaseOrder order,
                                      int count) {
  std::vector<const NodeMetrics*> candidates;
  candidates.reserve(metrics.size());
  for (const NodeMetrics& m : metrics) {
    if (m.index != 0) candidates.push_back(&m);
  }
  auto first = [order](const NodeMetrics* a, const NodeMetrics* b) {
    switch (order) {
      case ReleaseOrder::newest:
        if (a->joined != b->joined) return a->joined > b->joined;
        break;
      case ReleaseOrder::least_loaded:
        if (a->metrics.ready_tasks != b->metrics.ready_tasks)
          return a->metrics.ready_tasks < b->metrics.ready_tasks;
        if (a->metrics.busy_fraction != b->metrics.busy_fraction)
          return a->metrics.busy_fraction < b->metrics.busy_fraction;
        break;
      case ReleaseOrder::highest_index:
        break;
    }
    return a->index > b->index;
  };
  const auto take = std::min<std::size_t>(static_cast<std::size_t>(count), candidates.size());
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(take),
                    candidates.end(), first);
  std::vector<std::string> names;
  names.reserve(take);
  for (std::size_t i = 0; i < take; ++i) names.push_back(candidates[i]->name);
  return names;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

std::string elapsed(TimePoint from, TimePoint to) {
  return format_duration(std::chrono::duration_cast<Duration>(to - from));
}

}  // namespace

PolicyEngine::PolicyEngine(Policy policy) : policy_(std::move(policy)) {
  if (policy_.nodes.min < 1 || policy_.nodes.step < 1 || policy_.hysteresis_ticks < 1) {
    throw std::invalid_argument(
        "policy: nodes.min, nodes.step and hysteresis_ticks must be at least 1");
  }
  if (const auto problems = check_consistency(policy_); !problems.empty()) {
    throw std::invalid_argument("policy: " + problems.front().message);
  }
  reset_streaks();
}

void PolicyEngine::reset_streaks() noexcept {
  expand_streaks_.assign(kExpandTriggers, 0);
  shrink_streaks_.assign(kShrinkTriggers, 0);
}

bool PolicyEngine::resize_overdue(TimePoint now) const noexcept {
  return in_flight_since_ && now - *in_flight_since_ > policy_.resize_timeout;
}

void PolicyEngine::resize_started(TimePoint now) {
  in_flight_since_ = now;
  reset_streaks();
}

void PolicyEngine::finish_resize(TimePoint now) {
  in_flight_since_.reset();
  cooldown_until_ = now + policy_.cooldown;
  reset_streaks();
}

void PolicyEngine::resize_committed(TimePoint now, int nodes_before, int nodes_after) {
  if (nodes_before < 1 || nodes_after < 1) {
    throw std::invalid_argument("resize_committed: node counts must be at least 1, got " +
                                std::to_string(nodes_before) + " -> " +
                                std::to_string(nodes_after));
  }
  finish_resize(now);
  efficiency_.reset();
  expansion_.reset();
  if (nodes_after > nodes_before && last_iteration_seconds_) {
    expansion_ = Expansion{*last_iteration_seconds_, nodes_before, nodes_after, std::nullopt};
  }
}

void PolicyEngine::resize_aborted(TimePoint now) { finish_resize(now); }

void PolicyEngine::resize_finished_earlier(TimePoint now, Duration ago) {
  if (ago < Duration::zero()) {
    throw std::invalid_argument("resize_finished_earlier: the last resize cannot end after now, got " +
                                format_duration(ago) + " ago");
  }
  if (ago >= policy_.cooldown) return;
  cooldown_until_ = now - ago + policy_.cooldown;
  reset_streaks();
}

void PolicyEngine::observe_iterations(std::span<const NodeMetrics> metrics) {
  std::uint64_t count = 0;
  double seconds = 0.0;
  for (const NodeMetrics& node : metrics) {
    const protocol::Metrics& m = node.metrics;
    if (m.iteration > count) {
      count = m.iteration;
      seconds = m.iteration_seconds;
    } else if (m.iteration == count) {
      seconds = std::max(seconds, m.iteration_seconds);
    }
  }
  if (count == 0 || seconds <= 0.0) return;
  if (expansion_) {
    if (!expansion_->baseline) {
      // The first tick after the commit: what it sees may have run before the resize.
      expansion_->baseline = count;
    } else if (count > *expansion_->baseline) {
      const double added = expansion_->after - expansion_->before;
      efficiency_ = (expansion_->t_before / seconds - 1.0) / (added / expansion_->before);
      expansion_.reset();
    }
  }
  last_iteration_seconds_ = seconds;
}

Decision PolicyEngine::tick(const TickInput& in) {
  check_input(in);
  observe_iterations(in.metrics);

  if (in_flight_since_) {
    reset_streaks();
    if (resize_overdue(in.now)) {
      return hold("a resize has been in flight for " + elapsed(*in_flight_since_, in.now) +
                  ", past resize_timeout (" + format_duration(policy_.resize_timeout) +
                  "): abort it");
    }
    return hold("a resize is in flight (for " + elapsed(*in_flight_since_, in.now) + ")");
  }
  if (cooldown_until_) {
    if (in.now < *cooldown_until_) {
      reset_streaks();
      return hold("cooldown after the last resize, " + elapsed(in.now, *cooldown_until_) +
                  " left");
    }
    cooldown_until_.reset();
  }
  if (in.metrics.empty()) {
    reset_streaks();
    return hold("no node reported metrics");
  }

  const NodeLimits& limits = policy_.nodes;
  auto decide = [&](Action action, int nodes, std::string reason,
                    std::vector<std::string> release) {
    in_flight_since_ = in.now;
    reset_streaks();
    return Decision{action, nodes, std::move(reason), std::move(release)};
  };

  // Limits first: a reload may have moved them.
  if (in.nodes > limits.max) {
    const std::string why = "the job has " + std::to_string(in.nodes) +
                            " nodes, above nodes.max (" + std::to_string(limits.max) + ")";
    auto release = pick_release(in.metrics, policy_.release_order, in.nodes - limits.max);
    if (release.empty()) return hold(why + ", but no reported node can be released");
    const int k = static_cast<int>(release.size());
    std::string reason = "shrink by " + std::to_string(k) + ": " + why + "; releasing " +
                         join_names(release) + " (release_order " +
                         std::string(to_string(policy_.release_order)) + ")";
    return decide(Action::shrink, k, std::move(reason), std::move(release));
  }
  if (in.nodes < limits.min) {
    const std::string why = "the job has " + std::to_string(in.nodes) +
                            " nodes, below nodes.min (" + std::to_string(limits.min) + ")";
    const int k = std::min(limits.min - in.nodes, in.idle_nodes);
    if (k == 0) return hold(why + ", but the partition has no idle node");
    return decide(Action::expand, k, "expand by " + std::to_string(k) + ": " + why, {});
  }

  Measures m;
  double ready = 0.0;
  double busy = 0.0;
  for (const NodeMetrics& node : in.metrics) {
    ready += static_cast<double>(node.metrics.ready_tasks);
    busy += node.metrics.busy_fraction;
    m.steals_sent += node.metrics.steals_sent;
    m.steals_failed += node.metrics.steals_failed;
  }
  const auto reported = static_cast<double>(in.metrics.size());
  m.ready_per_node = ready / reported;
  m.busy_fraction = busy / reported;
  m.idle_nodes = in.idle_nodes;
  m.pending_jobs = in.pending_jobs;
  m.efficiency = efficiency_;

  const Direction grow = evaluate(expand_triggers(policy_.expand, m), expand_streaks_,
                                  policy_.expand.combine, policy_.hysteresis_ticks);
  const Direction give = evaluate(shrink_triggers(policy_.shrink, m), shrink_streaks_,
                                  policy_.shrink.combine, policy_.hysteresis_ticks);

  if (grow.fired && give.fired) {
    return hold("expand and shrink both fired (" + grow.fired_text + " | " + give.fired_text +
                ")");
  }
  if (grow.fired) {
    const std::string fired = "expand fired (" + grow.fired_text + ")";
    if (in.nodes >= limits.max) {
      return hold(fired + " but the job is at nodes.max (" + std::to_string(limits.max) + ")");
    }
    if (in.idle_nodes == 0) return hold(fired + " but the partition has no idle node");
    int k = std::min(limits.step, limits.max - in.nodes);
    std::string note;
    if (k < limits.step) note = " (nodes.step " + std::to_string(limits.step) + ", limited by nodes.max " + std::to_string(limits.max) + ")";
    if (in.idle_nodes < k) {
      k = in.idle_nodes;
      note = " (nodes.step " + std::to_string(limits.step) + ", limited by " +
             std::to_string(in.idle_nodes) + (in.idle_nodes == 1 ? " idle node)" : " idle nodes)");
    }
    std::string predicted;
    if (const auto& threshold = policy_.expand.predicted_efficiency_above) {
      const NodeMetrics* shaped = nullptr;
      for (const NodeMetrics& node : in.metrics) {
        if (node.metrics.graph_work_seconds > 0.0) shaped = &node;
      }
      if (shaped == nullptr || !last_iteration_seconds_) {
        return hold(fired + " but expand.predicted_efficiency_above waits for the job's task "
                    "graph and iteration time (not reported yet)");
      }
      const ScalingInput scaling{in.nodes, k, *last_iteration_seconds_,
                                 shaped->metrics.graph_work_seconds,
                                 shaped->metrics.graph_critical_path_seconds,
                                 shaped->metrics.lanes_per_rank};
      const auto p = predict_expand(scaling);
      if (!p) {
        return hold(fired + " but expand.predicted_efficiency_above cannot predict: node '" +
                    shaped->name + "' reported lanes_per_rank 0");
      }
      const bool enough = p->efficiency > *threshold;
      predicted = "expand.predicted_efficiency_above: " + format_number(p->efficiency) +
                  (enough ? " > " : " <= ") + format_number(*threshold) + " (" + describe(scaling, *p) + ")";
      if (!enough) return hold(fired + " but " + predicted);
      predicted = "; " + predicted;
    }
    return decide(Action::expand, k, "expand by " + std::to_string(k) + note + ": " + grow.fired_text + predicted, {});
  }
  if (give.fired) {
    const std::string fired = "shrink fired (" + give.fired_text + ")";
    if (in.nodes <= limits.min) {
      return hold(fired + " but the job is at nodes.min (" + std::to_string(limits.min) + ")");
    }
    const int wanted = std::min(limits.step, in.nodes - limits.min);
    auto release = pick_release(in.metrics, policy_.release_order, wanted);
    if (release.empty()) {
      return hold(fired + " but no reported node can be released (never index 0)");
    }
    const int k = static_cast<int>(release.size());
    std::string note;
    if (wanted < limits.step) {
      note = " (nodes.step " + std::to_string(limits.step) + ", limited by nodes.min " +
             std::to_string(limits.min) + ")";
    }
    if (k < wanted) {
      note = " (nodes.step " + std::to_string(limits.step) + ", limited by " +
             std::to_string(k) + (k == 1 ? " releasable node)" : " releasable nodes)");
    }
    std::string reason = "shrink by " + std::to_string(k) + note + ": " + give.fired_text +
                         "; releasing " + join_names(release) + " (release_order " +
                         std::string(to_string(policy_.release_order)) + ")";
    return decide(Action::shrink, k, std::move(reason), std::move(release));
  }

  std::string waiting = grow.waiting_text;
  if (!give.waiting_text.empty()) {
    if (!waiting.empty()) waiting += "; ";
    waiting += give.waiting_text;
  }
  if (!waiting.empty()) return hold("waiting: " + waiting);
  return hold("no trigger holds");
}

std::vector<Diagnostic> PolicyEngine::reload(std::string_view text, std::string_view name) {
  LoadResult loaded = parse_policy(text, name);
  if (!loaded.ok()) return std::move(loaded.diagnostics);
  policy_ = std::move(*loaded.policy);
  reset_streaks();
  return {};
}

std::vector<Diagnostic> PolicyEngine::reload_file(const std::string& path) {
  LoadResult loaded = load_policy_file(path);
  if (!loaded.ok()) return std::move(loaded.diagnostics);
  policy_ = std::move(*loaded.policy);
  reset_streaks();
  return {};
}

}  // namespace bellows::policy
