// ControllerService in one process: its real transport server on an ipc socket of a private
// socket directory (or on tcp with the job's CURVE key), real transport::Clients as the daemons and the operator, the fake
// resource manager and clock, and a launcher that only records. The test thread runs the
// service's loop (step) while it waits for an answer, with a deadline; no sleeps.
// Any warning or error the service or a client logs fails the test unless the test allows it.

#include "bellows/controller/controller_service.hpp"

#include "fake_clock.hpp"
#include "fake_resource_manager.hpp"
#include "log_check.hpp"

#include <bellows/controller/job_record.hpp>
#include <bellows/protocol/job_directory.hpp>
#include <bellows/transport/controller_contact.hpp>
#include <bellows/transport/socket_directory.hpp>

#include <sys/stat.h>

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace bellows::controller {
namespace {

using namespace std::chrono_literals;
namespace protocol = bellows::protocol;
namespace transport = bellows::transport;
using Lines = std::vector<std::string>;

class RecordingLauncher final : public NodeLauncher {
 public:
  RmStatus launch(const std::string& node, const std::string& job) override {
    calls.push_back("launch " + node + " " + job);
    return {};
  }
  RmStatus stop(const std::string& node) override {
    calls.push_back("stop " + node);
    return {};
  }
  Lines calls;
};

/// A daemon or an operator command: a client whose incoming notifications are kept, the job
/// views apart from the rest.
class Peer {
 public:
  Peer(transport::ClientOptions o, std::function<void(transport::LogLevel, const std::string&)> log) {
    o.log = std::move(log);
    transport::Handlers h;
    h.on_notification = [this](const transport::Incoming& in) {
      std::lock_guard lock(mutex_);
      if (const auto* view = std::get_if<protocol::JobView>(&in.envelope.message))
        views_.push_back(*view);
      else
        received_.push_back(in.envelope.message);
    };
    // Requests (Stop at the job's end) are kept with the notifications and answered ok, as a
    // daemon does.
    h.on_request = [this](const transport::Incoming& in, transport::Responder responder) {
      {
        std::lock_guard lock(mutex_);
        received_.push_back(in.envelope.message);
      }
      responder.reply(protocol::Ack{protocol::AckCode::ok, ""});
    };
    client = std::make_unique<transport::Client>(std::move(o), std::move(h));
  }
  std::vector<protocol::Message> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }
  std::vector<protocol::JobView> views() {
    std::lock_guard lock(mutex_);
    return views_;
  }
  std::unique_ptr<transport::Client> client;

 private:
  std::mutex mutex_;
  std::vector<protocol::Message> received_;
  std::vector<protocol::JobView> views_;
};

/// Job 42 on node0 and node1 of an 8-node fake pool; operators may resize it within 1-3 nodes.
class ControllerServiceTest : public bellows::testing::LoggedTest {
 protected:
  ControllerServiceTest() : ControllerServiceTest("") {}
  /// listen: "" for the ipc socket, else a tcp endpoint to bind ("tcp://127.0.0.1:*").
  /// take_over: the job's controller died (its files are in the job directory, resize 3 left
  /// in granted) and this service takes the job over, giving its daemons 2 s to come back.
  /// lost_first_node: the job's first node, holding rank 0, was lost before the takeover and
  /// is no node of the job any more (a Slurm job's batch host).
  explicit ControllerServiceTest(const std::string& listen, bool take_over = false,
                                 const std::string& lost_first_node = "") {
    char pattern[] = "/tmp/bellows-service-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    job_dir_ = dir_ / "job";
    // `bellows run` makes the job directory before the service (which opens its logs there).
    std::filesystem::create_directory(job_dir_);
    std::filesystem::permissions(job_dir_, std::filesystem::perms::owner_all);
    sockets_ = std::make_unique<transport::SocketDirectory>("42", job_dir_, dir_ / "sockets");
    (void)rm_.pool().allocate("42", 2);
    ControllerOptions o;
    o.job = "42";
    o.job_dir = job_dir_;
    o.endpoint = listen.empty() ? sockets_->ipc_endpoint("controller.sock") : listen;
    o.nodes = {"node0", "node1"};
    o.min_nodes = 1;
    o.max_nodes = 3;
    if (take_over) {
      leave_a_dead_controllers_files(o.endpoint);
      o.endpoint = "tcp://127.0.0.1:*";  // not used: the job directory says where to listen
      // The job map of a job whose ranks 0 and 2 remain (1 left), as its record kept it.
      o.attach = AttachOptions{2, 2s, "the test", {{"node0", 0}, {"node1", 2}}, {"node0", "node2", "node1"}, 4100, "", "", {}};
      if (!lost_first_node.empty()) {
        o.attach->lost_first_node = lost_first_node;
        o.attach->lost_first_node_ranks = {0};
      }
    }
    service_ = std::make_unique<ControllerService>(o, rm_, launcher_, clock_);
  }

  /// What a controller of job 42 killed while resize 3 was granted leaves behind.
  void leave_a_dead_controllers_files(const std::string& endpoint) {
    const protocol::JobDirectory layout{job_dir_};
    transport::publish_controller_contact(job_dir_, {endpoint, std::nullopt});
    EventRecord granted;
    granted.time = "2026-01-01T00:00:00.000Z";
    granted.job = "42";
    granted.resize = 3;
    granted.kind = ResizeKind::expand;
    granted.count = 1;
    granted.event = ResizeEvent::rm_granted;
    granted.from = ResizeState::requested;
    granted.to = ResizeState::granted;
    granted.requester = Requester::operator_;
    granted.reason = "operator asked for +1";
    granted.nodes = {"node2"};
    std::ofstream(layout.event_log()) << to_json_line(granted) << "\n";
  }

  ~ControllerServiceTest() override {
    // The job ends with its daemons still connected: Stop reaches each of them.
    service_->shutdown();
    peers_.clear();
    service_.reset();
    sockets_.reset();
    std::filesystem::remove_all(dir_);
  }

  /// A new client of the service, with what the job directory says (endpoint and key).
  Peer& connect() { return connect(transport::read_controller_contact(job_dir_).client_options()); }
  Peer& connect(transport::ClientOptions options) {
    peers_.push_back(std::make_unique<Peer>(std::move(options), log_sink<transport::LogLevel>()));
    return *peers_.back();
  }

  /// Runs the service's loop until `done` holds; false after 5 s.
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      service_->step(5ms);
    }
    return true;
  }

  /// Sends a request from `peer` and runs the loop until its answer arrives.
  protocol::Message ask(Peer& peer, protocol::Message message) {
    auto answer = std::make_shared<std::promise<transport::RequestResult>>();
    auto future = answer->get_future();
    peer.client->request_async(std::move(message), 5s,
                               [answer](transport::RequestResult r) { answer->set_value(std::move(r)); });
    if (!run_until([&] { return future.wait_for(0ms) == std::future_status::ready; })) {
      ADD_FAILURE() << "no answer within 5 s";
      return protocol::Ack{protocol::AckCode::failed, "no answer"};
    }
    const transport::RequestResult r = future.get();
    EXPECT_TRUE(r.ok()) << r.text;
    return r.reply;
  }

  /// A daemon of `node` that registered.
  Peer& daemon(const std::string& node) {
    Peer& peer = connect();
    EXPECT_EQ(ask(peer, protocol::Hello{node, ::getpid(), protocol::kProtocolVersion}),
              protocol::Message(protocol::Ack{protocol::AckCode::ok, "welcome " + node}));
    return peer;
  }

  /// Runs the loop until `peer` received `n` notifications; they all.
  std::vector<protocol::Message> wait_received(Peer& peer, std::size_t n) {
    EXPECT_TRUE(run_until([&] { return peer.received().size() >= n; }))
        << "received " << peer.received().size() << " of " << n;
    return peer.received();
  }

  nlohmann::json status(Peer& peer) {
    const protocol::Message reply = ask(peer, protocol::StatusRequest{});
    const auto* s = std::get_if<protocol::StatusReply>(&reply);
    if (s == nullptr) {
      ADD_FAILURE() << "no StatusReply";
      return {};
    }
    return nlohmann::json::parse(s->json);
  }

  /// The last line of events.jsonl: its event and detail.
  std::pair<std::string, std::string> last_event() {
    const auto records = read_event_log(service_->event_log_path());
    if (records.empty()) return {};
    return {std::string(to_string(records.back().event)), records.back().detail};
  }

  Lines file_lines(const std::filesystem::path& path) {
    std::ifstream in(path);
    Lines out;
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }

  std::filesystem::path dir_;
  std::filesystem::path job_dir_;
  testing::FakeClock clock_;
  testing::FakeResourceManager rm_{clock_, 8};
  RecordingLauncher launcher_;
  std::unique_ptr<transport::SocketDirectory> sockets_;
  std::unique_ptr<ControllerService> service_;
  std::vector<std::unique_ptr<Peer>> peers_;
};

