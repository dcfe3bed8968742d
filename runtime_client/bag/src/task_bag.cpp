#include "bellows/runtime/task_bag.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <list>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "bag_loss.hpp"
#include "bag_sources.hpp"
#include "bellows/runtime/bag_rerun.hpp"
#include "bellows/runtime/rebuild.hpp"
#include "cancelled_requests.hpp"

namespace bellows::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBagTag = 7301;

using bag::abandoned_communicators;
using bag::gather_finished;
using bag::keep_until_exit;
using bag::kDriverNap;
using bag::RunCommunicator;
using bag::seconds_text;
using bag::Watched;

// What every rank contributes to the report, gathered as plain bytes.
struct WireStats {
  std::int64_t rank, rank_at_start, parent, tasks, ranges, requests_sent, requests_served,
      tasks_given;
  double busy_seconds, finish_seconds, speed;
  std::uint64_t digest;
  std::int64_t left_run, tasks_returned;
  std::uint64_t check;  ///< check_of() the fields above: a garbled record does not match

  [[nodiscard]] std::uint64_t check_of() const noexcept {
    std::uint64_t h = 0x62616773ULL;  // splitmix64 steps over the integer fields
    for (const std::uint64_t v :
         {static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(rank_at_start),
          static_cast<std::uint64_t>(parent), static_cast<std::uint64_t>(tasks),
          static_cast<std::uint64_t>(ranges), digest, static_cast<std::uint64_t>(left_run),
          static_cast<std::uint64_t>(tasks_returned)}) {
      h += v + 0x9e3779b97f4a7c15ULL;
      h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
      h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
      h ^= h >> 31;
    }
    return h;
  }
};

// One rank's work over the passes of a run.
struct RankTotals {
  std::uint64_t tasks = 0;
  std::uint64_t ranges = 0;
  std::uint64_t digest = 0;
  double busy_seconds = 0.0;
  double finish_seconds = 0.0;
  bag::SourceCounters counters;
  bool left_run = false;
  std::uint64_t tasks_returned = 0;
};

// A pass on one rank: its workers, its source of indices under one lock, and the driver
// loop that carries the source's messages over MPI. The workers record what they finished
// in `finished` and `totals`.
class BagRun {
 public:
  BagRun(MPI_Comm comm, const BagTasks& tasks, const BagOptions& options,
         std::unique_ptr<bag::WorkSource> source, Watched& watched, BagFinishedRanges& finished,
         RankTotals& totals, Clock::time_point origin, const std::atomic<bool>& leave_requested)
      : comm_(comm), tasks_(tasks), options_(options), source_(std::move(source)),
        watched_(watched), finished_(finished), totals_(totals), origin_(origin),
        leave_requested_(leave_requested) {}

  // Runs the pass to its end on this rank; false when a peer was lost (or an MPI call failed):
  // the workers then stopped at their next task boundary, what they finished is recorded, and
  // the sends still pending were let go.
  bool run() {
    bool completed = false;
    {
      std::vector<std::jthread> workers;
      for (int w = 0; w < options_.workers; ++w) workers.emplace_back([this] { work(); });
      try {
        completed = drive();
      } catch (...) {
        stop_workers();
        throw;
      }
      if (!completed) stop_workers();
    }
    if (failure_) std::rethrow_exception(failure_);
    if (!completed) let_go_of_sends();
    return completed;
  }

  [[nodiscard]] const bag::SourceCounters& counters() const { return source_->counters(); }

 private:
  void stop_workers() {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    stop_now_.store(true);
    work_ready_.notify_all();
  }

