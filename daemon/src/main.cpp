// bellowsd: the Bellows daemon of one node. It is the PMIx server the ranks of its node attach
// to. With --controller (or --job-dir, which names the controller's endpoint and, for tcp, its
// key) it forwards their allocation requests, metrics and resize reports to
// the job's controller and delivers the controller's decisions to them; without, it refuses
// allocation requests and logs metrics. Stops cleanly on SIGTERM, SIGINT or the controller's
// Stop.

#include <bellows/daemon/controller_link.hpp>
#include <bellows/daemon/pmix_server.hpp>
#include <bellows/daemon/slurm_orphan.hpp>
#include <bellows/daemon/stop_signals.hpp>
#include <bellows/protocol/pmix_events.hpp>
#include <bellows/transport/controller_contact.hpp>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <memory>
#include <optional>
#include <unistd.h>
#include <cstdlib>
#include <string>
#include <thread>

namespace {
/// Set once the main thread took SIGTERM or SIGINT (ControllerLink::Options::stop_signal_arrived).
std::atomic<bool> stop_signal_taken{false};

/// Who sent a stop signal, for the log: "the daemon itself", or "pid P (COMMAND)".
std::string sender_of(const siginfo_t& info) {
  if (info.si_code != SI_USER && info.si_code != SI_QUEUE) return "the kernel or a terminal";
  if (info.si_pid == ::getpid()) return "the daemon itself";
  std::ifstream comm("/proc/" + std::to_string(info.si_pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return "pid " + std::to_string(info.si_pid) + (name.empty() ? std::string(" (gone)") : " (" + name + ")");
}
}  // namespace

int main(int argc, char** argv) {
  namespace d = bellows::daemon;
  CLI::App app{"bellowsd: the Bellows daemon of one node (PMIx server for its ranks)", "bellowsd"};
  d::PmixServer::Options options;
  std::string tmpdir;
  std::string uri_file;
  std::string controller;
  bool verbose = false;
  bool nodelay = true;
  app.add_option("--tmpdir", tmpdir,
                 "private directory for PMIx's rendezvous files (emptied of PMIx files at start)")
      ->required();
  app.add_option("--uri-file", uri_file, "file to write the server URI to (BELLOWS_DAEMON_URI)");
  app.add_option("--node-name", options.node_name, "this node's name (default: the host name)");
  std::string job_dir;
  auto* controller_option =
      app.add_option("--controller", controller,
                     "the job controller's endpoint (ipc://DIR/controller.sock) to register with");
  app.add_option("--job-dir", job_dir,
                 "the job directory: register with the controller it names (controller.endpoint, "
                 "and controller.key for tcp://)")
      ->excludes(controller_option);
  app.add_flag("--verbose,-v", verbose, "log every request, metrics message and connection");
  app.add_option("--tcp-nodelay", nodelay,
                 "set TCP_NODELAY on rank connections (false only to measure its effect)")
      ->default_val(true);
  double heartbeat_timeout_s = 5.0;
  app.add_option("--heartbeat-timeout", heartbeat_timeout_s,
                 "seconds the connection to the controller may stay silent before it counts as "
                 "lost (the job's recovery.heartbeat_timeout)")
      ->check(CLI::Range(0.5, 60.0))
      ->default_val(5.0);
  std::optional<double> takeover_grace_s;
  app.add_option("--takeover-grace", takeover_grace_s,
                 "under Slurm, seconds this node's ranks are kept once the controller's host has "
                 "answered nothing for the heartbeat timeout, while slurmctld has not set the job's "
                 "batch host DOWN (a takeover may still come); default: 1.5 times Slurm's SlurmdTimeout")
      ->check(CLI::Range(0.0, 86400.0))
      ->envname("BELLOWS_TAKEOVER_GRACE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // a bad option: status 2, as the examples
  }

  auto logger = spdlog::stderr_logger_mt("bellowsd");
  logger->set_pattern("bellowsd: %l: %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);

  // SIGTERM and SIGINT are taken by sigwait below; blocked before any thread starts, so no
  // thread (PMIx's included) receives them.
  const sigset_t stop_signals = d::stop_signals();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  options.tmpdir = tmpdir;
  options.uri_file = uri_file;
  options.tcp_nodelay = nodelay;
  std::optional<std::chrono::steady_clock::time_point> stopping_since;
  try {
    d::PmixServer server(options);
    // Without a controller, allocation requests are refused (PMIX_ERR_NOT_SUPPORTED) and
    // logged, and metrics are logged.
    server.on_metrics([](const d::ReceivedMetrics& m) {
      spdlog::debug(
          "metrics from {}: rank {} iteration {} ready {} busy {:.3f} steals {}/{} failed, "
          "iteration {:.6f} s",
          d::to_string(m.source), m.rank, m.metrics.iteration, m.metrics.ready_tasks,
          m.metrics.busy_fraction, m.metrics.steals_failed, m.metrics.steals_sent,
          m.metrics.iteration_seconds);
    });
    server.on_tool_connected(
        [](const d::ProcId& tool) { spdlog::debug("tool {} attached", d::to_string(tool)); });
    std::unique_ptr<d::ControllerLink> link;
    std::optional<bellows::transport::CurveKeyPair> curve;
    if (!job_dir.empty()) {
      auto contact = bellows::transport::read_controller_contact(job_dir);
      controller = contact.endpoint;
      curve = std::move(contact.curve);
    }
    if (!controller.empty()) {
      d::ControllerLink::Options link_options;
      link_options.endpoint = controller;
      link_options.curve = curve;
      link_options.node_name = server.options().node_name;
      link_options.job_dir = job_dir;
      link_options.heartbeat_timeout = std::chrono::milliseconds(std::lround(heartbeat_timeout_s * 1000.0));
      if (takeover_grace_s)
        link_options.takeover_grace = std::chrono::milliseconds(std::llround(*takeover_grace_s * 1000.0));
      link_options.stop_signal_arrived = [] {
        return stop_signal_taken.load() || d::stop_signal_pending();
      };
      link = std::make_unique<d::ControllerLink>(
          server, link_options, [](const std::string&) { ::kill(::getpid(), SIGTERM); });
      std::string why;
      if (!link->wait_registered(std::chrono::seconds(30), &why)) {
        spdlog::error("could not register with the controller at {}: {}", controller, why);
        return 1;
      }
      spdlog::info("registered with the controller at {}", controller);
    }
    spdlog::info("listening at {} (node {}, protocol version {})", server.uri(),
                 server.options().node_name, bellows::protocol::pmix::kProtocolVersion);
    // Under Slurm, a controller gone while this node's ranks run on may have died with the
    // job's first node: one daemon left starts a controller that takes the job over
    // (first_node_takeover.hpp), and the link follows it to its endpoint.
    std::jthread takeover;
    if (link && std::getenv("SLURM_JOB_ID") != nullptr) {
      // Asked once the controller counts as gone, then less and less often (doubling up to
      // every 30 s): slurmctld sets a silent node DOWN only after SlurmdTimeout, and every
      // daemon of the job asks. What slurmctld says also tells the link whether to keep its
      // ranks while the controller's host answers nothing (a takeover may still come), for
      // which it needs SlurmdTimeout unless --takeover-grace is given.
      takeover = std::jthread([&link, node = server.options().node_name,
                               ask_timeout = !takeover_grace_s](const std::stop_token& stop) {
        std::string last_said;
        auto next = std::chrono::steady_clock::now();
        std::chrono::seconds wait{1};
        std::optional<double> slurmd_timeout;
        bool timeout_asked = !ask_timeout;
        while (!stop.stop_requested()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          if (std::chrono::steady_clock::now() < next || !link->controller_gone_while_ranks_run()) continue;
          // Each question ends at once when the daemon stops (its ranks end only after this
          // thread is joined), else within 5 s: a cut-off node's slurmctld never answers.
          const d::TakeoverAttempt attempt = d::start_takeover_if_first_node_lost(node, std::chrono::seconds(5), stop);
          if (attempt.slurmctld_said && !timeout_asked) {
            timeout_asked = true;
            slurmd_timeout = d::slurmd_timeout_seconds(std::chrono::seconds(5), stop);
          }
          if (stop.stop_requested()) return;
          link->slurmctld_said(attempt.slurmctld_said.get(), slurmd_timeout);
          if (attempt.said != last_said) spdlog::info("{}", attempt.said);
          last_said = attempt.said;
          if (attempt.settled) return;
          next = std::chrono::steady_clock::now() + wait;
          wait = std::min(wait * 2, std::chrono::seconds(30));
        }
      });
    }
    siginfo_t taken{};
    int sig = -1;
    while (sig < 0) sig = sigwaitinfo(&stop_signals, &taken);  // -1 only on EINTR
    stop_signal_taken = true;
    stopping_since = std::chrono::steady_clock::now();
    spdlog::info("received signal {} ({}) from {}: stopping", sig, sig == SIGTERM ? "SIGTERM" : "SIGINT",
                 sender_of(taken));
    if (takeover.joinable()) {
      takeover.request_stop();
      takeover.join();
    }
    if (link && link->stopped_without_controller()) {
      link.reset();  // the ranks started here end first
      // Under Slurm, a job whose batch host failed is kept running by Slurm until its time
      // limit, with nothing of Bellows left to end it (slurm_orphan.hpp).
      if (std::getenv("SLURM_JOB_ID") != nullptr)
        spdlog::info("{}", d::end_job_if_batch_host_lost(server.options().node_name, std::chrono::seconds(5)));
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  if (stopping_since)
    spdlog::info("stopped, {:.3f} s after the stop signal",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - *stopping_since).count());
  else
    spdlog::info("stopped");
  return 0;
}