TEST_F(ControllerServiceTest, WritesItsEndpointForTheBellowsCommands) {
  EXPECT_EQ(file_lines(protocol::JobDirectory{job_dir_}.controller_endpoint_file()),
            Lines{service_->endpoint()});
  EXPECT_EQ(service_->endpoint(), "ipc://" + (sockets_->path() / "controller.sock").string());
}

TEST_F(ControllerServiceTest, ADaemonsHelloRegistersItsNode) {
  service_->start_daemons();
  EXPECT_EQ(launcher_.calls, (Lines{"launch node0 42", "launch node1 42"}));
  EXPECT_FALSE(service_->daemons_registered());
  daemon("node0");
  EXPECT_FALSE(service_->daemons_registered());
  daemon("node1");
  EXPECT_TRUE(service_->daemons_registered());

  Peer& stranger = connect();
  EXPECT_EQ(ask(stranger, protocol::Hello{"node7", ::getpid(), protocol::kProtocolVersion}),
            protocol::Message(protocol::Ack{protocol::AckCode::refused, "node7 is not a node of job 42"}));
  EXPECT_EQ(ask(stranger, protocol::Abort{1, "not the controller's to receive"}),
            protocol::Message(protocol::Ack{protocol::AckCode::unsupported,
                                            "the controller does not handle abort"}));
}

TEST_F(ControllerServiceTest, OperatorResizesOutsideTheNodeRangeAreRefusedWithTheReason) {
  Peer& op = connect();
  EXPECT_EQ(ask(op, protocol::OperatorResize{2, ""}),
            protocol::Message(protocol::Ack{protocol::AckCode::refused,
                                            "job 42 may hold 1 to 3 nodes: +2 from 2 would make 4"}));
  EXPECT_EQ(ask(op, protocol::OperatorResize{-2, "give everything back"}),
            protocol::Message(protocol::Ack{protocol::AckCode::refused,
                                            "job 42 may hold 1 to 3 nodes: -2 from 2 would make 0"}));
  EXPECT_EQ(status(op)["active_resize"], nullptr);
  EXPECT_EQ(file_lines(service_->event_log_path()), Lines{});
}

