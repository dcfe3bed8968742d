#pragma once
// Job records and errors of libslurm as the Slurm backend uses them: a job's record copied out
// of libslurm's buffer, parsing job ids, and libslurm's error numbers as RmStatus. Private to
// the Slurm backend (slurm_resource_manager.cpp, slurm_takeover.cpp).

#include "bellows/controller/resource_manager.hpp"
#include "bellows/controller/slurm_expand_strategy.hpp"
#include "slurm_handles.hpp"

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

namespace bellows::controller::slurm {

/// The RmCode of a libslurm error number (unknown_job, unknown_node, unavailable, denied).
RmCode code_of(int errnum);

/// libslurm's answer to a failed call, with the context of the operation in front.
RmStatus slurm_error(const std::string& context, const char* call, int errnum);

/// "PENDING", "RUNNING", ... for a job state.
const char* state_name(std::uint32_t state);

/// "Resources", "Priority", ... for a pending job's reason.
std::string reason_name(std::uint16_t reason);

/// True when the comma-separated list holds name.
bool in_list(const char* comma_list, const std::string& name);

/// What the backend needs of a job record, copied out of libslurm's buffer.
struct Job {
  std::uint32_t id = 0;
  std::uint32_t state = 0;  ///< base state (JOB_PENDING, JOB_RUNNING, ...)
  std::uint16_t reason = 0;
  std::vector<std::string> nodes;
  std::string batch_host;
  std::string partition;
  std::string account;
  std::string comment;
  std::uint32_t time_limit = INFINITE;  ///< minutes; INFINITE or NO_VAL: none
  std::time_t end_time = 0;             ///< when the time limit ends a running job
  std::uint32_t user_id = 0;
  std::uint32_t group_id = 0;
};

/// Parses a Slurm job id; status unknown_job (or bad_request for an empty id) otherwise.
RmStatus parse_job_id(const std::string& job, std::uint32_t& id);

/// The job's record (one slurmctld RPC); unknown_job when slurmctld has none.
RmResult<Job> load_job(std::uint32_t id);

bool contains(const std::vector<std::string>& v, const std::string& s);

/// Job `job` (running on `nodes` by its record) and its companions as slurmctld has them now,
/// checked for a takeover (check_slurm_takeover); a failed load of any is the status.
/// Defined in slurm_takeover.cpp.
SlurmTakeover check_takeover(const std::string& job, const std::vector<std::string>& nodes,
                             const std::vector<CompanionAllocation>& companions);

}  // namespace bellows::controller::slurm
