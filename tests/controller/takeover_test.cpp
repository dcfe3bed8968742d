// What a controller that takes a running job over reads and decides, without processes: the
// takeover plan from an event log (what was left open is closed, ids continue, how long ago the
// last resize ended), the job record (round trip, a record of an older bellows, every refusal
// naming the file and the field), the local pool giving a killed
// job's nodes back to the job, and the lock that allows one controller per job.

#include "bellows/controller/controller_lock.hpp"
#include "bellows/controller/job_record.hpp"
#include "bellows/controller/local_node_pool.hpp"
#include "bellows/controller/takeover.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace bellows::controller {
namespace {

using Nodes = std::vector<std::string>;

EventRecord line(ResizeId id, std::optional<ResizeKind> kind, ResizeEvent event, ResizeState from, ResizeState to,
                 bool refused = false) {
  EventRecord r;
  r.time = "2026-01-01T00:00:00.000Z";
  r.job = "local-7";
  r.resize = id;
  r.kind = kind;
  r.count = 1;
  r.event = event;
  r.from = from;
  r.to = to;
  r.requester = Requester::operator_;
  r.reason = "operator asked for +1";
  r.nodes = {"local2"};
  r.refused = refused;
  return r;
}

TEST(Takeover, ALogWithEverythingFinishedIsContinuedAfterItsHighestId) {
  const std::vector<EventRecord> log = {
      line(1, ResizeKind::expand, ResizeEvent::request, ResizeState::none, ResizeState::requested),
      line(1, ResizeKind::expand, ResizeEvent::rm_denied, ResizeState::requested, ResizeState::aborted),
      line(2, ResizeKind::failure, ResizeEvent::rank_died, ResizeState::none, ResizeState::detected),
      line(2, ResizeKind::failure, ResizeEvent::job_recovered, ResizeState::agreed, ResizeState::recovered),
  };
  const TakeoverPlan plan = plan_takeover(log, "local-7", "2026-01-01T00:01:00.000Z", "bellows run --attach, pid 9");
  EXPECT_EQ(plan.last_id, 2u);
  EXPECT_TRUE(plan.closing.empty());
  EXPECT_EQ(plan.attached.event, ResizeEvent::attached);
  EXPECT_EQ(plan.attached.resize, 0u);
  EXPECT_EQ(plan.attached.time, "2026-01-01T00:01:00.000Z");
  EXPECT_EQ(plan.attached.reason, "bellows run --attach, pid 9");
  EXPECT_EQ(plan.attached.detail, "took job local-7 over; resizes and failures continue from #3");
}

TEST(Takeover, AResizeAndAFailureLeftOpenAreClosedByName) {
  const std::vector<EventRecord> log = {
      line(3, ResizeKind::expand, ResizeEvent::request, ResizeState::none, ResizeState::requested),
      line(3, ResizeKind::expand, ResizeEvent::rm_granted, ResizeState::requested, ResizeState::granted),
      // a refused event changes nothing: #3 stays granted
      line(3, ResizeKind::expand, ResizeEvent::drain_done, ResizeState::granted, ResizeState::granted, true),
      line(4, ResizeKind::failure, ResizeEvent::node_lost, ResizeState::none, ResizeState::detected),
  };
  const TakeoverPlan plan = plan_takeover(log, "local-7", "T", "W");
  EXPECT_EQ(plan.last_id, 4u);
  ASSERT_EQ(plan.closing.size(), 2u);
  const EventRecord& resize = plan.closing[0];
  EXPECT_EQ(resize.resize, 3u);
  EXPECT_EQ(resize.kind, ResizeKind::expand);
  EXPECT_EQ(resize.event, ResizeEvent::controller_lost);
  EXPECT_EQ(resize.from, ResizeState::granted);
  EXPECT_EQ(resize.to, ResizeState::aborted);
  EXPECT_EQ(resize.nodes, Nodes{"local2"});
  EXPECT_EQ(resize.reason, "operator asked for +1");
  EXPECT_EQ(resize.detail, "the controller that ran it died in state granted; closed by the controller that took "
                           "the job over (W): the job keeps the nodes it holds");
  const EventRecord& failure = plan.closing[1];
  EXPECT_EQ(failure.resize, 4u);
  EXPECT_EQ(failure.from, ResizeState::detected);
  EXPECT_EQ(failure.to, ResizeState::given_up);
  EXPECT_EQ(failure.detail, "the controller that ran it died in state detected; closed by the controller that took "
                            "the job over (W): its recovery is no longer followed");
  EXPECT_EQ(plan.attached.detail, "took job local-7 over; resizes and failures continue from #5; closed 2 left open "
                                  "by the controller that died");
}

TEST(Takeover, LinesOfAnotherJobAndReportsOfNoResizeAreIgnored) {
  auto other = line(9, ResizeKind::expand, ResizeEvent::request, ResizeState::none, ResizeState::requested);
  other.job = "local-8";
  auto control = line(0, std::nullopt, ResizeEvent::job_control, ResizeState::none, ResizeState::none);
  const TakeoverPlan plan = plan_takeover({other, control}, "local-7", "T", "W");
  EXPECT_EQ(plan.last_id, 0u);
  EXPECT_TRUE(plan.closing.empty());
  EXPECT_EQ(plan.attached.detail, "took job local-7 over; resizes and failures continue from #1");
}

EventRecord at(std::string time, EventRecord record) {
  record.time = std::move(time);
  return record;
}

TEST(Takeover, SaysHowLongAgoTheLastResizeEnded) {
  const std::vector<EventRecord> log = {
      at("2026-01-01T00:00:01.000Z",
         line(1, ResizeKind::expand, ResizeEvent::request, ResizeState::none, ResizeState::requested)),
      at("2026-01-01T00:00:03.250Z",
         line(1, ResizeKind::expand, ResizeEvent::ranks_committed, ResizeState::reconfiguring, ResizeState::committed)),
      at("2026-01-01T00:00:05.000Z",
         line(2, ResizeKind::shrink, ResizeEvent::rm_denied, ResizeState::requested, ResizeState::aborted)),
      // a failure ends later: no resize, no cooldown
      at("2026-01-01T00:00:09.000Z",
         line(3, ResizeKind::failure, ResizeEvent::job_recovered, ResizeState::agreed, ResizeState::recovered)),
      // a refused line changes nothing
      at("2026-01-01T00:00:10.000Z",
         line(2, ResizeKind::shrink, ResizeEvent::rm_denied, ResizeState::aborted, ResizeState::aborted, true)),
  };
  const TakeoverPlan plan = plan_takeover(log, "local-7", "2026-01-01T00:00:17.500Z", "W");
  ASSERT_TRUE(plan.since_last_resize);
  EXPECT_EQ(*plan.since_last_resize, std::chrono::milliseconds(12'500));  // from #2's abort
}

TEST(Takeover, NoResizeEndedNoTimeSinceOne) {
  const std::vector<EventRecord> log = {
      line(1, ResizeKind::failure, ResizeEvent::job_recovered, ResizeState::agreed, ResizeState::recovered),
  };
  EXPECT_FALSE(plan_takeover(log, "local-7", "2026-01-01T00:01:00.000Z", "W").since_last_resize);
  EXPECT_FALSE(plan_takeover({}, "local-7", "2026-01-01T00:01:00.000Z", "W").since_last_resize);
}

TEST(Takeover, AResizeClosedAtTheTakeoverEndsThen) {
  const std::vector<EventRecord> log = {
      at("2026-01-01T00:00:00.000Z",
         line(1, ResizeKind::expand, ResizeEvent::ranks_committed, ResizeState::reconfiguring, ResizeState::committed)),
      line(2, ResizeKind::expand, ResizeEvent::request, ResizeState::none, ResizeState::requested),
  };
  const TakeoverPlan plan = plan_takeover(log, "local-7", "2026-01-01T00:05:00.000Z", "W");
  ASSERT_EQ(plan.closing.size(), 1u);
  EXPECT_EQ(plan.since_last_resize, std::chrono::milliseconds(0));
}

TEST(Takeover, AnEndLaterThanTheTakeoverOrATimeNotReadKeepsTheCooldownWhole) {
  const auto ended = [](std::string time) {
    return std::vector<EventRecord>{at(std::move(time), line(1, ResizeKind::expand, ResizeEvent::ranks_committed,
                                                             ResizeState::reconfiguring, ResizeState::committed))};
  };
  // The host of the controller that died ran 2 s ahead.
  EXPECT_EQ(plan_takeover(ended("2026-01-01T00:00:02.000Z"), "local-7", "2026-01-01T00:00:00.000Z", "W")
                .since_last_resize,
            std::chrono::milliseconds(0));
  EXPECT_EQ(plan_takeover(ended("yesterday"), "local-7", "2026-01-01T00:00:00.000Z", "W").since_last_resize,
            std::chrono::milliseconds(0));
}

TEST(Takeover, UtcTimesAreReadBackAsWritten) {
  using namespace std::chrono;
  const auto time = sys_days{year{2026} / 11 / 28} + hours{10} + minutes{17} + seconds{22} + milliseconds{5};
  EXPECT_EQ(format_utc(time), "2026-11-28T10:17:22.005Z");
  EXPECT_EQ(parse_utc("2026-11-28T10:17:22.005Z"), time);
  for (const char* bad : {"", "2026-11-28T10:17:22Z", "2026-13-28T10:17:22.005Z", "2026-02-30T10:17:22.005Z",
                          "2026-11-28T24:17:22.005Z", "2026-11-28 10:17:22.005Z", "2026-11-28T10:17:22.005"})
    EXPECT_FALSE(parse_utc(bad)) << bad;
}

TEST(Takeover, TheNewEventsHaveNamesInTheLog) {
  EXPECT_EQ(to_string(ResizeEvent::attached), "attached");
  EXPECT_EQ(to_string(ResizeEvent::controller_lost), "controller_lost");
  EXPECT_EQ(parse_resize_event("controller_lost"), ResizeEvent::controller_lost);
  const auto attached = line(0, std::nullopt, ResizeEvent::attached, ResizeState::none, ResizeState::none);
  EXPECT_EQ(parse_event_line(to_json_line(attached), 1), attached);
}

JobRecord sample_record() {
  JobRecord r;
  r.job = "local-7";
  r.backend = "local";
  r.nodes = {"local0", "local1"};
  r.ranks = 2;
  r.min_nodes = 2;
  r.max_nodes = 3;
  r.policy_file = "/p/grow.yaml";
  r.policy_text = "nodes: {min: 2, max: 3}\n";
  r.rank_command = {"mpiexec", "-n", "1", "gemm"};
  r.rank_environment = {"BELLOWS_JOIN=port"};
  r.daemon_pids = {{"local0", 100}, {"local1", 101}};
  r.pmix_job_map = {{"local0", 0}, {"local1", 1}};
  r.pmix_rank_nodes = {"local0", "local1"};
  r.controller = "99 12345";
  return r;
}

TEST(JobRecord, RoundTripsThroughItsJsonText) {
  const JobRecord r = sample_record();
  EXPECT_EQ(parse_job_record(to_json_text(r), "job.json"), r);
}

TEST(JobRecord, KeepsTheCompanionsOfASlurmJob) {
  JobRecord r = sample_record();
  r.job = "41";
  r.backend = "slurm";
  r.nodes = {"n1", "n2", "n3", "n4"};
  r.companions = {{"43", {"n2"}}, {"44", {"n3", "n4"}}};
  r.expand_strategy = "companion";
  const std::string text = to_json_text(r);
  EXPECT_NE(text.find("\"companions\": [\n  {\n   \"id\": \"43\",\n   \"nodes\": [\n    \"n2\""), std::string::npos)
      << text;
  EXPECT_EQ(parse_job_record(text, "job.json"), r);
  EXPECT_TRUE(parse_job_record(to_json_text(sample_record()), "job.json").companions.empty());
}

TEST(JobRecord, KeepsTheExpandStrategyOfASlurmJob) {
  JobRecord r = sample_record();
  r.job = "41";
  r.backend = "slurm";
  r.nodes = {"n1", "n2"};
  for (const std::string strategy : {"auto", "merge", "companion"}) {
    r.expand_strategy = strategy;
    const std::string text = to_json_text(r);
    EXPECT_NE(text.find("\"expand_strategy\": \"" + strategy + "\""), std::string::npos) << text;
    EXPECT_EQ(parse_job_record(text, "job.json").expand_strategy, strategy);
  }
  EXPECT_EQ(parse_job_record(to_json_text(sample_record()), "job.json").expand_strategy, "");
}

// A PMIx-native job's record keeps what a controller that takes it over needs: that it is
// PMIx-native, its job map with a number that left and one given again on the same node, and
// the first rank's process.
TEST(JobRecord, KeepsThePmixJobMapOfANativeJob) {
  JobRecord r = sample_record();
  r.nodes = {"local0", "local1", "local2"};
  r.pmix_native = true;
  r.pmix_rank_nodes = {"local0", "local1", "local2", "local3", "local2"};
  r.pmix_job_map = {{"local0", 0}, {"local1", 1}, {"local2", 4}};
  r.first_rank_pid = 4242;
  const std::string text = to_json_text(r);
  EXPECT_NE(text.find("\"pmix_native\": true"), std::string::npos) << text;
  EXPECT_NE(text.find("\"first_rank_pid\": 4242"), std::string::npos) << text;
  EXPECT_EQ(parse_job_record(text, "job.json"), r);
  const JobRecord plain = parse_job_record(to_json_text(sample_record()), "job.json");
  EXPECT_FALSE(plain.pmix_native);
  EXPECT_EQ(plain.first_rank_pid, 0);
}

TEST(JobRecord, RefusesAPmixJobMapThatDisagreesWithTheNumbersGiven) {
  const auto refusal = [](const std::map<std::string, std::uint32_t>& map, std::int32_t first_rank_pid = 0) {
    JobRecord r = sample_record();
    r.pmix_rank_nodes = {"local0", "local1", "local2"};
    r.pmix_job_map = map;
    r.first_rank_pid = first_rank_pid;
    try {
      (void)parse_job_record(to_json_text(r), "/j/job.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({{"local0", 0}, {"local2", 2}}), "accepted");
  EXPECT_EQ(refusal({{"local0", 0}, {"local1", 2}}),
            "/j/job.json: field 'pmix_job_map': rank 2 is mapped to local1 but was given on local2");
  EXPECT_EQ(refusal({{"local0", 3}}),
            "/j/job.json: field 'pmix_job_map': expected for local0 one of the 3 rank numbers of "
            "pmix_rank_nodes, got 3");
  EXPECT_EQ(refusal({{"local0", 0}}, -4), "/j/job.json: field 'first_rank_pid': expected a process id or 0, got -4");
  std::string text = to_json_text(sample_record());
  const std::string field = "\"pmix_native\": false";
  ASSERT_NE(text.find(field), std::string::npos) << text;
  text.replace(text.find(field), field.size(), "\"pmix_native\": 1");
  try {
    (void)parse_job_record(text, "/j/job.json");
    ADD_FAILURE() << "a record whose pmix_native is 1 was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "/j/job.json: field 'pmix_native': expected true or false, got 1");
  }
}

TEST(JobRecord, RefusesAnExpandStrategyThatCannotBe) {
  const auto refusal = [](const std::string& backend, const std::string& strategy) {
    JobRecord r = sample_record();
    r.backend = backend;
    r.expand_strategy = strategy;
    try {
      (void)parse_job_record(to_json_text(r), "/j/job.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal("slurm", "companion"), "accepted");
  EXPECT_EQ(refusal("slurm", "grow"),
            "/j/job.json: field 'expand_strategy': expected auto, merge or companion for a Slurm job, got \"grow\"");
  EXPECT_EQ(refusal("slurm", ""),
            "/j/job.json: field 'expand_strategy': expected auto, merge or companion for a Slurm job, got \"\"");
  EXPECT_EQ(refusal("local", "merge"),
            "/j/job.json: field 'expand_strategy': expected \"\" for a job of the local backend, got \"merge\"");
}

// job.json as `bellows` wrote it before the companions, the expand strategy and the exit status
// were kept: a job taken over, or waited for, after an upgrade.
constexpr const char* kOlderSlurmRecord = R"({
 "job": "41",
 "backend": "slurm",
 "nodes": ["n1", "n2"],
 "ranks": 2,
 "node_range": [1, 3],
 "policy_file": "",
 "policy_text": "",
 "rank_command": ["mpiexec", "-n", "1", "gemm"],
 "rank_environment": [],
 "daemon_pids": {"n1": 100, "n2": 101},
 "controller": "99 12345",
 "ended_at": "",
 "end": ""
})";

TEST(JobRecord, AnOlderRecordTakesTheDefaultsOfTheFieldsAddedSince) {
  const JobRecord slurm = parse_job_record(kOlderSlurmRecord, "/j/job.json");
  EXPECT_EQ(slurm.job, "41");
  EXPECT_EQ(slurm.nodes, (Nodes{"n1", "n2"}));
  EXPECT_TRUE(slurm.companions.empty());
  EXPECT_EQ(slurm.expand_strategy, "auto");
  EXPECT_FALSE(slurm.exit_status);
  nlohmann::json local = nlohmann::json::parse(kOlderSlurmRecord);
  local["backend"] = "local";
  local["ended_at"] = "2026-01-01T00:00:00.000Z";
  local["end"] = "its first rank exited with status 3";
  const JobRecord ended = parse_job_record(local.dump(), "/j/job.json");
  EXPECT_EQ(ended.expand_strategy, "");
  EXPECT_EQ(ended.end, "its first rank exited with status 3");
  EXPECT_FALSE(ended.exit_status);  // an older bellows did not keep it
}

TEST(JobRecord, OnlyTheFieldsAddedSinceMayBeAbsent) {
  JobRecord r = sample_record();
  r.backend = "slurm";
  r.expand_strategy = "merge";
  r.companions = {{"43", {"local1"}}};
  const nlohmann::json whole = nlohmann::json::parse(to_json_text(r));
  for (const auto& [key, value] : whole.items()) {
    nlohmann::json without = whole;
    without.erase(key);
    const bool optional = std::ranges::find(kOptionalJobRecordFields, key) != std::end(kOptionalJobRecordFields);
    try {
      (void)parse_job_record(without.dump(), "/j/job.json");
      EXPECT_TRUE(optional) << "a record without '" << key << "' was accepted";
    } catch (const std::runtime_error& e) {
      if (key == "pmix_rank_nodes") {
        // Absent alone, while the job map names rank numbers: the map names numbers never given.
        EXPECT_EQ(std::string(e.what()), "/j/job.json: field 'pmix_job_map': expected for local0 one of the 0 rank "
                                         "numbers of pmix_rank_nodes, got 0");
        continue;
      }
      EXPECT_FALSE(optional) << e.what();
      EXPECT_EQ(std::string(e.what()), "/j/job.json: field '" + key + "': missing");
    }
  }
}

TEST(JobRecord, AFieldAddedSinceIsRefusedWhenMalformed) {
  const auto refusal = [](const std::string& key, const nlohmann::json& value) {
    nlohmann::json record = nlohmann::json::parse(kOlderSlurmRecord);
    record["ended_at"] = "2026-01-01T00:00:00.000Z";
    record[key] = value;
    try {
      (void)parse_job_record(record.dump(), "/j/job.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal("companions", 43), "/j/job.json: field 'companions': expected a list of {\"id\": SLURM_JOB_ID, "
                                       "\"nodes\": [NODE, ...]}, got 43");
  EXPECT_EQ(refusal("expand_strategy", nullptr), "/j/job.json: field 'expand_strategy': expected a string, got null");
  EXPECT_EQ(refusal("expand_strategy", ""),
            "/j/job.json: field 'expand_strategy': expected auto, merge or companion for a Slurm job, got \"\"");
  EXPECT_EQ(refusal("exit_status", "3"),
            "/j/job.json: field 'exit_status': expected an exit status from 0 to 255 or null, got \"3\"");
  EXPECT_EQ(refusal("exit_status", 256),
            "/j/job.json: field 'exit_status': expected an exit status from 0 to 255 or null, got 256");
  EXPECT_EQ(refusal("exit_status", -1),
            "/j/job.json: field 'exit_status': expected an exit status from 0 to 255 or null, got -1");
  EXPECT_EQ(refusal("exit_status", 3), "accepted");
  EXPECT_EQ(refusal("exit_status", nullptr), "accepted");
}

TEST(JobRecord, KeepsTheExitStatusOfAnEndedJob) {
  JobRecord r = sample_record();
  r.ended_at = "2026-01-01T00:00:00.000Z";
  r.end = "its first rank exited with status 3";
  r.exit_status = 3;
  const std::string text = to_json_text(r);
  EXPECT_NE(text.find("\"exit_status\": 3"), std::string::npos) << text;
  EXPECT_EQ(parse_job_record(text, "job.json"), r);
  EXPECT_NE(to_json_text(sample_record()).find("\"exit_status\": null"), std::string::npos);
  JobRecord running = sample_record();
  running.exit_status = 0;
  try {
    (void)parse_job_record(to_json_text(running), "/j/job.json");
    ADD_FAILURE() << "a running job with an exit status was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "/j/job.json: field 'exit_status': expected null while the job runs (ended_at is \"\"), got 0");
  }
}

TEST(JobRecord, RefusesCompanionsThatCannotBe) {
  const auto refusal = [](const std::vector<CompanionAllocation>& companions) {
    JobRecord r = sample_record();
    r.nodes = {"n1", "n2", "n3"};
    r.companions = companions;
    try {
      (void)parse_job_record(to_json_text(r), "/j/job.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({{"43", {"n2"}}, {"44", {"n3"}}}), "accepted");
  EXPECT_EQ(refusal({{"43", {"n2"}}, {"44", {"n3", "n2"}}}),
            "/j/job.json: field 'companions': n2 is held by companions 43 and 44");
  EXPECT_EQ(refusal({{"43", {"n1"}}}),
            "/j/job.json: field 'companions': companion 43 holds n1, the job's first node (the job's own)");
  EXPECT_EQ(refusal({{"4x", {"n2"}}}), "/j/job.json: field 'companions': expected a Slurm job id, got \"4x\"");
  EXPECT_EQ(refusal({{"43", {}}}),
            "/j/job.json: field 'companions': expected a list of {\"id\": SLURM_JOB_ID, \"nodes\": [NODE, ...]}, "
            "got {\"id\":\"43\",\"nodes\":[]}");
}

TEST(JobRecord, RefusalsNameTheSourceAndTheField) {
  const auto refusal = [](const std::string& text) {
    try {
      (void)parse_job_record(text, "/j/job.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  std::string text = to_json_text(sample_record());
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string changed = text;
    const auto at = changed.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return changed.replace(at, from.size(), to);
  };
  EXPECT_EQ(refusal("[1]"), "/j/job.json: expected a JSON object, got [1]");
  EXPECT_EQ(refusal("{\"job\": \"x\"}"), "/j/job.json: field 'backend': missing");
  EXPECT_EQ(refusal(with("\"backend\": \"local\"", "\"backend\": \"lsf\"")),
            "/j/job.json: field 'backend': expected local or slurm, got \"lsf\"");
  EXPECT_EQ(refusal(with("\"ranks\": 2", "\"ranks\": -2")), "/j/job.json: field 'ranks': expected a count, got -2");
  EXPECT_EQ(refusal(with("\"local1\": 101", "\"local1\": 0")),
            "/j/job.json: field 'daemon_pids': expected a process id for local1, got 0");
  EXPECT_TRUE(refusal("{").starts_with("/j/job.json: not JSON ("));
  JobRecord no_nodes = sample_record();
  no_nodes.nodes.clear();
  EXPECT_EQ(refusal(to_json_text(no_nodes)),
            "/j/job.json: field 'nodes': expected a non-empty list of node names, got []");
  JobRecord bad_range = sample_record();
  bad_range.min_nodes = 4;
  EXPECT_EQ(refusal(to_json_text(bad_range)),
            "/j/job.json: field 'node_range': expected [MIN, MAX] with 1 <= MIN <= MAX, got [4,3]");
}

class TakeoverFiles : public ::testing::Test {
 protected:
  TakeoverFiles() {
    char pattern[] = "/tmp/bellows-takeover-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
  }
  ~TakeoverFiles() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(TakeoverFiles, AJobRecordIsWrittenWholeAndReadBack) {
  const auto path = dir_ / "job.json";
  write_job_record(path, sample_record());
  EXPECT_EQ(read_job_record(path), sample_record());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "job.json.tmp"));
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  try {
    (void)read_job_record(dir_ / "none.json");
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read " + (dir_ / "none.json").string() + ": No such file or directory");
  }
}

TEST_F(TakeoverFiles, OneControllerPerJobDirectory) {
  std::optional<ControllerLock> first(std::in_place, dir_);
  try {
    ControllerLock second(dir_);
    FAIL() << "a second controller of the job was let in";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "the job in " + dir_.string() + " has a controller already (process " +
                                         std::to_string(::getpid()) + " holds controller.lock): one controller per job");
  }
  first.reset();  // the controller ends (or is killed): the next one may take the job
  EXPECT_NO_THROW({ ControllerLock third(dir_); });
}

TEST(LocalNodePoolTakeOver, AKilledJobsNodesGoBackToTheJob) {
  LocalNodePool pool(4);
  ASSERT_TRUE(pool.allocate("other", 1).status.ok());  // local0
  const RmStatus taken = pool.take_over("local-7", {"local1", "local2"});
  EXPECT_EQ(taken.code, RmCode::ok) << taken.text;
  EXPECT_EQ(taken.text, "job local-7 holds 2 nodes again");
  EXPECT_EQ(pool.nodes_of("local-7"), (Nodes{"local1", "local2"}));
  EXPECT_EQ(pool.take_over("local-7", {"local1"}).code, RmCode::ok) << "its own nodes again: no change";
}

TEST(LocalNodePoolTakeOver, ANodeAnotherJobTookMeanwhileRefusesTheWholeTakeOver) {
  LocalNodePool pool(4);
  ASSERT_TRUE(pool.allocate("other", 2).status.ok());  // local0, local1
  const RmStatus taken = pool.take_over("local-7", {"local2", "local1"});
  EXPECT_EQ(taken.code, RmCode::not_owner);
  EXPECT_EQ(taken.text, "take-over of local1 by job local-7: node is allocated to job other since the job's "
                        "controller died");
  EXPECT_TRUE(pool.nodes_of("local-7").empty()) << "all or nothing";
  EXPECT_EQ(pool.take_over("local-7", {"local9"}).text, "take-over of local9 by job local-7: no such node in "
                                                        "local0..local3");
  EXPECT_EQ(pool.take_over("local-7", {}).code, RmCode::bad_request);
}

}  // namespace
}  // namespace bellows::controller
