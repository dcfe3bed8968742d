#pragma once
// Proactive offloading: which work an overloaded rank pushes to which underloaded rank at
// the start of an iteration, before any rank starves, from the costs measured in the
// previous iterations.
//
// After the proactive load balancing of Chameleon ("From Work Stealing to Reactive Load
// Balancing", section 4, stage 3: proactive task offloading, fed by stages 1-2, task
// characterization and online load prediction): reactive stealing only acts once a rank
// starves and pays a round trip per steal; when the load of an iteration can be predicted
// from the previous ones, the work can be spread before it starts, and stealing is left
// with what the prediction missed.
//
// The model. Every rank r reports, from its own measurements:
//   s_r    seconds one flop of work takes on r (its whole device: lanes folded in), as its
//          tasks took in the last iteration. A rank slowed down (another job on its node, a
//          throttled GPU) shows a larger s_r from the iteration after.
//   L_r    its predicted work for the coming iteration, in seconds: the flops of the work
//          the fixed mapping gives it times s_r, work that cannot move included.
//   l_r, b_r   what a tile moving to r costs: l_r + bytes * b_r seconds.
// A candidate c is work that moves as a whole (in the runtime: the tasks one tile decides),
// with f_c flops, owned by rank a, that a receiver must be sent `bytes_c` in `transfers_c`
// tiles to run (the inputs it reads, what it writes back). Moving c from a to b takes
// c_a = f_c s_a off a and gives b c_b = f_c s_b of work plus x_b = transfers_c l_b +
// bytes_c b_b of transfer, counted as b's time (a pessimistic bound: transfers may overlap
// other work).
//
// The rule. Nothing moves unless the most loaded rank exceeds the mean load by
// OffloadOptions::min_imbalance, and, when the previous iteration's time T is known, unless
// max L_r >= OffloadOptions::min_compute_share * T (else the iteration is held back by
// something other than where the work is, and a push only adds transfers). Ranks above the mean are overloaded and only they push;
// ranks below it are underloaded and only they receive. Greedy, until nothing passes: the
// most loaded overloaded rank a that still has candidates offers them to the least loaded
// underloaded rank b; a candidate passes when its predicted gain exceeds its transfer,
//   gain = max(L_a, L_b) - max(L_a - c_a, L_b + c_b) > x_b,
// and of those that pass the one that lowers the later of the two finishes most, transfer
// included, moves (then L_a -= c_a, L_b += c_b + x_b). When none passes, a pushes no more.
// Ties go to the lower rank and the lower candidate index, so the plan is a function of
// its inputs alone.
//
// Nothing here sends a message, reads a clock or takes a lock: the engine gathers the
// inputs and carries out the plan (runtime_client/engine/src/engine_offload.cpp).
//
// Thread safety: the functions are pure and safe from any thread.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "bellows/runtime/options.hpp"

namespace bellows::runtime {

/// What the plan knows of one rank (see the file comment).
struct OffloadRank {
  double load_seconds = 0.0;              ///< L_r: predicted work of the coming iteration
  double seconds_per_flop = 0.0;          ///< s_r: measured speed of the rank, lanes folded in
  double transfer_latency_seconds = 0.0;  ///< l_r: fixed cost of one tile moving to r
  double seconds_per_byte = 0.0;          ///< b_r: cost of each byte moving to r
};

/// Work that moves as a whole: in the runtime, the tasks one tile decides.
struct OffloadCandidate {
  int rank = 0;                ///< the rank the fixed mapping gives it to
  double flops = 0.0;          ///< f_c
  std::uint64_t bytes = 0;     ///< what a receiver must be sent to run it
  std::uint32_t transfers = 0; ///< how many tiles those bytes are in
};

/// One push of the plan.
struct OffloadMove {
  std::size_t candidate = 0;      ///< index into the candidates
  int from = 0;
  int to = 0;
  double gain_seconds = 0.0;      ///< how much earlier the later of the two ranks finishes
                                  ///< (transfer included), as predicted when it was chosen
  double transfer_seconds = 0.0;  ///< x_b
  friend bool operator==(const OffloadMove&, const OffloadMove&) = default;
};

/// The pushes and the loads they are predicted to leave.
struct OffloadPlan {
  std::vector<OffloadMove> moves;
  std::vector<double> loads_after;  ///< per rank, L_r after the moves (transfers included)
  double makespan_before = 0.0;     ///< max L_r before
  double makespan_after = 0.0;      ///< max L_r after
};

class OffloadPolicy {
 public:
  /// The plan for `ranks` (indexed by rank) and `candidates` (see the file comment);
  /// `previous_iteration_seconds`: T, 0 when not known. `options.enabled` is not read (the
  /// caller decides whether to plan at all).
  /// Throws std::invalid_argument when a candidate names a rank outside `ranks`, or a load,
  /// speed, cost or flop count is negative or not finite.
  [[nodiscard]] static OffloadPlan plan(std::span<const OffloadRank> ranks,
                                        std::span<const OffloadCandidate> candidates,
                                        const OffloadOptions& options = {},
                                        double previous_iteration_seconds = 0.0);

