#include "bellows/controller/resize_controller.hpp"

#include "bellows/controller/node_list.hpp"

#include "resize_controller_private.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>
#include <utility>

namespace bellows::controller {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string seconds_text(std::chrono::milliseconds value) {
  const auto ms = value.count();
  std::string text = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    std::string fraction = std::to_string(1000 + ms % 1000).substr(1);
    while (fraction.back() == '0') fraction.pop_back();
    text += "." + fraction;
  }
  return text + " s";
}

std::string nodes_text(unsigned count) {
  return std::to_string(count) + (count == 1 ? " node" : " nodes");
}

void append(std::string& text, const std::string& more) {
  if (more.empty()) return;
  text += (text.empty() ? "" : "; ") + more;
}

// "node2, node3 stay with job 42 until released by hand" (or "stays" for one node).
std::string stay_text(const std::vector<std::string>& nodes, const std::string& job) {
  return join(nodes) + (nodes.size() == 1 ? " stays" : " stay") + " with job " + job +
         " until released by hand";
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

}  // namespace

struct ResizeController::Resize {
  ResizeId id = 0;
  ResizeKind kind = ResizeKind::expand;
  unsigned count = 0;
  Requester requester = Requester::policy;
  std::string reason;
  ResizeState state = ResizeState::none;
  Clock::time_point entered;
  std::chrono::milliseconds limit{0};
  Clock::time_point deadline;
  bool deadline_fired = false;
  RmRequestId rm_request = 0;
  std::vector<std::string> exclude;     ///< nodes the resource manager must not grant (expand)
  std::vector<std::string> nodes;       ///< granted (expand) or leaving (shrink)
  std::vector<std::string> daemons_up;  ///< granted nodes whose daemon came up
  std::vector<std::string> drained;     ///< leaving nodes whose ranks left (shrink)
  std::optional<Clock::time_point> timer_due;
  ResizeEvent timer_event = ResizeEvent::rm_timeout;
};


ResizeController::ResizeController(std::string job, std::vector<std::string> nodes,
                                   ResourceManager& rm, JobControl& job_control,
                                   const Clock& clock, EventLog& log, ResizeLimits limits)
    : job_(std::move(job)),
      nodes_(std::move(nodes)),
      rm_(rm),
      job_control_(job_control),
      clock_(clock),
      log_(log),
      limits_(limits),
      alive_(std::make_shared<int>(0)) {
  if (job_.empty()) throw std::invalid_argument("resize controller: the job id is empty");
  if (nodes_.empty()) {
    throw std::invalid_argument("resize controller: job " + job_ + " has no nodes");
  }
  std::unordered_set<std::string> seen;
  for (const std::string& node : nodes_) {
    if (node.empty()) throw std::invalid_argument("resize controller: job " + job_ + ": empty node name");
    if (!seen.insert(node).second) {
      throw std::invalid_argument("resize controller: job " + job_ + ": node " + node + " listed twice");
    }
  }
  validate(limits_);
  job_control_.set_listener(guarded([this](const JobReport& report) {
    queue_.push_back([this, report] { on_job_report(report); });
  }));
}

ResizeController::~ResizeController() { job_control_.set_listener({}); }

// ---------------------------------------------------------------- orders

Outcome ResizeController::request_expand(const ExpandOrder& order) {
  const auto refuse_with = [&](const std::string& why) {
    return refuse_order(ResizeKind::expand, order.count, order.requester, order.reason, why);
  };
  if (order.count == 0) return refuse_with("expand count must be at least 1, got 0");
  if (order.deadline && order.deadline->count() <= 0) {
    return refuse_with("resize deadline must be positive, got " +
                       std::to_string(order.deadline->count()) + " ms");
  }
  if (active_) {
    const ResizeView v = view(*active_);
    return refuse_with("resize " + std::to_string(v.id) + " (" + std::string(to_string(v.kind)) +
                       " by " + std::to_string(v.count) + ", asked by " +
                       std::string(to_string(v.requester)) + ") is in flight, in state " +
                       std::string(to_string(v.state)));
  }
  auto resize = std::make_unique<Resize>();
  resize->kind = ResizeKind::expand;
  resize->count = order.count;
  resize->requester = order.requester;
  resize->reason = order.reason;
  resize->limit = order.deadline.value_or(limits_.resize_deadline);
  resize->exclude = order.exclude;
  return start(std::move(resize));
}

