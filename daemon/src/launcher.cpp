#include <bellows/daemon/launcher.hpp>
#include <bellows/daemon/stop_signals.hpp>

#include <pmix.h>
#include <pmix_server.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
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

std::string joined_ranks(std::uint32_t n) {
  std::string out;
  for (std::uint32_t r = 0; r < n; ++r) {
    if (r > 0) out += ',';
    out += std::to_string(r);
  }
  return out;
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
  std::set<std::string> nspaces_;
  std::vector<std::thread> watchers_;

  void register_job(const LaunchSpec& spec) {
    const std::string node = server_.options().node_name;
    const std::string ranks = joined_ranks(spec.nprocs);
    char* node_map = nullptr;
    char* proc_map = nullptr;
    pmix_status_t rc = PMIx_generate_regex(node.c_str(), &node_map);
    if (rc != PMIX_SUCCESS) throw PmixError("PMIx_generate_regex", rc);
    rc = PMIx_generate_ppn(ranks.c_str(), &proc_map);
    if (rc != PMIX_SUCCESS) {
      std::free(node_map);
      throw PmixError("PMIx_generate_ppn", rc);
    }
    InfoArray info(7);
    const std::uint32_t size = spec.nprocs;
    const std::uint32_t zero = 0;
    try {
      info.load(0, PMIX_UNIV_SIZE, &size, PMIX_UINT32);
      info.load(1, PMIX_JOB_SIZE, &size, PMIX_UINT32);
      info.load(2, PMIX_LOCAL_SIZE, &size, PMIX_UINT32);
      info.load(3, PMIX_LOCAL_PEERS, ranks.c_str(), PMIX_STRING);
      info.load(4, PMIX_NODE_MAP, node_map, PMIX_REGEX);
      info.load(5, PMIX_PROC_MAP, proc_map, PMIX_REGEX);
      info.load(6, PMIX_APPNUM, &zero, PMIX_UINT32);
    } catch (...) {
      std::free(node_map);
      std::free(proc_map);
      throw;
    }
    std::free(node_map);
    std::free(proc_map);
    pmix_nspace_t nspace;
    PMIX_LOAD_NSPACE(nspace, spec.nspace.c_str());
    rc = PMIx_server_register_nspace(nspace, static_cast<int>(spec.nprocs), info.data(),
                                     info.size(), nullptr, nullptr);
    if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED)
      throw PmixError("PMIx_server_register_nspace(" + spec.nspace + ")", rc);
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
  for (const auto& name : s.nspaces_) {
    pmix_nspace_t nspace;
    PMIX_LOAD_NSPACE(nspace, name.c_str());
    PMIx_server_deregister_nspace(nspace, nullptr, nullptr);
  }
}

std::vector<pid_t> LocalLauncher::launch(const LaunchSpec& spec) {
  Impl& s = *impl_;
  if (spec.nspace.empty()) throw std::invalid_argument("launch: the nspace is empty");
  if (spec.nspace.size() > PMIX_MAX_NSLEN)
    throw std::invalid_argument("launch: nspace '" + spec.nspace + "' is longer than " +
                                std::to_string(PMIX_MAX_NSLEN) + " characters");
  if (spec.argv.empty() || spec.argv[0].empty())
    throw std::invalid_argument("launch " + spec.nspace + ": no program given");
  if (spec.nprocs == 0) throw std::invalid_argument("launch " + spec.nspace + ": 0 processes");
  {
    std::lock_guard lock(s.mutex_);
    if (!s.nspaces_.insert(spec.nspace).second)
      throw std::invalid_argument("launch: nspace '" + spec.nspace + "' was launched already");
  }
  s.register_job(spec);

  std::vector<pid_t> pids;
  for (std::uint32_t rank = 0; rank < spec.nprocs; ++rank) {
    const ProcId id{spec.nspace, rank};
    pmix_proc_t proc = to_pmix(id);
    pmix_status_t rc =
        PMIx_server_register_client(&proc, ::geteuid(), ::getegid(), nullptr, nullptr, nullptr);
    if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED)
      throw PmixError("PMIx_server_register_client(" + to_string(id) + ")", rc);
    PmixArgv pmix_env;
    rc = PMIx_server_setup_fork(&proc, pmix_env.address());
    if (rc != PMIX_SUCCESS) throw PmixError("PMIx_server_setup_fork(" + to_string(id) + ")", rc);

    // Everything the child needs is built before fork: after it, only exec and _exit.
    std::vector<std::string> env_strings;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) env_strings.emplace_back(*e);
    for (const auto& e : spec.env) env_strings.push_back(e);
    for (char** e = pmix_env.get(); e != nullptr && *e != nullptr; ++e) env_strings.emplace_back(*e);
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
