#include "bellows/controller/daemon_job_control.hpp"

#include <algorithm>

namespace bellows::controller {

DaemonJobControl::DaemonJobControl(std::string job, std::string first_node, NodeLauncher& launcher,
                                   Sender send)
    : job_(std::move(job)),
      first_node_(std::move(first_node)),
      launcher_(launcher),
      send_(std::move(send)) {}

void DaemonJobControl::daemon_registered(const std::string& node) {
  registered_.insert(node);
  const auto it = starting_.find(node);
  if (it != starting_.end()) {
    report({JobReportKind::daemon_up, it->second, node, 0, ""});
    starting_.erase(it);
  }
}

void DaemonJobControl::daemon_gone(const std::string& node) {
  // Daemons stopped here were unregistered first: only a daemon that went away on its own
  // gets this far.
  if (registered_.erase(node) == 0) return;
  // A leaving node's daemon may go once its ranks left.
  if (shrinking_ != 0 && std::ranges::find(leaving_, node) != leaving_.end()) return;
  const ResizeId resize = expanding_ != 0 ? expanding_ : shrinking_;
  report({JobReportKind::rank_died, resize, node, 0, "the daemon of " + node + " went away"});
}

void DaemonJobControl::rank_exited(const std::string& node, const protocol::RankExited& exited) {
  const ResizeId resize = expanding_ != 0 ? expanding_ : shrinking_;
  if (resize == 0 && starting_.empty()) return;  // no resize runs: the job itself handles it
  std::string how = exited.signal != 0 ? "killed by signal " + std::to_string(exited.signal)
                    : exited.exit_code >= 0 ? "exit status " + std::to_string(exited.exit_code)
                                            : "its process disappeared";
  report({JobReportKind::rank_died, resize, node, 0,
          "rank " + std::to_string(exited.rank) + " (pid " + std::to_string(exited.pid) + ") " + how});
}

void DaemonJobControl::resize_ack(const std::string& node, const protocol::ResizeAck& ack) {
  using protocol::ResizeAckOutcome;
  if (ack.job_size != 0) job_size_ = ack.job_size;
  switch (ack.outcome) {
    case ResizeAckOutcome::committed:
      if (ack.resize_id == expanding_) expanding_ = 0;
      report({JobReportKind::ranks_committed, ack.resize_id, node, ack.job_size, ""});
      if (ack.resize_id == shrinking_) {
        shrink_committed_ = true;
        finish_shrink_if_drained();
      }
      break;
    case ResizeAckOutcome::refused:
    case ResizeAckOutcome::cancelled:
      if (ack.resize_id == expanding_) expanding_ = 0;
      if (ack.resize_id == shrinking_) {
        shrinking_ = 0;
        leaving_.clear();
      }
      report({ack.outcome == ResizeAckOutcome::refused ? JobReportKind::refused : JobReportKind::cancelled,
              ack.resize_id, node, ack.job_size, ack.text});
      break;
    case ResizeAckOutcome::drained: {
      if (ack.resize_id != shrinking_) break;
      std::erase(leaving_, node);
      // The node's ranks left: its daemon goes too, before the node is given back.
      registered_.erase(node);
      if (started_.erase(node) != 0) launcher_.stop(node);
      finish_shrink_if_drained();
      break;
    }
  }
}

void DaemonJobControl::finish_shrink_if_drained() {
  // The first rank's commit and the leavers' reports come from different nodes, in any
  // order: the shrink is drained once both are in.
  if (shrinking_ == 0 || !shrink_committed_ || !leaving_.empty()) return;
  report({JobReportKind::drained, shrinking_, "", job_size_, ""});
  shrinking_ = 0;
  shrink_committed_ = false;
}

void DaemonJobControl::start_daemons(ResizeId resize, const std::vector<std::string>& nodes) {
  for (const std::string& node : nodes) {
    starting_[node] = resize;
    const RmStatus status = launcher_.launch(node, job_);
    if (status.ok()) {
      started_.insert(node);
    } else {
      // No daemon_up comes: the controller's daemon_start timer aborts the resize.
      starting_.erase(node);
    }
    if (registered_.contains(node)) daemon_registered(node);
  }
}

void DaemonJobControl::add_ranks(ResizeId resize, const std::vector<std::string>& nodes) {
  expanding_ = resize;
  protocol::ResizeDecided decided;
  decided.resize_id = resize;
  decided.kind = protocol::ResizeKind::expand;
  decided.count = static_cast<std::uint32_t>(nodes.size());
  decided.new_nodes = nodes;
  if (!send_(first_node_, decided)) {
    report({JobReportKind::rank_died, resize, first_node_, 0,
            "no daemon is registered on " + first_node_ + ", the job's first node"});
  }
}

void DaemonJobControl::withdraw(ResizeId resize, const std::vector<std::string>& nodes) {
  // The job was never told of the expansion, or dropped it (cancel()): no rank of it runs
  // on the nodes.
  if (expanding_ == resize) expanding_ = 0;
  for (const std::string& node : nodes) {
    starting_.erase(node);
    registered_.erase(node);
    if (started_.erase(node) != 0) launcher_.stop(node);
  }
}

void DaemonJobControl::remove_ranks(ResizeId resize, const std::vector<std::string>& nodes) {
  shrinking_ = resize;
  shrink_committed_ = false;
  leaving_ = nodes;
  protocol::ResizeDecided decided;
  decided.resize_id = resize;
  decided.kind = protocol::ResizeKind::shrink;
  decided.count = static_cast<std::uint32_t>(nodes.size());
  decided.leaving_nodes = nodes;
  if (!send_(first_node_, decided)) {
    report({JobReportKind::rank_died, resize, first_node_, 0,
            "no daemon is registered on " + first_node_ + ", the job's first node"});
  }
}

void DaemonJobControl::cancel(ResizeId resize) {
  // The job's first rank answers: cancelled (resize_ack), or the commit it already sent.
  if (resize != expanding_ && resize != shrinking_) return;
  const std::string what = resize == expanding_ ? "expansion" : "shrink";
  if (!send_(first_node_, protocol::Abort{resize, "the controller called the " + what + " off"})) {
    report({JobReportKind::rank_died, resize, first_node_, 0,
            "no daemon is registered on " + first_node_ + ", the job's first node"});
  }
}

void DaemonJobControl::progress() {
  while (!reports_.empty()) {
    JobReport next = std::move(reports_.front());
    reports_.pop_front();
    if (listener_) listener_(next);
  }
}

void DaemonJobControl::start_initial_daemons(const std::vector<std::string>& nodes) {
  job_size_ = static_cast<unsigned>(nodes.size());  // one rank per node
  for (const std::string& node : nodes) {
    if (launcher_.launch(node, job_).ok()) started_.insert(node);
  }
}

void DaemonJobControl::stop_started_daemons() {
  for (const std::string& node : started_) {
    registered_.erase(node);
    launcher_.stop(node);
  }
  started_.clear();
}

}  // namespace bellows::controller
