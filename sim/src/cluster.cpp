// A cluster of rigid and malleable jobs: the event loop (cluster.hpp).

#include "bellows/sim/cluster.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <bellows/policy/engine.hpp>
#include <bellows/policy/load.hpp>

#include "bellows/sim/cluster_schedule.hpp"

namespace bellows::sim {
namespace {

// A job whose remaining time at its rate is below this has finished (rounding of the rates).
constexpr double kDoneSeconds = 1e-6;

enum class Resize { none, expand, shrink };

const char* name_of(Resize r) { return r == Resize::expand ? "expand" : "shrink"; }

policy::TimePoint at(double seconds) {
  return policy::TimePoint{} +
         std::chrono::duration_cast<policy::TimePoint::duration>(std::chrono::duration<double>(seconds));
}

double seconds_of(policy::Duration d) { return std::chrono::duration<double>(d).count(); }

// A job on the cluster.
struct Running {
  std::size_t job = 0;
  double start = 0.0;
  /// Nodes it runs on; during an expand the new ones are held apart in resize_nodes.
  int nodes = 1;
  /// Its whole work, in seconds on one node (runtime x speed on the submitted nodes).
  double work = 0.0;
  double done = 0.0;
  double iteration_work = 0.0;
  Resize resize = Resize::none;
  int resize_nodes = 0;
  double resize_end = 0.0;
  std::vector<std::string> releasing;
  std::unique_ptr<policy::PolicyEngine> engine;
  double next_tick = 0.0;
  /// One entry per node, in the job's node order (index = position), as the controller has.
  std::vector<policy::NodeMetrics> metrics;
  std::uint64_t next_joined = 0;
  int next_node_name = 0;
  Resize last_resize = Resize::none;
  int expands = 0;
  int shrinks = 0;
  int reversals = 0;
  nlohmann::json resizes = nlohmann::json::array();
};

struct Finished {
  double wait = 0.0;
  double run = 0.0;
  double bounded_slowdown = 0.0;
  bool malleable = false;
};

struct Totals {
  int expands = 0;
  int shrinks = 0;
  int reversals = 0;
  double resize_seconds = 0.0;
  std::uint64_t ticks = 0;
  double tick_seconds = 0.0;
  double max_tick_seconds = 0.0;
};

nlohmann::json wait_summary(std::vector<Finished> jobs, bool want_malleable, bool all) {
  std::vector<double> waits;
  double slowdown = 0.0;
  double turnaround = 0.0;
  for (const Finished& f : jobs) {
    if (!all && f.malleable != want_malleable) continue;
    waits.push_back(f.wait);
    slowdown += f.bounded_slowdown;
    turnaround += f.wait + f.run;
  }
  nlohmann::json out = {{"jobs", waits.size()}};
  if (waits.empty()) {
    out["mean_wait"] = 0.0;
    out["p95_wait"] = 0.0;
    out["mean_bounded_slowdown"] = 0.0;
    out["mean_turnaround"] = 0.0;
    return out;
  }
  std::sort(waits.begin(), waits.end());
  double sum = 0.0;
  for (double w : waits) sum += w;
  const auto n = waits.size();
  const auto p95 = static_cast<std::size_t>(std::ceil(0.95 * static_cast<double>(n))) - 1;
  out["mean_wait"] = sum / static_cast<double>(n);
  out["p95_wait"] = waits[std::min(n - 1, p95)];
  out["mean_bounded_slowdown"] = slowdown / static_cast<double>(n);
  out["mean_turnaround"] = turnaround / static_cast<double>(n);
  return out;
}

class ClusterSimulation {
 public:
  ClusterSimulation(const ClusterWorkload& workload, const ClusterOptions& options)
      : w_(workload), o_(options), free_(options.nodes) {}

