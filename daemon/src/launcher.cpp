#include <bellows/daemon/launcher.hpp>
#include <bellows/daemon/namespace_info.hpp>
#include <bellows/daemon/stop_signals.hpp>

#include <pmix.h>
#include <pmix_server.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>

extern char** environ;

namespace bellows::daemon {

std::string ExitStatus::describe() const {
  if (exited) return "exited with status " + std::to_string(code);
  return "killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
}

namespace {

/// A NULL-terminated argv-style array as PMIx builds them (PMIX_ARGV_APPEND / PMIX_ARGV_FREE).
class PmixArgv {
 public:
  PmixArgv() = default;
  ~PmixArgv() {
    if (argv_ != nullptr) PMIX_ARGV_FREE(argv_);
  }
  PmixArgv(const PmixArgv&) = delete;
  PmixArgv& operator=(const PmixArgv&) = delete;
  char*** address() { return &argv_; }
  char** get() const { return argv_; }

 private:
  char** argv_ = nullptr;
};

/// A string PMIx allocated (PMIx_generate_regex, PMIx_generate_ppn), freed with free().
struct PmixString {
  char* text = nullptr;
  PmixString() = default;
  ~PmixString() { std::free(text); }
  PmixString(const PmixString&) = delete;
  PmixString& operator=(const PmixString&) = delete;
};

/// Loads `entry` into info[i]; a map goes in as the regular expression PMIx makes of it.
void load_entry(InfoArray& info, std::size_t i, const RegisteredInfo& entry) {
  const std::string key(entry.key);
  switch (entry.form) {
    case InfoForm::kString:
      info.load(i, key.c_str(), entry.text.c_str(), PMIX_STRING);
      return;
    case InfoForm::kUint32:
      info.load(i, key.c_str(), &entry.number, PMIX_UINT32);
      return;
    case InfoForm::kUint16: {
      const auto value = static_cast<std::uint16_t>(entry.number);
      info.load(i, key.c_str(), &value, PMIX_UINT16);
      return;
    }
    case InfoForm::kRank: {
      const pmix_rank_t rank = entry.number;
      info.load(i, key.c_str(), &rank, PMIX_PROC_RANK);
      return;
    }
    case InfoForm::kNodeRegex:
    case InfoForm::kProcRegex: {
      const bool nodes = entry.form == InfoForm::kNodeRegex;
      PmixString regex;
      const pmix_status_t rc = nodes ? PMIx_generate_regex(entry.text.c_str(), &regex.text)
                                     : PMIx_generate_ppn(entry.text.c_str(), &regex.text);
      if (rc != PMIX_SUCCESS)
        throw PmixError(std::string(nodes ? "PMIx_generate_regex(" : "PMIx_generate_ppn(") + entry.text + ")", rc);
      info.load(i, key.c_str(), regex.text, PMIX_REGEX);
      return;
    }
  }
}

/// `entries` as a pmix_info_t array, with `room` zeroed entries after them.
InfoArray info_array(const std::vector<RegisteredInfo>& entries, std::size_t room = 0) {
  InfoArray info(entries.size() + room);
  for (std::size_t i = 0; i < entries.size(); ++i) load_entry(info, i, entries[i]);
  return info;
}

/// Whether the NAME of "NAME=VALUE" entry is the name of one of entries.
bool names_one_of(std::string_view entry, const std::vector<std::string>& entries) {
  const std::string_view name = entry.substr(0, entry.find('='));
  for (const std::string& other : entries) {
    if (other.size() > name.size() && other.compare(0, name.size(), name) == 0 && other[name.size()] == '=')
      return true;
  }
  return false;
}

/// The spec's job map: its own, or nprocs ranks on this node.
JobMap job_map_of(const LaunchSpec& spec, const std::string& node) {
  if (!spec.job_map.empty()) return spec.job_map;
  JobMap map;
  for (std::uint32_t rank = 0; rank < spec.nprocs; ++rank) map.push_back({node, rank});
  return map;
}

}  // namespace

class LocalLauncher::Impl {
 public:
  Impl(PmixServer& server, ExitHandler on_exit) : server_(server), on_exit_(std::move(on_exit)) {}

