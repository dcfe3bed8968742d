// The simulated ranks: S4U actors that run an example's task graph with the runtime's own
// stealing decisions (runtime_client/engine's dataflow and stealing, reduced to what the
// simulation needs). Internal to bellows::sim_core; docs/sim.md.
#pragma once

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bellows/runtime/cost_model.hpp"
#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/steal_policy.hpp"
#include "bellows/sim/graph.hpp"
#include "bellows/sim/simulation.hpp"
#include "trace.hpp"

namespace bellows::sim::detail {

namespace s4u = simgrid::s4u;
using runtime::CostModel;
using runtime::StealPolicy;
using Kind = runtime::InputSource::Kind;

inline StealPolicy::Time as_time(double seconds) {
  return StealPolicy::Time(static_cast<std::int64_t>(std::llround(seconds * 1e9)));
}

/// The control messages between simulated ranks (runtime_client/wire's, reduced to what
/// the simulation needs), through each rank's mailbox; tiles move as Transfers. Owned by
/// the receiver once delivered.
struct Message {
  enum class Type : std::uint8_t {
    activation,     ///< a slot of `task` is ready for consumers on the receiver (bytes: its size)
    steal_request,
    steal_reply,
    stop,           ///< every task has run and every write-back arrived (of the last iteration)
    next,           ///< the same, and the next iteration starts
  };
  Type type = Type::stop;
  int from = 0;
  std::uint32_t task = 0;
  std::uint8_t slot = 0;
  std::uint32_t tile = 0;
  std::uint64_t bytes = 0;
  double asked_at = 0.0;
  // steal request
  int thief = 0;
  std::uint64_t request_id = 0;
  int wanted = 0;
  int hops = 0;
  int partial_replies = 0;
  double thief_load = 0.0;
  double thief_overhead = 0.0;
  double thief_seconds_per_flop = 0.0;
  // steal reply
  std::vector<std::uint32_t> tasks;
  bool final = false;
};

class Rank;

/// What all ranks share: the graph, the tasks' state, the counters. Actors run one at a
/// time (SimGrid's cooperative contexts), so no lock is needed.
struct World {
  World(const SimGraph& g, const SimOptions& o) : graph(g), options(o) {}
  const SimGraph& graph;
  const SimOptions& options;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::uint8_t> runs;          // times each task ran
  std::vector<std::uint32_t> missing;      // inputs each task still waits for
  std::vector<std::uint8_t> instantiated;  // on its owner
  std::vector<std::uint8_t> stolen;        // moved once: never moves again
  std::vector<std::vector<std::uint32_t>> owned;  // each rank's tasks, in graph order
  std::uint64_t done = 0;
  std::uint64_t pending_write_backs = 0;
  bool finished = false;  // this iteration's tasks have all run and their write-backs arrived
  double makespan = 0.0;  // when the last iteration ended
  // Iterations: a new one starts when the last ended and no steal message is in flight.
  int iteration = 0;
  double iteration_start = 0.0;
  std::uint64_t steal_in_flight = 0;  // steal requests and replies sent, not yet handled
  struct Iteration {
    double seconds = 0.0;
    double busiest_compute_share = 0.0;
    double mean_compute_share = 0.0;
  };
  std::vector<Iteration> iterations;
  double busiest_compute_share = 0.0;  // of the last iteration that ended (0 before)
  double mean_compute_share = 0.0;
  std::uint64_t events = 0;
  std::string error;
  ProgressFn progress;
  std::chrono::steady_clock::time_point last_progress{};
};

struct PriorityWork {
  double tasks = 0.0;
  double flops = 0.0;
};

class Rank {
 public:
  /// `host`: the node (its device runs the tasks, its link carries the tiles); `control`: where
  /// the rank's actor lives, on the control network that carries its control messages;
  /// `cpu`: its communication and copy threads' CPU.
  Rank(World& world, int id, s4u::Host* host, s4u::Host* control, s4u::Host* cpu)
      : w_(world),
        g_(world.graph),
        id_(id),
        host_(host),
        control_(control),
        cpu_(cpu),
        mailbox_(s4u::Mailbox::by_name("rank-" + std::to_string(id))),
        cost_(priors(world.options, host)),
        policy_(world.options.steal, id, world.options.ranks),
        lanes_(std::max(1, host->get_core_count())) {
    if (!world.options.trace_path.empty()) trace_ = std::make_unique<runtime::Trace>(world.options.trace_path, id);
  }

  [[nodiscard]] s4u::Mailbox* mailbox() const { return mailbox_; }
  [[nodiscard]] s4u::Host* host() const { return host_; }
  [[nodiscard]] s4u::Host* control() const { return control_; }
  [[nodiscard]] const runtime::StealStats& steal_stats() const { return steal_; }
  [[nodiscard]] const CostModel& cost() const { return cost_; }
  std::map<std::string, std::uint64_t> tasks_by_class;
  std::uint64_t tasks_executed = 0;
  std::uint64_t owned_tasks = 0;
  double flops = 0.0;
  double busy_seconds = 0.0;
  double cpu_seconds = 0.0;  ///< modeled CPU of the communication and copy threads
  std::uint64_t bytes_sent = 0, bytes_received = 0, messages_sent = 0, messages_received = 0;
  std::uint64_t most_tile_requests_out = 0;  ///< the most tile requests out at once (--fetch-window)
  [[nodiscard]] int lanes() const noexcept { return lanes_; }