TEST_F(ControllerServiceTest, AnAcceptedOperatorExpansionRunsToItsCommit) {
  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  Peer& op = connect();
  const protocol::Message accepted = ask(op, protocol::OperatorResize{1, ""});
  EXPECT_EQ(accepted, protocol::Message(protocol::Ack{
                          protocol::AckCode::ok, "asked the fake resource manager for 1 node"}));
  // A second order while the first runs: refused with the resize controller's text.
  const protocol::Message second = ask(op, protocol::OperatorResize{-1, "too many"});
  ASSERT_TRUE(std::holds_alternative<protocol::Ack>(second));
  EXPECT_EQ(second, protocol::Message(protocol::Ack{
                        protocol::AckCode::refused,
                        "resize 2 refused: resize 1 (expand by 1, asked by operator) is in flight, "
                        "in state requested"}));

  // The fake resource manager grants node2 after 0.7 s; its daemon is started.
  clock_.advance(700ms);
  ASSERT_TRUE(run_until([&] { return launcher_.calls.size() == 1; }));
  EXPECT_EQ(launcher_.calls, Lines{"launch node2 42"});
  Peer& node2 = daemon("node2");
  // Up: the job's first node is told, and only it.
  protocol::ResizeDecided decided;
  decided.resize_id = 1;
  decided.kind = protocol::ResizeKind::expand;
  decided.count = 1;
  decided.new_nodes = {"node2"};
  EXPECT_EQ(wait_received(node0, 1), std::vector<protocol::Message>{decided});
  node0.client->notify(protocol::ResizeAck{{1, protocol::ResizeOutcome::committed, 3, {2}, ""}});
  ASSERT_TRUE(run_until([&] { return service_->resizes().active() == std::nullopt; }));
  // The job's first rank knows (it reported the commit); nothing goes back to any daemon.
  EXPECT_EQ(node0.received().size(), 1u);
  EXPECT_TRUE(node1.received().empty());
  EXPECT_TRUE(node2.received().empty());

  const nlohmann::json s = status(op);
  EXPECT_EQ(s["nodes"], (Lines{"node0", "node1", "node2"}));
  EXPECT_EQ(s["ranks"], 3);
  EXPECT_EQ(s["active_resize"], nullptr);
  ASSERT_EQ(s["finished_resizes"].size(), 1u);
  EXPECT_EQ(s["finished_resizes"][0]["state"], "committed");
  EXPECT_EQ(s["finished_resizes"][0]["requester"], "operator");
  EXPECT_EQ(s["finished_resizes"][0]["reason"], "operator asked for +1");
  EXPECT_EQ(s["finished_resizes"][0]["nodes"], Lines{"node2"});
}

TEST_F(ControllerServiceTest, StatusAnswersTheJobItsNodesAndRange) {
  Peer& op = connect();
  const nlohmann::json s = status(op);
  EXPECT_EQ(s["job"], "42");
  EXPECT_EQ(s["backend"], "local");
  EXPECT_EQ(s["nodes"], (Lines{"node0", "node1"}));
  EXPECT_EQ(s["node_range"], (std::vector<unsigned>{1, 3}));
  EXPECT_EQ(s["ranks"], 0);
  EXPECT_EQ(s["iteration"], 0);
  EXPECT_EQ(s["active_resize"], nullptr);
  EXPECT_EQ(s["finished_resizes"], nlohmann::json::array());
  EXPECT_EQ(s["unreleased_nodes"], nlohmann::json::array());
  EXPECT_EQ(s["event_log"], service_->event_log_path().string());
  EXPECT_EQ(s["policy_paused"], nullptr);
}

// Every daemon holds the job as the controller sees it (protocol::JobView), for the PMIx
// queries it answers: sent when it registers and again whenever the view changes.
TEST_F(ControllerServiceTest, EveryDaemonIsToldTheJobAndEachChangeOfIt) {
  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  ASSERT_TRUE(run_until([&] { return !node0.views().empty() && !node1.views().empty(); }));
  protocol::JobView expected{"42", {"node0", "node1"}, {protocol::kNoRank, protocol::kNoRank},
                             {0, 0}, 0, 1, 3, "", 0, protocol::ResizeKind::expand, "", 0, {}};
  EXPECT_EQ(node0.views(), std::vector<protocol::JobView>{expected});
  EXPECT_EQ(node1.views(), std::vector<protocol::JobView>{expected});

  // node1's rank reports: every daemon learns its rank and pid, and status shows them.
  node1.client->notify(protocol::NodeMetrics{"node1", {}, 1, 4242});
  ASSERT_TRUE(run_until([&] { return node0.views().size() == 2; }));
  expected.node_ranks = {protocol::kNoRank, 1};
  expected.node_pids = {0, 4242};
  EXPECT_EQ(node0.views().back(), expected);
  Peer& op = connect();
  const nlohmann::json processes = status(op)["processes"];
  EXPECT_EQ(processes, nlohmann::json::parse(R"([{"node":"node0","rank":null,"pid":null,"message_log":null},
                                                {"node":"node1","rank":1,"pid":4242,"message_log":null}])"));

  // A resize in flight is in the view, with its state's name.
  ASSERT_TRUE(std::holds_alternative<protocol::Ack>(ask(op, protocol::OperatorResize{1, ""})));
  ASSERT_TRUE(run_until([&] { return node1.views().size() == 3; }));
  EXPECT_EQ(node1.views().back().resize_id, 1u);
  EXPECT_EQ(node1.views().back().resize_kind, protocol::ResizeKind::expand);
  EXPECT_EQ(node1.views().back().resize_state, "requested");
  EXPECT_EQ(node1.views().back().resize_count, 1u);
  // Nothing changed since: nothing more is sent.
  for (int i = 0; i < 20; ++i) service_->step(1ms);
  EXPECT_EQ(node0.views().size(), 3u);
}