  // A worker: takes ranges from the source until it is dry, runs them; stops at a task
  // boundary when the pass is abandoned.
  void work() {
    std::unique_lock lock(mutex_);
    auto modeled_clock = Clock::now();
    bool waited = true;
    while (!stopping_) {
      const IndexRange range = source_->take(outbox_);
      if (range.empty()) {
        if (source_->dry()) {
          work_ready_.notify_all();  // the other workers see it too
          break;
        }
        ++waiting_;
        driver_wake_.notify_one();
        work_ready_.wait(lock);
        --waiting_;
        waited = true;
        continue;
      }
      lock.unlock();
      const auto began = Clock::now();
      if (waited) modeled_clock = began;  // an idle worker's modeled clock starts again now
      waited = false;
      std::uint64_t sum = 0;
      std::exception_ptr failed;
      auto next = range.begin;
      try {
        for (; next < range.end && !stop_now_.load(std::memory_order_relaxed); ++next) {
          sum += tasks_.body(next);
          if (tasks_.modeled_seconds) {
            modeled_clock += std::chrono::duration_cast<Clock::duration>(
                std::chrono::duration<double>(tasks_.modeled_seconds(next) * options_.slowdown));
            std::this_thread::sleep_until(modeled_clock);
          }
        }
      } catch (...) {
        failed = std::current_exception();
      }
      const auto ended = Clock::now();
      lock.lock();
      if (failed) {
        if (!failure_) failure_ = failed;
        stopping_ = true;
        stop_now_.store(true);
        work_ready_.notify_all();
        break;
      }
      finished_.add({range.begin, next});
      totals_.tasks += static_cast<std::uint64_t>(next - range.begin);
      ++totals_.ranges;
      totals_.digest += sum;
      totals_.busy_seconds += std::chrono::duration<double>(ended - began).count();
      totals_.finish_seconds =
          std::max(totals_.finish_seconds, std::chrono::duration<double>(ended - origin_).count());
      pass_tasks_ += static_cast<std::uint64_t>(next - range.begin);
    }
    ++exited_;
    driver_wake_.notify_one();
  }

  // Under the lock. A rank asked to leave that can (a Dtree leaf) stops its workers taking
  // work; once they have all exited and no request is out, what it holds goes back to its
  // parent (into outbox_).
  void step_leave() {
    if (!leaving_ && leave_requested_.load() && source_->can_leave()) {
      leaving_ = true;
      stopping_ = true;  // the ranges being run finish; nothing new is taken
      work_ready_.notify_all();
    }
    if (leaving_ && !left_ && exited_ == options_.workers && !source_->asking()) {
      totals_.tasks_returned += static_cast<std::uint64_t>(source_->leave(outbox_));
      totals_.left_run = true;
      left_ = true;
    }
  }

  bool send(const bag::Message& message) {
    sends_.push_back({bag::encode(message), MPI_REQUEST_NULL});
    auto& pending = sends_.back();
    return watched_.ok(MPI_Isend(pending.wire.data(), static_cast<int>(pending.wire.size()),
                                 MPI_INT64_T, message.peer, kBagTag, comm_, &pending.request),
                       "MPI_Isend");
  }

  bool send_all(std::vector<bag::Message>& out) {
    bool sent = true;
    for (const auto& m : out) sent = sent && send(m);
    out.clear();
    return sent;
  }