Outcome ResizeController::request_shrink(const ShrinkOrder& order) {
  const unsigned count = order.nodes.empty() ? order.count : static_cast<unsigned>(order.nodes.size());
  const auto refuse_with = [&](const std::string& why) {
    return refuse_order(ResizeKind::shrink, count, order.requester, order.reason, why);
  };
  if (order.count != 0 && !order.nodes.empty()) {
    return refuse_with("a shrink takes a count or a list of nodes, not both");
  }
  if (count == 0) return refuse_with("shrink count must be at least 1, got 0");
  if (order.deadline && order.deadline->count() <= 0) {
    return refuse_with("resize deadline must be positive, got " +
                       std::to_string(order.deadline->count()) + " ms");
  }
  if (active_) {
    const ResizeView v = view(*active_);
    return refuse_with("resize " + std::to_string(v.id) + " (" + std::string(to_string(v.kind)) +
                       " by " + std::to_string(v.count) + ", asked by " +
                       std::string(to_string(v.requester)) + ") is in flight, in state " +
                       std::string(to_string(v.state)));
  }
  std::vector<std::string> leaving;
  if (order.nodes.empty()) {
    if (count >= nodes_.size()) {
      return refuse_with("cannot shrink by " + std::to_string(count) + ": job " + job_ + " has " +
                         nodes_text(static_cast<unsigned>(nodes_.size())) +
                         " and keeps at least its first node (" + nodes_.front() + ")");
    }
    // The nodes added last leave first.
    leaving.assign(nodes_.end() - static_cast<std::ptrdiff_t>(count), nodes_.end());
  } else {
    for (const std::string& node : order.nodes) {
      if (contains(leaving, node)) return refuse_with(node + " is listed twice");
      if (!contains(nodes_, node)) {
        return refuse_with(node + " is not a node of job " + job_ + " (its nodes: " + join(nodes_) + ")");
      }
      if (node == nodes_.front()) {
        return refuse_with(node + " is the first node of job " + job_ + " and cannot leave");
      }
      leaving.push_back(node);
    }
  }
  auto resize = std::make_unique<Resize>();
  resize->kind = ResizeKind::shrink;
  resize->count = count;
  resize->requester = order.requester;
  resize->reason = order.reason;
  resize->limit = order.deadline.value_or(limits_.resize_deadline);
  resize->nodes = std::move(leaving);
  return start(std::move(resize));
}

Outcome ResizeController::start(std::unique_ptr<Resize> resize) {
  resize->id = next_id_++;
  resize->entered = clock_.now();
  resize->deadline = resize->entered + resize->limit;
  active_ = std::move(resize);
  Input input;
  input.resize = active_->id;
  input.event = ResizeEvent::request;
  return apply(std::move(input));
}

Outcome ResizeController::refuse_order(ResizeKind kind, unsigned count, Requester requester,
                                       const std::string& reason, const std::string& why) {
  ResizeView v;
  v.id = next_id_++;
  v.kind = kind;
  v.count = count;
  v.requester = requester;
  v.reason = reason;
  Input input;
  input.resize = v.id;
  input.event = ResizeEvent::request;
  const std::string text = "resize " + std::to_string(v.id) + " refused: " + why;
  log(input, &v, ResizeState::none, ResizeState::none, 0, text, true);
  return {false, v.id, text};
}

// ---------------------------------------------------------------- events

Outcome ResizeController::deliver(ResizeId resize, ResizeEvent event, std::string detail) {
  Input input;
  input.resize = resize;
  input.event = event;
  input.detail = std::move(detail);
  if (event == ResizeEvent::rm_granted || event == ResizeEvent::request || event == ResizeEvent::job_control ||
      event == ResizeEvent::attached || event == ResizeEvent::controller_lost ||
      event == ResizeEvent::message_log) {
    // A grant carries its nodes and comes from the resource manager; a request is an order.
    return refuse(input, std::string(to_string(event)) + " cannot be delivered from outside");
  }
  return apply(std::move(input));
}