TEST_F(ControllerServiceTest, NodeMetricsOfARegisteredDaemonLandInMetricsJsonl) {
  const auto metrics_log = protocol::JobDirectory{job_dir_}.metrics_log();
  // Not registered: what it says does not count. Its status request, behind the metrics on
  // the same connection, is answered after them.
  Peer& stranger = connect();
  stranger.client->notify(protocol::NodeMetrics{"node1", 9, 1.5, 3, 0.5, 0, 0, 0.0});
  (void)status(stranger);
  EXPECT_EQ(file_lines(metrics_log), Lines{});

  Peer& node0 = daemon("node0");
  node0.client->notify(protocol::NodeMetrics{"node0", 4, 0.25, 17, 0.5, 3, 1, 12.5});
  const nlohmann::json s = status(node0);
  EXPECT_EQ(s["iteration"], 4);
  EXPECT_EQ(s["iteration_seconds"], 0.25);
  EXPECT_EQ(s["gflops"], 12.5);
  EXPECT_EQ(file_lines(metrics_log),
            Lines{R"({"busy_fraction":0.5,"iteration":4,"iteration_seconds":0.25,"job_gflops":12.5,)"
                  R"("message_log_bytes_held":0,"message_log_entries_held":0,"message_log_on":0,)"
                  R"("node":"node0","nodes":2,"ranks":0,"ready_tasks":17,)"
                  R"("time":"2024-05-01T12:00:00.000Z"})"});
  // A rank that does not log messages writes nothing to the event log.
  EXPECT_EQ(file_lines(service_->event_log_path()), Lines{});
}

// Team-based message logging (docs/teams.md): each report of a rank that logs messages
// between teams is a message_log line of the event log, and bellows status shows the last.
TEST_F(ControllerServiceTest, TheMessageLogOfEachRankAfterEachIterationIsInTheEventLog) {
  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  const auto report = [](std::uint64_t iteration, std::uint64_t bytes, std::uint64_t entries) {
    protocol::Metrics m;
    m.iteration = iteration;
    m.message_log_on = 1;
    m.message_log_bytes_held = bytes;
    m.message_log_entries_held = entries;
    return m;
  };
  node0.client->notify(protocol::NodeMetrics{"node0", report(1, 0, 0), 0, 4100});
  node1.client->notify(protocol::NodeMetrics{"node1", report(1, 589824, 12), 1, 4101});
  node1.client->notify(protocol::NodeMetrics{"node1", report(2, 1179648, 24), 1, 4101});
  Peer& op = connect();
  ASSERT_TRUE(run_until([&] { return read_event_log(service_->event_log_path()).size() == 3; }));
  const auto records = read_event_log(service_->event_log_path());
  std::vector<std::string> details;
  for (const EventRecord& r : records) {
    EXPECT_EQ(r.event, ResizeEvent::message_log);
    EXPECT_EQ(r.resize, 0u);
    EXPECT_EQ(r.kind, std::nullopt);
    EXPECT_EQ(r.from, ResizeState::none);
    EXPECT_EQ(r.to, ResizeState::none);
    EXPECT_FALSE(r.refused);
    details.push_back(r.nodes.at(0) + ": " + r.detail);
  }
  // Each node's lines in the order it sent them; the two nodes' connections interleave as
  // they may (a stable sort by node keeps each node's order).
  std::ranges::stable_sort(details, {}, [](const std::string& d) { return d.substr(0, d.find(':')); });
  EXPECT_EQ(details, (std::vector<std::string>{"node0: rank 0, iteration 1: 0 bytes in 0 entries held",
                                               "node1: rank 1, iteration 1: 589824 bytes in 12 entries held",
                                               "node1: rank 1, iteration 2: 1179648 bytes in 24 entries held"}));
  EXPECT_EQ(status(op)["processes"], nlohmann::json::parse(R"([
      {"node":"node0","rank":0,"pid":4100,"message_log":{"iteration":1,"bytes_held":0,"entries_held":0}},
      {"node":"node1","rank":1,"pid":4101,"message_log":{"iteration":2,"bytes_held":1179648,"entries_held":24}}])"));
}

TEST_F(ControllerServiceTest, ShutdownEndsTheResizeInFlightAndStopsTheDaemons) {
  Peer& node0 = daemon("node0");
  Peer& op = connect();
  EXPECT_EQ(ask(op, protocol::OperatorResize{1, "more hands"}),
            protocol::Message(protocol::Ack{protocol::AckCode::ok,
                                            "asked the fake resource manager for 1 node"}));
  service_->shutdown();
  EXPECT_EQ(last_event().first, "job_ended");
  EXPECT_EQ(last_event().second,
            "the job ended before the resize finished; its nodes go back with the job");
  EXPECT_EQ(service_->resizes().finished().back().state, ResizeState::aborted);
  // The daemons are told; the server is gone after that.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (node0.received().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(node0.received(),
            (std::vector<protocol::Message>{protocol::Stop{"the job ended", 2000}}));
  service_->shutdown();  // idempotent
}

