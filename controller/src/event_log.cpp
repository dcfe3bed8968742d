#include "bellows/controller/event_log.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <istream>
#include <limits>
#include <ostream>

namespace bellows::controller {

using nlohmann::json;

std::string_view to_string(Requester requester) noexcept {
  switch (requester) {
    case Requester::policy: return "policy";
    case Requester::application: return "application";
    case Requester::operator_: return "operator";
  }
  return "?";
}

std::optional<Requester> parse_requester(std::string_view text) noexcept {
  if (text == "policy") return Requester::policy;
  if (text == "application") return Requester::application;
  if (text == "operator") return Requester::operator_;
  return std::nullopt;
}

std::string format_utc(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  const auto ms = duration_cast<milliseconds>(time.time_since_epoch()).count();
  auto seconds = static_cast<std::time_t>(ms / 1000);
  auto millis = ms % 1000;
  if (millis < 0) {
    millis += 1000;
    seconds -= 1;
  }
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", text, static_cast<int>(millis));
  return out;
}

std::optional<std::chrono::system_clock::time_point> parse_utc(std::string_view text) {
  using namespace std::chrono;
  // "YYYY-MM-DDTHH:MM:SS.mmmZ": 24 characters, digits where format_utc writes them.
  constexpr std::string_view form = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (text.size() != form.size()) return std::nullopt;
  for (std::size_t i = 0; i < form.size(); ++i) {
    const bool digit = text[i] >= '0' && text[i] <= '9';
    if (form[i] == 'd' ? !digit : text[i] != form[i]) return std::nullopt;
  }
  const auto number = [&text](std::size_t at, std::size_t length) {
    int value = 0;
    for (std::size_t i = at; i < at + length; ++i) value = value * 10 + (text[i] - '0');
    return value;
  };
  const year_month_day date{year{number(0, 4)}, month{static_cast<unsigned>(number(5, 2))},
                            day{static_cast<unsigned>(number(8, 2))}};
  if (!date.ok() || number(11, 2) > 23 || number(14, 2) > 59 || number(17, 2) > 60) return std::nullopt;
  return sys_days{date} + hours{number(11, 2)} + minutes{number(14, 2)} + seconds{number(17, 2)} +
         milliseconds{number(20, 3)};
}

namespace {

json or_null(const std::optional<std::string_view>& text) {
  return text ? json(std::string(*text)) : json(nullptr);
}

}  // namespace

std::string to_json_line(const EventRecord& r) {
  json rm = nullptr;
  if (r.rm) {
    rm = json{{"code", std::string(to_string(r.rm->code))}, {"text", r.rm->text}, {"nodes", r.rm->nodes}};
  }
  json line{
      {"time", r.time},
      {"job", r.job},
      {"resize", r.resize},
      {"kind", or_null(r.kind ? std::optional<std::string_view>(to_string(*r.kind)) : std::nullopt)},
      {"count", r.count},
      {"event", std::string(to_string(r.event))},
      {"from", std::string(to_string(r.from))},
      {"to", std::string(to_string(r.to))},
      {"duration_s", r.duration_s},
      {"requester",
       or_null(r.requester ? std::optional<std::string_view>(to_string(*r.requester)) : std::nullopt)},
      {"reason", r.reason},
      {"rm", rm},
      {"nodes", r.nodes},
      {"detail", r.detail},
      {"refused", r.refused},
  };
  return line.dump();
}

EventLogError::EventLogError(std::size_t line, const std::string& what)
    : std::runtime_error("event log line " + std::to_string(line) + ": " + what), line_(line) {}

namespace {

// Reads the fields of one line, naming the line and the field in every error.
class FieldReader {
 public:
  FieldReader(const json& object, std::size_t line) : object_(object), line_(line) {}

  const json& field(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end()) fail(key, "missing");
    return *it;
  }

  std::string string(const char* key) const {
    const json& value = field(key);
    if (!value.is_string()) fail(key, "expected a string, got " + value.dump());
    return value.get<std::string>();
  }

  template <typename T>
  T unsigned_number(const char* key) const {
    const json& value = field(key);
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() > std::numeric_limits<T>::max()) {
      fail(key, "expected a non-negative integer, got " + value.dump());
    }
    return static_cast<T>(value.get<std::uint64_t>());
  }

  double seconds(const char* key) const {
    const json& value = field(key);
    if (!value.is_number() || value.get<double>() < 0 || !std::isfinite(value.get<double>())) {
      fail(key, "expected a non-negative number of seconds, got " + value.dump());
    }
    return value.get<double>();
  }

