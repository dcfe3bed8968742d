#pragma once
// The controller's loop, one per job, run by the `bellows run` process (cli/run_command.cpp):
// the transport server the job's daemons and the operator's `bellows` commands talk to, the
// policy engine ticking on the nodes' metrics, and the resize state machine driving the
// resource manager and the job.
//
//   daemons ──Hello, NodeMetrics, AllocationRequest, ResizeAck──▶ ┐
//   operator ──OperatorResize, StatusRequest──────────────────────▶ ├─ inbox ─▶ step()
//                                                                  ┘     │
//   PolicyEngine.tick() every policy.tick ─▶ ResizeController ─▶ ResourceManager, DaemonJobControl
//
// Everything arriving from the transport's thread goes through one inbox; step() runs it on
// the caller's thread, so the resize controller, the engine and the job control see one
// thread only.

#include "bellows/controller/clock.hpp"
#include "bellows/controller/controller_lock.hpp"
#include "bellows/controller/daemon_job_control.hpp"
#include "bellows/controller/event_log.hpp"
#include "bellows/controller/fence_book.hpp"
#include "bellows/controller/job_record.hpp"
#include "bellows/controller/modex_book.hpp"
#include "bellows/controller/resize_controller.hpp"
#include "bellows/controller/resource_manager.hpp"

#include <bellows/policy/engine.hpp>
#include <bellows/transport/endpoint.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace bellows::controller {

/// How a controller takes a running job over (`bellows run --attach`): the job's daemons run
/// already, started by the controller that died; they come back to this one.
struct AttachOptions {
  /// The job's ranks as the job record says (status shows them until the next report).
  unsigned ranks = 0;
  /// A daemon that has not said hello again by then is a lost node (a failure).
  std::chrono::milliseconds return_window{10000};
  /// Who takes the job over, for the event log's attached line ("bellows run --attach, pid 812").
  std::string who;
  /// The job's PMIx job map and every rank number given, as the job record says: the daemons
  /// keep the job's namespace registered with them, so fences over the job's ranks and the
  /// numbers a grow gives go on from there.
  std::map<std::string, std::uint32_t> pmix_job_map;
  std::vector<std::string> pmix_rank_nodes;
  /// The first rank's process as the job record says (0: unknown), kept in the record.
  std::int32_t first_rank_pid = 0;
  /// Where to listen instead of the endpoint the daemons reconnect to ("": there), with the
  /// job's key: a controller taking a job over whose first node, the host of that endpoint,
  /// is lost. The contact is published again, and the daemons follow it there.
  std::string listen_endpoint;
  /// The job's first node when it was lost before the takeover (Slurm took it out of the job;
  /// not among the nodes), with the job ranks it held as the record says: once the survivors
  /// are back, the ranks none of them reports as its own are declared lost to them
  /// (runtime::lost_ranks_after_takeover), a failure of this controller. `ranks` above counts
  /// them out already.
  std::string lost_first_node;
  std::vector<std::uint32_t> lost_first_node_ranks;
};

struct ControllerOptions {
  std::string job;                     ///< the job's id
  std::string backend = "local";       ///< for status
  std::filesystem::path job_dir;       ///< private directory (0700) of the job
  /// Where to listen: ipc://SOCKET_DIR/controller.sock (a transport::SocketDirectory of this
  /// host, whatever the length of job_dir) or tcp://ADDRESS:PORT.
  std::string endpoint;
  std::vector<std::string> nodes;      ///< the job's nodes at start, its first node first
  unsigned min_nodes = 1;              ///< operator and application resizes stay within
  unsigned max_nodes = 1;              ///< [min_nodes, max_nodes]
  std::optional<policy::Policy> policy;  ///< none: resizes only on request
  std::string policy_file;             ///< for status
  ResizeLimits limits = ResizeLimits::defaults();
  /// How the nodes' daemons start the job's ranks (none: the job spawns its ranks itself).
  RankLaunch rank_launch;
  /// The policy's text as loaded, kept in the job record for a controller that takes over.
  std::string policy_text;
  /// How a Slurm job grows as `bellows run --expand-strategy` asked ("auto", "merge",
  /// "companion"; "" on the local backend), kept in the job record for a controller that
  /// takes over.
  std::string expand_strategy;
  /// Set: this controller takes the running job over. It binds the endpoint and key the job
  /// directory names (the daemons reconnect to them by themselves), closes what the event log
  /// left open, continues its ids and writes an `attached` line (takeover.hpp).
  std::optional<AttachOptions> attach;
};