// PMIx_Allocation_request in two phases: taken at once, then AllocationComplete to the daemon
// the request came through once its resize committed.
TEST_F(ControllerServiceTest, AnAllocationRequestIsToldWhenItsResizeCommits) {
  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  EXPECT_EQ(ask(node1, protocol::AllocationRequest{protocol::AllocationDirective::extend, 1, 1, "grow-1"}),
            protocol::Message(protocol::Ack{protocol::AckCode::ok, "asked the fake resource manager for 1 node"}));
  clock_.advance(700ms);
  ASSERT_TRUE(run_until([&] { return launcher_.calls.size() == 1; }));
  daemon("node2");
  ASSERT_EQ(wait_received(node0, 1).size(), 1u);
  EXPECT_TRUE(node1.received().empty());  // nothing before the commit
  node0.client->notify(protocol::ResizeAck{{1, protocol::ResizeOutcome::committed, 3, {2}, ""}});
  EXPECT_EQ(wait_received(node1, 1),
            (std::vector<protocol::Message>{protocol::AllocationComplete{
                "grow-1", 1, protocol::AllocationOutcome::committed,
                "resize 1 (expand by 1) committed: job 42 holds 3 node(s) (node0,node1,node2)"}}));
  EXPECT_EQ(node0.received().size(), 1u);  // the decision only
}

// A request cancelled while its resize waits for the resource manager: aborted at once, the
// requester's daemon told "cancelled", the event log names the request, nothing kept.
TEST_F(ControllerServiceTest, ACancelledAllocationRequestLeavesNothing) {
  daemon("node0");
  Peer& node1 = daemon("node1");
  ASSERT_EQ(ask(node1, protocol::AllocationRequest{protocol::AllocationDirective::extend, 1, 1, "grow-2"}),
            protocol::Message(protocol::Ack{protocol::AckCode::ok, "asked the fake resource manager for 1 node"}));
  EXPECT_EQ(ask(node1, protocol::AllocationRequest{protocol::AllocationDirective::cancel, 0, 1, "grow-2"}),
            protocol::Message(protocol::Ack{protocol::AckCode::ok,
                                            "allocation request grow-2 (resize 1) is being cancelled"}));
  EXPECT_EQ(wait_received(node1, 1),
            (std::vector<protocol::Message>{protocol::AllocationComplete{
                "grow-2", 1, protocol::AllocationOutcome::cancelled,
                "resize 1 (expand by 1) cancelled by its requester: job 42 keeps 2 node(s)"}}));
  const auto records = read_event_log(service_->event_log_path());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].event, ResizeEvent::cancel_requested);
  EXPECT_EQ(records[1].to, ResizeState::aborted);
  EXPECT_TRUE(records[1].detail.starts_with("allocation request grow-2 cancelled by its requester (rank 1 on node1)"))
      << records[1].detail;
  // The grant that would have come is withdrawn: no daemon is started, no node kept.
  clock_.advance(700ms);
  for (int i = 0; i < 20; ++i) service_->step(1ms);
  EXPECT_TRUE(launcher_.calls.empty());
  EXPECT_EQ(service_->resizes().nodes(), (Lines{"node0", "node1"}));
  EXPECT_TRUE(service_->resizes().unreleased_nodes().empty());
  // Once ended, or from another node, there is no such request to cancel.
  EXPECT_EQ(ask(node1, protocol::AllocationRequest{protocol::AllocationDirective::cancel, 0, 1, "grow-2"}),
            protocol::Message(protocol::Ack{protocol::AckCode::refused,
                                            "no allocation request grow-2 of node1 is in flight"}));
}

// PMIx_Job_control: the signal goes to the daemon of the target rank's node, and the event log
// records every call with who asked, refused ones too; terminating the job asks the caller to
// end it.
TEST_F(ControllerServiceTest, JobControlSignalsThroughTheRanksDaemonAndIsLoggedWithWhoAsked) {
  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  node1.client->notify(protocol::NodeMetrics{"node1", protocol::Metrics{}, 1, 4242});
  ASSERT_TRUE(run_until([&] { return service_->status()["processes"][1]["pid"] == 4242; }));
  EXPECT_EQ(ask(node0, protocol::JobControlRequest{protocol::JobControlAction::signal, 19, 1, "bellowsd.tool.1:0"}),
            protocol::Message(protocol::Ack{protocol::AckCode::ok, "signal 19 sent to rank 1 on node1 (pid 4242)"}));
  EXPECT_EQ(wait_received(node1, 1),
            (std::vector<protocol::Message>{protocol::SignalRank{
                1, 4242, 19, "PMIx_Job_control from bellowsd.tool.1:0 on node0: signal 19 to rank 1"}}));
  EXPECT_EQ(ask(node0, protocol::JobControlRequest{protocol::JobControlAction::terminate, 0, 5, "bellowsd.tool.1:0"}),
            protocol::Message(protocol::Ack{protocol::AckCode::refused,
                                            "job 42 has no rank 5 to signal (ranks as last reported: 1)"}));
  EXPECT_FALSE(service_->termination_requested());
  EXPECT_EQ(ask(node0, protocol::JobControlRequest{protocol::JobControlAction::terminate, 0, protocol::kAllRanks,
                                                   "local-7:0"}),
            protocol::Message(protocol::Ack{protocol::AckCode::ok,
                                            "job 42 ends: its ranks are stopped as on bellows run's SIGTERM"}));
  EXPECT_EQ(service_->termination_requested(),
            std::optional<std::string>("job 42 terminated by PMIx_Job_control from local-7:0"));

  const auto records = read_event_log(service_->event_log_path());
  ASSERT_EQ(records.size(), 3u);
  for (const auto& r : records) {
    EXPECT_EQ(r.event, ResizeEvent::job_control);
    EXPECT_EQ(r.resize, 0u);
  }
  EXPECT_EQ(records[0].reason, "PMIx_Job_control from bellowsd.tool.1:0 on node0: signal 19 to rank 1");
  EXPECT_EQ(records[0].nodes, Lines{"node1"});
  EXPECT_FALSE(records[0].refused);
  EXPECT_EQ(records[1].reason, "PMIx_Job_control from bellowsd.tool.1:0 on node0: terminate rank 5");
  EXPECT_TRUE(records[1].refused);
  EXPECT_EQ(records[2].reason, "PMIx_Job_control from local-7:0 on node0: terminate every rank");
  EXPECT_EQ(records[2].nodes, (Lines{"node0", "node1"}));
}