  bool boolean(const char* key) const {
    const json& value = field(key);
    if (!value.is_boolean()) fail(key, "expected true or false, got " + value.dump());
    return value.get<bool>();
  }

  std::vector<std::string> strings(const json& value, const char* key) const {
    if (!value.is_array()) fail(key, "expected a list of node names, got " + value.dump());
    std::vector<std::string> out;
    for (const json& item : value) {
      if (!item.is_string()) fail(key, "expected a list of node names, got " + value.dump());
      out.push_back(item.get<std::string>());
    }
    return out;
  }

  template <typename T, typename Parse>
  T name(const char* key, const char* what, Parse parse) const {
    const std::string text = string(key);
    auto value = parse(text);
    if (!value) fail(key, std::string("unknown ") + what + " '" + text + "'");
    return *value;
  }

  template <typename T, typename Parse>
  std::optional<T> optional_name(const char* key, const char* what, Parse parse) const {
    if (field(key).is_null()) return std::nullopt;
    return name<T>(key, what, parse);
  }

  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw EventLogError(line_, std::string("field '") + key + "': " + what);
  }

 private:
  const json& object_;
  std::size_t line_;
};

}  // namespace

EventRecord parse_event_line(std::string_view line, std::size_t line_number) {
  json object;
  try {
    object = json::parse(line);
  } catch (const json::parse_error& e) {
    throw EventLogError(line_number, std::string("not JSON: ") + e.what());
  }
  if (!object.is_object()) throw EventLogError(line_number, "expected a JSON object, got " + object.dump());
  const FieldReader f(object, line_number);

  EventRecord r;
  r.time = f.string("time");
  r.job = f.string("job");
  r.resize = f.unsigned_number<ResizeId>("resize");
  r.kind = f.optional_name<ResizeKind>("kind", "resize kind", parse_resize_kind);
  r.count = f.unsigned_number<unsigned>("count");
  r.event = f.name<ResizeEvent>("event", "event", parse_resize_event);
  r.from = f.name<ResizeState>("from", "state", parse_resize_state);
  r.to = f.name<ResizeState>("to", "state", parse_resize_state);
  r.duration_s = f.seconds("duration_s");
  r.requester = f.optional_name<Requester>("requester", "requester", parse_requester);
  r.reason = f.string("reason");
  const json& rm = f.field("rm");
  if (!rm.is_null()) {
    if (!rm.is_object()) f.fail("rm", "expected an object or null, got " + rm.dump());
    const FieldReader rm_fields(rm, line_number);
    RmAnswerRecord answer;
    const std::string code = rm_fields.string("code");
    if (!parse_rm_code(code, answer.code)) f.fail("rm", "unknown code '" + code + "'");
    answer.text = rm_fields.string("text");
    answer.nodes = rm_fields.strings(rm_fields.field("nodes"), "nodes");
    r.rm = std::move(answer);
  }
  r.nodes = f.strings(f.field("nodes"), "nodes");
  r.detail = f.string("detail");
  r.refused = f.boolean("refused");
  return r;
}

std::vector<EventRecord> read_event_log(std::istream& in) {
  std::vector<EventRecord> out;
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_event_line(line, number));
  }
  return out;
}

std::vector<EventRecord> read_event_log(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot open event log " + path.string() + ": " + std::strerror(errno));
  }
  return read_event_log(in);
}

EventLog::EventLog(std::ostream& out) : out_(&out) {}

EventLog::EventLog(const std::filesystem::path& path) : out_(&file_), path_(path.string()) {
  file_.open(path, std::ios::out | std::ios::app);
  if (!file_) {
    throw std::runtime_error("cannot open event log " + path_ + " for appending: " +
                             std::strerror(errno));
  }
}

bool EventLog::write(const EventRecord& record) {
  const std::string line = to_json_line(record);
  std::lock_guard lock(mutex_);
  *out_ << line << '\n';
  out_->flush();
  if (!*out_) {
    last_error_ = "writing the event log" + (path_.empty() ? std::string() : " " + path_) +
                  " failed" + (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string());
    out_->clear();
    return false;
  }
  ++lines_;
  return true;
}

std::size_t EventLog::lines() const {
  std::lock_guard lock(mutex_);
  return lines_;
}

std::string EventLog::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

}  // namespace bellows::controller
