#include "bellows/sim/bag.hpp"

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <mutex>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "simgrid_engine.hpp"

namespace bellows::sim {

namespace s4u = simgrid::s4u;
using runtime::DtreeGrantor;
using runtime::DtreeShape;
using runtime::IndexRange;

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// The log-normal costs: exp(mu + sigma z), z standard normal (Box-Muller on two uniforms
/// drawn from the hash of (seed, index)), mu chosen so that the mean is mean_ms.
struct Costs {
  std::uint64_t seed;
  double mu;
  double sigma;

  explicit Costs(const BagOptions& o)
      : seed(splitmix64(o.seed)), mu(std::log(o.mean_ms * 1e-3) - o.sigma * o.sigma / 2), sigma(o.sigma) {}

  [[nodiscard]] double operator()(std::int64_t index) const {
    const std::uint64_t h = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(index)));
    // Two 32-bit uniforms: u1 in (0, 1], u2 in [0, 1).
    const double u1 = (static_cast<double>(h >> 32) + 1.0) / 4294967296.0;
    const double u2 = static_cast<double>(h & 0xffffffffULL) / 4294967296.0;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    return std::exp(mu + sigma * z);
  }
};

/// A request (a child asks its parent), a reply (a parent's grant; empty: no more work), or
/// a rank's worker waking its own server to let it finish.
struct Message {
  enum Kind { request, reply, wake } kind = request;
  int from = -1;
  IndexRange range;
};

struct Rank {
  int id = 0;
  int parent = -1;
  int children = 0;
  double speed = 1.0;
  double own_share = 1.0;
  std::optional<DtreeGrantor> grantor;
  bool exhausted = false;        // the parent answered empty (or this is the root, drained)
  bool refill_in_flight = false;
  int children_done = 0;         // children answered empty
  std::deque<int> pending;       // children waiting for a refill
  s4u::MutexPtr mutex;
  s4u::ConditionVariablePtr work;
  // Accounting, simulated seconds.
  double busy = 0.0;
  double wait = 0.0;   // waiting for work while there was still work to get
  double serve = 0.0;  // the server's CPU
  double finish = 0.0;
  std::uint64_t executions = 0;
};


s4u::Mailbox* inbox(int rank) { return s4u::Mailbox::by_name("bag-" + std::to_string(rank)); }

class Bag {
 public:
  explicit Bag(const BagOptions& o) : o_(o), costs_(o) {}

  void build() {
    const int r_count = o_.ranks;
    ranks_.resize(static_cast<std::size_t>(r_count));
    std::vector<double> speeds;
    for (int r = 0; r < r_count; ++r) {
      Rank& rk = at(r);
      rk.id = r;
      rk.speed = slow(r) ? 1.0 / o_.slow_factor : 1.0;
      rk.mutex = s4u::Mutex::create();
      rk.work = s4u::ConditionVariable::create();
      speeds.push_back(o_.speed_shares ? rk.speed : 1.0);
    }
    if (o_.distribution != BagDistribution::dtree) return;
    const DtreeShape shape(r_count, o_.dtree);
    height_ = shape.height();
    for (int r = 0; r < r_count; ++r) {
      Rank& rk = at(r);
      rk.parent = shape.parent(r);
      rk.children = static_cast<int>(shape.children(r).size());
      auto shares = runtime::dtree_shares(shape, r, speeds);
      rk.own_share = shares.own;
      rk.grantor.emplace(r == 0 ? IndexRange{0, o_.tasks} : IndexRange{}, std::move(shares.children), o_.dtree);
    }
  }

  [[nodiscard]] bool slow(int r) const {
    // Evenly spread: rank r is slow when floor((r + 1) f) > floor(r f).
    const double f = o_.slow_fraction;
    return std::floor((r + 1) * f) > std::floor(r * f);
  }

  Rank& at(int r) { return ranks_[static_cast<std::size_t>(r)]; }

  // ------------------------------------------------------------ running a range
  void run(Rank& rk, IndexRange range) {
    double seconds = 0.0;
    for (std::int64_t i = range.begin; i < range.end; ++i) {
      const double c = costs_(i);
      seconds += c;
      max_task_ = std::max(max_task_, c);
    }
    total_work_ += seconds;
    executed_.push_back(range);
    ++rk.executions;
    const double start = s4u::Engine::get_clock();
    s4u::this_actor::execute(seconds / rk.speed * s4u::this_actor::get_host()->get_speed());
    rk.busy += s4u::Engine::get_clock() - start;
  }

  // ------------------------------------------------------------ messages
  void send(int to, Message::Kind kind, int from, IndexRange range = {}) {
    if (kind != Message::wake) {
      ++messages_;
      bytes_ += o_.message_bytes;
    }
    inbox(to)->put_init(new Message{kind, from, range}, kind == Message::wake ? 0 : o_.message_bytes)->detach();
  }

