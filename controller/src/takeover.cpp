#include "bellows/controller/takeover.hpp"

#include <map>

namespace bellows::controller {

TakeoverPlan plan_takeover(const std::vector<EventRecord>& log, const std::string& job, const std::string& time,
                           const std::string& who) {
  TakeoverPlan plan;
  // The last line that changed each resize or failure: its state then is where it stands.
  std::map<ResizeId, const EventRecord*> last;
  for (const EventRecord& record : log) {
    if (record.job != job || record.resize == 0) continue;
    if (record.resize > plan.last_id) plan.last_id = record.resize;
    if (record.refused) continue;
    last[record.resize] = &record;
  }
  // The last expand or shrink that ended, by the log's order.
  const EventRecord* last_resize_end = nullptr;
  for (const EventRecord& record : log) {
    if (record.job != job || record.refused || record.resize == 0 || record.kind == ResizeKind::failure) continue;
    if (record.to == ResizeState::committed || record.to == ResizeState::aborted) last_resize_end = &record;
  }
  if (last_resize_end) {
    const auto ended = parse_utc(last_resize_end->time);
    const auto now = parse_utc(time);
    plan.since_last_resize = std::chrono::milliseconds::zero();
    if (ended && now && *now > *ended)
      plan.since_last_resize = std::chrono::duration_cast<std::chrono::milliseconds>(*now - *ended);
  }
  for (const auto& [id, record] : last) {
    if (is_final(record->to) || record->to == ResizeState::none) continue;
    const bool failure = record->kind == ResizeKind::failure;
    EventRecord close;
    close.time = time;
    close.job = job;
    close.resize = id;
    close.kind = record->kind;
    close.count = record->count;
    close.event = ResizeEvent::controller_lost;
    close.from = record->to;
    close.to = failure ? ResizeState::given_up : ResizeState::aborted;
    close.requester = record->requester;
    close.reason = record->reason;
    close.nodes = record->nodes;
    close.detail = std::string("the controller that ran it died in state ") + std::string(to_string(record->to)) +
                   "; closed by the controller that took the job over (" + who + ")" +
                   (failure ? ": its recovery is no longer followed" : ": the job keeps the nodes it holds");
    plan.closing.push_back(std::move(close));
    // A resize closed here ends now, aborted: its cooldown starts at the takeover.
    if (!failure) plan.since_last_resize = std::chrono::milliseconds::zero();
  }
  plan.attached.time = time;
  plan.attached.job = job;
  plan.attached.event = ResizeEvent::attached;
  plan.attached.reason = who;
  plan.attached.detail = "took job " + job + " over; resizes and failures continue from #" +
                         std::to_string(plan.last_id + 1) +
                         (plan.closing.empty() ? std::string()
                                               : "; closed " + std::to_string(plan.closing.size()) +
                                                     " left open by the controller that died");
  return plan;
}

}  // namespace bellows::controller