/// A node's part in a fence over every rank of job 42 (one rank per node), with its blob.
protocol::FenceContribution whole_job_fence(std::uint64_t id, std::uint32_t rank) {
  return protocol::FenceContribution{id, {"42"}, {protocol::kWildcardRank}, {2}, {"42"}, {rank}, 1,
                                     "blob" + std::to_string(rank)};
}

template <class M>
std::vector<M> only(const std::vector<protocol::Message>& messages) {
  std::vector<M> kept;
  for (const auto& m : messages) {
    if (const auto* typed = std::get_if<M>(&m)) kept.push_back(*typed);
  }
  return kept;
}

TEST_F(ControllerServiceTest, AFenceIsReleasedToEveryNodeOnceEachContributed) {
  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  node0.client->notify(whole_job_fence(3, 0));
  for (int i = 0; i < 20; ++i) service_->step(5ms);
  EXPECT_TRUE(only<protocol::FenceRelease>(node0.received()).empty()) << "released before node1 contributed";
  node1.client->notify(whole_job_fence(8, 1));
  const std::vector<std::string> blobs{"blob0", "blob1"};
  EXPECT_EQ(wait_received(node0, 1),
            (std::vector<protocol::Message>{protocol::FenceRelease{3, protocol::CollectiveStatus::ok, "", blobs}}));
  EXPECT_EQ(wait_received(node1, 1),
            (std::vector<protocol::Message>{protocol::FenceRelease{8, protocol::CollectiveStatus::ok, "", blobs}}));
}

TEST_F(ControllerServiceTest, ARankLostUnderAFenceEndsItForTheSurvivors) {
  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  node1.client->notify(protocol::NodeMetrics{"node1", protocol::Metrics{}, 1, 4242});
  ASSERT_TRUE(run_until([&] { return service_->status()["processes"][1]["pid"] == 4242; }));
  node0.client->notify(whole_job_fence(3, 0));
  for (int i = 0; i < 10; ++i) service_->step(5ms);
  node1.client->notify(protocol::RankExited{1, 4242, 0, 9});
  ASSERT_TRUE(run_until([&] { return !only<protocol::FenceRelease>(node0.received()).empty(); }));
  const auto releases = only<protocol::FenceRelease>(node0.received());
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0], (protocol::FenceRelease{3, protocol::CollectiveStatus::participant_lost,
                                                 "fence over 42:*: participant 42:1 is lost", {}}));
  EXPECT_EQ(only<protocol::RanksLost>(node0.received()).size(), 1u);
}

TEST_F(ControllerServiceTest, AModexRequestIsAnsweredByTheNodeHostingTheRank) {
  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  node0.client->notify(protocol::ModexRequest{5, "42", 1});
  const auto asked = only<protocol::ModexRequest>(wait_received(node1, 1));
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].nspace, "42");
  EXPECT_EQ(asked[0].rank, 1u);
  node1.client->notify(protocol::ModexReply{asked[0].request_id, protocol::CollectiveStatus::ok, "", "blob1"});
  EXPECT_EQ(wait_received(node0, 1),
            (std::vector<protocol::Message>{protocol::ModexReply{5, protocol::CollectiveStatus::ok, "", "blob1"}}));
}

/// The same service listening on tcp, as on a cluster whose nodes are other hosts.
class ControllerServiceOverTcpTest : public ControllerServiceTest {
 protected:
  ControllerServiceOverTcpTest() : ControllerServiceTest("tcp://127.0.0.1:*") {}
};

TEST_F(ControllerServiceOverTcpTest, PublishesItsTcpEndpointAndTheJobsKeyForTheDaemons) {
  const protocol::JobDirectory layout{job_dir_};
  EXPECT_EQ(file_lines(layout.controller_endpoint_file()), Lines{service_->endpoint()});
  EXPECT_TRUE(service_->endpoint().starts_with("tcp://127.0.0.1:")) << service_->endpoint();
  EXPECT_NE(service_->endpoint(), "tcp://127.0.0.1:*") << "the port is resolved";
  struct stat key {};
  ASSERT_EQ(::stat(layout.controller_key_file().c_str(), &key), 0);
  EXPECT_EQ(key.st_mode & 0777, 0600u);
  const auto contact = transport::read_controller_contact(job_dir_);
  EXPECT_EQ(contact.endpoint, service_->endpoint());
  ASSERT_TRUE(contact.curve.has_value());
}

