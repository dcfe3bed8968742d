#include <bellows/daemon/job_control.hpp>

#include <pmix.h>

#include <cstring>

namespace bellows::daemon {
namespace {

constexpr std::string_view kDirectivePrefix = "pmix.jctrl.";

/// An int of any PMIx integer type, or false.
bool int_value(const pmix_value_t& v, long long& out) {
  switch (v.type) {
    case PMIX_INT: out = v.data.integer; return true;
    case PMIX_INT8: out = v.data.int8; return true;
    case PMIX_INT16: out = v.data.int16; return true;
    case PMIX_INT32: out = v.data.int32; return true;
    case PMIX_INT64: out = v.data.int64; return true;
    case PMIX_UINT: out = v.data.uint; return true;
    case PMIX_UINT8: out = v.data.uint8; return true;
    case PMIX_UINT16: out = v.data.uint16; return true;
    case PMIX_UINT32: out = v.data.uint32; return true;
    default: return false;
  }
}

}  // namespace

JobControlReading read_job_control(const ProcId& requester, const pmix_proc_t* targets, std::size_t ntargets,
                                   const pmix_info_t* directives, std::size_t ndirectives,
                                   std::string_view job_nspace) {
  JobControlReading reading;
  reading.order.requester = requester;
  // A refusal names who asked too: the daemon logs it.
  const auto refused = [&requester](pmix_status_t status, std::string error) {
    JobControlReading refusal;
    refusal.status = status;
    refusal.error = std::move(error);
    refusal.order.requester = requester;
    return refusal;
  };
  int actions = 0;
  for (std::size_t i = 0; i < ndirectives; ++i) {
    const pmix_info_t& d = directives[i];
    const std::string_view key(d.key);
    if (PMIX_CHECK_KEY(&d, PMIX_JOB_CTRL_SIGNAL)) {
      long long signal = 0;
      if (!int_value(d.value, signal) || signal < 1 || signal > 64)
        return refused(PMIX_ERR_BAD_PARAM, "pmix.jctrl.sig must be a signal number (1 to 64)");
      reading.order.action = protocol::JobControlAction::signal;
      reading.order.signal = static_cast<int>(signal);
      ++actions;
    } else if (PMIX_CHECK_KEY(&d, PMIX_JOB_CTRL_TERMINATE)) {
      if (d.value.type != PMIX_BOOL)
        return refused(PMIX_ERR_BAD_PARAM, "pmix.jctrl.term must be a bool");
      if (!d.value.data.flag) continue;  // "do not terminate" asks nothing
      reading.order.action = protocol::JobControlAction::terminate;
      reading.order.signal = 0;
      ++actions;
    } else if (PMIX_CHECK_KEY(&d, PMIX_JOB_CTRL_ID)) {
      continue;  // the requester's name for its request: nothing to carry out
    } else if (key.starts_with(kDirectivePrefix)) {
      return refused(PMIX_ERR_NOT_SUPPORTED, "job control directive " + std::string(key) +
                                                 " is not supported (only pmix.jctrl.sig and pmix.jctrl.term)");
    }
  }
  if (actions == 0)
    return refused(PMIX_ERR_NOT_SUPPORTED,
                   "no job control directive Bellows carries out (pmix.jctrl.sig or pmix.jctrl.term)");
  if (actions > 1) return refused(PMIX_ERR_BAD_PARAM, "more than one directive (one of pmix.jctrl.sig, pmix.jctrl.term)");
  if (targets == nullptr || ntargets == 0)
    return refused(PMIX_ERR_BAD_PARAM, "no target (name a rank of the job, or the job with PMIX_RANK_WILDCARD)");
  if (ntargets > 1)
    return refused(PMIX_ERR_NOT_SUPPORTED, std::to_string(ntargets) + " targets: one per call (a rank, or the job)");
  if (job_nspace.empty()) return refused(PMIX_ERR_NOT_FOUND, "this daemon knows no job yet");
  const ProcId target = from_pmix(targets[0]);
  const std::string shown = target.rank == PMIX_RANK_WILDCARD ? target.nspace + ":*" : to_string(target);
  if (target.nspace != job_nspace)
    return refused(PMIX_ERR_BAD_PARAM, "target " + shown + " is not of job " + std::string(job_nspace));
  if (target.rank == PMIX_RANK_WILDCARD) {
    reading.order.target_rank = protocol::kAllRanks;
  } else if (target.rank >= protocol::kAllRanks) {
    return refused(PMIX_ERR_BAD_PARAM, "target " + shown + " names no rank");
  } else {
    reading.order.target_rank = target.rank;
  }
  return reading;
}

std::string describe(const JobControlOrder& order, std::string_view job_nspace) {
  const std::string target = std::string(job_nspace) + ":" +
                             (order.target_rank == protocol::kAllRanks ? "*" : std::to_string(order.target_rank));
  if (order.action == protocol::JobControlAction::terminate) return "terminate " + target;
  return "signal " + std::to_string(order.signal) + " to " + target;
}

}  // namespace bellows::daemon
