#include <bellows/daemon/slurm_orphan.hpp>
#include <bellows/runtime/first_node_takeover.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

extern char** environ;

namespace bellows::daemon {
namespace {

/// A job id or node name that may go on a command line unquoted.
bool plain_word(std::string_view word) {
  return !word.empty() && std::ranges::all_of(word, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

/// The standard output and error of `command` (run by /bin/sh under coreutils' timeout), ""
/// when it could not run or said nothing. A stop requested through `stop` ends it within
/// 0.1 s (SIGTERM to `timeout`, which passes it on to the command) and gives "": a daemon that
/// stops does not wait for a question to a slurmctld it cannot reach.
std::string output_of(const std::string& command, std::chrono::seconds timeout, const std::stop_token& stop = {}) {
  // exec: the shell's process is `timeout` itself, whose SIGTERM reaches the command.
  const std::string bounded = "exec timeout " + std::to_string(timeout.count()) + " " + command + " 2>&1";
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  // Every string the child uses is made before fork: a threaded process forks.
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {};
  }
  if (child == 0) {
    // The daemon blocks its stop signals in every thread (sigwaitinfo), and a mask outlives
    // exec: `timeout` and the command would never see the SIGTERM that ends them.
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(fds[1], STDOUT_FILENO);
    ::execl("/bin/sh", "sh", "-c", bounded.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string text;
  bool stopped = false;
  std::array<char, 4096> chunk{};
  pollfd readable{fds[0], POLLIN, 0};
  for (;;) {
    if (!stopped && stop.stop_requested()) {
      ::kill(child, SIGTERM);
      stopped = true;
    }
    const int ready = ::poll(&readable, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t got = ::read(fds[0], chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    text.append(chunk.data(), static_cast<std::size_t>(got));
  }
  ::close(fds[0]);
  while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  return stopped ? std::string() : text;
}

std::string field(const ScontrolRecord& record, std::string_view key) {
  const auto it = record.find(key);
  return it == record.end() ? std::string() : it->second;
}

/// The words of `text`, split at white space.
std::vector<std::string> words_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

/// Starts `argv` in a new session, detached from this process (a grandchild: nothing of it is
/// this daemon's to reap, and the daemon's end does not take it along), its standard output
/// and error appended to `output`, its input /dev/null. Returns "" or why it could not start.
std::string start_detached(const std::vector<std::string>& argv, const std::string& output) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Every string the child uses is made before fork: a threaded process forks.
  const pid_t child = ::fork();
  if (child < 0) return std::string("fork: ") + std::strerror(errno);
  if (child == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out = ::open(output.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return {};
}

}  // namespace

ScontrolRecord parse_scontrol_record(std::string_view line) {
  ScontrolRecord record;
  std::size_t at = 0;
  while (at < line.size()) {
    while (at < line.size() && (line[at] == ' ' || line[at] == '\n' || line[at] == '\t')) ++at;
    const std::size_t end = std::min(line.find_first_of(" \n\t", at), line.size());
    const std::string_view word = line.substr(at, end - at);
    at = end;
    const std::size_t equals = word.find('=');
    if (equals == std::string_view::npos || equals == 0) continue;
    record.emplace(std::string(word.substr(0, equals)), std::string(word.substr(equals + 1)));
  }
  return record;
}

OrphanedJobVerdict judge_orphaned_job(const std::string& job_id, const ScontrolRecord& job,
                                      const ScontrolRecord& batch_node) {
  const std::string state = field(job, "JobState");
  if (state != "RUNNING") return {false, "job " + job_id + " is " + (state.empty() ? "unknown" : state)};
  if (field(job, "BatchFlag") != "1") return {false, "job " + job_id + " is not a batch job"};
  const std::string batch_host = field(job, "BatchHost");
  if (batch_host.empty() || batch_host == "(null)") return {false, "job " + job_id + " names no batch host"};
  const std::string node_state = field(batch_node, "State");
  if (node_state.find("DOWN") == std::string::npos) {
    return {false, "the batch host " + batch_host + " of job " + job_id + " is " +
                       (node_state.empty() ? "unknown" : node_state)};
  }
  return {true, "the job's first node " + batch_host + " (its batch host, where `bellows run` ran) is " +
                    node_state + ": Slurm took it out of job " + job_id +
                    " (no-kill), and the batch script and the job's controller died with it; nothing "
                    "else would end the job before its time limit"};
}

bool companion_left_behind(const std::string& job_state) {
  for (const char* alive : {"RUNNING", "SUSPENDED", "RESIZING"}) {
    if (job_state == alive) return false;
  }
  return true;
}

std::string end_job_if_batch_host_lost(const std::string& node, std::chrono::seconds timeout) {
  const char* step_job = std::getenv("SLURM_JOB_ID");
  if (step_job == nullptr || !plain_word(step_job)) return "not a Slurm job step: nothing to end";
  // The job's own id; the step may run in a companion allocation of it (SLURM_JOB_ID).
  const char* served = std::getenv("BELLOWS_SLURM_JOB");
  const std::string job_id = served != nullptr && plain_word(served) ? served : step_job;
  const std::string allocation = step_job;
  const std::string answer = output_of("scontrol show job -o " + job_id, timeout);
  const ScontrolRecord job = parse_scontrol_record(answer);
  // "slurm_load_jobs error: Invalid job id specified": slurmctld no longer knows the job. No
  // answer at all (a node cut off from slurmctld too): nothing is known, nothing is done.
  const bool forgotten = answer.find("Invalid job id") != std::string::npos;
  if (job.count("JobState") == 0 && !forgotten) return "no answer from slurmctld about job " + job_id + ": left as it is";
  if (allocation != job_id && companion_left_behind(field(job, "JobState"))) {
    (void)output_of("scancel " + allocation, timeout);
    return "job " + job_id + " is " + (job.empty() ? std::string("gone") : field(job, "JobState")) +
           ": cancelled the companion allocation " + allocation + " this daemon ran in";
  }
  const std::string batch_host = field(job, "BatchHost");
  ScontrolRecord batch_node;
  if (plain_word(batch_host)) batch_node = parse_scontrol_record(output_of("scontrol show node -o " + batch_host, timeout));
  const OrphanedJobVerdict verdict = judge_orphaned_job(job_id, job, batch_node);
  if (!verdict.cancel) return verdict.why + ": left as it is";
  const std::string said = "bellows: " + verdict.why + "; the daemon of " + node + " cancels it.";
  const std::string output = field(job, "StdOut");
  if (!output.empty() && output.front() == '/') {
    std::ofstream out(output, std::ios::app);
    out << said << '\n';
  }
  (void)output_of("scancel " + job_id, timeout);
  if (allocation != job_id) {
    (void)output_of("scancel " + allocation, timeout);  // the companion this daemon ran in
    return said + " (and its companion allocation " + allocation + ")";
  }
  return said;
}

namespace {

/// What a daemon of `node` does with `plan`, made of slurmctld's record `job` of job `job_id`.
TakeoverAttempt attempt_takeover(const std::string& job_id, const std::string& node, const ScontrolRecord& job,
                                 const runtime::FirstNodeTakeover& plan) {
  if (!plan.take_over) return {false, "job " + job_id + ": " + plan.why + ": no takeover", nullptr};
  if (plan.node != node) return {true, "job " + job_id + ": " + plan.why + "; this daemon waits for it", nullptr};
  const char* cli = std::getenv("BELLOWS_CLI");
  if (cli == nullptr || *cli == '\0')
    return {true, "job " + job_id + ": " + plan.why + ", but BELLOWS_CLI is not set: no bellows command to start", nullptr};
  const std::string output = field(job, "StdOut");
  if (output.empty() || output.front() != '/')
    return {true, "job " + job_id + ": " + plan.why + ", but its output file (StdOut) is '" + output +
                      "': no controller started", nullptr};
  {
    std::ofstream out(output, std::ios::app);
    out << "bellows: " << plan.why << "." << std::endl;
  }
  const std::vector<std::string> argv = {"srun", "--jobid", job_id, "--overlap", "-N1", "-n1", "-w", node,
                                         "--job-name=bellows-takeover", cli, "run", "--attach", job_id};
  if (const std::string failed = start_detached(argv, output); !failed.empty())
    return {true, "job " + job_id + ": " + plan.why + ", but it could not be started: " + failed, nullptr};
  std::string command;
  for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
  return {true, "job " + job_id + ": " + plan.why + ": started " + command + " (output to " + output + ")", nullptr};
}

}  // namespace

TakeoverAttempt start_takeover_if_first_node_lost(const std::string& node, std::chrono::seconds timeout,
                                                  const std::stop_token& stop) {
  const char* step_job = std::getenv("SLURM_JOB_ID");
  if (step_job == nullptr || !plain_word(step_job)) return {true, "not a Slurm job step: no takeover", nullptr};
  const char* served = std::getenv("BELLOWS_SLURM_JOB");
  const std::string job_id = served != nullptr && plain_word(served) ? served : step_job;
  const std::string answer = output_of("scontrol show job -o " + job_id, timeout, stop);
  const ScontrolRecord job = parse_scontrol_record(answer);
  if (job.count("JobState") == 0) {
    // "slurm_load_jobs error: Invalid job id specified": slurmctld no longer knows the job.
    if (answer.find("Invalid job id") != std::string::npos)
      return {false, "job " + job_id + " is unknown to slurmctld: no takeover",
              std::make_shared<const runtime::FirstNodeLossFacts>()};
    return {false, "no answer from slurmctld about job " + job_id, nullptr};
  }
  runtime::FirstNodeLossFacts facts;
  facts.job_state = field(job, "JobState");
  facts.batch_job = field(job, "BatchFlag") == "1";
  facts.batch_host = field(job, "BatchHost");
  if (plain_word(facts.batch_host))
    facts.batch_host_state = field(parse_scontrol_record(output_of("scontrol show node -o " + facts.batch_host, timeout, stop)), "State");
  // NodeList is a host list ("n[2-3]"): scontrol expands it in slurmctld's order.
  const std::string node_list = field(job, "NodeList");
  if (!node_list.empty() && node_list != "(null)" &&
      std::ranges::all_of(node_list, [](char c) { return c != '\'' && c != ' '; }))
    facts.job_nodes = words_of(output_of("scontrol show hostnames '" + node_list + "'", timeout, stop));
  const runtime::FirstNodeTakeover plan = runtime::plan_first_node_takeover(facts);
  const auto said = std::make_shared<const runtime::FirstNodeLossFacts>(facts);
  TakeoverAttempt attempt = attempt_takeover(job_id, node, job, plan);
  attempt.slurmctld_said = said;
  return attempt;
}

std::optional<double> parse_slurmd_timeout(std::string_view config) {
  constexpr std::string_view kKey = "SlurmdTimeout";
  for (std::size_t at = config.find(kKey); at != std::string_view::npos; at = config.find(kKey, at + 1)) {
    if (at > 0 && config[at - 1] != '\n') continue;
    std::size_t value = config.find_first_not_of(" \t", at + kKey.size());
    if (value == std::string_view::npos || config[value] != '=') continue;
    value = config.find_first_not_of(" \t", value + 1);
    if (value == std::string_view::npos) return std::nullopt;
    double seconds = 0.0;
    const auto [end, error] = std::from_chars(config.data() + value, config.data() + config.size(), seconds);
    if (error != std::errc() || end == config.data() + value) return std::nullopt;
    return seconds;
  }
  return std::nullopt;
}

std::optional<double> slurmd_timeout_seconds(std::chrono::seconds timeout, const std::stop_token& stop) {
  return parse_slurmd_timeout(output_of("scontrol show config", timeout, stop));
}


}  // namespace bellows::daemon