  nlohmann::json run(const ClusterProgressFn& progress) {
    const std::size_t total = w_.jobs.size();
    std::size_t next_submit = 0;
    std::size_t reported = 0;
    while (finished_.size() < total) {
      double t = std::numeric_limits<double>::infinity();
      if (next_submit < total) t = w_.jobs[next_submit].submit;
      for (const Running& r : running_) {
        t = std::min(t, r.resize != Resize::none ? r.resize_end : now_ + remaining_seconds(r));
        if (r.engine) t = std::min(t, r.next_tick);
      }
      if (!std::isfinite(t)) {
        throw std::logic_error("cluster simulation: jobs wait on a cluster with nothing running or to come");
      }
      advance(t);
      bool changed = finish_jobs();
      changed = end_resizes() || changed;
      for (; next_submit < total && w_.jobs[next_submit].submit <= now_; ++next_submit) {
        queue_.push_back(next_submit);
        changed = true;
      }
      if (changed && !queue_.empty()) schedule();
      tick_engines();
      // Once a percent.
      if (progress && finished_.size() * 100 / total != reported * 100 / total) {
        reported = finished_.size();
        progress(reported, total);
      }
    }
    return report();
  }

 private:
  [[nodiscard]] double rate(const Running& r, int nodes) const {
    const ClusterJob& job = w_.jobs[r.job];
    return job.malleable ? job.speedup.at(nodes) : 1.0;
  }

  [[nodiscard]] double remaining_seconds(const Running& r) const {
    return std::max(0.0, r.work - r.done) / rate(r, r.nodes);
  }

  void advance(double t) {
    const double dt = t - now_;
    for (Running& r : running_) {
      if (r.resize == Resize::none) r.done += rate(r, r.nodes) * dt;
    }
    node_seconds_ += static_cast<double>(o_.nodes - free_) * dt;
    now_ = t;
  }

  bool finish_jobs() {
    bool any = false;
    for (std::size_t i = 0; i < running_.size();) {
      Running& r = running_[i];
      if (r.resize != Resize::none || remaining_seconds(r) > kDoneSeconds) {
        ++i;
        continue;
      }
      const ClusterJob& job = w_.jobs[r.job];
      const double wait = r.start - job.submit;
      const double run = now_ - r.start;
      finished_.push_back({wait, run, std::max(1.0, (wait + run) / std::max(run, o_.tau_seconds)), job.malleable});
      totals_.reversals += r.reversals;
      if (o_.record_schedule) {
        schedule_.push_back({{"id", job.id}, {"submit", job.submit}, {"start", r.start}, {"end", now_},
                             {"nodes", job.nodes}, {"malleable", job.malleable}, {"resizes", r.resizes}});
      }
      free_ += r.nodes;
      makespan_ = std::max(makespan_, now_);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      any = true;
    }
    return any;
  }

  bool end_resizes() {
    bool freed = false;
    for (Running& r : running_) {
      if (r.resize == Resize::none || r.resize_end > now_) continue;
      const int before = r.nodes;
      if (r.resize == Resize::expand) {
        r.nodes += r.resize_nodes;
        for (int k = 0; k < r.resize_nodes; ++k) add_node(r);
      } else {
        r.nodes -= r.resize_nodes;
        free_ += r.resize_nodes;
        std::erase_if(r.metrics, [&r](const policy::NodeMetrics& m) {
          return std::find(r.releasing.begin(), r.releasing.end(), m.name) != r.releasing.end();
        });
        for (std::size_t k = 0; k < r.metrics.size(); ++k) r.metrics[k].index = static_cast<int>(k);
        r.releasing.clear();
        freed = true;
      }
      if (o_.record_schedule) r.resizes.push_back({now_, name_of(r.resize), before, r.nodes});
      if (r.last_resize != Resize::none && r.last_resize != r.resize) ++r.reversals;
      r.last_resize = r.resize;
      r.resize = Resize::none;
      r.resize_nodes = 0;
      r.engine->resize_committed(at(now_), before, r.nodes);
    }
    return freed;
  }

  void add_node(Running& r) {
    policy::NodeMetrics m;
    m.name = "job" + std::to_string(w_.jobs[r.job].id) + "-node" + std::to_string(r.next_node_name++);
    m.index = static_cast<int>(r.metrics.size());
    m.joined = r.next_joined++;
    r.metrics.push_back(std::move(m));
  }

