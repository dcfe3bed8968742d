// `bellows run`: runs a program as an elastic job on the local backend. This process is the
// job's controller (ControllerService): it starts one bellowsd per emulated node, launches
// the program's first rank through MPICH's mpiexec (the program grows to its initial size and
// later resizes itself with MPI dynamic processes, as the controller decides), shows a
// progress line, and prints the resize timeline at the end.

#include <bellows/controller/controller_service.hpp>
#include <bellows/controller/local_daemon_launcher.hpp>
#include <bellows/controller/local_node_pool.hpp>
#include <bellows/controller/local_resource_manager.hpp>
#include <bellows/policy/load.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "job_dir.hpp"
#include "timeline.hpp"

extern char** environ;

namespace bellows::cli {
namespace {

namespace fs = std::filesystem;
namespace ctl = bellows::controller;

struct RunOptions {
  std::string backend = "local";
  std::string nodes;
  std::string policy_file;
  unsigned pool = 0;
  bool verbose = false;
  bool quiet = false;
  std::vector<std::string> command;
};

std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal.store(sig); }

/// bellowsd next to this executable (installed), or in the build tree's daemon/ folder.
fs::path find_bellowsd() {
  if (const char* path = std::getenv("BELLOWS_BELLOWSD"); path != nullptr && *path != '\0') return path;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& candidate : {self.parent_path() / "bellowsd",
                                    self.parent_path().parent_path() / "daemon" / "bellowsd"}) {
    if (!ec && fs::exists(candidate)) return candidate;
  }
  return "bellowsd";
}

fs::path find_mpiexec() {
  if (const char* path = std::getenv("MPIEXEC"); path != nullptr && *path != '\0') return path;
  return BELLOWS_DEFAULT_MPIEXEC;
}

std::string join(const std::vector<std::string>& items, const char* separator = ",") {
  std::string text;
  for (const auto& item : items) {
    if (!text.empty()) text += separator;
    text += item;
  }
  return text;
}

/// Starts `mpiexec -n 1 PROGRAM ARGS` with the job's variables added; returns its pid.
pid_t launch_program(const RunOptions& o, const fs::path& job_dir,
                     const std::vector<std::string>& nodes) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (entry.rfind("BELLOWS_EXPAND_", 0) == 0) continue;
    env.push_back(entry);
  }
  env.push_back("BELLOWS_LOCAL_RANKS=" + std::to_string(nodes.size()));
  env.push_back("BELLOWS_JOB_DIR=" + job_dir.string());
  env.push_back("BELLOWS_NODES=" + join(nodes));
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) env.push_back("OPENBLAS_NUM_THREADS=1");
  std::vector<std::string> args = {find_mpiexec().string(), "-n", "1"};
  args.insert(args.end(), o.command.begin(), o.command.end());
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
  if (rc != 0) throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(rc));
  return pid;
}

std::string progress_line(const ctl::ControllerService& service) {
  const auto s = service.status();
  char rate[64] = "-";
  if (const double gflops = s.value("gflops", 0.0); gflops > 0.0)
    std::snprintf(rate, sizeof rate, "%.1f GFLOP/s", gflops);
  std::string last = "none";
  if (!s["active_resize"].is_null()) {
    const auto& a = s["active_resize"];
    last = "#" + std::to_string(a["id"].get<int>()) + " " + a["kind"].get<std::string>() + " " +
           std::to_string(a["count"].get<int>()) + " " + a["state"].get<std::string>();
  } else if (!s["finished_resizes"].empty()) {
    const auto& f = s["finished_resizes"].back();
    last = "#" + std::to_string(f["id"].get<int>()) + " " + f["kind"].get<std::string>() + " " +
           std::to_string(f["count"].get<int>()) + " " + f["state"].get<std::string>();
  }
  return "bellows: job " + s["job"].get<std::string>() + " | nodes " +
         std::to_string(s["nodes"].size()) + " | iteration " +
         std::to_string(s["iteration"].get<std::uint64_t>()) + " | " + rate +
         " | last resize " + last;
}

