// daemon::ControllerLink, the daemon's side of its controller: a real PmixServer in this
// process, a transport::Server in this process playing the controller, and the ranks played by
// control_channel_probe processes attached through libbellows' ControlChannel. One PmixServer
// per test (PMIx allows one per process life): ctest runs each test in a process of its own.

#include <bellows/daemon/controller_link.hpp>
#include <bellows/daemon/pmix_server.hpp>
#include <bellows/protocol/messages.hpp>
#include <bellows/transport/endpoint.hpp>
#include <bellows/transport/security.hpp>

#include <gtest/gtest.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "child_process.hpp"
#include "recording_controller.hpp"
#include "log_check.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <fstream>
#include <thread>
#include <variant>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace d = bellows::daemon;
namespace pr = bellows::protocol;
namespace tr = bellows::transport;
using bellows::testing::ChildProcess;
using namespace std::chrono_literals;

class ControllerLinkTest : public bellows::testing::LoggedTest {
 protected:
  ControllerLinkTest() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // One test per process: the pid names the directory, short enough for the socket's path.
    dir_ = fs::temp_directory_path() / ("bellows-link-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tr::prepare_private_directory(dir_ / "ctl");
    // The daemon's log as bellowsd writes it, on stderr, where the test's log check reads it.
    auto logger = spdlog::stderr_logger_mt("bellowsd-" + std::string(info->name()));
    logger->set_pattern("bellowsd: %l: %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::debug);
  }
  ~ControllerLinkTest() override {
    controller_.reset();
    fs::remove_all(dir_);
  }

  d::PmixServer::Options pmix_options() const {
    d::PmixServer::Options o;
    o.tmpdir = dir_ / "pmix";
    o.uri_file = dir_ / "uri";
    o.node_name = "n7";
    return o;
  }

  /// Starts the controller's end: it answers Hello with hello_answer_, an allocation request
  /// with allocation_answer_ (none: it keeps the request unanswered), records everything.
  void start_controller() {
    controller_ = std::make_unique<bellows::testing::RecordingController>(
        endpoint(), log_sink<tr::LogLevel>(), [this](const pr::Message& m) -> std::optional<pr::Ack> {
          if (std::holds_alternative<pr::Hello>(m)) return hello_answer_;
          if (const auto* r = std::get_if<pr::AllocationRequest>(&m)) return allocation_answer_(*r);
          if (const auto* j = std::get_if<pr::JobControlRequest>(&m)) return job_control_answer_(*j);
          return std::nullopt;
        });
  }

  std::string endpoint() const { return "ipc://" + (dir_ / "ctl" / "controller.sock").string(); }

  /// Waits until the controller received `count` messages; all it received by then.
  std::vector<pr::Message> received(std::size_t count) { return controller_->received(count); }
  tr::PeerId peer() { return controller_->peer(); }
  tr::Server& controller() { return controller_->server(); }

  std::string line(ChildProcess& child) {
    auto text = child.next_line(20s);
    return text ? *text : "<no line within 20 s>";
  }

  /// Whether a line containing `text` was logged within 20 s.
  bool logged_within(const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto lines = logged();
      if (std::any_of(lines.begin(), lines.end(),
                      [&](const std::string& l) { return l.find(text) != std::string::npos; }))
        return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  static bool exited_zero(const std::optional<int>& status) {
    return status.has_value() && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
  }

  fs::path dir_;
  pr::Ack hello_answer_{pr::AckCode::ok, "welcome"};
  std::function<std::optional<pr::Ack>(const pr::AllocationRequest&)> allocation_answer_ =
      [](const pr::AllocationRequest&) { return std::nullopt; };
  std::function<std::optional<pr::Ack>(const pr::JobControlRequest&)> job_control_answer_ =
      [](const pr::JobControlRequest&) { return std::nullopt; };
  std::unique_ptr<bellows::testing::RecordingController> controller_;
};

// Hello first; then a rank's requests with the controller's answers, its metrics and its
// resize reports reach the controller; the controller's decisions reach the rank as events; a
// rank that ended with its program (it detached) is no death.
TEST_F(ControllerLinkTest, ForwardsARanksRequestsMetricsAndReportsAndDeliversDecisions) {
  allocation_answer_ = [](const pr::AllocationRequest& r) {
    return r.directive == pr::AllocationDirective::extend
               ? pr::Ack{pr::AckCode::ok, "granted 2 nodes"}
               : pr::Ack{pr::AckCode::refused, "the job is at its minimum size"};
  };
  start_controller();
  d::PmixServer server(pmix_options());
  d::ControllerLink link(server, {endpoint(), "n7", 20s, {}, {}}, nullptr);
  std::string why = "not set";
  ASSERT_TRUE(link.wait_registered(20s, &why));
  EXPECT_EQ(why, "");
  const pr::Hello hello{"n7", static_cast<std::int32_t>(::getpid()), pr::kProtocolVersion};
  ASSERT_EQ(received(1).front(), pr::Message(hello));

  ChildProcess rank({BELLOWS_PROBE_PATH, "link"}, {"BELLOWS_DAEMON_URI=" + server.uri()});
  EXPECT_EQ(line(rank), "attached bellowsd.tool.1:0");
  EXPECT_EQ(line(rank), "extend status=0 name=SUCCESS text=granted 2 nodes");
  // PMIx 4.2.2 carries no text with a refusal: the controller's reason stays in the daemon.
  EXPECT_EQ(line(rank), "release status=" + std::to_string(PMIX_ERR_NOT_AVAILABLE) +
                            " name=NOT_AVAILABLE text=refused by the daemon (NOT_AVAILABLE); "
                            "the daemon's log says why");
  EXPECT_EQ(line(rank), "reported");

  pr::ResizeAck committed{{11, pr::ResizeOutcome::committed, 4, {2, 3}, ""}};
  pr::ResizeAck refused{{12, pr::ResizeOutcome::refused, 2, {}, "the job is at its maximum size"}};
  pr::ResizeAck cancelled{{13, pr::ResizeOutcome::cancelled, 2, {}, ""}};
  const std::vector<pr::Message> expected = {
      hello,
      pr::AllocationRequest{pr::AllocationDirective::extend, 2, 0, "n7.1"},
      pr::AllocationRequest{pr::AllocationDirective::release, 1, 0, "n7.2"},
      pr::NodeMetrics{"n7", pr::Metrics{.iteration = 12,
                                        .iteration_seconds = 0.25,
                                        .ready_tasks = 3,
                                        .busy_fraction = 0.5,
                                        .steals_sent = 2,
                                        .steals_failed = 1,
                                        .job_gflops = 8.0},
                      5, rank.pid()},
      committed, refused, cancelled};
  EXPECT_EQ(received(expected.size()), expected);

  // The controller's decisions, as notifications and as a request (answered ok).
  controller().notify(peer(), pr::ResizeDecided{21, pr::ResizeKind::expand, 2, {"n8", "n9"}, {}});
  controller().notify(peer(), pr::ResizeDecided{22, pr::ResizeKind::shrink, 1, {}, {"n8"}});
  const auto result = controller().request(peer(), pr::Abort{23, "slurm said no"}, 20s);
  ASSERT_TRUE(result.ok()) << result.text;
  EXPECT_EQ(result.reply, pr::Message(pr::Ack{pr::AckCode::ok, ""}));
  EXPECT_EQ(line(rank), "expand id=21 count=2 hosts=n8,n9");
  EXPECT_EQ(line(rank), "shrink id=22 nodes=n8");
  EXPECT_EQ(line(rank), "abort id=23 reason=slurm said no");
  EXPECT_EQ(line(rank), "done");
  EXPECT_TRUE(exited_zero(rank.wait_exit(20s)));
  // The rank that detached ended normally: a RankExited with exit code 0, which the
  // controller counts as a rank that ended, not as a death.
  ASSERT_EQ(received(expected.size() + 1).back(), pr::Message(pr::RankExited{5, rank.pid(), 0, 0}));

  // A rank killed after it published its metrics: the daemon names it and its rank.
  ChildProcess doomed({BELLOWS_PROBE_PATH, "hold"}, {"BELLOWS_DAEMON_URI=" + server.uri()});
  EXPECT_EQ(line(doomed), "attached bellowsd.tool.2:0");
  EXPECT_EQ(line(doomed), "published");
  // With the metrics go the rank they name and the pid the rank attached with.
  ASSERT_EQ(received(expected.size() + 2).back(),
            pr::Message(pr::NodeMetrics{"n7", {}, 7, doomed.pid()}));
  const pid_t pid = doomed.pid();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(doomed.wait_exit(20s).has_value());
  auto all = received(expected.size() + 3);
  ASSERT_EQ(all.size(), expected.size() + 3);
  EXPECT_EQ(all.back(), pr::Message(pr::RankExited{7, pid, -1, 0}));
  EXPECT_TRUE(logged_within(allow_log("bellowsd: warning: rank 7 (bellowsd.tool.2:0, pid " +
                                      std::to_string(pid) + ") ended without leaving the job")));
  EXPECT_TRUE(logged_within("bellowsd: debug: rank 5 (bellowsd.tool.1:0, pid " +
                            std::to_string(rank.pid()) + ") ended after detaching"));
}

// A rank that reported it left the job (a drained shrink) may end at any time after: its end
// is no death, even when it never detached. A report the record's check() refuses (left, but
// naming no rank) is dropped with a warning, not forwarded.
TEST_F(ControllerLinkTest, ARankThatLeftIsDrainedAndItsEndIsNoDeath) {
  start_controller();
  d::PmixServer server(pmix_options());
  d::ControllerLink link(server, {endpoint(), "n7", 20s, {}, {}}, nullptr);
  ASSERT_TRUE(link.wait_registered(20s));

  ChildProcess leaver({BELLOWS_PROBE_PATH, "leave"}, {"BELLOWS_DAEMON_URI=" + server.uri()});
  EXPECT_EQ(line(leaver), "attached bellowsd.tool.1:0");
  EXPECT_EQ(line(leaver), "left");
  const std::vector<pr::Message> expected = {
      pr::Hello{"n7", static_cast<std::int32_t>(::getpid()), pr::kProtocolVersion},
      pr::NodeMetrics{"n7", {}, 6, leaver.pid()},
      pr::ResizeAck{{14, pr::ResizeOutcome::left, 3, {6}, ""}}};
  ASSERT_EQ(received(expected.size()), expected);
  EXPECT_TRUE(logged_within(allow_log("bellowsd: warning: resize report from bellowsd.tool.1:0 "
                                      "dropped: ranks: empty although the outcome is left")));
  const pid_t left_pid = leaver.pid();
  ASSERT_EQ(::kill(left_pid, SIGKILL), 0);
  ASSERT_TRUE(leaver.wait_exit(20s).has_value());

  // A rank that dies after it: its RankExited comes alone.
  ChildProcess doomed({BELLOWS_PROBE_PATH, "hold"}, {"BELLOWS_DAEMON_URI=" + server.uri()});
  EXPECT_EQ(line(doomed), "attached bellowsd.tool.2:0");
  ASSERT_EQ(received(expected.size() + 1).back(),
            pr::Message(pr::NodeMetrics{"n7", {}, 7, doomed.pid()}));
  const pid_t pid = doomed.pid();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(doomed.wait_exit(20s).has_value());
  const auto all = received(expected.size() + 2);
  ASSERT_EQ(all.size(), expected.size() + 2);
  EXPECT_EQ(all.back(), pr::Message(pr::RankExited{7, pid, -1, 0}));
  allow_log("bellowsd: warning: rank 7 (bellowsd.tool.2:0, pid " + std::to_string(pid) +
            ") ended without leaving the job");
}

// Stop reaches on_stop with its reason, as a notification or a request (answered ok); a
// message a daemon does not handle is dropped with a warning naming it.
TEST_F(ControllerLinkTest, StopRunsTheCallbackAndOtherMessagesAreDropped) {
  start_controller();
  d::PmixServer server(pmix_options());
  std::mutex mutex;
  std::condition_variable called;
  std::vector<std::string> reasons;
  d::ControllerLink link(server, {endpoint(), "n7", 20s, {}, {}}, [&](const std::string& reason) {
    {
      std::lock_guard lock(mutex);
      reasons.push_back(reason);
    }
    called.notify_all();
  });
  ASSERT_TRUE(link.wait_registered(20s));

  controller().notify(peer(), pr::Stop{"the job ended", 0});
  const auto result =
      controller().request(peer(), pr::Stop{"the operator cancelled it", 5000}, 20s);
  ASSERT_TRUE(result.ok()) << result.text;
  EXPECT_EQ(result.reply, pr::Message(pr::Ack{pr::AckCode::ok, ""}));
  {
    std::unique_lock lock(mutex);
    called.wait_for(lock, 20s, [&] { return reasons.size() >= 2; });
    EXPECT_EQ(reasons, (std::vector<std::string>{"the job ended", "the operator cancelled it"}));
  }
  EXPECT_TRUE(logged_within("bellowsd: info: controller says stop: the job ended"));

  controller().notify(peer(), pr::StatusRequest{});
  EXPECT_TRUE(logged_within(allow_log("bellowsd: warning: dropped status_request from the "
                                      "controller: a daemon does not handle it")));
}

// The controller's RanksLost and Stop reach a PMIx tool that registered for the standard codes
// (bellows-pmix-query --events) as the standard events, with the affected rank named in the
// job's namespace, the host, the exit code and the controller's text; JOB_END before the stop.
TEST_F(ControllerLinkTest, LostRanksAndStopReachAToolAsStandardEvents) {
  start_controller();
  d::PmixServer server(pmix_options());
  std::atomic<int> stops{0};
  d::ControllerLink link(server, {endpoint(), "n7", 20s, {}, {}}, [&](const std::string&) { ++stops; });
  ASSERT_TRUE(link.wait_registered(20s));
  controller().notify(peer(), pr::JobView{"job-9", {"n7", "n2", "n3", "n4"}, {0, 2, 3, pr::kNoRank},
                                          {100, 200, 300, 0}, 3, 1, 4, "", 0, pr::ResizeKind::expand,
                                          "", 0, {}});
  const auto view_deadline = std::chrono::steady_clock::now() + 20s;
  while (!server.job_view() && std::chrono::steady_clock::now() < view_deadline) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(server.job_view().has_value());
  ChildProcess tool({BELLOWS_TOOL_PATH, "--uri", "file:" + (dir_ / "uri").string(), "--events", "20"});
  ASSERT_EQ(line(tool), R"({"registered": true})");

  controller().notify(peer(), pr::RanksLost{1, {2}, {"n2"}, "rank 2 (pid 4711) killed by signal 9",
                                            pr::LossCause::rank_died, 0, 9});
  controller().notify(peer(), pr::RanksLost{2, {3}, {"n3"}, "rank 3 (pid 4712) exit status 3",
                                            pr::LossCause::rank_died, 3, 0});
  controller().notify(peer(), pr::RanksLost{3, {}, {"n4"}, "the daemon of n4 went away",
                                            pr::LossCause::node_lost, -1, 0});
  const auto answer = controller().request(peer(), pr::Stop{"the job ended", 0}, 20s);
  ASSERT_TRUE(answer.ok()) << answer.text;
  EXPECT_EQ(line(tool), R"({"event": "PMIX_ERR_PROC_ABORTED_BY_SIG", "code": -402, "source": "bellowsd:0", )"
                        R"("affected": [{"nspace": "job-9", "rank": 2}], "hostname": "n2", )"
                        R"("text": "rank 2 (pid 4711) killed by signal 9"})");
  EXPECT_EQ(line(tool), R"({"event": "PMIX_EVENT_PROC_TERMINATED", "code": -201, "source": "bellowsd:0", )"
                        R"("affected": [{"nspace": "job-9", "rank": 3}], "hostname": "n3", "exit_code": 3, )"
                        R"("text": "rank 3 (pid 4712) exit status 3"})");
  EXPECT_EQ(line(tool), R"({"event": "PMIX_EVENT_NODE_DOWN", "code": -231, "source": "bellowsd:0", )"
                        R"("affected": [], "hostname": "n4", "text": "the daemon of n4 went away"})");
  EXPECT_EQ(line(tool), R"({"event": "PMIX_EVENT_JOB_END", "code": -145, "source": "bellowsd:0", )"
                        R"("affected": [{"nspace": "job-9", "rank": "wildcard"}], "text": "the job ended"})");
  EXPECT_TRUE(exited_zero(tool.wait_exit(20s)));  // it ends after JOB_END
  EXPECT_EQ(stops.load(), 1);
}

// A PMIx tool's allocation request is taken at once (its id echoed) and told its end later
// (PMIX_NOTIFY_ALLOC_COMPLETE from the controller's AllocationComplete); its PMIx_Job_control
// goes to the controller with who asked, and the controller's refusal, or a target of another
// job, fails the call.
TEST_F(ControllerLinkTest, AToolHearsHowItsAllocationEndedAndItsJobControlIsForwarded) {
  allocation_answer_ = [](const pr::AllocationRequest&) { return pr::Ack{pr::AckCode::ok, "taken by the test"}; };
  job_control_answer_ = [](const pr::JobControlRequest& r) {
    return r.target_rank == 1 ? pr::Ack{pr::AckCode::ok, "signal 19 sent to rank 1"}
                              : pr::Ack{pr::AckCode::refused, "job job-9 has no rank 5 to signal"};
  };
  start_controller();
  d::PmixServer server(pmix_options());
  d::ControllerLink link(server, {endpoint(), "n7", 20s, {}, {}}, nullptr);
  ASSERT_TRUE(link.wait_registered(20s));
  controller().notify(peer(), pr::JobView{"job-9", {"n7", "n2"}, {0, 1}, {100, 200}, 2, 1, 4, "", 0,
                                          pr::ResizeKind::expand, "", 0, {}});
  const auto view_deadline = std::chrono::steady_clock::now() + 20s;
  while (!server.job_view() && std::chrono::steady_clock::now() < view_deadline) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(server.job_view().has_value());
  const std::string uri = "file:" + (dir_ / "uri").string();

  ChildProcess tool({BELLOWS_CONTROL_TOOL_PATH, "--uri", uri, "--wait", "20", "extend", "1", "--req-id", "grow-7"});
  EXPECT_TRUE(line(tool).starts_with(R"({"call": "extend", "status": 0, "status_name": "SUCCESS", )"
                                     R"("request_id": "grow-7", "text": "taken by the test", "time": )"));
  EXPECT_EQ(received(2).back(), pr::Message(pr::AllocationRequest{pr::AllocationDirective::extend, 1, 0, "grow-7"}));
  controller().notify(peer(), pr::AllocationComplete{"grow-7", 4, pr::AllocationOutcome::committed,
                                                     "resize 4 (expand by 1) committed"});
  EXPECT_TRUE(line(tool).starts_with(R"({"event": "PMIX_NOTIFY_ALLOC_COMPLETE", "code": -105, "request_id": )"
                                     R"("grow-7", "alloc_id": "4", "outcome": "committed", "text": )"
                                     R"("resize 4 (expand by 1) committed", "time": )"));
  EXPECT_TRUE(exited_zero(tool.wait_exit(20s)));

  ChildProcess signal({BELLOWS_CONTROL_TOOL_PATH, "--uri", uri, "signal", "job-9", "1", "19"});
  EXPECT_TRUE(line(signal).starts_with(R"({"call": "signal", "status": 0, "status_name": "SUCCESS", "time": )"));
  EXPECT_EQ(received(3).back(),
            pr::Message(pr::JobControlRequest{pr::JobControlAction::signal, 19, 1, "bellowsd.tool.2:0"}));
  EXPECT_TRUE(exited_zero(signal.wait_exit(20s)));

  ChildProcess missing({BELLOWS_CONTROL_TOOL_PATH, "--uri", uri, "terminate", "job-9", "5"});
  EXPECT_TRUE(line(missing).starts_with(R"({"call": "terminate", "status": -27, "status_name": "BAD-PARAM", )"));
  EXPECT_EQ(received(4).back(),
            pr::Message(pr::JobControlRequest{pr::JobControlAction::terminate, 0, 5, "bellowsd.tool.3:0"}));
  EXPECT_TRUE(logged_within("refused (BAD-PARAM): the controller refused: job job-9 has no rank 5 to signal"));

  ChildProcess other({BELLOWS_CONTROL_TOOL_PATH, "--uri", uri, "terminate", "job-1", "all"});
  EXPECT_TRUE(line(other).starts_with(R"({"call": "terminate", "status": -27, "status_name": "BAD-PARAM", )"));
  allow_log("bellowsd: warning: job control from bellowsd.tool.4:0 refused (BAD-PARAM): target job-1:* is not "
            "of job job-9");
  EXPECT_TRUE(logged_within("target job-1:* is not of job job-9"));
  EXPECT_EQ(controller_->count(), 4u);  // not forwarded
}

TEST_F(ControllerLinkTest, ARefusedHelloSaysWhy) {
  hello_answer_ = pr::Ack{pr::AckCode::refused, "node n7 is not in the job"};
  start_controller();
  d::PmixServer server(pmix_options());
  d::ControllerLink link(server, {endpoint(), "n7", 20s, {}, {}}, nullptr);
  std::string why;
  EXPECT_FALSE(link.wait_registered(20s, &why));
  EXPECT_EQ(why, "the controller refused: node n7 is not in the job");
}

// No controller at the endpoint: no registration, and a rank's request gets PMIx's timeout
// once the link's request_timeout passed.
TEST_F(ControllerLinkTest, NoControllerMeansNoRegistrationAndRequestsTimeOut) {
  d::PmixServer server(pmix_options());
  d::ControllerLink link(server, {endpoint(), "n7", 300ms, {}, {}}, nullptr);
  std::string why;
  EXPECT_FALSE(link.wait_registered(300ms, &why));
  EXPECT_EQ(why, "no answer to hello from the controller at " + endpoint());

  ChildProcess rank({BELLOWS_PROBE_PATH, "ask", "2"}, {"BELLOWS_DAEMON_URI=" + server.uri()});
  EXPECT_EQ(line(rank), "attached bellowsd.tool.1:0");
  EXPECT_EQ(line(rank), "answer status=" + std::to_string(PMIX_ERR_TIMEOUT) +
                            " name=TIMEOUT text=refused by the daemon (TIMEOUT); "
                            "the daemon's log says why");
  EXPECT_TRUE(exited_zero(rank.wait_exit(20s)));
}

// An allocation request the controller leaves unanswered: the rank gets PMIx's timeout once
// the link's request_timeout passed.
TEST_F(ControllerLinkTest, AnUnansweredRequestTimesOut) {
  start_controller();
  d::PmixServer server(pmix_options());
  d::ControllerLink link(server, {endpoint(), "n7", 300ms, {}, {}}, nullptr);
  ASSERT_TRUE(link.wait_registered(20s));
  ChildProcess rank({BELLOWS_PROBE_PATH, "ask", "-1"}, {"BELLOWS_DAEMON_URI=" + server.uri()});
  EXPECT_EQ(line(rank), "attached bellowsd.tool.1:0");
  EXPECT_EQ(line(rank), "answer status=" + std::to_string(PMIX_ERR_TIMEOUT) +
                            " name=TIMEOUT text=refused by the daemon (TIMEOUT); "
                            "the daemon's log says why");
  EXPECT_TRUE(exited_zero(rank.wait_exit(20s)));
  EXPECT_EQ(received(2).back(),
            pr::Message(pr::AllocationRequest{pr::AllocationDirective::release, 1, 0, "n7.1"}));
}

// Slurm signals every process of a step at once: a rank's launcher that ends of that SIGTERM
// while the daemon's own stop signal arrives is stopped with the daemon, not a death; one that
// ends so without a stop signal is reported as RankExited with a warning.
TEST_F(ControllerLinkTest, ALauncherSignalledWithTheDaemonIsNoDeath) {
  start_controller();
  d::PmixServer server(pmix_options());
  std::atomic<bool> stop_signal{false};
  d::ControllerLink link(server, {endpoint(), "n7", 20s, {}, [&] { return stop_signal.load(); }},
                         nullptr);
  ASSERT_TRUE(link.wait_registered(20s));

  // The pid the daemon logged for the rank of `resize`, 0 when not logged within 20 s.
  const auto started = [&](std::uint64_t resize) -> pid_t {
    const std::string prefix =
        "bellowsd: info: started the rank of resize " + std::to_string(resize) + ": sleep,30 (pid ";
    if (!logged_within(prefix)) return 0;
    for (const auto& l : logged()) {
      if (const auto at = l.find(prefix); at != std::string::npos) {
        return static_cast<pid_t>(std::stoi(l.substr(at + prefix.size())));
      }
    }
    return 0;
  };

  controller().notify(peer(), pr::StartRank{1, {"sleep", "30"}, {}, "job-a", 1, {"n6", "n7"}, {0, 1}});
  const pid_t stopped = started(1);
  ASSERT_GT(stopped, 0);
  stop_signal = true;
  ASSERT_EQ(::kill(stopped, SIGTERM), 0);
  EXPECT_TRUE(logged_within("bellowsd: info: the rank launcher job-a:1 (pid " +
                            std::to_string(stopped) +
                            ") killed by signal 15 (Terminated) as the daemon stops"));

  stop_signal = false;
  controller().notify(peer(), pr::StartRank{2, {"sleep", "30"}, {}, "job-b", 0, {"n7"}, {0}});
  const pid_t died = started(2);
  ASSERT_GT(died, 0);
  ASSERT_EQ(::kill(died, SIGTERM), 0);
  // Hello, then the second launcher's end alone.
  const auto all = received(2);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all.back(), pr::Message(pr::RankExited{pr::kNoRank, died, 0, SIGTERM}));
  EXPECT_TRUE(logged_within(allow_log("bellowsd: warning: the rank launcher job-b:0 (pid " +
                                      std::to_string(died) + ") killed by signal 15 (Terminated)")));
}

// After a resize the controller's JobView names the job's ranks by their PMIx ranks, with the
// job map: the daemon that registered the job's namespace registers it again with the job as it
// is now and announces the ranks as a process set, which its client (a PMIx-native program on
// a node of the job's start) hears of as PMIX_PROCESS_SET_DEFINE with the members. With
// PMIX_GET_REFRESH_CACHE the client reads the job's size, node count and node list (what
// PMIX_NODE_MAP says): 4 nodes after a grow by 2, 3 after a shrink that took rank 2 and its node
// (its number stays in the namespace, out of the maps). The same ranks again announce nothing.
TEST_F(ControllerLinkTest, TheJobsRanksAfterAResizeReachItsClientsAsAProcessSet) {
  start_controller();
  d::PmixServer server(pmix_options());
  d::ControllerLink link(server, {endpoint(), "n7", 20s, {}, {}}, nullptr);
  ASSERT_TRUE(link.wait_registered(20s));
  const fs::path out = dir_ / "ranks";
  fs::create_directories(out);
  controller().notify(peer(), pr::StartRank{0, {BELLOWS_NATIVE_CLIENT_PATH, out.string(), "4"},
                                            {"PMIX_NATIVE_CLIENT_ALONE=1"}, "job-v", 1, {"n6", "n7"}, {0, 1}});
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!fs::exists(out / "rank-1.json") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(fs::exists(out / "rank-1.json"));
  const std::vector<std::string> job_map{"n6", "n7", "n8", "n9"};
  pr::JobView view{"job-v", {"n6", "n7", "n8", "n9"}, {0, 1, 2, 3}, {10, 11, 12, 13}, 4, 1, 4, "", 0,
                   pr::ResizeKind::expand, "", 0, {}, {0, 1, 2, 3}, job_map};
  controller().notify(peer(), view);
  controller().notify(peer(), view);
  const auto sizes = [&out] {
    std::ifstream in(out / "rank-1.sizes");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  const std::string pset_event = "last_event " + std::to_string(PMIX_PROCESS_SET_DEFINE) + " pset job-v.ranks.";
  const auto grown = [&](const std::string& line) {
    return line.starts_with("size 4 events 1 " + pset_event + "4.") &&
           line.ends_with(" members 4 num_nodes 4 nodes n6,n7,n8,n9");
  };
  // The client notes the job when it polls (each 100 ms): the next view once it noted the grow.
  const auto noted = std::chrono::steady_clock::now() + 20s;
  while (!std::ranges::any_of(sizes(), grown) && std::chrono::steady_clock::now() < noted)
    std::this_thread::sleep_for(10ms);
  view = pr::JobView{"job-v", {"n6", "n7", "n9"}, {0, 1, 3}, {10, 11, 13}, 3, 1, 4, "", 0,
                     pr::ResizeKind::shrink, "", 0, {}, {0, 1, 3}, job_map};
  controller().notify(peer(), view);
  EXPECT_TRUE(logged_within("bellowsd: info: registered job-v again: ranks 0,1,3 of the job map 0:n6,1:n7,2:n8,3:n9"));
  EXPECT_TRUE(logged_within("bellowsd: info: the rank launcher job-v:1 (pid "));
  const std::vector<std::string> lines = sizes();
  // A line each time something the client reads changed: the namespace is registered before
  // the set's event, and the client reads the keys one by one, so each resize may show in
  // several lines; the grow's complete line and the last one are exact.
  ASSERT_GE(lines.size(), 2u) << (lines.empty() ? "no event" : lines.front());
  ASSERT_LE(lines.size(), 8u) << lines.back();
  EXPECT_TRUE(std::ranges::any_of(lines, grown)) << lines[0];
  EXPECT_TRUE(lines.back().starts_with("size 3 events 2 " + pset_event + "3.") &&
              lines.back().ends_with(" members 3 num_nodes 3 nodes n6,n7,n9"))
      << lines.back();
  const std::vector<std::string> log = logged();
  EXPECT_FALSE(std::ranges::any_of(
      log, [](const std::string& l) { return l.find("could not register job-v again") != std::string::npos; }));
}

// A controller gone without Stop (here: its server destroyed, its connection closed): a daemon
// with no rank stops once the connection has stayed lost for controller_loss_grace, with the
// reason; not before.
TEST_F(ControllerLinkTest, AControllerGoneStopsADaemonWithoutRanks) {
  start_controller();
  d::PmixServer server(pmix_options());
  std::mutex mutex;
  std::condition_variable called;
  std::vector<std::string> reasons;
  d::ControllerLink::Options options{endpoint(), "n7", 20s, {}, {}};
  options.controller_loss_grace = 500ms;
  d::ControllerLink link(server, options, [&](const std::string& reason) {
    {
      std::lock_guard lock(mutex);
      reasons.push_back(reason);
    }
    called.notify_all();
  });
  ASSERT_TRUE(link.wait_registered(20s));
  std::this_thread::sleep_for(700ms);  // connected all along: no stop
  {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(reasons.empty());
  }

  const auto lost = std::chrono::steady_clock::now();
  controller_.reset();
  std::unique_lock lock(mutex);
  ASSERT_TRUE(called.wait_for(lock, 20s, [&] { return !reasons.empty(); }));
  const auto waited = std::chrono::steady_clock::now() - lost;
  EXPECT_GE(waited, 500ms);
  EXPECT_LT(waited, 5s);
  EXPECT_EQ(reasons, (std::vector<std::string>{"the controller at " + endpoint() +
                                               " is gone and no rank of node n7 runs"}));
  lock.unlock();
  EXPECT_TRUE(logged_within("bellowsd: info: the controller at " + endpoint() +
                            " is gone and no rank of node n7 runs (no connection for "));
}

// The same with no grace set: it follows the heartbeat timeout (0.4 of it,
// runtime::controller_loss_limits), here 1 s: the daemon stops 0.4 s after the loss, where the
// default timeout's grace would be 2 s.
TEST_F(ControllerLinkTest, AControllerGoneStopsADaemonWithoutRanksAfterTheGraceOfItsHeartbeatTimeout) {
  start_controller();
  d::PmixServer server(pmix_options());
  std::mutex mutex;
  std::condition_variable called;
  std::vector<std::string> reasons;
  d::ControllerLink::Options options{endpoint(), "n7", 20s, {}, {}};
  options.heartbeat_timeout = 1s;
  d::ControllerLink link(server, options, [&](const std::string& reason) {
    {
      std::lock_guard lock(mutex);
      reasons.push_back(reason);
    }
    called.notify_all();
  });
  ASSERT_TRUE(link.wait_registered(20s));

  const auto lost = std::chrono::steady_clock::now();
  controller_.reset();
  std::unique_lock lock(mutex);
  ASSERT_TRUE(called.wait_for(lock, 20s, [&] { return !reasons.empty(); }));
  const auto waited = std::chrono::steady_clock::now() - lost;
  EXPECT_GE(waited, 400ms);
  EXPECT_LT(waited, 1800ms);
  EXPECT_EQ(reasons, (std::vector<std::string>{"the controller at " + endpoint() +
                                               " is gone and no rank of node n7 runs"}));
}

// A controller gone while a rank of the node runs: the daemon says so once, keeps serving
// the rank, and stops only after the rank's program ended (it detached and exited).
TEST_F(ControllerLinkTest, AControllerGoneStopsTheDaemonOnlyAfterItsRanksEnded) {
  start_controller();
  d::PmixServer server(pmix_options());
  std::mutex mutex;
  std::condition_variable called;
  std::vector<std::string> reasons;
  d::ControllerLink::Options options{endpoint(), "n7", 20s, {}, {}};
  options.controller_loss_grace = 300ms;
  d::ControllerLink link(server, options, [&](const std::string& reason) {
    {
      std::lock_guard lock(mutex);
      reasons.push_back(reason);
    }
    called.notify_all();
  });
  ASSERT_TRUE(link.wait_registered(20s));
  ChildProcess rank({BELLOWS_PROBE_PATH, "finish"}, {"BELLOWS_DAEMON_URI=" + server.uri()});
  EXPECT_EQ(line(rank), "attached bellowsd.tool.1:0");
  EXPECT_EQ(line(rank), "published");
  ASSERT_EQ(received(2).size(), 2u);  // Hello, the rank's metrics

  controller_.reset();
  EXPECT_TRUE(logged_within(allow_log(
      "bellowsd: warning: the controller at " + endpoint() + " is gone (no connection for ")));
  EXPECT_TRUE(logged_within("s): the ranks of node n7 run on (1 attached, 0 started here "
                            "running); the daemon exits once they end"));
  std::this_thread::sleep_for(500ms);  // the rank runs: no stop
  {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(reasons.empty());
  }
  ASSERT_EQ(::kill(rank.pid(), SIGTERM), 0);
  EXPECT_EQ(line(rank), "detached");
  EXPECT_TRUE(exited_zero(rank.wait_exit(20s)));
  const auto ended = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex);
  ASSERT_TRUE(called.wait_for(lock, 20s, [&] { return !reasons.empty(); }));
  EXPECT_LT(std::chrono::steady_clock::now() - ended, 2s);
  EXPECT_EQ(reasons, (std::vector<std::string>{"the controller at " + endpoint() +
                                               " is gone and no rank of node n7 runs"}));
  lock.unlock();
  const auto lines = logged();
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [](const std::string& l) {
                            return l.find("the daemon exits once they end") != std::string::npos;
                          }),
            1);
}

