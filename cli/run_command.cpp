// `bellows run`: runs a program as an elastic job, on the local backend (emulated nodes on
// this host) or, inside a Slurm batch job, on the Slurm backend (the job's own nodes, grown
// and shrunk under its job id). This process is the job's controller (ControllerService): it
// starts one bellowsd per node (a process, or a Slurm step on the node), launches
// the program's first rank through MPICH's mpiexec (the program grows to its initial size and
// later resizes itself with MPI dynamic processes, as the controller decides), shows a
// progress line, and prints the resize timeline at the end.

#include <bellows/controller/controller_service.hpp>
#include <bellows/controller/local_node_pool.hpp>
#include <bellows/controller/local_resource_manager.hpp>
#if BELLOWS_HAVE_SLURM_BACKEND
#include <bellows/controller/slurm_resource_manager.hpp>
#endif
#include <bellows/policy/load.hpp>
#include <bellows/protocol/job_directory.hpp>
#include <bellows/protocol/job_file.hpp>
#include <bellows/spank/options.hpp>
#include <bellows/transport/controller_contact.hpp>
#include <bellows/transport/socket_directory.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "companion_programs.hpp"
#include "controller_process.hpp"
#include "job_dir.hpp"
#include "timeline.hpp"

extern char** environ;

namespace bellows::cli {
namespace {

namespace fs = std::filesystem;
namespace ctl = bellows::controller;

/// "was killed by signal 9 (Killed)" or "exited with status 3", of a waitpid status.
std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + ::strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

struct RunOptions {
  std::string backend = "local";
  std::string nodes;
  std::string policy_file;
  unsigned pool = 0;
  std::string listen;  ///< ipc, tcp or tcp:ADDRESS; empty: ipc on local, tcp on slurm
  std::string expand_strategy = "auto";  ///< slurm: auto, merge or companion
  bool verbose = false;
  bool quiet = false;
  bool pmix_native = false;  ///< PROGRAM is a PMIx-native program, not linked with libbellows
  std::string attach;  ///< a running job to take over (--attach), instead of a program to run
  std::vector<std::string> command;
};

std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal.store(sig); }

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

/// The command that starts one rank of the job on the node it runs on: MPICH's mpiexec with
/// its fork launcher (hydra would otherwise start its proxies with srun or ssh) and without a
/// resource manager's host list (`-rmk user`: inside a Slurm step hydra would take the job's
/// node list), so that the rank is on this node under this node's host name, which its MPI
/// port then carries (with `-hosts localhost` it would carry 127.0.0.1, which another host
/// cannot reach); one process,
/// the program (made absolute when given by a relative path: a daemon starts it from its own
/// directory) and its arguments.
std::vector<std::string> rank_command(const RunOptions& o) {
  std::vector<std::string> args = {find_mpiexec().string(), "-launcher", "fork", "-rmk", "user", "-n", "1"};
  std::string program = o.command.front();
  if (program.find('/') != std::string::npos) program = fs::absolute(program).lexically_normal().string();
  args.push_back(program);
  args.insert(args.end(), o.command.begin() + 1, o.command.end());
  return args;
}

/// What every rank of the job finds in its environment besides what it inherits: where the
/// job's files are, its first nodes, one BLAS thread unless set, and hydra's fork launcher
/// (it would otherwise start its proxies with srun or ssh).
std::vector<std::string> job_variables(const fs::path& job_dir, const std::vector<std::string>& nodes) {
  namespace job_env = protocol::job_environment;
  std::vector<std::string> env = {std::string(job_env::kJobDir) + "=" + job_dir.string(),
                                  std::string(job_env::kNodes) + "=" + join(nodes), "HYDRA_LAUNCHER=fork"};
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) env.push_back("OPENBLAS_NUM_THREADS=1");
  return env;
}

/// What a rank that a node's daemon starts must find in its environment besides the
/// daemon's: the job's variables, and that it joins the running job through its port.
ctl::RankLaunch rank_launch(const RunOptions& o, const fs::path& job_dir, const std::vector<std::string>& nodes) {
  namespace job_env = protocol::job_environment;
  ctl::RankLaunch launch;
  launch.command = rank_command(o);
  launch.environment = job_variables(job_dir, nodes);
  launch.environment.push_back(std::string(job_env::kJoin) + "=port");
  launch.environment.push_back(std::string(job_env::kGridRanks) + "=" + std::to_string(nodes.size()));
  launch.pmix_native = o.pmix_native;
  return launch;
}

