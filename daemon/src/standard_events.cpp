#include <bellows/daemon/standard_events.hpp>

namespace bellows::daemon {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ",") + item;
  return text;
}

}  // namespace

std::string_view standard_event_constant(pmix_status_t code) {
  for (const auto& event : kStandardEventCodes)
    if (event.code == code) return event.constant;
  return {};
}

std::vector<StandardEvent> lost_events(const protocol::RanksLost& lost, const std::string& job_nspace) {
  std::vector<StandardEvent> events;
  auto proc = [&job_nspace](std::uint32_t rank) { return ProcId{job_nspace, rank}; };
  const bool paired = lost.lost_ranks.size() == lost.lost_nodes.size();
  if (lost.cause == protocol::LossCause::node_lost) {
    for (std::size_t n = 0; n < lost.lost_nodes.size(); ++n) {
      StandardEvent down{PMIX_EVENT_NODE_DOWN, {}, lost.lost_nodes[n], std::nullopt, lost.reason};
      if (!job_nspace.empty()) {
        for (std::size_t r = 0; r < lost.lost_ranks.size(); ++r)
          if (!paired || r == n) down.affected.push_back(proc(lost.lost_ranks[r]));
      }
      events.push_back(std::move(down));
    }
  }
  for (std::size_t r = 0; r < lost.lost_ranks.size(); ++r) {
    StandardEvent ended;
    ended.code = lost.signal != 0 ? PMIX_ERR_PROC_ABORTED_BY_SIG : PMIX_EVENT_PROC_TERMINATED;
    if (!job_nspace.empty()) ended.affected = {proc(lost.lost_ranks[r])};
    ended.hostname = paired ? lost.lost_nodes[r] : joined(lost.lost_nodes);
    if (lost.cause == protocol::LossCause::rank_died && lost.signal == 0 && lost.exit_code >= 0)
      ended.exit_code = lost.exit_code;
    ended.text = lost.reason;
    events.push_back(std::move(ended));
  }
  return events;
}

StandardEvent job_end_event(const std::string& job_nspace, const std::string& reason) {
  StandardEvent end{PMIX_EVENT_JOB_END, {}, "", std::nullopt, reason};
  if (!job_nspace.empty()) end.affected = {ProcId{job_nspace, PMIX_RANK_WILDCARD}};
  return end;
}

}  // namespace bellows::daemon
