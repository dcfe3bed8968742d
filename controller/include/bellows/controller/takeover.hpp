#pragma once
// What a controller that takes a running job over (`bellows run --attach`) learns from the
// job's event log, as values: no I/O, no clock. The controller that died may have left a
// resize or a failure open (a line whose state is not final is its last): the new one closes
// each with a `controller_lost` line (a resize ends aborted, a failure given_up), and numbers
// its own resizes and failures after the highest id of the log. The `attached` line says who
// took the job over and when. How long ago the job's last resize ended lets the new
// controller's policy keep the cooldown the old one had started.
//
// Thread safety: free functions without shared state.

#include "bellows/controller/event_log.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace bellows::controller {

/// What the attaching controller writes and continues from.
struct TakeoverPlan {
  /// The highest resize or failure id of the log (0: none); the next one is last_id + 1.
  ResizeId last_id = 0;
  /// One controller_lost line per resize or failure the log left open, in id order.
  std::vector<EventRecord> closing;
  /// The attached line, written after the closing ones.
  EventRecord attached;
  /// How long before the takeover (`time`) the job's last expand or shrink ended (committed or
  /// aborted; one closed here ends at the takeover: 0), so that the policy's cooldown runs on
  /// from there (PolicyEngine::resize_finished_earlier); std::nullopt when none ended. 0 too
  /// when that end's time is later than `time` (the hosts' clocks differ) or either time is not
  /// in format_utc's form: the cooldown is then kept whole rather than skipped.
  std::optional<std::chrono::milliseconds> since_last_resize;
};

/// Plans the takeover of job `job` from its event log `log` (oldest first), at UTC `time`
/// (format_utc), by the controller described as `who` ("bellows run --attach, pid 812").
/// Refused lines change nothing; lines of another job are ignored.
[[nodiscard]] TakeoverPlan plan_takeover(const std::vector<EventRecord>& log, const std::string& job,
                                         const std::string& time, const std::string& who);

}  // namespace bellows::controller