  PmixServer& server_;
  ExitHandler on_exit_;
  mutable std::mutex mutex_;
  std::condition_variable reaped_;
  std::map<pid_t, ProcId> running_;
  /// Each namespace registered here, with the plan it was registered with last.
  std::map<std::string, JobRegistration> registered_;
  /// Each namespace's ranks started here past the job's size (keep_size_for_joiners).
  std::map<std::string, std::vector<std::uint32_t>> started_past_size_;
  std::vector<std::thread> watchers_;

  /// Registers the job's namespace with the job-level, node and process info of `plan`
  /// (namespace_info(); docs/daemon.md, "The job's namespace"), as PRRTE's server does.
  void register_job(const std::string& nspace_name, const JobRegistration& plan) {
    const NamespaceInfo entries = namespace_info(nspace_name, plan);
    std::vector<InfoArray> nodes;
    for (const std::vector<RegisteredInfo>& node : entries.nodes) nodes.push_back(info_array(node));
    std::vector<InfoArray> procs;
    for (const std::vector<RegisteredInfo>& proc : entries.procs) procs.push_back(info_array(proc));

    InfoArray info = info_array(entries.job, nodes.size() + procs.size());
    std::size_t i = entries.job.size();
    for (InfoArray& node : nodes) {
      pmix_data_array_t array{PMIX_INFO, node.size(), node.data()};
      info.load(i++, PMIX_NODE_INFO_ARRAY, &array, PMIX_DATA_ARRAY);
    }
    for (InfoArray& proc : procs) {
      pmix_data_array_t array{PMIX_INFO, proc.size(), proc.data()};
      info.load(i++, PMIX_PROC_INFO_ARRAY, &array, PMIX_DATA_ARRAY);
    }
    const auto local_size = static_cast<std::uint32_t>(plan.local.ranks.size());
    pmix_nspace_t nspace;
    PMIX_LOAD_NSPACE(nspace, nspace_name.c_str());
    const pmix_status_t rc = PMIx_server_register_nspace(nspace, static_cast<int>(local_size), info.data(),
                                                         info.size(), nullptr, nullptr);
    if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED)
      throw PmixError("PMIx_server_register_nspace(" + nspace_name + ")", rc);
    spdlog::debug("registered namespace {}: {} rank(s) on {} node(s), here {}", nspace_name, plan.job_size,
                  plan.num_nodes, joined_ranks(plan.local.ranks));
  }

  /// Checks the spec, registers its job (once per namespace) and returns its plan.
  JobRegistration register_spec(const LaunchSpec& spec) {
    if (spec.nspace.empty()) throw std::invalid_argument("launch: the nspace is empty");
    if (spec.nspace.size() > PMIX_MAX_NSLEN)
      throw std::invalid_argument("launch: nspace '" + spec.nspace + "' is longer than " +
                                  std::to_string(PMIX_MAX_NSLEN) + " characters");
    if (spec.argv.empty() || spec.argv[0].empty())
      throw std::invalid_argument("launch " + spec.nspace + ": no program given");
    if (spec.job_map.empty() && spec.nprocs == 0)
      throw std::invalid_argument("launch " + spec.nspace + ": 0 processes");
    const JobMap map = job_map_of(spec, server_.options().node_name);
    std::vector<std::uint32_t> in_job;
    for (const MappedRank& mapped : map)
      if (std::ranges::find(spec.departed, mapped.rank) == spec.departed.end()) in_job.push_back(mapped.rank);
    JobRegistration plan;
    try {
      for (const std::uint32_t rank : spec.departed) {
        if (std::ranges::find(map, rank, &MappedRank::rank) == map.end())
          throw std::invalid_argument("rank " + std::to_string(rank) + " left the job but is not in the job map " +
                                      to_string(map));
        if (std::ranges::find(spec.ranks_to_start, rank) != spec.ranks_to_start.end())
          throw std::invalid_argument("rank " + std::to_string(rank) + " is to be started but left the job");
      }
      plan = plan_registration(map, in_job, server_.options().node_name);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("launch " + spec.nspace + ": " + e.what());
    }
    // The ranks to start whose numbers are not below the job's size (a grow after a shrink).
    std::vector<std::uint32_t> past_size;
    for (const std::uint32_t rank : spec.ranks_to_start.empty() ? plan.local.ranks : spec.ranks_to_start)
      if (rank >= plan.job_size) past_size.push_back(rank);
    plan = keep_size_for_joiners(std::move(plan), past_size, static_cast<std::uint32_t>(map.size()));
    {
      std::lock_guard lock(mutex_);
      if (!registered_.emplace(spec.nspace, plan).second)
        throw std::invalid_argument("launch: nspace '" + spec.nspace + "' was launched already");
      started_past_size_[spec.nspace] = past_size;
    }
    register_job(spec.nspace, plan);
    return plan;
  }

