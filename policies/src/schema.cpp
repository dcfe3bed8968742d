// The table of policy keys: the one place where each key is declared.

#include "bellows/policy/schema.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace bellows::policy {
namespace {

constexpr std::array<std::string_view, 2> kCombine{"any", "all"};
constexpr std::array<std::string_view, 3> kReleaseOrder{"newest", "least_loaded", "highest_index"};
constexpr std::array<std::string_view, 2> kVictim{"random", "last-victim"};
constexpr std::array<std::string_view, 2> kNodeLoss{"shrink", "replace"};

constexpr double kIntMax = std::numeric_limits<int>::max();
constexpr double kUnsignedMax = std::numeric_limits<unsigned>::max();
constexpr double kHundredYearsMs = 876'000.0 * 3'600'000.0;

int as_int(const KeyValue& v) { return static_cast<int>(v.integer); }

// The order of the choices arrays matches the enumerators.
template <typename Enum>
Enum as_enum(const KeyValue& v) {
  return static_cast<Enum>(v.choice);
}

using T = KeyType;

// clang-format off
const std::array kKeys{
  KeyInfo{"nodes", T::section, "", {}, {}, {},
    "Size limits of the job, in nodes. `--elastic=MIN:MAX` at submission replaces min and max.",
    nullptr},
  KeyInfo{"nodes.min", T::integer, "1", 1, kIntMax, {},
    "Fewest nodes: the job never shrinks below this.",
    [](Policy& p, const KeyValue& v) { p.nodes.min = as_int(v); }},
  KeyInfo{"nodes.max", T::integer, "1", 1, kIntMax, {},
    "Most nodes: the job never expands above this. At least nodes.min.",
    [](Policy& p, const KeyValue& v) { p.nodes.max = as_int(v); }},
  KeyInfo{"nodes.step", T::integer, "1", 1, kIntMax, {},
    "Nodes added or released by one resize; a resize toward nodes.min or nodes.max takes "
    "fewer. At most nodes.max - nodes.min when the two differ.",
    [](Policy& p, const KeyValue& v) { p.nodes.step = as_int(v); }},

  KeyInfo{"expand", T::section, "", {}, {}, {},
    "When to grow. Each trigger is off unless written; with no trigger written the job "
    "never expands on its own. An expand never asks for more nodes than the partition has "
    "idle.",
    nullptr},
  KeyInfo{"expand.combine", T::choice, "any", {}, {}, kCombine,
    "any: expand when at least one written trigger fires; all: only when every written "
    "trigger fires.",
    [](Policy& p, const KeyValue& v) { p.expand.combine = as_enum<Combine>(v); }},
  KeyInfo{"expand.ready_tasks_per_node_above", T::number, "", 0, {}, {},
    "Holds when the ready tasks of all nodes together, divided by the nodes that reported, "
    "are above this: work is piling up.",
    [](Policy& p, const KeyValue& v) { p.expand.ready_tasks_per_node_above = v.number; }},
  KeyInfo{"expand.busy_fraction_above", T::fraction, "", 0, 1, {},
    "Holds when the mean busy fraction of the nodes is above this: the devices are "
    "saturated.",
    [](Policy& p, const KeyValue& v) { p.expand.busy_fraction_above = v.number; }},
  KeyInfo{"expand.steal_failure_ratio_below", T::fraction, "", 0, 1, {},
    "Holds when failed / sent steal requests over the last tick, over all nodes, is below "
    "this: steals find work, so new nodes would find work too. Does not hold in a tick "
    "without steal requests.",
    [](Policy& p, const KeyValue& v) { p.expand.steal_failure_ratio_below = v.number; }},
  KeyInfo{"expand.idle_nodes_at_least", T::integer, "", 1, kIntMax, {},
    "Holds when the partition has at least this many idle nodes.",
    [](Policy& p, const KeyValue& v) { p.expand.idle_nodes_at_least = as_int(v); }},
  KeyInfo{"expand.predicted_efficiency_above", T::number, "", -10, 10, {},
    "Not a trigger: a condition on every expand that fires. The expand is made only when its "
    "predicted efficiency, E = (t_now / t_predicted - 1) / (added / nodes), is above this; "
    "t_predicted comes from the task graph the job's first rank reports (work, critical path, "
    "lanes) with what the graph does not explain kept as measured. Until the job has reported "
    "its graph and an iteration time, the expand waits.",
    [](Policy& p, const KeyValue& v) { p.expand.predicted_efficiency_above = v.number; }},

  KeyInfo{"shrink", T::section, "", {}, {}, {},
    "When to give nodes back. Each trigger is off unless written; with no trigger written "
    "the job never shrinks on its own.",
    nullptr},
  KeyInfo{"shrink.combine", T::choice, "any", {}, {}, kCombine,
    "any: shrink when at least one written trigger fires; all: only when every written "
    "trigger fires.",
    [](Policy& p, const KeyValue& v) { p.shrink.combine = as_enum<Combine>(v); }},
  KeyInfo{"shrink.ready_tasks_per_node_below", T::number, "", 0, {}, {},
    "Holds when the ready tasks of all nodes together, divided by the nodes that reported, "
    "are below this: work is running out.",
    [](Policy& p, const KeyValue& v) { p.shrink.ready_tasks_per_node_below = v.number; }},
  KeyInfo{"shrink.busy_fraction_below", T::fraction, "", 0, 1, {},
    "Holds when the mean busy fraction of the nodes is below this: devices sit idle.",
    [](Policy& p, const KeyValue& v) { p.shrink.busy_fraction_below = v.number; }},
  KeyInfo{"shrink.steal_failure_ratio_above", T::fraction, "", 0, 1, {},
    "Holds when failed / sent steal requests over the last tick, over all nodes, is above "
    "this: starving ranks find nothing to steal. Does not hold in a tick without steal "
    "requests.",
    [](Policy& p, const KeyValue& v) { p.shrink.steal_failure_ratio_above = v.number; }},
  KeyInfo{"shrink.iteration_efficiency_below", T::number, "", -10, 10, {},
    "Holds when the efficiency of the last expand, E = (t_before / t_after - 1) / "
    "(added / before), is below this: the added nodes did not pay off. Measured at the "
    "first iteration seen to complete after the tick that follows the expand; forgotten at the "
    "next resize.",
    [](Policy& p, const KeyValue& v) { p.shrink.iteration_efficiency_below = v.number; }},
  KeyInfo{"shrink.pending_jobs_at_least", T::integer, "", 1, kIntMax, {},
    "Holds when at least this many jobs are pending in the partition: others wait for "
    "nodes.",
    [](Policy& p, const KeyValue& v) { p.shrink.pending_jobs_at_least = as_int(v); }},

  KeyInfo{"tick", T::duration, "5s", 100, 3'600'000, {},
    "How often the controller evaluates the policy.",
    [](Policy& p, const KeyValue& v) { p.tick = v.duration; }},
  KeyInfo{"hysteresis_ticks", T::integer, "3", 1, 1000, {},
    "Consecutive ticks a trigger must hold before it fires (1: at the first tick).",
    [](Policy& p, const KeyValue& v) { p.hysteresis_ticks = as_int(v); }},
  KeyInfo{"cooldown", T::duration, "1m", 0, 86'400'000, {},
    "No decision for this long after a resize committed or aborted.",
    [](Policy& p, const KeyValue& v) { p.cooldown = v.duration; }},
  KeyInfo{"resize_timeout", T::duration, "2m", 1000, 86'400'000, {},
    "A resize still in flight after this long is aborted; the job keeps its size.",
    [](Policy& p, const KeyValue& v) { p.resize_timeout = v.duration; }},
  KeyInfo{"release_order", T::choice, "newest", {}, {}, kReleaseOrder,
    "Which nodes a shrink releases first: newest (joined last), least_loaded (fewest ready "
    "tasks, then lowest busy fraction) or highest_index. The batch host (index 0) is never "
    "released.",
    [](Policy& p, const KeyValue& v) { p.release_order = as_enum<ReleaseOrder>(v); }},

  KeyInfo{"stealing", T::section, "", {}, {}, {},
    "Work stealing between the job's ranks, handed to libbellows "
    "(bellows::runtime::StealOptions, same defaults and rules).",
    nullptr},
  KeyInfo{"stealing.enabled", T::boolean, "false", {}, {}, {},
    "Whether starving ranks steal ready tasks from other ranks.",
    [](Policy& p, const KeyValue& v) { p.stealing.enabled = v.boolean; }},
  KeyInfo{"stealing.chunk", T::integer, "4", 1, kIntMax, {},
    "Tasks a thief asks for in one request.",
    [](Policy& p, const KeyValue& v) { p.stealing.chunk = as_int(v); }},
  KeyInfo{"stealing.max_hops", T::integer, "2", 0, kIntMax, {},
    "Times a request may be forwarded, on the thief's behalf, to another victim.",
    [](Policy& p, const KeyValue& v) { p.stealing.max_hops = as_int(v); }},
  KeyInfo{"stealing.device_threshold", T::integer, "1", 0, kIntMax, {},
    "A device starves when its ready tasks drop below this; a victim never gives so many "
    "that its own device would.",
    [](Policy& p, const KeyValue& v) { p.stealing.device_threshold = as_int(v); }},
  KeyInfo{"stealing.node_threshold", T::integer, "1", 0, kIntMax, {},
    "A rank starves when the ready tasks of all its devices together drop below this.",
    [](Policy& p, const KeyValue& v) { p.stealing.node_threshold = as_int(v); }},
  KeyInfo{"stealing.victim", T::choice, "last-victim", {}, {}, kVictim,
    "How a thief picks its victim: random every time, or last-victim (the last rank that "
    "gave work, else random).",
    [](Policy& p, const KeyValue& v) { p.stealing.victim = as_enum<VictimPolicy>(v); }},
  KeyInfo{"stealing.seed", T::integer, "1", 0, kUnsignedMax, {},
    "Seeds the random victim choice (mixed with the rank).",
    [](Policy& p, const KeyValue& v) { p.stealing.seed = static_cast<unsigned>(v.integer); }},
  KeyInfo{"stealing.min_backoff_us", T::integer, "50", 1, kIntMax, {},
    "Pause of a thief after an empty answer, microseconds; doubled after each empty answer "
    "up to stealing.max_backoff_us.",
    [](Policy& p, const KeyValue& v) { p.stealing.min_backoff_us = as_int(v); }},
  KeyInfo{"stealing.max_backoff_us", T::integer, "2000", 1, kIntMax, {},
    "Longest pause of a thief, microseconds. At least stealing.min_backoff_us.",
    [](Policy& p, const KeyValue& v) { p.stealing.max_backoff_us = as_int(v); }},
  KeyInfo{"stealing.victim_poll_us", T::integer, "50", 1, kIntMax, {},
    "Longest sleep of the communication thread of a rank with tasks to spare, "
    "microseconds, so that steal requests are answered quickly.",
    [](Policy& p, const KeyValue& v) { p.stealing.victim_poll_us = as_int(v); }},

  KeyInfo{"recovery", T::section, "", {}, {}, {},
    "What the job does when it loses a node: it rolls back to its last checkpoint, the "
    "lost ranks' tiles coming from the copies their buddies on other nodes hold "
    "(docs/recovery.md, \"Recovery from buddy checkpoints\").",
    nullptr},
  KeyInfo{"recovery.on_node_loss", T::choice, "replace", {}, {}, kNodeLoss,
    "Who takes over a lost node's work: replace (ranks on new nodes from the batch system, "
    "one per lost rank; the work of lost ranks no node came for goes to the survivors) or "
    "shrink (the survivors). A recovery that would leave fewer than nodes.min nodes is "
    "refused, with the reason.",
    [](Policy& p, const KeyValue& v) { p.recovery.on_node_loss = as_enum<NodeLossAction>(v); }},
  KeyInfo{"recovery.node_mean_time_between_failures", T::duration, "8760h", 1000, kHundredYearsMs, {},
    "One node's mean time between failures M; the job's is M over its nodes. With the "
    "measured cost of a checkpoint it sets the checkpoint interval (Young/Daly), in "
    "iterations, at least 1.",
    [](Policy& p, const KeyValue& v) { p.recovery.node_mean_time_between_failures = v.duration; }},
  KeyInfo{"recovery.heartbeat_timeout", T::duration, "5s", 500, 60'000, {},
    "How long a connection between the controller and a node's daemon may stay silent before "
    "it is closed and the node counted as lost; the heartbeats go every fifth of it. A node "
    "whose network is cut is detected this long after the cut. Shorter detects sooner, but a "
    "loaded node that misses it is lost for nothing.",
    [](Policy& p, const KeyValue& v) { p.recovery.heartbeat_timeout = v.duration; }},
};
// clang-format on

static_assert(kCombine.size() == 2 && static_cast<int>(Combine::all) == 1);
static_assert(kReleaseOrder.size() == 3 && static_cast<int>(ReleaseOrder::highest_index) == 2);
static_assert(kVictim.size() == 2 && static_cast<int>(VictimPolicy::last_victim) == 1);
static_assert(kNodeLoss.size() == 2 && static_cast<int>(NodeLossAction::replace) == 1);

}  // namespace

std::span<const KeyInfo> schema() noexcept { return kKeys; }

const KeyInfo* find_key(std::string_view path) noexcept {
  const auto it = std::find_if(kKeys.begin(), kKeys.end(),
                               [path](const KeyInfo& k) { return k.path == path; });
  return it == kKeys.end() ? nullptr : &*it;
}

std::string_view key_name(std::string_view path) noexcept {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::string_view key_section(std::string_view path) noexcept {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view{} : path.substr(0, dot);
}

std::string_view to_string(Combine value) noexcept { return kCombine[static_cast<std::size_t>(value)]; }
std::string_view to_string(ReleaseOrder value) noexcept {
  return kReleaseOrder[static_cast<std::size_t>(value)];
}
std::string_view to_string(VictimPolicy value) noexcept {
  return kVictim[static_cast<std::size_t>(value)];
}
std::string_view to_string(NodeLossAction value) noexcept {
  return kNodeLoss[static_cast<std::size_t>(value)];
}

}  // namespace bellows::policy