  void run() {
    mailbox_->set_receiver(s4u::Actor::self());
    start_iteration();
    Message* incoming = nullptr;
    s4u::CommPtr receive = mailbox_->get_async<Message>(&incoming);
    std::vector<s4u::ActivityPtr> activities;
    while (!stop_) {
      start_ready();
      maybe_ask();
      activities.clear();
      activities.push_back(receive);
      for (const auto& lane : running_) activities.push_back(lane.exec);
      for (const auto& transfer : transfers_) activities.push_back(transfer.comm);
      for (const auto& job : cpu_jobs_) activities.push_back(job.exec);
      double timeout = -1.0;
      const double now = s4u::Engine::get_clock();
      const double ask_at = static_cast<double>(policy_.next_ask_at().count()) * 1e-9;
      if (w_.options.steal.enabled && !outstanding_ && !w_.finished && ask_at > now &&
          StealPolicy::starving(w_.options.steal, queue_.size())) {
        timeout = ask_at - now;
      }
      const ssize_t which = s4u::Activity::wait_any_for(activities, timeout);
      if (which < 0 || static_cast<std::size_t>(which) >= activities.size()) continue;  // backoff over
      if (which == 0) {
        std::unique_ptr<Message> message(incoming);
        ++messages_received;
        handle(*message);
        if (!stop_) receive = mailbox_->get_async<Message>(&incoming);
      } else if (static_cast<std::size_t>(which) <= running_.size()) {
        task_finished(static_cast<std::size_t>(which - 1));
      } else if (static_cast<std::size_t>(which) <= running_.size() + transfers_.size()) {
        transfer_done(static_cast<std::size_t>(which) - 1 - running_.size());
      } else {
        cpu_job_done(static_cast<std::size_t>(which) - 1 - running_.size() - transfers_.size());
      }
      sample_trace();
    }
    if (trace_) trace_->flush();
    mailbox_->set_receiver(nullptr);
  }

  void stop() { stop_ = true; }
  [[nodiscard]] double busy_this_iteration() const noexcept { return busy_this_iteration_; }

 private:
  void sample_trace() {
    if (!trace_) return;
    trace_->sample(s4u::Engine::get_clock() - w_.iteration_start, queue_.size(), completed_this_iteration_);
  }

  /// The rank's part of an iteration's start (engine.cpp: run_iteration,
  /// comm_engine.cpp: reset_iteration_state): its tasks counted, its roots instantiated;
  /// what it learned (cost model, steal backoff, compute shares) carries over.
  void start_iteration() {
    if (trace_) {
      if (!w_.iterations.empty()) trace_->flush();  // the iteration that just ended
      trace_->begin_iteration(w_.iteration);
      completed_this_iteration_ = 0;
    }
    policy_.start_iteration();
    collection_.clear();
    busy_this_iteration_ = 0.0;
    compute_share_ = w_.iterations.empty() ? 0.0 : compute_share_next_;
    const auto& mine = w_.owned[static_cast<std::size_t>(id_)];
    owned_tasks += mine.size();
    for (const std::uint32_t t : mine) add_remaining(g_.task(t));
    for (const std::uint32_t t : mine) {
      if (g_.task(t).predecessor_slots == 0) {
        instantiate(t);
        if (w_.missing[t] == 0) make_ready(t);
      }
    }
  }

  struct Lane {
    s4u::ExecPtr exec;
    std::uint32_t task = 0;
    double started = 0.0;      ///< the modeled start (the catch-up rule may set it in the past)
    double modeled_end = 0.0;  ///< with --lane-wake-us: the lane's modeled clock after the task
  };
  /// An emulated lane between tasks: its modeled clock and when its last task completed.
  struct FreeLane {
    double clock = 0.0;
    double freed_at = -1.0;
  };
  static constexpr double kMaxCatchUp = 5e-3;  // emulated_device.cpp: kMaxCatchUp
  struct Queued {
    std::int64_t priority;
    std::uint64_t seq;
    std::uint32_t task;
    bool operator<(const Queued& o) const {
      if (priority != o.priority) return priority > o.priority;  // higher first
      return seq < o.seq;
    }
  };
  /// A tile on its way, or the request for it: a host-to-host comm this rank waits for
  /// (SimGrid's Comm::sendto, no mailbox: transfers to one rank proceed side by side).
  struct Transfer {
    enum class Kind : std::uint8_t { request, data, write_back };
    enum class For : std::uint8_t { activation, collection, stolen };
    s4u::CommPtr comm;
    Kind kind = Kind::request;
    For purpose = For::activation;
    int peer = 0;               ///< the rank that holds the tile (or receives a write-back)
    std::uint32_t task = 0;     ///< producer (activation) or stolen task
    std::uint8_t slot = 0;
    std::uint32_t tile = 0;     ///< collection
    std::uint64_t bytes = 0;
    double asked_at = 0.0;
  };
  struct CollectionTile {
    bool requested = false;
    bool arrived = false;
    std::vector<std::uint32_t> waiters;
  };
  /// CPU work of the rank's communication and copy threads (on its CPU host: a core of its
  /// own, or the cores all ranks share), after which a tile counts as arrived or a steal
  /// request is served.
  struct CpuJob {
    s4u::ExecPtr exec;
    Transfer tile;                     ///< a received tile (when `request` is empty)
    std::unique_ptr<Message> request;  ///< a steal request to serve
    double seconds = 0.0;
  };