/// Thread safety: step(), status() and the accessors from one thread (the loop's); the
/// transport's thread only fills the inbox.
class ControllerService {
 public:
  /// Locks the job directory (ControllerLock: one controller per job), binds options.endpoint
  /// (over ipc only the job owner's uid may connect), writes it to the job directory's
  /// controller.endpoint, opens its events.jsonl and metrics.jsonl (one line per node report;
  /// protocol::JobDirectory) and writes its job.json (job_record.hpp), rewritten whenever the
  /// job's nodes, ranks or daemons change. With options.attach, binds what controller.endpoint
  /// and controller.key say instead. rm, launcher and clock must outlive the service. Throws
  /// transport::TransportError or std::runtime_error naming what failed (a controller of the
  /// job that still runs included).
  ControllerService(ControllerOptions options, ResourceManager& rm, NodeLauncher& launcher,
                    const Clock& clock);
  ~ControllerService();
  ControllerService(const ControllerService&) = delete;
  ControllerService& operator=(const ControllerService&) = delete;

  [[nodiscard]] const std::string& endpoint() const;
  [[nodiscard]] std::filesystem::path event_log_path() const;

  /// Starts the daemons of the job's first nodes.
  void start_daemons();
  /// Once the daemons registered: has the daemons of the job's first nodes but the first
  /// start their ranks (options.rank_launch; the first rank is the caller's to start).
  void start_initial_ranks();
  /// Once the daemons registered: has the first node's daemon register the job's first rank,
  /// which the caller starts, as rank 0 of the job's PMIx namespace; the daemon writes the
  /// rank's PMIx variables to protocol::JobDirectory::rank_environment_file of the first node.
  /// False without options.rank_launch or a registered daemon there.
  bool register_first_rank();
  /// True once the daemon of every node the job holds registered.
  [[nodiscard]] bool daemons_registered() const;

  /// Runs what arrived (waiting up to `wait` for something), the resource manager's and the
  /// job's answers, the timers, and the policy tick when it is due.
  void step(std::chrono::milliseconds wait);

  /// The job's first rank, which the caller started (`pid`, its launcher), ended with
  /// `exit_code` or `signal` (0 when none): when that is a crash, a death on the job's first
  /// node, as its daemon would report it (the job ends with it, before the daemon may see it).
  void first_rank_ended(std::int32_t pid, std::int32_t exit_code, std::int32_t signal);
  /// The process the caller started as the job's first rank (its launcher), for the job
  /// record: a controller that takes a PMIx-native job over watches it for the job's end.
  void note_first_rank_pid(std::int32_t pid) { first_rank_pid_ = pid; }
  /// Whether a rank on a node other than the first may still run: its daemon is registered
  /// and has not reported its rank's end (RankExited). A job that lost its first rank goes
  /// on until none does.
  [[nodiscard]] bool other_ranks_running() const;
  /// Whether this controller took the job over (options.attach).
  [[nodiscard]] bool attached() const noexcept { return options_.attach.has_value(); }
  /// The daemons connected and registered now.
  [[nodiscard]] std::size_t daemons_connected() const noexcept { return daemons_.size(); }
  /// Whether a job taken over still waits for daemons to come back (within its return window).
  [[nodiscard]] bool awaiting_daemons() const noexcept { return !awaiting_return_.empty(); }
  /// Whether every node's daemon reported its rank (the controller knows every node and rank).
  /// A PMIx-native job's ranks report nothing: there, whether every node's daemon is registered
  /// and the node has a rank in the job map.
  [[nodiscard]] bool ranks_known() const;
  /// A job taken over: how the rank of its first node ended, as that node's daemon reported it
  /// (RankExited: exit code 0 when it detached, -1 when it ended without leaving the job);
  /// std::nullopt while it runs. The first rank is no child of this process.
  [[nodiscard]] const std::optional<protocol::RankExited>& first_rank_end() const noexcept {
    return first_rank_end_;
  }
  /// How the job ended and the exit status the caller returns for it, for the job record that
  /// shutdown() writes (`bellows wait` returns the status and prints how).
  void note_end(std::string how, int exit_status) {
    end_ = std::move(how);
    exit_status_ = exit_status;
  }
  /// Whether the job reported its recovery from every failure recorded (none: true).
  [[nodiscard]] bool recovered_from_failures() const { return !resizes_->degraded(); }