int run_job(const RunOptions& o) {
  if (o.backend != "local") {
    std::fprintf(stderr, "bellows run: backend '%s' is not available in this build; use --backend local\n",
                 o.backend.c_str());
    return exit_bad_input;
  }
  std::optional<policy::Policy> policy;
  if (!o.policy_file.empty()) {
    auto loaded = policy::load_policy_file(o.policy_file);
    if (!loaded.ok()) {
      for (const auto& d : loaded.diagnostics) std::fprintf(stderr, "%s\n", policy::format(d).c_str());
      return exit_bad_input;
    }
    policy = std::move(loaded.policy);
  }
  int min_nodes = policy ? policy->nodes.min : 1;
  int max_nodes = policy ? policy->nodes.max : 1;
  if (!o.nodes.empty()) {
    const auto range = policy::parse_node_range(o.nodes);
    if (!range.range) {
      std::fprintf(stderr, "bellows run: --nodes: %s\n", range.error.c_str());
      return exit_bad_input;
    }
    min_nodes = range.range->min;
    max_nodes = range.range->max;
    if (policy) {
      policy->nodes.min = min_nodes;
      policy->nodes.max = max_nodes;
    }
  }
  const unsigned pool_size = o.pool != 0 ? o.pool : static_cast<unsigned>(max_nodes);
  if (pool_size < static_cast<unsigned>(min_nodes)) {
    std::fprintf(stderr, "bellows run: --pool %u has fewer nodes than the job needs (%d)\n",
                 pool_size, min_nodes);
    return exit_bad_input;
  }

  const std::string job = "local-" + std::to_string(::getpid());
  const fs::path job_dir = run_dir() / job;
  fs::create_directories(run_dir());
  fs::permissions(run_dir(), fs::perms::owner_all, fs::perm_options::replace);
  fs::create_directories(job_dir);
  fs::permissions(job_dir, fs::perms::owner_all, fs::perm_options::replace);
  std::error_code ec;
  fs::remove(run_dir() / "latest", ec);
  fs::create_directory_symlink(job, run_dir() / "latest", ec);

  ctl::SystemClock clock;
  ctl::LocalNodePool pool(pool_size);
  ctl::LocalResourceManager rm(pool, clock);
  const auto first = pool.allocate(job, static_cast<unsigned>(min_nodes));
  if (!first.status.ok()) {
    std::fprintf(stderr, "bellows run: %s\n", first.status.text.c_str());
    return exit_failed;
  }

  ctl::ControllerOptions options;
  options.job = job;
  options.job_dir = job_dir;
  options.nodes = first.nodes;
  options.min_nodes = static_cast<unsigned>(min_nodes);
  options.max_nodes = static_cast<unsigned>(max_nodes);
  options.policy = policy;
  options.policy_file = o.policy_file;
  // The launcher needs the controller's endpoint, which exists once the service is bound:
  // it is the same fixed path, so it can be named first.
  ctl::LocalDaemonLauncher launcher({find_bellowsd(), job_dir,
                                     "ipc://" + (job_dir / "controller.sock").string(), o.verbose});
  ctl::ControllerService service(options, rm, launcher, clock);

  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  std::fprintf(stderr, "bellows: job %s on %s (nodes %d:%d%s%s), files in %s\n", job.c_str(),
               join(first.nodes, ", ").c_str(), min_nodes, max_nodes,
               policy ? ", policy " : "", policy ? o.policy_file.c_str() : "", job_dir.c_str());
  service.start_daemons();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!service.daemons_registered()) {
    if (std::chrono::steady_clock::now() > deadline || g_stop_signal.load() != 0) {
      std::fprintf(stderr, "bellows run: the daemons of %s did not register within 20 s (logs in %s/nodes)\n",
                   join(first.nodes, ", ").c_str(), job_dir.c_str());
      service.shutdown();
      return exit_failed;
    }
    service.step(std::chrono::milliseconds(20));
  }

  const pid_t child = launch_program(o, job_dir, first.nodes);
  int status = 0;
  auto next_progress = std::chrono::steady_clock::now();
  std::string last_line;
  bool forwarded = false;
  while (true) {
    service.step(std::chrono::milliseconds(50));
    if (const int sig = g_stop_signal.load(); sig != 0 && !forwarded) {
      std::fprintf(stderr, "bellows: signal %d: stopping the job\n", sig);
      ::kill(child, SIGTERM);
      forwarded = true;
    }
    const pid_t got = ::waitpid(child, &status, WNOHANG);
    if (got == child) break;
    if (!o.quiet && std::chrono::steady_clock::now() >= next_progress) {
      const std::string line = progress_line(service);
      if (line != last_line) std::fprintf(stderr, "%s\n", line.c_str());
      last_line = line;
      next_progress = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
  }
  // Let what the last ranks reported arrive, then stop the daemons.
  for (int i = 0; i < 5; ++i) service.step(std::chrono::milliseconds(20));
  const auto final_status = service.status();
  service.shutdown();

  std::fprintf(stderr, "\n");
  print_timeline(stderr, ctl::read_event_log(job_dir / "events.jsonl"));
  std::fprintf(stderr, "bellows: job %s ended on %zu node(s); events: bellows events %s\n",
               job.c_str(), final_status["nodes"].size(), job.c_str());
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

void add_run_command(CLI::App& app, Outcome& outcome) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand(
      "run", "run PROGRAM as an elastic job: bellows run [OPTIONS] -- PROGRAM ARGS...");
  run->add_option("--backend", options->backend, "where nodes come from: local (emulated nodes on this host)")
      ->check(CLI::IsMember({"local", "slurm"}));
  run->add_option("--nodes", options->nodes,
                  "MIN:MAX nodes; the job starts on MIN (default: the policy's nodes.min:max, else 1:1)");
  run->add_option("--policy", options->policy_file, "resize policy (YAML, see bellows policy keys)");
  run->add_option("--pool", options->pool, "emulated nodes on this host (default: MAX)");
  run->add_flag("--verbose", options->verbose, "daemons log every request and metrics message");
  run->add_flag("--quiet", options->quiet, "no progress line");
  run->add_option("command", options->command, "PROGRAM and its arguments, after --")->required();
  run->callback([options, &outcome] {
    try {
      outcome.status = run_job(*options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bellows run: %s\n", e.what());
      outcome.status = exit_failed;
    }
  });
}

}  // namespace bellows::cli
