#pragma once
// The PMIx vocabulary between bellowsd (the PMIx server of a node) and the ranks attached to
// it (PMIx tools or clients): event codes, payload keys and the value type each key carries.
// Both sides include this header; nothing here needs linking.
//
// Directions:
// - daemon -> ranks: PMIx_Notify_event(code, payload) with one of the resize event codes.
// - rank -> daemon: PMIx_Allocation_request(EXTEND | RELEASE, PMIX_ALLOC_NUM_NODES = k);
//   the daemon answers with a PMIx status and a kReplyText entry.
// - rank -> daemon: how a resize ended on the rank, as PMIx_Notify_event(kResizeReport,
//   payload, PMIX_RANGE_RM), like the metrics below.
// - rank -> daemon: metrics as PMIx_Notify_event(kRankMetrics, payload, PMIX_RANGE_RM), which
//   PMIx hands to the event handlers the daemon registered and to nobody else (PMIx 4.2.2 does
//   not pass RM-range events to the notify_event upcall). Chosen over PMIx_Log
//   (blocking round trip: the rank would wait for the daemon every iteration) and over
//   PMIx_Job_control (its directives are meant for actions, and it is a round trip as well):
//   a notification is one message, the rank does not wait, and RM range keeps it off other
//   ranks.
//
// Every payload carries kVersion = kProtocolVersion; a receiver refuses another version.
// Value types: counts, ids, ranks and iteration numbers are PMIX_UINT64, fractions and
// times PMIX_DOUBLE, lists PMIX_STRING (comma-separated, no spaces).
//
// kEventCodes and kPayloadKeys list every code and key; docs/daemon.md's tables are checked
// against them (tests/daemon/docs_test.cpp).

#include "bellows/protocol/metrics.hpp"
#include "bellows/protocol/resize_report.hpp"

#include <pmix_common.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace bellows::protocol::pmix {

/// Version of this vocabulary; raise it when a code or key changes meaning.
inline constexpr std::uint64_t kProtocolVersion = 6;

/// PMIx reserves codes more negative than PMIX_EXTERNAL_ERR_BASE for hosts and users; Bellows
/// takes the block just below PMIX_EXTERNAL_ERR_BASE - 100.
inline constexpr pmix_status_t kEventBase = PMIX_EXTERNAL_ERR_BASE - 100;

/// daemon -> ranks: the job grows. Payload: kResizeId, kExpandCount, kExpandHosts.
inline constexpr pmix_status_t kExpandDecided = kEventBase - 1;
/// daemon -> ranks: nodes leave the job, and the ranks on them. Payload: kResizeId,
/// kShrinkNodes.
inline constexpr pmix_status_t kShrinkDecided = kEventBase - 2;
// kEventBase - 3 is not used (it told the ranks of a commit their first rank had reported).
/// daemon -> ranks: the resize kResizeId was given up. Payload: kResizeId, kAbortReason.
inline constexpr pmix_status_t kResizeAborted = kEventBase - 4;
// kEventBase - 5 is not used (it was a metrics request that nothing sent).
/// rank -> daemon (range PMIX_RANGE_RM): one rank's metrics: kMetricsRank and the fields of
/// protocol::Metrics, each under its key (visit_fields() in metrics.hpp).
inline constexpr pmix_status_t kRankMetrics = kEventBase - 6;
/// rank -> daemon (range PMIX_RANGE_RM): how a resize ended on the rank: the fields of
/// protocol::ResizeReport, each under its key (visit_fields() in resize_report.hpp).
inline constexpr pmix_status_t kResizeReport = kEventBase - 7;
/// rank -> daemon (range PMIX_RANGE_RM), right after attaching: the rank's process id, so that
/// the daemon can tell when it ends. Payload: kAttachedPid.
inline constexpr pmix_status_t kRankAttached = kEventBase - 8;
/// rank -> daemon (range PMIX_RANGE_RM), as the rank detaches from its daemon (its program
/// ends): its process going from then on is an end, not a death. Payload: kVersion only.
inline constexpr pmix_status_t kRankDetached = kEventBase - 9;
/// daemon -> ranks: ranks of the job are lost (their process ended without leaving, or their
/// node's daemon went away); the survivors carry on without them. Payload: kFailureId,
/// kLostRanks, kLostNodes, kLostReason. The job's first rank answers with a kResizeReport of
/// outcome recovered under kResizeId = the failure's id once the job runs on without them.
inline constexpr pmix_status_t kRanksLost = kEventBase - 10;