  /// Why the job is to end, when a PMIx_Job_control terminated the whole job (the caller
  /// ends it as on a stop signal); std::nullopt otherwise.
  [[nodiscard]] const std::optional<std::string>& termination_requested() const noexcept {
    return termination_requested_;
  }

  /// Asks for a resize by delta nodes (> 0 grow, < 0 shrink) on behalf of requester; a grow
  /// is granted none of `exclude` (ExpandRequest::exclude).
  Outcome resize(int delta, Requester requester, const std::string& reason,
                 const std::vector<std::string>& exclude = {});

  /// The job's state: job, backend, nodes, ranks, iteration, GFLOP/s-free progress numbers,
  /// the resize in flight and the finished ones.
  [[nodiscard]] nlohmann::json status() const;
  /// What the job's daemons are told of the job (protocol::JobView): the same nodes, ranks,
  /// node range, policy and resize in flight as status().
  [[nodiscard]] protocol::JobView job_view() const;
  /// The last iteration any node reported (0 before the first).
  [[nodiscard]] std::uint64_t iteration() const noexcept { return iteration_; }
  [[nodiscard]] const ResizeController& resizes() const noexcept { return *resizes_; }

  /// Ends a resize still in flight (job_ended, in the event log), stops the daemons and the
  /// transport (at the end of the job). Each daemon is sent Stop as a request and given
  /// kStopAnswerTimeout to answer it (once it told its PMIx tools that the job ended) before
  /// it is signalled. In a job taken over, a daemon not started here is then given up to
  /// kStopAnswerTimeout more for its connection to close: it has ended when this returns.
  void shutdown();
  static constexpr std::chrono::milliseconds kStopAnswerTimeout{2000};

 private:
  /// The daemon of `node` went away on its own: on the local backend, kills its rank (`pid`,
  /// 0 when never reported), which would otherwise run on with no daemon.
  void fence_unmanaged_rank(const std::string& node, std::int32_t pid);
  struct NodeState {
    policy::NodeMetrics node;  ///< what the policy gets: the last report, steals summed per tick
    bool reported = false;
    std::uint32_t rank = protocol::kNoRank;  ///< the node's rank and its pid, as last reported
    std::int32_t pid = 0;
  };

  void post(std::function<void()> work);
  void on_request(const transport::Incoming& in, transport::Responder responder);
  void on_notification(const transport::Incoming& in);
  /// A message_log line in the event log for a report of a rank that logs messages.
  void log_message_log(const std::string& node, const protocol::NodeMetrics& report);
  void on_peer_gone(const transport::PeerId& peer);
  /// The node whose daemon holds `peer`, or "" for a peer that is no registered daemon.
  [[nodiscard]] std::string node_of(const transport::PeerId& peer) const;
  /// A forwarded PMIx_Allocation_request of `node`: extend or release starts a resize and
  /// remembers which request it answers; cancel calls the request's resize off.
  protocol::Ack on_allocation_request(const std::string& node, const protocol::AllocationRequest& request);
  /// A forwarded PMIx_Job_control of `node`: signals or terminates ranks through their
  /// daemons (SignalRank), or ends the job; logged (event job_control) with who asked.
  protocol::Ack on_job_control(const std::string& node, const protocol::JobControlRequest& request);
  /// PMIx fences and direct modex across the job's nodes (collectives.cpp): a daemon's fence
  /// contribution, its request for a rank's data, its answer to the controller's request.
  void on_fence_contribution(const std::string& node, const protocol::FenceContribution& contribution);
  void on_modex_request(const std::string& node, const protocol::ModexRequest& request);
  void on_modex_reply(const std::string& node, const protocol::ModexReply& reply);
  /// A failure is told to the survivors (RanksLost): the fences and modex requests that wait
  /// for what it lost end with an error.
  void collectives_lost(const protocol::RanksLost& lost);
  /// Tells the daemon that forwarded an allocation request how its resize ended.
  void answer_allocation_request(const ResizeView& finished);
  bool send(const std::string& node, const protocol::Message& message);
  void tick_policy();
  /// recovery.on_node_loss: replace. Once the job has recovered from a failure, asks for as
  /// many nodes as it dropped (an expand by the policy, within nodes.max), none of those the
  /// job lost (replacement_order), one failure at a time and when no resize is in flight.
  void replace_lost_nodes();
  void track_finished();
  /// Sends job_view() to every registered daemon that does not hold it yet (all of them when
  /// it changed).
  void publish_job_view();
  /// Tells the fences the job's ranks of the view just published and the numbers that left
  /// (a wildcard fence over the job means the ranks in it); sends the releases of what ends.
  void fences_job_changed();

