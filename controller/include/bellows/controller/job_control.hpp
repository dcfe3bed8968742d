#pragma once
// The running job as the controller steers it: the daemons on its nodes and its ranks.
// Commands return at once; what the job and its daemons report back arrives as JobReport
// values through the listener, from inside progress() only (the same completion model as
// ResourceManager: no callback from another thread or from inside a command).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bellows::controller {

/// Identifies one resize of a job; ids count up from 1. 0 means "no resize".
using ResizeId = std::uint64_t;

/// What the job or one of its daemons reports. committed, refused, left, cancelled and
/// recovered are the outcomes of a resize report (protocol::ResizeOutcome,
/// bellows/protocol/resize_report.hpp), one for one and named alike; the other three are no
/// resize reports.
enum class JobReportKind {
  daemon_up,  ///< the daemon on `node` is running (after start_daemons)
  rank_died,  ///< a rank on `node` died; `text` says how
  node_lost,  ///< the daemon of `node` went away on its own; its rank counts as lost with it
  committed,  ///< the job runs with its new membership of `ranks` ranks
  refused,    ///< the job refused the resize and keeps its size; `text` says why
  left,       ///< the ranks of leaving node `node` handed their work over and left the job
  cancelled,  ///< the job dropped the resize (after cancel()) before carrying it out
  recovered,  ///< the job runs on without the ranks the failure `resize` lost
};

/// One report: a fact, not a verdict (what it means for the resize is the resize controller's
/// transition table's to say). resize is the resize the command belonged to; a rank that dies
/// on its own is reported with resize 0 and concerns whatever resize runs, if any.
struct JobReport {
  JobReportKind kind = JobReportKind::daemon_up;
  ResizeId resize = 0;
  std::string node;
  unsigned ranks = 0;
  std::string text;
  /// rank_died and node_lost: the job rank lost, when known (the rank reported its metrics).
  std::optional<std::uint32_t> rank;
  /// rank_died: how the process ended, as the daemon's RankExited said (exit status, 0 when
  /// killed by a signal, -1 when unknown; the signal, 0 when none or unknown). Otherwise -1, 0.
  std::int32_t exit_code = -1;
  std::int32_t signal = 0;
  /// rank_died and node_lost: whether the loss lowers the job's size (tell_lost). Not for a
  /// node the job's size counts out already (ResizeController::declare_lost).
  bool lowers_job_size = true;
};

/// Steers the job and the daemons of its nodes.
///
/// Thread safety: one thread (the controller's loop) calls every method.
/// Errors: commands do not throw; a command that cannot be carried out shows as a report
/// that never comes (the controller's timers catch it) or as a rank_died report.
class JobControl {
 public:
  using Listener = std::function<void(const JobReport&)>;

  virtual ~JobControl() = default;

  /// Where reports go from now on (replaces any earlier listener).
  virtual void set_listener(Listener listener) = 0;

  /// Starts a daemon on each node; one daemon_up report per node that comes up.
  virtual void start_daemons(ResizeId resize, const std::vector<std::string>& nodes) = 0;

  /// Tells the job to add ranks on the nodes (their daemons are up); committed once the new
  /// ranks joined, or rank_died.
  virtual void add_ranks(ResizeId resize, const std::vector<std::string>& nodes) = 0;

  /// Undoes what the resize started on the nodes: the job drops ranks it was adding there
  /// and their daemons stop. When it returns, no rank of the job uses these nodes any more
  /// and the nodes can be given back.
  virtual void withdraw(ResizeId resize, const std::vector<std::string>& nodes) = 0;

  /// Tells the job that its ranks on the nodes leave: they hand their work to their backup
  /// ranks and exit; committed when the others run with the smaller membership, and left
  /// for each leaving node once its ranks left.
  virtual void remove_ranks(ResizeId resize, const std::vector<std::string>& nodes) = 0;

  /// Asks the job to drop the resize it was told of (add_ranks() or remove_ranks()), saying
  /// why. The job answers cancelled when it had not begun it (its membership is as before),
  /// or, having already carried it out, its committed (and left) stand.
  virtual void cancel(ResizeId resize, const std::string& why) = 0;

  /// A failure (`failure`, numbered with the resizes): tells the daemon of every node in
  /// `survivors` that the ranks `lost_ranks` on `lost_nodes` are lost, saying how (`reason`,
  /// and `found_by`, the rank_died or node_lost report that found it, with its exit status and
  /// signal), and lowers the job's size by one rank per lost node unless `found_by` says it
  /// lowers it not. True when every one of them could be told.
  virtual bool tell_lost(ResizeId failure, const std::vector<std::string>& lost_nodes,
                         const std::vector<std::uint32_t>& lost_ranks, const std::string& reason,
                         const JobReport& found_by, const std::vector<std::string>& survivors) = 0;

  /// Delivers the reports that arrived since the last call to the listener. Never blocks.
  virtual void progress() = 0;
};

}  // namespace bellows::controller