TEST_F(ControllerServiceOverTcpTest, ADaemonHoldingTheJobsKeyRegistersAndIsAnswered) {
  service_->start_daemons();
  daemon("node0");
  daemon("node1");
  EXPECT_TRUE(service_->daemons_registered());
  const auto s = status(connect());
  EXPECT_EQ(s["job"], "42");
  EXPECT_EQ(s["nodes"].size(), 2u);
}

TEST_F(ControllerServiceOverTcpTest, APeerWithAnotherKeyIsRefusedAndNotRegistered) {
  service_->start_daemons();
  auto options = transport::read_controller_contact(job_dir_).client_options();
  const auto server_key = options.curve->public_key;
  options.curve = transport::generate_curve_key_pair();
  options.curve_server_key = server_key;
  Peer& stranger = connect(options);
  auto answer = std::make_shared<std::promise<transport::RequestResult>>();
  auto future = answer->get_future();
  stranger.client->request_async(protocol::Hello{"node0", ::getpid(), protocol::kProtocolVersion}, 500ms,
                                 [answer](transport::RequestResult r) { answer->set_value(std::move(r)); });
  ASSERT_TRUE(run_until([&] { return future.wait_for(0ms) == std::future_status::ready; }));
  EXPECT_FALSE(future.get().ok());
  EXPECT_FALSE(service_->daemons_registered());
  const auto lines = logged();
  const std::string refusal = allow_log(", not the job's key");
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                          [&](const std::string& l) { return l.find(refusal) != std::string::npos; }))
      << "the refusal is logged";
  allow_log("refused this connection");
}

TEST_F(ControllerServiceOverTcpTest, AJobDirectoryWithoutTheKeySaysSo) {
  std::filesystem::remove(protocol::JobDirectory{job_dir_}.controller_key_file());
  try {
    (void)transport::read_controller_contact(job_dir_);
    ADD_FAILURE() << "no error";
  } catch (const transport::TransportError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the controller listens at " + service_->endpoint() + " but its key file " +
                  (job_dir_ / "controller.key").string() +
                  " is missing: this host does not see the job directory the controller wrote");
  }
}

/// A controller that takes job 42 over after its controller died.
class ControllerServiceTakeoverTest : public ControllerServiceTest {
 protected:
  ControllerServiceTakeoverTest() : ControllerServiceTest("", true) {}
};

TEST_F(ControllerServiceTakeoverTest, ClosesWhatWasLeftOpenContinuesItsIdsAndKnowsEveryNodeAgain) {
  const auto records = read_event_log(service_->event_log_path());
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1].event, ResizeEvent::controller_lost);
  EXPECT_EQ(records[1].resize, 3u);
  EXPECT_EQ(records[1].to, ResizeState::aborted);
  EXPECT_EQ(records[2].event, ResizeEvent::attached);
  EXPECT_EQ(records[2].reason, "the test");
  EXPECT_EQ(records[2].detail, "took job 42 over; resizes and failures continue from #4; closed 1 left open by "
                               "the controller that died");
  EXPECT_TRUE(service_->attached());
  EXPECT_TRUE(service_->awaiting_daemons());

  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  EXPECT_TRUE(service_->daemons_registered());
  EXPECT_FALSE(service_->awaiting_daemons());
  EXPECT_FALSE(service_->ranks_known()) << "no rank reported yet";
  node0.client->notify(protocol::NodeMetrics{"node0", {}, 0, 4100});
  node1.client->notify(protocol::NodeMetrics{"node1", {}, 1, 4101});
  ASSERT_TRUE(run_until([&] { return service_->ranks_known(); }));

  Peer& op = connect();
  const auto s = status(op);
  EXPECT_EQ(s["ranks"], 2) << "from the job record until the next report";
  EXPECT_EQ(s["attached"], "the test");
  EXPECT_EQ(s["processes"][1]["pid"], 4101);
  EXPECT_EQ(ask(op, protocol::OperatorResize{1, ""}),
            protocol::Message(protocol::Ack{protocol::AckCode::ok, "asked the fake resource manager for 1 node"}));
  EXPECT_EQ(status(op)["active_resize"]["id"], 4) << "ids continue after the log's";

  // The first node's daemon reports that the job's first rank ended after leaving the job.
  EXPECT_FALSE(service_->first_rank_end().has_value());
  node0.client->notify(protocol::RankExited{0, 4100, 0, 0});
  ASSERT_TRUE(run_until([&] { return service_->first_rank_end().has_value(); }));
  EXPECT_FALSE(service_->first_rank_end()->crashed());

  const auto record = read_job_record(protocol::JobDirectory{job_dir_}.job_record());
  EXPECT_EQ(record.nodes, (Lines{"node0", "node1"}));
  EXPECT_EQ(record.daemon_pids.at("node1"), ::getpid());
  EXPECT_EQ(record.ended_at, "");
  // What the controller that died recorded of the job's PMIx ranks goes on in the record.
  EXPECT_EQ(record.pmix_job_map, (std::map<std::string, std::uint32_t>{{"node0", 0}, {"node1", 2}}));
  EXPECT_EQ(record.pmix_rank_nodes, (Lines{"node0", "node2", "node1"}));
  EXPECT_EQ(record.first_rank_pid, 4100);
}

TEST_F(ControllerServiceTakeoverTest, ASecondControllerOfTheJobIsRefusedNamingTheFirst) {
  ControllerOptions o;
  o.job = "42";
  o.job_dir = job_dir_;
  o.nodes = {"node0", "node1"};
  o.attach = AttachOptions{2, 2s, "a second one", {}, {}, 0, "", "", {}};
  try {
    ControllerService second(o, rm_, launcher_, clock_);
    ADD_FAILURE() << "two controllers of one job";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "the job in " + job_dir_.string() + " has a controller already (process " +
                                         std::to_string(::getpid()) + " holds controller.lock): one controller per job");
  }
  EXPECT_EQ(read_event_log(service_->event_log_path()).size(), 3u) << "the refused one wrote nothing";
}