Outcome ResizeController::apply(Input input) {
  if (input.resize == 0 && active_) input.resize = active_->id;
  if (!active_ || active_->id != input.resize) {
    std::string why;
    if (const ResizeView* done = finished_view(input.resize)) {
      why = "resize " + std::to_string(input.resize) + " is already " + std::string(to_string(done->state));
    } else if (input.resize == 0) {
      why = "no resize is in flight";
    } else if (active_) {
      why = "resize " + std::to_string(input.resize) + " is not in flight (resize " +
            std::to_string(active_->id) + " is)";
    } else {
      why = "there is no resize " + std::to_string(input.resize);
    }
    return refuse(input, why);
  }
  Resize& r = *active_;
  const auto transition = find_transition(r.kind, r.state, input.event);
  if (!transition) {
    return refuse(input, std::string(to_string(input.event)) + " is not allowed for an " +
                             std::string(to_string(r.kind)) + " in state " +
                             std::string(to_string(r.state)));
  }
  const auto now = clock_.now();
  // A resize that only starts has spent no time anywhere yet.
  const double duration =
      r.state == ResizeState::none ? 0.0 : std::chrono::duration<double>(now - r.entered).count();
  const ResizeState from = r.state;
  std::string detail = input.detail;
  r.state = transition->to;
  r.entered = now;
  run_action(transition->action, from, input, detail);
  if (from != r.state) arm_state_timer();
  const ResizeView v = view(r);
  log(input, &v, from, r.state, duration, detail, false);
  if (is_final(r.state)) {
    finished_.push_back(v);
    active_.reset();
    // A rank of the job that died while the resize ran, which ended without the job
    // committing it: the job gave the resize up and recovers from the loss, a failure
    // recorded after the resize (docs/controller.md, "Failures").
    const std::vector<JobReport> deaths = std::exchange(deaths_in_resize_, {});
    if (v.state == ResizeState::aborted) {
      for (const JobReport& death : deaths) on_failure(death);
    }
  }
  return {true, v.id, detail};
}

Outcome ResizeController::refuse(const Input& input, const std::string& why) {
  std::string text = std::string(to_string(input.event)) + " refused: " + why;
  if (!input.detail.empty()) text += " (" + input.detail + ")";
  const ResizeView* v = nullptr;
  std::optional<ResizeView> current;
  if (active_ && active_->id == input.resize) {
    current = view(*active_);
    v = &*current;
  } else {
    v = finished_view(input.resize);
  }
  const ResizeState state = v ? v->state : ResizeState::none;
  log(input, v, state, state, 0, text, true);
  return {false, input.resize, text};
}

void ResizeController::run_action(ResizeAction action, ResizeState from, const Input& input,
                                  std::string& detail) {
  Resize& r = *active_;
  switch (action) {
    case ResizeAction::none:
    case ResizeAction::drop_lost:  // a failure's (failure_handling.cpp), in no resize's row
      break;
    case ResizeAction::ask_rm: {
      ExpandRequest request;
      request.job = job_;
      request.count = r.count;
      request.min_count = 1;
      request.exclude = r.exclude;
      // The resource manager must answer before the resize's own limit: a grant that comes
      // later would only be given back. It gets the limit less the grace for its answer.
      request.timeout = limits_.rm_request;
      if (r.limit > limits_.rm_answer_grace)
        request.timeout = std::min(request.timeout, r.limit - limits_.rm_answer_grace);
      const ResizeId id = r.id;
      r.rm_request = rm_.request_expand(request, guarded([this, id](ExpandAnswer answer) {
        queue_.push_back([this, id, answer = std::move(answer)]() mutable {
          on_rm_answer(id, std::move(answer));
        });
      }));
      append(detail, "asked the " + rm_.name() + " resource manager for " + nodes_text(r.count) +
                         (r.exclude.empty() ? "" : ", not " + join_nodes(r.exclude)));
      break;
    }
    case ResizeAction::cancel_rm_request:
      // Nothing to withdraw once the resource manager has answered.
      if (r.rm_request != 0) {
        append(detail, rm_.cancel_expand(r.rm_request)
                           ? "request withdrawn from the resource manager"
                           : "the resource manager had already answered the request");
      }
      break;
    case ResizeAction::start_daemons:
      r.nodes = input.nodes;
      job_control_.start_daemons(r.id, r.nodes);
      append(detail, "starting daemons on " + join(r.nodes));
      break;
    case ResizeAction::add_ranks:
      job_control_.add_ranks(r.id, r.nodes);
      append(detail, "adding ranks on " + join(r.nodes));
      break;
    case ResizeAction::withdraw_and_release:
    case ResizeAction::release_nodes: {
      if (action == ResizeAction::withdraw_and_release) {
        job_control_.withdraw(r.id, r.nodes);
      } else {
        // The leaving ranks exited: the job runs without these nodes from now on.
        std::erase_if(nodes_, [&r](const std::string& node) { return contains(r.nodes, node); });
      }
      const ResizeId id = r.id;
      rm_.release_nodes(job_, r.nodes, guarded([this, id, nodes = r.nodes](RmStatus status) {
        queue_.push_back([this, id, nodes, status = std::move(status)] {
          on_release_answer(id, nodes, status);
        });
      }));
      append(detail, "giving " + join(r.nodes) + " back to the resource manager");
      break;
    }
    case ResizeAction::remove_ranks:
      job_control_.remove_ranks(r.id, r.nodes);
      append(detail, "ranks on " + join(r.nodes) + " leave");
      break;
    case ResizeAction::cancel_in_job:
      job_control_.cancel(r.id, input.detail);
      append(detail, "asked the job to drop it");
      break;
    case ResizeAction::note_unreleased:
      for (const std::string& node : r.nodes) {
        if (!contains(unreleased_, node)) unreleased_.push_back(node);
      }
      if (r.kind == ResizeKind::shrink && from == ResizeState::draining) {
        // The job runs without these nodes, but its leaving ranks did not exit in time.
        std::erase_if(nodes_, [&r](const std::string& node) { return contains(r.nodes, node); });
        append(detail, "the leaving ranks did not exit in time");
      }
      append(detail, stay_text(r.nodes, job_));
      break;
    case ResizeAction::adopt_nodes:
      for (const std::string& node : r.nodes) {
        if (!contains(nodes_, node)) nodes_.push_back(node);
      }
      append(detail, "job " + job_ + " runs on " + nodes_text(static_cast<unsigned>(nodes_.size())));
      break;
  }
}

