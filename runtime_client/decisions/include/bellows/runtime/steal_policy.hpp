#pragma once
// The decisions of inter-rank work stealing, apart from the messages that carry them out.
//
// John & Milthorpe, "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU
// Work Stealing", CCGrid 2024, section IV: a rank starves when its ready tasks drop below
// a threshold, sends at most one steal request at a time to a victim chosen without load
// information (section IV-A: the last rank that gave work, else a random one), and a
// victim gives only what it can spare and forwards the rest of the request, on the
// thief's behalf, to its own last successful victim, at most N times.
//
// Nothing here sends a message, reads a clock or takes a lock: inputs are plain values,
// results are choices. The communication engine (runtime_client/engine/src/comm_engine_steal.cpp)
// carries them out over MPI; a simulator or a cost model can call the same functions.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "bellows/runtime/options.hpp"

namespace bellows::runtime {

/// The stealing state of one rank and the choices that depend on it: when it asks,
/// whom, how long it backs off after an empty answer, and where it forwards a request it
/// could not satisfy. One rank's victim and forwarding choices draw from one random
/// sequence, seeded from StealOptions::seed and the rank, so a run is reproducible.
///
/// Time is a value the caller passes in (`Time`: a duration since any fixed origin; the
/// runtime passes steady_clock's time since its epoch, a simulator its simulated time).
///
/// Thread safety: the static members are safe from any thread; an instance belongs to one
/// thread (the rank's communication thread).
class StealPolicy {
 public:
  using Time = std::chrono::nanoseconds;

  /// A request this rank forwards on a thief's behalf.
  struct Forward {
    int victim = -1;  ///< the rank it goes to
    int wanted = 0;   ///< tasks still wanted: what was asked less what this rank gave
    int hops = 0;     ///< times the request has been forwarded, this time included
    friend bool operator==(const Forward&, const Forward&) = default;
  };

  /// What a rank knows when it considers asking for work.
  struct ThiefView {
    std::size_t ready = 0;             ///< ready tasks queued on its device
    bool roots_queued = false;         ///< the iteration's roots are queued (before, all look idle)
    bool request_outstanding = false;  ///< its previous request is not fully answered yet
    bool iteration_over = false;       ///< every task of the iteration has run somewhere
    /// How long the rank expects to stay idle without stealing (CostModel: the predicted
    /// arrival of the tiles already on their way to it; unbounded when none are).
    double expected_idle_seconds = std::numeric_limits<double>::infinity();
    /// The cost model's current steal round trip.
    double round_trip_seconds = 0.0;
    /// What a task typically takes to run here (CostModel: the recent mean; unbounded
    /// before the first task ran, so that a rank without tasks of its own still asks).
    double task_seconds = std::numeric_limits<double>::infinity();
    /// What moving one tile to this rank typically takes (CostModel: the latest tile size;
    /// 0 before any tile came).
    double tile_move_seconds = 0.0;
    /// The largest compute share (GiftContext::compute_share) of any rank in the last
    /// iteration, and the mean over all ranks (0 before the first iteration ended): no
    /// victim weighs a gift's moves lighter than move_weight() of these two.
    double busiest_compute_share = 0.0;
    double mean_compute_share = 0.0;
  };

  /// A task queued on a victim, priced by the victim's cost model for one thief.
  struct GiftCandidate {
    double run_seconds = 0.0;     ///< predicted compute on the victim
    /// Predicted compute on the thief (thief_run_seconds()); negative: as on the victim.
    double thief_run_seconds = -1.0;
    double fetch_seconds = 0.0;   ///< moving the inputs the thief does not hold to it
    double return_seconds = 0.0;  ///< moving what the task writes back to the victim
    /// Predicted run time of the victim's tasks of this iteration, ready or not, that
    /// outrank this one (a higher priority), on all its lanes together: the latest the
    /// victim would start it, when they all become ready in time (0: not known).
    double outranking_seconds = 0.0;
    bool movable = true;          ///< false: stolen before (never moves again), or not priced
  };

  /// What else a victim weighs when it prices a gift.
  struct GiftContext {
    int lanes = 1;                     ///< tasks the victim's device runs at once
    double victim_load_seconds = 0.0;  ///< victim's predicted work left, per lane
    double thief_load_seconds = 0.0;   ///< thief's, from its request
    double reply_seconds = 0.0;        ///< the reply's way to the thief (half a round trip)
    /// The share of the last iteration the victim's device spent computing, per lane, in
    /// [0, 1] (0 before the first iteration ended): the rest it waited for tiles, or moved
    /// them over its own link.
    double compute_share = 0.0;
    /// The mean of compute_share over all ranks in the last iteration.
    double mean_compute_share = 0.0;
  };

