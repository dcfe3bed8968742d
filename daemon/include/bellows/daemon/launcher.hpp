#pragma once
// Starts the ranks of a job on this node as PMIx clients of the node's PmixServer and watches
// them until they exit.

#include <bellows/daemon/job_map.hpp>
#include <bellows/daemon/payload.hpp>
#include <bellows/daemon/pmix_server.hpp>

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace bellows::daemon {

/// What to start: copies of argv as ranks of the PMIx nspace. Without a job map, nprocs
/// ranks 0..nprocs-1, all on this node; with one, the job's ranks on this node (the map's
/// ranks of the daemon's node), the others running on other nodes.
struct LaunchSpec {
  std::string nspace;
  /// argv[0] is the program (searched in PATH when it has no '/').
  std::vector<std::string> argv;
  std::uint32_t nprocs = 1;
  /// Extra NAME=VALUE entries for the processes' environment.
  std::vector<std::string> env;
  /// The whole job's ranks and nodes (docs/daemon.md, "The job's namespace"); empty: nprocs
  /// ranks on this node.
  JobMap job_map{};
  /// The map's ranks on this node to start; empty: all of them. (A rank that left stays in
  /// the map at its node: a node that rejoins the job has it there too, not to be started.)
  std::vector<std::uint32_t> ranks_to_start{};
  /// The map's ranks that left the job (a number is not given again): registered as ranks that
  /// left, so that the ranks started here read the job without them from their PMIx_Init on
  /// (its size, nodes, maps, their local and node rank: plan_registration's `in_job` is the
  /// map's other ranks). Empty: every rank of the map is in the job.
  std::vector<std::uint32_t> departed{};
};

/// How a watched process ended.
struct ExitStatus {
  ProcId proc;
  pid_t pid = 0;
  /// True when it called exit (code holds the status), false when a signal killed it.
  bool exited = false;
  int code = 0;
  int signal = 0;
  /// "exited with status 3" or "killed by signal 15 (Terminated)".
  [[nodiscard]] std::string describe() const;
};

/// Registers each job with the PMIx server (PMIx_server_register_nspace, one
/// PMIx_server_register_client per rank), prepares each child's environment with
/// PMIx_server_setup_fork, forks and execs, and waits for each child on a thread of its own.
/// The destructor sends SIGTERM to children still running, SIGKILL 2 s later, reaps them and
/// deregisters the jobs. Must not outlive the server.
///
/// Thread safety: all methods may be called from any thread (not PMIx's progress thread); the
/// exit handler runs on the watching thread of the process that ended.
class LocalLauncher {
 public:
  using ExitHandler = std::function<void(const ExitStatus&)>;

  LocalLauncher(PmixServer& server, ExitHandler on_exit);
  ~LocalLauncher();
  LocalLauncher(const LocalLauncher&) = delete;
  LocalLauncher& operator=(const LocalLauncher&) = delete;

  /// Starts the job; returns the pids in rank order. Throws std::invalid_argument for a bad
  /// spec (empty argv or nspace, 0 processes, nspace already launched), PmixError when PMIx
  /// refuses, std::system_error when fork fails. A program that cannot be executed exits
  /// with status 127 (reported through the exit handler). Each process gets SIGKILL when the
  /// thread that called launch() ends (PR_SET_PDEATHSIG), so that a daemon killed outright
  /// leaves no rank running that nobody manages (hydra's proxy ends the rank when its mpiexec
  /// goes): call it from a thread that outlives the processes it starts, as the controller
  /// link's loop thread does (it ends after the launcher stopped every rank).
  std::vector<pid_t> launch(const LaunchSpec& spec);
  /// Registers the spec's job and its one rank on this node as launch() does, without
  /// starting anything: returns the environment that rank must be started with (the PMIx
  /// client variables of PMIx_server_setup_fork, "NAME=VALUE"), for a process another one
  /// starts (the job's first rank, started by `bellows run`). Throws as launch() does, and
  /// std::invalid_argument when the map has not exactly one rank on this node.
  std::vector<std::string> register_only(const LaunchSpec& spec);
  /// Tells the clients of this node that the job `nspace` now has the ranks `members`: defines
  /// the process set `pset_name` with them (PMIx_server_define_process_set), which PMIx 4.2.2
  /// announces to them as PMIX_PROCESS_SET_DEFINE (PMIX_PSET_NAME, PMIX_PSET_MEMBERS) and
  /// answers with a status that means nothing (docs/daemon.md): nothing is reported.
  void announce_members(const std::string& nspace, const std::vector<std::uint32_t>& members,
                        const std::string& pset_name);
  /// Registers the namespace `nspace` again with the job as it is now: the job map `map`
  /// (every rank number given so far, with its node) of which the ranks `in_job` are in the
  /// job (plan_registration). PMIx 4.2.2 replaces the job-level info of a namespace registered
  /// again, and a client's PMIx_Get with PMIX_GET_REFRESH_CACHE then reads the new size, maps
  /// and node info (docs/daemon.md, "The job's namespace"). Returns false, registering
  /// nothing, when the plan is the one registered last.
  /// Throws std::invalid_argument when `nspace` was not registered here or the map cannot be
  /// registered by this node (plan_registration's text), PmixError when PMIx refuses.
  bool update_job(const std::string& nspace, const JobMap& map, const std::vector<std::uint32_t>& in_job);
  /// Sends sig to a process this launcher started and that still runs; false otherwise.
  bool signal(pid_t pid, int sig);
  /// Number of processes started and not yet reaped.
  [[nodiscard]] std::size_t running() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace bellows::daemon