  void schedule() {
    std::vector<QueuedJob> queued;
    queued.reserve(queue_.size());
    for (std::size_t j : queue_) queued.push_back({w_.jobs[j].nodes, w_.jobs[j].requested});
    std::vector<RunningJobEstimate> ends;
    ends.reserve(running_.size());
    for (const Running& r : running_) {
      const ClusterJob& job = w_.jobs[r.job];
      // The user's limit scaled to what is left at the current speed: a resized job's end moves.
      const double overestimate = job.requested / job.runtime;
      const double pause = r.resize != Resize::none ? r.resize_end - now_ : 0.0;
      const int nodes = r.nodes + (r.resize == Resize::expand ? r.resize_nodes : 0);
      ends.push_back({nodes, now_ + pause + remaining_seconds(r) * overestimate});
    }
    const std::vector<int> start = easy_backfill(free_, now_, queued, ends);
    for (int position : start) begin(queue_[static_cast<std::size_t>(position)]);
    for (auto it = start.rbegin(); it != start.rend(); ++it) {
      queue_.erase(queue_.begin() + *it);
    }
  }

  void begin(std::size_t index) {
    const ClusterJob& job = w_.jobs[index];
    if (job.nodes > free_) throw std::logic_error("cluster simulation: started a job on nodes it does not have");
    free_ -= job.nodes;
    Running r;
    r.job = index;
    r.start = now_;
    r.nodes = job.nodes;
    r.work = job.runtime * rate(r, job.nodes);
    const double iterations = std::max(1.0, std::round(job.runtime / o_.model.iteration_seconds));
    r.iteration_work = r.work / iterations;
    if (job.malleable && o_.policy) {
      policy::Policy p = *o_.policy;
      const int width = job.max_nodes - job.min_nodes;
      if (width > 0) p.nodes.step = std::min(p.nodes.step, width);
      if (const auto problems = policy::apply_node_range(p, {job.min_nodes, job.max_nodes}); !problems.empty()) {
        throw std::invalid_argument("job " + std::to_string(job.id) + ": its node range " +
                                    std::to_string(job.min_nodes) + ":" + std::to_string(job.max_nodes) +
                                    " does not fit the policy: " + problems.front().message);
      }
      r.engine = std::make_unique<policy::PolicyEngine>(std::move(p));
      r.next_tick = now_ + seconds_of(r.engine->policy().tick);
      for (int k = 0; k < job.nodes; ++k) add_node(r);
    }
    running_.push_back(std::move(r));
  }

  void fill_metrics(Running& r) const {
    const ClusterJob& job = w_.jobs[r.job];
    const double speed = rate(r, r.nodes);
    const auto iteration = static_cast<std::uint64_t>(r.done / r.iteration_work);
    const double tasks = static_cast<double>(o_.model.tasks_per_node) * job.nodes;
    for (policy::NodeMetrics& m : r.metrics) {
      protocol::Metrics& x = m.metrics;
      x.iteration = iteration;
      x.iteration_seconds = iteration > 0 ? r.iteration_work / speed : 0.0;
      x.ready_tasks = static_cast<std::uint64_t>(tasks / (2.0 * r.nodes));
      x.busy_fraction = r.resize != Resize::none ? 0.0 : std::min(1.0, speed / r.nodes);
      if (m.index == 0) {
        x.graph_work_seconds = r.iteration_work;
        x.graph_critical_path_seconds = job.speedup.serial_fraction * r.iteration_work;
        x.lanes_per_rank = 1;
      }
    }
  }

  void tick_engines() {
    for (Running& r : running_) {
      if (!r.engine || r.next_tick > now_) continue;
      r.next_tick = now_ + seconds_of(r.engine->policy().tick);
      fill_metrics(r);
      policy::TickInput in;
      in.now = at(now_);
      in.nodes = r.nodes;
      in.metrics = r.metrics;
      in.idle_nodes = free_;
      in.pending_jobs = static_cast<int>(queue_.size());
      const auto started = std::chrono::steady_clock::now();
      const policy::Decision d = r.engine->tick(in);
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      ++totals_.ticks;
      totals_.tick_seconds += spent;
      totals_.max_tick_seconds = std::max(totals_.max_tick_seconds, spent);
      if (d.action == policy::Action::hold) continue;
      if (d.action == policy::Action::expand) {
        const int k = std::min(d.nodes, free_);
        if (k < 1) {
          r.engine->resize_aborted(at(now_));
          continue;
        }
        free_ -= k;
        r.resize = Resize::expand;
        r.resize_nodes = k;
        r.resize_end = now_ + o_.model.expand_seconds;
        ++totals_.expands;
        totals_.resize_seconds += o_.model.expand_seconds;
      } else {
        r.resize = Resize::shrink;
        r.resize_nodes = static_cast<int>(d.release.size());
        r.releasing = d.release;
        r.resize_end = now_ + o_.model.shrink_seconds;
        ++totals_.shrinks;
        totals_.resize_seconds += o_.model.shrink_seconds;
      }
    }
  }

