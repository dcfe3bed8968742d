#pragma once
// What TeamLB weighs each tile by, and whether planning its teams again pays (docs/teams.md,
// "TeamLB between iterations").
//
// The load of a tile is the compute seconds of the tasks it decides, measured per iteration.
// One iteration's seconds are noisy on a shared host: a task the kernel preempted for a
// moment looks several times heavier than it is, once. So a tile weighs the median of its
// seconds over the last `window` iterations it was seen in (the Charm++ load balancers that
// TeamLB sits in weigh the measured loads of past iterations too, not the last alone:
// Meneses, Kale and Bronevetsky, "Dynamic Load Balance for Optimized Message Logging in
// Fault Tolerant HPC Applications", section IV). A median forgets a one-off spike at once
// (it is an outlier of the window, whatever its size) and follows a lasting change once it
// holds more than half the window; a tile seen once weighs that one sample.
//
// The teams are planned once after an attach; planning them again costs a checkpoint taken
// before the next iteration's tasks, the log kept under the old teams, and the tile moves.
// replan_decision() re-plans only when the heaviest rank's predicted seconds fall by more
// than a threshold and the new plan's cut stays within the plan's bound.
//
// Nothing here sends a message, reads a clock or takes a lock.

#include <cstddef>
#include <deque>
#include <span>
#include <string>
#include <vector>

namespace bellows::runtime {

/// Per tile, its measured seconds in the last `window` iterations it was seen in; the loads
/// TeamLB weighs are their medians. Not thread-safe; every rank that decides holds its own.
class TileLoadHistory {
 public:
  /// `window`: the iterations kept per tile, >= 1. Throws std::invalid_argument otherwise.
  explicit TileLoadHistory(int window);

  /// One iteration, per tile: the seconds its tasks were measured for, summed over the ranks,
  /// and how many of its tasks ran (0: the tile was not seen in that iteration, and its
  /// history is left as it was). The first call sets the tile count; throws
  /// std::invalid_argument, naming the value, for spans of different lengths, a length other
  /// than the tile count, or negative or non-finite seconds or task counts.
  void add_iteration(std::span<const double> seconds, std::span<const double> tasks);

  /// Per tile: the median of its kept seconds (the mean of the middle two for an even
  /// count), 0 for a tile never seen. Empty before the first iteration.
  [[nodiscard]] std::vector<double> loads() const;

  /// Iterations added since construction or clear(), at most `window`.
  [[nodiscard]] int iterations() const noexcept { return iterations_; }
  [[nodiscard]] int window() const noexcept { return window_; }
  /// Whether `window` iterations have been added since construction or clear().
  [[nodiscard]] bool full() const noexcept { return iterations_ >= window_; }
  /// Forgets every tile's seconds (the tiles moved, or the ranks changed).
  void clear() noexcept;

 private:
  int window_;
  int iterations_ = 0;
  std::vector<std::deque<double>> kept_;  ///< per tile: its samples, oldest first
};

/// Per rank: how many times longer per flop than the job's median rank the tasks of the tiles
/// it holds took (`seconds` and `flops` per rank, summed over its tiles), so that TeamLB
/// weighs each tile by its seconds at the median speed and gives a slowed rank fewer of them
/// (TeamRequest::rank_slowness). 1 for a rank that ran no flops or no seconds, and for one
/// within `tolerance` of the median: kernels of different kinds run at different speeds per
/// flop, so a rank counts as slower or faster only past that. Throws std::invalid_argument,
/// naming the value, for spans of different lengths, negative or non-finite seconds or flops,
/// or a tolerance that is negative or not finite.
[[nodiscard]] std::vector<double> rank_slowness(std::span<const double> seconds, std::span<const double> flops,
                                                double tolerance = 0.25);

/// The fewest ranks whose median speed on a task class tells the others' slowness: of two,
/// the median is their mean, and one slowed rank makes the other read fast; of three, a
/// slowed rank is outvoted.
inline constexpr std::size_t kRanksForAClassMedian = 3;

/// Per rank: its slowness measured class by class, so that a rank whose mix of task classes
/// differs from the others' (Cholesky's diagonal tiles, whose POTRF and SYRK run slower per
/// flop than GEMM) does not read as slower or faster for its mix. For each task class, the
/// median rank's seconds per flop among the ranks that ran it; a rank's slowness is its
/// measured seconds over what its flops of each class would take at that class's median, so
/// each class counts by the seconds it takes the rank at the median speed (a rank slowed k
/// times in every class reads k, whatever its mix).
///
/// A class that fewer than kRanksForAClassMedian ranks ran (Cholesky's POTRF and SYRK on the
/// 2 of 4 ranks that hold diagonal tiles) does not decide the slowness of a rank that ran a
/// class more ranks ran: that rank is read from those classes alone. A rank that ran only
/// such few-rank classes is read against, for each of them, the median of its ranks' seconds
/// per flop each divided by that rank's slowness from its other classes, among the ranks
/// that have one (as a rank is slowed alike in every class); where none has, the class's
/// plain median (two ranks that alone ran anything tell only that one is slower than the
/// other, and read as their mean's slowness).
///
/// `seconds` and `flops` hold one value per rank and class, rank by rank (rank r's class c
/// at r * classes + c). 1 for a rank that ran nothing, and for one within `tolerance` of 1.
/// A class that only one rank ran is its own median and tells nothing of that rank. Throws
/// std::invalid_argument, naming the value, for spans of different lengths, a length that is
/// not a whole number of ranks of `classes` values, no classes, negative or non-finite
/// seconds or flops, or a tolerance that is negative or not finite.
[[nodiscard]] std::vector<double> rank_slowness_by_class(std::span<const double> seconds,
                                                         std::span<const double> flops, std::size_t classes,
                                                         double tolerance = 0.25);

/// What replan_decision() weighs: one iteration's predicted seconds per rank (the tiles'
/// loads summed on their holders) under the teams and holders now and under a new plan, and
/// the bytes crossing teams under each.
struct ReplanFacts {
  std::span<const double> rank_seconds_now;
  std::span<const double> rank_seconds_planned;
  double crossing_bytes_now = 0.0;
  double crossing_bytes_planned = 0.0;
  /// The load-blind partition's crossing bytes that the new plan is held within
  /// (1 + cut_bound) of (TeamPlan::reference_cut); negative when there is none, and the
  /// bound is then held against the bytes crossing now.
  double crossing_bytes_reference = -1.0;
  double cut_bound = 0.10;
  /// The least gain that pays for a re-plan: the predicted fall of the heaviest rank's
  /// seconds, as a fraction of its seconds now (MessageLogOptions::replan_min_gain).
  double min_gain = 0.10;
};

/// Whether to take the new plan, and why, in words.
struct ReplanDecision {
  bool replan = false;
  /// (heaviest now - heaviest planned) / heaviest now; 0 when nothing is loaded now.
  double gain = 0.0;
  std::string reason;
};

/// Re-plans when the gain is above min_gain and the planned crossing bytes are at most
/// (1 + cut_bound) times the reference's (or, without one, the bytes crossing now). Throws
/// std::invalid_argument, naming the value, for seconds per rank of different counts or
/// none, negative or non-finite seconds or bytes, or a bound or gain that is negative or not
/// finite.
[[nodiscard]] ReplanDecision replan_decision(const ReplanFacts& facts);

}  // namespace bellows::runtime