  /// `flops` of work started on `on` (the rank's actor lives on its control host, not there).
  static s4u::ExecPtr start_exec(s4u::Host* on, double flops) {
    s4u::ExecPtr exec = s4u::this_actor::exec_init(flops);
    exec->set_host(on);
    exec->start();
    return exec;
  }

  void start_cpu(CpuJob job) {
    job.exec = start_exec(cpu_, job.seconds * cpu_->get_speed());
    ++w_.events;
    cpu_seconds += job.seconds;
    cpu_jobs_.push_back(std::move(job));
  }

  void cpu_job_done(std::size_t index) {
    CpuJob job = std::move(cpu_jobs_[index]);
    cpu_jobs_[index] = std::move(cpu_jobs_.back());
    cpu_jobs_.pop_back();
    if (job.request) {
      serve(*job.request);
    } else {
      tile_arrived(std::move(job.tile));
    }
  }

  static runtime::CostModelOptions priors(const SimOptions& options, s4u::Host* host) {
    runtime::CostModelOptions p;
    p.seconds_per_flop = 1.0 / host->get_speed();
    (void)options;
    return p;
  }

  void fail(const std::string& what) {
    if (w_.error.empty()) w_.error = what;
    s4u::Actor::kill_all();
    s4u::this_actor::exit();
  }

  void send(int to, Message* message, std::uint64_t payload_bytes) {
    message->from = id_;
    if (message->type == Message::Type::steal_request || message->type == Message::Type::steal_reply) {
      ++w_.steal_in_flight;
    }
    ++w_.events;
    ++messages_sent;
    bytes_sent += payload_bytes;
    w_.ranks[static_cast<std::size_t>(to)]->mailbox()->put_init(message, w_.options.control_bytes + payload_bytes)->detach();
  }

  /// Asks `t.peer` for a tile now, or once fewer than --fetch-window of this rank's tile
  /// requests are unanswered (they go out in the order they were made).
  void fetch(Transfer t) {
    ++inbound_;
    const auto window = static_cast<std::size_t>(w_.options.fetch_window);
    if (window > 0 && fetches_out_ >= window) {
      waiting_fetches_.push_back(std::move(t));
      return;
    }
    send_fetch(std::move(t));
  }

  /// The request's few bytes to `t.peer` (control network), then the tile back here.
  void send_fetch(Transfer t) {
    ++fetches_out_;
    most_tile_requests_out = std::max<std::uint64_t>(most_tile_requests_out, fetches_out_);
    t.kind = Transfer::Kind::request;
    t.asked_at = s4u::Engine::get_clock();
    t.comm = s4u::Comm::sendto_async(control_, w_.ranks[static_cast<std::size_t>(t.peer)]->control(),
                                     w_.options.control_bytes);
    ++w_.events;
    ++messages_sent;
    transfers_.push_back(std::move(t));
  }

  void transfer_done(std::size_t index) {
    Transfer t = std::move(transfers_[index]);
    transfers_[index] = std::move(transfers_.back());
    transfers_.pop_back();
    Rank& peer = *w_.ranks[static_cast<std::size_t>(t.peer)];
    if (t.kind == Transfer::Kind::request) {
      // The holder answers with the tile.
      ++peer.messages_received;
      peer.bytes_sent += t.bytes;
      t.kind = Transfer::Kind::data;
      t.comm = s4u::Comm::sendto_async(peer.host(), host_, w_.options.control_bytes + t.bytes);
      ++w_.events;
      transfers_.push_back(std::move(t));
      return;
    }
    if (t.kind == Transfer::Kind::write_back) {
      peer.bytes_received += t.bytes;
      --w_.pending_write_backs;
      check_done();
      return;
    }
    --fetches_out_;
    if (!waiting_fetches_.empty()) {
      Transfer next = std::move(waiting_fetches_.front());
      waiting_fetches_.pop_front();
      send_fetch(std::move(next));
    }
    if (w_.options.tile_cpu_us > 0.0) {
      CpuJob job;
      job.tile = std::move(t);
      job.seconds = w_.options.tile_cpu_us * 1e-6;
      start_cpu(std::move(job));
      return;
    }
    tile_arrived(std::move(t));
  }