  // Asks the parent for more unless a request is out; the root, drained, is exhausted.
  void ensure_refill(Rank& rk, bool from_worker) {
    if (rk.exhausted || rk.refill_in_flight) return;
    if (rk.parent < 0) {
      set_exhausted(rk, from_worker);
      return;
    }
    rk.refill_in_flight = true;
    ++requests_;
    send(rk.parent, Message::request, rk.id);
  }

  void set_exhausted(Rank& rk, bool from_worker) {
    rk.exhausted = true;
    for (const int c : rk.pending) send(c, Message::reply, rk.id);
    rk.children_done += static_cast<int>(rk.pending.size());
    rk.pending.clear();
    rk.work->notify_all();
    // The server may be waiting for a message that will never come: let it see it is done.
    if (from_worker && rk.children_done == rk.children && rk.children > 0) send(rk.id, Message::wake, rk.id);
  }

  void serve_pending(Rank& rk) {
    auto& g = *rk.grantor;
    while (!rk.pending.empty() && g.remaining() > 0) {
      const int c = rk.pending.front();
      rk.pending.pop_front();
      const IndexRange got = g.grant(c, o_.min_ask);
      ++grants_;
      send(c, Message::reply, rk.id, got);
    }
    if (!rk.pending.empty()) ensure_refill(rk, false);
  }

  // ------------------------------------------------------------ the actors
  void server(int r) {
    Rank& rk = at(r);
    s4u::Mailbox* box = inbox(r);
    const double serve_flops = o_.serve_us * 1e-6 * s4u::this_actor::get_host()->get_speed();
    while (!(rk.exhausted && rk.children_done == rk.children)) {
      auto* m = box->get<Message>();
      const Message msg = *m;
      delete m;
      if (msg.kind == Message::request && serve_flops > 0) {
        const double start = s4u::Engine::get_clock();
        s4u::this_actor::execute(serve_flops);
        rk.serve += s4u::Engine::get_clock() - start;
      }
      std::unique_lock lock(*rk.mutex);
      if (msg.kind == Message::request) {
        if (rk.exhausted) {
          send(msg.from, Message::reply, r);
          ++rk.children_done;
        } else {
          rk.pending.push_back(msg.from);
          serve_pending(rk);
        }
      } else if (msg.kind == Message::reply) {
        rk.refill_in_flight = false;
        if (msg.range.empty()) {
          set_exhausted(rk, false);
        } else {
          rk.grantor->refill(msg.range);
          serve_pending(rk);
          rk.work->notify_all();
        }
      }
    }
  }

  void worker(int r) {
    Rank& rk = at(r);
    auto& g = *rk.grantor;
    for (;;) {
      IndexRange range;
      {
        std::unique_lock lock(*rk.mutex);
        const double start = s4u::Engine::get_clock();
        while (g.remaining() == 0 && !rk.exhausted) {
          ensure_refill(rk, true);
          if (g.remaining() == 0 && !rk.exhausted) rk.work->wait(lock);
        }
        if (g.remaining() == 0) break;
        rk.wait += s4u::Engine::get_clock() - start;
        // A leaf runs all it holds; a parent takes what a child of its own share would get
        // now, keeping the rest for its children.
        const auto own = g.leaf() ? g.remaining()
                                  : std::max(o_.min_ask, static_cast<std::int64_t>(std::ceil(
                                                             o_.dtree.rest * static_cast<double>(g.remaining()) *
                                                             rk.own_share)));
        range = g.take_own(own);
      }
      run(rk, range);
    }
    rk.finish = s4u::Engine::get_clock();
  }

  void static_worker(int r) {
    Rank& rk = at(r);
    const auto n = o_.tasks, count = static_cast<std::int64_t>(o_.ranks);
    const IndexRange range{n * r / count, n * (r + 1) / count};
    if (!range.empty()) run(rk, range);
    rk.finish = s4u::Engine::get_clock();
  }

  void start_actors() {
    for (int r = 0; r < o_.ranks; ++r) {
      s4u::Host* host = s4u::Host::by_name(host_name(r));
      if (o_.distribution == BagDistribution::static_blocks) {
        s4u::Actor::create("worker-" + std::to_string(r), host, [this, r] { static_worker(r); });
      } else {
        s4u::Actor::create("server-" + std::to_string(r), host, [this, r] { server(r); });
        s4u::Actor::create("worker-" + std::to_string(r), host, [this, r] { worker(r); });
      }
    }
  }

  // Every index ran exactly once: the ranges run, sorted, tile [0, N).
  [[nodiscard]] bool each_once() {
    std::sort(executed_.begin(), executed_.end(),
              [](const IndexRange& a, const IndexRange& b) { return a.begin < b.begin; });
    std::int64_t next = 0;
    for (const auto& range : executed_) {
      if (range.begin != next) return false;
      next = range.end;
    }
    return next == o_.tasks;
  }