// ---------------------------------------------------------------- timers

void ResizeController::arm_state_timer() {
  Resize& r = *active_;
  r.timer_due.reset();
  const auto now = clock_.now();
  switch (r.state) {
    case ResizeState::requested:
      r.timer_due = now + limits_.rm_request + limits_.rm_answer_grace;
      r.timer_event = ResizeEvent::rm_timeout;
      break;
    case ResizeState::granted:
      r.timer_due = now + limits_.daemon_start;
      r.timer_event = ResizeEvent::daemon_start_timeout;
      break;
    case ResizeState::releasing:
    case ResizeState::aborting:
      r.timer_due = now + limits_.release;
      r.timer_event = ResizeEvent::release_failed;
      break;
    case ResizeState::cancelling:
      r.timer_due = now + limits_.cancel;
      r.timer_event = ResizeEvent::cancel_timeout;
      break;
    default:
      break;
  }
}

void ResizeController::fire_due_timers() {
  fire_failure_deadlines();
  const auto now = clock_.now();
  if (active_ && active_->timer_due && now >= *active_->timer_due) {
    Resize& r = *active_;
    r.timer_due.reset();
    Input input;
    input.resize = r.id;
    input.event = r.timer_event;
    switch (r.timer_event) {
      case ResizeEvent::rm_timeout:
        input.detail = "no answer from the resource manager within " +
                       seconds_text(limits_.rm_request + limits_.rm_answer_grace);
        break;
      case ResizeEvent::daemon_start_timeout: {
        std::vector<std::string> missing;
        for (const std::string& node : r.nodes) {
          if (!contains(r.daemons_up, node)) missing.push_back(node);
        }
        input.detail = "no daemon came up on " + join(missing) + " within " +
                       seconds_text(limits_.daemon_start);
        break;
      }
      case ResizeEvent::cancel_timeout:
        input.detail = "the job did not answer the cancellation within " + seconds_text(limits_.cancel);
        if (r.kind == ResizeKind::shrink) input.detail += "; the ranks on " + join(r.nodes) + " count as staying";
        break;
      default:
        input.detail = "no answer from the resource manager to the release of " + join(r.nodes) +
                       " within " + seconds_text(limits_.release);
        break;
    }
    apply(std::move(input));
  }
  if (active_ && !active_->deadline_fired && now >= active_->deadline) {
    active_->deadline_fired = true;
    Input input;
    input.resize = active_->id;
    input.event = ResizeEvent::resize_deadline;
    input.detail = "the resize passed its limit of " + seconds_text(active_->limit);
    apply(std::move(input));
  }
}