  void tile_arrived(Transfer t) {
    const double now = s4u::Engine::get_clock();
    --inbound_;
    bytes_received += t.bytes;
    // Charged from when it was asked for or the previous arrival, whichever is later.
    cost_.transfer_done(t.peer, t.bytes, now - std::max(t.asked_at, last_arrival_));
    last_tile_bytes_ = t.bytes;
    last_arrival_ = now;
    switch (t.purpose) {
      case Transfer::For::activation:
        deliver(t.task, t.slot);
        break;
      case Transfer::For::collection: {
        CollectionTile& entry = collection_[t.tile];
        entry.arrived = true;
        const auto waiters = std::move(entry.waiters);
        entry.waiters.clear();
        for (const std::uint32_t c : waiters) {
          if (--w_.missing[c] == 0) make_ready(c);
        }
        break;
      }
      case Transfer::For::stolen:
        if (--w_.missing[t.task] == 0) make_ready(t.task);
        break;
    }
  }

  // ---- dataflow

  void add_remaining(const SimTask& t) {
    auto& p = remaining_[t.priority];
    p.tasks += 1.0;
    p.flops += t.flops;
    remaining_tasks_ += 1.0;
    remaining_flops_ += t.flops;
  }
  void leave_remaining(const SimTask& t) {
    auto it = remaining_.find(t.priority);
    if (it == remaining_.end()) fail("rank " + std::to_string(id_) + " ran a task it did not count");
    it->second.tasks -= 1.0;
    it->second.flops -= t.flops;
    if (it->second.tasks < 0.5) remaining_.erase(it);
    remaining_tasks_ -= 1.0;
    remaining_flops_ -= t.flops;
  }
  [[nodiscard]] double remaining_work_seconds() const {
    return cost_.work_seconds(remaining_tasks_, std::max(remaining_flops_, 0.0)) / lanes_;
  }

  void instantiate(std::uint32_t t) {
    w_.instantiated[t] = 1;
    const SimTask& task = g_.task(t);
    for (const SimInput& in : g_.inputs(task)) {
      if (in.kind != Kind::collection || g_.tile(in.ref).owner == id_) continue;
      CollectionTile& entry = collection_[in.ref];
      if (entry.arrived) continue;
      entry.waiters.push_back(t);
      ++w_.missing[t];
      if (!entry.requested) {
        entry.requested = true;
        Transfer f;
        f.purpose = Transfer::For::collection;
        f.peer = g_.tile(in.ref).owner;
        f.tile = in.ref;
        f.bytes = g_.tile(in.ref).bytes;
        fetch(std::move(f));
      }
    }
  }

  void input_arrived(std::uint32_t t) {
    if (!w_.instantiated[t]) instantiate(t);
    if (w_.missing[t] == 0) fail("task " + std::to_string(t) + " received more inputs than it has");
    if (--w_.missing[t] == 0) make_ready(t);
  }

  void make_ready(std::uint32_t t) {
    const SimTask& task = g_.task(t);
    queue_.insert(Queued{task.priority, seq_++, t});
    ++queued_kinds_[{task.key.task_class, task.flops}];
  }

  void unqueue(std::set<Queued>::iterator entry) {
    const SimTask& task = g_.task(entry->task);
    const auto kind = queued_kinds_.find({task.key.task_class, task.flops});
    if (--kind->second == 0) queued_kinds_.erase(kind);
    queue_.erase(entry);
  }

  /// The cost model's run time of every queued task, summed by (class, flops).
  [[nodiscard]] double queued_run_seconds() const {
    double seconds = 0.0;
    for (const auto& [kind, count] : queued_kinds_) {
      seconds += static_cast<double>(count) * cost_.task_seconds(kind.first, kind.second);
    }
    return seconds;
  }

  void start_ready() {
    while (running_.size() < static_cast<std::size_t>(lanes_) && !queue_.empty()) {
      const Queued q = *queue_.begin();
      unqueue(queue_.begin());
      const SimTask& task = g_.task(q.task);
      const double amount = task.flops + w_.options.task_overhead_us * 1e-6 * host_->get_speed();
      ++w_.events;
      const double now = s4u::Engine::get_clock();
      if (w_.options.lane_wake_us <= 0.0) {
        running_.push_back(Lane{start_exec(host_, amount), q.task, now});
        continue;
      }
      // emulated_device.cpp (run_lane): a lane that did not wait for this task, and is not
      // more than kMaxCatchUp behind, starts it at the modeled end of its previous one; it
      // sleeps until the modeled end and wakes lane_wake_us late. A modeled end already
      // past is not slept for: the task completes after its fixed overhead.
      const FreeLane lane = free_lanes_.back();
      free_lanes_.pop_back();
      const bool waited = lane.freed_at < now;
      const double start = (waited || lane.clock < now - kMaxCatchUp) ? now : lane.clock;
      const double end = start + amount / host_->get_speed();
      const double overhead = w_.options.task_overhead_us * 1e-6;
      const double done = end > now ? end + w_.options.lane_wake_us * 1e-6 : now + overhead;
      running_.push_back(Lane{start_exec(host_, (done - now) * host_->get_speed()), q.task, start, end});
    }
  }