  bool retire_sends() {
    for (auto it = sends_.begin(); it != sends_.end();) {
      int done = 0;
      if (!watched_.ok(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE), "MPI_Test of a send")) {
        it->request = MPI_REQUEST_NULL;  // completed with its error
        return false;
      }
      it = done ? sends_.erase(it) : std::next(it);
    }
    return true;
  }

  // Sends nobody waits for any more: cancelled, and their buffers kept until the process
  // exits (a send to a dead peer may never complete; MPI may still read what was freed).
  void let_go_of_sends() {
    static std::list<PendingSend> kept_until_exit;
    for (auto& pending : sends_) (void)cancel_request(pending.request);
    kept_until_exit.splice(kept_until_exit.end(), sends_);
  }

  // Receives one message if one is there; false in `ok` when a call failed.
  bool receive(std::vector<bag::Message>& out, bool& ok) {
    int there = 0;
    MPI_Status status;
    if (!watched_.ok(MPI_Iprobe(MPI_ANY_SOURCE, kBagTag, comm_, &there, &status), "MPI_Iprobe")) {
      ok = false;
      return false;
    }
    if (!there) return false;
    bag::WireMessage wire{};
    // The message is here (probed): the receive does not wait.
    if (!watched_.ok(MPI_Recv(wire.data(), static_cast<int>(wire.size()), MPI_INT64_T,
                              status.MPI_SOURCE, kBagTag, comm_, MPI_STATUS_IGNORE),
                     "MPI_Recv")) {
      ok = false;
      return false;
    }
    const bag::Message message = bag::decode(wire, status.MPI_SOURCE);
    std::lock_guard lock(mutex_);
    source_->on_message(message, out);
    work_ready_.notify_all();
    return true;
  }

  // Sends what came out of receiving, until nothing more comes; false when a call failed.
  bool receive_all(std::vector<bag::Message>& out, bool& acted) {
    bool ok = true;
    while (receive(out, ok)) {
      if (!send_all(out)) return false;
      acted = true;
    }
    return ok;
  }

  // The driver: sends what the source asks, receives and hands messages to the source, lets
  // the source act when every worker is idle, until the source and the workers are done;
  // then, in a barrier every rank enters once it is done, answers what still comes in.
  // Watches every peer throughout; false at the first sign of a loss.
  bool drive() {
    std::vector<bag::Message> out;
    for (;;) {
      bool acted = false;
      bool done = false;
      {
        std::unique_lock lock(mutex_);
        if (failure_) return true;
        step_leave();
        if (waiting_ + exited_ == options_.workers) {
          source_->on_idle(std::chrono::duration<double>(Clock::now() - origin_).count(),
                           pass_tasks_, outbox_);
          work_ready_.notify_all();  // the source may have run dry
        }
        out.swap(outbox_);
        done = exited_ == options_.workers && source_->finished();
        if (out.empty() && !done) {
          driver_wake_.wait_for(lock, kDriverNap);
          out.swap(outbox_);
        }
      }
      acted = !out.empty();
      if (!send_all(out)) return false;
      if (!receive_all(out, acted)) return false;
      if (!retire_sends()) return false;
      if (watched_.poll_now_and_then()) return false;
      if (done && !acted) break;
      watched_.check_deadline();
    }
    // Every rank has stopped asking once all are in the barrier; answer what arrives until then.
    MPI_Request barrier = MPI_REQUEST_NULL;
    if (!watched_.ok(MPI_Ibarrier(comm_, &barrier), "MPI_Ibarrier")) return false;
    for (;;) {
      int passed = 0;
      if (!watched_.ok(MPI_Test(&barrier, &passed, MPI_STATUS_IGNORE), "MPI_Test of MPI_Ibarrier")) {
        return false;
      }
      bool acted = false;
      if (!receive_all(out, acted)) return false;
      if (!retire_sends()) return false;
      if (watched_.poll_now_and_then()) return false;
      if (passed && sends_.empty()) break;
      watched_.check_deadline();
      std::this_thread::sleep_for(kDriverNap);
    }
    return true;
  }

  struct PendingSend {
    bag::WireMessage wire;
    MPI_Request request;
  };

  MPI_Comm comm_;
  const BagTasks& tasks_;
  const BagOptions& options_;
  std::unique_ptr<bag::WorkSource> source_;
  Watched& watched_;
  BagFinishedRanges& finished_;
  RankTotals& totals_;
  Clock::time_point origin_;
  const std::atomic<bool>& leave_requested_;
  bool leaving_ = false;  ///< asked to leave: its workers take nothing more
  bool left_ = false;     ///< what it held unstarted went back to its parent
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable driver_wake_;
  std::vector<bag::Message> outbox_;
  std::list<PendingSend> sends_;
  std::uint64_t pass_tasks_ = 0;
  int waiting_ = 0;
  int exited_ = 0;
  bool stopping_ = false;
  std::atomic<bool> stop_now_{false};
  std::exception_ptr failure_;
};

}  // namespace

std::string_view to_string(BagDistribution distribution) noexcept {
  switch (distribution) {
    case BagDistribution::dtree: return "dtree";
    case BagDistribution::steal: return "steal";
    case BagDistribution::static_blocks: return "static";
  }
  return "?";
}

