#pragma once
// A bag of independent tasks on a simulated machine (SimGrid 3.32, S4U), distributed by the
// runtime's own Dtree decisions (bellows/runtime/dtree.hpp) or by a static block split.
// docs/sim.md, "Dtree: a bag of independent tasks".
//
// The bag: N tasks numbered 0..N-1 whose costs are log-normal, drawn per index from a
// counter-based hash of (seed, index), so any rank computes the cost of any range without a
// table. A task's cost is in seconds on a node of speed 1.
//
// The ranks: one per node of the generated platform (platform.hpp), one lane each. A rank is
// two actors on its host: a worker that runs its own work, a range at a time, as one S4U
// execution of the range's summed cost; and a server that answers its children's requests and
// asks its own parent for more (the pull protocol of Dtree's code). Serving a request costs the
// server CPU on the same host (it shares the core with the worker while both run). Requests and
// replies are messages through SimGrid's network model.
//
// With the static distribution, rank r runs [r N / R, (r + 1) N / R) as one execution and
// sends nothing.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bellows/runtime/dtree.hpp"
#include "bellows/sim/platform.hpp"

namespace bellows::sim {

enum class BagDistribution { dtree, static_blocks };

struct BagOptions {
  int ranks = 4;              ///< R: nodes, one rank each
  std::int64_t tasks = 1000;  ///< N
  BagDistribution distribution = BagDistribution::dtree;
  std::uint64_t seed = 1;
  /// Mean cost of a task on a node of speed 1, milliseconds.
  double mean_ms = 1.0;
  /// The log-normal's sigma (of the cost's logarithm): 0 is every task the mean; 1.5 has a
  /// coefficient of variation of 2.9; the largest of 10^8 tasks (seed 1) is 1,850 x
  /// the mean.
  double sigma = 1.5;
  /// Fraction of the ranks that are slow (spread evenly over the rank numbers; never rank 0
  /// unless all are), and how many times slower they run.
  double slow_fraction = 0.0;
  double slow_factor = 1.0;
  /// Whether Dtree's shares follow the nodes' speeds (true) or count every node as equal.
  bool speed_shares = true;
  runtime::DtreeOptions dtree;
  /// What a rank asks its parent for at least (Dtree's code asks for about 1.5 x its
  /// threads: one lane here, so 2).
  std::int64_t min_ask = 2;
  /// CPU a server spends per request it answers, microseconds (the 40 us a victim spends on
  /// a steal request, measured: docs/sim.md).
  double serve_us = 40.0;
  /// Bytes of a request and of a reply (a rank number; a range).
  std::uint64_t message_bytes = 64;
  PlatformOptions platform;
};

/// An empty string when the options are usable, else what is wrong (naming the option).
[[nodiscard]] std::string validate(const BagOptions& options);

/// The cost of task `index`, seconds on a node of speed 1.
[[nodiscard]] double bag_task_seconds(const BagOptions& options, std::int64_t index);

/// Simulates the bag and returns the report: {"distribution", "ranks", "tasks", "makespan",
/// "optimal", "work_bound", "task_bound", "over_optimal" (makespan / optimal - 1), "requests",
/// "grants", "bytes", "wait_fraction", "idle_fraction", "serve_fraction", "executions",
/// "events", "each_once", "wall_seconds", "events_per_second", ...}. Throws
/// std::invalid_argument for unusable options and std::logic_error when an index did not run
/// exactly once. One simulation per process (SimGrid's engine starts once).
[[nodiscard]] nlohmann::json simulate_bag(const BagOptions& options);

[[nodiscard]] const char* to_string(BagDistribution distribution) noexcept;

}  // namespace bellows::sim