  void task_finished(std::size_t lane) {
    const Lane finished = running_[lane];
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(lane));
    const std::uint32_t t = finished.task;
    const SimTask& task = g_.task(t);
    const double now = s4u::Engine::get_clock();
    if (w_.options.lane_wake_us > 0.0) free_lanes_.push_back(FreeLane{finished.modeled_end, now});
    const double seconds = now - finished.started;
    if (w_.runs[t]++ != 0) {
      fail("task " + std::to_string(t) + " ran twice (the second time on rank " + std::to_string(id_) + ")");
    }
    cost_.task_ran(task.key.task_class, task.flops, seconds);
    ++tasks_executed;
    ++tasks_by_class[g_.class_names()[task.class_index]];
    flops += task.flops;
    busy_seconds += seconds;
    busy_this_iteration_ += seconds;
    ++completed_this_iteration_;
    leave_remaining(task);
    ++w_.done;
    // Activations, one per (slot, rank) that owns consumers; write-backs to the owners.
    std::vector<std::pair<int, std::uint8_t>> activated;
    for (const SimSuccessor& s : g_.successors(task)) {
      if (s.to_task) {
        const int dest = g_.task(s.ref).owner;
        if (dest == id_) {
          input_arrived(s.ref);
          continue;
        }
        const std::pair<int, std::uint8_t> key{dest, s.slot};
        if (std::find(activated.begin(), activated.end(), key) != activated.end()) continue;
        activated.push_back(key);
        auto* m = new Message{};
        m->type = Message::Type::activation;
        m->task = t;
        m->slot = s.slot;
        m->bytes = g_.output_bytes(task, s.slot);
        send(dest, m, 0);
      } else {
        const int dest = g_.tile(s.ref).owner;
        if (dest == id_) continue;
        ++w_.pending_write_backs;
        Transfer b;
        b.kind = Transfer::Kind::write_back;
        b.peer = dest;
        b.bytes = g_.output_bytes(task, s.slot);
        b.comm = s4u::Comm::sendto_async(host_, w_.ranks[static_cast<std::size_t>(dest)]->host(),
                                         w_.options.control_bytes + b.bytes);
        ++w_.events;
        bytes_sent += b.bytes;
        transfers_.push_back(std::move(b));
      }
    }
    report_progress();
    sample_trace();  // before check_done, which may start the next iteration
    check_done();
  }

  void deliver(std::uint32_t producer, std::uint8_t slot) {
    for (const SimSuccessor& s : g_.successors(g_.task(producer))) {
      if (s.to_task && s.slot == slot && g_.task(s.ref).owner == id_) input_arrived(s.ref);
    }
  }

  void check_done() {
    if (w_.finished || w_.done != g_.size() || w_.pending_write_backs != 0) return;
    // Every task ran and every write-back arrived: the iteration's time (engine.cpp:
    // the elapsed time of its slowest rank). No rank asks for work any more; requests
    // and replies on their way are answered before the next iteration starts.
    w_.finished = true;
    const double now = s4u::Engine::get_clock();
    World::Iteration it;
    it.seconds = now - w_.iteration_start;
    // Compute shares (engine.cpp: compute_seconds_this_iteration_ / (elapsed x lanes)),
    // the largest and the mean, as the ranks' reductions give them.
    double sum = 0.0;
    for (const auto& r : w_.ranks) {
      const double share =
          it.seconds > 0 ? std::clamp(r->busy_this_iteration() / (it.seconds * r->lanes()), 0.0, 1.0) : 0.0;
      r->compute_share_next_ = share;
      it.busiest_compute_share = std::max(it.busiest_compute_share, share);
      sum += share;
    }
    it.mean_compute_share = sum / static_cast<double>(w_.ranks.size());
    w_.iterations.push_back(it);
    w_.makespan = now;
    end_iteration_when_quiet();
  }