// A controller that takes the job over binds the same endpoint: the daemon, which kept
// reconnecting while its rank ran, says hello again and sends the rank's last report again.
TEST_F(ControllerLinkTest, ANewControllerAtTheEndpointHearsHelloAndTheRanksLastReportAgain) {
  start_controller();
  d::PmixServer server(pmix_options());
  d::ControllerLink::Options options{endpoint(), "n7", 20s, {}, {}};
  options.controller_loss_grace = 300ms;
  std::atomic<bool> stopped{false};
  d::ControllerLink link(server, options, [&](const std::string&) { stopped = true; });
  ASSERT_TRUE(link.wait_registered(20s));
  ChildProcess rank({BELLOWS_PROBE_PATH, "finish"}, {"BELLOWS_DAEMON_URI=" + server.uri()});
  EXPECT_EQ(line(rank), "attached bellowsd.tool.1:0");
  EXPECT_EQ(line(rank), "published");
  const auto first = received(2);  // Hello, the rank's metrics
  ASSERT_EQ(first.size(), 2u);
  const auto* reported = std::get_if<pr::NodeMetrics>(&first[1]);
  ASSERT_NE(reported, nullptr);

  controller_.reset();
  EXPECT_TRUE(logged_within(allow_log(
      "bellowsd: warning: the controller at " + endpoint() + " is gone (no connection for ")));
  start_controller();  // the new controller, where the old one listened
  const auto again = received(2);
  ASSERT_EQ(again.size(), 2u);
  const auto* hello = std::get_if<pr::Hello>(&again[0]);
  ASSERT_NE(hello, nullptr);
  EXPECT_EQ(hello->node_name, "n7");
  EXPECT_EQ(hello->daemon_pid, ::getpid());
  const auto* report = std::get_if<pr::NodeMetrics>(&again[1]);
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->rank, reported->rank);
  EXPECT_EQ(report->pid, rank.pid());
  EXPECT_EQ(report->metrics.iteration, reported->metrics.iteration);
  EXPECT_TRUE(logged_within("bellowsd: info: registered again with the controller at " + endpoint() +
                            " (welcome); 1 rank report(s) sent again"));
  ASSERT_EQ(::kill(rank.pid(), SIGTERM), 0);
  EXPECT_EQ(line(rank), "detached");
  EXPECT_TRUE(exited_zero(rank.wait_exit(20s)));
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(stopped.load()) << "its controller is back: the daemon does not stop when its rank ends";
}

}  // namespace
