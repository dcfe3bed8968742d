#pragma once
// The policy engine: node metrics in, a resize decision out, once per tick.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <bellows/protocol/metrics.hpp>

#include "bellows/policy/load.hpp"
#include "bellows/policy/policy.hpp"

namespace bellows::policy {

/// The engine never reads a clock: the caller passes the time of each event.
using TimePoint = std::chrono::steady_clock::time_point;

/// What one node of the job reported for the last tick: the metrics record its rank sends
/// (bellows/protocol/metrics.hpp) with the node's place in the job.
struct NodeMetrics {
  /// The node's host name, as the resource manager knows it.
  std::string name;
  /// Position of the node in the job; 0 is the batch host, which is never released.
  int index = 0;
  /// Order in which the nodes joined the job: larger joined later.
  std::uint64_t joined = 0;
  /// The node's last report, except steals_sent and steals_failed: those of every report
  /// since the previous tick, summed. iteration is 0 and iteration_seconds 0 before the
  /// node completed its first iteration.
  protocol::Metrics metrics;
};

/// Everything one tick looks at.
struct TickInput {
  TimePoint now{};
  /// Nodes the job holds now (at least 1).
  int nodes = 1;
  /// One entry per node that reported; nodes that did not are left out.
  std::span<const NodeMetrics> metrics;
  /// Idle nodes in the job's partition.
  int idle_nodes = 0;
  /// Jobs pending in the job's partition.
  int pending_jobs = 0;
};

enum class Action { hold, expand, shrink };

[[nodiscard]] std::string_view to_string(Action action) noexcept;

/// What to do after a tick.
struct Decision {
  Action action = Action::hold;
  /// Nodes to add (expand) or release (shrink); 0 for hold.
  int nodes = 0;
  /// Why, naming each trigger with its measured value against its threshold, e.g.
  /// "expand by 2: expand.busy_fraction_above: 0.95 > 0.9 (held 3 ticks)".
  std::string reason;
  /// Shrink: the names of the nodes to release, in release_order; `nodes` entries.
  std::vector<std::string> release;
};

/// Evaluates a policy tick by tick. Each expand or shrink trigger has its own count of
/// consecutive ticks on which it held; it fires once that count reaches
/// hysteresis_ticks, and a direction fires when any (combine: any) or all (combine: all)
/// of its written triggers fire. Limits come first: a job outside [nodes.min, nodes.max]
/// (after a reload) is brought back inside without waiting for triggers. After an expand
/// or shrink decision the engine counts the resize as in flight and decides nothing more
/// until told that it committed or aborted; after either it waits `cooldown`. Ticks in
/// flight or in cooldown do not count toward hysteresis.
///
/// Iteration efficiency, measured after each expand from `before` to `after` nodes:
///   E = (t_before / t_after - 1) / ((after - before) / before)
/// where t_before is the job's last iteration time seen at a tick before the expand
/// committed, and t_after the job's iteration time at the first tick that sees more
/// iterations completed than the first tick after the commit saw (what that first tick
/// sees may have run before the resize). The job's iteration time is the largest
/// metrics.iteration_seconds among the nodes that completed the most iterations. E = 1: the added nodes sped the job up in proportion; 0: no gain;
/// negative: the job got slower. A later resize forgets it.
///
/// Not thread-safe: one thread (the controller's) calls every method.
class PolicyEngine {
 public:
  /// Starts with no resize in flight and no cooldown.
  /// Throws std::invalid_argument when the policy breaks a rule between keys.
  explicit PolicyEngine(Policy policy);

  /// Evaluates one tick. Throws std::invalid_argument on impossible input (nodes < 1,
  /// negative counts, a busy fraction outside 0 to 1, more failed than sent steals), naming
  /// the node and field.
  [[nodiscard]] Decision tick(const TickInput& input);

  /// A resize asked for elsewhere (an operator, the application) started: hold until it
  /// commits or aborts.
  void resize_started(TimePoint now);
  /// The resize in flight finished; the job went from `nodes_before` to `nodes_after`.
  /// Starts the cooldown.
  void resize_committed(TimePoint now, int nodes_before, int nodes_after);
  /// The resize in flight was given up; the job keeps its size. Starts the cooldown.
  void resize_aborted(TimePoint now);
  /// A controller that took the job over (`bellows run --attach`) starts a new engine: the
  /// job's last resize, under the controller that died, finished `ago` before `now`. Its
  /// cooldown runs on from that end, so the engine holds until `now - ago + cooldown`, as the
  /// engine of that controller would have; nothing when it has run out. No resize is in
  /// flight. Throws std::invalid_argument when `ago` is negative.
  void resize_finished_earlier(TimePoint now, Duration ago);

  [[nodiscard]] bool resize_in_flight() const noexcept { return in_flight_since_.has_value(); }
  /// True when a resize has been in flight longer than resize_timeout: the caller aborts
  /// it and then calls resize_aborted.
  [[nodiscard]] bool resize_overdue(TimePoint now) const noexcept;

  /// The efficiency of the last expand once measured (see the class comment).
  [[nodiscard]] std::optional<double> iteration_efficiency() const noexcept {
    return efficiency_;
  }

  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }

  /// Reload: parses the text into a new Policy, validates it, then swaps it in and starts
  /// the trigger counts afresh; the resize in flight, the cooldown and the efficiency
  /// measurement carry on. On any error the current policy stays and the diagnostics
  /// are returned; an empty result means the new policy is in force.
  [[nodiscard]] std::vector<Diagnostic> reload(std::string_view text, std::string_view name);
  /// reload() from a file.
  [[nodiscard]] std::vector<Diagnostic> reload_file(const std::string& path);

 private:
  struct Expansion {
    double t_before = 0.0;
    int before = 0;
    int after = 0;
    /// Iterations completed as seen at the first tick after the commit.
    std::optional<std::uint64_t> baseline;
  };

  void reset_streaks() noexcept;
  void finish_resize(TimePoint now);
  void observe_iterations(std::span<const NodeMetrics> metrics);

  Policy policy_;
  std::optional<TimePoint> in_flight_since_;
  std::optional<TimePoint> cooldown_until_;
  // Consecutive ticks each trigger held, in the order the engine evaluates them.
  std::vector<int> expand_streaks_;
  std::vector<int> shrink_streaks_;
  // The job's iteration time at the last tick that saw one.
  std::optional<double> last_iteration_seconds_;
  std::optional<Expansion> expansion_;
  std::optional<double> efficiency_;
};

}  // namespace bellows::policy