  /// Once the iteration is over and no steal message is in flight: the next iteration,
  /// or the end of the run.
  void end_iteration_when_quiet() {
    if (!w_.finished || w_.steal_in_flight != 0 || stop_) return;
    for (std::uint32_t t = 0; t < g_.size(); ++t) {
      if (w_.runs[t] != 1) {
        fail("iteration " + std::to_string(w_.iteration + 1) + ": task " + std::to_string(t) + " ran " +
             std::to_string(w_.runs[t]) + " times");
      }
    }
    const bool last = w_.iteration + 1 >= w_.options.iterations;
    if (!last) {
      ++w_.iteration;
      w_.iteration_start = s4u::Engine::get_clock();
      w_.busiest_compute_share = w_.iterations.back().busiest_compute_share;
      w_.mean_compute_share = w_.iterations.back().mean_compute_share;
      std::fill(w_.runs.begin(), w_.runs.end(), std::uint8_t{0});
      std::fill(w_.instantiated.begin(), w_.instantiated.end(), std::uint8_t{0});
      std::fill(w_.stolen.begin(), w_.stolen.end(), std::uint8_t{0});
      for (std::uint32_t t = 0; t < g_.size(); ++t) w_.missing[t] = g_.task(t).predecessor_slots;
      w_.done = 0;
      w_.finished = false;
    }
    for (int r = 0; r < static_cast<int>(w_.ranks.size()); ++r) {
      if (r == id_) continue;
      auto* m = new Message{};
      m->type = last ? Message::Type::stop : Message::Type::next;
      send(r, m, 0);
    }
    if (last) {
      stop_ = true;
    } else {
      start_iteration();
    }
  }

  void report_progress() {
    if (!w_.progress || (w_.done & 1023U) != 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - w_.last_progress < std::chrono::milliseconds(250)) return;
    w_.last_progress = now;
    w_.progress(w_.done, g_.size(), s4u::Engine::get_clock());
  }

  // ---- messages

  void handle(const Message& m) {
    using T = Message::Type;
    switch (m.type) {
      case T::activation:
        if (m.bytes == 0) {
          deliver(m.task, m.slot);  // a control token travels with its activation
        } else {
          Transfer f;
          f.purpose = Transfer::For::activation;
          f.peer = m.from;
          f.task = m.task;
          f.slot = m.slot;
          f.bytes = m.bytes;
          fetch(std::move(f));
        }
        break;
      case T::steal_request:
        if (w_.options.serve_cpu && w_.options.steal.request_visit_cost_us > 0) {
          CpuJob job;
          job.request = std::make_unique<Message>(m);
          job.seconds = w_.options.steal.request_visit_cost_us * 1e-6;
          start_cpu(std::move(job));
        } else {
          serve(m);
        }
        break;
      case T::steal_reply:
        reply_arrived(m);
        --w_.steal_in_flight;
        end_iteration_when_quiet();
        break;
      case T::stop:
        stop_ = true;
        break;
      case T::next:
        start_iteration();
        break;
    }
  }

  // ---- stealing: the thief (comm_engine.cpp: thief_view, maybe_send_steal_request)

  void add_costs(StealPolicy::ThiefView& view) const {
    view.round_trip_seconds = cost_.round_trip_seconds();
    if (const auto task = cost_.recent_task_seconds()) view.task_seconds = *task;
    if (last_tile_bytes_ > 0) view.tile_move_seconds = cost_.transfer_seconds(-1, last_tile_bytes_);
    // The last iteration's compute shares (both 0 in the first iteration).
    view.busiest_compute_share = w_.busiest_compute_share;
    view.mean_compute_share = w_.mean_compute_share;
  }

  void maybe_ask() {
    if (!w_.options.steal.enabled || w_.finished || outstanding_ || stop_) return;
    const double now = s4u::Engine::get_clock();
    const auto at = as_time(now);
    StealPolicy::ThiefView view;
    view.roots_queued = true;
    view.request_outstanding = outstanding_;
    view.iteration_over = w_.finished;
    if (at >= policy_.next_ask_at()) {
      view.ready = queue_.size();
      add_costs(view);
      // Tiles on their way here make local tasks ready about one transfer from now.
      if (inbound_ > 0) view.expected_idle_seconds = cost_.transfer_seconds(-1, last_tile_bytes_);
    }
    if (!policy_.should_ask(at, view)) return;
    const auto victim = policy_.choose_victim();
    if (!victim) return;
    auto* m = new Message{};
    m->type = Message::Type::steal_request;
    m->thief = id_;
    m->request_id = ++request_id_;
    m->wanted = StealPolicy::tasks_to_ask(w_.options.steal, view);
    m->thief_load = remaining_work_seconds();
    const runtime::CostSummary summary = cost_.summary();
    if (summary.task_samples > 0) {
      m->thief_overhead = summary.task_overhead_us * 1e-6 / lanes_;
      m->thief_seconds_per_flop = summary.seconds_per_gflop * 1e-9 / lanes_;
    }
    outstanding_ = true;
    final_seen_ = false;
    partial_expected_ = 0;
    partial_seen_ = 0;
    tasks_this_request_ = 0;
    sent_at_ = now;
    ++steal_.requests_sent;
    steal_.max_outstanding = std::max<std::uint64_t>(steal_.max_outstanding, 1);
    send(*victim, m, 0);
  }

