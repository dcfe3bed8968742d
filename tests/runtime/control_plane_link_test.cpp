// runtime::ControlPlaneLink on the job's first rank (mpiexec -n 1): a bellowsd started by the
// test serves the rank's node, and a transport::Server in the test plays the job's controller.
// The controller's decisions become ElasticJob requests (or a refusal), an Abort drops the
// request and is reported cancelled (or, once the job settled the resize, changes nothing), a
// resize the job refuses is reported refused with its reason, an application's own request
// reaches the controller, spawn_environment() names the new ranks' nodes, a failure's lost
// ranks reach the link and its recovery is reported. (Committed and
// left reports need ranks spawned and leaving: the control_plane_* tests cover them end to
// end.)

#include <bellows/protocol/messages.hpp>
#include <bellows/runtime/control_plane_link.hpp>
#include <bellows/runtime/elastic_job.hpp>
#include <bellows/runtime/membership.hpp>
#include <bellows/transport/endpoint.hpp>
#include <bellows/transport/security.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "../daemon/child_process.hpp"
#include "log_check.hpp"
#include "recording_controller.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

namespace bellows::protocol {
// A ResizeAck as a failed assertion shows it.
void PrintTo(const ResizeAck& ack, std::ostream* out) {
  const ResizeReport& r = ack.report;
  *out << "ResizeAck{id " << r.resize_id << ", " << to_string(r.outcome) << ", size "
       << r.job_size << ", ranks " << pmix::payload_value(r.ranks) << ", \"" << r.text << "\"}";
}
}  // namespace bellows::protocol

namespace {

namespace fs = std::filesystem;
namespace br = bellows::runtime;
namespace pr = bellows::protocol;
namespace tr = bellows::transport;
using bellows::testing::ChildProcess;
using namespace std::chrono_literals;
using Environment = std::vector<std::pair<std::string, std::string>>;

class ControlPlaneLinkTest : public bellows::testing::LoggedTest {
 protected:
  ControlPlaneLinkTest() {
    dir_ = fs::temp_directory_path() / ("bellows-cpl-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "job" / "nodes" / "n0");
    tr::prepare_private_directory(dir_ / "ctl");
    controller_ = std::make_unique<bellows::testing::RecordingController>(
        "ipc://" + (dir_ / "ctl" / "controller.sock").string(), log_sink<tr::LogLevel>(),
        [](const pr::Message& m) -> std::optional<pr::Ack> {
          const bool allocation = std::holds_alternative<pr::AllocationRequest>(m);
          return pr::Ack{pr::AckCode::ok, allocation ? "granted 1 node" : "welcome"};
        });
  }
  ~ControlPlaneLinkTest() override {
    controller_.reset();
    ::unsetenv(br::ControlPlaneLink::kJobDirVariable);
    ::unsetenv(br::ControlPlaneLink::kNodesVariable);
    fs::remove_all(dir_);
  }

  /// What the controller received, once it received `count` messages (or after 20 s).
  std::vector<pr::Message> received(std::size_t count) { return controller_->received(count); }
  tr::PeerId peer() { return controller_->peer(); }
  tr::Server& controller() { return controller_->server(); }

  fs::path dir_;
  std::unique_ptr<bellows::testing::RecordingController> controller_;
};

TEST_F(ControlPlaneLinkTest, TurnsTheControllersDecisionsIntoRequestsOnTheFirstRank) {
  const fs::path node_dir = dir_ / "job" / "nodes" / "n0";
  ChildProcess daemon({BELLOWSD_PATH, "--tmpdir", (node_dir / "pmix").string(), "--uri-file",
                       (node_dir / "uri").string(), "--node-name", "n0", "--controller",
                       controller_->endpoint()});
  ASSERT_EQ(received(1).size(), 1u);
  ASSERT_TRUE(std::holds_alternative<pr::Hello>(received(1).front()));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!fs::exists(node_dir / "uri") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(fs::exists(node_dir / "uri"));

  // Not attached yet: an application's own request has nowhere to go.
  try {
    br::request_resize(1);
    ADD_FAILURE() << "request_resize did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "request_resize: this process is not attached to a control plane "
                           "(the job was not started by bellows run)");
  }

  // The job starts on n0 and grows to n1 and n2: rank 0 runs on n0.
  ::setenv(br::ControlPlaneLink::kJobDirVariable, (dir_ / "job").c_str(), 1);
  ::setenv(br::ControlPlaneLink::kNodesVariable, "n0,n1,n2", 1);
  auto link = br::ControlPlaneLink::from_environment(0);
  ASSERT_TRUE(link.has_value());
  EXPECT_EQ(link->node(), "n0");
  EXPECT_EQ(link->spawn_environment(1),
            (Environment{{"BELLOWS_EXPAND_NODES", "n1,n2"}, {"BELLOWS_EXPAND_FIRST_RANK", "1"}}));

  br::ElasticJob job(br::Membership(MPI_COMM_WORLD),
                     [](int) {
                       br::SpawnSpec spec;
                       spec.command = "/bin/false";
                       return spec;
                     });
  br::RuntimeOptions options;
  options.device = br::DeviceKind::cpu;
  options.cpu_workers = 1;
  br::Runtime runtime(job.communicator(), options);
  job.attach(runtime);
  link->attach(job);
  // Polls the daemon's events until `done` holds (20 s at most).
  const auto poll_until = [&](const std::function<bool()>& done) {
    const auto limit = std::chrono::steady_clock::now() + 20s;
    while (!done() && std::chrono::steady_clock::now() < limit) {
      link->poll();
      std::this_thread::sleep_for(5ms);
    }
    return done();
  };
  // The n-th message the controller received, polling meanwhile.
  const auto reported = [&](std::size_t n) {
    poll_until([&] { return controller_->count() >= n; });
    const auto all = received(n);
    return all.size() >= n ? all[n - 1] : pr::Message(pr::Ack{pr::AckCode::failed, "nothing"});
  };
  std::size_t count = 1;

