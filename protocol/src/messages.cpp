#include "bellows/protocol/messages.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace bellows::protocol {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian and so is every supported host");

// Each message's fields, in wire order, visited by name: the one list that both the
// encoder and the decoder walk.
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, Hello>
void fields(V& v, M& m) {
  v("node_name", m.node_name);
  v("daemon_pid", m.daemon_pid);
  v("protocol_version", m.protocol_version);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, NodeMetrics>
void fields(V& v, M& m) {
  v("node_name", m.node_name);
  visit_fields(m.metrics, [&v](const char* name, const char*, auto& value) { v(name, value); });
  v("rank", m.rank);
  v("pid", m.pid);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, AllocationRequest>
void fields(V& v, M& m) {
  v("directive", m.directive);
  v("node_count", m.node_count);
  v("requesting_rank", m.requesting_rank);
  v("request_id", m.request_id);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, JobControlRequest>
void fields(V& v, M& m) {
  v("action", m.action);
  v("signal", m.signal);
  v("target_rank", m.target_rank);
  v("requester", m.requester);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, AllocationComplete>
void fields(V& v, M& m) {
  v("request_id", m.request_id);
  v("resize_id", m.resize_id);
  v("outcome", m.outcome);
  v("text", m.text);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, SignalRank>
void fields(V& v, M& m) {
  v("rank", m.rank);
  v("pid", m.pid);
  v("signal", m.signal);
  v("reason", m.reason);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, FenceContribution>
void fields(V& v, M& m) {
  v("contribution_id", m.contribution_id);
  v("participant_nspaces", m.participant_nspaces);
  v("participant_ranks", m.participant_ranks);
  v("nspace_sizes", m.nspace_sizes);
  v("local_nspaces", m.local_nspaces);
  v("local_ranks", m.local_ranks);
  v("collect_data", m.collect_data);
  v("data", m.data);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, FenceRelease>
void fields(V& v, M& m) {
  v("contribution_id", m.contribution_id);
  v("status", m.status);
  v("text", m.text);
  v("data", m.data);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, ModexRequest>
void fields(V& v, M& m) {
  v("request_id", m.request_id);
  v("nspace", m.nspace);
  v("rank", m.rank);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, ModexReply>
void fields(V& v, M& m) {
  v("request_id", m.request_id);
  v("status", m.status);
  v("text", m.text);
  v("data", m.data);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, RankExited>
void fields(V& v, M& m) {
  v("rank", m.rank);
  v("pid", m.pid);
  v("exit_code", m.exit_code);
  v("signal", m.signal);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, RankConnected>
void fields(V& v, M& m) {
  v("nspace", m.nspace);
  v("rank", m.rank);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, ResizeAck>
void fields(V& v, M& m) {
  visit_fields(m.report, [&v](const char* name, const char*, auto& value) { v(name, value); });
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, ResizeDecided>
void fields(V& v, M& m) {
  v("resize_id", m.resize_id);
  v("kind", m.kind);
  v("count", m.count);
  v("new_nodes", m.new_nodes);
  v("leaving_nodes", m.leaving_nodes);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, Abort>
void fields(V& v, M& m) {
  v("resize_id", m.resize_id);
  v("reason", m.reason);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, Stop>
void fields(V& v, M& m) {
  v("reason", m.reason);
  v("grace_ms", m.grace_ms);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, StartRank>
void fields(V& v, M& m) {
  v("resize_id", m.resize_id);
  v("command", m.command);
  v("environment", m.environment);
  v("nspace", m.nspace);
  v("rank", m.rank);
  v("map_nodes", m.map_nodes);
  v("map_ranks", m.map_ranks);
  v("started_by_daemon", m.started_by_daemon);
  v("departed_ranks", m.departed_ranks);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, JobView>
void fields(V& v, M& m) {
  v("job", m.job);
  v("nodes", m.nodes);
  v("node_ranks", m.node_ranks);
  v("node_pids", m.node_pids);
  v("ranks", m.ranks);
  v("min_nodes", m.min_nodes);
  v("max_nodes", m.max_nodes);
  v("policy", m.policy);
  v("resize_id", m.resize_id);
  v("resize_kind", m.resize_kind);
  v("resize_state", m.resize_state);
  v("resize_count", m.resize_count);
  v("resize_nodes", m.resize_nodes);
  v("node_pmix_ranks", m.node_pmix_ranks);
  v("pmix_rank_nodes", m.pmix_rank_nodes);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, RanksLost>
void fields(V& v, M& m) {
  v("failure_id", m.failure_id);
  v("lost_ranks", m.lost_ranks);
  v("lost_nodes", m.lost_nodes);
  v("reason", m.reason);
  v("cause", m.cause);
  v("exit_code", m.exit_code);
  v("signal", m.signal);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, Ack>
void fields(V& v, M& m) {
  v("code", m.code);
  v("text", m.text);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, OperatorResize>
void fields(V& v, M& m) {
  v("delta", m.delta);
  v("reason", m.reason);
}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, StatusRequest>
void fields(V&, M&) {}
template <class V, class M>
  requires std::is_same_v<std::remove_const_t<M>, StatusReply>
void fields(V& v, M& m) {
  v("json", m.json);
}

// ---------------------------------------------------------------- semantic checks

}  // namespace

// metrics.hpp's check(), which check(const NodeMetrics&) below applies.
std::string check(const Metrics& m) {
  if (!std::isfinite(m.iteration_seconds) || m.iteration_seconds < 0.0) {
    return "iteration_seconds: " + std::to_string(m.iteration_seconds) +
           " is not a finite time >= 0";
  }
  if (!(m.busy_fraction >= 0.0 && m.busy_fraction <= 1.0)) {
    return "busy_fraction: " + std::to_string(m.busy_fraction) + " is not in [0, 1]";
  }
  if (!std::isfinite(m.job_gflops) || m.job_gflops < 0.0) {
    return "job_gflops: " + std::to_string(m.job_gflops) + " is not a finite rate >= 0";
  }
  if (!std::isfinite(m.graph_work_seconds) || m.graph_work_seconds < 0.0) {
    return "graph_work_seconds: " + std::to_string(m.graph_work_seconds) +
           " is not a finite time >= 0";
  }
  if (!std::isfinite(m.graph_critical_path_seconds) || m.graph_critical_path_seconds < 0.0 ||
      m.graph_critical_path_seconds > m.graph_work_seconds) {
    return "graph_critical_path_seconds: " + std::to_string(m.graph_critical_path_seconds) +
           " is not a finite time between 0 and graph_work_seconds " +
           std::to_string(m.graph_work_seconds);
  }
  if (m.steals_failed > m.steals_sent) {
    return "steals_failed: " + std::to_string(m.steals_failed) + " exceeds steals_sent " +
           std::to_string(m.steals_sent);
  }
  if (m.message_log_on > 1) {
    return "message_log_on: " + std::to_string(m.message_log_on) + " is not 0 or 1";
  }
  if (m.message_log_on == 0 && (m.message_log_bytes_held != 0 || m.message_log_entries_held != 0)) {
    return "message_log_bytes_held: " + std::to_string(m.message_log_bytes_held) + " bytes in " +
           std::to_string(m.message_log_entries_held) + " entries held with message_log_on 0";
  }
  if (m.message_log_entries_held == 0 && m.message_log_bytes_held != 0) {
    return "message_log_bytes_held: " + std::to_string(m.message_log_bytes_held) +
           " bytes held in 0 entries";
  }
  return {};
}

namespace {

std::string check(const Hello& m, std::uint16_t header_version) {
  if (m.node_name.empty()) return "node_name: empty";
  if (m.daemon_pid <= 0) return "daemon_pid: " + std::to_string(m.daemon_pid) + " is not a pid";
  if (m.protocol_version != header_version) {
    return "protocol_version: " + std::to_string(m.protocol_version) +
           " differs from the header's version " + std::to_string(header_version);
  }
  return {};
}
std::string check(const NodeMetrics& m, std::uint16_t) {
  if (m.node_name.empty()) return "node_name: empty";
  if (m.pid < 0) return "pid: " + std::to_string(m.pid) + " is not a pid";
  return check(m.metrics);
}
std::string check(const AllocationRequest& m, std::uint16_t) {
  const auto d = static_cast<unsigned>(m.directive);
  if (d != 1 && d != 2 && d != 3) {
    return "directive: " + std::to_string(d) + " is neither extend (1), release (2) nor cancel (3)";
  }
  if (m.directive == AllocationDirective::cancel) {
    if (m.request_id.empty()) return "request_id: empty for a cancel";
    if (m.node_count != 0) return "node_count: " + std::to_string(m.node_count) + " for a cancel (0)";
    return {};
  }
  if (m.node_count == 0) return "node_count: 0";
  return {};
}
std::string check(const JobControlRequest& m, std::uint16_t) {
  const auto a = static_cast<unsigned>(m.action);
  if (a != 1 && a != 2) return "action: " + std::to_string(a) + " is neither signal (1) nor terminate (2)";
  if (m.action == JobControlAction::signal && (m.signal < 1 || m.signal > 64))
    return "signal: " + std::to_string(m.signal) + " is not a signal";
  if (m.action == JobControlAction::terminate && m.signal != 0)
    return "signal: " + std::to_string(m.signal) + " for a terminate (0)";
  if (m.requester.empty()) return "requester: empty";
  return {};
}
std::string check(const AllocationComplete& m, std::uint16_t) {
  if (m.request_id.empty()) return "request_id: empty";
  if (m.resize_id == 0) return "resize_id: 0";
  const auto o = static_cast<unsigned>(m.outcome);
  if (o < 1 || o > 3)
    return "outcome: " + std::to_string(o) + " is neither committed (1), aborted (2) nor cancelled (3)";
  return {};
}
std::string check(const SignalRank& m, std::uint16_t) {
  if (m.pid <= 0) return "pid: " + std::to_string(m.pid) + " is not a pid";
  if (m.signal < 1 || m.signal > 64) return "signal: " + std::to_string(m.signal) + " is not a signal";
  return {};
}
std::string check_collective_status(CollectiveStatus status) {
  const auto s = static_cast<unsigned>(status);
  if (s > 4)
    return "status: " + std::to_string(s) +
           " is none of ok (0), participant_lost (1), unreachable (2), not_found (3), refused (4)";
  return {};
}
std::string check(const FenceContribution& m, std::uint16_t) {
  if (m.contribution_id == 0) return "contribution_id: 0";
  if (m.participant_nspaces.empty()) return "participant_nspaces: empty";
  const std::size_t count = m.participant_nspaces.size();
  if (m.participant_ranks.size() != count)
    return "participant_ranks: " + std::to_string(m.participant_ranks.size()) + " entries for " +
           std::to_string(count) + " participants";
  if (m.nspace_sizes.size() != count)
    return "nspace_sizes: " + std::to_string(m.nspace_sizes.size()) + " entries for " +
           std::to_string(count) + " participants";
  for (std::size_t i = 0; i < count; ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    if (m.participant_nspaces[i].empty()) return "participant_nspaces" + at + ": empty";
    if (m.nspace_sizes[i] == 0) return "nspace_sizes" + at + ": 0";
    if (m.participant_ranks[i] != kWildcardRank && m.participant_ranks[i] >= m.nspace_sizes[i])
      return "participant_ranks" + at + ": " + std::to_string(m.participant_ranks[i]) +
             " is not a rank of " + m.participant_nspaces[i] + " (size " + std::to_string(m.nspace_sizes[i]) + ")";
  }
  if (m.local_ranks.size() != m.local_nspaces.size())
    return "local_ranks: " + std::to_string(m.local_ranks.size()) + " entries for " +
           std::to_string(m.local_nspaces.size()) + " local namespaces";
  for (std::size_t i = 0; i < m.local_ranks.size(); ++i) {
    if (m.local_ranks[i] == kWildcardRank)
      return "local_ranks[" + std::to_string(i) + "]: the wildcard is no rank";
  }
  if (m.collect_data > 1) return "collect_data: " + std::to_string(m.collect_data) + " is neither 0 nor 1";
  if (m.collect_data == 0 && !m.data.empty())
    return "data: " + std::to_string(m.data.size()) + " bytes without collect_data";
  return {};
}
std::string check(const FenceRelease& m, std::uint16_t) {
  if (m.contribution_id == 0) return "contribution_id: 0";
  if (std::string problem = check_collective_status(m.status); !problem.empty()) return problem;
  if (m.status != CollectiveStatus::ok && !m.data.empty())
    return "data: " + std::to_string(m.data.size()) + " blobs for a failed fence";
  return {};
}
std::string check(const ModexRequest& m, std::uint16_t) {
  if (m.request_id == 0) return "request_id: 0";
  if (m.nspace.empty()) return "nspace: empty";
  if (m.rank == kWildcardRank) return "rank: the wildcard names no one rank";
  return {};
}
std::string check(const ModexReply& m, std::uint16_t) {
  if (m.request_id == 0) return "request_id: 0";
  if (std::string problem = check_collective_status(m.status); !problem.empty()) return problem;
  if (m.status != CollectiveStatus::ok && !m.data.empty())
    return "data: " + std::to_string(m.data.size()) + " bytes for a failed request";
  return {};
}
std::string check(const RankExited& m, std::uint16_t) {
  if (m.pid <= 0) return "pid: " + std::to_string(m.pid) + " is not a pid";
  if (m.signal < 0 || m.signal > 64) return "signal: " + std::to_string(m.signal) + " is not a signal";
  if (m.signal != 0 && m.exit_code != 0) return "exit_code: nonzero although killed by a signal";
  return {};
}
std::string check(const RankConnected& m, std::uint16_t) {
  if (m.nspace.empty()) return "nspace: empty";
  return {};
}
std::string check(const ResizeAck& m, std::uint16_t) { return check(m.report); }
std::string check(const ResizeDecided& m, std::uint16_t) {
  const auto k = static_cast<unsigned>(m.kind);
  if (k != 1 && k != 2) return "kind: " + std::to_string(k) + " is neither expand (1) nor shrink (2)";
  if (m.count == 0) return "count: 0";
  if (m.kind == ResizeKind::expand && !m.leaving_nodes.empty()) {
    return "leaving_nodes: an expand names no leaving nodes";
  }
  if (m.kind == ResizeKind::shrink && !m.new_nodes.empty()) {
    return "new_nodes: a shrink names no new nodes";
  }
  return {};
}
std::string check(const Abort&, std::uint16_t) { return {}; }
std::string check(const Stop&, std::uint16_t) { return {}; }
std::string check(const StartRank& m, std::uint16_t) {
  if (m.command.empty() || m.command.front().empty()) return "command: empty";
  for (const auto& entry : m.environment) {
    const auto equals = entry.find('=');
    if (equals == std::string::npos || equals == 0)
      return "environment: " + entry + " is not NAME=VALUE";
  }
  if (m.nspace.empty()) return "nspace: empty";
  if (m.map_nodes.size() != m.map_ranks.size())
    return "map_ranks: " + std::to_string(m.map_ranks.size()) + " for " + std::to_string(m.map_nodes.size()) +
           " map_nodes";
  bool listed = false;
  for (std::size_t i = 0; i < m.map_nodes.size(); ++i) {
    if (m.map_nodes[i].empty()) return "map_nodes[" + std::to_string(i) + "]: empty";
    if (i > 0 && m.map_ranks[i] <= m.map_ranks[i - 1])
      return "map_ranks[" + std::to_string(i) + "]: " + std::to_string(m.map_ranks[i]) + " after " +
             std::to_string(m.map_ranks[i - 1]) + " (ascending, no repeats)";
    listed = listed || m.map_ranks[i] == m.rank;
  }
  if (!listed) return "rank: " + std::to_string(m.rank) + " is not in the job map";
  for (std::size_t i = 0; i < m.departed_ranks.size(); ++i) {
    const std::uint32_t departed = m.departed_ranks[i];
    const std::string name = "departed_ranks[" + std::to_string(i) + "]: " + std::to_string(departed);
    if (i > 0 && departed <= m.departed_ranks[i - 1])
      return name + " after " + std::to_string(m.departed_ranks[i - 1]) + " (ascending, no repeats)";
    if (departed == m.rank) return name + " is the rank to start";
    if (std::find(m.map_ranks.begin(), m.map_ranks.end(), departed) == m.map_ranks.end())
      return name + " is not in the job map";
  }
  return {};
}
std::string check(const RanksLost& m, std::uint16_t) {
  if (m.failure_id == 0) return "failure_id: 0";
  if (m.lost_nodes.empty()) return "lost_nodes: empty";
  for (std::size_t i = 0; i < m.lost_nodes.size(); ++i) {
    if (m.lost_nodes[i].empty()) return "lost_nodes[" + std::to_string(i) + "]: empty";
  }
  for (std::size_t i = 1; i < m.lost_ranks.size(); ++i) {
    if (m.lost_ranks[i] <= m.lost_ranks[i - 1])
      return "lost_ranks[" + std::to_string(i) + "]: " + std::to_string(m.lost_ranks[i]) +
             " does not follow " + std::to_string(m.lost_ranks[i - 1]) + " (ascending, no repeats)";
  }
  const auto cause = static_cast<unsigned>(m.cause);
  if (cause != 1 && cause != 2)
    return "cause: " + std::to_string(cause) + " is neither rank_died (1) nor node_lost (2)";
  if (m.signal < 0 || m.signal > 64) return "signal: " + std::to_string(m.signal) + " is not a signal";
  if (m.exit_code < -1) return "exit_code: " + std::to_string(m.exit_code) + " is below -1 (unknown)";
  if (m.signal != 0 && m.exit_code != 0) return "exit_code: " + std::to_string(m.exit_code) + " although killed by a signal";
  if (m.cause == LossCause::node_lost && (m.exit_code != -1 || m.signal != 0))
    return "exit_code: a lost node's ranks have no exit status (-1, signal 0)";
  return {};
}
std::string check(const JobView& m, std::uint16_t) {
  if (m.job.empty()) return "job: empty";
  if (m.nodes.empty()) return "nodes: empty";
  for (std::size_t i = 0; i < m.nodes.size(); ++i) {
    if (m.nodes[i].empty()) return "nodes[" + std::to_string(i) + "]: empty";
  }
  if (m.node_ranks.size() != m.nodes.size()) {
    return "node_ranks: " + std::to_string(m.node_ranks.size()) + " entries for " +
           std::to_string(m.nodes.size()) + " nodes";
  }
  if (m.node_pids.size() != m.nodes.size()) {
    return "node_pids: " + std::to_string(m.node_pids.size()) + " entries for " +
           std::to_string(m.nodes.size()) + " nodes";
  }
  for (std::size_t i = 0; i < m.node_pids.size(); ++i) {
    if (m.node_pids[i] < 0)
      return "node_pids[" + std::to_string(i) + "]: " + std::to_string(m.node_pids[i]) + " is not a pid";
  }
  if (!m.node_pmix_ranks.empty() && m.node_pmix_ranks.size() != m.nodes.size()) {
    return "node_pmix_ranks: " + std::to_string(m.node_pmix_ranks.size()) + " entries for " +
           std::to_string(m.nodes.size()) + " nodes";
  }
  for (std::size_t i = 0; i < m.pmix_rank_nodes.size(); ++i) {
    if (m.pmix_rank_nodes[i].empty()) return "pmix_rank_nodes[" + std::to_string(i) + "]: empty";
  }
  for (std::size_t i = 0; i < m.node_pmix_ranks.size(); ++i) {
    const std::uint32_t rank = m.node_pmix_ranks[i];
    if (rank == kNoRank) continue;
    if (rank >= m.pmix_rank_nodes.size() || m.pmix_rank_nodes[rank] != m.nodes[i]) {
      return "node_pmix_ranks[" + std::to_string(i) + "]: rank " + std::to_string(rank) + " of node " +
             m.nodes[i] + " is not at that node in pmix_rank_nodes";
    }
  }
  if (m.min_nodes == 0) return "min_nodes: 0";
  if (m.min_nodes > m.max_nodes) {
    return "min_nodes: " + std::to_string(m.min_nodes) + " exceeds max_nodes " +
           std::to_string(m.max_nodes);
  }
  const auto k = static_cast<unsigned>(m.resize_kind);
  if (k != 1 && k != 2) return "resize_kind: " + std::to_string(k) + " is neither expand (1) nor shrink (2)";
  if (m.resize_id == 0) {
    if (!m.resize_state.empty()) return "resize_state: " + m.resize_state + " without a resize (resize_id 0)";
    if (m.resize_count != 0 || !m.resize_nodes.empty())
      return "resize_count: a count or nodes without a resize (resize_id 0)";
  } else if (m.resize_state.empty()) {
    return "resize_state: empty for resize " + std::to_string(m.resize_id);
  }
  return {};
}
std::string check(const OperatorResize& m, std::uint16_t) {
  if (m.delta == 0) return "delta: 0 (neither grow nor shrink)";
  return {};
}
std::string check(const StatusRequest&, std::uint16_t) { return {}; }
std::string check(const StatusReply&, std::uint16_t) { return {}; }
std::string check(const Ack& m, std::uint16_t) {
  const auto c = static_cast<std::int32_t>(m.code);
  if (c < 0 || c > 4) return "code: " + std::to_string(c) + " is not an ack code (0-4)";
  return {};
}

// ---------------------------------------------------------------- encoding

class Writer {
 public:
  explicit Writer(std::vector<std::uint8_t>& out) : out_(out) {}

  template <class T>
    requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void operator()(const char*, const T& value) {
    put(value);
  }
  void operator()(const char*, const std::string& value) {
    put(static_cast<std::uint32_t>(value.size()));
    out_.insert(out_.end(), value.begin(), value.end());
  }
  template <class T>
  void operator()(const char* name, const std::vector<T>& values) {
    put(static_cast<std::uint32_t>(values.size()));
    for (const auto& v : values) (*this)(name, v);
  }

  template <class T>
  void put(const T& value) {
    std::uint8_t bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out_.insert(out_.end(), bytes, bytes + sizeof(T));
  }

 private:
  std::vector<std::uint8_t>& out_;
};

// ---------------------------------------------------------------- decoding

class Reader {
 public:
  Reader(std::span<const std::uint8_t> bytes, std::string_view message)
      : bytes_(bytes), message_(message) {}

  bool failed() const { return error_ != DecodeError::ok; }
  DecodeError error() const { return error_; }
  const std::string& text() const { return text_; }
  std::size_t left() const { return bytes_.size() - pos_; }

  template <class T>
    requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void operator()(const char* name, T& value) {
    if (failed()) return;
    if (left() < sizeof(T)) return truncated(name, sizeof(T));
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
  }
  void operator()(const char* name, std::string& value) {
    if (failed()) return;
    std::uint32_t size = 0;
    (*this)(name, size);
    if (failed()) return;
    if (size > kMaxStringBytes) {
      return fail(DecodeError::bad_field, std::string("bad field ") + std::string(message_) +
                                              "." + name + ": length " + std::to_string(size) +
                                              " exceeds " + std::to_string(kMaxStringBytes));
    }
    if (left() < size) return truncated(name, size);
    value.assign(reinterpret_cast<const char*>(bytes_.data() + pos_), size);
    pos_ += size;
  }
  template <class T>
  void operator()(const char* name, std::vector<T>& values) {
    if (failed()) return;
    std::uint32_t count = 0;
    (*this)(name, count);
    if (failed()) return;
    // Every element takes at least 4 bytes (u32, or a string's length): a count that the
    // remaining bytes cannot hold is refused before anything is allocated.
    if (count > left() / 4) {
      return fail(DecodeError::truncated,
                  "truncated " + std::string(message_) + ": field " + name + " holds " +
                      std::to_string(count) + " entries, only " + std::to_string(left()) +
                      " bytes left");
    }
    values.assign(count, T{});
    for (std::uint32_t i = 0; i < count && !failed(); ++i) {
      const std::string element = std::string(name) + "[" + std::to_string(i) + "]";
      (*this)(element.c_str(), values[i]);
    }
  }

  void fail(DecodeError error, std::string text) {
    if (failed()) return;
    error_ = error;
    text_ = std::move(text);
  }

 private:
  void truncated(const char* name, std::size_t need) {
    fail(DecodeError::truncated, "truncated " + std::string(message_) + ": field " + name +
                                     " needs " + std::to_string(need) + " bytes, " +
                                     std::to_string(left()) + " left");
  }

  std::span<const std::uint8_t> bytes_;
  std::string_view message_;
  std::size_t pos_ = 0;
  DecodeError error_ = DecodeError::ok;
  std::string text_;
};

template <class M>
void decode_body(std::span<const std::uint8_t> body, std::uint16_t version, DecodeResult& out) {
  const std::string_view name = to_string(M::kType);
  M message{};
  Reader reader(body, name);
  fields(reader, message);
  if (!reader.failed() && reader.left() != 0) {
    reader.fail(DecodeError::bad_field, "bad field " + std::string(name) + ": " +
                                            std::to_string(reader.left()) +
                                            " bytes follow the last field");
  }
  if (reader.failed()) {
    out.error = reader.error();
    out.text = reader.text();
    return;
  }
  if (std::string problem = check(message, version); !problem.empty()) {
    out.error = DecodeError::bad_field;
    out.text = "bad field " + std::string(name) + "." + problem;
    return;
  }
  out.envelope.message = std::move(message);
}

template <class T>
T load(std::span<const std::uint8_t> bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

std::string hex32(std::uint32_t value) {
  static const char* digits = "0123456789abcdef";
  std::string text = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) text += digits[(value >> shift) & 0xfu];
  return text;
}

}  // namespace

std::string_view to_string(MessageType type) {
  switch (type) {
    case MessageType::hello: return "hello";
    case MessageType::node_metrics: return "node_metrics";
    case MessageType::allocation_request: return "allocation_request";
    case MessageType::rank_exited: return "rank_exited";
    case MessageType::resize_ack: return "resize_ack";
    case MessageType::resize_decided: return "resize_decided";
    case MessageType::abort: return "abort";
    case MessageType::stop: return "stop";
    case MessageType::start_rank: return "start_rank";
    case MessageType::job_view: return "job_view";
    case MessageType::ranks_lost: return "ranks_lost";
    case MessageType::ack: return "ack";
    case MessageType::operator_resize: return "operator_resize";
    case MessageType::status_request: return "status_request";
    case MessageType::status_reply: return "status_reply";
    case MessageType::job_control_request: return "job_control_request";
    case MessageType::allocation_complete: return "allocation_complete";
    case MessageType::signal_rank: return "signal_rank";
    case MessageType::fence_contribution: return "fence_contribution";
    case MessageType::rank_connected: return "rank_connected";
    case MessageType::fence_release: return "fence_release";
    case MessageType::modex_request: return "modex_request";
    case MessageType::modex_reply: return "modex_reply";
  }
  return "unknown";
}

std::string_view to_string(AllocationOutcome outcome) {
  switch (outcome) {
    case AllocationOutcome::committed: return "committed";
    case AllocationOutcome::aborted: return "aborted";
    case AllocationOutcome::cancelled: return "cancelled";
  }
  return "unknown";
}

std::string_view to_string(CollectiveStatus status) {
  switch (status) {
    case CollectiveStatus::ok: return "ok";
    case CollectiveStatus::participant_lost: return "participant_lost";
    case CollectiveStatus::unreachable: return "unreachable";
    case CollectiveStatus::not_found: return "not_found";
    case CollectiveStatus::refused: return "refused";
  }
  return "unknown";
}

std::string_view to_string(DecodeError error) {
  switch (error) {
    case DecodeError::ok: return "ok";
    case DecodeError::truncated: return "truncated";
    case DecodeError::wrong_magic: return "wrong_magic";
    case DecodeError::unsupported_version: return "unsupported_version";
    case DecodeError::unknown_type: return "unknown_type";
    case DecodeError::bad_length: return "bad_length";
    case DecodeError::bad_field: return "bad_field";
  }
  return "unknown";
}

MessageType type_of(const Message& message) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kType; }, message);
}

std::vector<std::uint8_t> encode(const Envelope& envelope) {
  std::vector<std::uint8_t> out;
  out.reserve(128);
  Writer writer(out);
  out.insert(out.end(), std::begin(kMagic), std::end(kMagic));
  writer.put(kProtocolVersion);
  writer.put(static_cast<std::uint16_t>(type_of(envelope.message)));
  writer.put(static_cast<std::uint32_t>(envelope.kind));
  writer.put(std::uint32_t{0});  // body length, set below
  writer.put(envelope.correlation_id);
  std::visit([&](const auto& m) { fields(writer, m); }, envelope.message);
  const auto body = static_cast<std::uint32_t>(out.size() - kHeaderBytes);
  std::memcpy(out.data() + 12, &body, sizeof body);
  return out;
}

std::vector<std::uint8_t> encode(const Message& message) {
  return encode(Envelope{Kind::notification, 0, message});
}

DecodeResult decode(std::span<const std::uint8_t> bytes) {
  DecodeResult out;
  auto fail = [&](DecodeError error, std::string text) {
    out.error = error;
    out.text = std::move(text);
    return out;
  };
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), kMagic, 4) != 0) {
    std::uint32_t seen = 0;
    for (int i = 0; i < 4; ++i) seen = (seen << 8) | bytes[static_cast<std::size_t>(i)];
    return fail(DecodeError::wrong_magic,
                "wrong magic " + hex32(seen) + ", expected 0x424c5753 (\"BLWS\")");
  }
  if (bytes.size() >= 6) {
    out.peer_version = load<std::uint16_t>(bytes, 4);
    if (*out.peer_version != kProtocolVersion) {
      return fail(DecodeError::unsupported_version,
                  "protocol version " + std::to_string(*out.peer_version) +
                      " refused: this side speaks version " + std::to_string(kProtocolVersion));
    }
  }
  if (bytes.size() < kHeaderBytes) {
    return fail(DecodeError::truncated, "truncated message: " + std::to_string(bytes.size()) +
                                            " bytes, the header needs " +
                                            std::to_string(kHeaderBytes));
  }
  const auto type = load<std::uint16_t>(bytes, 6);
  const auto flags = load<std::uint32_t>(bytes, 8);
  const auto length = load<std::uint32_t>(bytes, 12);
  const auto correlation = load<std::uint64_t>(bytes, 16);
  if (length > kMaxBodyBytes) {
    return fail(DecodeError::bad_length, "bad length: a body of " + std::to_string(length) +
                                             " bytes exceeds the limit of " +
                                             std::to_string(kMaxBodyBytes));
  }
  const std::size_t follow = bytes.size() - kHeaderBytes;
  if (follow < length) {
    return fail(DecodeError::truncated, "truncated message: the header says " +
                                            std::to_string(length) + " body bytes, " +
                                            std::to_string(follow) + " follow");
  }
  if (follow > length) {
    return fail(DecodeError::bad_length, "bad length: the header says " +
                                             std::to_string(length) + " body bytes, " +
                                             std::to_string(follow) + " follow");
  }
  if (flags > 2) {
    return fail(DecodeError::bad_field,
                "bad field header.flags: " + std::to_string(flags) +
                    " is none of notification (0), request (1), reply (2)");
  }
  out.envelope.kind = static_cast<Kind>(flags);
  out.envelope.correlation_id = correlation;
  if ((out.envelope.kind == Kind::notification) != (correlation == 0)) {
    return fail(DecodeError::bad_field,
                "bad field header.correlation_id: " + std::to_string(correlation) + " for a " +
                    (out.envelope.kind == Kind::notification ? "notification (must be 0)"
                                                             : "request or reply (must be > 0)"));
  }
  const auto body = bytes.subspan(kHeaderBytes);
  const std::uint16_t version = *out.peer_version;
  switch (static_cast<MessageType>(type)) {
    case MessageType::hello: decode_body<Hello>(body, version, out); break;
    case MessageType::node_metrics: decode_body<NodeMetrics>(body, version, out); break;
    case MessageType::allocation_request: decode_body<AllocationRequest>(body, version, out); break;
    case MessageType::rank_exited: decode_body<RankExited>(body, version, out); break;
    case MessageType::resize_ack: decode_body<ResizeAck>(body, version, out); break;
    case MessageType::resize_decided: decode_body<ResizeDecided>(body, version, out); break;
    case MessageType::abort: decode_body<Abort>(body, version, out); break;
    case MessageType::stop: decode_body<Stop>(body, version, out); break;
    case MessageType::start_rank: decode_body<StartRank>(body, version, out); break;
    case MessageType::job_view: decode_body<JobView>(body, version, out); break;
    case MessageType::ranks_lost: decode_body<RanksLost>(body, version, out); break;
    case MessageType::ack: decode_body<Ack>(body, version, out); break;
    case MessageType::operator_resize: decode_body<OperatorResize>(body, version, out); break;
    case MessageType::status_request: decode_body<StatusRequest>(body, version, out); break;
    case MessageType::status_reply: decode_body<StatusReply>(body, version, out); break;
    case MessageType::job_control_request: decode_body<JobControlRequest>(body, version, out); break;
    case MessageType::allocation_complete: decode_body<AllocationComplete>(body, version, out); break;
    case MessageType::signal_rank: decode_body<SignalRank>(body, version, out); break;
    case MessageType::fence_contribution: decode_body<FenceContribution>(body, version, out); break;
    case MessageType::rank_connected: decode_body<RankConnected>(body, version, out); break;
    case MessageType::fence_release: decode_body<FenceRelease>(body, version, out); break;
    case MessageType::modex_request: decode_body<ModexRequest>(body, version, out); break;
    case MessageType::modex_reply: decode_body<ModexReply>(body, version, out); break;
    default:
      return fail(DecodeError::unknown_type,
                  "unknown message type " + std::to_string(type) + " (protocol version " +
                      std::to_string(kProtocolVersion) + ")");
  }
  return out;
}

}  // namespace bellows::protocol
