#include "bellows/controller/daemon_job_control.hpp"

#include <algorithm>
#include <set>

#include <bellows/protocol/job_directory.hpp>

namespace bellows::controller {

DaemonJobControl::DaemonJobControl(std::string job, std::string first_node, NodeLauncher& launcher,
                                   Sender send)
    : job_(std::move(job)),
      first_node_(std::move(first_node)),
      launcher_(launcher),
      send_(std::move(send)) {}

void DaemonJobControl::daemon_registered(const std::string& node) {
  registered_.insert(node);
  if (awaiting_first_hello_.erase(node) != 0 && node == first_node_) send_held_for_first_node();
  const auto it = starting_.find(node);
  if (it != starting_.end()) {
    report({JobReportKind::daemon_up, it->second, node, 0, "", {}});
    starting_.erase(it);
  }
}

void DaemonJobControl::daemon_gone(const std::string& node) {
  // A daemon told to stop as its node left: the node has left now.
  if (const auto it = stopping_.find(node); it != stopping_.end()) {
    report(std::move(it->second));
    stopping_.erase(it);
    return;
  }
  // Daemons stopped here (drained leavers, withdrawn nodes, the job's end) were unregistered
  // first: only a daemon that went away on its own gets this far. Whatever resize runs, if
  // any, is the one it concerns.
  if (registered_.erase(node) == 0) return;
  if (started_.contains(node)) gone_.insert(node);
  JobReport lost{JobReportKind::node_lost, 0, node, 0, "the daemon of " + node + " went away", {}};
  if (const auto it = node_ranks_.find(node); it != node_ranks_.end()) lost.rank = it->second;
  report(std::move(lost));
}

void DaemonJobControl::daemon_not_back(const std::string& node, const std::string& why) {
  if (registered_.contains(node)) return;
  JobReport lost{JobReportKind::node_lost, 0, node, 0, why, {}};
  if (const auto it = node_ranks_.find(node); it != node_ranks_.end()) lost.rank = it->second;
  report(std::move(lost));
}

void DaemonJobControl::rank_exited(const std::string& node, const protocol::RankExited& exited) {
  if (!exited.crashed()) {
    if (!rank_launch_.pmix_native || !native_resize_ || native_resize_->grow ||
        native_resize_->waiting.erase(node) == 0)
      return;
    const ResizeId resize = native_resize_->id;
    report({JobReportKind::left, resize, node, job_size_, "its rank ended with status 0", {}});
    node_left(node);
    if (!native_resize_->waiting.empty()) return;
    const auto leaving = static_cast<unsigned>(native_resize_->nodes.size());
    job_size_ = job_size_ > leaving ? job_size_ - leaving : 0;
    native_resize_.reset();
    report({JobReportKind::committed, resize, first_node_, job_size_, "every leaving rank ended", {}});
    return;
  }
  std::string how = exited.signal != 0 ? "killed by signal " + std::to_string(exited.signal)
                    : exited.exit_code >= 0 ? "exit status " + std::to_string(exited.exit_code)
                                            : "its process disappeared";
  const std::string who = exited.rank == protocol::kNoRank
                              ? "the rank started on " + node + " (pid " + std::to_string(exited.pid) + ")"
                              : "rank " + std::to_string(exited.rank) + " (pid " + std::to_string(exited.pid) + ")";
  JobReport died{JobReportKind::rank_died, 0, node, 0, who + " " + how, {}, exited.exit_code, exited.signal};
  if (exited.rank != protocol::kNoRank) {
    died.rank = exited.rank;
  } else if (const auto it = node_ranks_.find(node); it != node_ranks_.end()) {
    died.rank = it->second;
  }
  report(std::move(died));
}

void DaemonJobControl::resize_report(const std::string& node, const protocol::ResizeReport& r) {
  if (r.job_size != 0) job_size_ = r.job_size;
  JobReportKind kind = JobReportKind::committed;
  switch (r.outcome) {
    case protocol::ResizeOutcome::committed: kind = JobReportKind::committed; break;
    case protocol::ResizeOutcome::refused: kind = JobReportKind::refused; break;
    case protocol::ResizeOutcome::left: kind = JobReportKind::left; break;
    case protocol::ResizeOutcome::cancelled: kind = JobReportKind::cancelled; break;
    case protocol::ResizeOutcome::recovered: kind = JobReportKind::recovered; break;
  }
  JobReport done{kind, r.resize_id, node, r.job_size, r.text, {}};
  // The node's ranks left the job: its daemon goes too, before the node is given back. A
  // daemon this controller did not start (a job taken over: the launcher that started it
  // died with the controller before) is told to stop, and the node's leaving is reported
  // once its daemon has gone (daemon_gone): given back sooner, the resource manager would
  // kill it mid-stop (Slurm: its step, with SIGKILL).
  if (r.outcome == protocol::ResizeOutcome::left && !node_left(node) &&
      send_(node, protocol::Stop{"its node left the job", 2000})) {
    stopping_.insert_or_assign(node, std::move(done));
    return;
  }
  report(std::move(done));
}

bool DaemonJobControl::node_left(const std::string& node) {
  pmix_ranks_.erase(node);
  registered_.erase(node);
  if (started_.erase(node) == 0) return false;
  launcher_.stop(node);
  return true;
}

void DaemonJobControl::rank_connected(const std::string& node, const protocol::RankConnected& connected) {
  if (!rank_launch_.pmix_native || connected.nspace != job_ || !native_resize_ || !native_resize_->grow) return;
  const auto mapped = pmix_ranks_.find(node);
  if (mapped == pmix_ranks_.end() || mapped->second != connected.rank) return;
  if (native_resize_->waiting.erase(node) == 0) return;
  if (!native_resize_->waiting.empty()) return;
  job_size_ += static_cast<unsigned>(native_resize_->nodes.size());
  const ResizeId resize = native_resize_->id;
  native_resize_.reset();
  report({JobReportKind::committed, resize, first_node_, job_size_, "every new rank's PMIx client connected", {}});
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

void DaemonJobControl::send_to_first_node(ResizeId resize, const protocol::Message& message) {
  // An order decided while the job starts (an operator's +1 as soon as the controller answers)
  // may find the first node's daemon still starting: it goes once that daemon registered.
  if (awaiting_first_hello_.contains(first_node_)) {
    held_for_first_node_.emplace_back(resize, message);
    return;
  }
  if (!send_(first_node_, message)) {
    report({JobReportKind::rank_died, resize, first_node_, 0,
            "no daemon is registered on " + first_node_ + ", the job's first node", {}});
  }
}

void DaemonJobControl::send_held_for_first_node() {
  std::deque<std::pair<ResizeId, protocol::Message>> held;
  held.swap(held_for_first_node_);
  for (const auto& [resize, message] : held) send_to_first_node(resize, message);
}

void DaemonJobControl::add_ranks(ResizeId resize, const std::vector<std::string>& nodes) {
  if (rank_launch_.pmix_native) {
    // Nobody in the job to tell: the new ranks are started, and their connections commit.
    native_resize_ = NativeResize{resize, true, nodes, {nodes.begin(), nodes.end()}};
    start_ranks(resize, nodes);
    return;
  }
  protocol::ResizeDecided decided;
  decided.resize_id = resize;
  decided.kind = protocol::ResizeKind::expand;
  decided.count = static_cast<std::uint32_t>(nodes.size());
  decided.new_nodes = nodes;
  send_to_first_node(resize, decided);
  start_ranks(resize, nodes);
}

std::vector<std::string> join_environment(const RankLaunch& launch, ResizeId resize, std::size_t ordinal,
                                          std::size_t count) {
  namespace job_env = protocol::job_environment;
  std::vector<std::string> environment = launch.environment;
  environment.push_back(std::string(job_env::kJoinResize) + "=" + std::to_string(resize));
  environment.push_back(std::string(job_env::kJoinOrdinal) + "=" + std::to_string(ordinal));
  environment.push_back(std::string(job_env::kJoinCount) + "=" + std::to_string(count));
  return environment;
}

protocol::StartRank DaemonJobControl::start_order(ResizeId resize, const std::string& node,
                                                  std::vector<std::string> environment,
                                                  bool started_by_daemon) const {
  protocol::StartRank start;
  start.resize_id = resize;
  start.command = rank_launch_.command;
  start.environment = std::move(environment);
  start.nspace = job_;
  start.rank = pmix_ranks_.at(node);
  start.map_nodes = rank_nodes_;
  std::set<std::uint32_t> in_job;
  for (const auto& [mapped_node, rank] : pmix_ranks_) in_job.insert(rank);
  for (std::uint32_t rank = 0; rank < rank_nodes_.size(); ++rank) {
    start.map_ranks.push_back(rank);
    if (!in_job.contains(rank)) start.departed_ranks.push_back(rank);
  }
  start.started_by_daemon = started_by_daemon;
  return start;
}

bool DaemonJobControl::register_first_rank() {
  if (rank_launch_.command.empty() || !pmix_ranks_.contains(first_node_)) return false;
  return send_(first_node_, start_order(0, first_node_, {}, false));
}

void DaemonJobControl::start_ranks(ResizeId resize, const std::vector<std::string>& nodes) {
  if (rank_launch_.command.empty()) return;
  for (const std::string& node : nodes) {
    if (pmix_ranks_.contains(node)) continue;
    pmix_ranks_[node] = static_cast<std::uint32_t>(rank_nodes_.size());
    rank_nodes_.push_back(node);
  }
  for (std::size_t ordinal = 0; ordinal < nodes.size(); ++ordinal) {
    const std::string& node = nodes[ordinal];
    auto environment = join_environment(rank_launch_, resize, ordinal, nodes.size());
    if (!send_(node, start_order(resize, node, std::move(environment), true))) {
      report({JobReportKind::rank_died, resize, node, 0,
              "no daemon is registered on " + node + " to start its rank", {}});
    }
  }
}

void DaemonJobControl::withdraw(ResizeId resize, const std::vector<std::string>& nodes) {
  // The job was never told of the expansion, or dropped it (cancel()): no rank of it runs
  // on the nodes.
  if (native_resize_ && native_resize_->id == resize) native_resize_.reset();
  for (const std::string& node : nodes) {
    starting_.erase(node);
    pmix_ranks_.erase(node);
    registered_.erase(node);
    if (started_.erase(node) != 0) stop_daemon(node);
  }
}

void DaemonJobControl::stop_daemon(const std::string& node) {
  if (gone_.erase(node) != 0) {
    launcher_.stop_gone(node);
  } else {
    launcher_.stop(node);
  }
}

void DaemonJobControl::remove_native_ranks(ResizeId resize, const std::vector<std::string>& nodes) {
  native_resize_ = NativeResize{resize, false, nodes, {nodes.begin(), nodes.end()}};
  for (const std::string& node : nodes) pmix_ranks_.erase(node);
}

void DaemonJobControl::remove_ranks(ResizeId resize, const std::vector<std::string>& nodes) {
  if (rank_launch_.pmix_native) {
    remove_native_ranks(resize, nodes);
    return;
  }
  protocol::ResizeDecided decided;
  decided.resize_id = resize;
  decided.kind = protocol::ResizeKind::shrink;
  decided.count = static_cast<std::uint32_t>(nodes.size());
  decided.leaving_nodes = nodes;
  send_to_first_node(resize, decided);
}

void DaemonJobControl::cancel(ResizeId resize, const std::string& why) {
  if (rank_launch_.pmix_native) {
    // A grow whose new ranks have not all connected is dropped (withdraw() stops them); a
    // shrink's process set is out already: its commit comes when its leavers ended.
    if (native_resize_ && native_resize_->id == resize && native_resize_->grow) {
      native_resize_.reset();
      report({JobReportKind::cancelled, resize, first_node_, job_size_, why, {}});
    }
    return;
  }
  // The job's first rank answers: cancelled (resize_ack), or the commit it already sent.
  send_to_first_node(resize, protocol::Abort{resize, why});
}

bool DaemonJobControl::tell_lost(ResizeId failure, const std::vector<std::string>& lost_nodes,
                                 const std::vector<std::uint32_t>& lost_ranks, const std::string& reason,
                                 const JobReport& found_by, const std::vector<std::string>& survivors) {
  const auto lost = found_by.lowers_job_size ? static_cast<unsigned>(lost_nodes.size()) : 0u;
  job_size_ = job_size_ > lost ? job_size_ - lost : 0;
  for (const std::string& node : lost_nodes) {
    node_ranks_.erase(node);
    pmix_ranks_.erase(node);
  }
  protocol::RanksLost message{failure, lost_ranks, lost_nodes, reason};
  if (found_by.kind == JobReportKind::node_lost) {
    message.cause = protocol::LossCause::node_lost;
  } else {
    message.exit_code = found_by.exit_code;
    message.signal = found_by.signal;
  }
  bool every_one = true;
  for (const std::string& node : survivors) every_one = send_(node, message) && every_one;
  return every_one;
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
    if (pmix_ranks_.emplace(node, static_cast<std::uint32_t>(rank_nodes_.size())).second) rank_nodes_.push_back(node);
  }
  for (const std::string& node : nodes) {
    if (!launcher_.launch(node, job_).ok()) continue;
    started_.insert(node);
    if (!registered_.contains(node)) awaiting_first_hello_.insert(node);
  }
}

void DaemonJobControl::stop_started_daemons() {
  awaiting_first_hello_.clear();
  held_for_first_node_.clear();
  for (const std::string& node : started_) {
    registered_.erase(node);
    stop_daemon(node);
  }
  started_.clear();
}

}  // namespace bellows::controller