std::optional<Clock::time_point> ResizeController::next_timer() const {
  std::optional<Clock::time_point> next;
  for (const Failure& f : failures_) {
    if (!is_final(f.view.state) && (!next || f.deadline < *next)) next = f.deadline;
  }
  if (!active_) return next;
  if (active_->timer_due && (!next || *active_->timer_due < *next)) next = active_->timer_due;
  if (!active_->deadline_fired && (!next || active_->deadline < *next)) next = active_->deadline;
  return next;
}

void ResizeController::poll() {
  rm_.progress();
  job_control_.progress();
  drain();
  fire_due_timers();
  drain();
}

void ResizeController::drain() {
  while (!queue_.empty()) {
    auto next = std::move(queue_.front());
    queue_.pop_front();
    next();
  }
}

// ---------------------------------------------------------------- answers and reports

void ResizeController::on_rm_answer(ResizeId id, ExpandAnswer answer) {
  Input input;
  input.resize = id;
  RmAnswerRecord record{answer.status.code, answer.status.text, answer.nodes};
  input.rm = record;
  input.detail = answer.status.text;
  if (active_ && active_->id == id) active_->rm_request = 0;  // answered: nothing to withdraw
  const bool granted = answer.status.ok() && !answer.nodes.empty();
  if (granted) {
    input.event = ResizeEvent::rm_granted;
    input.nodes = answer.nodes;
    if (!active_ || active_->id != id || active_->state != ResizeState::requested) {
      // A grant nobody waits for any more: the nodes must not stay with the job unused.
      refuse(input, "resize " + std::to_string(id) + " no longer waits for nodes; giving " +
                        join(answer.nodes) + " back");
      give_back_stray(id, answer.nodes);
      return;
    }
  } else if (answer.status.code == RmCode::timeout) {
    input.event = ResizeEvent::rm_timeout;
  } else {
    input.event = ResizeEvent::rm_denied;
    if (answer.status.ok()) input.detail = "the resource manager granted no nodes";
  }
  apply(std::move(input));
}

void ResizeController::give_back_stray(ResizeId id, const std::vector<std::string>& nodes) {
  rm_.release_nodes(job_, nodes, guarded([this, id, nodes](RmStatus status) {
    queue_.push_back([this, id, nodes, status = std::move(status)] {
      if (status.ok()) return;
      for (const std::string& node : nodes) {
        if (!contains(unreleased_, node)) unreleased_.push_back(node);
      }
      Input input;
      input.resize = id;
      input.event = ResizeEvent::release_failed;
      input.rm = RmAnswerRecord{status.code, status.text, {}};
      input.nodes = nodes;
      refuse(input, "giving back the late grant failed: " + status.text + "; " + stay_text(nodes, job_));
    });
  }));
}

void ResizeController::on_release_answer(ResizeId id, const std::vector<std::string>& nodes,
                                         RmStatus status) {
  Input input;
  input.resize = id;
  input.event = status.ok() ? ResizeEvent::release_done : ResizeEvent::release_failed;
  input.rm = RmAnswerRecord{status.code, status.text, {}};
  input.nodes = nodes;
  input.detail = status.text;
  const bool waiting = active_ && active_->id == id &&
                       (active_->state == ResizeState::releasing ||
                        active_->state == ResizeState::aborting);
  if (waiting) {
    apply(std::move(input));
    return;
  }
  std::string why = "resize " + std::to_string(id) + " no longer waits for this answer";
  if (status.ok()) {
    const auto before = unreleased_.size();
    std::erase_if(unreleased_, [&nodes](const std::string& node) { return contains(nodes, node); });
    if (unreleased_.size() != before) why += "; " + join(nodes) + " went back after all";
  }
  refuse(input, why);
}

