// The Slurm backend's part in a job taken over by `bellows run --attach` (docs/slurm.md,
// "Attaching to a running job" and "The job's first node"): the job directory a controller
// publishes in the job's comment and the one an attaching controller reads there, the check of
// the job and its companions before the takeover, and the end of a job whose batch script died
// with its first node (slurm_complete_job).

#include "bellows/controller/slurm_resource_manager.hpp"

#include "slurm_handles.hpp"
#include "slurm_jobs.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::controller {

namespace slurm {

SlurmTakeover check_takeover(const std::string& job, const std::vector<std::string>& nodes,
                             const std::vector<CompanionAllocation>& companions) {
  std::vector<std::string> ids = {job};
  for (const CompanionAllocation& c : companions) ids.push_back(c.id);
  std::vector<SlurmJobView> views;
  for (const std::string& id : ids) {
    std::uint32_t number = 0;
    if (!parse_job_id(id, number).ok()) continue;  // check_slurm_takeover names it
    auto loaded = load_job(number);
    if (loaded.status.code == RmCode::unknown_job) continue;
    if (!loaded.status.ok()) {
      SlurmTakeover failed;
      failed.status = loaded.status;
      return failed;
    }
    views.push_back({id, state_name(loaded.value.state), loaded.value.comment, loaded.value.nodes,
                     loaded.value.batch_host});
  }
  return check_slurm_takeover(job, nodes, companions, views);
}

}  // namespace slurm

namespace {

/// The job comment's prefix in front of the job directory (publish_job_dir).
constexpr std::string_view kJobDirTag = "bellows:";

using slurm::load_job;
using slurm::parse_job_id;
using slurm::slurm_error;

}  // namespace

RmStatus SlurmResourceManager::publish_job_dir(const std::string& job, const std::string& dir) {
  std::uint32_t id = 0;
  if (RmStatus parsed = parse_job_id(job, id); !parsed.ok()) return parsed;
  auto loaded = load_job(id);
  if (!loaded.status.ok()) return loaded.status;
  const std::string& comment = loaded.value.comment;
  if (!comment.empty() && !comment.starts_with(kJobDirTag)) {
    return {RmCode::denied, "job " + job + " has a comment of its own ('" + comment + "'), kept"};
  }
  std::string text = std::string(kJobDirTag) + dir;
  job_desc_msg_t desc;
  slurm_init_job_desc_msg(&desc);
  desc.job_id = id;
  desc.comment = text.data();
  if (slurm_update_job(&desc) != SLURM_SUCCESS) {
    const int errnum = slurm_get_errno();
    return slurm_error("job " + job + ": comment: ", "slurm_update_job", errnum);
  }
  return {RmCode::ok, ""};
}

RmResult<std::string> SlurmResourceManager::published_job_dir(const std::string& job) {
  std::uint32_t id = 0;
  if (RmStatus parsed = parse_job_id(job, id); !parsed.ok()) return {parsed, {}};
  auto loaded = load_job(id);
  if (!loaded.status.ok()) return {loaded.status, {}};
  const std::string& comment = loaded.value.comment;
  if (comment.starts_with(kCompanionCommentPrefix)) {
    const std::string owner = comment.substr(kCompanionCommentPrefix.size());
    return {{RmCode::denied, "Slurm job " + job + " is a companion allocation of job " + owner +
                                 ": ask for job " + owner},
            {}};
  }
  if (!comment.starts_with(kJobDirTag) || comment.size() == kJobDirTag.size()) {
    return {{RmCode::denied, "Slurm job " + job + " was not started by bellows run (its comment names no "
                             "job directory)"},
            {}};
  }
  return {{RmCode::ok, ""}, comment.substr(kJobDirTag.size())};
}

RmStatus SlurmResourceManager::complete_job(const std::string& job, int exit_status) {
  std::uint32_t id = 0;
  if (RmStatus parsed = parse_job_id(job, id); !parsed.ok()) return parsed;
  // The job's return code as a wait status: its exit status in the second byte.
  const std::uint32_t return_code = static_cast<std::uint32_t>(exit_status & 0xff) << 8;
  if (slurm_complete_job(id, return_code) != SLURM_SUCCESS)
    return slurm_error("ending job " + job + ": ", "slurm_complete_job", slurm_get_errno());
  return {};
}

}  // namespace bellows::controller
