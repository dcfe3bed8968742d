#pragma once
// A cluster of rigid and malleable jobs (bellows-sim-cluster; docs/sim.md, "A cluster of
// elastic and rigid jobs"): a batch scheduler (FCFS with EASY backfilling,
// cluster_schedule.hpp) starts the jobs of a workload on N nodes; each malleable job has its
// own bellows::policy::PolicyEngine, the controller's, ticked at its policy's `tick` with the
// inputs the controller gives it (the job's nodes and their metrics, the idle nodes, the
// pending jobs), and its expands and shrinks cost the measured resize times.
//
// A discrete-event simulation in one thread, without SimGrid: a job is a rate of progress,
// not tasks and messages. Deterministic: the same workload and options give the same report.

#include <cstdint>
#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include <bellows/policy/policy.hpp>

#include "bellows/sim/cluster_workload.hpp"

namespace bellows::sim {

/// How a malleable job looks to its policy engine, and what a resize costs.
struct ElasticModel {
  /// Seconds a job stops between an expand decision and running on its new nodes (the new
  /// nodes are held from the decision); default: the measured `bellows expand: decision ->
  /// first task` on Slurm (docs/benchmarks.md, "Slurm: resize round trips").
  double expand_seconds = 0.502;
  /// Seconds a job stops between a shrink decision and the nodes being free
  /// (`bellows shrink: decision -> node idle`).
  double shrink_seconds = 0.174;
  /// An iteration's length on the job's submitted nodes; the metrics report iterations.
  double iteration_seconds = 10.0;
  /// Tasks of one iteration per submitted node: a node's mean ready tasks are half the
  /// iteration's tasks over the job's nodes (the queue drains over the iteration).
  int tasks_per_node = 32;
};

/// One run: the cluster, and elasticity on (with a policy) or off.
struct ClusterOptions {
  int nodes = 128;
  /// Bounded slowdown's threshold: max(1, (wait + run) / max(run, tau)).
  double tau_seconds = 10.0;
  ElasticModel model;
  /// Elasticity on: every malleable job's engine starts from this policy with nodes.min and
  /// nodes.max replaced by the job's range (as `--elastic=MIN:MAX` does; nodes.step lowered to
  /// the range's width when larger). Off (nullopt): malleable jobs run rigid at their size.
  std::optional<policy::Policy> policy;
  /// Adds the report's `schedule`: every job's start, end and resizes (for small workloads).
  bool record_schedule = false;
};

/// Called now and then with the jobs finished so far and the total.
using ClusterProgressFn = std::function<void(std::size_t finished, std::size_t total)>;

/// Runs the workload to its end; the report (docs/sim.md): utilisation (node-seconds held
/// over the cluster's during the makespan) and work utilisation (the jobs' node-seconds at
/// their submitted sizes over the same), waits, bounded slowdown and makespan, over all jobs
/// and per kind, resizes and the engine's tick time.
/// Throws std::invalid_argument for options out of range, a job larger than the cluster, or a
/// job range the policy cannot take, naming the option or the job.
[[nodiscard]] nlohmann::json simulate_cluster(const ClusterWorkload& workload, const ClusterOptions& options,
                                              const ClusterProgressFn& progress = {});

}  // namespace bellows::sim