  /// Registers rank `rank` of the spec's job as a client and returns the environment it is
  /// to be started with: what PMIx_server_setup_fork gives.
  static std::vector<std::string> register_client(const std::string& nspace, std::uint32_t rank) {
    const ProcId id{nspace, rank};
    pmix_proc_t proc = to_pmix(id);
    pmix_status_t rc =
        PMIx_server_register_client(&proc, ::geteuid(), ::getegid(), nullptr, nullptr, nullptr);
    if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED)
      throw PmixError("PMIx_server_register_client(" + to_string(id) + ")", rc);
    PmixArgv pmix_env;
    rc = PMIx_server_setup_fork(&proc, pmix_env.address());
    if (rc != PMIX_SUCCESS) throw PmixError("PMIx_server_setup_fork(" + to_string(id) + ")", rc);
    std::vector<std::string> env;
    for (char** e = pmix_env.get(); e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
    return env;
  }

  void watch(pid_t pid, ProcId proc) {
    watchers_.emplace_back([this, pid, proc] {
      int status = 0;
      pid_t got;
      do {
        got = ::waitpid(pid, &status, 0);
      } while (got < 0 && errno == EINTR);
      ExitStatus exit;
      exit.proc = proc;
      exit.pid = pid;
      if (got == pid && WIFEXITED(status)) {
        exit.exited = true;
        exit.code = WEXITSTATUS(status);
      } else if (got == pid && WIFSIGNALED(status)) {
        exit.signal = WTERMSIG(status);
      }
      {
        std::lock_guard lock(mutex_);
        running_.erase(pid);
      }
      reaped_.notify_all();
      spdlog::debug("rank {} (pid {}) {}", to_string(proc), pid, exit.describe());
      if (on_exit_) {
        try {
          on_exit_(exit);
        } catch (const std::exception& e) {
          spdlog::error("exit handler failed: {}", e.what());
        }
      }
    });
  }
};

LocalLauncher::LocalLauncher(PmixServer& server, ExitHandler on_exit)
    : impl_(std::make_unique<Impl>(server, std::move(on_exit))) {}

LocalLauncher::~LocalLauncher() {
  Impl& s = *impl_;
  std::unique_lock lock(s.mutex_);
  for (const auto& [pid, proc] : s.running_) ::kill(pid, SIGTERM);
  if (!s.reaped_.wait_for(lock, std::chrono::seconds(2), [&] { return s.running_.empty(); })) {
    for (const auto& [pid, proc] : s.running_) {
      spdlog::warn("rank {} (pid {}) ignored SIGTERM for 2 s: sending SIGKILL", to_string(proc), pid);
      ::kill(pid, SIGKILL);
    }
  }
  lock.unlock();
  for (auto& t : s.watchers_) t.join();
  for (const auto& [name, plan] : s.registered_) {
    pmix_nspace_t nspace;
    PMIX_LOAD_NSPACE(nspace, name.c_str());
    PMIx_server_deregister_nspace(nspace, nullptr, nullptr);
  }
}

std::vector<std::string> LocalLauncher::register_only(const LaunchSpec& spec) {
  Impl& s = *impl_;
  const JobMap map = job_map_of(spec, s.server_.options().node_name);
  std::size_t here = 0;
  for (const MappedRank& mapped : map) here += mapped.node == s.server_.options().node_name ? 1 : 0;
  if (spec.ranks_to_start.size() > 1 || (spec.ranks_to_start.empty() && here != 1))
    throw std::invalid_argument("register " + spec.nspace + ": the job map has " + std::to_string(here) +
                                " ranks on " + s.server_.options().node_name + ", not one: " + to_string(map));
  const JobRegistration plan = s.register_spec(spec);
  const std::uint32_t rank = spec.ranks_to_start.empty() ? plan.local.ranks.front() : spec.ranks_to_start.front();
  if (std::ranges::find(plan.local.ranks, rank) == plan.local.ranks.end())
    throw std::invalid_argument("register " + spec.nspace + ": rank " + std::to_string(rank) + " is not on " +
                                s.server_.options().node_name + " in the job map " + to_string(map));
  return Impl::register_client(spec.nspace, rank);
}

