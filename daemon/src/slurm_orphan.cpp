#include <bellows/daemon/slurm_orphan.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

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
/// when it could not run or said nothing.
std::string output_of(const std::string& command, std::chrono::seconds timeout) {
  const std::string bounded = "timeout " + std::to_string(timeout.count()) + " " + command + " 2>&1";
  const std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(bounded.c_str(), "r"), &::pclose);
  if (!pipe) return {};
  std::string text;
  std::array<char, 4096> chunk{};
  while (std::fgets(chunk.data(), static_cast<int>(chunk.size()), pipe.get()) != nullptr) text += chunk.data();
  return text;
}

std::string field(const ScontrolRecord& record, std::string_view key) {
  const auto it = record.find(key);
  return it == record.end() ? std::string() : it->second;
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

}  // namespace bellows::daemon