/// The PMIx client variables the first node's daemon wrote for the job's first rank, once the
/// file is there (the controller steps meanwhile); std::nullopt after `wait`.
std::optional<std::vector<std::string>> await_rank_environment(ctl::ControllerService& service,
                                                               const fs::path& file,
                                                               std::chrono::seconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::error_code ec;
  while (!fs::exists(file, ec)) {
    if (std::chrono::steady_clock::now() > deadline || g_stop_signal.load() != 0) return std::nullopt;
    service.step(std::chrono::milliseconds(10));
  }
  std::vector<std::string> environment;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) environment.push_back(line);
  return environment;
}

/// Starts the job's first rank on this host, the job's first node, with the job's variables
/// and its PMIx client variables (pmix_client: what the first node's daemon registered it
/// with) added; returns its pid. It opens the job's port, which the ranks the other nodes' daemons
/// start connect to.
pid_t launch_program(const RunOptions& o, const fs::path& job_dir, const std::vector<std::string>& nodes,
                     const std::vector<std::string>& pmix_client) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    // The daemon's PMIx client variables replace any this process inherited.
    if (std::ranges::any_of(pmix_client, [&name](const std::string& client) {
          return client.size() > name.size() && client.starts_with(name) && client[name.size()] == '=';
        }))
      continue;
    if (std::ranges::any_of(protocol::job_environment::kSpawnOnly,
                            [&name](const char* spawn_only) { return name == spawn_only; }))
      continue;
    if (entry.rfind("HYDRA_LAUNCHER=", 0) == 0 || entry.rfind("HYDRA_RMK=", 0) == 0) continue;
    env.push_back(entry);
  }
  namespace job_env = protocol::job_environment;
  env.push_back(std::string(job_env::kInitialRanks) + "=" + std::to_string(nodes.size()));
  for (auto& variable : job_variables(job_dir, nodes)) env.push_back(std::move(variable));
  env.insert(env.end(), pmix_client.begin(), pmix_client.end());
  std::vector<std::string> args = rank_command(o);
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

/// A node range "MIN:MAX" from the SPANK plugin's BELLOWS_ELASTIC_MIN / BELLOWS_ELASTIC_MAX,
/// empty when they are not both set.
std::string elastic_range_from_environment() {
  const char* min = std::getenv("BELLOWS_ELASTIC_MIN");
  const char* max = std::getenv("BELLOWS_ELASTIC_MAX");
  if (min == nullptr || max == nullptr || *min == '\0' || *max == '\0') return {};
  return std::string(min) + ":" + max;
}

/// Where the job's nodes come from and who starts its daemons.
struct Backend {
  std::string job;
  std::vector<std::string> nodes;  ///< the job's nodes at start, its first node first
  std::unique_ptr<ctl::LocalNodePool> pool;
  std::unique_ptr<ctl::ResourceManager> rm;
  std::unique_ptr<ctl::NodeLauncher> launcher;
};

/// RUN_DIR/JOB, 0700, and RUN_DIR/latest pointing to it.
fs::path make_job_dir(const fs::path& root, const std::string& job) {
  const fs::path job_dir = root / job;
  fs::create_directories(root);
  fs::permissions(root, fs::perms::owner_all, fs::perm_options::replace);
  fs::create_directories(job_dir);
  fs::permissions(job_dir, fs::perms::owner_all, fs::perm_options::replace);
  std::error_code ec;
  fs::remove(root / "latest", ec);
  fs::create_directory_symlink(job, root / "latest", ec);
  return job_dir;
}

