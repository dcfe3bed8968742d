#pragma once
// The resize state machine of one job: takes expand and shrink orders, drives the resource
// manager and the job through the transitions of resize_state.hpp, guards every phase with a
// timer, and writes every transition to the event log.
//
// Expand: ask the resource manager -> start daemons on the granted nodes -> tell the job to
// add ranks -> wait for the commit. Shrink: pick nodes -> tell the job which ranks leave ->
// wait until they drained and exited -> only then give the nodes back.
// Nothing is lost on the abort paths: an expand aborted after the grant gives the granted
// nodes back; a shrink aborted keeps the job at its size. Nodes the resource manager does
// not take back are listed in unreleased_nodes().

#include "bellows/controller/clock.hpp"
#include "bellows/controller/event_log.hpp"
#include "bellows/controller/job_control.hpp"
#include "bellows/controller/resize_limits.hpp"
#include "bellows/controller/resize_state.hpp"
#include "bellows/controller/resource_manager.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bellows::controller {

/// An order to grow the job.
struct ExpandOrder {
  unsigned count = 0;  ///< nodes to add, at least 1
  Requester requester = Requester::policy;
  std::string reason;  ///< why, for the event log
  /// The limit on the whole resize; the controller.resize_deadline setting when unset.
  std::optional<std::chrono::milliseconds> deadline;
  /// Nodes the resource manager must not grant (ExpandRequest::exclude).
  std::vector<std::string> exclude{};
};

/// An order to shrink the job: either count (the controller picks the nodes added last) or
/// an explicit list of nodes, not both.
struct ShrinkOrder {
  unsigned count = 0;
  std::vector<std::string> nodes;
  Requester requester = Requester::policy;
  std::string reason;
  std::optional<std::chrono::milliseconds> deadline;
};

/// Whether an order or event was taken; text says what happened or why not.
struct Outcome {
  bool accepted = false;
  ResizeId resize = 0;
  std::string text;
};

/// A resize as seen from outside.
struct ResizeView {
  ResizeId id = 0;
  ResizeKind kind = ResizeKind::expand;
  ResizeState state = ResizeState::none;
  unsigned count = 0;
  Requester requester = Requester::policy;
  std::string reason;
  std::vector<std::string> nodes;  ///< granted nodes (expand) or leaving nodes (shrink)
};

/// A failure as seen from outside (failure_state.hpp): the ranks and nodes lost, and when.
struct FailureView {
  ResizeId id = 0;  ///< counted with the resizes
  ResizeState state = ResizeState::detected;
  std::vector<std::string> nodes;    ///< the lost nodes
  std::vector<std::uint32_t> ranks;  ///< the lost job ranks, ascending (those that were known)
  std::string reason;                ///< how the controller learnt of it
  std::string detected_at;           ///< UTC, as in the event log
  std::string ended_at;              ///< UTC when recovered or given up, else ""
  double seconds_to_end = 0;         ///< from detected to recovered or given up
};

/// The resize state machine of one job. At most one resize is in flight at a time.
///
/// Thread safety: not thread-safe. One thread (the controller's loop) calls every method
/// and poll(), which is also where the resource manager's and the job's callbacks arrive.
/// Errors: bad orders and events not allowed in the current state are refused with an
/// Outcome and a refused line in the event log; nothing throws for them.
///
/// Failures: a rank that dies, or a node whose daemon goes away, while no resize is in
/// flight is a failure (failure_state.hpp): recorded apart from the resizes, each with its id
/// in their sequence; the lost nodes leave the job (but its first node) and go back to the
/// resource manager, and the surviving nodes' daemons are told. A death during a resize is
/// that resize's rank_died, as before. A failure while another is being recovered is one of
/// its own; the job's recovered report for a failure also ends the earlier ones still open.
class ResizeController {
 public:
  /// Controls `job`, which runs on `nodes` (its first node first; that node never leaves).
  /// rm, job_control, clock and log must outlive the controller. Registers itself as
  /// job_control's listener. Throws std::invalid_argument for an empty job id, an empty or
  /// duplicated node list, or a limit that is not positive.
  ResizeController(std::string job, std::vector<std::string> nodes, ResourceManager& rm,
                   JobControl& job_control, const Clock& clock, EventLog& log,
                   ResizeLimits limits = ResizeLimits::defaults());
  /// Unregisters from job_control; a resize still in flight is left as it is.
  ~ResizeController();
  ResizeController(const ResizeController&) = delete;
  ResizeController& operator=(const ResizeController&) = delete;

  /// Starts an expansion unless another resize runs or the order is malformed.
  Outcome request_expand(const ExpandOrder& order);
  /// Starts a shrink unless another resize runs or the order is malformed (no nodes, a node
  /// that is not the job's, the first node, all nodes).
  Outcome request_shrink(const ShrinkOrder& order);

  /// Hands over the resource manager's and the job's answers, fires the timers that are
  /// due, and runs the resulting transitions. Never blocks.
  void poll();

  /// Applies one event to the resize `resize` (0: the one in flight), for event sources
  /// outside the two interfaces (an operator, a transport). Refused when it is not that
  /// resize's, not allowed in its state, or is request or rm_granted (an order and a grant
  /// carry more than an event: they come through request_*() and the resource manager).
  Outcome deliver(ResizeId resize, ResizeEvent event, std::string detail = {});

