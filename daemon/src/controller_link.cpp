#include <bellows/daemon/controller_link.hpp>
#include <bellows/daemon/controller_reach.hpp>
#include <bellows/daemon/launcher.hpp>
#include <bellows/daemon/pmix_fence.hpp>
#include <bellows/daemon/queries.hpp>

#include <bellows/protocol/job_directory.hpp>
#include <bellows/protocol/job_file.hpp>
#include <bellows/protocol/pmix_events.hpp>
#include <bellows/runtime/controller_loss.hpp>
#include <bellows/runtime/first_node_takeover.hpp>
#include <bellows/transport/controller_contact.hpp>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

namespace bellows::daemon {
namespace {

namespace pmix = protocol::pmix;
namespace transport = bellows::transport;

std::string join(const auto& items) {
  std::string text;
  for (const auto& item : items) {
    if (!text.empty()) text += ',';
    if constexpr (std::is_same_v<std::decay_t<decltype(item)>, std::string>)
      text += item;
    else
      text += std::to_string(item);
  }
  return text;
}

void log_sink(transport::LogLevel level, const std::string& text) {
  switch (level) {
    case transport::LogLevel::info: spdlog::info("transport: {}", text); break;
    case transport::LogLevel::warning: spdlog::warn("transport: {}", text); break;
    case transport::LogLevel::error: spdlog::error("transport: {}", text); break;
  }
}

}  // namespace

/// A rank being watched: its pid, its rank in the job (from its metrics), and whether it
/// reported that it left the job or detached at its program's end (then its end is expected).
struct WatchedRank {
  pid_t pid = 0;
  std::uint32_t rank = 0;
  bool left = false;
  bool detached = false;
  /// The signal a PMIx_Job_control had the daemon send it (0: none); its end is then expected.
  int signalled = 0;
  /// Its last report, sent again to a controller that took the job over (it learns the rank).
  std::optional<protocol::NodeMetrics> last_report;
};

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A process that ended but was not reaped yet by its parent (hydra) is gone for us too.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

namespace {

/// The daemon's limits once its controller's connection is lost: those of its heartbeat
/// timeout (runtime::controller_loss_limits), but for a grace or an unreachable limit that
/// `options` sets itself.
runtime::ControllerLossLimits loss_limits_for(const ControllerLink::Options& options) {
  const auto seconds = [](std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); };
  runtime::ControllerLossLimits limits = runtime::controller_loss_limits(seconds(options.heartbeat_timeout));
  if (options.controller_loss_grace) limits.grace_seconds = seconds(*options.controller_loss_grace);
  if (options.controller_unreachable_limit)
    limits.unreachable_seconds = seconds(*options.controller_unreachable_limit);
  return limits;
}

}  // namespace

struct ControllerLink::State {
  PmixServer* server = nullptr;
  Options options;
  /// The grace, the unreachable limit and how often (and how long) the controller's host is
  /// probed while the controller counts as gone; set from `options` at construction.
  runtime::ControllerLossLimits loss_limits;
  std::function<void(const std::string&)> on_stop;
  std::unique_ptr<transport::Client> client;

  std::mutex mutex;
  std::condition_variable changed;
  std::optional<std::string> registration;  // "" when registered, else why not
  std::map<std::string, WatchedRank> watched;  // by the rank's PMIx name
  /// Resize decisions and aborts that came before any rank attached here: a PMIx event
  /// reaches only the ranks attached when it is sent, so they wait for the first one (a
  /// controller can decide a resize while the job's first rank is still starting).
  bool rank_attached_once = false;
  std::vector<std::pair<pmix_status_t, Payload>> held;
  /// Allocation requests the controller took whose resize has not ended: who asked, by
  /// request id; told PMIX_NOTIFY_ALLOC_COMPLETE when the controller's AllocationComplete comes.
  std::map<std::string, ProcId> allocation_requesters;
  bool stopping = false;
  std::thread watcher;
  /// Relays the PMIx fences and direct modex of this node's clients to and from the controller.
  std::shared_ptr<CollectiveRelay> collectives;
  /// Starts the node's ranks the controller asks for (StartRank), as PMIx clients.
  std::unique_ptr<LocalLauncher> launcher;
  std::uint64_t ranks_started = 0;
  /// The job namespaces registered here, and the job's ranks last announced as a process set.
  std::set<std::string> registered_nspaces;
  std::vector<std::uint32_t> announced_ranks;
  /// A rank the controller starts itself was registered here (StartRank, not started_by_daemon).
  bool registered_rank = false;
  /// Set while the link stops: the ranks the launcher still runs are stopped on purpose.
  std::atomic<bool> stopping_ranks{false};
  /// Since when the connection to the controller is lost; unset while it holds.
  std::optional<std::chrono::steady_clock::time_point> controller_lost_since;
  /// Whether the daemon said that the controller is gone while ranks run on, and whether it
  /// stopped because none runs.
  bool said_controller_gone = false;
  bool stopped_orphaned = false;
  /// Whether the relay was told that the controller is gone (CollectiveRelay::controller_gone).
  bool collectives_told_gone = false;
  /// Whether the connection to the controller was ever lost: a connection after that is to a
  /// controller that may have taken the job over (bellows run --attach), which hears hello again.
  bool connection_lost_once = false;
  /// Set by the link once it is built: the state's own weak pointer, for callbacks.
  std::weak_ptr<State> self;
  /// While the controller counts as gone and ranks run: when its host was last probed, what
  /// the last probe found, and since when (the first of the silent probes in a row) its host
  /// has answered nothing.
  std::optional<std::chrono::steady_clock::time_point> last_probe;
  std::optional<HostAnswer> last_answer;
  std::optional<std::chrono::steady_clock::time_point> silent_since;
  /// When the job directory's controller contact was last read while the controller is lost.
  std::optional<std::chrono::steady_clock::time_point> last_contact_check;
  /// Under Slurm, while the controller is gone: what slurmctld said of the job at the last
  /// question (slurmctld_said; unset when it did not answer), whether it was asked at all, and
  /// its SlurmdTimeout once known. Forgotten once the controller is back.
  std::optional<runtime::FirstNodeLossFacts> slurmctld_word;
  bool slurmctld_asked = false;
  std::optional<double> slurmd_timeout_seconds;
  /// The endpoint is one the job directory published after the first was lost: a controller
  /// that took the job over, not the one on the job's batch host.
  bool followed_takeover = false;
  /// Whether the daemon said that it keeps its ranks for a takeover past the unreachable limit.
  bool said_kept_for_takeover = false;