  /// What a task that runs in `victim_run` seconds on the victim takes on the thief, from
  /// the two ranks' measured times for a task of its size (CostModel's fit over all classes,
  /// `thief_fit` and `victim_fit` seconds): victim_run * thief_fit / victim_fit when both
  /// are known (> 0) and one is more than kSameSpeedWithin times the other, else victim_run.
  /// A rank slowed down (a noisy neighbour, a throttled device) then takes no work it would
  /// run later than its victim, and a fast thief gets more of a slowed victim's.
  [[nodiscard]] static double thief_run_seconds(double victim_run, double thief_fit,
                                                double victim_fit) noexcept;
  /// Speeds measured within this factor of each other count as equal in
  /// thief_run_seconds(): ranks sharing a host measure their task times apart by up to
  /// 1.7x at 1000 GFLOP/s per rank (4 ranks on 2 cores, skewed bspgemm), from the
  /// sharing alone, and a gift priced on that noise is a coin toss.
  static constexpr double kSameSpeedWithin = 2.0;

  /// How much a gift's moves weigh in rule 0 of choose_gifts, for a victim whose device
  /// computed `victim_share` of the last iteration where the ranks computed `mean_share` on
  /// average (both clamped to [0, 1]): the victim's waiting share over the average rank's,
  /// (1 - victim_share) / (1 - mean_share), when the victim waited less than the average
  /// rank; else 1 (a balanced job, a rank no busier than the others, or the first
  /// iteration: all shares 0).
  [[nodiscard]] static double move_weight(double victim_share, double mean_share) noexcept;

  /// Rank `rank` of `size` ranks. The random sequence is std::mt19937_64 seeded with
  /// std::seed_seq{options.seed, rank, 0xBE11}.
  StealPolicy(const StealOptions& options, int rank, int size);

  [[nodiscard]] const StealOptions& options() const noexcept { return options_; }

  // ---- starvation and what a victim gives: functions of the options alone ----
  //
  // A rank drives one device today, so the device and the node threshold both compare the
  // one ready count of its device queue (the only queue tasks are stolen from). These are
  // safe from any thread.

  /// True when a rank with `ready` queued ready tasks starves: below `device_threshold`
  /// (its device starves) or below `node_threshold` (the node does). Section IV.
  [[nodiscard]] static bool starving(const StealOptions& options, std::size_t ready) noexcept;
  /// Ready tasks a victim always keeps: max(`device_threshold`, `node_threshold`), so that
  /// giving never makes it starve.
  [[nodiscard]] static std::size_t tasks_kept(const StealOptions& options) noexcept;
  /// True when a victim with `ready` queued ready tasks could give at least one away.
  [[nodiscard]] static bool has_tasks_to_spare(const StealOptions& options,
                                               std::size_t ready) noexcept;
  /// How many of its `ready` queued tasks a victim gives to a request for `wanted` (a
  /// negative `wanted` counts as 0): at most `wanted`, and never so many that fewer than
  /// tasks_kept() stay queued.
  [[nodiscard]] static std::size_t tasks_to_give(const StealOptions& options, std::size_t ready,
                                                 int wanted) noexcept;

