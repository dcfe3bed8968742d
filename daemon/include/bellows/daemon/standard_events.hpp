#pragma once
// The standard PMIx events bellowsd raises besides its own (bellows/protocol/pmix_events.hpp),
// for PMIx tools and clients that know the standard and not Bellows: a lost rank, a lost node
// and the job's end. Which events a failure or a stop becomes, and what they carry, is decided
// here from the controller's messages alone; PmixServer::notify_standard() delivers them.
//
// A process is named as the PMIx queries name it (bellows/daemon/queries.hpp): the job's
// namespace (its id, protocol::JobView::job) and its rank in the job, so that an event's
// affected process is the same entry as in the process table.
//
// Thread safety: pure functions and value types.

#include <bellows/daemon/payload.hpp>
#include <bellows/protocol/messages.hpp>

#include <pmix_common.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::daemon {

/// One standard event bellowsd raises: its code (docs/daemon.md, "Standard PMIx events"), its
/// PMIx constant and when.
struct StandardEventCode {
  pmix_status_t code;
  std::string_view constant;
  std::string_view when;
};

inline constexpr StandardEventCode kStandardEventCodes[] = {
    {PMIX_EVENT_PROC_TERMINATED, "PMIX_EVENT_PROC_TERMINATED",
     "a rank of the job ended without leaving it (not known to be by a signal), or its node was lost"},
    {PMIX_ERR_PROC_ABORTED_BY_SIG, "PMIX_ERR_PROC_ABORTED_BY_SIG",
     "a rank of the job was killed by a signal, as the controller learnt it"},
    {PMIX_EVENT_NODE_DOWN, "PMIX_EVENT_NODE_DOWN", "a node of the job whose daemon went away"},
    {PMIX_EVENT_JOB_END, "PMIX_EVENT_JOB_END", "the job ended (the controller's Stop)"},
    {PMIX_NOTIFY_ALLOC_COMPLETE, "PMIX_NOTIFY_ALLOC_COMPLETE",
     "the resize an allocation request started ended (to its requester alone)"},
};

/// The PMIx constant of a code of kStandardEventCodes ("PMIX_EVENT_NODE_DOWN"); "" for others.
std::string_view standard_event_constant(pmix_status_t code);

/// One event to raise, as the PMIx attributes it carries.
struct StandardEvent {
  pmix_status_t code = PMIX_EVENT_PROC_TERMINATED;
  /// PMIX_EVENT_AFFECTED_PROC when one, PMIX_EVENT_AFFECTED_PROCS when several; none when
  /// empty (the job's namespace is not known yet, or the lost node's rank never was).
  std::vector<ProcId> affected;
  /// PMIX_HOSTNAME: the node the affected process ran on, or the node that went down; "" none.
  std::string hostname;
  /// PMIX_EXIT_CODE: the rank's exit status, when it exited and its status is known.
  std::optional<int> exit_code;
  /// PMIX_EVENT_TEXT_MESSAGE: readable, what the controller said of it.
  std::string text;
  bool operator==(const StandardEvent&) const = default;
};

/// What a failure the controller told of (RanksLost) becomes, in order: for a lost node
/// (cause node_lost), PMIX_EVENT_NODE_DOWN per node with its ranks as affected processes; then
/// per lost rank PMIX_ERR_PROC_ABORTED_BY_SIG when the message names a signal, else
/// PMIX_EVENT_PROC_TERMINATED, with PMIX_EXIT_CODE when it names an exit status. A rank is
/// paired with a node by position when the two lists are as long, else named with the nodes
/// joined. `job_nspace` "" leaves the processes unnamed.
std::vector<StandardEvent> lost_events(const protocol::RanksLost& lost, const std::string& job_nspace);

/// PMIX_EVENT_JOB_END for the whole job (affected process: the namespace with
/// PMIX_RANK_WILDCARD, none when `job_nspace` is ""), with `reason` as its text.
StandardEvent job_end_event(const std::string& job_nspace, const std::string& reason);

}  // namespace bellows::daemon