std::vector<pid_t> LocalLauncher::launch(const LaunchSpec& spec) {
  Impl& s = *impl_;
  const JobRegistration plan = s.register_spec(spec);

  for (const std::uint32_t rank : spec.ranks_to_start) {
    if (std::ranges::find(plan.local.ranks, rank) == plan.local.ranks.end())
      throw std::invalid_argument("launch " + spec.nspace + ": rank " + std::to_string(rank) +
                                  " is not on " + s.server_.options().node_name + " in the job map " +
                                  to_string(job_map_of(spec, s.server_.options().node_name)));
  }
  std::vector<pid_t> pids;
  for (const std::uint32_t rank : spec.ranks_to_start.empty() ? plan.local.ranks : spec.ranks_to_start) {
    const ProcId id{spec.nspace, rank};
    const std::vector<std::string> pmix_env = Impl::register_client(spec.nspace, rank);

    // Everything the child needs is built before fork: after it, only exec and _exit.
    // A PMIx variable the daemon inherited (a Slurm step started with --mpi=pmix has its own)
    // would name another server: the child finds only the value setup_fork gave.
    std::vector<std::string> env_strings;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      if (!names_one_of(*e, pmix_env)) env_strings.emplace_back(*e);
    }
    for (const auto& e : spec.env) env_strings.push_back(e);
    for (const auto& e : pmix_env) env_strings.push_back(e);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings = spec.argv;
    std::vector<char*> argv;
    for (auto& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);

    std::lock_guard lock(s.mutex_);  // the watcher must find the pid in running_
    const pid_t daemon = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) {
      // bellowsd blocks its stop signals to take them by sigwait; a blocked mask survives
      // exec, so a rank (and the mpiexec that starts it, and its children) would otherwise
      // never see the SIGTERM that stops it. Only those: the rest of the mask is what the
      // daemon was started with.
      const sigset_t unblocked = stop_signals();
      ::sigprocmask(SIG_UNBLOCK, &unblocked, nullptr);
      // Ends with the daemon (launch() in launcher.hpp); a daemon gone already: end now.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != daemon) ::_exit(127);
      ::execvpe(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    s.running_.emplace(pid, id);
    s.watch(pid, id);
    pids.push_back(pid);
    spdlog::debug("started rank {} as pid {}: {}", to_string(id), pid, spec.argv[0]);
  }
  return pids;
}

void LocalLauncher::announce_members(const std::string& nspace, const std::vector<std::uint32_t>& members,
                                     const std::string& pset_name) {
  std::vector<pmix_proc_t> procs;
  for (const std::uint32_t rank : members) procs.push_back(to_pmix(ProcId{nspace, rank}));
  // Its status is not read: PMIx 4.2.2 returns an uninitialized one (855565792 seen from a
  // call that defined the set and told the clients), docs/daemon.md.
  (void)PMIx_server_define_process_set(procs.data(), procs.size(), pset_name.c_str());
  spdlog::debug("process set {}: ranks {} of {}", pset_name, joined_ranks(members), nspace);
}

bool LocalLauncher::update_job(const std::string& nspace, const JobMap& map,
                               const std::vector<std::uint32_t>& in_job) {
  Impl& s = *impl_;
  JobRegistration plan = plan_registration(map, in_job, s.server_.options().node_name);
  {
    std::lock_guard lock(s.mutex_);
    const auto registered = s.registered_.find(nspace);
    if (registered == s.registered_.end())
      throw std::invalid_argument("update the job " + nspace + ": the namespace is not registered here");
    plan = keep_size_for_joiners(std::move(plan), s.started_past_size_[nspace], static_cast<std::uint32_t>(map.size()));
    if (registered->second == plan) return false;
    registered->second = plan;
  }
  s.register_job(nspace, plan);
  return true;
}

bool LocalLauncher::signal(pid_t pid, int sig) {
  std::lock_guard lock(impl_->mutex_);
  if (impl_->running_.count(pid) == 0) return false;
  return ::kill(pid, sig) == 0;
}

std::size_t LocalLauncher::running() const {
  std::lock_guard lock(impl_->mutex_);
  return impl_->running_.size();
}

}  // namespace bellows::daemon
