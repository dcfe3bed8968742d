#include "bellows/controller/slurm_resource_manager.hpp"

#include "bellows/controller/node_list.hpp"
#include "slurm_handles.hpp"
#include "slurm_jobs.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

namespace bellows::controller {
namespace {

using Clock = std::chrono::steady_clock;

/// Where helper jobs are recognised (and left out of pending_jobs()).
constexpr std::string_view kHelperPrefix = "bellows-expand-";

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", std::chrono::duration<double>(d).count());
  return buf;
}

using slurm::contains;
using slurm::in_list;
using slurm::Job;
using slurm::load_job;
using slurm::parse_job_id;
using slurm::reason_name;
using slurm::slurm_error;
using slurm::state_name;

}  // namespace

struct SlurmResourceManager::Impl {
  /// Where an expansion stands, shared between the two threads (under mutex).
  enum class Phase { queued, waiting, merging, answered, cancelled };

  struct ExpandWork {
    RmRequestId id = 0;
    ExpandRequest request;
    Clock::time_point asked;
    std::uint32_t job = 0;
    std::uint32_t helper = 0;  ///< the helper job (merge) or the companion
    bool companion = false;
    Clock::duration submit_time{};
  };

  struct ReleaseWork {
    std::uint64_t id = 0;
    std::string job;
    std::vector<std::string> nodes;
    Clock::time_point asked;
    std::uint32_t job_id = 0;
    Clock::time_point updated;
    Clock::duration update_time{};
    std::string how;  ///< the updates: "NodeList=n[1,3]", "companion job 43 completed"
    /// Leaving nodes Slurm took out of the job or a companion itself, as they went DOWN
    /// (no-kill): released already, left out of `nodes`.
    std::vector<std::string> taken_by_slurm;
    std::vector<std::string> own;              ///< leaving nodes the job itself holds
    std::vector<CompanionRelease> companions;  ///< leaving nodes of its companions
  };

  struct Answer {
    bool expand = true;
    std::uint64_t id = 0;
    std::string job;
    ExpandAnswer expand_answer;
    RmStatus release_status;
    std::vector<std::string> released;
  };

  SlurmOptions options;
  slurm::Library library;  // before the thread that uses it, after it on destruction

  // Shared with the backend's thread.
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::deque<ExpandWork> new_expands;
  std::deque<ReleaseWork> new_releases;
  std::map<RmRequestId, Phase> phases;
  std::map<RmRequestId, std::uint32_t> helpers;
  std::vector<Answer> answers;
  std::map<std::string, CompanionBook> companions;  ///< per job

  // The controller's thread only.
  RmRequestId next_expand = 1;
  std::uint64_t next_release = 1;
  std::map<RmRequestId, ExpandCallback> expand_callbacks;
  std::map<std::uint64_t, ReleaseCallback> release_callbacks;
  std::map<std::string, std::vector<std::string>> granted;  ///< per job, in grant order

  // The backend's thread only.
  std::vector<ExpandWork> active_expands;
  std::vector<ReleaseWork> active_releases;
  std::string alloc_host;
  /// When a node last left a job (wall clock, whole seconds), by (job id, node).
  std::map<std::pair<std::uint32_t, std::string>, std::time_t> departed;

  std::thread thread;

  StrategyChoice strategy;  ///< fixed at construction

