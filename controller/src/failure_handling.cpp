// The resize controller's failures (failure_state.hpp): a rank that died, or a node whose
// daemon went away, while no resize was in flight.

#include "bellows/controller/failure_state.hpp"
#include "bellows/controller/resize_controller.hpp"

#include "resize_controller_private.hpp"

#include <algorithm>
#include <cstdio>

namespace bellows::controller {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string ranks_text(const std::vector<std::uint32_t>& ranks) {
  if (ranks.empty()) return "no known rank";
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

void append(std::string& text, const std::string& more) {
  if (more.empty()) return;
  text += (text.empty() ? "" : "; ") + more;
}

}  // namespace

std::vector<FailureView> ResizeController::failures() const {
  std::vector<FailureView> views;
  for (const Failure& f : failures_) views.push_back(f.view);
  return views;
}

bool ResizeController::degraded() const {
  return std::ranges::any_of(failures_, [](const Failure& f) { return f.view.state != ResizeState::recovered; });
}

void ResizeController::on_failure(const JobReport& report) {
  const bool node_lost = report.kind == JobReportKind::node_lost;
  const ResizeEvent event = node_lost ? ResizeEvent::node_lost : ResizeEvent::rank_died;
  // A node_lost report says how (a daemon that went away, or one that did not come back to a
  // controller that took the job over).
  const std::string how = node_lost ? (report.text.empty() ? "the daemon of " + report.node + " went away" : report.text)
                                    : "a rank on " + report.node + " died" +
                                          (report.text.empty() ? std::string() : ": " + report.text);
  // A node is lost once: its rank's death and its daemon's, or the first rank's as its daemon
  // and `bellows run` both saw it, are one failure (the first node stays in the job).
  std::string why;
  if (std::ranges::find(nodes_, report.node) == nodes_.end()) why = report.node + " is not a node of job " + job_;
  for (const Failure& f : failures_) {
    if (std::ranges::find(f.view.nodes, report.node) != f.view.nodes.end())
      why = report.node + " was lost in failure " + std::to_string(f.view.id) + " already";
  }
  if (!why.empty()) {
    Input input;
    input.event = event;
    input.nodes = {report.node};
    input.detail = how;
    refuse(input, why);
    return;
  }
  std::vector<std::uint32_t> ranks;
  if (report.rank) ranks = {*report.rank};
  record_failure(report.node, std::move(ranks), how, report, event);
}

Outcome ResizeController::record_failure(const std::string& node, std::vector<std::uint32_t> ranks,
                                         const std::string& how, JobReport found_by, ResizeEvent event) {
  std::string detail = how;
  for (const Failure& f : failures_) {
    if (!is_final(f.view.state)) {
      append(detail, "failure " + std::to_string(f.view.id) + " is still being recovered from: this one is " +
                         "recorded and told on its own");
    }
  }
  Failure failure;
  failure.view.id = next_id_++;
  failure.view.state = ResizeState::none;
  failure.view.nodes = {node};
  failure.view.ranks = std::move(ranks);
  failure.view.reason = how;
  failure.view.detected_at = format_utc(clock_.wall_now());
  failure.found_by = std::move(found_by);
  failure.detected = clock_.now();
  failure.entered = failure.detected;
  failure.deadline = failure.detected + limits_.resize_deadline;
  failures_.push_back(std::move(failure));
  return apply_failure(failures_.size() - 1, event, detail);
}

Outcome ResizeController::declare_lost(const std::string& node, const std::vector<std::uint32_t>& ranks,
                                       const std::string& why, bool lower_job_size) {
  Input input;
  input.event = ResizeEvent::node_lost;
  input.nodes = {node};
  input.detail = why;
  if (node.empty() || ranks.empty()) return refuse(input, "a loss declared names a node and its ranks");
  if (std::ranges::find(nodes_, node) != nodes_.end())
    return refuse(input, node + " is a node of job " + job_ + ": its loss is found, not declared");
  for (const Failure& f : failures_) {
    if (std::ranges::find(f.view.nodes, node) != f.view.nodes.end())
      return refuse(input, node + " was lost in failure " + std::to_string(f.view.id) + " already");
  }
  JobReport found_by{JobReportKind::node_lost, 0, node, 0, why, ranks.front()};
  found_by.lowers_job_size = lower_job_size;
  return record_failure(node, ranks, why, std::move(found_by), ResizeEvent::node_lost);
}

void ResizeController::on_recovered(const JobReport& report) {
  const auto reported =
      std::ranges::find_if(failures_, [&report](const Failure& f) { return f.view.id == report.resize; });
  Input input;
  input.resize = report.resize;
  input.event = ResizeEvent::job_recovered;
  if (reported == failures_.end()) {
    refuse(input, "there is no failure " + std::to_string(report.resize));
    return;
  }
  const std::string runs_on = "the job runs on " + std::to_string(report.ranks) +
                              (report.ranks == 1 ? " rank" : " ranks") + " without the lost ones";
  // Events reach the job's first rank in order: its recovery from a failure covers every
  // earlier one it was told of.
  for (std::size_t i = 0; i < failures_.size() && failures_[i].view.id <= report.resize; ++i) {
    if (failures_[i].view.id != report.resize && is_final(failures_[i].view.state)) continue;
    const FailureView& lost = failures_[i].view;
    std::string detail = runs_on;
    if (!lost.ranks.empty()) detail += " (" + ranks_text(lost.ranks) + " on " + join(lost.nodes) + ")";
    if (failures_[i].view.id != report.resize)
      append(detail, "reported with failure " + std::to_string(report.resize) + ", which came after it");
    if (!report.text.empty()) append(detail, report.text);
    apply_failure(i, ResizeEvent::job_recovered, detail);
  }
}

Outcome ResizeController::apply_failure(std::size_t index, ResizeEvent event, std::string detail) {
  Failure& f = failures_[index];
  const ResizeState from = f.view.state;
  const auto transition = find_failure_transition(from, event);
  const auto now = clock_.now();
  EventRecord record;
  record.time = format_utc(clock_.wall_now());
  record.job = job_;
  record.resize = f.view.id;
  record.kind = ResizeKind::failure;
  record.count = static_cast<unsigned>(f.view.nodes.size());
  record.event = event;
  record.from = from;
  record.reason = f.view.reason;
  record.nodes = f.view.nodes;
  if (!transition) {
    record.to = from;
    record.refused = true;
    record.detail = std::string(to_string(event)) + " refused: " + std::string(to_string(event)) +
                    " is not allowed for a failure in state " + std::string(to_string(from));
    if (!detail.empty()) record.detail += " (" + detail + ")";
    log_.write(record);
    return {false, f.view.id, record.detail};
  }
  record.duration_s = from == ResizeState::none ? 0.0 : std::chrono::duration<double>(now - f.entered).count();
  f.view.state = transition->to;
  f.entered = now;
  if (transition->action == ResizeAction::drop_lost) drop_lost(index, detail);
  Failure& after = failures_[index];
  if (is_final(after.view.state)) {
    after.view.ended_at = record.time;
    after.view.seconds_to_end = std::chrono::duration<double>(now - after.detected).count();
    append(detail, seconds_text(after.view.seconds_to_end) + " after it was detected");
  }
  record.to = after.view.state;
  record.detail = detail;
  log_.write(record);
  return {true, after.view.id, detail};
}

void ResizeController::drop_lost(std::size_t index, std::string& detail) {
  const FailureView lost = failures_[index].view;
  const JobReport found_by = failures_[index].found_by;
  append(detail, "lost " + ranks_text(lost.ranks) + " on " + join(lost.nodes));
  std::vector<std::string> dropped;
  for (const std::string& node : lost.nodes) {
    if (std::ranges::find(nodes_, node) == nodes_.end()) {
      // Declared lost after it left the job (declare_lost): nothing to give back or stop.
      append(detail, node + " is no node of the job any more: nothing to give back");
      continue;
    }
    if (node == nodes_.front()) {
      append(detail, node + " is the job's first node and stays in the job, where `bellows run` runs");
      continue;
    }
    dropped.push_back(node);
    std::erase(nodes_, node);
  }
  if (!dropped.empty()) {
    append(detail, "dropped " + join(dropped) + " from the job, giving " + (dropped.size() == 1 ? "it" : "them") +
                       " back to the " + rm_.name() + " resource manager");
    const ResizeId id = lost.id;
    rm_.release_nodes(job_, dropped, guarded([this, id, dropped](RmStatus status) {
      queue_.push_back([this, id, dropped, status = std::move(status)] {
        if (status.ok()) return;
        for (const std::string& node : dropped) {
          if (std::ranges::find(unreleased_, node) == unreleased_.end()) unreleased_.push_back(node);
        }
        Input input;
        input.resize = id;
        input.event = ResizeEvent::release_failed;
        input.rm = RmAnswerRecord{status.code, status.text, {}};
        input.nodes = dropped;
        refuse(input, "giving back the lost " + join(dropped) + " failed: " + status.text + "; listed as unreleased");
      });
    }));
  }
  std::vector<std::string> survivors;
  for (const std::string& node : nodes_) {
    if (std::ranges::find(lost.nodes, node) == lost.nodes.end()) survivors.push_back(node);
  }
  const bool told = job_control_.tell_lost(lost.id, lost.nodes, lost.ranks, lost.reason, found_by, survivors);
  // The survivors first: stopping what runs for a lost node (the srun of its daemon step) may
  // wait, 2 s for an srun whose node is cut from the network.
  if (!dropped.empty()) job_control_.withdraw(lost.id, dropped);
  if (!told) {
    append(detail, "not every surviving node's daemon could be told; the failure stays detected");
    return;
  }
  const ResizeId id = lost.id;
  queue_.push_back([this, id, survivors, lost] {
    for (std::size_t i = 0; i < failures_.size(); ++i) {
      if (failures_[i].view.id != id) continue;
      apply_failure(i, ResizeEvent::survivors_told,
                    "the daemons of " + (survivors.empty() ? std::string("no surviving node") : join(survivors)) +
                        " were told: " + ranks_text(lost.ranks) + " on " + join(lost.nodes) + " lost");
    }
  });
}

void ResizeController::fire_failure_deadlines() {
  const auto now = clock_.now();
  for (std::size_t i = 0; i < failures_.size(); ++i) {
    const Failure& f = failures_[i];
    if (is_final(f.view.state) || now < f.deadline) continue;
    apply_failure(i, ResizeEvent::recovery_deadline,
                  "the job did not report its recovery within " +
                      seconds_text(std::chrono::duration<double>(limits_.resize_deadline).count()) +
                      "; it stays degraded");
  }
}

void ResizeController::end_failures(const std::string& why) {
  for (std::size_t i = 0; i < failures_.size(); ++i) {
    if (!is_final(failures_[i].view.state)) apply_failure(i, ResizeEvent::job_ended, why);
  }
}

ExpandOrder replacement_order(ResizeId failure, const std::vector<std::string>& dropped,
                              const std::vector<FailureView>& failures, const std::string& first_node) {
  ExpandOrder order;
  order.count = static_cast<unsigned>(dropped.size());
  order.requester = Requester::policy;
  order.reason = "replacing " + join(dropped) + ", lost in failure " + std::to_string(failure) +
                 " (recovery.on_node_loss: replace)";
  const auto add = [&](const std::string& node) {
    if (node != first_node && std::find(order.exclude.begin(), order.exclude.end(), node) == order.exclude.end())
      order.exclude.push_back(node);
  };
  for (const FailureView& f : failures) {
    for (const std::string& node : f.nodes) add(node);
  }
  for (const std::string& node : dropped) add(node);
  return order;
}

}  // namespace bellows::controller