  /// x_b: seconds to send `candidate` to `receiver`.
  [[nodiscard]] static double transfer_seconds(const OffloadRank& receiver,
                                               const OffloadCandidate& candidate) noexcept;

  // ---- while the iteration runs: a rank whose work drifts past the plan ----
  //
  // The plan predicts each rank's work from the last iteration's speeds. A rank that slows
  // down within the iteration (a noisy neighbour arrives) sees its work grow past what the
  // plan predicted for the busiest rank; it then invites the ranks the plan left least
  // loaded, one at a time, to steal from it before they starve (wire::StealInvitation); the
  // victim's gift rule (StealPolicy) decides what each invited thief gets, as for any request.

  /// What a rank knows of itself against the plan, while the iteration runs.
  struct Drift {
    /// What its tasks of the iteration cost so far plus what is left, at the speed they ran
    /// at so far, per lane.
    double predicted_work_seconds = 0.0;
    /// The most work the plan predicted for any rank (0: no plan).
    double planned_makespan_seconds = 0.0;
    /// Seconds per flop per lane: as its tasks ran so far, and as the plan took it.
    double seconds_per_flop = 0.0;
    double planned_seconds_per_flop = 0.0;
  };
  /// Whether a rank's work has drifted past the plan: it runs more than kDriftSlowdown times
  /// slower than the plan took it, and its predicted work exceeds the planned makespan by more
  /// than options.min_imbalance. Both, so that a rank whose work grew because it stole some,
  /// at its planned speed, does not count, nor one whose task times only vary. False without
  /// a plan or a planned speed.
  [[nodiscard]] static bool drifted(const Drift& drift, const OffloadOptions& options = {}) noexcept;
  /// How much slower than planned a rank must run to drift: task times on a host shared by
  /// several ranks vary by 10-20 % from one iteration to the next, and invitations on that
  /// noise alone (a threshold of 5 %) made the skewed block-sparse GEMM 4 % slower.
  static constexpr double kDriftSlowdown = 1.25;
  /// The ranks a drifting rank `self` invites, in order: least planned work first (ties: the
  /// lower rank), `self` left out. `planned_loads` is indexed by rank.
  [[nodiscard]] static std::vector<int> invitation_order(std::span<const double> planned_loads, int self);
  /// Whether a drifting rank may invite its next thief `seconds_since_last` after its last
  /// invitation of the iteration (negative: none yet), given the measured steal round trip:
  /// at most one per kInvitationRoundTrips round trips, so that the last invited thief's
  /// request and its answer come back before the next rank is asked to come.
  [[nodiscard]] static bool may_invite(double seconds_since_last, double round_trip_seconds) noexcept;
  static constexpr int kInvitationRoundTrips = 2;
};

/// Whether the plans pay, judged from the iterations they shaped. The plan predicts from
/// work alone and moves a tile's whole chain of tasks at a time; where reactive stealing,
/// moving single tasks, already runs an iteration near its bound (an imbalance that changes
/// part-way: docs/benchmarks.md, "Proactive offloading"), a plan's iteration is slower than
/// stealing alone made it. So the runtime compares: an iteration whose plan moved work
/// ("planned") that takes longer than the last iteration without moves ("unplanned") holds
/// the plans back for the next `skip` iterations, which then run on stealing alone and
/// measure it again; `skip` starts at 1 and doubles with each planned iteration that loses,
/// up to kMaxSkip, and goes back to 1 when a planned iteration is no slower. A change of the
/// job's size starts over (the times of different sizes do not compare). The first iteration
/// at a size is no reference (it pays for its warm-up), so plans start from the third
/// iteration at a size, once the second has measured stealing alone.
///
/// Thread safety: none; the engine's iteration driver owns it.
class OffloadFeedback {
 public:
  /// The most iterations one loss holds the plans back.
  static constexpr int kMaxSkip = 16;

  /// False while a planned iteration's loss holds the plans back, and until an iteration
  /// after the first at this size has run without moves (what plans are measured against).
  [[nodiscard]] bool may_plan() const noexcept { return skip_left_ == 0 && unplanned_seconds_ > 0.0; }
  /// An iteration of a job of `ranks` ranks ended after `seconds` (the slowest rank's);
  /// `moved`: its plan moved work.
  void iteration_ended(bool moved, double seconds, int ranks) noexcept;
  /// Iterations that may_plan() held back so far.
  [[nodiscard]] std::uint64_t held_back() const noexcept { return held_back_; }
  /// The time of the last iteration without moves, 0 before one.
  [[nodiscard]] double unplanned_seconds() const noexcept { return unplanned_seconds_; }

 private:
  int ranks_ = 0;
  double unplanned_seconds_ = 0.0;
  int skip_left_ = 0;
  int next_skip_ = 1;
  std::uint64_t held_back_ = 0;
};

}  // namespace bellows::runtime