void ResizeController::on_job_report(const JobReport& report) {
  Input input;
  input.resize = report.resize;
  if (!report.node.empty()) input.nodes = {report.node};
  switch (report.kind) {
    case JobReportKind::daemon_up: {
      input.event = ResizeEvent::daemons_ready;
      input.detail = "daemon on " + report.node + " came up";
      const ResizeId id = report.resize == 0 && active_ ? active_->id : report.resize;
      if (active_ && active_->id == id && active_->kind == ResizeKind::expand &&
          active_->state == ResizeState::granted) {
        Resize& r = *active_;
        if (!contains(r.nodes, report.node)) {
          refuse(input, "resize " + std::to_string(id) + " started no daemon on " + report.node);
          return;
        }
        if (contains(r.daemons_up, report.node)) {
          refuse(input, "the daemon on " + report.node + " was already up");
          return;
        }
        r.daemons_up.push_back(report.node);
        if (r.daemons_up.size() < r.nodes.size()) return;  // waiting for the others
        input.nodes = r.nodes;
        input.detail = "daemons up on " + join(r.nodes);
      }
      break;
    }
    case JobReportKind::committed:
      input.event = ResizeEvent::ranks_committed;
      input.detail = "the job runs on " + std::to_string(report.ranks) +
                     (report.ranks == 1 ? " rank" : " ranks");
      apply(std::move(input));
      // A shrink whose leavers all drained before the job's commit came is drained now.
      finish_drain_if_complete();
      return;
    case JobReportKind::rank_died:
    case JobReportKind::node_lost:
      // With no resize in flight it is a failure; during one, that resize's death.
      if (!active_) {
        on_failure(report);
        return;
      }
      if (std::ranges::find(nodes_, report.node) != nodes_.end()) deaths_in_resize_.push_back(report);
      input.event = ResizeEvent::rank_died;
      input.detail = "a rank on " + report.node + " died" +
                     (report.text.empty() ? std::string() : ": " + report.text);
      break;
    case JobReportKind::left: {
      // Each leaving node reports when its ranks left; the shrink is drained once every one
      // did and the job runs without them (its commit came).
      input.event = ResizeEvent::drain_done;
      input.detail = "the leaving ranks exited";
      if (active_ && active_->id == report.resize && active_->kind == ResizeKind::shrink &&
          contains(active_->nodes, report.node)) {
        if (!contains(active_->drained, report.node)) active_->drained.push_back(report.node);
        finish_drain_if_complete();
        return;
      }
      break;  // no shrink waits for this node: refused and logged
    }
    case JobReportKind::refused:
      input.event = ResizeEvent::job_refused;
      input.detail = "the job refused the resize" +
                     (report.text.empty() ? std::string() : ": " + report.text);
      break;
    case JobReportKind::recovered:
      on_recovered(report);
      return;
    case JobReportKind::cancelled:
      input.event = ResizeEvent::job_cancelled;
      input.detail = "the job dropped the resize before carrying it out";
      if (active_ && active_->id == report.resize && active_->kind == ResizeKind::shrink)
        input.detail += "; the ranks on " + join(active_->nodes) + " stay";
      break;
  }
  apply(std::move(input));
}

void ResizeController::finish_drain_if_complete() {
  if (!active_ || active_->kind != ResizeKind::shrink) return;
  Resize& r = *active_;
  if (r.drained.size() < r.nodes.size()) return;
  if (r.state != ResizeState::draining) return;  // the job's commit comes first
  Input input;
  input.resize = r.id;
  input.event = ResizeEvent::drain_done;
  input.detail = "the leaving ranks exited";
  apply(std::move(input));
}

// ---------------------------------------------------------------- views and the log

ResizeView ResizeController::view(const Resize& r) const {
  return {r.id, r.kind, r.state, r.count, r.requester, r.reason, r.nodes};
}

const ResizeView* ResizeController::finished_view(ResizeId id) const {
  for (const ResizeView& v : finished_) {
    if (v.id == id) return &v;
  }
  return nullptr;
}

std::optional<ResizeView> ResizeController::active() const {
  if (!active_) return std::nullopt;
  return view(*active_);
}

void ResizeController::log(const Input& input, const ResizeView* resize, ResizeState from,
                           ResizeState to, double duration_s, const std::string& detail,
                           bool refused) {
  EventRecord record;
  record.time = format_utc(clock_.wall_now());
  record.job = job_;
  record.resize = input.resize;
  record.event = input.event;
  record.from = from;
  record.to = to;
  record.duration_s = duration_s;
  record.rm = input.rm;
  record.detail = detail;
  record.refused = refused;
  if (resize) {
    record.kind = resize->kind;
    record.count = resize->count;
    record.requester = resize->requester;
    record.reason = resize->reason;
    record.nodes = refused && !input.nodes.empty() ? input.nodes : resize->nodes;
  } else {
    record.nodes = input.nodes;
  }
  log_.write(record);
}

}  // namespace bellows::controller