  /// Which of a victim's queued tasks go to a thief: positions in `queue`, which lists the
  /// queue front to back (the next task to run first). At most tasks_to_give(options,
  /// queue.size(), wanted), never an unmovable one.
  ///
  /// Without StealOptions::cost_rule: the movable tasks nearest the back (lowest priority).
  /// With it, a task goes only when it pays (the rule of docs/runtime.md, "A steal is
  /// made only when it pays"):
  ///  0. it moves more compute than transfer: run > w * (fetch + return), w =
  ///     move_weight(context.compute_share, context.mean_compute_share). With w = 1 (the
  ///     first iteration, a balanced job), else the two ranks spend more of the machine
  ///     moving it than it takes off the victim. An overloaded victim, one whose device
  ///     waited for tiles less than the average rank's in the last iteration, is held
  ///     back by its compute rather than by transfers: its gifts' moves weigh by how much
  ///     less it waited (w < 1); and
  ///  1. the thief finishes it, inputs fetched and outputs returned, before the victim would
  ///     have started it (the thief's runs at GiftCandidate::thief_run_seconds when
  ///     given): reply + the fetches and runs of the gifts before it and its own +
  ///     its return < (ahead + (1 - w) * max(outranking_seconds - ahead, 0) - the gifts
  ///     ahead of it) / lanes, where ahead is the run time of the tasks still ahead of it in
  ///     the queue and w rule 0's weight. A task that becomes ready with a higher priority
  ///     runs before it: under a depth-first priority (a chain's next step outranks every
  ///     chain head still queued) the head at the back starts only when the chains ahead
  ///     have run to their end. Those not yet queued run first only if ready in time, so
  ///     they count as far as the victim is held back by its compute, not by its tiles
  ///     (1 - w; not at all with w = 1); and
  ///  2. the gift shortens the longer of the two ranks' remaining work: thief load + fetches
  ///     and runs of the gifts so far + its return < victim load - their runs / lanes.
  /// Candidates are tried cheapest fetch first (locality: inputs the thief holds cost
  /// nothing to move), then from the back of the queue.
  [[nodiscard]] static std::vector<std::size_t> choose_gifts(const StealOptions& options,
                                                             std::span<const GiftCandidate> queue,
                                                             const GiftContext& context,
                                                             int wanted);

  /// Confines this rank's requests and forwards to `partners` (other ranks, e.g. its team's:
  /// steal_partners() of message_logging.hpp); the random draws pick among them, and a last
  /// victim outside them is forgotten. An empty list leaves no rank to ask.
  void confine_to(std::vector<int> partners);

  // ---- thief side ----

  /// Forgets the backoff at the start of an iteration (the last victim is kept), unless it
  /// is stretched (request_answered: requests bring less than they cost): that backoff
  /// runs on, or every iteration would start with a request that does not pay from each
  /// rank that starves.
  void start_iteration() noexcept;

  /// True when the rank should send a request now: nothing is outstanding, the iteration
  /// is not over, its roots are queued, the backoff after the last empty answer has run
  /// out (`now` >= next_ask_at()), and the rank starves (starving()). At most one
  /// request per rank is out at any time (section IV). With StealOptions::cost_rule also
  /// only when the rank expects to idle longer than a round trip
  /// (view.expected_idle_seconds > view.round_trip_seconds) and a typical task runs
  /// longer than one of its tiles takes to move, weighed as the busiest victim would
  /// (view.task_seconds > move_weight(view.busiest_compute_share,
  /// view.mean_compute_share) * view.tile_move_seconds):
  /// otherwise no task could pass rule 0 of choose_gifts, and the request would only
  /// cost the victims it wakes.
  [[nodiscard]] bool should_ask(Time now, const ThiefView& view) const noexcept;

  /// The cost rule's part of should_ask(): whether a request could pay for a rank that
  /// sees `view`, whatever its ready count and backoff (always true without
  /// StealOptions::cost_rule). While it is false the rank neither asks nor needs waking
  /// when it starves.
  [[nodiscard]] static bool asking_pays(const StealOptions& options, const ThiefView& view) noexcept;

  /// How many tasks a request asks for: StealOptions::chunk, but with StealOptions::cost_rule
  /// only one where a typical task runs no longer than moving `chunk` of its tiles takes
  /// (view.task_seconds <= chunk * view.tile_move_seconds). There, at GPU speed, each task of
  /// a gift moves about its own run time in tiles, one gift after the other, and a victim's
  /// misjudged gift costs the most; measured on the skewed bspgemm at 1000 GFLOP/s, a chunk
  /// of 1 kept stealing on at 0.99 of stealing off where 4 gave 0.94, and at 10 GFLOP/s both
  /// gave 1.19x over off.
  [[nodiscard]] static int tasks_to_ask(const StealOptions& options, const ThiefView& view) noexcept;

  /// The rank to ask: under VictimPolicy::last_victim the last rank that gave work when
  /// there is one, else a random rank other than this one (one draw). nullopt when there
  /// is no other rank.
  [[nodiscard]] std::optional<int> choose_victim();

  /// A reply to this rank's request came from `victim` with `tasks` tasks (the first
  /// victim or one the request was forwarded to). A victim that gave work becomes the
  /// last victim.
  void reply_received(int victim, std::size_t tasks) noexcept;

