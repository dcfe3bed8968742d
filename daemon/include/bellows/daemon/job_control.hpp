#pragma once
// What a PMIx_Job_control call asks, read from its targets and directives (the job_control
// upcall of bellowsd's PmixServer), without a PMIx server: which rank or the whole job, and
// whether to signal or terminate it. docs/daemon.md, "PMIx_Job_control", says what Bellows
// answers and how it differs from PRRTE.
//
// Thread safety: pure functions of their arguments.

#include <bellows/daemon/payload.hpp>
#include <bellows/protocol/messages.hpp>

#include <pmix_common.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace bellows::daemon {

/// A PMIx_Job_control as Bellows carries it out: one target (a rank of the job, or every
/// rank), one action.
struct JobControlOrder {
  ProcId requester;
  protocol::JobControlAction action = protocol::JobControlAction::signal;
  int signal = 0;                                ///< the signal, for action signal
  std::uint32_t target_rank = protocol::kAllRanks;  ///< a job rank, or every rank
};

/// The order, or why there is none: `status` PMIX_SUCCESS with `order`, or the status to
/// answer (PMIX_ERR_NOT_SUPPORTED for a directive Bellows does not carry out,
/// PMIX_ERR_BAD_PARAM for a target or value that is wrong) and `error` naming what was wrong.
struct JobControlReading {
  pmix_status_t status = PMIX_SUCCESS;
  std::string error;
  JobControlOrder order;
};

/// Reads a PMIx_Job_control of `requester`: exactly one target, of the job's namespace
/// `job_nspace` ("" while the daemon knows no job: refused), rank or PMIX_RANK_WILDCARD; and
/// exactly one of PMIX_JOB_CTRL_SIGNAL (an int, 1..64) or PMIX_JOB_CTRL_TERMINATE (a bool,
/// true). Another `pmix.jctrl.*` directive is NOT-SUPPORTED and named; other keys (qualifiers
/// PMIx adds) are ignored.
JobControlReading read_job_control(const ProcId& requester, const pmix_proc_t* targets, std::size_t ntargets,
                                   const pmix_info_t* directives, std::size_t ndirectives,
                                   std::string_view job_nspace);

/// "signal 19 to local-7:2", "terminate local-7:*": the order, readable.
std::string describe(const JobControlOrder& order, std::string_view job_nspace);

}  // namespace bellows::daemon
