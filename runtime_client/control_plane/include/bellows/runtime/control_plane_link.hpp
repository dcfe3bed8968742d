#pragma once
// Joins a running job's ElasticJob to the control plane (`bellows run`): every rank attaches
// to the daemon of its node, publishes its metrics after each iteration and reports how the
// job's resizes end; the job's first rank turns the controller's decisions (expand onto these
// nodes, the ranks on those nodes leave) into ElasticJob requests.
//
// The job's nodes come from the environment `bellows run` sets:
//   BELLOWS_JOB_DIR            the job's directory; the daemon of node N listens at the URI
//                              in JOB_DIR/nodes/N/uri
//   BELLOWS_NODES              the job's nodes at start, one rank per node, rank r on node r
//   BELLOWS_NODE               (in a rank a node's daemon started) the rank's node
//   BELLOWS_EXPAND_NODES       (in processes spawned by a resize) the new ranks' nodes, in
//   BELLOWS_EXPAND_FIRST_RANK  rank order, the first of them being rank FIRST_RANK
//
// One rank per node: the controller counts nodes, the job counts ranks, and this link maps
// one onto the other.

#include <bellows/protocol/job_directory.hpp>

#include "bellows/runtime/control_channel.hpp"
#include "bellows/runtime/elastic_job.hpp"
#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/task_graph.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace bellows::runtime {

/// Thread safety: one application thread, like ElasticJob's apply_pending().
class ControlPlaneLink {
 public:
  static constexpr const char* kJobDirVariable = protocol::job_environment::kJobDir;
  static constexpr const char* kNodesVariable = protocol::job_environment::kNodes;
  static constexpr const char* kExpandNodesVariable = protocol::job_environment::kExpandNodes;
  static constexpr const char* kExpandFirstRankVariable = protocol::job_environment::kExpandFirstRank;

  /// std::nullopt when BELLOWS_JOB_DIR is unset (the job runs without a control plane).
  /// `rank` is this process's rank in the job now. Throws std::invalid_argument when the
  /// variables are inconsistent (naming the variable), ControlChannelError when the daemon
  /// cannot be reached.
  static std::optional<ControlPlaneLink> from_environment(int rank);

  ~ControlPlaneLink();
  ControlPlaneLink(ControlPlaneLink&&) noexcept = default;
  ControlPlaneLink& operator=(ControlPlaneLink&&) noexcept = default;

  /// Subscribes to the ElasticJob's resize events (to report them) and registers the
  /// daemon's event callbacks (call once, after the job exists). Both keep a pointer to this
  /// link: it must not move afterwards.
  void attach(ElasticJob& job);

  /// Before ElasticJob::apply_pending(): runs the daemon's events; on the first rank an
  /// expand or shrink decision becomes an ElasticJob request.
  void poll();

  /// What the job's first rank adds to its metrics for predicting how the job scales.
  struct JobShape {
    GraphProfile graph;
    int lanes_per_rank = 1;
  };
  /// After each iteration (1-based count of iterations done): publishes this rank's metrics,
  /// with the job's shape when given (the first rank). With message_log_on (the runtime logs
  /// messages between teams, docs/teams.md) they carry the log's size after the iteration,
  /// report.local.message_log's bytes_held and entries_held.
  void publish(const IterationReport& report, int iterations_done,
               const std::optional<JobShape>& shape = std::nullopt, bool message_log_on = false);

  /// What a spawn must add to the new processes' environment so that each finds its node:
  /// for the job's first grow to its initial size (ranks 1..n-1 on BELLOWS_NODES[1..]), or
  /// for the expand being carried out.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> spawn_environment(
      int first_new_rank) const;

  /// Asks the controller for delta more (> 0) or fewer (< 0) nodes, through the daemon.
  ResizeAnswer request_resize(int delta_nodes) { return channel_.request_resize(delta_nodes); }

  /// This rank's node.
  [[nodiscard]] const std::string& node() const noexcept { return node_; }
  /// Collective over comm: every rank's node, in rank order, on rank 0 (empty elsewhere).
  /// Throws std::invalid_argument for a node name longer than 255 characters.
  static std::vector<std::string> gather_nodes(MPI_Comm comm, const std::string& node);
  /// First rank: runs `callback` after an expand the controller called off was dropped.
  void on_expand_dropped(std::function<void()> callback) { on_expand_dropped_ = std::move(callback); }
  /// First rank: the node of every rank, as gather_nodes() found them after a grow.
  void set_nodes_by_rank(std::vector<std::string> nodes) { nodes_by_rank_ = std::move(nodes); }

  /// Every failure the control plane told this rank of (kRanksLost), in the order they came,
  /// as poll() ran them.
  [[nodiscard]] const std::vector<RanksLostEvent>& failures() const noexcept { return failures_; }
  /// The job ranks lost so far, ascending (those the controller knew).
  [[nodiscard]] std::vector<std::uint32_t> lost_ranks() const;
  /// Runs `callback` in poll() for each failure as it comes (after failures() has it).
  void on_ranks_lost(std::function<void(const RanksLostEvent&)> callback) {
    on_ranks_lost_ = std::move(callback);
  }
  /// The job's first rank, once the job runs on `job_size` ranks without the ranks of
  /// failure `failure_id` (and of every earlier one): reports ResizeOutcome::recovered, which
  /// ends the failure in the controller's books (`bellows status` no longer shows the job
  /// degraded).
  void report_recovered(std::uint64_t failure_id, std::uint32_t job_size, const std::string& text = {});

 private:
  ControlPlaneLink(ControlChannel channel, std::string node, std::vector<std::string> nodes)
      : channel_(std::move(channel)), node_(std::move(node)), nodes_by_rank_(std::move(nodes)) {}

  void report(const protocol::ResizeReport& report);

  ControlChannel channel_;
  ElasticJob* job_ = nullptr;
  std::string node_;
  std::vector<std::string> nodes_by_rank_;  ///< first rank: node of every rank
  std::vector<std::string> expand_hosts_;   ///< nodes of the expand being carried out
  std::set<std::uint64_t> settled_;         ///< first rank: resizes carried out or refused
  int rank_before_ = 0;
  std::function<void()> on_expand_dropped_;
  std::vector<RanksLostEvent> failures_;
  std::function<void(const RanksLostEvent&)> on_ranks_lost_;
};

/// An application's own request for delta_nodes more (> 0) or fewer (< 0) nodes, sent through
/// this process's attached ControlPlaneLink to its daemon and the job's controller, which
/// decides like for any other request (a granted request comes back as a resize event).
/// Throws std::logic_error when the process has no attached link (not under `bellows run`),
/// std::invalid_argument for 0, ControlChannelError when PMIx fails.
ResizeAnswer request_resize(int delta_nodes);

}  // namespace bellows::runtime
