// `bellows run --attach JOB`: a new controller takes a running job over after its controller
// died (docs/controller.md, "Taking a job over"). It reads the job record (job.json) and the
// event log of the job's directory, takes the job's nodes back from the local pool, binds the
// job's endpoint again, and waits for the daemons, which keep reconnecting while their ranks
// run, to say hello again. From then on it is the job's controller in full; the job's first
// rank is not its child, so it learns how the job ended from the first node's daemon.
// A Slurm job is taken over from inside its allocation, on its first node (the batch host,
// whose address the daemons reconnect to): the Slurm backend's books (the companion
// allocations the job spans) are rebuilt from the job record and checked against slurmctld.

#include <bellows/controller/controller_lock.hpp>
#include <bellows/controller/controller_service.hpp>
#include <bellows/controller/job_record.hpp>
#include <bellows/controller/local_node_pool.hpp>
#include <bellows/controller/local_resource_manager.hpp>
#if BELLOWS_HAVE_SLURM_BACKEND
#include <bellows/controller/slurm_resource_manager.hpp>
#endif
#include <bellows/policy/load.hpp>
#include <bellows/protocol/job_directory.hpp>
#include <bellows/transport/controller_contact.hpp>
#include <bellows/transport/socket_directory.hpp>

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "controller_process.hpp"
#include "job_dir.hpp"
#include "timeline.hpp"

namespace bellows::cli {
namespace {

namespace fs = std::filesystem;
namespace ctl = bellows::controller;
using Steady = std::chrono::steady_clock;

/// How long the daemons of a job taken over have to say hello again before their nodes count
/// as lost: their reconnection is every 0.1 s (ZeroMQ), so this bound is for a loaded host.
constexpr std::chrono::seconds kReturnWindow{10};

std::atomic<int> g_attach_stop{0};
void on_attach_stop(int sig) { g_attach_stop.store(sig); }

/// Whether process `pid` runs (it exists and is no zombie).
bool process_runs(std::int32_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

/// "" when job `record` may be taken over, else why not.
std::string takeover_problem(const ctl::JobRecord& record) {
  if (!record.ended_at.empty())
    return "job " + record.job + " ended at " + record.ended_at + " (" + record.end + "): nothing to attach to";
  if (record.backend != "local") return {};  // its daemons run on other hosts: Slurm says whether it runs
  std::string daemons;
  bool any_runs = false;
  for (const auto& [node, pid] : record.daemon_pids) {
    daemons += (daemons.empty() ? "" : ", ") + node + " pid " + std::to_string(pid);
    any_runs = any_runs || process_runs(pid);
  }
  if (!record.daemon_pids.empty() && !any_runs)
    return "job " + record.job + " has ended: none of its daemons runs (" + daemons +
           "); its controller died before it could record the end";
  return {};
}

/// The command that takes Slurm job `record` over where that can work.
std::string attach_command_for(const ctl::JobRecord& record) {
  return "srun --jobid " + record.job + " --overlap -N1 -w " + record.nodes.front() + " bellows run --attach " +
         record.job;
}

/// "" when this host has the address of tcp endpoint `endpoint` (a socket can be bound to
/// it), else why not.
std::string address_problem(const std::string& endpoint) {
  const std::string prefix = "tcp://";
  const auto colon = endpoint.rfind(':');
  if (!endpoint.starts_with(prefix) || colon == std::string::npos || colon < prefix.size())
    return "which is no tcp endpoint";
  std::string host = endpoint.substr(prefix.size(), colon - prefix.size());
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0)
    return std::string("whose address does not resolve here (") + ::gai_strerror(rc) + ")";
  std::string problem = "an address this host does not have";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    const int error = errno;
    ::close(fd);
    if (bound) {
      problem.clear();
      break;
    }
    if (error != EADDRNOTAVAIL) problem = std::string("which this host cannot bind (") + std::strerror(error) + ")";
  }
  ::freeaddrinfo(found);
  return problem;
}

/// "" when this process may take Slurm job `record` over: it runs inside the job's allocation
/// (SLURM_JOB_ID is the job's) and, unless the job's first node is lost (`endpoint_host_lost`),
/// on the host whose address the job's daemons reconnect to (the job's first node); else why
/// not, with the command that works.
std::string slurm_attach_problem(const ctl::JobRecord& record, const std::string& endpoint, bool endpoint_host_lost) {
  const char* inside = std::getenv("SLURM_JOB_ID");
  const std::string where = "run it inside the job's allocation on its first node " + record.nodes.front() +
                            ": " + attach_command_for(record);
  if (inside == nullptr || *inside == '\0')
    return "job " + record.job + " runs on Slurm and this process is outside its allocation (no SLURM_JOB_ID): " +
           where;
  if (record.job != inside)
    return "job " + record.job + " runs on Slurm and this process is inside another job's allocation (SLURM_JOB_ID=" +
           inside + "): " + where;
  if (endpoint_host_lost) return {};
  if (const std::string problem = address_problem(endpoint); !problem.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "this host");
    return "the daemons of job " + record.job + " reconnect to " + endpoint + ", " + problem + " (" + host +
           "): " + where;
  }
  return {};
}