bool parse_bag_distribution(std::string_view text, BagDistribution& out) noexcept {
  for (const auto d : {BagDistribution::dtree, BagDistribution::steal, BagDistribution::static_blocks}) {
    if (text == to_string(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

void BagOptions::validate() const {
  dtree.validate();
  if (workers < 1) {
    throw std::invalid_argument("task bag: workers must be at least 1, got " + std::to_string(workers));
  }
  if (min_ask < 0) {
    throw std::invalid_argument("task bag: min_ask must not be negative, got " + std::to_string(min_ask));
  }
  if (!(slowdown > 0.0) || !std::isfinite(slowdown)) {
    throw std::invalid_argument("task bag: slowdown must be positive, got " + seconds_text(slowdown));
  }
  if (!(recovery_timeout_seconds > 0.0) || !std::isfinite(recovery_timeout_seconds)) {
    throw std::invalid_argument("task bag: recovery_timeout_seconds must be positive, got " +
                                seconds_text(recovery_timeout_seconds));
  }
  if (!(timeout_seconds >= 0.0)) {
    throw std::invalid_argument("task bag: timeout_seconds must not be negative, got " +
                                seconds_text(timeout_seconds));
  }
}

void to_json(nlohmann::json& j, const BagRankStats& s) {
  j = {{"rank", s.rank},
       {"rank_at_start", s.rank_at_start},
       {"parent", s.parent},
       {"tasks", s.tasks},
       {"ranges", s.ranges},
       {"requests_sent", s.requests_sent},
       {"requests_served", s.requests_served},
       {"tasks_given", s.tasks_given},
       {"busy_seconds", s.busy_seconds},
       {"finish_seconds", s.finish_seconds},
       {"speed", s.speed}};
  if (s.left_run) {
    j["left_run"] = true;
    j["tasks_returned"] = s.tasks_returned;
  }
}

void to_json(nlohmann::json& j, const BagRecovery& r) {
  j = {{"lost", r.lost},
       {"kept_tasks", r.kept_tasks},
       {"rerun_tasks", r.rerun_tasks},
       {"seconds", r.seconds}};
}

void to_json(nlohmann::json& j, const BagReport& r) {
  j = {{"distribution", std::string(to_string(r.distribution))},
       {"tasks", r.tasks},
       {"digest", r.digest},
       {"seconds", r.seconds},
       {"tree_height", r.tree_height},
       {"ranks", r.ranks}};
  if (!r.recoveries.empty()) {
    j["lost_ranks"] = r.lost_ranks;
    j["recoveries"] = r.recoveries;
  }
}

TaskBag::TaskBag(BagOptions options) : options_(std::move(options)) { options_.validate(); }

void TaskBag::set_slowdown(double slowdown) {
  BagOptions next = options_;
  next.slowdown = slowdown;
  next.validate();
  options_ = next;
}

// What one pass of a run works on and leaves behind.
struct TaskBag::Phase {
  std::vector<IndexRange> pool;        ///< the indices this pass runs
  BagDistribution distribution = BagDistribution::dtree;
  std::vector<int> rank_at_start;      ///< per rank of the pass's communicator
  std::optional<Clock::time_point> deadline;  ///< the run's (timeout_seconds)
  std::optional<Clock::time_point> origin;    ///< the common start, after the first barrier
  BagFinishedRanges finished;          ///< this rank's, over every pass
  RankTotals totals;                   ///< this rank's, over every pass
  std::int64_t min_ask = 1;
  // A pass that lost peers: who (ranks of its communicator) and when this rank noticed.
  std::vector<int> lost;
  Clock::time_point lost_at{};
  // A pass that completed: every rank's statistics, this rank's parent, the tree's height.
  std::vector<WireStats> stats;
  int parent = -1;
  int height = 0;
};

std::vector<int> TaskBag::root_tree_parents(int size) {
  if (shape_) {
    try {
      while (shape_->size() < size) shape_->join(shape_->size());
      while (shape_->size() > size) shape_->leave(shape_->size() - 1);
    } catch (const std::invalid_argument&) {
      shape_.reset();  // the tree is full: start a new one of the new size
    }
  }
  if (!shape_) shape_.emplace(size, options_.dtree);
  return shape_->parents();
}


bool TaskBag::run_phase(MPI_Comm comm, const BagTasks& tasks, Phase& phase) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  Watched watched(comm, rank, size, phase.deadline, options_.timeout_seconds);
  RunCommunicator run_comm;
  // What the pass's collectives read and write: kept until the process exits when a loss
  // leaves one of them pending.
  struct Buffers {
    std::array<double, 2> speed{};  ///< this rank's speed and run number
    std::vector<double> speeds;
    std::vector<int> parents;
    WireStats mine{};
    std::vector<WireStats> stats;
  };
  auto b = std::make_unique<Buffers>();
  auto lose = [&] {
    run_comm.abandon();
    keep_until_exit(std::move(b));
    phase.lost = watched.settle();
    phase.lost_at = watched.noticed_at();
    return false;
  };
  if (!run_comm.duplicate(comm, watched)) return lose();
  const MPI_Comm c = run_comm.get();

  // Every rank's speed, and its run number: a rank added since the last run takes the others'.
  b->speed = {speed_, static_cast<double>(run_number_)};
  b->speeds.assign(2 * static_cast<std::size_t>(size), 0.0);
  MPI_Request request = MPI_REQUEST_NULL;
  if (!watched.ok(MPI_Iallgather(b->speed.data(), 2, MPI_DOUBLE, b->speeds.data(), 2, MPI_DOUBLE, c,
                                 &request),
                  "MPI_Iallgather") ||
      !watched.wait(request, "MPI_Iallgather") || watched.poll()) {
    return lose();
  }
  std::vector<double> speeds(static_cast<std::size_t>(size), 0.0);
  for (std::size_t r = 0; r < speeds.size(); ++r) {
    speeds[r] = b->speeds[2 * r];
    run_number_ = std::max(run_number_, static_cast<std::int64_t>(b->speeds[2 * r + 1]));
  }

  std::unique_ptr<bag::WorkSource> source;
  phase.parent = -1;
  phase.height = 0;
  const std::int64_t count = phase.pool.empty() ? 0 : phase.pool.back().end;
  switch (phase.distribution) {
    case BagDistribution::dtree: {
      if (rank == 0) b->parents = root_tree_parents(size);
      b->parents.resize(static_cast<std::size_t>(size));
      request = MPI_REQUEST_NULL;
      if (!watched.ok(MPI_Ibcast(b->parents.data(), size, MPI_INT, 0, c, &request), "MPI_Ibcast") ||
          !watched.wait(request, "MPI_Ibcast") || watched.poll()) {
        return lose();
      }
      const DtreeShape shape = DtreeShape::from_parents(b->parents, options_.dtree);
      phase.parent = shape.parent(rank);
      phase.height = shape.height();
      source = bag::dtree_source(shape, rank, speeds, phase.pool, options_, phase.min_ask);
      break;
    }
    case BagDistribution::steal:
      source = bag::steal_source(rank, size, count, phase.min_ask, options_.steal_seed);
      break;
    case BagDistribution::static_blocks:
      source = bag::static_source(rank, size, count, phase.min_ask);
      break;
  }

  request = MPI_REQUEST_NULL;
  if (!watched.ok(MPI_Ibarrier(c, &request), "MPI_Ibarrier") || !watched.wait(request, "MPI_Ibarrier")) {
    return lose();
  }
  if (!phase.origin) phase.origin = Clock::now();
  BagRun bag_run(c, tasks, options_, std::move(source), watched, phase.finished, phase.totals,
                 *phase.origin, leave_requested_);
  const bool completed = bag_run.run();
  phase.totals.counters.requests_sent += bag_run.counters().requests_sent;
  phase.totals.counters.requests_served += bag_run.counters().requests_served;
  phase.totals.counters.tasks_given += bag_run.counters().tasks_given;
  if (!completed) return lose();

  const RankTotals& t = phase.totals;
  b->mine = WireStats{rank,
                       phase.rank_at_start[static_cast<std::size_t>(rank)],
                       phase.parent,
                       static_cast<std::int64_t>(t.tasks),
                       static_cast<std::int64_t>(t.ranges),
                       static_cast<std::int64_t>(t.counters.requests_sent),
                       static_cast<std::int64_t>(t.counters.requests_served),
                       static_cast<std::int64_t>(t.counters.tasks_given),
                       t.busy_seconds,
                       t.finish_seconds,
                       speed_,
                       t.digest,
                       t.left_run ? 1 : 0,
                       static_cast<std::int64_t>(t.tasks_returned),
                       0};
  b->mine.check = b->mine.check_of();
  b->stats.assign(static_cast<std::size_t>(size), WireStats{});
  request = MPI_REQUEST_NULL;
  // The run's last step. A gather that completes whole ends the run on this rank even when a
  // peer is found lost right after it: that peer's part arrived, so every index's result is
  // in the report, and the loss is found at the next run's start by every survivor alike.
  // Trusting the watch here instead let ranks that saw the death a moment later than others
  // recover from this run while the others had gone on to the next.
  if (!watched.ok(MPI_Iallgather(&b->mine, sizeof(WireStats), MPI_BYTE, b->stats.data(),
                                 sizeof(WireStats), MPI_BYTE, c, &request),
                  "MPI_Iallgather") ||
      !watched.finish(request, "MPI_Iallgather")) {
    return lose();
  }
  // Over a dead peer the gather may complete with garbage: whole means every record is its
  // rank's, unaltered, and the survivors' tasks over every pass make up the bag.
  std::int64_t summed = 0;
  bool whole = true;
  for (int r = 0; r < size; ++r) {
    const WireStats& got = b->stats[static_cast<std::size_t>(r)];
    whole = whole && got.rank == r && got.check == got.check_of();
    summed += got.tasks;
  }
  if (!whole || summed != tasks.count) {
    watched.fail("the statistics gathered at the end of the run are not whole (" +
                 std::to_string(summed) + " tasks of " + std::to_string(tasks.count) + ")");
    return lose();
  }
  phase.stats = b->stats;
  return true;
}

BagReport TaskBag::run(MPI_Comm comm, const BagTasks& tasks) {
  if (tasks.count < 0) {
    throw std::invalid_argument("task bag: the task count must not be negative, got " +
                                std::to_string(tasks.count));
  }
  if (!tasks.body) throw std::invalid_argument("task bag: the tasks have no body");
  MPI_Errhandler callers_handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(comm, &callers_handler);
  // A dead peer must fail calls, not end this rank: the passed communicator (the watch, the
  // agreement and the rebuild run on it) and MPI_COMM_WORLD (MPICH raises some requests'
  // errors there) return errors for the length of the run.
  const ErrorsReturned comm_errors(comm);
  const ErrorsReturned world_errors(MPI_COMM_WORLD);
  int start_size = 1;
  MPI_Comm_size(comm, &start_size);

  const std::vector<IndexRange> bag =
      tasks.count > 0 ? std::vector<IndexRange>{{0, tasks.count}} : std::vector<IndexRange>{};
  Phase phase;
  phase.pool = bag;
  phase.distribution = options_.distribution;
  for (int r = 0; r < start_size; ++r) phase.rank_at_start.push_back(r);
  if (options_.timeout_seconds > 0.0) {
    phase.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(options_.timeout_seconds));
  }
  phase.min_ask = options_.min_ask > 0 ? options_.min_ask : (3 * options_.workers + 1) / 2;

  BagReport report;
  report.distribution = options_.distribution;
  ++run_number_;
  MPI_Comm current = comm;
  const auto recovery_timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.recovery_timeout_seconds));
  while (!run_phase(current, tasks, phase)) {
    // Peers lost: agree on them, rebuild without them, gather what the survivors finished
    // and run the rest as a new pass. A survivor lost during the gather: agree again on the
    // communicator from before the loss, with the larger set.
    std::vector<int> seen = phase.lost;
    std::vector<int> lost;
    std::vector<BagFinished> gathered;
    MPI_Comm survivors = MPI_COMM_NULL;
    for (;;) {
      survivors = rebuild_after_loss(current, seen, Clock::now() + recovery_timeout, lost);
      MPI_Comm_set_errhandler(survivors, MPI_ERRORS_RETURN);
      int rank = 0, size = 1;
      MPI_Comm_rank(survivors, &rank);
      MPI_Comm_size(survivors, &size);
      Watched watched(survivors, rank, size, phase.deadline, options_.timeout_seconds);
      if (auto got = gather_finished(survivors, size, phase.finished, tasks.count, run_number_,
                                     watched)) {
        gathered = std::move(*got);
        break;
      }
      std::vector<int> alive;  // ranks of `current` that `survivors` holds, in its order
      for (int r = 0; r < static_cast<int>(phase.rank_at_start.size()); ++r) {
        if (!std::binary_search(lost.begin(), lost.end(), r)) alive.push_back(r);
      }
      seen = lost;
      for (const int r : watched.settle()) seen.push_back(alive[static_cast<std::size_t>(r)]);
      std::sort(seen.begin(), seen.end());
      abandoned_communicators().push_back(survivors);
    }
    BagRecovery recovery;
    std::vector<int> rank_at_start;
    for (int r = 0; r < static_cast<int>(phase.rank_at_start.size()); ++r) {
      const int at_start = phase.rank_at_start[static_cast<std::size_t>(r)];
      if (std::binary_search(lost.begin(), lost.end(), r)) {
        recovery.lost.push_back(at_start);
      } else {
        rank_at_start.push_back(at_start);
      }
    }
    phase.rank_at_start = std::move(rank_at_start);
    if (current != comm) MPI_Comm_free(&current);  // made by this run; freed, never disconnected
    current = survivors;
    const BagRerun rerun = plan_bag_rerun(bag, gathered);
    recovery.kept_tasks = rerun.kept;
    recovery.rerun_tasks = rerun.tasks;
    recovery.seconds = std::chrono::duration<double>(Clock::now() - phase.lost_at).count();
    report.lost_ranks.insert(report.lost_ranks.end(), recovery.lost.begin(), recovery.lost.end());
    report.recoveries.push_back(std::move(recovery));
    phase.pool = rerun.ranges;
    phase.distribution = BagDistribution::dtree;  // the re-run: Dtree over the ranges left
    phase.lost.clear();
  }
  std::sort(report.lost_ranks.begin(), report.lost_ranks.end());
  if (current != comm) {
    MPI_Comm_set_errhandler(current, callers_handler);
    report.survivors = current;
  }
  MPI_Errhandler_free(&callers_handler);

  leave_requested_.store(false);
  if (phase.totals.tasks > 0 && phase.totals.busy_seconds > 0.0) {
    speed_ = static_cast<double>(phase.totals.tasks) / phase.totals.busy_seconds;
  }
  report.tree_height = phase.height;
  for (const auto& s : phase.stats) {
    report.ranks.push_back({static_cast<int>(s.rank), static_cast<int>(s.rank_at_start),
                            static_cast<int>(s.parent), static_cast<std::uint64_t>(s.tasks),
                            static_cast<std::uint64_t>(s.ranges),
                            static_cast<std::uint64_t>(s.requests_sent),
                            static_cast<std::uint64_t>(s.requests_served),
                            static_cast<std::uint64_t>(s.tasks_given), s.busy_seconds,
                            s.finish_seconds, s.speed, s.digest, s.left_run != 0,
                            static_cast<std::uint64_t>(s.tasks_returned)});
    report.tasks += s.tasks;
    report.digest += s.digest;
    report.seconds = std::max(report.seconds, s.finish_seconds);
  }
  return report;
}

}  // namespace bellows::runtime