  /// The resize in flight, if any.
  [[nodiscard]] std::optional<ResizeView> active() const;
  /// Resizes that reached committed or aborted, oldest first.
  [[nodiscard]] const std::vector<ResizeView>& finished() const noexcept { return finished_; }
  /// The job's nodes now, its first node first.
  [[nodiscard]] const std::vector<std::string>& nodes() const noexcept { return nodes_; }
  /// Nodes the resource manager did not take back when asked; they still belong to the job
  /// in its books and need an operator (or a later release) to go back.
  [[nodiscard]] const std::vector<std::string>& unreleased_nodes() const noexcept {
    return unreleased_;
  }
  /// When the next timer is due (for a loop that sleeps), if any.
  [[nodiscard]] std::optional<Clock::time_point> next_timer() const;

  /// Every failure so far, oldest first, open or ended.
  [[nodiscard]] std::vector<FailureView> failures() const;
  /// Whether the job runs degraded: a failure was not (yet) recovered from.
  [[nodiscard]] bool degraded() const;
  /// Ends the failures still open when the job ends (given_up, with `why`).
  void end_failures(const std::string& why);
  /// Records a failure for `node`, which left the job before this controller could find its
  /// loss (a first node Slurm took out of the job before a takeover), and its job ranks
  /// `ranks`: node_lost as for any lost node (`why` its reason), and the survivors are told,
  /// with nothing given back or stopped; the job's size is lowered by it only when
  /// `lower_job_size`. Refused (and logged) for a node of the job, a node lost in a failure
  /// already, or no node or rank.
  Outcome declare_lost(const std::string& node, const std::vector<std::uint32_t>& ranks, const std::string& why,
                       bool lower_job_size);
  /// Numbers the resizes and failures from now on after `last` (a controller that took a
  /// running job over continues the ids of its event log). Never numbers backwards.
  void continue_ids_after(ResizeId last) noexcept {
    if (last >= next_id_) next_id_ = last + 1;
  }
  /// The id the next resize or failure gets.
  [[nodiscard]] ResizeId next_id() const noexcept { return next_id_; }

 private:
  struct Resize;
  struct Input {
    ResizeId resize = 0;
    ResizeEvent event = ResizeEvent::request;
    std::optional<RmAnswerRecord> rm;
    std::vector<std::string> nodes;
    std::string detail;
  };

  Outcome start(std::unique_ptr<Resize> resize);
  Outcome refuse_order(ResizeKind kind, unsigned count, Requester requester,
                       const std::string& reason, const std::string& why);
  Outcome apply(Input input);
  Outcome refuse(const Input& input, const std::string& why);
  /// Carries out a transition's action; `from` is the state the resize left (it is already
  /// in the transition's target).
  void run_action(ResizeAction action, ResizeState from, const Input& input, std::string& detail);
  /// A shrink in draining whose every leaving node reported its ranks left: drain_done.
  void finish_drain_if_complete();
  void arm_state_timer();
  void fire_due_timers();
  void drain();
  void on_job_report(const JobReport& report);
  // failures (failure_handling.cpp)
  void on_failure(const JobReport& report);
  void on_recovered(const JobReport& report);
  /// A new failure of `node` (its `ranks`, those known), learnt `how`, and its first step.
  Outcome record_failure(const std::string& node, std::vector<std::uint32_t> ranks, const std::string& how,
                         JobReport found_by, ResizeEvent event);
  Outcome apply_failure(std::size_t index, ResizeEvent event, std::string detail);
  void drop_lost(std::size_t index, std::string& detail);
  void fire_failure_deadlines();
  void on_rm_answer(ResizeId id, ExpandAnswer answer);
  void on_release_answer(ResizeId id, const std::vector<std::string>& nodes, RmStatus status);
  void give_back_stray(ResizeId id, const std::vector<std::string>& nodes);
  void log(const Input& input, const ResizeView* resize, ResizeState from, ResizeState to,
           double duration_s, const std::string& detail, bool refused);
  [[nodiscard]] ResizeView view(const Resize& resize) const;
  [[nodiscard]] const ResizeView* finished_view(ResizeId id) const;
  template <typename Callback>
  [[nodiscard]] auto guarded(Callback callback);

  std::string job_;
  std::vector<std::string> nodes_;
  ResourceManager& rm_;
  JobControl& job_control_;
  const Clock& clock_;
  EventLog& log_;
  ResizeLimits limits_;

  ResizeId next_id_ = 1;
  std::unique_ptr<Resize> active_;
  /// Deaths of ranks on the job's nodes while the resize in flight ran (the job gives the
  /// resize up and recovers): each becomes a failure once that resize ends aborted.
  std::vector<JobReport> deaths_in_resize_;
  std::vector<ResizeView> finished_;
  std::vector<std::string> unreleased_;
  struct Failure;
  std::vector<Failure> failures_;
  std::deque<std::function<void()>> queue_;  ///< answers and reports waiting for drain()
  std::shared_ptr<int> alive_;  ///< callbacks hold a weak_ptr: none runs after destruction
};

/// The expand that replaces the nodes failure `failure` dropped (recovery.on_node_loss:
/// replace): as many nodes as `dropped`, asked for by the policy, with the reason "replacing
/// n3, lost in failure 4 (recovery.on_node_loss: replace)"; and none of the nodes any of the
/// job's `failures` lost (the job's first node `first_node` aside, which stays in the job), so
/// that the resource manager grants them elsewhere: a node cut from the network stays idle to
/// Slurm until SlurmdTimeout, and a DOWN node whose slurmd answers again returns to service.
/// Excluded nodes are listed once each, in the order the failures lost them.
[[nodiscard]] ExpandOrder replacement_order(ResizeId failure, const std::vector<std::string>& dropped,
                                            const std::vector<FailureView>& failures,
                                            const std::string& first_node);

}  // namespace bellows::controller