  explicit Impl(SlurmOptions o) : options(std::move(o)), strategy(load_strategy(options.expand_strategy)) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
    alloc_host = host;
    thread = std::thread([this] { run(); });
  }

  /// The strategy the site allows (or the one forced), from the controller's configuration.
  static StrategyChoice load_strategy(ExpandStrategy requested) {
    slurm_conf_t* raw = nullptr;
    if (slurm_load_ctl_conf(0, &raw) != SLURM_SUCCESS) {
      const int errnum = slurm_get_errno();
      if (requested != ExpandStrategy::automatic) return choose_expand_strategy(requested, "", "");
      return {ExpandStrategy::companion, slurm::error_text("slurm_load_ctl_conf", errnum) +
                                            ": the site's settings are unknown, and a companion "
                                            "allocation works on any Slurm"};
    }
    const slurm::Config conf(raw);
    const std::string scheduler = conf->sched_params != nullptr ? conf->sched_params : "";
    const std::string prolog = (conf->prolog_flags & PROLOG_FLAG_CONTAIN) != 0 ? "Contain" : "";
    return choose_expand_strategy(requested, scheduler, prolog);
  }

  ~Impl() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    thread.join();
  }

  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // ------------------------------------------------------------ the backend's thread

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      if (stopping) break;
      std::deque<ExpandWork> expands;
      std::deque<ReleaseWork> releases;
      expands.swap(new_expands);
      releases.swap(new_releases);
      lock.unlock();
      for (ExpandWork& w : expands) start_expand(std::move(w));
      for (ReleaseWork& w : releases) start_release(std::move(w));
      poll_expands();
      poll_releases();
      lock.lock();
      auto has_work = [this] { return stopping || !new_expands.empty() || !new_releases.empty(); };
      if (active_expands.empty() && active_releases.empty()) {
        wake.wait(lock, has_work);
      } else {
        wake.wait_for(lock, options.poll_interval, has_work);
      }
    }
    lock.unlock();
    // No helper job or companion outlives the backend.
    for (const ExpandWork& w : active_expands) kill_helper(w.helper);
    std::lock_guard guard(mutex);
    const auto bound = Clock::now() + kStepsEndBound;
    for (const auto& [job, book] : companions) {
      for (std::uint32_t companion : book.companions()) {
        await_steps_end(companion, bound);
        complete_companion(companion);
      }
    }
    companions.clear();
  }

  /// How long the backend's end waits for the steps of the companions it gives back.
  static constexpr std::chrono::milliseconds kStepsEndBound{5000};

  /// Waits, polling every 50 ms until `bound`, until `job` runs no step of its own (its daemons'
  /// steps: an extern step, if any, and the batch step do not count), or, with `nodes`, none on
  /// any of them. A companion completed under a step that is still ending has that step
  /// CANCELLED (slurmstepd says so in the step's output), and Slurm kills the steps on a node it
  /// takes from a job (the daemon's srun then reports its task killed). The steps of daemons a
  /// launcher stopped have ended already (one query); those of daemons a controller that took
  /// the job over told to stop (Stop) may take a moment after their connection closed.
  static void await_steps_end(std::uint32_t job, Clock::time_point bound, const std::vector<std::string>& nodes = {}) {
    const auto runs_here = [&nodes](const job_step_info_t& step) {
      if (step.step_id.step_id == SLURM_EXTERN_CONT || step.step_id.step_id == SLURM_BATCH_SCRIPT) return false;
      if (nodes.empty()) return true;
      const auto on = expand_hostlist(step.nodes != nullptr ? step.nodes : "");
      return std::any_of(on.begin(), on.end(), [&nodes](const std::string& node) { return contains(nodes, node); });
    };
    while (true) {
      job_step_info_response_msg_t* raw = nullptr;
      if (slurm_get_job_steps(0, job, NO_VAL, &raw, SHOW_ALL) != SLURM_SUCCESS) return;
      const slurm::StepInfo steps(raw);
      if (std::none_of(steps->job_steps, steps->job_steps + steps->job_step_count, runs_here) || Clock::now() >= bound)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  Phase phase_of(RmRequestId id) {
    std::lock_guard lock(mutex);
    auto it = phases.find(id);
    return it == phases.end() ? Phase::cancelled : it->second;
  }

  void forget(RmRequestId id) {
    std::lock_guard lock(mutex);
    phases.erase(id);
    helpers.erase(id);
  }

  void answer_expand(const ExpandWork& w, RmStatus status, std::vector<std::string> nodes = {}) {
    Answer a;
    a.expand = true;
    a.id = w.id;
    a.job = w.request.job;
    a.expand_answer.status = std::move(status);
    a.expand_answer.nodes = std::move(nodes);
    std::lock_guard lock(mutex);
    phases[w.id] = Phase::answered;
    helpers.erase(w.id);
    answers.push_back(std::move(a));
  }

  void answer_release(const ReleaseWork& w, RmStatus status) {
    Answer a;
    a.expand = false;
    a.id = w.id;
    a.job = w.job;
    a.release_status = std::move(status);
    if (a.release_status.ok()) {
      a.released = w.nodes;
      a.released.insert(a.released.end(), w.taken_by_slurm.begin(), w.taken_by_slurm.end());
    }
    std::lock_guard lock(mutex);
    answers.push_back(std::move(a));
  }

  static void kill_helper(std::uint32_t helper) {
    if (helper != 0) (void)slurm_kill_job(helper, SIGKILL, 0);
  }

  /// Gives a running companion back: it ends COMPLETED (slurm_kill_job would leave it
  /// CANCELLED in sacct), and Slurm ends its steps. Pending or gone: cancelled, or nothing.
  static int complete_companion(std::uint32_t companion) {
    if (slurm_complete_job(companion, 0) == SLURM_SUCCESS) return SLURM_SUCCESS;
    const int errnum = slurm_get_errno();
    if (errnum != ESLURM_INVALID_JOB_ID && errnum != ESLURM_ALREADY_DONE) kill_helper(companion);
    return errnum;
  }

  void start_expand(ExpandWork w) {
    if (phase_of(w.id) == Phase::cancelled) {
      forget(w.id);
      return;
    }
    const ExpandRequest& r = w.request;
    const std::string context =
        "expand job " + r.job + " by " + std::to_string(r.count) + ": ";
    if (r.count == 0 || r.min_count == 0 || r.min_count > r.count) {
      answer_expand(w, {RmCode::bad_request,
                        context + "needs 1 <= min_count (" + std::to_string(r.min_count) +
                            ") <= count (" + std::to_string(r.count) + ")"});
      return;
    }
    RmStatus parsed = parse_job_id(r.job, w.job);
    if (!parsed.ok()) {
      answer_expand(w, {parsed.code, context + parsed.text});
      return;
    }
    auto job = load_job(w.job);
    if (!job.status.ok()) {
      answer_expand(w, job.status);
      return;
    }
    if (job.value.state != JOB_RUNNING) {
      answer_expand(w, {RmCode::denied, context + "the job is " + state_name(job.value.state) +
                                            ": only a running job can grow"});
      return;
    }
    // Keep within the job's time limit: the helper or companion asks for no more time than
    // the job has left (so that backfill can place it, and a companion ends with the job at
    // the latest), and a job in its last minute does not grow.
    const bool unlimited = job.value.time_limit == INFINITE || job.value.time_limit == NO_VAL;
    const GrantMinutes minutes =
        grant_minutes(unlimited ? std::nullopt : std::optional<std::uint32_t>(job.value.time_limit),
                      job.value.end_time, std::time(nullptr));
    if (!minutes.status.ok()) {
      answer_expand(w, {minutes.status.code, context + minutes.status.text});
      return;
    }
    // merge: a helper job that may merge into the job once it runs; companion: an allocation
    // of its own that says whose it is (squeue -o "%j %k").
    w.companion = strategy.strategy == ExpandStrategy::companion;
    std::string dependency = "expand:" + r.job;
    std::string name = w.companion ? companion_name(r.job) : std::string(kHelperPrefix) + r.job;
    std::string comment = companion_comment(r.job);
    // Nodes the job lost (a replacement's): ExcNodeList, as sbatch --exclude.
    std::string excluded = join_nodes(r.exclude);
    job_desc_msg_t desc;
    slurm_init_job_desc_msg(&desc);
    desc.time_limit = minutes.minutes.value_or(NO_VAL);
    desc.name = name.data();
    if (w.companion) {
      desc.comment = comment.data();
    } else {
      desc.dependency = dependency.data();
    }
    desc.partition = job.value.partition.data();
    if (!job.value.account.empty()) desc.account = job.value.account.data();
    desc.user_id = job.value.user_id;
    desc.group_id = job.value.group_id;
    desc.min_nodes = r.min_count;
    desc.max_nodes = r.count;
    if (!excluded.empty()) desc.exc_nodes = excluded.data();
    desc.shared = JOB_SHARED_NONE;  // whole nodes, also under select/cons_tres
    // Slurm's no-kill (sbatch --no-kill), as the job itself has it from spank_bellows.so: a
    // node that goes DOWN leaves the companion, whose other nodes stay with the job, rather
    // than ending it whole. (A helper job merges into the job, whose own setting counts.)
    desc.kill_on_node_fail = 0;
    desc.alloc_node = alloc_host.data();
    desc.immediate = 0;
    resource_allocation_response_msg_t* raw = nullptr;
    const auto began = Clock::now();
    const int rc = slurm_allocate_resources(&desc, &raw);
    const int errnum = slurm_get_errno();
    const slurm::Allocation allocation(raw);
    w.submit_time = Clock::now() - began;
    if (rc != SLURM_SUCCESS || !allocation) {
      answer_expand(w, slurm_error(context, "slurm_allocate_resources", errnum));
      return;
    }
    w.helper = allocation->job_id;
    {
      std::lock_guard lock(mutex);
      helpers[w.id] = w.helper;
      if (phases[w.id] == Phase::queued) phases[w.id] = Phase::waiting;
    }
    active_expands.push_back(std::move(w));
  }

  /// One look at each helper job; returns when each was looked at once.
  void poll_expands() {
    for (std::size_t i = 0; i < active_expands.size();) {
      if (poll_expand(active_expands[i])) {
        active_expands.erase(active_expands.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  /// True when the expansion is finished (answered, or cancelled and its helper killed).
  bool poll_expand(ExpandWork& w) {
    if (phase_of(w.id) == Phase::cancelled) {
      kill_helper(w.helper);
      forget(w.id);
      return true;
    }
    const ExpandRequest& r = w.request;
    const std::string context = "expand job " + r.job + " by " + std::to_string(r.count) + ": ";
    const std::string helper = (w.companion ? "companion job " : "helper job ") + std::to_string(w.helper);
    const auto now = Clock::now();
    const bool expired = now >= w.asked + r.timeout;
    auto loaded = load_job(w.helper);
    if (!loaded.status.ok()) {
      if (loaded.status.code == RmCode::unavailable && !expired) return false;  // try again
      kill_helper(w.helper);
      answer_expand(w, {loaded.status.code == RmCode::unknown_job ? RmCode::denied
                                                                  : loaded.status.code,
                        context + helper + ": " + loaded.status.text});
      return true;
    }
    const Job& h = loaded.value;
    if (h.state == JOB_PENDING) {
      if (h.reason == WAIT_DEP_INVALID) {
        kill_helper(w.helper);
        answer_expand(w, {RmCode::denied, context + helper +
                                              " can never run (DependencyNeverSatisfied): "
                                              "the job ended or cannot grow"});
        return true;
      }
      if (!expired) return false;
      kill_helper(w.helper);
      // Resources: no node is free; Priority: the free ones go to jobs queued before it.
      const bool no_node = h.reason == WAIT_RESOURCES || h.reason == WAIT_PRIORITY;
      const std::string why = no_node ? "no idle node: " : "not granted: ";
      answer_expand(w, {RmCode::timeout, context + why + helper + " pending (" +
                                             reason_name(h.reason) + ") for " +
                                             seconds(now - w.asked) + "; cancelled it"});
      return true;
    }
    if (h.state != JOB_RUNNING) {
      answer_expand(w, {RmCode::denied, context + helper + " ended " + state_name(h.state) +
                                            " before it was granted (" + reason_name(h.reason) +
                                            ")"});
      return true;
    }
    {
      std::lock_guard lock(mutex);
      if (phases[w.id] == Phase::cancelled) {
        phases.erase(w.id);
        helpers.erase(w.id);
        kill_helper(w.helper);
        return true;
      }
      phases[w.id] = Phase::merging;  // from here on cancel_expand() says false
      if (w.companion) companions[r.job].add(w.helper, h.nodes);
    }
    if (w.companion) {
      answer_expand(w,
                    {RmCode::ok, "granted " + join_nodes(h.nodes) + ": " + helper + " (" +
                                     companion_name(r.job) + ") submitted in " + seconds(w.submit_time) +
                                     ", allocated in " + seconds(now - w.asked)},
                    h.nodes);
      return true;
    }
    merge(w, h.nodes, now);
    return true;
  }

  void merge(const ExpandWork& w, const std::vector<std::string>& helper_nodes,
             Clock::time_point allocated) {
    const ExpandRequest& r = w.request;
    const std::string context = "expand job " + r.job + " by " + std::to_string(r.count) + ": ";
    const std::string helper = "helper job " + std::to_string(w.helper);
    job_desc_msg_t desc;
    slurm_init_job_desc_msg(&desc);
    desc.job_id = w.helper;
    desc.min_nodes = 0;
    const auto began = Clock::now();
    if (slurm_update_job(&desc) != SLURM_SUCCESS) {
      const int errnum = slurm_get_errno();
      kill_helper(w.helper);
      answer_expand(w, slurm_error(context + "merging " + helper + ": ", "slurm_update_job",
                                   errnum));
      return;
    }
    const auto updated = Clock::now();
    // The job's node list shows the helper's nodes once the merge is through.
    for (;;) {
      auto job = load_job(w.job);
      if (job.status.ok() &&
          std::all_of(helper_nodes.begin(), helper_nodes.end(),
                      [&](const std::string& n) { return contains(job.value.nodes, n); })) {
        break;
      }
      if (Clock::now() - updated > options.settle_timeout) {
        answer_expand(w, {RmCode::unavailable,
                          context + helper + " merged, but job " + r.job + " does not list " +
                              join_nodes(helper_nodes) + " after " +
                              seconds(options.settle_timeout) +
                              (job.status.ok() ? "" : " (" + job.status.text + ")")});
        return;
      }
      std::this_thread::sleep_for(options.poll_interval);
    }
    const auto merged = Clock::now();
    const std::string held = hold_for_credentials(w.job, helper_nodes);
    answer_expand(w,
                  {RmCode::ok, "granted " + join_nodes(helper_nodes) + ": " + helper +
                                   " submitted in " + seconds(w.submit_time) + ", allocated in " +
                                   seconds(allocated - w.asked) + ", merged in " +
                                   seconds(merged - began) + held},
                  helper_nodes);
  }

  /// A node that left the job has the job's credentials revoked by its slurmd, up to and
  /// including the second it left: a step started there within that same second is refused
  /// ("Job credential revoked"). So a node coming back to the job in the second it left is
  /// granted only once that second is over. Returns what the wait was, for the answer's text.
  std::string hold_for_credentials(std::uint32_t job, const std::vector<std::string>& nodes) {
    std::time_t latest = 0;
    for (const auto& node : nodes) {
      if (auto it = departed.find({job, node}); it != departed.end()) latest = std::max(latest, it->second);
    }
    if (latest == 0 || std::time(nullptr) > latest) return {};
    const auto began = Clock::now();
    std::this_thread::sleep_until(std::chrono::system_clock::from_time_t(latest + 1) +
                                  std::chrono::milliseconds(10));
    return "; held " + seconds(Clock::now() - began) +
           " (a node left the job in the same second: Slurm refuses steps there until it is over)";
  }

  /// The job's companions now (a copy: the controller's thread reads them too).
  CompanionBook book_of(const std::string& job) {
    std::lock_guard lock(mutex);
    auto it = companions.find(job);
    return it == companions.end() ? CompanionBook{} : it->second;
  }

  /// Shrinks a job or companion to `remaining` by name: Slurm drops the others (a count,
  /// min_nodes, would keep the first nodes in Slurm's order, whichever they are).
  static int shrink_to(std::uint32_t id, const std::vector<std::string>& remaining, std::string& how) {
    std::string req_nodes = compress_hostlist(remaining);
    job_desc_msg_t desc;
    slurm_init_job_desc_msg(&desc);
    desc.job_id = id;
    desc.req_nodes = req_nodes.data();
    how = "NodeList=" + req_nodes;
    return slurm_update_job(&desc) == SLURM_SUCCESS ? SLURM_SUCCESS : slurm_get_errno();
  }

  void start_release(ReleaseWork w) {
    const std::string context = "release of " + join_nodes(w.nodes) + ": ";
    RmStatus parsed = parse_job_id(w.job, w.job_id);
    if (!parsed.ok()) {
      answer_release(w, {parsed.code, context + parsed.text});
      return;
    }
    auto job = load_job(w.job_id);
    if (!job.status.ok()) {
      answer_release(w, job.status);
      return;
    }
    CompanionBook book = book_of(w.job);
    take_out_failed(w, job.value, book);
    if (w.nodes.empty()) {
      answer_release(w, {RmCode::ok, "released " + join_nodes(w.taken_by_slurm) + " of job " + w.job + ": " +
                                         taken_text(w.taken_by_slurm)});
      return;
    }
    std::vector<std::string> held = job.value.nodes;
    for (const auto& node : book.nodes()) held.push_back(node);
    std::vector<std::string> known = held;
    if (!std::all_of(w.nodes.begin(), w.nodes.end(),
                     [&](const std::string& n) { return contains(known, n); })) {
      auto all = load_node_names();
      if (!all.status.ok()) {
        answer_release(w, all.status);
        return;
      }
      known = std::move(all.value);
    }
    ReleasePlan plan = plan_release(w.job, held, job.value.batch_host, w.nodes, known);
    if (!plan.status.ok()) {
      answer_release(w, plan.status);
      return;
    }
    ReleaseSplit split = book.split(w.nodes);
    w.own = std::move(split.own);
    w.companions = std::move(split.companions);
    if (!w.own.empty()) await_steps_end(w.job_id, Clock::now() + kStepsEndBound, w.own);
    const auto began = Clock::now();
    // Companions first: a refusal there leaves the job itself untouched.
    for (const CompanionRelease& c : w.companions) {
      const std::string name = "companion job " + std::to_string(c.companion);
      std::string how;
      const int errnum = c.remaining.empty()
                             ? (slurm_complete_job(c.companion, 0) == SLURM_SUCCESS ? SLURM_SUCCESS
                                                                                     : slurm_get_errno())
                             : shrink_to(c.companion, c.remaining, how);
      if (errnum != SLURM_SUCCESS) {
        answer_release(w, slurm_error("release by job " + w.job + " (" + name + "): ",
                                      c.remaining.empty() ? "slurm_complete_job" : "slurm_update_job",
                                      errnum));
        return;
      }
      w.how += (w.how.empty() ? "" : ", ") + name + (c.remaining.empty() ? " completed" : " " + how);
    }
    if (!w.own.empty()) {
      std::vector<std::string> remaining;
      for (const auto& node : job.value.nodes) {
        if (!contains(w.own, node)) remaining.push_back(node);
      }
      std::string how;
      if (const int errnum = shrink_to(w.job_id, remaining, how); errnum != SLURM_SUCCESS) {
        answer_release(w, slurm_error("release by job " + w.job + " (" + how + "): ",
                                      "slurm_update_job", errnum));
        return;
      }
      w.how = how + (w.how.empty() ? "" : ", ") + w.how;
    }
    w.updated = Clock::now();
    w.update_time = w.updated - began;
    active_releases.push_back(std::move(w));
  }

  /// Down or not responding in slurmctld's view (a node that failed), one RPC.
  RmResult<std::vector<std::string>> load_failed_nodes() const {
    return load_nodes_where([](const node_info_t& n) {
      const bool down = (n.node_state & NODE_STATE_BASE) == NODE_STATE_DOWN;
      return down || (n.node_state & (NODE_STATE_NO_RESPOND | NODE_STATE_FAIL)) != 0;
    });
  }

  static std::string taken_text(const std::vector<std::string>& nodes) {
    return "Slurm took " + join_nodes(nodes) + " out of it when " + (nodes.size() == 1 ? "it" : "they") +
           " went down (no-kill)";
  }

  /// Moves the leaving nodes that Slurm itself took out of the job or out of their companion
  /// (a node that went DOWN leaves a no-kill job, which runs on: slurmctld's
  /// kill_running_job_by_node_name) from w.nodes to w.taken_by_slurm, and forgets them in
  /// `book` and in the job's companion book. Only a node that failed counts: a healthy node
  /// the job does not hold stays in w.nodes and is refused as not the job's.
  void take_out_failed(ReleaseWork& w, const slurm::Job& job, CompanionBook& book) {
    std::vector<std::string> held_now = job.nodes;
    std::vector<std::uint32_t> loaded;
    bool absent = false;
    for (const std::string& node : w.nodes) {
      const auto holder = book.holder_of(node);
      if (holder && std::find(loaded.begin(), loaded.end(), *holder) == loaded.end()) {
        loaded.push_back(*holder);
        auto companion = load_job(*holder);
        if (companion.status.ok() && companion.value.state == JOB_RUNNING)
          held_now.insert(held_now.end(), companion.value.nodes.begin(), companion.value.nodes.end());
      }
      absent = absent || !contains(held_now, node);
    }
    if (!absent) return;
    auto failed = load_failed_nodes();
    if (!failed.status.ok()) return;  // the release goes on and says what Slurm answers
    w.taken_by_slurm = taken_out_on_failure(w.nodes, held_now, failed.value);
    for (const std::string& node : w.taken_by_slurm) std::erase(w.nodes, node);
    if (w.taken_by_slurm.empty()) return;
    book.remove_nodes(w.taken_by_slurm);
    std::lock_guard lock(mutex);
    if (auto it = companions.find(w.job); it != companions.end()) {
      it->second.remove_nodes(w.taken_by_slurm);
      if (it->second.empty()) companions.erase(it);
    }
  }

  void poll_releases() {
    for (std::size_t i = 0; i < active_releases.size();) {
      if (poll_release(active_releases[i])) {
        active_releases.erase(active_releases.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  /// True when none of `leaving` is listed by Slurm job `id` any more (or, for `whole`, once
  /// the job no longer runs). `problem` says what slurmctld answered when it did not.
  static bool left(std::uint32_t id, const std::vector<std::string>& leaving, bool whole,
                   std::string& problem) {
    auto loaded = load_job(id);
    if (!loaded.status.ok()) {
      problem = loaded.status.text;
      return whole && loaded.status.code == RmCode::unknown_job;
    }
    if (whole) return loaded.value.state != JOB_RUNNING && loaded.value.state != JOB_SUSPENDED;
    return std::none_of(leaving.begin(), leaving.end(),
                        [&](const std::string& n) { return contains(loaded.value.nodes, n); });
  }

  bool poll_release(const ReleaseWork& w) {
    const auto now = Clock::now();
    std::string problem;
    bool done = w.own.empty() || left(w.job_id, w.own, false, problem);
    for (const CompanionRelease& c : w.companions) {
      if (!done) break;
      done = left(c.companion, c.leaving, c.remaining.empty(), problem);
    }
    if (done) {
      for (const auto& node : w.own) departed[{w.job_id, node}] = std::time(nullptr);
      {
        std::lock_guard lock(mutex);
        if (auto it = companions.find(w.job); it != companions.end()) {
          it->second.remove_nodes(w.nodes);
          if (it->second.empty()) companions.erase(it);
        }
      }
      answer_release(w, {RmCode::ok, "released " + join_nodes(w.nodes) + " of job " + w.job +
                                         " (" + w.how + "): updated in " + seconds(w.update_time) +
                                         ", gone from the job in " + seconds(now - w.updated) +
                                         (w.taken_by_slurm.empty() ? "" : "; " + taken_text(w.taken_by_slurm))});
      return true;
    }
    if (now - w.updated > options.settle_timeout) {
      answer_release(w, {RmCode::unavailable,
                         "release by job " + w.job + " (" + w.how + "): " + join_nodes(w.nodes) +
                             " still listed " + seconds(now - w.updated) + " after the update" +
                             (problem.empty() ? "" : " (" + problem + ")")});
      return true;
    }
    return false;
  }

  // ------------------------------------------------------------ either thread (one RPC)

  /// The names of slurmctld's nodes for which `keep(node)` holds, one RPC.
  template <typename Keep>
  RmResult<std::vector<std::string>> load_nodes_where(Keep keep) const {
    node_info_msg_t* raw = nullptr;
    if (slurm_load_node(0, &raw, SHOW_ALL) != SLURM_SUCCESS) {
      const int errnum = slurm_get_errno();
      return {slurm_error("", "slurm_load_node", errnum), {}};
    }
    const slurm::NodeInfo info(raw);
    std::vector<std::string> names;
    for (std::uint32_t i = 0; i < info->record_count; ++i) {
      const node_info_t& n = info->node_array[i];
      if (n.name != nullptr && keep(n)) names.emplace_back(n.name);
    }
    return {{RmCode::ok, ""}, std::move(names)};
  }

  /// Every node slurmctld knows, or with `idle_only` those idle, usable and in the partition.
  RmResult<std::vector<std::string>> load_node_names(bool idle_only = false) const {
    constexpr std::uint32_t unusable = NODE_STATE_DRAIN | NODE_STATE_COMPLETING |
                                       NODE_STATE_NO_RESPOND | NODE_STATE_POWERED_DOWN |
                                       NODE_STATE_FAIL | NODE_STATE_MAINT | NODE_STATE_RES;
    return load_nodes_where([&](const node_info_t& n) {
      if (!idle_only) return true;
      if ((n.node_state & NODE_STATE_BASE) != NODE_STATE_IDLE) return false;
      if ((n.node_state & unusable) != 0) return false;
      return options.partition.empty() || in_list(n.partitions, options.partition);
    });
  }
};

SlurmResourceManager::SlurmResourceManager(SlurmOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

SlurmResourceManager::~SlurmResourceManager() = default;

RmRequestId SlurmResourceManager::request_expand(const ExpandRequest& request,
                                                 ExpandCallback done) {
  Impl& m = *impl_;
  const RmRequestId id = m.next_expand++;
  Impl::ExpandWork w;
  w.id = id;
  w.request = request;
  w.asked = Clock::now();
  m.expand_callbacks.emplace(id, std::move(done));
  {
    std::lock_guard lock(m.mutex);
    m.phases[id] = Impl::Phase::queued;
    m.new_expands.push_back(std::move(w));
  }
  m.wake.notify_one();
  return id;
}

bool SlurmResourceManager::cancel_expand(RmRequestId id) {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.mutex);
    auto it = m.phases.find(id);
    if (it == m.phases.end() ||
        (it->second != Impl::Phase::queued && it->second != Impl::Phase::waiting)) {
      return false;
    }
    it->second = Impl::Phase::cancelled;  // the backend's thread kills the helper job
  }
  m.expand_callbacks.erase(id);
  m.wake.notify_one();
  return true;
}

void SlurmResourceManager::release_nodes(const std::string& job,
                                         const std::vector<std::string>& nodes,
                                         ReleaseCallback done) {
  Impl& m = *impl_;
  Impl::ReleaseWork w;
  w.id = m.next_release++;
  w.job = job;
  w.nodes = nodes;
  w.asked = Clock::now();
  m.release_callbacks.emplace(w.id, std::move(done));
  {
    std::lock_guard lock(m.mutex);
    m.new_releases.push_back(std::move(w));
  }
  m.wake.notify_one();
}

RmResult<std::vector<std::string>> SlurmResourceManager::idle_nodes() {
  return impl_->load_node_names(/*idle_only=*/true);
}

RmResult<std::vector<PendingJob>> SlurmResourceManager::pending_jobs() {
  job_info_msg_t* raw = nullptr;
  if (slurm_load_jobs(0, &raw, SHOW_ALL) != SLURM_SUCCESS) {
    const int errnum = slurm_get_errno();
    return {slurm_error("", "slurm_load_jobs", errnum), {}};
  }
  const slurm::JobInfo info(raw);
  struct Row {
    time_t submitted;
    std::uint32_t id;
    PendingJob job;
  };
  std::vector<Row> rows;
  for (std::uint32_t i = 0; i < info->record_count; ++i) {
    const slurm_job_info_t& r = info->job_array[i];
    if ((r.job_state & JOB_STATE_BASE) != JOB_PENDING) continue;
    // The helper jobs and companions of elastic jobs wait for nodes for a job that runs.
    if (r.name != nullptr && (std::string_view(r.name).starts_with(kHelperPrefix) ||
                              std::string_view(r.name).starts_with(kCompanionPrefix))) {
      continue;
    }
    if (!impl_->options.partition.empty() && !in_list(r.partition, impl_->options.partition)) {
      continue;
    }
    rows.push_back({r.submit_time, r.job_id, {std::to_string(r.job_id), r.num_nodes}});
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.submitted != b.submitted ? a.submitted < b.submitted : a.id < b.id;
  });
  std::vector<PendingJob> jobs;
  jobs.reserve(rows.size());
  for (Row& row : rows) jobs.push_back(std::move(row.job));
  return {{RmCode::ok, ""}, std::move(jobs)};
}

RmResult<std::vector<std::string>> SlurmResourceManager::nodes_of(const std::string& job) {
  std::uint32_t id = 0;
  RmStatus parsed = parse_job_id(job, id);
  if (!parsed.ok()) return {parsed, {}};
  auto loaded = load_job(id);
  if (!loaded.status.ok()) return {loaded.status, {}};
  const Job& j = loaded.value;
  if (j.state == JOB_PENDING) return {{RmCode::ok, ""}, {}};
  if (j.state != JOB_RUNNING && j.state != JOB_SUSPENDED) {
    return {{RmCode::unknown_job, "job " + job + " is " + state_name(j.state) + ": it holds no node"},
            {}};
  }
  auto it = impl_->granted.find(job);
  static const std::vector<std::string> none;
  const std::vector<std::string>& granted = it == impl_->granted.end() ? none : it->second;
  // The nodes of its companions are the job's too, once their grant was delivered.
  std::vector<std::string> held = j.nodes;
  for (const auto& node : impl_->book_of(job).nodes()) {
    if (contains(granted, node) && !contains(held, node)) held.push_back(node);
  }
  return {{RmCode::ok, ""}, allocation_order(held, j.batch_host, granted)};
}

void SlurmResourceManager::progress() {
  Impl& m = *impl_;
  std::vector<Impl::Answer> ready;
  {
    std::lock_guard lock(m.mutex);
    ready.swap(m.answers);
    for (const Impl::Answer& a : ready) {
      if (a.expand) m.phases.erase(a.id);
    }
  }
  for (Impl::Answer& a : ready) {
    if (a.expand) {
      auto it = m.expand_callbacks.find(a.id);
      if (it == m.expand_callbacks.end()) continue;
      ExpandCallback done = std::move(it->second);
      m.expand_callbacks.erase(it);
      if (a.expand_answer.status.ok()) {
        auto& order = m.granted[a.job];
        order.insert(order.end(), a.expand_answer.nodes.begin(), a.expand_answer.nodes.end());
      }
      done(std::move(a.expand_answer));
    } else {
      auto it = m.release_callbacks.find(a.id);
      if (it == m.release_callbacks.end()) continue;
      ReleaseCallback done = std::move(it->second);
      m.release_callbacks.erase(it);
      if (a.release_status.ok()) {
        auto& order = m.granted[a.job];
        std::erase_if(order, [&](const std::string& n) { return contains(a.released, n); });
      }
      done(std::move(a.release_status));
    }
  }
}

std::uint32_t SlurmResourceManager::helper_job_of(RmRequestId id) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->helpers.find(id);
  return it == impl_->helpers.end() ? 0 : it->second;
}

const StrategyChoice& SlurmResourceManager::expand_strategy() const noexcept {
  return impl_->strategy;
}

std::string SlurmResourceManager::slurm_job_of(const std::string& job, const std::string& node) const {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->companions.find(job);
  if (it == impl_->companions.end()) return job;
  const auto holder = it->second.holder_of(node);
  return holder ? std::to_string(*holder) : job;
}

std::vector<std::uint32_t> SlurmResourceManager::companions_of(const std::string& job) const {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->companions.find(job);
  return it == impl_->companions.end() ? std::vector<std::uint32_t>{} : it->second.companions();
}

std::vector<CompanionAllocation> SlurmResourceManager::companion_allocations(const std::string& job) const {
  std::lock_guard lock(impl_->mutex);
  const auto it = impl_->companions.find(job);
  std::vector<CompanionAllocation> out;
  if (it == impl_->companions.end()) return out;
  for (std::uint32_t companion : it->second.companions())
    out.push_back({std::to_string(companion), it->second.nodes_of(companion)});
  return out;
}

RmStatus SlurmResourceManager::take_over(const std::string& job, const std::vector<std::string>& nodes,
                                         const std::vector<CompanionAllocation>& companions,
                                         std::string* first_node_lost) {
  SlurmTakeover checked = slurm::check_takeover(job, nodes, companions);
  if (!checked.status.ok()) return checked.status;
  if (first_node_lost != nullptr) *first_node_lost = checked.first_node_lost;
  {
    std::lock_guard lock(impl_->mutex);
    if (checked.companions.empty()) {
      impl_->companions.erase(job);
    } else {
      impl_->companions[job] = std::move(checked.companions);
    }
  }
  // nodes_of() lists them in the record's order after the batch host.
  std::vector<std::string> held = nodes;
  if (!checked.first_node_lost.empty()) std::erase(held, checked.first_node_lost);
  impl_->granted[job] = std::move(held);
  return {};
}

}  // namespace bellows::controller