  /// Every 100 ms: ranks whose process ended are reported (RankExited: exit code 0 after
  /// detaching, -1 without leaving the job; nothing after leaving it) and forgotten.
  void watch() {
    std::unique_lock lock(mutex);
    while (!changed.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping; })) {
      for (auto it = watched.begin(); it != watched.end();) {
        if (!process_gone(it->second.pid)) {
          ++it;
          continue;
        }
        if (it->second.detached) {
          // A normal end: the controller counts the job's ranks still running (a job that lost
          // its first rank ends when the others have).
          spdlog::debug("rank {} ({}, pid {}) ended after detaching", it->second.rank, it->first,
                        it->second.pid);
          client->notify(protocol::RankExited{it->second.rank, it->second.pid, 0, 0});
        } else if (!it->second.left && it->second.signalled != 0) {
          spdlog::info("rank {} ({}, pid {}) ended after PMIx_Job_control's signal {}", it->second.rank,
                       it->first, it->second.pid, it->second.signalled);
          client->notify(protocol::RankExited{it->second.rank, it->second.pid, -1, 0});
        } else if (!it->second.left) {
          if (stop_signal_within_grace()) {
            spdlog::info("rank {} ({}, pid {}) ended as the daemon stops", it->second.rank,
                         it->first, it->second.pid);
          } else {
            spdlog::warn("rank {} ({}, pid {}) ended without leaving the job", it->second.rank,
                         it->first, it->second.pid);
            client->notify(protocol::RankExited{it->second.rank, it->second.pid, -1, 0});
          }
        }
        it = watched.erase(it);
      }
      stop_when_orphaned(lock);
    }
  }

  /// The controller's connection went (false) or came back (true). ZeroMQ keeps reconnecting
  /// while the daemon runs; a connection that comes back after a loss may be to a new
  /// controller of the job (bellows run --attach): the daemon says hello again.
  void connection_changed(bool connected) {
    bool hello_again = false;
    {
      std::lock_guard lock(mutex);
      if (connected) {
        if (said_controller_gone)
          spdlog::info("the controller at {} is reachable again", options.endpoint);
        controller_lost_since.reset();
        said_controller_gone = false;
        if (collectives_told_gone && collectives) collectives->controller_back();
        collectives_told_gone = false;
        last_probe.reset();
        last_answer.reset();
        silent_since.reset();
        slurmctld_word.reset();
        slurmctld_asked = false;
        said_kept_for_takeover = false;
        hello_again = connection_lost_once && !stopped_orphaned;
      } else {
        connection_lost_once = true;
        if (!controller_lost_since) controller_lost_since = std::chrono::steady_clock::now();
      }
    }
    if (hello_again) say_hello_again();
  }

  /// Registers with the controller at the job's endpoint again and, once it answered, sends it
  /// the last report of each rank of this node, so that it knows them before their next one.
  void say_hello_again() {
    protocol::Hello hello{options.node_name, static_cast<std::int32_t>(::getpid()), protocol::kProtocolVersion};
    client->request_async(hello, std::chrono::seconds(10), [weak = self](transport::RequestResult result) {
      auto s = weak.lock();
      if (!s) return;
      const auto* ack = result.ok() ? std::get_if<protocol::Ack>(&result.reply) : nullptr;
      if (ack == nullptr || ack->code != protocol::AckCode::ok) {
        spdlog::warn("hello again to the controller at {} not taken: {}", s->options.endpoint,
                     ack != nullptr ? ack->text : result.text);
        return;
      }
      std::vector<protocol::NodeMetrics> reports;
      {
        std::lock_guard lock(s->mutex);
        for (const auto& [name, rank] : s->watched) {
          if (!rank.last_report) continue;
          reports.push_back(*rank.last_report);
          reports.back().metrics.steals_sent = 0;  // counted once, when first reported
          reports.back().metrics.steals_failed = 0;
        }
      }
      spdlog::info("registered again with the controller at {} ({}); {} rank report(s) sent again",
                   s->options.endpoint, ack->text, reports.size());
      for (const auto& report : reports) s->client->notify(report);
    });
  }

  /// Once the controller is gone, one decision, runtime::on_controller_loss, says what the
  /// daemon does; its facts are the time since the connection went, the ranks of this node
  /// that run and how long the controller's host has answered nothing (probed every probe interval
  /// while ranks run). Each effect happens once per loss: the relay fails the node's fences
  /// and data requests from the end of the grace until the controller is back; the daemon says
  /// once that the controller is gone while its ranks run on; and it stops (on_stop) once, when
  /// no rank runs or when the host has answered nothing for the unreachable limit.
  /// Called every 100 ms with `mutex` held (by `lock`), which a probe releases while it waits.
  void stop_when_orphaned(std::unique_lock<std::mutex>& lock) {
    if (!controller_lost_since || stopped_orphaned) return;
    const runtime::ControllerLossLimits& limits = loss_limits;
    follow_published_contact();
    if (probe_due(limits)) {
      probe_host_once(lock);
      if (!controller_lost_since || stopped_orphaned) return;  // back, or stopped meanwhile
    }
    runtime::ControllerLossFacts facts = controller_loss_facts();
    const runtime::SilentControllerVerdict takeover = takeover_verdict(facts);
    facts.kept_for_takeover = takeover.keep_ranks;
    const runtime::ControllerLossAction action = runtime::on_controller_loss(facts, limits);
    if (action == runtime::ControllerLossAction::wait) return;
    if (!collectives_told_gone) {
      // No fence or data request of this node's clients can end any more.
      collectives_told_gone = true;
      if (collectives) collectives->controller_gone("the controller at " + options.endpoint + " is gone");
    }
    switch (action) {
      case runtime::ControllerLossAction::wait:
        return;
      case runtime::ControllerLossAction::keep_ranks:
        // Said once the host answered (or when no probe is made): a host that has not
        // answered yet may be one this node is cut off from.
        if (!said_controller_gone && (last_answer == HostAnswer::answered || limits.unreachable_seconds <= 0.0)) {
          said_controller_gone = true;
          spdlog::warn(
              "the controller at {} is gone (no connection for {:.1f} s): the ranks of node {} run "
              "on ({} attached, {} started here running); the daemon exits once they end",
              options.endpoint, facts.lost_seconds, options.node_name, watched.size(),
              launcher ? launcher->running() : 0);
        }
        if (facts.kept_for_takeover && !said_kept_for_takeover) {
          said_kept_for_takeover = true;
          spdlog::warn("the host of the controller at {} has answered nothing for {} s: the {} rank(s) of node {} "
                       "run on: {} (takeover grace {} s, bellowsd --takeover-grace)",
                       options.endpoint, static_cast<int>(facts.unreachable_seconds), facts.ranks_running,
                       options.node_name, takeover.why, static_cast<long long>(takeover_grace()));
        }
        return;
      case runtime::ControllerLossAction::end_ranks:
        stop_orphaned(lock, spdlog::level::warn,
                      "the host of the controller at " + options.endpoint + " has answered nothing for " +
                          std::to_string(static_cast<int>(facts.unreachable_seconds)) + " s: node " +
                          options.node_name + " is cut off (or that host is gone) and the controller counts its ranks lost" +
                          (slurmctld_asked ? " (" + takeover.why + ")" : std::string()),
                      facts, "ending its " + std::to_string(facts.ranks_running) + " rank(s) and stopping");
        return;
      case runtime::ControllerLossAction::stop:
        stop_orphaned(lock, spdlog::level::info,
                      "the controller at " + options.endpoint + " is gone and no rank of node " + options.node_name +
                          " runs",
                      facts, "stopping");
        return;
    }
  }

  /// While the controller is lost: once a second, the endpoint the job directory publishes.
  /// A controller that took the job over on another node (bellows run --attach, after the
  /// job's first node was lost: first_node_takeover.hpp) published its own, with the job's
  /// key; the connection moves there. With `mutex` held.
  void follow_published_contact() {
    if (options.job_dir.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    if (last_contact_check && now - *last_contact_check < std::chrono::seconds(1)) return;
    last_contact_check = now;
    std::string published;
    try {
      published = transport::read_controller_contact(options.job_dir).endpoint;
    } catch (const std::exception& e) {
      spdlog::debug("the job's controller contact cannot be read: {}", e.what());
      return;
    }
    if (published.empty() || published == options.endpoint) return;
    spdlog::info("the job's controller now listens at {} (was {}): connecting there", published, options.endpoint);
    client->reconnect(published);
    options.endpoint = published;
    followed_takeover = true;
    last_probe.reset();
    last_answer.reset();
    silent_since.reset();
  }

  /// Ranks of this node that run: attached, or started here and not ended. With `mutex` held.
  /// The ranks of this node that run: those attached through libbellows, those the launcher
  /// started, and the rank the controller started itself (registered_rank_runs) while it is not
  /// attached through libbellows (then it is among the first).
  std::size_t ranks_running() const {
    const bool registered_unwatched = !rank_attached_once && registered_rank_runs();
    return watched.size() + (launcher ? launcher->running() : 0) + (registered_unwatched ? 1 : 0);
  }

  /// Whether the rank the controller started itself, which this daemon only registered
  /// (StartRank with started_by_daemon false: the job's first rank), still runs, by the pid its
  /// starter wrote (protocol::JobDirectory::rank_pid_file). A PMIx-native program's first rank
  /// is watched by nothing else here: without it, a daemon whose controller died would stop
  /// under that rank's PMIx connection.
  bool registered_rank_runs() const {
    if (!registered_rank || options.job_dir.empty()) return false;
    std::ifstream in(protocol::JobDirectory{options.job_dir}.rank_pid_file(options.node_name));
    long pid = 0;
    if (!(in >> pid) || pid <= 0) return false;
    return !process_gone(static_cast<pid_t>(pid));
  }

  /// What on_controller_loss decides from, now. With `mutex` held, the controller lost.
  runtime::ControllerLossFacts controller_loss_facts() const {
    const auto seconds_since = [](std::chrono::steady_clock::time_point since) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    };
    return {seconds_since(*controller_lost_since), silent_since ? seconds_since(*silent_since) : 0.0,
            ranks_running()};
  }

  /// The takeover grace in seconds: the configured one, else 1.5 SlurmdTimeouts.
  double takeover_grace() const {
    std::optional<double> configured;
    if (options.takeover_grace) configured = std::chrono::duration<double>(*options.takeover_grace).count();
    return runtime::takeover_grace_seconds(configured, slurmd_timeout_seconds);
  }

  /// Whether the ranks are kept past the unreachable limit for a takeover, and why: only
  /// asked once that limit has passed (before, the ranks are kept anyway) and slurmctld was
  /// asked (a daemon under Slurm). With `mutex` held, the controller lost.
  runtime::SilentControllerVerdict takeover_verdict(const runtime::ControllerLossFacts& facts) const {
    if (loss_limits.unreachable_seconds <= 0.0 || facts.unreachable_seconds < loss_limits.unreachable_seconds)
      return {};
    if (!slurmctld_asked) return {false, "not a Slurm job: no takeover to wait for"};
    return runtime::keep_ranks_for_takeover(
        {slurmctld_word, !followed_takeover, facts.unreachable_seconds, takeover_grace()});
  }

  /// Whether the controller's host is to be probed now: past the grace, with ranks running
  /// (what the probe decides is their fate) and a limit set, a probe interval after the last.
  bool probe_due(const runtime::ControllerLossLimits& limits) const {
    const auto now = std::chrono::steady_clock::now();
    return limits.unreachable_seconds > 0.0 && ranks_running() > 0 &&
           std::chrono::duration<double>(now - *controller_lost_since).count() >= limits.grace_seconds &&
           (!last_probe ||
            std::chrono::duration<double>(now - *last_probe).count() >= limits.probe_interval_seconds);
  }

  /// Probes the controller's host once, with `mutex` released meanwhile, and records what it
  /// found: since when it has answered nothing (silent_since), and its last answer (said when
  /// it changed).
  void probe_host_once(std::unique_lock<std::mutex>& lock) {
    const auto probed_at = std::chrono::steady_clock::now();
    last_probe = probed_at;
    const std::string endpoint = options.endpoint;
    lock.unlock();
    const HostAnswer answer = probe_controller_host(
        endpoint, std::chrono::milliseconds(std::lround(loss_limits.probe_interval_seconds * 1000.0)));
    lock.lock();
    if (!controller_lost_since || stopped_orphaned) return;
    if (answer == HostAnswer::silent && !silent_since) silent_since = probed_at;
    if (answer == HostAnswer::answered) silent_since.reset();
    if (answer != last_answer)
      spdlog::info("the host of the controller at {} {} a connection", options.endpoint,
                   answer == HostAnswer::answered ? "answers" : "does not answer");
    last_answer = answer;
  }

  /// Stops the daemon (on_stop, with `mutex` released) because the controller is gone: `reason`
  /// is logged at `level` with what the daemon does, and is what on_stop gets. Once.
  void stop_orphaned(std::unique_lock<std::mutex>& lock, spdlog::level::level_enum level, const std::string& reason,
                     const runtime::ControllerLossFacts& facts, const std::string& doing) {
    stopped_orphaned = true;
    spdlog::log(level, "{} (no connection for {:.1f} s): {}", reason, facts.lost_seconds, doing);
    lock.unlock();
    if (on_stop) on_stop(reason);
    lock.lock();
  }

  void deliver(const protocol::Message& message) {
    if (const auto* d = std::get_if<protocol::ResizeDecided>(&message)) {
      Payload payload{{pmix::kResizeId, d->resize_id}};
      pmix_status_t code = pmix::kExpandDecided;
      if (d->kind == protocol::ResizeKind::expand) {
        payload[pmix::kExpandCount] = std::uint64_t{d->count};
        payload[pmix::kExpandHosts] = join(d->new_nodes);
      } else {
        code = pmix::kShrinkDecided;
        payload[pmix::kShrinkNodes] = join(d->leaving_nodes);
      }
      report_notify(code, payload);
    } else if (const auto* a = std::get_if<protocol::Abort>(&message)) {
      report_notify(pmix::kResizeAborted,
                    Payload{{pmix::kResizeId, a->resize_id}, {pmix::kAbortReason, a->reason}});
    } else if (const auto* lost = std::get_if<protocol::RanksLost>(&message)) {
      std::string ranks;
      for (const std::uint32_t rank : lost->lost_ranks) {
        if (!ranks.empty()) ranks += ',';
        ranks += std::to_string(rank);
      }
      spdlog::info("failure {}: ranks [{}] on {} are lost ({}); telling the ranks of {}", lost->failure_id,
                   ranks, join(lost->lost_nodes), lost->reason, options.node_name);
      // Not held for a first rank to attach: a rank that attaches later joins a job that has
      // already gone on without the lost ones.
      notify_ranks(pmix::kRanksLost, Payload{{pmix::kFailureId, lost->failure_id},
                                             {pmix::kLostRanks, ranks},
                                             {pmix::kLostNodes, join(lost->lost_nodes)},
                                             {pmix::kLostReason, lost->reason}});
      // The same loss in the standard's words, for tools and clients that know no Bellows.
      for (const StandardEvent& event : lost_events(*lost, job_nspace())) notify_standard(event);
    } else if (const auto* s = std::get_if<protocol::Stop>(&message)) {
      spdlog::info("controller says stop: {}", s->reason);
      // Before the daemon stops: tools attached here learn that the job is over.
      notify_standard(job_end_event(job_nspace(), s->reason));
      if (on_stop) on_stop(s->reason);
    } else if (const auto* start = std::get_if<protocol::StartRank>(&message)) {
      start_rank(*start);
    } else if (const auto* view = std::get_if<protocol::JobView>(&message)) {
      server->set_job_view(*view);
      announce_ranks(*view);
    } else if (const auto* complete = std::get_if<protocol::AllocationComplete>(&message)) {
      allocation_complete(*complete);
    } else if (const auto* signal = std::get_if<protocol::SignalRank>(&message)) {
      signal_rank(*signal);
    } else if (const auto* release = std::get_if<protocol::FenceRelease>(&message)) {
      if (const auto relay = collective_relay()) relay->released(*release);
    } else if (const auto* ask = std::get_if<protocol::ModexRequest>(&message)) {
      if (const auto relay = collective_relay()) relay->serve(*ask);
    } else if (const auto* reply = std::get_if<protocol::ModexReply>(&message)) {
      if (const auto relay = collective_relay()) relay->answered(*reply);
    } else {
      spdlog::warn("dropped {} from the controller: a daemon does not handle it",
                   protocol::to_string(protocol::type_of(message)));
    }
  }

  /// The relay of fences and modex requests; null once the link stops.
  std::shared_ptr<CollectiveRelay> collective_relay() {
    std::lock_guard lock(mutex);
    return collectives;
  }

  /// Starts the rank the controller asked for. Its environment says which node it is on
  /// (BELLOWS_NODE), so that it attaches here. A rank that cannot be started, or whose
  /// launcher fails, is reported as a rank that exited (RankExited, rank -1 while it has no
  /// rank in the job yet); one that ends normally is not (it detached, or left).
  void start_rank(const protocol::StartRank& start) {
    std::lock_guard lock(mutex);
    if (!launcher) {
      launcher = std::make_unique<LocalLauncher>(*server, [this](const ExitStatus& status) {
        if ((status.exited && status.code == 0) || stopping_ranks.load()) {
          spdlog::info("the rank launcher {} (pid {}) ended", to_string(status.proc), status.pid);
          // A rank of a PMIx-native program (none attached through libbellows here) that ended
          // normally: the controller learns it, as a leaver's end commits a shrink of such a job
          // (docs/daemon.md). A libbellows rank's end comes from its detach notice.
          if (status.exited && !stopping_ranks.load() && !attached_through_libbellows())
            client->notify(protocol::RankExited{protocol::kNoRank, static_cast<std::int32_t>(status.pid), 0, 0});
          return;
        }
        if (stop_signal_within_grace()) {
          spdlog::info("the rank launcher {} (pid {}) {} as the daemon stops", to_string(status.proc),
                       status.pid, status.describe());
          return;
        }
        spdlog::warn("the rank launcher {} (pid {}) {}", to_string(status.proc), status.pid,
                     status.describe());
        client->notify(protocol::RankExited{protocol::kNoRank, static_cast<std::int32_t>(status.pid),
                                            status.exited ? status.code : 0,
                                            status.exited ? 0 : status.signal});
      });
    }
    LaunchSpec spec;
    spec.nspace = start.nspace;
    spec.argv = start.command;
    spec.env = start.environment;
    spec.env.push_back(std::string(protocol::job_environment::kNode) + "=" + options.node_name);
    for (std::size_t i = 0; i < start.map_nodes.size() && i < start.map_ranks.size(); ++i)
      spec.job_map.push_back({start.map_nodes[i], start.map_ranks[i]});
    spec.ranks_to_start = {start.rank};
    spec.departed = start.departed_ranks;
    const std::string what = "rank " + std::to_string(start.rank) + " of " + start.nspace;
    try {
      const auto mapped = std::ranges::find(spec.job_map, start.rank, &MappedRank::rank);
      if (mapped == spec.job_map.end() || mapped->node != options.node_name)
        throw std::invalid_argument("the job map " + to_string(spec.job_map) + " does not put it on " +
                                    options.node_name);
      // The job as it will be once the rank's grow commits, as its registration says: a fence
      // over the namespace means these ranks until the job's next view says them again.
      std::vector<std::uint32_t> in_job;
      for (const MappedRank& rank : spec.job_map)
        if (std::ranges::find(spec.departed, rank.rank) == spec.departed.end()) in_job.push_back(rank.rank);
      if (collectives) collectives->job_ranks(start.nspace, in_job, static_cast<std::uint32_t>(spec.job_map.size()));
      if (!start.started_by_daemon) {
        write_rank_environment(launcher->register_only(spec));
        registered_nspaces.insert(start.nspace);
        registered_rank = true;
        spdlog::info("registered {} for the process the controller starts (job map {})", what,
                     to_string(spec.job_map));
        return;
      }
      const auto pids = launcher->launch(spec);
      registered_nspaces.insert(start.nspace);
      spdlog::info("started the rank of resize {}: {} (pid {}) as {}", start.resize_id, join(start.command),
                   pids.empty() ? 0 : pids.front(), what);
    } catch (const std::exception& e) {
      spdlog::error("could not {} {} of resize {}: {}", start.started_by_daemon ? "start" : "register", what,
                    start.resize_id, e.what());
      // No process was started: the daemon's own pid names where it failed.
      client->notify(protocol::RankExited{protocol::kNoRank, ::getpid(), 127, 0});
    }
  }

  /// When the job's ranks changed (a grow, a shrink, a loss), this node registered the job's
  /// namespace and is one of the job's nodes: registers the namespace again with the job as it
  /// is now (its size, nodes, node and process maps, from the view's job map and the ranks in
  /// the job), then defines the process set of the job's ranks now, which the node's clients
  /// hear of as PMIX_PROCESS_SET_DEFINE (docs/daemon.md, "The job's namespace"). Its name is
  /// the same on every node: JOB.ranks.COUNT.HASH (HASH: 8 hex digits of the ranks).
  void announce_ranks(const protocol::JobView& view) {
    // Not before this node is the job's (a grow's new node joins once the grow committed).
    if (std::ranges::find(view.nodes, options.node_name) == view.nodes.end()) return;
    const std::vector<std::uint32_t> ranks = job_ranks(view);
    std::lock_guard lock(mutex);
    if (!launcher || !registered_nspaces.contains(view.job) || ranks.empty()) return;
    JobMap map;
    for (std::uint32_t rank = 0; rank < view.pmix_rank_nodes.size(); ++rank)
      map.push_back({view.pmix_rank_nodes[rank], rank});
    // A node whose rank leaves (a shrink of a PMIx-native program) has no rank in the job to
    // register it for; its client still hears of the set, which it is not in.
    const auto here = std::ranges::find(view.nodes, options.node_name) - view.nodes.begin();
    const bool leaving = static_cast<std::size_t>(here) >= view.node_pmix_ranks.size() ||
                         view.node_pmix_ranks[static_cast<std::size_t>(here)] == protocol::kNoRank;
    // A wildcard fence over the job means its ranks now, which need not be 0..n-1.
    if (const auto relay = collectives) relay->job_ranks(view.job, ranks, static_cast<std::uint32_t>(map.size()));
    if (!leaving) {
      try {
        // The job first: a client that hears of the set and asks for the job reads it as it is now.
        if (launcher->update_job(view.job, map, ranks))
          spdlog::info("registered {} again: ranks {} of the job map {}", view.job, join(ranks), to_string(map));
      } catch (const std::exception& e) {
        spdlog::error("could not register {} again with ranks {} of the job map {}: {}", view.job, join(ranks),
                      to_string(map), e.what());
      }
    }
    if (ranks == announced_ranks) return;
    const std::string name = job_ranks_set_name(view.job, ranks);
    try {
      launcher->announce_members(view.job, ranks, name);
      announced_ranks = ranks;
      spdlog::info("the job's ranks are now process set {}", name);
    } catch (const std::exception& e) {
      spdlog::error("could not announce the job's ranks as process set {}: {}", name, e.what());
    }
  }

  /// Whether a rank attached here through libbellows (its kRankAttached notice).
  bool attached_through_libbellows() {
    std::lock_guard lock(mutex);
    return rank_attached_once;
  }

  /// A client of a job namespace registered here connected: the controller learns it
  /// (RankConnected), as a grow of a PMIx-native program commits once its new ranks connected.
  void client_connected(const ProcId& proc) {
    {
      std::lock_guard lock(mutex);
      if (!registered_nspaces.contains(proc.nspace)) return;
    }
    spdlog::info("rank {} connected as a PMIx client", to_string(proc));
    client->notify(protocol::RankConnected{proc.nspace, proc.rank});
  }

  /// The PMIx variables of the rank another process starts, one "NAME=VALUE" a line, where
  /// that process reads them (protocol::JobDirectory::rank_environment_file), written whole.
  void write_rank_environment(const std::vector<std::string>& environment) const {
    if (options.job_dir.empty())
      throw std::invalid_argument("this daemon has no job directory to write the rank's environment to");
    const auto path = protocol::JobDirectory{options.job_dir}.rank_environment_file(options.node_name);
    std::string text;
    for (const std::string& entry : environment) text += (text.empty() ? "" : "\n") + entry;
    protocol::write_line_atomically(path, text);
  }

  /// The resize an allocation request started ended: its requester hears of it
  /// (PMIX_NOTIFY_ALLOC_COMPLETE, to it alone).
  void allocation_complete(const protocol::AllocationComplete& complete) {
    std::optional<ProcId> requester;
    {
      std::lock_guard lock(mutex);
      if (auto it = allocation_requesters.find(complete.request_id); it != allocation_requesters.end()) {
        requester = it->second;
        allocation_requesters.erase(it);
      }
    }
    if (!requester) {
      spdlog::warn("allocation request {} ended ({}), but no requester of {} waits for it", complete.request_id,
                   complete.text, options.node_name);
      return;
    }
    spdlog::info("allocation request {} of {}: {}", complete.request_id, to_string(*requester), complete.text);
    const Status status = server->notify(PMIX_NOTIFY_ALLOC_COMPLETE,
                                         Payload{{PMIX_ALLOC_REQ_ID, complete.request_id},
                                                 {PMIX_ALLOC_ID, std::to_string(complete.resize_id)},
                                                 {pmix::kAllocOutcome, std::string(to_string(complete.outcome))},
                                                 {PMIX_EVENT_TEXT_MESSAGE, complete.text}},
                                         PMIX_RANGE_CUSTOM, {*requester});
    if (!status.ok())
      spdlog::error("could not tell {} that allocation request {} ended: {}", to_string(*requester),
                    complete.request_id, status.text);
  }

  /// A PMIx_Job_control the controller accepted: the signal to the rank of this node whose
  /// process the daemon watches as the pid named.
  void signal_rank(const protocol::SignalRank& order) {
    std::lock_guard lock(mutex);
    for (auto& [name, watched_rank] : watched) {
      if (watched_rank.pid != order.pid) continue;
      if (::kill(order.pid, order.signal) != 0) {
        spdlog::warn("could not send signal {} to rank {} (pid {}): {}", order.signal, order.rank, order.pid,
                     std::strerror(errno));
        return;
      }
      if (order.signal == SIGTERM || order.signal == SIGKILL) watched_rank.signalled = order.signal;
      spdlog::info("sent signal {} to rank {} ({}, pid {}): {}", order.signal, order.rank, name, order.pid,
                   order.reason);
      return;
    }
    spdlog::warn("signal {} for rank {} (pid {}) not sent: no rank of {} runs as that process", order.signal,
                 order.rank, order.pid, options.node_name);
  }

  /// Whether a stop signal reaches the daemon within ControllerLink::kStopSignalGrace.
  bool stop_signal_within_grace() const {
    if (!options.stop_signal_arrived) return false;
    const auto deadline = std::chrono::steady_clock::now() + ControllerLink::kStopSignalGrace;
    for (;;) {
      if (options.stop_signal_arrived()) return true;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  void report_notify(pmix_status_t code, const Payload& payload) {
    {
      std::lock_guard lock(mutex);
      if (!rank_attached_once) {
        spdlog::info("no rank attached yet: {} waits for the first", pmix::event_name(code));
        held.emplace_back(code, payload);
        return;
      }
    }
    notify_ranks(code, payload);
  }

  /// The job's namespace as the PMIx queries name it (its id); "" before the first JobView.
  std::string job_nspace() const {
    const auto view = server->job_view();
    return view ? view->job : std::string();
  }

  void notify_standard(const StandardEvent& event) {
    const Status status = server->notify_standard(event);
    if (!status.ok()) {
      spdlog::error("could not deliver {} to the tools and clients of {}: {}",
                    standard_event_constant(event.code), options.node_name, status.text);
    }
  }

  void notify_ranks(pmix_status_t code, const Payload& payload) {
    const Status status = server->notify(code, payload, PMIX_RANGE_LOCAL);
    if (!status.ok())
      spdlog::error("could not deliver {} to the ranks: {}", pmix::event_name(code), status.text);
  }
};

ControllerLink::ControllerLink(PmixServer& server, Options options,
                               std::function<void(const std::string&)> on_stop)
    : state_(std::make_shared<State>()) {
  state_->server = &server;
  state_->options = std::move(options);
  state_->loss_limits = loss_limits_for(state_->options);
  state_->on_stop = std::move(on_stop);
  std::weak_ptr<State> weak = state_;
  state_->self = weak;

  transport::Handlers handlers;
  handlers.on_notification = [weak](const transport::Incoming& in) {
    if (auto s = weak.lock()) s->deliver(in.envelope.message);
  };
  handlers.on_request = [weak](const transport::Incoming& in, transport::Responder responder) {
    if (auto s = weak.lock()) s->deliver(in.envelope.message);
    responder.reply(protocol::Ack{protocol::AckCode::ok, ""});
  };
  transport::ClientOptions client_options;
  client_options.endpoint = state_->options.endpoint;
  client_options.curve = state_->options.curve;
  client_options.log = log_sink;
  client_options.heartbeat_timeout = state_->options.heartbeat_timeout;
  client_options.heartbeat_interval = transport::heartbeat_interval_for(state_->options.heartbeat_timeout);
  handlers.on_connection = [weak](bool connected) {
    if (auto s = weak.lock()) s->connection_changed(connected);
  };
  state_->client = std::make_unique<transport::Client>(client_options, handlers);
  {
    transport::Client* client = state_->client.get();
    CollectiveRelay::Senders senders;
    senders.contribute = [client](const protocol::FenceContribution& c) { client->notify(c); };
    senders.ask = [client](const protocol::ModexRequest& r) { client->notify(r); };
    senders.answer = [client](const protocol::ModexReply& r) { client->notify(r); };
    state_->collectives = std::make_unique<CollectiveRelay>(std::move(senders));
  }

  server.on_allocate([weak](const AllocationRequest& request, AllocationResponder responder) {
    auto s = weak.lock();
    if (!s) return;  // the responder answers "the daemon gave no answer"
    protocol::AllocationRequest forward;
    forward.directive = request.directive == PMIX_ALLOC_EXTEND    ? protocol::AllocationDirective::extend
                        : request.directive == PMIX_ALLOC_RELEASE ? protocol::AllocationDirective::release
                                                                  : protocol::AllocationDirective::cancel;
    forward.node_count = forward.directive == protocol::AllocationDirective::cancel
                             ? 0
                             : static_cast<std::uint32_t>(request.num_nodes);
    forward.requesting_rank = request.requester.rank;
    forward.request_id = request.request_id;
    auto shared = std::make_shared<AllocationResponder>(std::move(responder));
    const bool starts_resize = forward.directive != protocol::AllocationDirective::cancel;
    s->client->request_async(
        forward, s->options.request_timeout,
        [weak, shared, starts_resize, request](transport::RequestResult result) {
          if (!result.ok()) {
            shared->reply(PMIX_ERR_TIMEOUT, "the controller did not answer: " + result.text);
            return;
          }
          const auto* ack = std::get_if<protocol::Ack>(&result.reply);
          if (ack == nullptr) {
            shared->reply(PMIX_ERR_BAD_PARAM, "the controller answered with a " +
                                                  std::string(protocol::to_string(protocol::type_of(result.reply))));
          } else if (ack->code == protocol::AckCode::ok) {
            // Taken: the resize is in progress; its end reaches the requester as an event.
            if (auto link = weak.lock(); link && starts_resize) {
              std::lock_guard lock(link->mutex);
              link->allocation_requesters[request.request_id] = request.requester;
            }
            shared->reply(PMIX_SUCCESS, ack->text);
          } else {
            shared->reply(PMIX_ERR_NOT_AVAILABLE, "the controller refused: " + ack->text);
          }
        });
  });
  server.on_job_control([weak](const JobControlRequest& order, AllocationResponder responder) {
    auto s = weak.lock();
    if (!s) return;
    protocol::JobControlRequest forward;
    forward.action = order.action;
    forward.signal = order.action == protocol::JobControlAction::signal ? order.signal : 0;
    forward.target_rank = order.target_rank;
    forward.requester = to_string(order.requester);
    auto shared = std::make_shared<AllocationResponder>(std::move(responder));
    s->client->request_async(forward, s->options.request_timeout, [shared](transport::RequestResult result) {
      if (!result.ok()) {
        shared->reply(PMIX_ERR_TIMEOUT, "the controller did not answer: " + result.text);
        return;
      }
      const auto* ack = std::get_if<protocol::Ack>(&result.reply);
      if (ack == nullptr)
        shared->reply(PMIX_ERR_BAD_PARAM, "the controller answered with a " +
                                              std::string(protocol::to_string(protocol::type_of(result.reply))));
      else if (ack->code == protocol::AckCode::ok)
        shared->reply(PMIX_SUCCESS, ack->text);
      else
        shared->reply(PMIX_ERR_BAD_PARAM, "the controller refused: " + ack->text);
    });
  });
  server.on_rank_attached([weak](const ProcId& proc, pid_t pid) {
    auto s = weak.lock();
    if (!s) return;
    std::vector<std::pair<pmix_status_t, Payload>> held;
    {
      std::lock_guard lock(s->mutex);
      s->watched[to_string(proc)] = WatchedRank{pid, 0, false, false, 0, std::nullopt};
      s->rank_attached_once = true;
      held.swap(s->held);
    }
    // In the order they came; the rank registered its event handlers before its attach notice.
    for (const auto& [code, payload] : held) s->notify_ranks(code, payload);
  });
  server.on_client_connected([weak](const ProcId& proc) {
    if (auto s = weak.lock()) s->client_connected(proc);
  });
  server.on_rank_detached([weak](const ProcId& proc) {
    auto s = weak.lock();
    if (!s) return;
    std::lock_guard lock(s->mutex);
    if (auto it = s->watched.find(to_string(proc)); it != s->watched.end()) it->second.detached = true;
  });
  server.on_metrics([weak](const ReceivedMetrics& m) {
    auto s = weak.lock();
    if (!s) return;
    protocol::NodeMetrics report{s->options.node_name, m.metrics, static_cast<std::uint32_t>(m.rank), 0};
    {
      std::lock_guard lock(s->mutex);
      if (auto it = s->watched.find(to_string(m.source)); it != s->watched.end()) {
        it->second.rank = static_cast<std::uint32_t>(m.rank);
        report.pid = it->second.pid;
        it->second.last_report = report;
      }
    }
    s->client->notify(report);
  });
  server.on_resize_report([weak](const ReceivedResizeReport& r) {
    auto s = weak.lock();
    if (!s) return;
    if (r.report.outcome == protocol::ResizeOutcome::left) {
      std::lock_guard lock(s->mutex);
      if (auto it = s->watched.find(to_string(r.source)); it != s->watched.end())
        it->second.left = true;
    }
    s->client->notify(protocol::ResizeAck{r.report});
  });

  state_->watcher = std::thread([s = state_.get()] { s->watch(); });

  protocol::Hello hello{state_->options.node_name, static_cast<std::int32_t>(::getpid()),
                        protocol::kProtocolVersion};
  state_->client->request_async(hello, std::chrono::seconds(30),
                                [weak](transport::RequestResult result) {
                                  auto s = weak.lock();
                                  if (!s) return;
                                  std::string why;
                                  if (!result.ok()) {
                                    why = result.text;
                                  } else if (const auto* ack =
                                                 std::get_if<protocol::Ack>(&result.reply);
                                             ack == nullptr || ack->code != protocol::AckCode::ok) {
                                    why = ack ? "the controller refused: " + ack->text
                                              : "the controller answered hello with no ack";
                                  }
                                  std::lock_guard lock(s->mutex);
                                  s->registration = why;
                                  s->changed.notify_all();
                                });
}

ControllerLink::~ControllerLink() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->changed.notify_all();
  if (state_->watcher.joinable()) state_->watcher.join();
  // Ranks started here that still run are stopped (SIGTERM, then SIGKILL) and reaped.
  state_->stopping_ranks = true;
  std::unique_ptr<LocalLauncher> launcher;
  {
    std::lock_guard lock(state_->mutex);
    launcher = std::move(state_->launcher);
  }
  launcher.reset();
  // Before the transport stops: pending fences and modex requests are answered (UNREACH).
  std::shared_ptr<CollectiveRelay> collectives;
  {
    std::lock_guard lock(state_->mutex);
    collectives = std::move(state_->collectives);
  }
  collectives.reset();
  state_->server->on_rank_attached(nullptr);
  state_->server->on_rank_detached(nullptr);
  state_->server->on_allocate(nullptr);
  state_->server->on_job_control(nullptr);
  state_->server->on_metrics(nullptr);
  state_->server->on_resize_report(nullptr);
  state_->client->stop();
}