/// A Slurm job submitted on fewer nodes than its minimum (sbatch -N1 --elastic=2:4) grows to
/// the minimum under its own job id before the program starts. Returns false (having said
/// why) when Slurm does not grant the missing nodes in time, or on a stop signal.
bool grow_to_minimum(ctl::ResourceManager& rm, const std::string& job, unsigned min_nodes,
                     std::vector<std::string>& nodes) {
  const auto missing = min_nodes - static_cast<unsigned>(nodes.size());
  const auto timeout = ctl::ResizeLimits::defaults().rm_request;
  std::fprintf(stderr, "bellows: job %s holds %zu node(s), fewer than its minimum %u: asking for %u more\n",
               job.c_str(), nodes.size(), min_nodes, missing);
  std::optional<ctl::ExpandAnswer> answer;
  const auto began = std::chrono::steady_clock::now();
  const auto request = rm.request_expand({job, missing, missing, timeout},
                                         [&answer](ctl::ExpandAnswer a) { answer = std::move(a); });
  while (!answer) {
    if (g_stop_signal.load() != 0) {
      rm.cancel_expand(request);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rm.progress();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (!answer->status.ok()) {
    std::fprintf(stderr, "bellows run: job %s needs at least %u nodes and holds %zu: %s (%s, %.2f s)\n",
                 job.c_str(), min_nodes, nodes.size(), answer->status.text.c_str(),
                 std::string(ctl::to_string(answer->status.code)).c_str(), seconds);
    return false;
  }
  nodes.insert(nodes.end(), answer->nodes.begin(), answer->nodes.end());
  std::fprintf(stderr, "bellows: job %s grew to %zu nodes (%s) in %.2f s\n", job.c_str(), nodes.size(),
               join(answer->nodes, ", ").c_str(), seconds);
  return true;
}

/// The job's first nodes from the host's pool: at once when they are idle, else, like a job
/// pending in a batch queue, once other jobs gave them back (the job waits in the pool's queue,
/// where their policies see it as a pending job). nullopt on a stop signal, having said why.
std::optional<std::vector<std::string>> start_on_local_pool(ctl::LocalNodePool& pool, const std::string& job,
                                                            unsigned nodes) {
  auto first = pool.allocate(job, nodes);
  if (first.status.ok()) return first.nodes;
  pool.wait_for(job, nodes);
  std::fprintf(stderr, "bellows: job %s waits for %u node(s) of the local pool (%s)\n", job.c_str(), nodes,
               pool.holders_text().c_str());
  const auto began = std::chrono::steady_clock::now();
  while (g_stop_signal.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    first = pool.allocate(job, nodes);
    if (first.status.ok()) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      std::fprintf(stderr, "bellows: job %s got %s after waiting %.2f s\n", job.c_str(),
                   join(first.nodes, ", ").c_str(), seconds);
      return first.nodes;
    }
  }
  pool.stop_waiting(job);
  std::fprintf(stderr, "bellows run: stopped while waiting for %u node(s) of the local pool\n", nodes);
  return std::nullopt;
}

/// The controller's endpoint for --listen: "ipc" (daemons and commands of this host only),
/// "tcp" (this host's address, any free port: daemons on other nodes) or "tcp:ADDRESS".
/// `listen` is checked by listen_problem() when the options are parsed.
std::string listen_endpoint(const std::string& listen, bool slurm, const transport::SocketDirectory& sockets) {
  const std::string choice = listen.empty() ? (slurm ? "tcp" : "ipc") : listen;
  if (choice == "ipc") return sockets.ipc_endpoint("controller.sock");
  if (choice == "tcp") return transport::this_host_tcp_endpoint();
  return "tcp://" + choice.substr(4) + ":*";
}

/// "" when --listen's value is one listen_endpoint() knows, else what is wrong.
std::string listen_problem(const std::string& listen) {
  if (listen == "ipc" || listen == "tcp" || (listen.starts_with("tcp:") && listen.size() > 4 &&
                                             listen.find_first_of(":/ ", 4) == std::string::npos))
    return {};
  return "expected ipc, tcp or tcp:ADDRESS, not " + listen;
}

int run_job(RunOptions o) {
  const bool slurm = o.backend == "slurm";
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  if (slurm && (slurm_job == nullptr || *slurm_job == '\0')) {
    std::fprintf(stderr,
                 "bellows run: bellows run --backend slurm runs inside a Slurm job (no SLURM_JOB_ID): "
                 "submit it with sbatch or salloc\n");
    return exit_bad_input;
  }
#if !BELLOWS_HAVE_SLURM_BACKEND
  if (slurm) {
    std::fprintf(stderr, "bellows run: the Slurm backend is not available in this build (libslurm "
                         "was not found); use --backend local\n");
    return exit_bad_input;
  }
#endif
  // A socket root too long for a Unix socket is refused before anything starts.
  if (const std::string problem = transport::socket_root_problem(transport::socket_root());
      !problem.empty()) {
    std::fprintf(stderr, "bellows run: %s\n", problem.c_str());
    return exit_bad_input;
  }
  // The policy of sbatch --elastic-policy travels with the job as its content, checked at
  // submission (the file may exist only on the submit host): that content is the job's policy.
  std::optional<std::string> submitted_policy;
  if (slurm && o.policy_file.empty()) {
    const std::string path_variable(spank::env_policy);
    const std::string content_variable(spank::env_policy_content);
    if (const char* file = std::getenv(path_variable.c_str()); file != nullptr) o.policy_file = file;
    if (const char* content = std::getenv(content_variable.c_str()); content != nullptr) {
      submitted_policy = spank::decode_base64(content);
      if (!submitted_policy) {
        std::fprintf(stderr, "bellows run: %s (the policy of --elastic-policy) is not base64\n",
                     content_variable.c_str());
        return exit_bad_input;
      }
      if (o.policy_file.empty()) o.policy_file = content_variable;
    }
  }
  std::optional<policy::Policy> policy;
  std::string policy_text;  // kept in the job record, for a controller that takes the job over
  if (!o.policy_file.empty()) {
    auto loaded = submitted_policy ? policy::parse_policy(*submitted_policy, o.policy_file)
                                   : policy::load_policy_file(o.policy_file);
    if (!loaded.ok()) {
      for (const auto& d : loaded.diagnostics) std::fprintf(stderr, "%s\n", policy::format(d).c_str());
      return exit_bad_input;
    }
    policy = std::move(loaded.policy);
    if (submitted_policy) {
      policy_text = *submitted_policy;
    } else {
      std::ifstream file(o.policy_file);
      policy_text.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    }
  }
  std::string range_text = o.nodes;
  const char* range_source = "--nodes";
  if (slurm && range_text.empty()) {
    range_text = elastic_range_from_environment();
    range_source = "BELLOWS_ELASTIC_MIN/MAX";
  }
  int min_nodes = policy ? policy->nodes.min : 1;
  int max_nodes = policy ? policy->nodes.max : 1;
  if (!range_text.empty()) {
    const auto range = policy::parse_node_range(range_text);
    if (!range.range) {
      std::fprintf(stderr, "bellows run: %s: %s\n", range_source, range.error.c_str());
      return exit_bad_input;
    }
    min_nodes = range.range->min;
    max_nodes = range.range->max;
    if (policy) {
      policy->nodes.min = min_nodes;
      policy->nodes.max = max_nodes;
    }
  }

  // A stop signal ends waits (for Slurm, for the local pool) and then the job.
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  Backend backend;
  if (slurm) {
#if BELLOWS_HAVE_SLURM_BACKEND
    backend.job = slurm_job;
    ctl::SlurmOptions slurm_options;
    (void)ctl::parse_expand_strategy(o.expand_strategy, slurm_options.expand_strategy);  // checked by CLI11
    auto rm = std::make_unique<ctl::SlurmResourceManager>(slurm_options);
    std::fprintf(stderr, "bellows: job %s grows by %s\n", backend.job.c_str(),
                 ctl::describe_growth(rm->expand_strategy()).c_str());
    auto held = rm->nodes_of(backend.job);
    if (!held.status.ok() || held.value.empty()) {
      std::fprintf(stderr, "bellows run: the nodes of Slurm job %s: %s\n", backend.job.c_str(),
                   held.status.ok() ? "none (is it running?)" : held.status.text.c_str());
      return exit_failed;
    }
    backend.nodes = held.value;
    if (range_text.empty() && !policy) {
      min_nodes = max_nodes = static_cast<int>(backend.nodes.size());
    }
    if (backend.nodes.size() < static_cast<std::size_t>(min_nodes)) {
      if (!grow_to_minimum(*rm, backend.job, static_cast<unsigned>(min_nodes), backend.nodes))
        return exit_failed;
    }
    backend.rm = std::move(rm);
#endif
  } else {
    const unsigned pool_size = o.pool != 0 ? o.pool : static_cast<unsigned>(max_nodes);
    if (pool_size < static_cast<unsigned>(min_nodes)) {
      std::fprintf(stderr, "bellows run: --pool %u has fewer nodes than the job needs (%d)\n",
                   pool_size, min_nodes);
      return exit_bad_input;
    }
    backend.job = "local-" + std::to_string(::getpid());
    // The host's pool, shared by every job of the local backend (as a cluster's nodes are).
    backend.pool = std::make_unique<ctl::LocalNodePool>(local_pool_file(), pool_size);
  }
  // Whatever happens from here on, the job's nodes go back to the host's pool at the end.
  struct GiveBack {
    ctl::LocalNodePool* pool;
    std::string job;
    ~GiveBack() {
      if (pool == nullptr) return;
      try {
        pool->release_all(job);  // its nodes, and its place in the queue if it still waits
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bellows run: %s\n", e.what());
      }
    }
  } give_back{backend.pool.get(), backend.job};
  const std::string& job = backend.job;
  // A Slurm job's daemons run on other nodes: its directory must be one they all see.
  const fs::path root = slurm ? cluster_run_dir() : run_dir();
  const fs::path job_dir = make_job_dir(root, job);
#if BELLOWS_HAVE_SLURM_BACKEND
  if (slurm) {
    // `bellows status JOB` and `bellows events JOB` find the directory from any shell.
    auto& slurm_rm = static_cast<ctl::SlurmResourceManager&>(*backend.rm);
    if (const auto published = slurm_rm.publish_job_dir(job, job_dir.string()); !published.ok())
      std::fprintf(stderr, "bellows: note: %s: bellows status %s needs BELLOWS_RUN_DIR=%s\n",
                   published.text.c_str(), job.c_str(), root.c_str());
  }
#endif
  // An ipc socket lives in a short directory of this host, whatever the length of job_dir; a
  // tcp endpoint is on this host's address. The job directory says which
  // (controller.endpoint, and controller.key for tcp).
  const transport::SocketDirectory sockets(job, job_dir);
  const std::string endpoint = listen_endpoint(o.listen, slurm, sockets);

  ctl::SystemClock clock;
  if (!slurm) {
    backend.rm = std::make_unique<ctl::LocalResourceManager>(*backend.pool, clock);
    auto first = start_on_local_pool(*backend.pool, job, static_cast<unsigned>(min_nodes));
    if (!first) return exit_failed;
    backend.nodes = std::move(*first);
    backend.launcher = local_daemon_launcher(job_dir, o.verbose, policy);
  } else {
    // Each node's daemon finds the controller in the job directory, which every node sees.
    std::function<std::string(const std::string&)> slurm_job_of;
#if BELLOWS_HAVE_SLURM_BACKEND
    // A node of a companion allocation runs its daemon as a step of that companion.
    slurm_job_of = [rm = static_cast<ctl::SlurmResourceManager*>(backend.rm.get()),
                    job](const std::string& node) { return rm->slurm_job_of(job, node); };
#endif
    backend.launcher = slurm_daemon_launcher(job, job_dir, o.verbose, policy, std::move(slurm_job_of));
  }
  const std::vector<std::string> first_nodes = backend.nodes;

  ctl::ControllerOptions options;
  options.job = job;
  options.backend = o.backend;
  options.job_dir = job_dir;
  options.endpoint = endpoint;
  options.nodes = first_nodes;
  options.min_nodes = static_cast<unsigned>(min_nodes);
  options.max_nodes = static_cast<unsigned>(max_nodes);
  options.policy = policy;
  options.policy_file = o.policy_file;
  options.policy_text = policy_text;
  options.expand_strategy = slurm ? o.expand_strategy : std::string();
  options.rank_launch = rank_launch(o, job_dir, first_nodes);
  ctl::ControllerService service(options, *backend.rm, *backend.launcher, clock);

  std::fprintf(stderr, "bellows: job %s on %s (%s backend, nodes %d:%d%s%s), files in %s\n", job.c_str(),
               join(first_nodes, ", ").c_str(), o.backend.c_str(), min_nodes, max_nodes,
               policy ? ", policy " : "", policy ? o.policy_file.c_str() : "", job_dir.c_str());
  service.start_daemons();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!service.daemons_registered()) {
    if (std::chrono::steady_clock::now() > deadline || g_stop_signal.load() != 0) {
      std::fprintf(stderr, "bellows run: the daemons of %s did not register within 20 s (logs in %s/nodes)\n",
                   join(first_nodes, ", ").c_str(), job_dir.c_str());
      service.shutdown();
      return exit_failed;
    }
    service.step(std::chrono::milliseconds(20));
  }

  service.start_initial_ranks();
  // The first rank is this process's child (its exit status is the job's), and a PMIx client
  // of the first node's daemon like every other rank (docs/control-plane.md).
  const fs::path rank_environment = protocol::JobDirectory{job_dir}.rank_environment_file(first_nodes.front());
  std::error_code removed;
  fs::remove(rank_environment, removed);
  std::optional<std::vector<std::string>> pmix_client;
  if (service.register_first_rank())
    pmix_client = await_rank_environment(service, rank_environment, std::chrono::seconds(20));
  if (!pmix_client) {
    std::fprintf(stderr, "bellows run: the daemon of %s did not register the job's first rank within 20 s (its log: %s)\n",
                 first_nodes.front().c_str(),
                 protocol::JobDirectory{job_dir}.daemon_log(first_nodes.front()).c_str());
    service.shutdown();
    return exit_failed;
  }
  const pid_t child = launch_program(o, job_dir, first_nodes, *pmix_client);
  service.note_first_rank_pid(static_cast<std::int32_t>(child));
  try {
    protocol::write_line_atomically(protocol::JobDirectory{job_dir}.rank_pid_file(first_nodes.front()),
                                    std::to_string(child));
  } catch (const std::exception& e) {
    // Only a daemon whose controller died would miss it (it could not tell that the rank runs).
    std::fprintf(stderr, "bellows run: warning: %s\n", e.what());
  }
  int status = 0;
  auto next_progress = std::chrono::steady_clock::now();
  std::string last_line;
  // The job's progress on stderr once a second, when it changed (not with --quiet).
  const auto show_progress = [&] {
    if (o.quiet || std::chrono::steady_clock::now() < next_progress) return;
    const std::string line = progress_line(service);
    if (line != last_line) std::fprintf(stderr, "%s\n", line.c_str());
    last_line = line;
    next_progress = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  };
  bool forwarded = false;
  while (true) {
    service.step(std::chrono::milliseconds(50));
    if (const int sig = g_stop_signal.load(); sig != 0 && !forwarded) {
      std::fprintf(stderr, "bellows: signal %d: stopping the job\n", sig);
      ::kill(child, SIGTERM);
      forwarded = true;
    } else if (const auto& why = service.termination_requested(); why && !forwarded) {
      std::fprintf(stderr, "bellows: %s: stopping the job\n", why->c_str());
      ::kill(child, SIGTERM);
      forwarded = true;
    }
    const pid_t got = ::waitpid(child, &status, WNOHANG);
    if (got == child) break;
    show_progress();
  }
  // Let what the last ranks reported arrive, then stop the daemons.
  for (int i = 0; i < 5; ++i) service.step(std::chrono::milliseconds(20));
  // A first rank that crashed is a failure, whether or not its daemon saw it first.
  const bool first_rank_lost = !forwarded && (WIFSIGNALED(status) || WEXITSTATUS(status) != 0);
  if (!forwarded) {
    service.first_rank_ended(static_cast<std::int32_t>(child), WIFEXITED(status) ? WEXITSTATUS(status) : 0,
                             WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
  if (first_rank_lost && service.other_ranks_running()) {
    // The survivors may recover without it (ElasticSession::recover): the job goes on until
    // their ranks end, its output then in the log of the new first rank's node.
    std::fprintf(stderr, "bellows run: info: the job's first rank (pid %d) %s; the job goes on on its "
                 "other nodes until their ranks end (their output is in %s/nodes/NODE/bellowsd.log)\n",
                 static_cast<int>(child), describe_exit(status).c_str(), job_dir.c_str());
    while (service.other_ranks_running() && g_stop_signal.load() == 0) {
      service.step(std::chrono::milliseconds(50));
      show_progress();
    }
    for (int i = 0; i < 5; ++i) service.step(std::chrono::milliseconds(20));
  }
  // The job carried on without its first rank and recovered from every failure.
  const bool carried_on = first_rank_lost && g_stop_signal.load() == 0 && service.recovered_from_failures();
  const auto final_status = service.status();
  // What this command returns, kept in the job record for `bellows wait`.
  const int exit_status = carried_on           ? 0
                          : WIFEXITED(status) ? WEXITSTATUS(status)
                                              : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  service.note_end(carried_on ? "its first rank " + describe_exit(status) + "; the job recovered without it"
                              : "its first rank " + describe_exit(status),
                   exit_status);
  service.shutdown();

  std::fprintf(stderr, "\n");
  print_timeline(stderr, ctl::read_event_log(protocol::JobDirectory{job_dir}.event_log()),
                 MessageLogLines::counted);
  std::fprintf(stderr, "bellows: job %s ended on %zu node(s); events: bellows events %s\n",
               job.c_str(), final_status["nodes"].size(), job.c_str());
  return exit_status;
}

}  // namespace

void add_run_command(CLI::App& app, Outcome& outcome) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand(
      "run", "run PROGRAM as an elastic job: bellows run [OPTIONS] -- PROGRAM ARGS...; or take a running "
             "job over: bellows run --attach JOB");
  run->add_option("--backend", options->backend, "where nodes come from: local (emulated nodes on this host) or slurm (inside a "
                  "Slurm batch job: its nodes, grown and shrunk under its job id)")
      ->check(CLI::IsMember({"local", "slurm"}));
  run->add_option("--nodes", options->nodes,
                  "MIN:MAX nodes; the job starts on MIN (default: BELLOWS_ELASTIC_MIN:MAX on "
                  "slurm, else the policy's nodes.min:max, else 1:1; on slurm it starts on the "
                  "nodes the Slurm job holds)");
  run->add_option("--policy", options->policy_file, "resize policy (YAML, see bellows policy keys; on slurm default "
                  "BELLOWS_ELASTIC_POLICY)");
  run->add_option("--pool", options->pool, "local backend: emulated nodes on this host (default: MAX)");
  run->add_option("--listen", options->listen,
                  "where the controller listens: ipc (this host; default on local), tcp (this host's "
                  "address; default on slurm) or tcp:ADDRESS")
      ->check(listen_problem);
  run->add_option("--expand-strategy", options->expand_strategy,
                  "slurm: how the job grows: merge (helper jobs merged into it, same job id; needs "
                  "SchedulerParameters=permit_job_expansion), companion (step-less allocations "
                  "named bellows-grow-JOBID that it spans; any Slurm) or auto (merge where the "
                  "site permits it; default)")
      ->check(CLI::IsMember({"auto", "merge", "companion"}));
  run->add_flag("--verbose", options->verbose, "daemons log every request and metrics message");
  run->add_flag("--quiet", options->quiet, "no progress line");
  run->add_flag("--pmix-native", options->pmix_native,
                "PROGRAM is a PMIx-native program (PMIx_Init, not libbellows): a grow commits once the new "
                "ranks' PMIx clients connected; a shrink's leaving ranks, left out of the job's new process "
                "set, end with status 0, which commits it (docs/daemon.md)");
  CLI::Option* attach = run->add_option(
      "--attach", options->attach,
      "take over the running job JOB (its id, latest, or its directory's absolute path) whose controller died: "
      "its daemons come back to this process, which controls the job from then on (a Slurm job: run it "
      "on the job's first node, inside its allocation: srun --jobid JOB --overlap -N1 -w FIRSTNODE bellows "
      "run --attach JOB)");
  for (const char* other :
       {"--backend", "--nodes", "--policy", "--pool", "--listen", "--expand-strategy", "--pmix-native"})
    attach->excludes(other);
  run->add_option("command", options->command, "PROGRAM and its arguments, after --");
  run->callback([options, &outcome] {
    try {
      if (!options->attach.empty()) {
        if (!options->command.empty()) {
          std::fprintf(stderr, "bellows run: --attach %s takes a running job over: it runs no PROGRAM (got %s)\n",
                       options->attach.c_str(), options->command.front().c_str());
          outcome.status = exit_bad_input;
          return;
        }
        outcome.status = attach_job(options->attach, options->verbose, options->quiet);
        return;
      }
      if (options->command.empty()) {
        std::fprintf(stderr, "bellows run: a PROGRAM to run is required (bellows run [OPTIONS] -- PROGRAM ARGS...), "
                             "or --attach JOB\n");
        outcome.status = exit_bad_input;
        return;
      }
      outcome.status = run_job(*options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bellows run: %s\n", e.what());
      outcome.status = exit_failed;
    }
  });
}

}  // namespace bellows::cli
