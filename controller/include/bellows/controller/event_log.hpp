#pragma once
// The resize event log: one JSON object per line, one line per transition of a resize (and
// one per refused request or event), each with the time, the resize, the states left and
// entered, how long the state left lasted, who asked, why, and what the resource manager
// answered. `bellows events` prints it; read_event_log() parses it back.

#include "bellows/controller/job_control.hpp"
#include "bellows/controller/resize_state.hpp"
#include "bellows/controller/resource_manager.hpp"

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iosfwd>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::controller {

/// Who asked for a resize.
enum class Requester { policy, application, operator_ };

/// "policy", "application", "operator".
[[nodiscard]] std::string_view to_string(Requester requester) noexcept;
/// The inverse of to_string(Requester).
[[nodiscard]] std::optional<Requester> parse_requester(std::string_view text) noexcept;

/// What the resource manager answered, as the log keeps it.
struct RmAnswerRecord {
  RmCode code = RmCode::ok;
  std::string text;
  std::vector<std::string> nodes;  ///< granted nodes (rm_granted); empty otherwise

  bool operator==(const RmAnswerRecord&) const = default;
};

/// One line of the event log. Every key is always written; "kind", "requester" and "rm"
/// are null where they do not apply.
struct EventRecord {
  std::string time;                     ///< UTC, e.g. "2024-05-01T12:00:00.123Z"
  std::string job;                      ///< the job's id
  ResizeId resize = 0;                  ///< 0 for a report that concerned no resize
  std::optional<ResizeKind> kind;       ///< expand or shrink
  unsigned count = 0;                   ///< nodes the resize asked to add or remove
  ResizeEvent event = ResizeEvent::request;
  ResizeState from = ResizeState::none;
  ResizeState to = ResizeState::none;   ///< equal to from when refused
  double duration_s = 0;                ///< seconds spent in `from` (0 for none)
  std::optional<Requester> requester;
  std::string reason;                   ///< why the resize was asked for
  std::optional<RmAnswerRecord> rm;     ///< the resource manager's answer, on rm_* and release_*
  std::vector<std::string> nodes;       ///< the nodes this transition concerns
  std::string detail;                   ///< what happened, or why the event was refused
  bool refused = false;                 ///< the event was not allowed and changed nothing

  bool operator==(const EventRecord&) const = default;
};

/// "2024-05-01T12:00:00.123Z" (UTC, milliseconds).
[[nodiscard]] std::string format_utc(std::chrono::system_clock::time_point time);

/// The inverse of format_utc(); std::nullopt when `text` is not in its form.
[[nodiscard]] std::optional<std::chrono::system_clock::time_point> parse_utc(std::string_view text);

/// The record as one line of JSON, without the newline.
[[nodiscard]] std::string to_json_line(const EventRecord& record);

/// A line of the event log that is not what to_json_line() writes.
class EventLogError : public std::runtime_error {
 public:
  EventLogError(std::size_t line, const std::string& what);
  /// 1-based line number in the log.
  [[nodiscard]] std::size_t line() const noexcept { return line_; }

 private:
  std::size_t line_;
};

/// Parses one line; throws EventLogError naming line_number and the field that is wrong,
/// e.g. "event log line 3: field 'to': unknown state 'grnted'".
[[nodiscard]] EventRecord parse_event_line(std::string_view line, std::size_t line_number);

/// Every record of a log, skipping empty lines; throws EventLogError on the first bad line.
[[nodiscard]] std::vector<EventRecord> read_event_log(std::istream& in);
/// Same for a file; throws std::runtime_error when it cannot be opened (path and reason).
[[nodiscard]] std::vector<EventRecord> read_event_log(const std::filesystem::path& path);

/// Appends records to a stream or a file, one flushed line each.
///
/// Thread safety: write() may be called from any thread (one mutex).
/// Errors: a failing stream does not throw out of write() (the controller must keep going);
/// write() returns false and last_error() says what failed.
class EventLog {
 public:
  /// Writes to `out`, which must outlive this object.
  explicit EventLog(std::ostream& out);
  /// Appends to the file (created when missing). Throws std::runtime_error naming the path
  /// and the system's reason when it cannot be opened.
  explicit EventLog(const std::filesystem::path& path);

  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  /// Appends one line; false when the stream failed.
  bool write(const EventRecord& record);
  /// Lines written successfully.
  [[nodiscard]] std::size_t lines() const;
  /// Empty, or why the last write failed.
  [[nodiscard]] std::string last_error() const;

 private:
  std::ofstream file_;
  std::ostream* out_;
  std::string path_;
  mutable std::mutex mutex_;
  std::size_t lines_ = 0;
  std::string last_error_;
};

}  // namespace bellows::controller
