#pragma once
// The batch scheduler of the cluster simulation: first come, first served with EASY
// backfilling (Lifka, "The ANL/IBM SP scheduling system", JSSPP 1995; as analysed by Mu'alem
// and Feitelson, "Utilization, predictability, workloads, and user runtime estimates in
// scheduling the IBM SP2 with backfilling", IEEE TPDS 12(6), 2001, section 2), the rule of
// Slurm's backfill plugin with one reservation: only the queue's first job is promised a start.
//
// A decision on values: which queued jobs start now, from the free nodes, the queue and the
// running jobs' expected ends. A pure function: no clock, no state, safe from any thread.

#include <span>
#include <vector>

namespace bellows::sim {

/// A job waiting in the queue, in queue (submit) order.
struct QueuedJob {
  int nodes = 1;
  /// The user's time limit: how long the scheduler expects it to run.
  double estimate = 0.0;
};

/// A running job as the scheduler sees it: the nodes it holds and when it expects them back.
struct RunningJobEstimate {
  int nodes = 1;
  /// Expected end (absolute seconds); an end already passed counts as now.
  double expected_end = 0.0;
};

/// The positions in `queue` of the jobs to start at `now`, in the order they start:
///  1. the queue's first jobs, in order, as long as each fits on the free nodes;
///  2. when the first job left does not fit, its reservation: the earliest time (the "shadow
///     time") at which the free nodes and those of the running jobs expected to end by then
///     are enough for it, and the "extra" nodes left over at that time beyond what it needs;
///  3. every later job, in order, that fits on the free nodes now and either ends by the
///     shadow time (now + estimate <= shadow) or uses no more than the extra nodes (which it
///     then takes from them).
/// The jobs started in step 1 count as running with their estimates in step 2.
[[nodiscard]] std::vector<int> easy_backfill(int free_nodes, double now, std::span<const QueuedJob> queue,
                                             std::span<const RunningJobEstimate> running);

}  // namespace bellows::sim