  void reply_arrived(const Message& m) {
    if (!outstanding_ || m.request_id != request_id_) {
      fail("steal reply " + std::to_string(m.request_id) + " from rank " + std::to_string(m.from) +
           " answers no outstanding request of rank " + std::to_string(id_));
    }
    for (const std::uint32_t t : m.tasks) {
      const SimTask& task = g_.task(t);
      add_remaining(task);
      w_.missing[t] = 0;
      const auto inputs = g_.inputs(task);
      for (std::size_t slot = 0; slot < inputs.size(); ++slot) {
        const SimInput& in = inputs[slot];
        if (in.kind == Kind::scratch || in.kind == Kind::control || in.bytes == 0) continue;
        ++w_.missing[t];
        steal_.bytes_stolen += in.bytes;
        Transfer f;
        f.purpose = Transfer::For::stolen;
        f.peer = m.from;
        f.task = t;
        f.slot = static_cast<std::uint8_t>(slot);
        f.bytes = in.bytes;
        fetch(std::move(f));
      }
      if (w_.missing[t] == 0) make_ready(t);
    }
    steal_.tasks_stolen += m.tasks.size();
    tasks_this_request_ += m.tasks.size();
    policy_.reply_received(m.from, m.tasks.size());
    if (m.final) {
      final_seen_ = true;
      partial_expected_ = m.partial_replies;
      final_hops_ = m.hops;
    } else {
      ++partial_seen_;
    }
    if (final_seen_ && partial_seen_ == partial_expected_) {
      const double now = s4u::Engine::get_clock();
      outstanding_ = false;
      const double round_trip = now - sent_at_;
      steal_.round_trip_seconds.push_back(round_trip);
      steal_.round_trip_forwards.push_back(final_hops_);
      cost_.round_trip_done(round_trip);
      if (tasks_this_request_ == 0) ++steal_.requests_failed;
      (void)policy_.request_answered(as_time(now), tasks_this_request_, as_time(cost_.round_trip_seconds()),
                                     cost_.recent_task_seconds().value_or(std::numeric_limits<double>::infinity()),
                                     final_hops_ + 1);
    }
  }

  // ---- stealing: the victim (engine_steal.cpp: give_tasks; comm_engine.cpp: serving)

  void serve(const Message& request) {
    ++steal_.requests_received;
    steal_.max_hops_seen = std::max<std::uint64_t>(steal_.max_hops_seen, static_cast<std::uint64_t>(request.hops));
    const auto& options = w_.options.steal;
    StealPolicy::GiftContext context;
    context.lanes = lanes_;
    context.thief_load_seconds = request.thief_load;
    context.victim_load_seconds = remaining_work_seconds();
    context.reply_seconds = cost_.round_trip_seconds() / 2;
    context.compute_share = compute_share_;
    context.mean_compute_share = w_.mean_compute_share;
    // The candidates: the last kPriced queued tasks, the only ones a victim gives, after one
    // entry that stands for every task ahead of them (their run times summed, never given),
    // which choose_gifts only counts as work ahead. That prices what pricing the whole queue
    // prices while the gifts allowed are the same for both lengths (tasks_to_give); when they
    // are not, the whole queue is priced.
    constexpr std::size_t kPriced = 64;
    const std::size_t queued = queue_.size();
    const std::size_t allowed = StealPolicy::tasks_to_give(options, queued, request.wanted);
    std::size_t priced = std::min(queued, kPriced);
    const bool summed =
        queued > priced && StealPolicy::tasks_to_give(options, priced + 1, request.wanted) == allowed;
    if (!summed) priced = queued;
    window_.clear();
    auto from_back = queue_.end();
    for (std::size_t k = 0; k < priced; ++k) window_.push_back(--from_back);
    std::reverse(window_.begin(), window_.end());
    const std::size_t first = summed ? 1 : 0;
    candidates_.assign(first + priced, StealPolicy::GiftCandidate{});
    const bool thief_measured = request.thief_overhead > 0.0 || request.thief_seconds_per_flop > 0.0;
    const bool measured_here = cost_.recent_task_seconds().has_value();
    outranking_.clear();
    if (options.cost_rule) {
      PriorityWork sum;
      for (const auto& [priority, work] : remaining_) {  // highest priority first
        outranking_.emplace_back(priority, sum);
        sum.tasks += work.tasks;
        sum.flops += work.flops;
      }
    }
    double window_seconds = 0.0;
    for (std::size_t i = 0; i < priced; ++i) {
      const std::uint32_t t = window_[i]->task;
      const SimTask& task = g_.task(t);
      auto& c = candidates_[first + i];
      c.run_seconds = cost_.task_seconds(task.key.task_class, task.flops);
      window_seconds += c.run_seconds;
      c.movable = !w_.stolen[t] && priced - i <= kPriced;
      if (!c.movable || !options.cost_rule) continue;
      if (thief_measured && measured_here) {
        c.thief_run_seconds = StealPolicy::thief_run_seconds(
            c.run_seconds, request.thief_overhead + request.thief_seconds_per_flop * task.flops,
            cost_.work_seconds(1.0, task.flops) / lanes_);
      }
      const auto above = std::lower_bound(outranking_.begin(), outranking_.end(), task.priority,
                                          [](const auto& entry, std::int64_t p) { return entry.first > p; });
      if (above != outranking_.end() && above->first == task.priority) {
        c.outranking_seconds = cost_.work_seconds(above->second.tasks, above->second.flops);
      }
      for (const SimInput& in : g_.inputs(task)) {
        if (in.kind == Kind::scratch || in.bytes == 0) continue;
        const double move = cost_.transfer_seconds(request.thief, in.bytes);
        c.fetch_seconds += move;
        if (in.writable) c.return_seconds += move;
      }
    }
    if (summed) {
      candidates_[0].movable = false;
      candidates_[0].run_seconds = std::max(queued_run_seconds() - window_seconds, 0.0);
    }
    const auto chosen = StealPolicy::choose_gifts(options, candidates_, context, request.wanted);
    if (allowed > chosen.size()) {
      steal_.tasks_refused += allowed - chosen.size();
      if (chosen.empty()) ++steal_.requests_refused;
    }
    auto* reply = new Message{};
    reply->type = Message::Type::steal_reply;
    reply->request_id = request.request_id;
    for (const std::size_t i : chosen) {
      const auto entry = window_[i - first];
      const std::uint32_t t = entry->task;
      const SimTask& task = g_.task(t);
      unqueue(entry);
      w_.stolen[t] = 1;
      leave_remaining(task);
      reply->tasks.push_back(t);
    }
    const int given = static_cast<int>(reply->tasks.size());
    if (given > 0) {
      ++steal_.requests_served;
      steal_.tasks_given += static_cast<std::uint64_t>(given);
      const auto kept = static_cast<std::int64_t>(queue_.size());
      steal_.min_ready_after_serve =
          steal_.min_ready_after_serve < 0 ? kept : std::min(steal_.min_ready_after_serve, kept);
    }
    const std::uint64_t reply_bytes = 16 * reply->tasks.size();
    const auto next = policy_.forward_to(request.thief, request.hops, given, request.wanted);
    if (next) {
      auto* forward = new Message(request);
      forward->wanted = next->wanted;
      forward->hops = next->hops;
      if (given > 0) {
        reply->final = false;
        send(request.thief, reply, reply_bytes);
        forward->partial_replies = request.partial_replies + 1;
      } else {
        delete reply;
      }
      ++steal_.requests_forwarded;
      send(next->victim, forward, 0);
      --w_.steal_in_flight;  // the request, served (its forward and reply are counted)
      return;
    }
    reply->final = true;
    reply->partial_replies = request.partial_replies;
    reply->hops = request.hops;
    send(request.thief, reply, reply_bytes);
    --w_.steal_in_flight;
  }