  /// The job record as it is now; written when it differs from the last one written.
  [[nodiscard]] JobRecord job_record() const;
  void write_job_record_if_changed();
  /// A job taken over: the daemons not back by the end of the return window are lost nodes.
  void give_up_on_missing_daemons();
  /// A job taken over after its first node was lost (AttachOptions::lost_first_node): once
  /// the survivors are back, declares the ranks of that node that none of them reports as its
  /// own lost to them (ResizeController::declare_lost), once.
  void declare_lost_first_node();

  ControllerOptions options_;
  ControllerLock lock_;
  ResourceManager& rm_;
  const Clock& clock_;
  EventLog log_;
  std::ofstream metrics_log_;  ///< metrics.jsonl: every NodeMetrics, with its time
  DaemonJobControl job_control_;
  std::unique_ptr<ResizeController> resizes_;
  std::optional<policy::PolicyEngine> engine_;
  std::unique_ptr<transport::Server> server_;

  std::mutex inbox_mutex_;
  std::condition_variable inbox_ready_;
  std::deque<std::function<void()>> inbox_;
  /// Under inbox_mutex_: the daemons' connections that closed, as the transport said (for
  /// shutdown(), which waits for those of daemons it did not start).
  std::set<transport::PeerId> gone_peers_;

  std::map<std::string, transport::PeerId> daemons_;  ///< node -> its daemon's connection
  std::map<std::string, NodeState> node_state_;
  protocol::JobView published_view_;           ///< the last job view sent
  std::set<std::string> nodes_with_view_;      ///< daemons that hold published_view_
  std::map<std::string, std::uint64_t> joined_order_;
  std::uint64_t next_join_ = 0;
  std::uint64_t iteration_ = 0;
  double iteration_seconds_ = 0.0;
  double gflops_ = 0.0;
  std::size_t finished_seen_ = 0;
  std::size_t nodes_before_resize_ = 0;
  Clock::time_point next_tick_{};
  std::string last_decision_;
  std::string last_hold_;  ///< why the last policy tick held (empty: it decided, or none ran)
  std::string policy_paused_;  ///< why the last tick was skipped (empty: it ran)
  /// Failures the job recovered from whose replacement was considered, and the ones whose
  /// nodes are still to be asked for (id and the nodes dropped).
  std::set<ResizeId> recoveries_seen_;
  std::set<std::string> ranks_ended_;  ///< nodes whose daemon reported its rank's end
  std::deque<std::pair<ResizeId, std::vector<std::string>>> replacements_due_;
  /// The allocation request (its daemon's node and its request id) that started a resize
  /// still in flight, and whether its requester cancelled it.
  struct AllocationOrigin {
    std::string node;
    std::string request_id;
    bool cancelled = false;
  };
  std::map<ResizeId, AllocationOrigin> allocation_requests_;
  std::optional<std::string> termination_requested_;
  std::map<std::string, std::int32_t> daemon_pids_;  ///< node -> its daemon's pid (its hello)
  JobRecord written_record_;                         ///< the job.json last written
  std::string end_;                                  ///< how the job ended (note_end)
  std::optional<int> exit_status_;                   ///< the job's exit status (note_end)
  /// A job taken over: the nodes whose daemon has not said hello again, and until when it may.
  std::set<std::string> awaiting_return_;
  Clock::time_point return_deadline_{};
  bool first_node_loss_decided_ = false;  ///< declare_lost_first_node decided (declared or not)
  std::optional<protocol::RankExited> first_rank_end_;
  std::int32_t first_rank_pid_ = 0;  ///< note_first_rank_pid, or the record's of a job taken over
  FenceBook fences_;
  ModexBook modex_;
  std::set<std::uint64_t> failures_seen_by_collectives_;  ///< RanksLost is sent once per survivor
};

}  // namespace bellows::controller
