#pragma once
// RAII over libslurm: the library's lifetime (slurm_init / slurm_fini) and every result
// libslurm allocates, each freed with its matching slurm_free_*. Private to the Slurm backend.

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include <memory>
#include <string>

namespace bellows::controller::slurm {

/// slurm_init(nullptr) (slurm.conf from SLURM_CONF or the default path) on construction,
/// slurm_fini() on destruction. One per process at a time.
class Library {
 public:
  Library() { slurm_init(nullptr); }
  ~Library() { slurm_fini(); }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
};

struct JobInfoFree {
  void operator()(job_info_msg_t* p) const noexcept { slurm_free_job_info_msg(p); }
};
struct NodeInfoFree {
  void operator()(node_info_msg_t* p) const noexcept { slurm_free_node_info_msg(p); }
};
struct AllocationFree {
  void operator()(resource_allocation_response_msg_t* p) const noexcept {
    slurm_free_resource_allocation_response_msg(p);
  }
};

struct StepInfoFree {
  void operator()(job_step_info_response_msg_t* p) const noexcept { slurm_free_job_step_info_response_msg(p); }
};

struct ConfigFree {
  void operator()(slurm_conf_t* p) const noexcept { slurm_free_ctl_conf(p); }
};

using JobInfo = std::unique_ptr<job_info_msg_t, JobInfoFree>;
using NodeInfo = std::unique_ptr<node_info_msg_t, NodeInfoFree>;
using Allocation = std::unique_ptr<resource_allocation_response_msg_t, AllocationFree>;
using Config = std::unique_ptr<slurm_conf_t, ConfigFree>;
using StepInfo = std::unique_ptr<job_step_info_response_msg_t, StepInfoFree>;

/// libslurm's last error on this thread, as "slurm_load_job: Invalid job id specified".
inline std::string error_text(const char* call, int errnum) {
  return std::string(call) + ": " + slurm_strerror(errnum);
}

}  // namespace bellows::controller::slurm