TEST_F(ControllerServiceTakeoverTest, AResizeAskedBeforeEveryDaemonCameBackIsRefusedNamingThem) {
  // An order to node1, whose daemon is not back, would count as node1's death: it waits.
  daemon("node0");
  Peer& op = connect();
  clock_.advance(500ms);
  EXPECT_EQ(ask(op, protocol::OperatorResize{1, ""}),
            protocol::Message(protocol::Ack{protocol::AckCode::refused,
                                            "job 42 was just taken over and the daemons of node1 have not come "
                                            "back yet: ask again once they have (at the latest in 1.5 s, when "
                                            "those still missing count as lost)"}));
  EXPECT_EQ(status(op)["active_resize"], nullptr) << "nothing started";
  daemon("node1");
  EXPECT_FALSE(service_->awaiting_daemons());
  EXPECT_EQ(ask(op, protocol::OperatorResize{1, ""}),
            protocol::Message(protocol::Ack{protocol::AckCode::ok, "asked the fake resource manager for 1 node"}));
}

TEST_F(ControllerServiceTakeoverTest, ADaemonThatDoesNotComeBackInTimeIsALostNode) {
  daemon("node0");
  clock_.advance(1s);
  service_->step(0ms);
  EXPECT_TRUE(service_->resizes().failures().empty()) << "within the window";
  clock_.advance(1500ms);
  service_->step(0ms);
  const auto failures = service_->resizes().failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].id, 4u);
  EXPECT_EQ(failures[0].nodes, Lines{"node1"});
  EXPECT_EQ(failures[0].reason, "the daemon of node1 did not come back within 2.0 s of the takeover");
  EXPECT_FALSE(service_->awaiting_daemons());
  allow_log("did not come back within 2.0 s of the takeover: node1 counts as lost");
}

/// A controller that takes job 42 over after its first node, node9, which held rank 0, was
/// lost: the job runs on node0 and node1, as its daemons left.
class ControllerServiceFirstNodeLostTest : public ControllerServiceTest {
 protected:
  ControllerServiceFirstNodeLostTest() : ControllerServiceTest("", true, "node9") {}

  /// The RanksLost among what `peer` received.
  static std::vector<protocol::RanksLost> ranks_lost(Peer& peer) {
    std::vector<protocol::RanksLost> found;
    for (const protocol::Message& m : peer.received()) {
      if (const auto* lost = std::get_if<protocol::RanksLost>(&m)) found.push_back(*lost);
    }
    return found;
  }
};

TEST_F(ControllerServiceFirstNodeLostTest, TheSurvivorsAreToldTheLostFirstNodesRankOnceTheyAreBack) {
  Peer& node0 = daemon("node0");
  node0.client->notify(protocol::NodeMetrics{"node0", {}, 1, 4101});
  for (int i = 0; i < 20; ++i) service_->step(5ms);
  EXPECT_TRUE(service_->resizes().failures().empty()) << "node1 is not back yet";
  Peer& node1 = daemon("node1");
  node1.client->notify(protocol::NodeMetrics{"node1", {}, 2, 4102});
  ASSERT_TRUE(run_until([&] { return !ranks_lost(node0).empty() && !ranks_lost(node1).empty(); }));
  const protocol::RanksLost told = ranks_lost(node1).front();
  EXPECT_EQ(told.failure_id, 4u);
  EXPECT_EQ(told.lost_ranks, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(told.lost_nodes, Lines{"node9"});
  EXPECT_EQ(told.cause, protocol::LossCause::node_lost);
  const auto failures = service_->resizes().failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].state, ResizeState::agreed);
  EXPECT_EQ(failures[0].reason, "rank 0 on node9, the job's first node, lost before this controller took the job "
                                "over: no survivor reports it as its own; the job's size counts them out already");
  Peer& op = connect();
  EXPECT_EQ(status(op)["ranks"], 2) << "the takeover counted rank 0 out: not lowered again";
  // Once: later reports change nothing.
  node0.client->notify(protocol::NodeMetrics{"node0", {}, 1, 4101});
  for (int i = 0; i < 20; ++i) service_->step(5ms);
  EXPECT_EQ(service_->resizes().failures().size(), 1u);
  EXPECT_EQ(ranks_lost(node0).size(), 1u);
}

TEST_F(ControllerServiceFirstNodeLostTest, NothingIsToldWhenTheSurvivorsRenumberedAlready) {
  // MPI found the loss: the survivors rebuilt without rank 0 and report 0 and 1.
  Peer& node0 = daemon("node0");
  Peer& node1 = daemon("node1");
  node0.client->notify(protocol::NodeMetrics{"node0", {}, 0, 4101});
  node1.client->notify(protocol::NodeMetrics{"node1", {}, 1, 4102});
  ASSERT_TRUE(run_until([&] { return service_->ranks_known(); }));
  for (int i = 0; i < 20; ++i) service_->step(5ms);
  EXPECT_TRUE(service_->resizes().failures().empty());
  EXPECT_TRUE(ranks_lost(node0).empty());
  EXPECT_TRUE(ranks_lost(node1).empty());
}

}  // namespace
}  // namespace bellows::controller