/// A Bellows event code: the name of its constant and its name in logs.
struct EventCode {
  pmix_status_t code;
  std::string_view constant;
  std::string_view name;
};

/// Every Bellows event code.
inline constexpr EventCode kEventCodes[] = {
    {kExpandDecided, "kExpandDecided", "expand-decided"},
    {kShrinkDecided, "kShrinkDecided", "shrink-decided"},
    {kResizeAborted, "kResizeAborted", "resize-aborted"},
    {kRankMetrics, "kRankMetrics", "rank-metrics"},
    {kResizeReport, "kResizeReport", "resize-report"},
    {kRankAttached, "kRankAttached", "rank-attached"},
    {kRankDetached, "kRankDetached", "rank-detached"},
    {kRanksLost, "kRanksLost", "ranks-lost"},
};

/// The name of a Bellows event code, or "" for any other code.
constexpr std::string_view event_name(pmix_status_t code) noexcept {
  for (const auto& event : kEventCodes)
    if (event.code == code) return event.name;
  return "";
}

// ------------------------------------------------------------------ payload keys
// (PMIx keys are at most PMIX_MAX_KEYLEN = 511 characters.)

/// uint64: kProtocolVersion of the sender; in every Bellows payload.
inline constexpr const char* kVersion = "bellows.version";
// kResizeId, the resize's identifier in its decided and aborted events and its reports, is
// declared with the report's keys in resize_report.hpp.
/// uint64: number of ranks (one per node) the job grows by.
inline constexpr const char* kExpandCount = "bellows.expand.count";
/// string: host names of the new ranks, in rank order ("n3,n4").
inline constexpr const char* kExpandHosts = "bellows.expand.hosts";
/// string: nodes given back ("n3,n4").
inline constexpr const char* kShrinkNodes = "bellows.shrink.nodes";
/// string: why a resize was given up.
inline constexpr const char* kAbortReason = "bellows.abort.reason";
/// string: the daemon's answer to an allocation request, readable text.
inline constexpr const char* kReplyText = "bellows.reply.text";

/// string: how the resize an allocation request started ended: "committed", "aborted" or
/// "cancelled" (PMIX_NOTIFY_ALLOC_COMPLETE, to the requester; docs/daemon.md).
inline constexpr const char* kAllocOutcome = "bellows.alloc.outcome";

/// uint64: the process id of a rank that attached (kRankAttached).
inline constexpr const char* kAttachedPid = "bellows.attached.pid";

/// uint64: the failure's id (kRanksLost), in the sequence of the resize ids.
inline constexpr const char* kFailureId = "bellows.failure.id";
/// string: the job ranks lost, ascending ("2,5"); "" when the controller never learnt the
/// lost node's rank.
inline constexpr const char* kLostRanks = "bellows.lost.ranks";
/// string: the nodes the lost ranks ran on ("n2,n5").
inline constexpr const char* kLostNodes = "bellows.lost.nodes";
/// string: how the controller learnt of the loss, readable.
inline constexpr const char* kLostReason = "bellows.lost.reason";

// resize reports (kResizeReport): the ResizeReport fields, whose keys (kResizeId,
// kReportOutcome, kReportJobSize, kReportRanks, kReportText) are declared with them in
// resize_report.hpp.

// rank metrics (kRankMetrics): the rank, then the Metrics fields, whose keys
// (kMetricsIteration, kMetricsReadyTasks, ...) are declared with them in metrics.hpp.
/// uint64: the rank that reports (its rank in the job communicator).
inline constexpr const char* kMetricsRank = "bellows.metrics.rank";

/// A Bellows payload key: the name of its constant and the PMIx data type it carries.
struct PayloadKey {
  std::string_view key;
  std::string_view constant;
  pmix_data_type_t type;
};

