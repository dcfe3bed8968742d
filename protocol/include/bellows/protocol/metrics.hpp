#pragma once
// The metrics record: what a rank reports after each iteration, and what its daemon passes on
// for the node. Defined once, here, and walked field by field by visit_fields() wherever it
// is encoded or decoded:
//
//   rank -> daemon    PMIx payload of kRankMetrics   runtime::ControlChannel::publish_metrics
//                                                     daemon::PmixServer (ReceivedMetrics)
//   daemon -> controller  NodeMetrics message        fields() in src/messages.cpp
//   controller -> policy  policy::NodeMetrics        PolicyEngine::tick
//
// Each side wraps the record with what only it knows (the reporting rank, the node's name,
// the node's place in the job) instead of repeating its fields. A field is added in one
// place: a member below, its line in visit_fields() with its name and its PMIx key, the key's
// entry in pmix_events.hpp's kPayloadKeys (its type is checked there at compile time) and in
// docs/daemon.md. That changes the NodeMetrics message: raise kProtocolVersion.
//
// Nothing here needs PMIx or linking beyond bellows::protocol (check() is in
// src/messages.cpp). Thread safety: value types and pure functions.

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace bellows::protocol {

namespace pmix {
// The PMIx keys of the metrics fields (kRankMetrics); pmix_events.hpp lists them with the
// rest of the vocabulary.

/// uint64: number of the last finished iteration.
inline constexpr const char* kMetricsIteration = "bellows.metrics.iteration";
/// double: seconds the last iteration took.
inline constexpr const char* kMetricsIterationSeconds = "bellows.metrics.iteration_seconds";
/// uint64: tasks ready to run on the rank.
inline constexpr const char* kMetricsReadyTasks = "bellows.metrics.ready_tasks";
/// double in [0, 1]: share of the last interval the workers were busy.
inline constexpr const char* kMetricsBusyFraction = "bellows.metrics.busy_fraction";
/// uint64: steal requests the rank sent.
inline constexpr const char* kMetricsStealsSent = "bellows.metrics.steals_sent";
/// uint64: steal requests that came back empty.
inline constexpr const char* kMetricsStealsFailed = "bellows.metrics.steals_failed";
/// double: the whole job's GFLOP/s in the last iteration (reported by the job's first rank;
/// 0 from the others).
inline constexpr const char* kMetricsJobGflops = "bellows.metrics.job_gflops";
/// double: the compute seconds of every task of an iteration, summed, as the job's first
/// rank predicts them (runtime::GraphProfile; 0 from the others and before it knows).
inline constexpr const char* kMetricsGraphWorkSeconds = "bellows.metrics.graph_work_seconds";
/// double: the compute seconds of the iteration's longest chain of dependent tasks (likewise).
inline constexpr const char* kMetricsGraphCriticalPathSeconds =
    "bellows.metrics.graph_critical_path_seconds";
/// uint64: tasks one rank runs at once (its device's lanes; likewise).
inline constexpr const char* kMetricsLanesPerRank = "bellows.metrics.lanes_per_rank";
/// uint64, 0 or 1: whether the rank logs the messages it sends to other teams (team-based
/// message logging, docs/teams.md; 1 also when a single team leaves nothing to log).
inline constexpr const char* kMetricsMessageLogOn = "bellows.metrics.message_log_on";
/// uint64: the bytes of tiles the rank's message log holds after the iteration (0 when off).
inline constexpr const char* kMetricsMessageLogBytesHeld = "bellows.metrics.message_log_bytes_held";
/// uint64: the entries (tiles sent to another team) the log holds after it (0 when off).
inline constexpr const char* kMetricsMessageLogEntriesHeld =
    "bellows.metrics.message_log_entries_held";

}  // namespace pmix

/// What a rank reports after each iteration, and its node with it.
struct Metrics {
  std::uint64_t iteration = 0;      ///< number of the last completed iteration
  double iteration_seconds = 0.0;   ///< its wall time, finite and >= 0
  std::uint64_t ready_tasks = 0;    ///< tasks ready to run now
  double busy_fraction = 0.0;       ///< share of the last interval the workers were busy, in [0, 1]
  std::uint64_t steals_sent = 0;    ///< steal requests sent since the previous report
  std::uint64_t steals_failed = 0;  ///< of those, answered with no task
  double job_gflops = 0.0;          ///< the whole job's rate in that iteration (first rank), else 0
  /// The job's task graph, for predicting how it scales (first rank, else 0): summed and
  /// critical-path compute seconds of an iteration, and the lanes of one rank.
  double graph_work_seconds = 0.0;
  double graph_critical_path_seconds = 0.0;
  std::uint64_t lanes_per_rank = 0;
  /// The rank's message log after the iteration (docs/teams.md): whether message logging is
  /// on (0 or 1), and the bytes and entries it holds (both 0 when it is off).
  std::uint64_t message_log_on = 0;
  std::uint64_t message_log_bytes_held = 0;
  std::uint64_t message_log_entries_held = 0;
  bool operator==(const Metrics&) const = default;
};

/// Calls visit(name, pmix_key, value) for each field of m, in wire order: the one list the
/// transport codec, the ranks' PMIx payload and the daemon's decoding walk. name is the
/// field's name in the transport's texts, pmix_key its key in the kRankMetrics payload.
template <class M, class Visit>
  requires std::is_same_v<std::remove_const_t<M>, Metrics>
constexpr void visit_fields(M& m, Visit&& visit) {
  visit("iteration", pmix::kMetricsIteration, m.iteration);
  visit("iteration_seconds", pmix::kMetricsIterationSeconds, m.iteration_seconds);
  visit("ready_tasks", pmix::kMetricsReadyTasks, m.ready_tasks);
  visit("busy_fraction", pmix::kMetricsBusyFraction, m.busy_fraction);
  visit("steals_sent", pmix::kMetricsStealsSent, m.steals_sent);
  visit("steals_failed", pmix::kMetricsStealsFailed, m.steals_failed);
  visit("job_gflops", pmix::kMetricsJobGflops, m.job_gflops);
  visit("graph_work_seconds", pmix::kMetricsGraphWorkSeconds, m.graph_work_seconds);
  visit("graph_critical_path_seconds", pmix::kMetricsGraphCriticalPathSeconds,
        m.graph_critical_path_seconds);
  visit("lanes_per_rank", pmix::kMetricsLanesPerRank, m.lanes_per_rank);
  visit("message_log_on", pmix::kMetricsMessageLogOn, m.message_log_on);
  visit("message_log_bytes_held", pmix::kMetricsMessageLogBytesHeld, m.message_log_bytes_held);
  visit("message_log_entries_held", pmix::kMetricsMessageLogEntriesHeld,
        m.message_log_entries_held);
}

/// The number of fields visit_fields() visits.
inline constexpr std::size_t kMetricsFields = [] {
  std::size_t count = 0;
  Metrics m{};
  visit_fields(m, [&count](const char*, const char*, const auto&) { ++count; });
  return count;
}();

/// "" when m's values are possible, else the first field that is not, as "field: why"
/// ("busy_fraction: 1.500000 is not in [0, 1]").
std::string check(const Metrics& m);

}  // namespace bellows::protocol