  [[nodiscard]] nlohmann::json report() const {
    int malleable = 0;
    for (const ClusterJob& job : w_.jobs) malleable += job.malleable ? 1 : 0;
    nlohmann::json out;
    out["elastic"] = o_.policy.has_value();
    out["nodes"] = o_.nodes;
    out["jobs"] = w_.jobs.size();
    out["malleable_jobs"] = malleable;
    out["makespan"] = makespan_;
    out["utilisation"] = makespan_ > 0.0 ? node_seconds_ / (o_.nodes * makespan_) : 0.0;
    // The jobs' node-seconds at their submitted sizes: the same work in every run. What the
    // nodes held beyond it went to resizes and to the speedup lost on more nodes.
    double submitted = 0.0;
    for (const ClusterJob& job : w_.jobs) submitted += job.nodes * job.runtime;
    out["work_utilisation"] = makespan_ > 0.0 ? submitted / (o_.nodes * makespan_) : 0.0;
    out["node_seconds"] = node_seconds_;
    out["submitted_node_seconds"] = submitted;
    const nlohmann::json all = wait_summary(finished_, false, true);
    out["mean_wait"] = all["mean_wait"];
    out["p95_wait"] = all["p95_wait"];
    out["mean_bounded_slowdown"] = all["mean_bounded_slowdown"];
    out["mean_turnaround"] = all["mean_turnaround"];
    out["tau"] = o_.tau_seconds;
    out["rigid"] = wait_summary(finished_, false, false);
    out["malleable"] = wait_summary(finished_, true, false);
    out["resizes"] = {{"expands", totals_.expands},
                      {"shrinks", totals_.shrinks},
                      {"reversals", totals_.reversals},
                      {"seconds", totals_.resize_seconds}};
    out["engine"] = {{"ticks", totals_.ticks},
                     {"mean_tick_us", totals_.ticks > 0 ? 1e6 * totals_.tick_seconds / static_cast<double>(totals_.ticks) : 0.0},
                     {"max_tick_us", 1e6 * totals_.max_tick_seconds}};
    if (o_.record_schedule) {
      nlohmann::json schedule = schedule_;
      std::sort(schedule.begin(), schedule.end(),
                [](const nlohmann::json& a, const nlohmann::json& b) { return a["id"] < b["id"]; });
      out["schedule"] = schedule;
    }
    return out;
  }

  const ClusterWorkload& w_;
  const ClusterOptions& o_;
  double now_ = 0.0;
  int free_;
  double node_seconds_ = 0.0;
  double makespan_ = 0.0;
  std::vector<std::size_t> queue_;
  std::vector<Running> running_;
  std::vector<Finished> finished_;
  nlohmann::json schedule_ = nlohmann::json::array();
  Totals totals_;
};

}  // namespace

nlohmann::json simulate_cluster(const ClusterWorkload& workload, const ClusterOptions& options,
                                const ClusterProgressFn& progress) {
  if (options.nodes < 1) throw std::invalid_argument("--nodes must be at least 1, got " + std::to_string(options.nodes));
  if (options.tau_seconds <= 0.0) throw std::invalid_argument("--tau must be positive");
  const ElasticModel& m = options.model;
  if (m.expand_seconds < 0.0 || m.shrink_seconds < 0.0) {
    throw std::invalid_argument("--expand-seconds and --shrink-seconds must not be negative");
  }
  if (m.iteration_seconds <= 0.0) throw std::invalid_argument("--iteration-seconds must be positive");
  if (m.tasks_per_node < 1) throw std::invalid_argument("--tasks-per-node must be at least 1");
  for (const ClusterJob& job : workload.jobs) {
    if (job.nodes > options.nodes) {
      throw std::invalid_argument("job " + std::to_string(job.id) + " asks for " + std::to_string(job.nodes) +
                                  " nodes, more than the cluster's " + std::to_string(options.nodes));
    }
    if (job.runtime <= 0.0) throw std::invalid_argument("job " + std::to_string(job.id) + " has no run time");
  }
  ClusterSimulation simulation(workload, options);
  return simulation.run(progress);
}

}  // namespace bellows::sim
