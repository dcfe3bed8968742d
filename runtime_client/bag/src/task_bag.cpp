#include "bellows/runtime/task_bag.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <list>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "bag_sources.hpp"

namespace bellows::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBagTag = 7301;
// The driver's longest sleep while nothing happens (its workers wake it sooner).
constexpr auto kDriverNap = std::chrono::microseconds(50);

std::string text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Waits for a request while sleeping between tests (MPICH's blocking calls spin a core).
void wait_sleeping(MPI_Request& request) {
  for (int done = 0; MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done;) {
    std::this_thread::sleep_for(kDriverNap);
  }
}

// A duplicate of the caller's communicator for one run, freed at its end.
class RunCommunicator {
 public:
  explicit RunCommunicator(MPI_Comm comm) {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Comm_idup(comm, &comm_, &request);
    wait_sleeping(request);
  }
  ~RunCommunicator() { MPI_Comm_free(&comm_); }
  RunCommunicator(const RunCommunicator&) = delete;
  RunCommunicator& operator=(const RunCommunicator&) = delete;
  [[nodiscard]] MPI_Comm get() const noexcept { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// What every rank contributes to the report, gathered as plain bytes.
struct WireStats {
  std::int64_t rank, parent, tasks, ranges, requests_sent, requests_served, tasks_given;
  double busy_seconds, finish_seconds, speed;
  std::uint64_t digest;
};

// The run on one rank: its workers, its source of indices under one lock, and the driver
// loop that carries the source's messages over MPI.
class BagRun {
 public:
  BagRun(MPI_Comm comm, const BagTasks& tasks, const BagOptions& options,
         std::unique_ptr<bag::WorkSource> source, double deadline_seconds)
      : comm_(comm), tasks_(tasks), options_(options), source_(std::move(source)),
        deadline_seconds_(deadline_seconds) {}

  // Runs to the end on this rank; the caller then gathers the statistics.
  void run() {
    start_ = Clock::now();
    {
      std::vector<std::jthread> workers;
      for (int w = 0; w < options_.workers; ++w) workers.emplace_back([this] { work(); });
      try {
        drive();
      } catch (...) {
        stop_workers();
        throw;
      }
    }
    if (failure_) std::rethrow_exception(failure_);
  }

  [[nodiscard]] double elapsed() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

  std::uint64_t tasks_done = 0;
  std::uint64_t ranges_done = 0;
  std::uint64_t digest = 0;
  double busy_seconds = 0.0;
  double finish_seconds = 0.0;
  [[nodiscard]] const bag::SourceCounters& counters() const { return source_->counters(); }

 private:
  void stop_workers() {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    work_ready_.notify_all();
  }

  // A worker: takes ranges from the source until it is dry, runs them.
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
      try {
        for (auto i = range.begin; i < range.end; ++i) {
          sum += tasks_.body(i);
          if (tasks_.modeled_seconds) {
            modeled_clock += std::chrono::duration_cast<Clock::duration>(
                std::chrono::duration<double>(tasks_.modeled_seconds(i) * options_.slowdown));
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
        work_ready_.notify_all();
        break;
      }
      tasks_done += static_cast<std::uint64_t>(range.size());
      ++ranges_done;
      digest += sum;
      busy_seconds += std::chrono::duration<double>(ended - began).count();
      finish_seconds = std::max(finish_seconds, std::chrono::duration<double>(ended - start_).count());
    }
    ++exited_;
    driver_wake_.notify_one();
  }

  void send(const bag::Message& message) {
    sends_.push_back({bag::encode(message), MPI_REQUEST_NULL});
    auto& pending = sends_.back();
    MPI_Isend(pending.wire.data(), static_cast<int>(pending.wire.size()), MPI_INT64_T,
              message.peer, kBagTag, comm_, &pending.request);
  }

  void retire_sends() {
    for (auto it = sends_.begin(); it != sends_.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done ? sends_.erase(it) : std::next(it);
    }
  }

  // Receives one message if one is there.
  bool receive(std::vector<bag::Message>& out) {
    int there = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kBagTag, comm_, &there, &status);
    if (!there) return false;
    bag::WireMessage wire{};
    MPI_Recv(wire.data(), static_cast<int>(wire.size()), MPI_INT64_T, status.MPI_SOURCE, kBagTag,
             comm_, MPI_STATUS_IGNORE);
    const bag::Message message = bag::decode(wire, status.MPI_SOURCE);
    std::lock_guard lock(mutex_);
    source_->on_message(message, out);
    work_ready_.notify_all();
    return true;
  }

  void check_deadline() const {
    if (deadline_seconds_ > 0.0 && elapsed() > deadline_seconds_) {
      throw std::runtime_error("task bag: the run did not end within " + text(deadline_seconds_) +
                               " s (timeout_seconds)");
    }
  }

  // The driver: sends what the source asks, receives and hands messages to the source, lets
  // the source act when every worker is idle, until the source and the workers are done;
  // then, in a barrier every rank enters once it is done, answers what still comes in.
  void drive() {
    std::vector<bag::Message> out;
    for (;;) {
      bool acted = false;
      bool done = false;
      {
        std::unique_lock lock(mutex_);
        if (failure_) return;
        if (waiting_ + exited_ == options_.workers) {
          source_->on_idle(elapsed(), tasks_done, outbox_);
          work_ready_.notify_all();  // the source may have run dry
        }
        out.swap(outbox_);
        done = exited_ == options_.workers && source_->finished();
        if (out.empty() && !done) {
          driver_wake_.wait_for(lock, kDriverNap);
          out.swap(outbox_);
        }
      }
      for (const auto& m : out) send(m);
      acted = !out.empty();
      out.clear();
      while (receive(out)) {
        for (const auto& m : out) send(m);
        out.clear();
        acted = true;
      }
      retire_sends();
      if (done && !acted) break;
      check_deadline();
    }
    // Every rank has stopped asking once all are in the barrier; answer what arrives until then.
    MPI_Request barrier = MPI_REQUEST_NULL;
    MPI_Ibarrier(comm_, &barrier);
    for (;;) {
      int passed = 0;
      MPI_Test(&barrier, &passed, MPI_STATUS_IGNORE);
      while (receive(out)) {
        for (const auto& m : out) send(m);
        out.clear();
      }
      retire_sends();
      if (passed && sends_.empty()) break;
      check_deadline();
      std::this_thread::sleep_for(kDriverNap);
    }
  }

  struct PendingSend {
    bag::WireMessage wire;
    MPI_Request request;
  };

  MPI_Comm comm_;
  const BagTasks& tasks_;
  const BagOptions& options_;
  std::unique_ptr<bag::WorkSource> source_;
  double deadline_seconds_;
  Clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable driver_wake_;
  std::vector<bag::Message> outbox_;
  std::list<PendingSend> sends_;
  int waiting_ = 0;
  int exited_ = 0;
  bool stopping_ = false;
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
    throw std::invalid_argument("task bag: slowdown must be positive, got " + text(slowdown));
  }
  if (!(timeout_seconds >= 0.0)) {
    throw std::invalid_argument("task bag: timeout_seconds must not be negative, got " +
                                text(timeout_seconds));
  }
}

void to_json(nlohmann::json& j, const BagRankStats& s) {
  j = {{"rank", s.rank},
       {"parent", s.parent},
       {"tasks", s.tasks},
       {"ranges", s.ranges},
       {"requests_sent", s.requests_sent},
       {"requests_served", s.requests_served},
       {"tasks_given", s.tasks_given},
       {"busy_seconds", s.busy_seconds},
       {"finish_seconds", s.finish_seconds},
       {"speed", s.speed}};
}

void to_json(nlohmann::json& j, const BagReport& r) {
  j = {{"distribution", std::string(to_string(r.distribution))},
       {"tasks", r.tasks},
       {"digest", r.digest},
       {"seconds", r.seconds},
       {"tree_height", r.tree_height},
       {"ranks", r.ranks}};
}

TaskBag::TaskBag(BagOptions options) : options_(std::move(options)) { options_.validate(); }

void TaskBag::set_slowdown(double slowdown) {
  BagOptions next = options_;
  next.slowdown = slowdown;
  next.validate();
  options_ = next;
}

DtreeShape TaskBag::tree_for(MPI_Comm comm, int rank, int size) {
  std::vector<int> parents;
  if (rank == 0) {
    if (shape_) {
      try {
        while (shape_->size() < size) shape_->join(shape_->size());
        while (shape_->size() > size) shape_->leave(shape_->size() - 1);
      } catch (const std::invalid_argument&) {
        shape_.reset();  // the tree is full: start a new one of the new size
      }
    }
    if (!shape_) shape_.emplace(size, options_.dtree);
    parents = shape_->parents();
  }
  parents.resize(static_cast<std::size_t>(size));
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibcast(parents.data(), size, MPI_INT, 0, comm, &request);
  wait_sleeping(request);
  return DtreeShape::from_parents(parents, options_.dtree);
}

BagReport TaskBag::run(MPI_Comm comm, const BagTasks& tasks) {
  if (tasks.count < 0) {
    throw std::invalid_argument("task bag: the task count must not be negative, got " +
                                std::to_string(tasks.count));
  }
  if (!tasks.body) throw std::invalid_argument("task bag: the tasks have no body");
  const RunCommunicator run_comm(comm);
  const MPI_Comm c = run_comm.get();
  int rank = 0, size = 1;
  MPI_Comm_rank(c, &rank);
  MPI_Comm_size(c, &size);
  const std::int64_t min_ask =
      options_.min_ask > 0 ? options_.min_ask : (3 * options_.workers + 1) / 2;

  std::vector<double> speeds(static_cast<std::size_t>(size), 0.0);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallgather(&speed_, 1, MPI_DOUBLE, speeds.data(), 1, MPI_DOUBLE, c, &request);
  wait_sleeping(request);

  std::unique_ptr<bag::WorkSource> source;
  int parent = -1;
  int height = 0;
  switch (options_.distribution) {
    case BagDistribution::dtree: {
      const DtreeShape shape = tree_for(c, rank, size);
      parent = shape.parent(rank);
      height = shape.height();
      source = bag::dtree_source(shape, rank, speeds, tasks.count, options_, min_ask);
      break;
    }
    case BagDistribution::steal:
      source = bag::steal_source(rank, size, tasks.count, min_ask, options_.steal_seed);
      break;
    case BagDistribution::static_blocks:
      source = bag::static_source(rank, size, tasks.count, min_ask);
      break;
  }

  request = MPI_REQUEST_NULL;
  MPI_Ibarrier(c, &request);
  wait_sleeping(request);
  BagRun bag_run(c, tasks, options_, std::move(source), options_.timeout_seconds);
  bag_run.run();

  const WireStats mine{rank,
                       parent,
                       static_cast<std::int64_t>(bag_run.tasks_done),
                       static_cast<std::int64_t>(bag_run.ranges_done),
                       static_cast<std::int64_t>(bag_run.counters().requests_sent),
                       static_cast<std::int64_t>(bag_run.counters().requests_served),
                       static_cast<std::int64_t>(bag_run.counters().tasks_given),
                       bag_run.busy_seconds,
                       bag_run.finish_seconds,
                       speed_,
                       bag_run.digest};
  std::vector<WireStats> all(static_cast<std::size_t>(size));
  request = MPI_REQUEST_NULL;
  MPI_Iallgather(&mine, sizeof(WireStats), MPI_BYTE, all.data(), sizeof(WireStats), MPI_BYTE, c,
                 &request);
  wait_sleeping(request);

  if (bag_run.tasks_done > 0 && bag_run.busy_seconds > 0.0) {
    speed_ = static_cast<double>(bag_run.tasks_done) / bag_run.busy_seconds;
  }
  BagReport report;
  report.distribution = options_.distribution;
  report.tree_height = height;
  for (const auto& s : all) {
    report.ranks.push_back({static_cast<int>(s.rank), static_cast<int>(s.parent),
                            static_cast<std::uint64_t>(s.tasks), static_cast<std::uint64_t>(s.ranges),
                            static_cast<std::uint64_t>(s.requests_sent),
                            static_cast<std::uint64_t>(s.requests_served),
                            static_cast<std::uint64_t>(s.tasks_given), s.busy_seconds,
                            s.finish_seconds, s.speed, s.digest});
    report.tasks += s.tasks;
    report.digest += s.digest;
    report.seconds = std::max(report.seconds, s.finish_seconds);
  }
  return report;
}

}  // namespace bellows::runtime