/// The resource manager and the daemons' launcher of the job taken over, and on the local
/// backend the host's pool its nodes are taken back from.
struct AttachBackend {
  std::unique_ptr<ctl::LocalNodePool> pool;
  std::unique_ptr<ctl::ResourceManager> rm;
  std::unique_ptr<ctl::NodeLauncher> launcher;
  /// Slurm: the job's first node, its batch host, when Slurm took it out of the job as it
  /// failed (""  otherwise); then this controller ends the Slurm job itself (complete_job).
  std::string first_node_lost;
  std::function<ctl::RmStatus(int exit_status)> complete_job;
};

/// The Slurm backend of job `record`, its books rebuilt from the record; std::nullopt (having
/// said why) when Slurm's view of the job does not match it.
std::optional<AttachBackend> slurm_backend(const ctl::JobRecord& record, const fs::path& job_dir, bool verbose,
                                           const std::optional<policy::Policy>& policy) {
#if BELLOWS_HAVE_SLURM_BACKEND
  AttachBackend backend;
  // The job grows as its first controller was told to (--expand-strategy), not only as the
  // site's settings choose.
  ctl::SlurmOptions slurm_options;
  if (!ctl::parse_expand_strategy(record.expand_strategy, slurm_options.expand_strategy)) {
    std::fprintf(stderr, "bellows run: job %s: unknown expand strategy \"%s\" in its record\n", record.job.c_str(),
                 record.expand_strategy.c_str());
    return std::nullopt;
  }
  auto rm = std::make_unique<ctl::SlurmResourceManager>(slurm_options);
  if (const ctl::RmStatus taken = rm->take_over(record.job, record.nodes, record.companions, &backend.first_node_lost);
      !taken.ok()) {
    std::fprintf(stderr, "bellows run: cannot take Slurm job %s over: %s\n", record.job.c_str(), taken.text.c_str());
    return std::nullopt;
  }
  std::fprintf(stderr, "bellows: job %s grows by %s\n", record.job.c_str(),
               ctl::describe_growth(rm->expand_strategy()).c_str());
  backend.launcher = slurm_daemon_launcher(record.job, job_dir, verbose, policy,
                                           [slurm = rm.get(), job = record.job](const std::string& node) {
                                             return slurm->slurm_job_of(job, node);
                                           });
  backend.complete_job = [slurm = rm.get(), job = record.job](int exit_status) {
    return slurm->complete_job(job, exit_status);
  };
  backend.rm = std::move(rm);
  return backend;
#else
  (void)job_dir, (void)verbose, (void)policy;
  std::fprintf(stderr, "bellows run: job %s runs on Slurm, and the Slurm backend is not available in this build "
               "(libslurm was not found)\n", record.job.c_str());
  return std::nullopt;
#endif
}