  World& w_;
  const SimGraph& g_;
  int id_;
  s4u::Host* host_;
  s4u::Host* control_;
  s4u::Host* cpu_;
  s4u::Mailbox* mailbox_;
  CostModel cost_;
  StealPolicy policy_;
  int lanes_;
  bool stop_ = false;
  double busy_this_iteration_ = 0.0;
  /// --trace: the samples a real run's --trace writes (runtime::Trace: time since the
  /// iteration's start, tasks ready, tasks completed this iteration), in simulated time.
  std::unique_ptr<runtime::Trace> trace_;
  std::uint64_t completed_this_iteration_ = 0;
  double compute_share_ = 0.0;       ///< this rank's, in the last iteration
 public:
  double compute_share_next_ = 0.0;  ///< set when an iteration ends, used from the next
 private:
  std::set<Queued> queue_;
  std::map<std::pair<std::uint32_t, double>, std::uint64_t> queued_kinds_;  ///< queued tasks by (class, flops)
  // serve()'s scratch, kept to spare an allocation per request.
  std::vector<std::set<Queued>::iterator> window_;
  std::vector<StealPolicy::GiftCandidate> candidates_;
  std::vector<std::pair<std::int64_t, PriorityWork>> outranking_;
  std::uint64_t seq_ = 0;
  std::vector<Lane> running_;
  std::vector<FreeLane> free_lanes_ = std::vector<FreeLane>(static_cast<std::size_t>(lanes_));
  std::vector<Transfer> transfers_;
  std::deque<Transfer> waiting_fetches_;  ///< tile requests held back by --fetch-window
  std::size_t fetches_out_ = 0;           ///< tile requests sent whose tile has not arrived
  std::vector<CpuJob> cpu_jobs_;
  std::map<std::int64_t, PriorityWork, std::greater<>> remaining_;
  double remaining_tasks_ = 0.0;
  double remaining_flops_ = 0.0;
  std::unordered_map<std::uint32_t, CollectionTile> collection_;
  std::uint64_t inbound_ = 0;
  std::uint64_t last_tile_bytes_ = 0;
  double last_arrival_ = 0.0;
  runtime::StealStats steal_;
  bool outstanding_ = false;
  std::uint64_t request_id_ = 0;
  double sent_at_ = 0.0;
  bool final_seen_ = false;
  int partial_expected_ = 0;
  int partial_seen_ = 0;
  int final_hops_ = 0;
  std::uint64_t tasks_this_request_ = 0;
};


}  // namespace bellows::sim::detail
