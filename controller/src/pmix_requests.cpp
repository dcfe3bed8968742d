// What the job's daemons forward from PMIx requesters (ranks and tools): allocation requests
// answered in two phases (taken or refused at once, then AllocationComplete once the resize
// they started ended), their cancellation, and PMIx_Job_control (docs/daemon.md).

#include "bellows/controller/controller_service.hpp"

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

namespace bellows::controller {
namespace {

std::string signed_nodes(int delta) {
  std::string text = delta > 0 ? "+" : "";
  text += std::to_string(delta);
  text += " node(s)";
  return text;
}

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ",") + item;
  return text;
}

}  // namespace

protocol::Ack ControllerService::on_allocation_request(const std::string& node,
                                                       const protocol::AllocationRequest& request) {
  const std::string who = "rank " + std::to_string(request.requesting_rank) + " on " + node;
  if (request.directive == protocol::AllocationDirective::cancel) {
    for (auto& [id, origin] : allocation_requests_) {
      if (origin.node != node || origin.request_id != request.request_id) continue;
      const Outcome outcome = resizes_->deliver(
          id, ResizeEvent::cancel_requested,
          "allocation request " + request.request_id + " cancelled by its requester (" + who + ")");
      if (!outcome.accepted)
        return {protocol::AckCode::refused, "allocation request " + request.request_id + " (resize " +
                                                std::to_string(id) + ") cannot be cancelled: " + outcome.text};
      origin.cancelled = true;
      return {protocol::AckCode::ok, "allocation request " + request.request_id + " (resize " +
                                         std::to_string(id) + ") is being cancelled"};
    }
    return {protocol::AckCode::refused,
            "no allocation request " + request.request_id + " of " + node + " is in flight"};
  }
  const int delta = request.directive == protocol::AllocationDirective::extend
                        ? static_cast<int>(request.node_count)
                        : -static_cast<int>(request.node_count);
  const Outcome outcome = resize(delta, Requester::application,
                                 "rank " + std::to_string(request.requesting_rank) + " asked for " + signed_nodes(delta));
  if (!outcome.accepted) return {protocol::AckCode::refused, outcome.text};
  if (!node.empty() && !request.request_id.empty())
    allocation_requests_[outcome.resize] = AllocationOrigin{node, request.request_id, false};
  return {protocol::AckCode::ok, outcome.text};
}

void ControllerService::answer_allocation_request(const ResizeView& finished) {
  const auto it = allocation_requests_.find(finished.id);
  if (it == allocation_requests_.end()) return;
  const AllocationOrigin origin = it->second;
  allocation_requests_.erase(it);
  protocol::AllocationComplete complete;
  complete.request_id = origin.request_id;
  complete.resize_id = finished.id;
  const std::string what = "resize " + std::to_string(finished.id) + " (" + std::string(to_string(finished.kind)) +
                           " by " + std::to_string(finished.count) + ")";
  if (finished.state == ResizeState::committed) {
    complete.outcome = protocol::AllocationOutcome::committed;
    complete.text = what + " committed: job " + options_.job + " holds " + std::to_string(resizes_->nodes().size()) +
                    " node(s) (" + joined(resizes_->nodes()) + ")";
  } else {
    complete.outcome = origin.cancelled ? protocol::AllocationOutcome::cancelled : protocol::AllocationOutcome::aborted;
    complete.text = what + (origin.cancelled ? " cancelled by its requester" : " aborted") + ": job " + options_.job +
                    " keeps " + std::to_string(resizes_->nodes().size()) + " node(s)";
  }
  if (!send(origin.node, complete))
    std::fprintf(stderr, "bellows run: info: allocation request %s of %s ended (%s), but its daemon is gone\n",
                 origin.request_id.c_str(), origin.node.c_str(), complete.text.c_str());
}

protocol::Ack ControllerService::on_job_control(const std::string& node, const protocol::JobControlRequest& request) {
  const bool all = request.target_rank == protocol::kAllRanks;
  const std::string target = all ? "every rank" : "rank " + std::to_string(request.target_rank);
  const std::string action = request.action == protocol::JobControlAction::terminate
                                 ? "terminate " + target
                                 : "signal " + std::to_string(request.signal) + " to " + target;
  EventRecord record;
  record.time = format_utc(clock_.wall_now());
  record.job = options_.job;
  record.event = ResizeEvent::job_control;
  record.requester = Requester::application;
  record.reason = "PMIx_Job_control from " + request.requester + " on " + node + ": " + action;
  const auto answer = [&](protocol::AckCode code, const std::string& text) {
    record.refused = code != protocol::AckCode::ok;
    record.detail = text;
    log_.write(record);
    return protocol::Ack{code, text};
  };

  if (request.action == protocol::JobControlAction::terminate && all) {
    termination_requested_ = "job " + options_.job + " terminated by PMIx_Job_control from " + request.requester;
    record.nodes = resizes_->nodes();
    return answer(protocol::AckCode::ok, "job " + options_.job + " ends: its ranks are stopped as on bellows run's SIGTERM");
  }
  const int signal = request.action == protocol::JobControlAction::terminate ? SIGTERM : request.signal;
  std::vector<std::string> known;
  std::string sent;
  for (const std::string& job_node : resizes_->nodes()) {
    const auto it = node_state_.find(job_node);
    if (it == node_state_.end() || it->second.rank == protocol::kNoRank || it->second.pid <= 0) continue;
    known.push_back(std::to_string(it->second.rank));
    if (!all && it->second.rank != request.target_rank) continue;
    if (!send(job_node, protocol::SignalRank{it->second.rank, it->second.pid, signal, record.reason})) continue;
    record.nodes.push_back(job_node);
    sent += (sent.empty() ? "" : ", ") + ("rank " + std::to_string(it->second.rank) + " on " + job_node +
                                          " (pid " + std::to_string(it->second.pid) + ")");
  }
  if (sent.empty()) {
    return answer(protocol::AckCode::refused, "job " + options_.job + " has no " + target +
                                                  " to signal (ranks as last reported: " +
                                                  (known.empty() ? std::string("none") : joined(known)) + ")");
  }
  std::string text = "signal " + std::to_string(signal) + " sent to " + sent;
  if (request.action == protocol::JobControlAction::terminate)
    text += "; a rank that ends so is a failure (docs/daemon.md, PMIx_Job_control)";
  return answer(protocol::AckCode::ok, text);
}

}  // namespace bellows::controller
