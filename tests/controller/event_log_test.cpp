// The event log: the exact line written, the round trip through the reader, and the
// reader's errors naming the line and the field.

#include "bellows/controller/event_log.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace bellows::controller {
namespace {

EventRecord full_record() {
  EventRecord r;
  r.time = "2024-05-01T12:00:00.700Z";
  r.job = "42";
  r.resize = 3;
  r.kind = ResizeKind::expand;
  r.count = 2;
  r.event = ResizeEvent::rm_granted;
  r.from = ResizeState::requested;
  r.to = ResizeState::granted;
  r.duration_s = 0.75;
  r.requester = Requester::operator_;
  r.reason = "bellows resize 42 +2";
  r.rm = RmAnswerRecord{RmCode::ok, "granted 2 of 2 nodes requested", {"n2", "n3"}};
  r.nodes = {"n2", "n3"};
  r.detail = "starting daemons on n2, n3";
  return r;
}

std::string message_of(const std::string& text) {
  try {
    std::istringstream in(text);
    (void)read_event_log(in);
  } catch (const EventLogError& e) {
    return e.what();
  }
  return "no error";
}

TEST(EventLog, WritesOneJsonLineWithEveryKey) {
  EXPECT_EQ(to_json_line(full_record()),
            R"({"count":2,"detail":"starting daemons on n2, n3","duration_s":0.75,"event":"rm_granted",)"
            R"("from":"requested","job":"42","kind":"expand","nodes":["n2","n3"],"reason":"bellows resize 42 +2",)"
            R"("refused":false,"requester":"operator","resize":3,"rm":{"code":"ok","nodes":["n2","n3"],)"
            R"("text":"granted 2 of 2 nodes requested"},"time":"2024-05-01T12:00:00.700Z","to":"granted"})");
  EventRecord bare;
  bare.time = std::string(1, 't');
  bare.job = std::string(1, '7');
  EXPECT_EQ(to_json_line(bare),
            R"({"count":0,"detail":"","duration_s":0.0,"event":"request","from":"none","job":"7",)"
            R"("kind":null,"nodes":[],"reason":"","refused":false,"requester":null,"resize":0,"rm":null,)"
            R"("time":"t","to":"none"})");
}

TEST(EventLog, ReaderGivesBackWhatWasWritten) {
  std::ostringstream out;
  EventLog log(out);
  EventRecord refused;
  refused.time = "2024-05-01T12:00:01.000Z";
  refused.job = "42";
  refused.resize = 4;
  refused.event = ResizeEvent::rank_died;
  refused.from = ResizeState::aborted;
  refused.to = ResizeState::aborted;
  refused.detail = "rank_died refused: resize 4 is already aborted";
  refused.refused = true;
  EXPECT_TRUE(log.write(full_record()));
  EXPECT_TRUE(log.write(refused));
  EXPECT_EQ(log.lines(), 2u);
  EXPECT_EQ(log.last_error(), "");
  std::istringstream in(out.str() + "\n   \n");
  const auto records = read_event_log(in);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0], full_record());
  EXPECT_EQ(records[1], refused);
}

TEST(EventLog, ReaderNamesTheLineAndTheField) {
  const std::string good = to_json_line(full_record());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_EQ(message_of(good + "\n" + with(R"("to":"granted")", R"("to":"grnted")")),
            "event log line 2: field 'to': unknown state 'grnted'");
  EXPECT_EQ(message_of("\n" + with(R"(,"to":"granted")", "")), "event log line 2: field 'to': missing");
  EXPECT_EQ(message_of(with(R"("resize":3)", R"("resize":-1)")),
            "event log line 1: field 'resize': expected a non-negative integer, got -1");
  EXPECT_EQ(message_of(with(R"("event":"rm_granted")", R"("event":"granted")")),
            "event log line 1: field 'event': unknown event 'granted'");
  EXPECT_EQ(message_of(with(R"("kind":"expand")", R"("kind":"grow")")),
            "event log line 1: field 'kind': unknown resize kind 'grow'");
  EXPECT_EQ(message_of(with(R"("requester":"operator")", R"("requester":"admin")")),
            "event log line 1: field 'requester': unknown requester 'admin'");
  EXPECT_EQ(message_of(with(R"("code":"ok")", R"("code":"maybe")")),
            "event log line 1: field 'rm': unknown code 'maybe'");
  EXPECT_EQ(message_of(with(R"("nodes":["n2","n3"],"reason")", R"("nodes":"n2","reason")")),
            "event log line 1: field 'nodes': expected a list of node names, got \"n2\"");
  EXPECT_EQ(message_of(with(R"("duration_s":0.75)", R"("duration_s":"slow")")),
            "event log line 1: field 'duration_s': expected a non-negative number of seconds, got \"slow\"");
  EXPECT_EQ(message_of(with(R"("refused":false)", R"("refused":0)")),
            "event log line 1: field 'refused': expected true or false, got 0");
  EXPECT_EQ(message_of("[1, 2]"), "event log line 1: expected a JSON object, got [1,2]");
  const std::string broken = message_of("{\"time\": ");
  EXPECT_EQ(broken.rfind("event log line 1: not JSON: ", 0), 0u) << broken;
}

TEST(EventLog, AppendsToAFileAndReadsItBack) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("bellows_event_log_test_" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(path);
  {
    EventLog log(path);
    EXPECT_TRUE(log.write(full_record()));
  }
  {
    EventLog log(path);  // a second controller run appends
    EXPECT_TRUE(log.write(full_record()));
  }
  EXPECT_EQ(read_event_log(path).size(), 2u);
  std::filesystem::remove(path);
}

TEST(EventLog, FileErrorsNameThePathAndTheReason) {
  try {
    EventLog log(std::filesystem::path("/nonexistent-bellows-dir/events.jsonl"));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "cannot open event log /nonexistent-bellows-dir/events.jsonl for appending: "
                 "No such file or directory");
  }
  try {
    (void)read_event_log(std::filesystem::path("/nonexistent-bellows-dir/events.jsonl"));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "cannot open event log /nonexistent-bellows-dir/events.jsonl: No such file or directory");
  }
}

TEST(EventLog, FailingStreamIsReportedNotThrown) {
  std::ostringstream out;
  out.setstate(std::ios::badbit);
  EventLog log(out);
  EXPECT_FALSE(log.write(full_record()));
  EXPECT_EQ(log.lines(), 0u);
  EXPECT_EQ(log.last_error().rfind("writing the event log failed", 0), 0u) << log.last_error();
}

TEST(EventLog, TimesAreUtcWithMilliseconds) {
  using namespace std::chrono;
  EXPECT_EQ(format_utc(system_clock::time_point(seconds(1714564800) + milliseconds(7))),
            "2024-05-01T12:00:00.007Z");
  EXPECT_EQ(format_utc(system_clock::time_point(seconds(0))), "1970-01-01T00:00:00.000Z");
}

}  // namespace
}  // namespace bellows::controller
