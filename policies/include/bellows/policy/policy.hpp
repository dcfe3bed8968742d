#pragma once
// A resize policy: the values of every policy key, as read from a YAML file.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::policy {

/// Durations are whole milliseconds (YAML: "500ms", "5s", "2m", "1h").
using Duration = std::chrono::milliseconds;

/// How the written triggers of one direction (expand or shrink) combine.
enum class Combine {
  any,  ///< the direction fires when at least one of its triggers fires
  all,  ///< the direction fires only when every one of its written triggers fires
};

/// Which nodes a shrink releases first. The node with index 0 (the batch host, where the
/// job's first rank runs) is never released.
enum class ReleaseOrder {
  newest,         ///< the nodes that joined last
  least_loaded,   ///< the fewest ready tasks, then the lowest busy fraction
  highest_index,  ///< the highest node index
};

/// How a starving rank picks its victim; mirrors bellows::runtime::VictimPolicy.
enum class VictimPolicy {
  random,       ///< a random other rank every time
  last_victim,  ///< the last rank that gave work, else random ("last-victim" in YAML)
};

/// What a job does with the work of a node it lost; mirrors bellows::runtime::NodeLossAction.
enum class NodeLossAction {
  shrink,   ///< the surviving nodes take it over
  replace,  ///< replacement nodes from the batch system take it over
};

[[nodiscard]] std::string_view to_string(Combine value) noexcept;
[[nodiscard]] std::string_view to_string(ReleaseOrder value) noexcept;
[[nodiscard]] std::string_view to_string(VictimPolicy value) noexcept;
[[nodiscard]] std::string_view to_string(NodeLossAction value) noexcept;

/// Size limits of the job, in nodes (`nodes:`).
struct NodeLimits {
  int min{};
  int max{};
  /// Nodes added or released by one resize; a resize toward a limit takes fewer.
  int step{};

  friend bool operator==(const NodeLimits&, const NodeLimits&) = default;
};

/// When to grow (`expand:`). An unset trigger is off.
struct ExpandTriggers {
  Combine combine{};
  std::optional<double> ready_tasks_per_node_above;
  std::optional<double> busy_fraction_above;
  std::optional<double> steal_failure_ratio_below;
  std::optional<int> idle_nodes_at_least;
  /// Not a trigger: a condition every expand that fires must meet (scaling.hpp).
  std::optional<double> predicted_efficiency_above;

  friend bool operator==(const ExpandTriggers&, const ExpandTriggers&) = default;
};

/// When to give nodes back (`shrink:`). An unset trigger is off.
struct ShrinkTriggers {
  Combine combine{};
  std::optional<double> ready_tasks_per_node_below;
  std::optional<double> busy_fraction_below;
  std::optional<double> steal_failure_ratio_above;
  std::optional<double> iteration_efficiency_below;
  std::optional<int> pending_jobs_at_least;

  friend bool operator==(const ShrinkTriggers&, const ShrinkTriggers&) = default;
};

/// The runtime's work-stealing parameters (`stealing:`). Field for field the same as
/// bellows::runtime::StealOptions, with the same defaults and validity rules; the policy
/// library does not link the runtime, so the caller copies these values over.
struct StealParameters {
  bool enabled{};
  int chunk{};
  int max_hops{};
  int device_threshold{};
  int node_threshold{};
  VictimPolicy victim{};
  unsigned seed{};
  int min_backoff_us{};
  int max_backoff_us{};
  int victim_poll_us{};

  friend bool operator==(const StealParameters&, const StealParameters&) = default;
};

/// Recovery after the loss of a node (`recovery:`): the runtime's checkpoint interval
/// (bellows::runtime::checkpoint_interval) and recovery plan (bellows::runtime::plan_recovery)
/// take these values.
struct RecoveryParameters {
  NodeLossAction on_node_loss{};
  /// One node's mean time between failures; the job's is this over its node count.
  Duration node_mean_time_between_failures{};
  /// Silence after which a controller <-> daemon connection is closed and its node lost.
  Duration heartbeat_timeout{};

  friend bool operator==(const RecoveryParameters&, const RecoveryParameters&) = default;
};

/// Every policy key. The meaning, default and allowed range of each field are declared
/// once, in the schema (schema.hpp); `bellows policy keys` prints them.
struct Policy {
  /// Every key at its schema default.
  Policy();

  NodeLimits nodes;
  ExpandTriggers expand;
  ShrinkTriggers shrink;
  /// How often the controller evaluates the policy.
  Duration tick{};
  /// Consecutive ticks a trigger must hold before it fires.
  int hysteresis_ticks{};
  /// No decision for this long after a resize committed or aborted.
  Duration cooldown{};
  /// A resize still in flight after this long is to be aborted.
  Duration resize_timeout{};
  ReleaseOrder release_order{};
  StealParameters stealing;
  RecoveryParameters recovery;

  friend bool operator==(const Policy&, const Policy&) = default;
};

/// A rule between several keys that a policy breaks (e.g. nodes.min above nodes.max).
struct Inconsistency {
  /// The keys involved, the one to point at first.
  std::vector<std::string> keys;
  std::string message;
};

/// Checks the rules that involve more than one key (the schema checks each key alone):
/// nodes.min <= nodes.max, nodes.step <= nodes.max - nodes.min when they differ,
/// stealing.max_backoff_us >= stealing.min_backoff_us, and no pair of expand and shrink
/// thresholds on the same measure that could both hold at once. Empty when consistent.
[[nodiscard]] std::vector<Inconsistency> check_consistency(const Policy& policy);

/// "500ms", "5s", "2m", "1h": the largest unit that divides the value exactly.
[[nodiscard]] std::string format_duration(Duration value);

}  // namespace bellows::policy
