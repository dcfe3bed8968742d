#pragma once
// bellowsd's PMIx server (PMIx 4.2): ranks attach to it as PMIx tools (MPI ranks, which are
// no PMIx clients) or connect as PMIx clients (processes LocalLauncher starts).
//
// Threads: PMIx runs its own progress thread and calls the upcalls there. The upcalls only
// copy what they receive and hand it to the server's worker thread, which runs the owner's
// handlers; answers go back to PMIx from the worker (or from whichever thread the owner
// replies on), never from the progress thread.

#include <bellows/daemon/job_control.hpp>
#include <bellows/daemon/payload.hpp>
#include <bellows/daemon/standard_events.hpp>
#include <bellows/protocol/messages.hpp>
#include <bellows/protocol/metrics.hpp>
#include <bellows/protocol/resize_report.hpp>

#include <pmix_common.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::daemon {

struct ReplyGate;

/// The directive that cancels an earlier allocation request, named by its PMIX_ALLOC_REQ_ID:
/// PMIx 5's PMIX_ALLOC_REQ_CANCEL, which PMIx 4.2.2 has no name for (its library passes the
/// value on to the host all the same).
inline constexpr pmix_alloc_directive_t kAllocRequestCancel = 5;

/// A PMIx_Allocation_request received from a rank or tool.
struct AllocationRequest {
  ProcId requester;
  /// PMIX_ALLOC_EXTEND (grow), PMIX_ALLOC_RELEASE (shrink) or kAllocRequestCancel.
  pmix_alloc_directive_t directive = PMIX_ALLOC_EXTEND;
  /// PMIX_ALLOC_NUM_NODES (0 for a cancel).
  std::uint64_t num_nodes = 0;
  /// PMIX_ALLOC_REQ_ID when the requester gave one, else one the daemon gave it
  /// ("NODE.N"): the reply carries it back, and a cancel names the request it calls off.
  std::string request_id;
};

/// A PMIx_Job_control received from a rank or tool, as read_job_control() reads it.
using JobControlRequest = JobControlOrder;

/// The answer to one AllocationRequest: call reply() once, from any thread but PMIx's
/// progress thread. Dropping it unanswered replies PMIX_ERR_NOT_AVAILABLE "the daemon gave
/// no answer". After its PmixServer is gone, reply() does nothing (the rank's connection is
/// closed by then). Move-only; not thread-safe.
class AllocationResponder {
 public:
  AllocationResponder() noexcept = default;
  ~AllocationResponder();
  AllocationResponder(AllocationResponder&& other) noexcept;
  AllocationResponder& operator=(AllocationResponder&& other) noexcept;
  AllocationResponder(const AllocationResponder&) = delete;
  AllocationResponder& operator=(const AllocationResponder&) = delete;

  /// Sends status (PMIX_SUCCESS when granted) and text to the rank. PMIx 4.2.2 delivers the
  /// text (kReplyText) only with PMIX_SUCCESS: a refusal reaches the rank as its status alone,
  /// so refusals are also logged here, with their text. A second call does nothing.
  /// With a request id (allocation requests), the reply also carries PMIX_ALLOC_REQ_ID.
  void reply(pmix_status_t status, const std::string& text);
  [[nodiscard]] bool answered() const noexcept { return cbfunc_ == nullptr; }

 private:
  friend struct ResponderAccess;
  AllocationResponder(std::shared_ptr<ReplyGate> gate, std::string what, std::string request_id,
                      pmix_info_cbfunc_t cbfunc, void* cbdata) noexcept
      : gate_(std::move(gate)),
        what_(std::move(what)),
        request_id_(std::move(request_id)),
        cbfunc_(cbfunc),
        cbdata_(cbdata) {}
  std::shared_ptr<ReplyGate> gate_;
  std::string what_;
  std::string request_id_;
  pmix_info_cbfunc_t cbfunc_ = nullptr;
  void* cbdata_ = nullptr;
};

/// One rank's metrics (protocol kRankMetrics) as received: who sent them, the rank they name
/// and the record every side shares (bellows/protocol/metrics.hpp).
struct ReceivedMetrics {
  ProcId source;
  std::uint64_t rank = 0;
  protocol::Metrics metrics;
};

/// A rank's report of how a resize ended (protocol kResizeReport) as received: who sent it and
/// the record every side shares (bellows/protocol/resize_report.hpp).
struct ReceivedResizeReport {
  ProcId source;
  protocol::ResizeReport report;
};

/// One entry of PMIx's server module (pmix_server_module_t, PMIx 4.2) and whether bellowsd
/// gives PMIx an upcall for it; docs/daemon.md lists them in a table checked against this.
struct ServerUpcall {
  std::string_view name;
  bool implemented = false;
};

/// Every entry of the server module bellowsd's PmixServer hands to PMIx_server_init, in the
/// order of pmix_server.h. Needs no server.
std::vector<ServerUpcall> server_upcalls();

/// RAII PMIx server: PMIx_server_init in the constructor, PMIx_server_finalize in the
/// destructor, once no tool or rank is connected any more (it stops listening, gives those
/// connected Options::peers_leave_limit to leave, then shuts their connections). One per
/// process (PMIx keeps global state); a second one throws std::logic_error.
///
/// Thread safety: notify() and the on_*() setters may be called from any thread except PMIx's
/// progress thread, concurrently. Handlers run on the server's worker thread, one at a time.
class PmixServer {
 public:
  struct Options {
    /// Private directory for PMIx's rendezvous files; emptied at start and removed at exit
    /// (so it must belong to this daemon alone). Created when missing.
    std::filesystem::path tmpdir;
    /// Where to write the URI tools connect with; "" for none. Removed at exit.
    std::filesystem::path uri_file;
    /// This node's name (PMIX_HOSTNAME of launched clients); "" for the host name.
    std::string node_name;
    /// The server's nspace (rank 0).
    std::string nspace = "bellowsd";
    /// Set TCP_NODELAY on the connections to ranks (PMIx 4.2.2 does not, and a reply followed
    /// at once by an event then waits ~40 ms for a delayed ACK).
    bool tcp_nodelay = true;
    /// At the stop, how long the tools and ranks still connected get to finish and detach,
    /// their queries answered as ever, before their connections are shut (docs/daemon.md,
    /// "Stopping").
    std::chrono::milliseconds peers_leave_limit{1000};
  };