/// The job's ranks on this host, each by the pid its daemon reported: SIGTERM to each (a stop
/// signal to the controller, or a PMIx_Job_control that terminates the job). On the local
/// backend every rank runs on this host; on Slurm only the first node's (the job ends with it,
/// as under the `bellows run` that started it): a pid of another host means nothing here.
void stop_ranks(const ctl::ControllerService& service, const std::string& first_node, bool slurm) {
  for (const auto& process : service.status()["processes"]) {
    if (slurm && process["node"] != first_node) continue;
    if (process["pid"].is_number_integer()) ::kill(process["pid"].get<int>(), SIGTERM);
  }
}

}  // namespace

int attach_job(const std::string& job_name, bool verbose, bool quiet) {
  const auto began = Steady::now();
  const fs::path job_dir = find_job_dir(job_name);
  const protocol::JobDirectory layout{job_dir};
  std::error_code ec;
  if (!fs::exists(layout.job_record(), ec)) {
    std::fprintf(stderr, "bellows run: %s has no %s: no bellows run of this version controlled that job\n",
                 job_dir.c_str(), layout.job_record().filename().c_str());
    return exit_failed;
  }
  const ctl::JobRecord record = ctl::read_job_record(layout.job_record());
  if (const std::string problem = takeover_problem(record); !problem.empty()) {
    std::fprintf(stderr, "bellows run: %s\n", problem.c_str());
    return exit_failed;
  }
  // A controller that still runs holds the lock: refused here, before anything changes.
  { const ctl::ControllerLock probe(job_dir); }

  std::optional<policy::Policy> policy;
  if (!record.policy_text.empty()) {
    auto loaded = policy::parse_policy(record.policy_text, record.policy_file);
    if (!loaded.ok()) {
      for (const auto& d : loaded.diagnostics) std::fprintf(stderr, "%s\n", policy::format(d).c_str());
      return exit_bad_input;
    }
    policy = std::move(loaded.policy);
    policy->nodes.min = static_cast<int>(record.min_nodes);
    policy->nodes.max = static_cast<int>(record.max_nodes);
  }
  const bool slurm = record.backend == "slurm";
  const std::string endpoint = slurm ? transport::read_controller_contact(job_dir).endpoint : std::string();
  if (slurm) {
    // Inside the job's allocation first: Slurm's view of the job is asked for after that.
    if (const std::string problem = slurm_attach_problem(record, endpoint, true); !problem.empty()) {
      std::fprintf(stderr, "bellows run: %s\n", problem.c_str());
      return exit_failed;
    }
  }
  std::signal(SIGINT, on_attach_stop);
  std::signal(SIGTERM, on_attach_stop);

  ctl::SystemClock clock;
  AttachBackend backend;
  if (slurm) {
    auto built = slurm_backend(record, job_dir, verbose, policy);
    if (!built) return exit_failed;
    backend = std::move(*built);
    // The daemons reconnect to the first node's address, unless that node is lost: then this
    // controller listens on its own host and publishes its endpoint, and they follow it.
    if (const std::string problem = slurm_attach_problem(record, endpoint, !backend.first_node_lost.empty());
        !problem.empty()) {
      std::fprintf(stderr, "bellows run: %s\n", problem.c_str());
      return exit_failed;
    }
  } else {
    // The nodes of a job whose controller was killed went back to the pool: the job takes
    // them back, unless another job took one meanwhile.
    backend.pool = std::make_unique<ctl::LocalNodePool>(local_pool_file(), record.max_nodes);
    if (const auto taken = backend.pool->take_over(record.job, record.nodes); !taken.ok()) {
      std::fprintf(stderr, "bellows run: %s\n", taken.text.c_str());
      return exit_failed;
    }
    backend.rm = std::make_unique<ctl::LocalResourceManager>(*backend.pool, clock);
    backend.launcher = local_daemon_launcher(job_dir, verbose, policy);
  }
  struct GiveBack {
    ctl::LocalNodePool* pool;
    std::string job;
    ~GiveBack() {
      if (pool == nullptr) return;
      try {
        pool->release_all(job);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bellows run: %s\n", e.what());
      }
    }
  } give_back{backend.pool.get(), record.job};

  // The ipc socket's directory, made again where the controller that died had it.
  const transport::SocketDirectory sockets(record.job, job_dir);

  ctl::ControllerOptions options;
  options.job = record.job;
  options.backend = record.backend;
  options.job_dir = job_dir;
  options.nodes = record.nodes;
  std::erase(options.nodes, backend.first_node_lost);
  options.min_nodes = record.min_nodes;
  options.max_nodes = record.max_nodes;
  options.policy = policy;
  options.policy_file = record.policy_file;
  options.policy_text = record.policy_text;
  options.expand_strategy = record.expand_strategy;
  options.rank_launch = {record.rank_command, record.rank_environment, record.pmix_native};
  const bool first_node_lost = !backend.first_node_lost.empty();
  std::string who = "bellows run --attach, pid " + std::to_string(::getpid());
  if (first_node_lost) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "this host");
    who += " on " + std::string(host) + ", after the job's first node " + backend.first_node_lost +
           " (its batch host) was lost: Slurm took it out of job " + record.job + " (no-kill)";
  }
  // Every rank runs on a node of its own: the first node's is gone with it.
  const unsigned ranks = first_node_lost && record.ranks > 0 ? record.ranks - 1 : record.ranks;
  options.attach = ctl::AttachOptions{ranks,
                                      kReturnWindow,
                                      who,
                                      record.pmix_job_map,
                                      record.pmix_rank_nodes,
                                      first_node_lost ? 0 : record.first_rank_pid,
                                      first_node_lost ? transport::this_host_tcp_endpoint() : std::string(),
                                      std::string(),
                                      {}};
  if (first_node_lost) {
    // The first node holds the job's first rank, rank 0 for as long as it runs (a rebuild
    // numbers the survivors in their old order, a grow adds after the last, a shrink never
    // takes the first node); it left the job map when that rank was lost before. Once the
    // survivors are back, the new controller tells them it is lost unless they renumbered.
    options.attach->lost_first_node = backend.first_node_lost;
    if (record.pmix_job_map.contains(backend.first_node_lost)) options.attach->lost_first_node_ranks = {0};
  }
  ctl::ControllerService service(options, *backend.rm, *backend.launcher, clock);
  std::string nodes;
  for (const auto& node : options.nodes) nodes += (nodes.empty() ? "" : ", ") + node;
  std::fprintf(stderr, "bellows: taking job %s over (nodes %s, files in %s); waiting for its daemons\n",
               record.job.c_str(), nodes.c_str(), job_dir.c_str());

  // Every daemon back, then every rank known (their reports sent again), or the bound passed.
  std::optional<double> daemons_back_s, ranks_known_s;
  const auto seconds_since = [](Steady::time_point start) {
    return std::chrono::duration<double>(Steady::now() - start).count();
  };
  const auto give_up = Steady::now() + kReturnWindow + std::chrono::seconds(2);
  while (!ranks_known_s && Steady::now() < give_up && g_attach_stop.load() == 0) {
    service.step(std::chrono::milliseconds(10));
    if (!daemons_back_s && service.daemons_registered()) daemons_back_s = seconds_since(began);
    if (daemons_back_s && service.ranks_known()) ranks_known_s = seconds_since(began);
    if (!service.awaiting_daemons() && !service.daemons_registered() && service.daemons_connected() == 0) break;
  }
  if (service.daemons_connected() == 0) {
    std::fprintf(stderr, "bellows run: no daemon of job %s came back within %lld s of the takeover (%s): "
                 "has the job ended?\n", record.job.c_str(), static_cast<long long>(kReturnWindow.count()),
                 nodes.c_str());
    service.note_end("no daemon came back to the controller that took the job over", exit_failed);
    service.shutdown();
    return exit_failed;
  }
  if (ranks_known_s) {
    std::fprintf(stderr, "bellows: took job %s over: every daemon back in %.3f s, every rank known in %.3f s\n",
                 record.job.c_str(), *daemons_back_s, *ranks_known_s);
  } else {
    std::fprintf(stderr, "bellows: took job %s over; %zu of %zu daemons back, not every rank known yet\n",
                 record.job.c_str(), service.daemons_connected(), options.nodes.size());
  }

  std::string last_line;
  auto next_progress = Steady::now();
  bool stopping = false;
  // A PMIx-native job's first rank is watched by no daemon (`bellows run` started it, its
  // daemon only registered it): its end is its process's, which this process is not the
  // parent of, so it sees that it ended but not how.
  const bool watch_first_rank = record.pmix_native && record.first_rank_pid > 0;
  bool first_rank_gone = false;
  const auto first_rank_ended = [&] {
    if (watch_first_rank && !first_rank_gone) first_rank_gone = !process_runs(record.first_rank_pid);
    return service.first_rank_end().has_value() || first_rank_gone;
  };
  // The job ends when the first node's rank ended and no other rank runs (its daemon says so),
  // or when no daemon is left.
  while (!(first_rank_ended() && !service.other_ranks_running()) && service.daemons_connected() > 0) {
    service.step(std::chrono::milliseconds(50));
    if (const int sig = g_attach_stop.load(); sig != 0 && !stopping) {
      std::fprintf(stderr, "bellows: signal %d: stopping the job\n", sig);
      stop_ranks(service, options.nodes.front(), slurm);
      stopping = true;
    } else if (const auto& why = service.termination_requested(); why && !stopping) {
      std::fprintf(stderr, "bellows: %s: stopping the job\n", why->c_str());
      stop_ranks(service, options.nodes.front(), slurm);
      stopping = true;
    }
    if (!quiet && Steady::now() >= next_progress) {
      const std::string line = progress_line(service);
      if (line != last_line) std::fprintf(stderr, "%s\n", line.c_str());
      last_line = line;
      next_progress = Steady::now() + std::chrono::seconds(1);
    }
  }
  for (int i = 0; i < 5; ++i) service.step(std::chrono::milliseconds(20));
  int status = exit_failed;
  std::string how = "every daemon of the job went away before its first rank's end was reported";
  if (const auto& end = service.first_rank_end()) {
    if (!end->crashed()) {
      status = exit_ok;
      how = "its first rank ended after leaving the job (exit status 0)";
    } else if (service.recovered_from_failures()) {
      status = exit_ok;
      how = "its first rank was lost and the job recovered without it";
    } else {
      how = "its first rank (pid " + std::to_string(end->pid) + ") ended without leaving the job";
    }
  } else if (first_rank_gone) {
    // No daemon reported a death: the job's PMIx-native ranks ended as they were told to.
    status = service.recovered_from_failures() ? exit_ok : exit_failed;
    how = "its first rank's process (pid " + std::to_string(record.first_rank_pid) +
          ") ended (a controller that took the job over is not its parent and cannot read its exit status)";
  }
  const auto final_status = service.status();
  service.note_end(how, status);
  service.shutdown();
  std::fprintf(stderr, "\n");
  print_timeline(stderr, ctl::read_event_log(layout.event_log()), MessageLogLines::counted);
  std::fprintf(stderr, "bellows: job %s ended on %zu node(s): %s; events: bellows events %s\n", record.job.c_str(),
               final_status["nodes"].size(), how.c_str(), record.job.c_str());
  if (first_node_lost && backend.complete_job) {
    // The batch script died with the first node: nothing else ends the Slurm job before its
    // time limit. Slurm then ends what runs in it, this process's step included: said first.
    std::fprintf(stderr, "bellows: job %s: its batch script died with %s; this controller ends Slurm job %s "
                 "with exit status %d\n", record.job.c_str(), backend.first_node_lost.c_str(), record.job.c_str(),
                 status);
    std::fflush(stderr);
    if (const ctl::RmStatus ended = backend.complete_job(status); !ended.ok()) {
      std::fprintf(stderr, "bellows run: %s\n", ended.text.c_str());
      return exit_failed;
    }
  }
  return status;
}

}  // namespace bellows::cli