  /// The request is fully answered at `now` with `tasks` tasks over all its replies, from
  /// `visits` victims (1 + the times it was forwarded); `round_trip` is the cost model's
  /// steal round trip after this one and `task_seconds` what a task typically takes to
  /// run here (ThiefView::task_seconds).
  /// None: the rank forgets its last victim and backs off, min_backoff_us at first,
  /// doubling up to max_backoff_us. With StealOptions::cost_rule the backoff is never
  /// shorter than kBackoffRoundTrips round trips, nor its ceiling: a thief that asks
  /// again sooner than its previous answer took only finds the victims as they were, and
  /// each request wakes every rank it visits (on a loaded host round trips take
  /// milliseconds, and a 50 us backoff kept a thief asking all the time). Also with the
  /// rule, while a request's yield (request_yield_seconds(): the task time a request
  /// brings on average) is below its cost (request_cost_seconds(): what its visits take
  /// of the victims), the backoff is stretched by cost / yield, at most
  /// kMaxBackoffStretch times: requests that mostly come back empty cost the ranks they
  /// wake more than they bring.
  /// Some: the backoff ends. Returns next_ask_at().
  Time request_answered(Time now, std::uint64_t tasks, Time round_trip = Time{0},
                        double task_seconds = std::numeric_limits<double>::infinity(),
                        int visits = 1);

  /// What this rank's requests have brought: tasks per request, a running mean over the
  /// answers so far that forgets with weight 1/kRequestMemory (starting at 1, as if a
  /// request brought one task).
  [[nodiscard]] double tasks_per_request() const noexcept { return tasks_per_request_; }
  /// The task time a request brings on average: tasks_per_request() * `task_seconds`.
  [[nodiscard]] double request_yield_seconds(double task_seconds) const noexcept;
  /// What a request costs its victims on average: visits per request (a running mean like
  /// tasks_per_request(), starting at 1) * StealOptions::request_visit_cost_us.
  [[nodiscard]] double request_cost_seconds() const noexcept;

  /// Answers over which tasks_per_request() mostly forgets an earlier one.
  static constexpr double kRequestMemory = 8.0;
  /// The most a low yield stretches the backoff: 64 times, so that a thief still asks now
  /// and then and learns when requests start to pay again.
  static constexpr double kMaxBackoffStretch = 64.0;

  /// With StealOptions::cost_rule, the shortest backoff after an empty answer, and the
  /// least its ceiling may be, in round trips: one, the least that stops a thief from
  /// asking faster than it is answered (a ceiling of 16 round trips measured fewer steals
  /// and a smaller speed-up at 10 GFLOP/s).
  static constexpr int kBackoffRoundTrips = 1;

  /// The earliest time the rank may ask again (the origin, 0, before any answer).
  [[nodiscard]] Time next_ask_at() const noexcept { return next_ask_at_; }
  /// The current backoff, microseconds (0: none), stretch included.
  [[nodiscard]] int backoff_us() const noexcept { return backoff_us_; }
  /// The last rank that gave work, if remembered.
  [[nodiscard]] std::optional<int> last_victim() const noexcept;

  // ---- victim side ----

  /// Where this rank forwards a request of `thief`, already forwarded `hops` times, for
  /// `wanted` tasks of which it gave `given`. nullopt when it gave all that was wanted,
  /// when the request has been forwarded max_hops times, or when no rank is left to ask.
  /// Else, under VictimPolicy::last_victim, this rank's own last victim when that is
  /// neither the thief nor this rank; otherwise a random rank other than both (one draw).
  [[nodiscard]] std::optional<Forward> forward_to(int thief, int hops, int given, int wanted);

 private:
  /// A random rank other than `a` and `b` (which may be equal); nullopt, without a draw,
  /// when there is none.
  [[nodiscard]] std::optional<int> random_rank_except(int a, int b);

  StealOptions options_;
  int rank_;
  int size_;
  bool confined_ = false;     ///< draws pick among partners_ only
  std::vector<int> partners_;  ///< confine_to()'s ranks, ascending
  std::mt19937_64 random_;
  int last_victim_ = -1;
  int doubling_backoff_us_ = 0;  ///< the backoff before its stretch
  int backoff_us_ = 0;
  bool stretched_ = false;  ///< the current backoff is stretched
  double tasks_per_request_ = 1.0;
  double visits_per_request_ = 1.0;
  Time next_ask_at_{0};
};

}  // namespace bellows::runtime
