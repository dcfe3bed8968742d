#pragma once
// A rank's connection to its node's daemon (bellowsd): the rank attaches to the daemon's PMIx
// server as a PMIx tool, asks it for more or fewer nodes, publishes its metrics, and receives
// resize events and failures (ranks lost). The event codes and payload keys are
// bellows/protocol/pmix_events.hpp.
//
// The metrics a rank publishes are bellows::protocol::Metrics (bellows/protocol/metrics.hpp),
// the record its daemon, the controller and the policy engine read as well; the resize reports
// it sends are bellows::protocol::ResizeReport (bellows/protocol/resize_report.hpp), the record
// its daemon forwards and the controller reads.
//
// The runtime works without a daemon: connect_from_environment() gives std::nullopt when none
// is configured.
//
// Events arrive on PMIx's progress thread, which only queues them; the application takes them
// with poll_events() (e.g. between iterations), which runs the registered callbacks on the
// calling thread.

#include <bellows/protocol/job_directory.hpp>
#include <bellows/protocol/metrics.hpp>
#include <bellows/protocol/resize_report.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace bellows::runtime {

/// One rank's metrics for the daemon (protocol kRankMetrics): the rank that reports them
/// and the record every side shares.
struct RankMetrics {
  std::uint64_t rank = 0;
  protocol::Metrics metrics;
};

/// The daemon's answer to request_resize().
struct ResizeAnswer {
  /// PMIx status: 0 (PMIX_SUCCESS) when granted.
  int status = 0;
  /// PMIx's name for status, e.g. "SUCCESS", "BAD-PARAM".
  std::string status_name;
  /// The daemon's text when granted (e.g. "granted 2 nodes"). PMIx 4.2.2 carries no text with
  /// a refusal: then "refused by the daemon (<status_name>); the daemon's log says why".
  std::string text;
  [[nodiscard]] bool granted() const noexcept { return status == 0; }
};

/// The job grows by count ranks, on hosts (in rank order).
struct ExpandEvent {
  std::uint64_t resize_id = 0;
  std::uint64_t count = 0;
  std::vector<std::string> hosts;
};
/// nodes are given back: the ranks on them leave the job.
struct ShrinkEvent {
  std::uint64_t resize_id = 0;
  std::vector<std::string> nodes;
};
/// The resize resize_id was given up, for reason.
struct AbortEvent {
  std::uint64_t resize_id = 0;
  std::string reason;
};

/// A failure: the ranks `ranks` (job ranks, ascending; empty when the controller never learnt
/// them) on `nodes` are lost, as the controller learnt (`reason`). The job's first rank
/// answers with report_resize({failure_id, ResizeOutcome::recovered, ...}) once the job runs
/// on without them.
struct RanksLostEvent {
  std::uint64_t failure_id = 0;
  std::vector<std::uint32_t> ranks;
  std::vector<std::string> nodes;
  std::string reason;
};

/// Could not attach to the daemon, or a call to it failed at the PMIx level.
class ControlChannelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The PMIx connection to bellowsd: as its client (PMIx_Init, PMIx_Finalize in the destructor)
/// when that daemon started this process (the PMIx variables of its PMIx_server_setup_fork
/// name the daemon's URI: every rank of a job, the first included), else as a tool
/// (PMIx_tool_init, PMIx_tool_finalize). Both do the same over either connection. PMIx allows
/// one such connection per process, so at most one ControlChannel exists at a time (a second
/// connect throws ControlChannelError). Move-only.
///
/// Thread safety: request_resize(), publish_metrics() and report_resize() may be called from
/// any thread; the on_*() setters and poll_events() from one application thread.
class ControlChannel {
 public:
  /// Environment variable holding the daemon's URI, or "file:PATH" naming a file that holds it.
  static constexpr const char* kUriVariable = protocol::job_environment::kDaemonUri;
  /// Set to 0 to leave Nagle's algorithm on the connection (to measure its cost).
  static constexpr const char* kNodelayVariable = "BELLOWS_TCP_NODELAY";

  /// std::nullopt when BELLOWS_DAEMON_URI is unset or empty; else connect(its value).
  static std::optional<ControlChannel> connect_from_environment();
  /// Connects to the daemon at uri ("nspace.rank;tcp4://host:port" or "file:PATH"): as its
  /// PMIx client when the environment says that daemon started this process, else as a tool.
  /// Throws ControlChannelError naming the URI and PMIx's reason.
  static ControlChannel connect(const std::string& uri);

  ~ControlChannel();
  ControlChannel(ControlChannel&& other) noexcept;
  ControlChannel& operator=(ControlChannel&& other) noexcept;
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  /// Asks for delta_nodes more nodes (> 0, PMIX_ALLOC_EXTEND) or fewer (< 0,
  /// PMIX_ALLOC_RELEASE) and waits for the daemon's answer. std::invalid_argument for 0.
  ResizeAnswer request_resize(int delta_nodes);
  /// Sends metrics to the daemon (PMIx_Notify_event, range PMIX_RANGE_RM); returns once PMIx
  /// has queued them. At most 8 notifications (metrics and reports) are on their way
  /// unacknowledged by the daemon: a 9th waits up to 5 s for room (docs/daemon.md, "What PMIx
  /// 4.2.2 does here"). Throws ControlChannelError when PMIx refuses to send, or when no room
  /// came (at once while the daemon has acknowledged nothing since the last such refusal).
  void publish_metrics(const RankMetrics& metrics);
  /// Tells the daemon how a resize ended on this rank (PMIx_Notify_event kResizeReport, range
  /// PMIX_RANGE_RM); returns once PMIx has queued it, waiting for room as publish_metrics().
  /// Throws ControlChannelError as publish_metrics().
  void report_resize(const protocol::ResizeReport& report);

  void on_expand(std::function<void(const ExpandEvent&)> callback);
  void on_shrink(std::function<void(const ShrinkEvent&)> callback);
  void on_abort(std::function<void(const AbortEvent&)> callback);
  void on_ranks_lost(std::function<void(const RanksLostEvent&)> callback);

  /// Runs the callbacks of the events received so far (in arrival order), waiting up to
  /// `wait` for the first one when none is queued. Returns the number of events taken
  /// (also those without a callback).
  std::size_t poll_events(std::chrono::milliseconds wait = std::chrono::milliseconds(0));

  /// This process's PMIx name, "nspace:rank": the job's namespace and its rank there for a
  /// client, the name the daemon assigned for a tool.
  [[nodiscard]] const std::string& name() const noexcept;
  /// Events dropped because their payload was malformed or of another protocol version, and
  /// the reason for the last one ("" when none).
  [[nodiscard]] std::uint64_t dropped_events() const;
  [[nodiscard]] std::string last_drop_reason() const;

  struct State;

 private:
  explicit ControlChannel(std::unique_ptr<State> state) noexcept;
  std::unique_ptr<State> state_;
};

}  // namespace bellows::runtime