  // Expand onto n3 and n4: a request for 2 ranks; the spawn places them there.
  controller().notify(peer(), pr::ResizeDecided{31, pr::ResizeKind::expand, 2, {"n3", "n4"}, {}});
  ASSERT_TRUE(poll_until([&] { return job.pending_requests() == 1; }));
  EXPECT_EQ(link->spawn_environment(1),
            (Environment{{"BELLOWS_EXPAND_NODES", "n3,n4"}, {"BELLOWS_EXPAND_FIRST_RANK", "1"}}));

  // Called off before the job carried it out: dropped, reported cancelled with the reason.
  controller().notify(peer(), pr::Abort{31, "slurm said no"});
  ASSERT_TRUE(poll_until([&] { return job.pending_requests() == 0; }));
  EXPECT_EQ(reported(++count),
            pr::Message(pr::ResizeAck{{31, pr::ResizeOutcome::cancelled, 1, {}, "slurm said no"}}));
  EXPECT_EQ(link->spawn_environment(1),
            (Environment{{"BELLOWS_EXPAND_NODES", "n1,n2"}, {"BELLOWS_EXPAND_FIRST_RANK", "1"}}));

  // A shrink of a node without a rank of the job: refused, with the node named.
  controller().notify(peer(), pr::ResizeDecided{32, pr::ResizeKind::shrink, 1, {}, {"n9"}});
  EXPECT_EQ(reported(++count), pr::Message(pr::ResizeAck{{32, pr::ResizeOutcome::refused, 1, {},
                                                           "node n9 runs no rank of this job"}}));
  EXPECT_EQ(job.pending_requests(), 0u);

  // A shrink of n0 (twice named): a request for rank 0 to leave; called off, cancelled.
  controller().notify(peer(), pr::ResizeDecided{33, pr::ResizeKind::shrink, 2, {}, {"n0", "n0"}});
  ASSERT_TRUE(poll_until([&] { return job.pending_requests() == 1; }));
  controller().notify(peer(), pr::Abort{33, "the operator cancelled it"});
  ASSERT_TRUE(poll_until([&] { return job.pending_requests() == 0; }));
  EXPECT_EQ(reported(++count),
            pr::Message(pr::ResizeAck{{33, pr::ResizeOutcome::cancelled, 1, {},
                                       "the operator cancelled it"}}));

  // The same shrink carried out: the job refuses it, and the link reports why.
  controller().notify(peer(), pr::ResizeDecided{34, pr::ResizeKind::shrink, 1, {}, {"n0"}});
  ASSERT_TRUE(poll_until([&] { return job.pending_requests() == 1; }));
  // Before the first iteration nothing is carried out: the request waits for the second.
  EXPECT_EQ(job.apply_pending(0), br::ElasticJob::Outcome::none);
  EXPECT_EQ(job.pending_requests(), 1u);
  EXPECT_EQ(job.apply_pending(1), br::ElasticJob::Outcome::refused);
  EXPECT_EQ(reported(++count),
            pr::Message(pr::ResizeAck{{34, pr::ResizeOutcome::refused, 1, {},
                                       "shrink refused: shrink: rank 0 may not leave the job"}}));
  // Called off after the job settled it: the job's answer stands, nothing more is reported
  // (the next message the controller receives is the request below).
  controller().notify(peer(), pr::Abort{34, "too late"});
  const std::string stands =
      "bellows: resize 34 called off by the controller (too late) after the job carried it out: "
      "it stands";
  EXPECT_TRUE(poll_until([&] {
    const auto lines = logged();
    return std::find(lines.begin(), lines.end(), stands) != lines.end();
  }));

  // An application's own request goes through the link, its daemon and the controller.
  const br::ResizeAnswer answer = br::request_resize(1);
  EXPECT_EQ(answer.status, 0);
  EXPECT_EQ(answer.text, "granted 1 node");
  EXPECT_EQ(reported(++count),
            pr::Message(pr::AllocationRequest{pr::AllocationDirective::extend, 1, 0, "n0.1"}));

  // A failure: every rank keeps the lost ranks (the runtime's callback runs as they come);
  // the job's first rank reports its recovery under the failure's id.
  std::vector<std::uint64_t> told;
  link->on_ranks_lost([&told](const br::RanksLostEvent& e) { told.push_back(e.failure_id); });
  controller().notify(peer(), pr::RanksLost{35, {2}, {"n2"}, "a rank on n2 died"});
  controller().notify(peer(), pr::RanksLost{36, {1}, {"n1"}, "the daemon of n1 went away"});
  ASSERT_TRUE(poll_until([&] { return link->failures().size() == 2; }));
  EXPECT_EQ(told, (std::vector<std::uint64_t>{35, 36}));
  EXPECT_EQ(link->lost_ranks(), (std::vector<std::uint32_t>{1, 2}));
  EXPECT_EQ(link->failures()[1].nodes, (std::vector<std::string>{"n1"}));
  EXPECT_EQ(link->failures()[1].reason, "the daemon of n1 went away");
  link->report_recovered(36, 1, "rolled back to iteration 3");
  EXPECT_EQ(reported(++count), pr::Message(pr::ResizeAck{{36, pr::ResizeOutcome::recovered, 1, {},
                                                           "rolled back to iteration 3"}}));

  link.reset();
  ASSERT_EQ(::kill(daemon.pid(), SIGTERM), 0);
  const auto status = daemon.wait_exit(20s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
}

}  // namespace