  nlohmann::json report(double wall_seconds) {
    double makespan = 0.0, busy = 0.0, wait = 0.0, serve = 0.0, total_speed = 0.0, max_speed = 0.0;
    std::uint64_t executions = 0;
    int slow_ranks = 0;
    for (const auto& rk : ranks_) {
      makespan = std::max(makespan, rk.finish);
      busy += rk.busy;
      wait += rk.wait;
      serve += rk.serve;
      total_speed += rk.speed;
      max_speed = std::max(max_speed, rk.speed);
      executions += rk.executions;
      slow_ranks += rk.speed < 1.0 ? 1 : 0;
    }
    const double work_bound = total_work_ / total_speed;
    const double task_bound = max_task_ / max_speed;
    const double optimal = std::max(work_bound, task_bound);
    const double capacity = makespan * o_.ranks;
    // Simulated events: the executions of ranges, the messages, and the servers' executions.
    const std::uint64_t events = executions + messages_ + (o_.serve_us > 0 ? requests_ : 0);
    const bool once = each_once();
    nlohmann::json j{{"distribution", to_string(o_.distribution)},
                     {"ranks", o_.ranks},
                     {"tasks", o_.tasks},
                     {"seed", o_.seed},
                     {"mean_ms", o_.mean_ms},
                     {"sigma", o_.sigma},
                     {"slow_ranks", slow_ranks},
                     {"slow_factor", o_.slow_factor},
                     {"total_work", total_work_},
                     {"max_task", max_task_},
                     {"makespan", makespan},
                     {"work_bound", work_bound},
                     {"task_bound", task_bound},
                     {"optimal", optimal},
                     {"over_optimal", optimal > 0 ? makespan / optimal - 1.0 : 0.0},
                     {"requests", requests_},
                     {"grants", grants_},
                     {"messages", messages_},
                     {"bytes", bytes_},
                     {"wait_fraction", capacity > 0 ? wait / capacity : 0.0},
                     {"serve_fraction", capacity > 0 ? serve / capacity : 0.0},
                     {"idle_fraction", capacity > 0 ? 1.0 - busy / capacity : 0.0},
                     {"executions", executions},
                     {"events", events},
                     {"each_once", once},
                     {"wall_seconds", wall_seconds},
                     {"events_per_second", wall_seconds > 0 ? static_cast<double>(events) / wall_seconds : 0.0}};
    if (o_.distribution == BagDistribution::dtree) {
      j["fan_out"] = o_.dtree.fan_out;
      j["height"] = height_;
      j["min_ask"] = o_.min_ask;
      j["serve_us"] = o_.serve_us;
      j["speed_shares"] = o_.speed_shares;
    }
    if (!once) throw std::logic_error("bag: an index did not run exactly once");
    return j;
  }

 private:
  BagOptions o_;
  Costs costs_;
  std::vector<Rank> ranks_;
  std::vector<IndexRange> executed_;
  double total_work_ = 0.0;
  double max_task_ = 0.0;
  std::uint64_t requests_ = 0, grants_ = 0, messages_ = 0, bytes_ = 0;
  int height_ = 0;
};

}  // namespace

const char* to_string(BagDistribution distribution) noexcept {
  return distribution == BagDistribution::dtree ? "dtree" : "static";
}

double bag_task_seconds(const BagOptions& options, std::int64_t index) { return Costs(options)(index); }

std::string validate(const BagOptions& o) {
  if (o.ranks < 1) return "--ranks must be at least 1, got " + std::to_string(o.ranks);
  if (o.tasks < 1) return "--tasks must be at least 1, got " + std::to_string(o.tasks);
  if (!(o.mean_ms > 0.0) || !std::isfinite(o.mean_ms)) return "--mean-ms must be above 0, got " + format_number(o.mean_ms);
  if (!(o.sigma >= 0.0) || !(o.sigma <= 4.0)) return "--sigma must be in [0, 4], got " + format_number(o.sigma);
  if (!(o.slow_fraction >= 0.0) || !(o.slow_fraction <= 1.0)) {
    return "--slow-fraction must be in [0, 1], got " + format_number(o.slow_fraction);
  }
  if (!(o.slow_factor >= 1.0) || !std::isfinite(o.slow_factor)) {
    return "--slow-factor must be at least 1, got " + format_number(o.slow_factor);
  }
  if (o.min_ask < 1) return "--min-ask must be at least 1, got " + std::to_string(o.min_ask);
  if (!(o.serve_us >= 0.0) || !std::isfinite(o.serve_us)) return "--serve-us must be at least 0, got " + format_number(o.serve_us);
  try {
    o.dtree.validate();
    if (o.distribution == BagDistribution::dtree) (void)DtreeShape(o.ranks, o.dtree);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return validate(o.platform);
}

nlohmann::json simulate_bag(const BagOptions& options) {
  if (auto error = validate(options); !error.empty()) throw std::invalid_argument(error);
  const auto wall_start = std::chrono::steady_clock::now();
  const std::string platform = write_platform(options.platform, options.ranks);
  SimGridEngine engine("bellows-sim-bag", platform);
  std::remove(platform.c_str());

  Bag bag(options);
  bag.build();
  bag.start_actors();
  engine.get().run();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return bag.report(wall);
}

}  // namespace bellows::sim