  using AllocateHandler = std::function<void(const AllocationRequest&, AllocationResponder)>;
  /// Answered like an allocation request: the responder's reply is PMIx_Job_control's.
  using JobControlHandler = std::function<void(const JobControlRequest&, AllocationResponder)>;
  using MetricsHandler = std::function<void(const ReceivedMetrics&)>;
  using ResizeReportHandler = std::function<void(const ReceivedResizeReport&)>;
  /// A rank attached and said which process it is: (its PMIx name, its pid).
  using RankAttachedHandler = std::function<void(const ProcId&, pid_t)>;
  using RankDetachedHandler = std::function<void(const ProcId&)>;
  using ToolHandler = std::function<void(const ProcId&)>;
  /// A client of a namespace registered here connected (PMIx_Init): its PMIx name.
  using ClientHandler = std::function<void(const ProcId&)>;

  /// Starts the server; throws PmixError (PMIx refused) or std::runtime_error (files).
  explicit PmixServer(Options options);
  ~PmixServer();
  PmixServer(const PmixServer&) = delete;
  PmixServer& operator=(const PmixServer&) = delete;

  /// The URI a tool passes as PMIX_SERVER_URI ("bellowsd.0;tcp4://127.0.0.1:PORT").
  [[nodiscard]] const std::string& uri() const noexcept;
  /// The server's own process name.
  [[nodiscard]] const ProcId& id() const noexcept;
  [[nodiscard]] const Options& options() const noexcept;

  /// Handler for allocation requests; without one they are answered PMIX_ERR_NOT_SUPPORTED
  /// "no controller is attached to this daemon". Requests without PMIX_ALLOC_NUM_NODES, with
  /// 0 nodes, a cancel without PMIX_ALLOC_REQ_ID, or another directive are refused
  /// PMIX_ERR_BAD_PARAM before any handler. Every request reaching the handler has its id.
  void on_allocate(AllocateHandler handler);
  /// Handler for PMIx_Job_control; without one it is answered PMIX_ERR_NOT_SUPPORTED "no
  /// controller is attached to this daemon". Calls read_job_control() refuses are answered
  /// with its status before any handler (and logged with the reason).
  void on_job_control(JobControlHandler handler);
  /// Handler for rank metrics; without one they are dropped.
  void on_metrics(MetricsHandler handler);
  /// Handler for the ranks' resize reports; without one they are dropped. Reports of another
  /// protocol version, with a field missing or unreadable (an unknown outcome, a malformed
  /// rank list) or refused by protocol::check() are dropped and logged before any handler.
  void on_resize_report(ResizeReportHandler handler);
  /// Handler for the ranks' attach notices (kRankAttached); without one they are dropped.
  void on_rank_attached(RankAttachedHandler handler);
  /// Handler for the ranks' detach notices (kRankDetached, sent as a rank's program ends);
  /// without one they are dropped.
  void on_rank_detached(RankDetachedHandler handler);
  /// Called when a tool attached, with the name the server gave it.
  void on_tool_connected(ToolHandler handler);
  /// Called (on the worker thread) when a client of a namespace registered here connected
  /// (PMIx_Init: the client_connected upcall), with its PMIx name.
  void on_client_connected(ClientHandler handler);

  /// The job as its controller last described it: what PMIx_Query_info is answered from
  /// (bellows/daemon/queries.hpp). Until the first one, only the keys that need no job are
  /// answered.
  void set_job_view(protocol::JobView view);
  [[nodiscard]] std::optional<protocol::JobView> job_view() const;

  /// Delivers a Bellows event (protocol kExpandDecided, ...) with payload (kVersion is added)
  /// to the ranks in range: PMIX_RANGE_LOCAL or PMIX_RANGE_GLOBAL reach tools and clients;
  /// PMIX_RANGE_CUSTOM reaches the processes in targets only.
  Status notify(pmix_status_t code, const Payload& payload,
                pmix_data_range_t range = PMIX_RANGE_LOCAL,
                const std::vector<ProcId>& targets = {});

  /// Delivers a standard PMIx event (bellows/daemon/standard_events.hpp) to the clients and
  /// tools attached here that registered for its code, with range PMIX_RANGE_LOCAL (as the
  /// Bellows events: the controller tells every node's daemon) and not cached. Waits until
  /// PMIx has handed it on, at most `wait`, so that an event raised just before the daemon
  /// stops still leaves; a status other than success says why it did not.
  Status notify_standard(const StandardEvent& event,
                         std::chrono::milliseconds wait = std::chrono::milliseconds(1000));

  /// Allocation requests handled and refused, metrics messages taken and dropped (malformed or
/// another protocol version), tools attached, so far.
  struct Counters {
    std::uint64_t allocation_requests = 0;
    std::uint64_t refused_requests = 0;
    std::uint64_t metrics = 0;
    std::uint64_t dropped_metrics = 0;
    std::uint64_t resize_reports = 0;
    std::uint64_t dropped_resize_reports = 0;
    std::uint64_t tools = 0;
    std::uint64_t queries = 0;  ///< PMIx_Query_info calls answered, whatever their status
  };
  [[nodiscard]] Counters counters() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace bellows::daemon
