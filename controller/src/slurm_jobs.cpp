#include "slurm_jobs.hpp"

#include "bellows/controller/node_list.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <utility>

namespace bellows::controller::slurm {

RmCode code_of(int errnum) {
  switch (errnum) {
    case ESLURM_INVALID_JOB_ID:
      return RmCode::unknown_job;
    case ESLURM_INVALID_NODE_NAME:
      return RmCode::unknown_node;
    case SLURM_COMMUNICATIONS_CONNECTION_ERROR:
    case SLURM_COMMUNICATIONS_SEND_ERROR:
    case SLURM_COMMUNICATIONS_RECEIVE_ERROR:
    case SLURM_COMMUNICATIONS_SHUTDOWN_ERROR:
    case SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR:
    case SLURMCTLD_COMMUNICATIONS_SEND_ERROR:
    case SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR:
    case SLURMCTLD_COMMUNICATIONS_SHUTDOWN_ERROR:
    case SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT:
    case ESLURM_IN_STANDBY_MODE:
      return RmCode::unavailable;
    default:
      return RmCode::denied;
  }
}

/// libslurm's answer to a failed call, with the context of the operation in front.
RmStatus slurm_error(const std::string& context, const char* call, int errnum) {
  return {code_of(errnum), context + slurm::error_text(call, errnum)};
}

const char* state_name(std::uint32_t state) {
  static constexpr const char* names[] = {"PENDING",   "RUNNING",  "SUSPENDED", "COMPLETED",
                                          "CANCELLED", "FAILED",   "TIMEOUT",   "NODE_FAIL",
                                          "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"};
  const std::uint32_t base = state & JOB_STATE_BASE;
  return base < std::size(names) ? names[base] : "UNKNOWN";
}

std::string reason_name(std::uint16_t reason) {
  switch (reason) {
    case WAIT_NO_REASON: return "None";
    case WAIT_PRIORITY: return "Priority";
    case WAIT_DEPENDENCY: return "Dependency";
    case WAIT_RESOURCES: return "Resources";
    case WAIT_DEP_INVALID: return "DependencyNeverSatisfied";
    default: return "reason " + std::to_string(reason);
  }
}

bool in_list(const char* comma_list, const std::string& name) {
  if (comma_list == nullptr) return false;
  std::string_view rest(comma_list);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    if (rest.substr(0, comma) == name) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}


/// Parses a Slurm job id; status unknown_job (or bad_request for an empty id) otherwise.
RmStatus parse_job_id(const std::string& job, std::uint32_t& id) {
  if (job.empty()) return {RmCode::bad_request, "empty job id"};
  auto [ptr, ec] = std::from_chars(job.data(), job.data() + job.size(), id);
  if (ec != std::errc() || ptr != job.data() + job.size() || id == 0) {
    return {RmCode::unknown_job, "'" + job + "' is no Slurm job id"};
  }
  return {RmCode::ok, ""};
}

RmResult<Job> load_job(std::uint32_t id) {
  job_info_msg_t* raw = nullptr;
  if (slurm_load_job(&raw, id, SHOW_ALL) != SLURM_SUCCESS) {
    const int errnum = slurm_get_errno();
    return {slurm_error("job " + std::to_string(id) + ": ", "slurm_load_job", errnum), {}};
  }
  const slurm::JobInfo info(raw);
  for (std::uint32_t i = 0; i < info->record_count; ++i) {
    const slurm_job_info_t& r = info->job_array[i];
    if (r.job_id != id) continue;
    Job job;
    job.id = id;
    job.state = r.job_state & JOB_STATE_BASE;
    job.reason = r.state_reason;
    try {
      job.nodes = expand_hostlist(r.nodes != nullptr ? r.nodes : "");
    } catch (const std::invalid_argument& e) {
      return {{RmCode::unavailable, "job " + std::to_string(id) + ": " + e.what()}, {}};
    }
    job.batch_host = r.batch_host != nullptr ? r.batch_host : "";
    job.partition = r.partition != nullptr ? r.partition : "";
    job.account = r.account != nullptr ? r.account : "";
    job.comment = r.comment != nullptr ? r.comment : "";
    job.time_limit = r.time_limit;
    job.end_time = r.end_time;
    job.user_id = r.user_id;
    job.group_id = r.group_id;
    return {{RmCode::ok, ""}, std::move(job)};
  }
  return {{RmCode::unknown_job, "job " + std::to_string(id) + ": slurmctld has no record of it"},
          {}};
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace bellows::controller::slurm
