#pragma once
// JobControl over the job's daemons: the resize orders go to the daemon of the job's first
// node (where the job's first rank runs, which carries every resize out for the whole job);
// the resize reports the daemons forward from their ranks (committed, refused, left,
// cancelled) come back as JobReports of the same names. Nothing is sent when a resize
// commits: the job's first rank reported it, so the job knows. Daemons on new nodes are
// started through a NodeLauncher and count as up once they registered (Hello) with the
// controller. With a RankLaunch, the ranks of new nodes are started by their nodes' daemons
// (StartRank) and join the job through its port.

#include "bellows/controller/job_control.hpp"
#include "bellows/controller/local_node_pool.hpp"

#include <bellows/protocol/messages.hpp>

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace bellows::controller {

/// How a node's daemon starts the job's rank there (protocol::StartRank): the command (the
/// job's launcher and program) and the variables that tell the rank to join the running job.
struct RankLaunch {
  std::vector<std::string> command;
  std::vector<std::string> environment;  ///< NAME=VALUE
  /// The program is PMIx-native (not linked with libbellows; `bellows run --pmix-native`): it
  /// reports no resize, so a grow commits once every new rank's PMIx client connected, and a
  /// shrink once every leaving rank, left out of the job's process set, ended with status 0
  /// (docs/daemon.md, "PMIx-native programs through a grow and a shrink").
  bool pmix_native = false;
};

/// The environment of the rank that resize `resize` (0: the job's start) adds as number
/// `ordinal` of `count` (in the order of the resize's nodes): the launch's, then
/// BELLOWS_JOIN_RESIZE, BELLOWS_JOIN_ORDINAL and BELLOWS_JOIN_COUNT
/// (protocol::job_environment).
[[nodiscard]] std::vector<std::string> join_environment(const RankLaunch& launch, ResizeId resize,
                                                        std::size_t ordinal, std::size_t count);

/// Thread safety: one thread (the controller's loop) calls every method, the daemon_*()
/// and resize_report() inputs included.
class DaemonJobControl final : public JobControl {
 public:
  /// Sends a message to the daemon of a node; false when no daemon of that node is
  /// registered.
  using Sender = std::function<bool(const std::string& node, const protocol::Message& message)>;

  /// `first_node` is the node of the job's first rank. launcher must outlive this object.
  DaemonJobControl(std::string job, std::string first_node, NodeLauncher& launcher, Sender send);

  // ---- what the daemons say (called by the controller's loop)
  /// The daemon of `node` registered.
  void daemon_registered(const std::string& node);
  /// The daemon of `node` went away (exited, crashed, dropped): node_lost, with the node's
  /// rank as last noted; for a daemon told to stop as its node left (resize_report), the
  /// node's `left` instead.
  void daemon_gone(const std::string& node);
  /// The job rank that runs on `node`, as its daemon last reported it (NodeMetrics). The
  /// node of rank 0 is the one the job's resize orders go to: after the job lost its first
  /// rank, the survivors' new rank 0 reports from another node, and the orders follow it.
  void note_rank(const std::string& node, std::uint32_t rank) {
    node_ranks_[node] = rank;
    if (rank == 0) first_node_ = node;
  }
  /// A rank of `node` ended without leaving the job (its daemon saw the process go): a death
  /// of the resize in flight, if any. A PMIx-native job's rank that ended with status 0 on a
  /// node its shrink takes: left (and committed once every leaving rank ended); any other
  /// normal end: nothing.
  void rank_exited(const std::string& node, const protocol::RankExited& exited);
  /// A process of `node` connected to its daemon as a PMIx client (RankConnected). In a
  /// PMIx-native job, the new rank of a node its grow adds: once every new rank connected, the
  /// grow is committed. Otherwise nothing.
  void rank_connected(const std::string& node, const protocol::RankConnected& connected);
  /// The ranks of `node` reported how a resize ended (the ResizeAck's record): a JobReport of
  /// the outcome's name, with the record's resize, job size and text. At `left` the node's
  /// daemon is stopped: through the launcher when it was started here, else (a job taken
  /// over) told to stop (Stop), and then `left` waits for it to go (daemon_gone).
  void resize_report(const std::string& node, const protocol::ResizeReport& report);

  // ---- JobControl
  void set_listener(Listener listener) override { listener_ = std::move(listener); }
  void start_daemons(ResizeId resize, const std::vector<std::string>& nodes) override;
  void add_ranks(ResizeId resize, const std::vector<std::string>& nodes) override;
  void withdraw(ResizeId resize, const std::vector<std::string>& nodes) override;
  void remove_ranks(ResizeId resize, const std::vector<std::string>& nodes) override;
  void cancel(ResizeId resize, const std::string& why) override;
  /// Sends RanksLost to each survivor's daemon; the job counts one rank per lost node less
  /// (none when found_by.lowers_job_size is false).
  bool tell_lost(ResizeId failure, const std::vector<std::string>& lost_nodes,
                 const std::vector<std::uint32_t>& lost_ranks, const std::string& reason,
                 const JobReport& found_by, const std::vector<std::string>& survivors) override;
  void progress() override;

  /// From now on the ranks of new nodes are started by their daemons with `launch` (none
  /// set: the job starts its new ranks itself, by MPI_Comm_spawn).
  void set_rank_launch(RankLaunch launch) { rank_launch_ = std::move(launch); }
  /// Has the daemons of `nodes` start their rank (StartRank) for resize `resize` (0: the
  /// job's start); a node without a registered daemon counts as a death. Nothing without a
  /// RankLaunch. Each rank's environment is the launch's and the join's place
  /// (join_environment): the ranks form one group among themselves without asking the job.
  /// A node not in the job map yet gets the next PMIx rank number (job_map()).
  void start_ranks(ResizeId resize, const std::vector<std::string>& nodes);
  /// Has the daemon of the job's first node register the job's first rank, which `bellows
  /// run` starts itself, as PMIx rank 0 of the job's namespace and write its PMIx variables
  /// to the node's rank environment file (StartRank with started_by_daemon false). False when
  /// that daemon is not registered or there is no RankLaunch.
  bool register_first_rank();
  /// The job's PMIx namespace: its id.
  [[nodiscard]] const std::string& nspace() const noexcept { return job_; }
  /// The job map: each node's PMIx rank in the job's namespace. The first nodes are 0..n-1 in
  /// their order; a node a grow adds gets the next number not given yet; a node that leaves
  /// or is lost leaves the map, its number is not given again.
  [[nodiscard]] const std::map<std::string, std::uint32_t>& job_map() const noexcept { return pmix_ranks_; }
  /// Every PMIx rank number given so far, with the node it was given on: what StartRank's map
  /// says (a rank that left stays there: PMIx 4.2.2 takes a namespace's ranks only as 0..n-1).
  [[nodiscard]] const std::vector<std::string>& numbered_nodes() const noexcept { return rank_nodes_; }
  /// Starts the daemons of the job's first nodes (before the job starts); a node whose
  /// daemon cannot start shows as one that never registers. A resize order for the first
  /// node decided before its daemon registered waits for it (the controller answers, and
  /// takes resizes, while the job's daemons are still starting).
  void start_initial_daemons(const std::vector<std::string>& nodes);
  /// Whether the daemon of `node` is registered.
  [[nodiscard]] bool registered(const std::string& node) const { return registered_.contains(node); }
  /// Whether the daemon of `node` was started here (through the launcher) and not stopped.
  [[nodiscard]] bool started_here(const std::string& node) const { return started_.contains(node); }
  /// Stops the daemons this object started that still run (at the end of the job).
  void stop_started_daemons();
  /// Ranks in the job as last reported (0 before the first report).
  [[nodiscard]] unsigned job_size() const noexcept { return job_size_; }

  // ---- a job taken over (bellows run --attach): its daemons run already
  /// The job's size as the controller that died last recorded it.
  void set_job_size(unsigned ranks) noexcept { job_size_ = ranks; }
  /// The job map and every PMIx rank number given (a number that left included), as the
  /// controller that died last recorded them (job_map(), numbered_nodes()): the daemons keep
  /// the namespace registered with them, and a grow gives the next number from there.
  void take_over_job_map(std::map<std::string, std::uint32_t> job_map, std::vector<std::string> rank_nodes) {
    pmix_ranks_ = std::move(job_map);
    rank_nodes_ = std::move(rank_nodes);
  }
  /// The daemon of `node`, started by the controller that died, did not come back (say hello)
  /// within the takeover's bound: node_lost, as a daemon that went away, with `why`.
  void daemon_not_back(const std::string& node, const std::string& why);
  /// The job's first node, where the resize orders go: rank 0's, as last reported.
  [[nodiscard]] const std::string& first_node() const noexcept { return first_node_; }

 private:
  void report(JobReport report) { reports_.push_back(std::move(report)); }
  /// The ranks of `node` left the job: forgets them, and stops the node's daemon when this
  /// controller started it (returns true); a daemon it did not start is left to the caller.
  bool node_left(const std::string& node);
  /// A PMIx-native job's shrink: its leaving nodes leave the job map at once, so that the next
  /// JobView tells every daemon the ranks that stay (their process set), and wait there.
  void remove_native_ranks(ResizeId resize, const std::vector<std::string>& nodes);
  /// Sends to the first node's daemon; a missing one is reported as a death there. While the
  /// job starts and that daemon, launched by start_initial_daemons(), has not registered yet,
  /// the message is held and sent once it has (in the order held).
  void send_to_first_node(ResizeId resize, const protocol::Message& message);
  /// The first node's daemon registered: what was held for it goes, in order.
  void send_held_for_first_node();
  /// The StartRank of `node`'s rank, with the job map (every number given) and the numbers in
  /// it that left the job (none of the job map's nodes holds them now).
  protocol::StartRank start_order(ResizeId resize, const std::string& node, std::vector<std::string> environment,
                                  bool started_by_daemon) const;
  /// Stops a daemon started here: launcher_.stop_gone() for one that went away on its own
  /// (what is left of it goes at once), launcher_.stop() otherwise.
  void stop_daemon(const std::string& node);

  std::string job_;
  std::string first_node_;
  NodeLauncher& launcher_;
  Sender send_;
  Listener listener_;
  std::deque<JobReport> reports_;

  std::set<std::string> registered_;
  std::map<std::string, ResizeId> starting_;   ///< node -> resize that started its daemon
  std::set<std::string> started_;              ///< daemons started here and not stopped
  std::set<std::string> gone_;                 ///< started here, went away on their own
  /// The job's first daemons (start_initial_daemons) launched and not registered yet.
  std::set<std::string> awaiting_first_hello_;
  /// Resize orders to the first node decided before its daemon first registered: resize,
  /// message, in order.
  std::deque<std::pair<ResizeId, protocol::Message>> held_for_first_node_;
  /// Daemons not started here, told to stop as their node left: node -> the `left` report,
  /// delivered once the daemon has gone.
  std::map<std::string, JobReport> stopping_;
  unsigned job_size_ = 0;
  std::map<std::string, std::uint32_t> node_ranks_;  ///< node -> its rank, as last reported
  RankLaunch rank_launch_;
  std::map<std::string, std::uint32_t> pmix_ranks_;  ///< the job map: node -> PMIx rank
  std::vector<std::string> rank_nodes_;              ///< PMIx rank -> the node it was given on
  /// A PMIx-native job's resize in flight: its nodes, and those whose rank has not yet
  /// connected (a grow) or ended (a shrink).
  struct NativeResize {
    ResizeId id = 0;
    bool grow = true;
    std::vector<std::string> nodes;
    std::set<std::string> waiting;
  };
  std::optional<NativeResize> native_resize_;
};

}  // namespace bellows::controller