bool ControllerLink::controller_gone_while_ranks_run() const {
  std::lock_guard lock(state_->mutex);
  if (!state_->controller_lost_since || state_->stopped_orphaned) return false;
  runtime::ControllerLossFacts facts = state_->controller_loss_facts();
  facts.kept_for_takeover = state_->takeover_verdict(facts).keep_ranks;
  return runtime::on_controller_loss(facts, state_->loss_limits) == runtime::ControllerLossAction::keep_ranks;
}

void ControllerLink::slurmctld_said(const runtime::FirstNodeLossFacts* job, std::optional<double> slurmd_timeout_seconds) {
  std::lock_guard lock(state_->mutex);
  if (!state_->controller_lost_since) return;  // back meanwhile: the word is of a loss that ended
  state_->slurmctld_asked = true;
  if (job != nullptr)
    state_->slurmctld_word = *job;
  else
    state_->slurmctld_word.reset();
  if (slurmd_timeout_seconds) state_->slurmd_timeout_seconds = slurmd_timeout_seconds;
}

bool ControllerLink::stopped_without_controller() const {
  std::lock_guard lock(state_->mutex);
  return state_->stopped_orphaned;
}

bool ControllerLink::wait_registered(std::chrono::milliseconds timeout, std::string* why) {
  std::unique_lock lock(state_->mutex);
  state_->changed.wait_for(lock, timeout, [&] { return state_->registration.has_value(); });
  if (!state_->registration) {
    if (why) *why = "no answer to hello from the controller at " + state_->options.endpoint;
    return false;
  }
  if (why) *why = *state_->registration;
  return state_->registration->empty();
}

}  // namespace bellows::daemon