/// Every Bellows payload key.
inline constexpr PayloadKey kPayloadKeys[] = {
    {kVersion, "kVersion", PMIX_UINT64},
    {kResizeId, "kResizeId", PMIX_UINT64},
    {kExpandCount, "kExpandCount", PMIX_UINT64},
    {kExpandHosts, "kExpandHosts", PMIX_STRING},
    {kShrinkNodes, "kShrinkNodes", PMIX_STRING},
    {kAbortReason, "kAbortReason", PMIX_STRING},
    {kReplyText, "kReplyText", PMIX_STRING},
    {kAllocOutcome, "kAllocOutcome", PMIX_STRING},
    {kAttachedPid, "kAttachedPid", PMIX_UINT64},
    {kFailureId, "kFailureId", PMIX_UINT64},
    {kLostRanks, "kLostRanks", PMIX_STRING},
    {kLostNodes, "kLostNodes", PMIX_STRING},
    {kLostReason, "kLostReason", PMIX_STRING},
    {kReportOutcome, "kReportOutcome", PMIX_STRING},
    {kReportJobSize, "kReportJobSize", PMIX_UINT64},
    {kReportRanks, "kReportRanks", PMIX_STRING},
    {kReportText, "kReportText", PMIX_STRING},
    {kMetricsRank, "kMetricsRank", PMIX_UINT64},
    {kMetricsReadyTasks, "kMetricsReadyTasks", PMIX_UINT64},
    {kMetricsBusyFraction, "kMetricsBusyFraction", PMIX_DOUBLE},
    {kMetricsStealsSent, "kMetricsStealsSent", PMIX_UINT64},
    {kMetricsStealsFailed, "kMetricsStealsFailed", PMIX_UINT64},
    {kMetricsIterationSeconds, "kMetricsIterationSeconds", PMIX_DOUBLE},
    {kMetricsIteration, "kMetricsIteration", PMIX_UINT64},
    {kMetricsJobGflops, "kMetricsJobGflops", PMIX_DOUBLE},
    {kMetricsGraphWorkSeconds, "kMetricsGraphWorkSeconds", PMIX_DOUBLE},
    {kMetricsGraphCriticalPathSeconds, "kMetricsGraphCriticalPathSeconds", PMIX_DOUBLE},
    {kMetricsLanesPerRank, "kMetricsLanesPerRank", PMIX_UINT64},
    {kMetricsMessageLogOn, "kMetricsMessageLogOn", PMIX_UINT64},
    {kMetricsMessageLogBytesHeld, "kMetricsMessageLogBytesHeld", PMIX_UINT64},
    {kMetricsMessageLogEntriesHeld, "kMetricsMessageLogEntriesHeld", PMIX_UINT64},
};

/// The PMIx data type a Bellows key carries (PMIX_UINT64, PMIX_DOUBLE or PMIX_STRING), or
/// PMIX_UNDEF for a key that is not Bellows'.
constexpr pmix_data_type_t key_type(std::string_view key) noexcept {
  for (const auto& k : kPayloadKeys)
    if (k.key == key) return k.type;
  return PMIX_UNDEF;
}

/// The PMIx data type that carries a value of type T in a Bellows payload.
template <class T>
inline constexpr pmix_data_type_t kTypeOf = PMIX_UNDEF;
template <>
inline constexpr pmix_data_type_t kTypeOf<std::uint64_t> = PMIX_UINT64;
template <>
inline constexpr pmix_data_type_t kTypeOf<double> = PMIX_DOUBLE;
template <>
inline constexpr pmix_data_type_t kTypeOf<std::string> = PMIX_STRING;

/// Whether every field of protocol::Metrics has its key in kPayloadKeys, with the type of
/// its value.
constexpr bool metrics_keys_declared() noexcept {
  bool declared = true;
  Metrics m{};
  visit_fields(m, [&declared](const char*, const char* key, const auto& value) {
    declared = declared && key_type(key) == kTypeOf<std::remove_cvref_t<decltype(value)>>;
  });
  return declared;
}
static_assert(metrics_keys_declared(),
              "a field of protocol::Metrics lacks its key in kPayloadKeys, or has another type");

/// Whether every field of protocol::ResizeReport has its key in kPayloadKeys, with the type
/// its value travels as (PayloadValue).
constexpr bool resize_report_keys_declared() noexcept {
  bool declared = true;
  ResizeReport r{};
  visit_fields(r, [&declared](const char*, const char* key, const auto& value) {
    declared = declared &&
               key_type(key) == kTypeOf<PayloadValue<std::remove_cvref_t<decltype(value)>>>;
  });
  return declared;
}
static_assert(resize_report_keys_declared(),
              "a field of protocol::ResizeReport lacks its key in kPayloadKeys, or has another "
              "type");

}  // namespace bellows::protocol::pmix
