// DaemonJobControl without processes: a launcher that records what it is asked, a sender that
// records every message and reaches only the nodes a test says have a daemon. Every message
// sent and every report delivered is checked exactly.

#include "bellows/controller/daemon_job_control.hpp"

#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace bellows::controller {
namespace {

namespace protocol = bellows::protocol;
using Lines = std::vector<std::string>;
using Nodes = std::vector<std::string>;

/// Records launch and stop calls as "launch node2 42", "stop node2"; launches of the nodes in
/// `failing` are refused.
class RecordingLauncher final : public NodeLauncher {
 public:
  RmStatus launch(const std::string& node, const std::string& job) override {
    calls.push_back("launch " + node + " " + job);
    if (failing.contains(node)) return {RmCode::unavailable, "cannot start bellowsd on " + node};
    return {};
  }
  RmStatus stop(const std::string& node) override {
    calls.push_back("stop " + node);
    return {};
  }
  RmStatus stop_gone(const std::string& node) override {
    calls.push_back("stop_gone " + node);
    return {};
  }
  Lines calls;
  std::set<std::string> failing;
};

/// A message as it was sent to a node.
struct Sent {
  std::string node;
  protocol::Message message;
  bool operator==(const Sent&) const = default;
};

std::string describe(const protocol::Message& message) {
  std::ostringstream text;
  text << protocol::to_string(protocol::type_of(message));
  const auto list = [&text](const auto& items) {
    text << '[';
    for (std::size_t i = 0; i < items.size(); ++i) text << (i == 0 ? "" : ",") << items[i];
    text << ']';
  };
  if (const auto* d = std::get_if<protocol::ResizeDecided>(&message)) {
    text << ' ' << d->resize_id << (d->kind == protocol::ResizeKind::expand ? " expand " : " shrink ")
         << d->count << " new ";
    list(d->new_nodes);
    text << " leaving ";
    list(d->leaving_nodes);
  } else if (const auto* l = std::get_if<protocol::RanksLost>(&message)) {
    text << ' ' << l->failure_id << " ranks ";
    list(l->lost_ranks);
    text << " nodes ";
    list(l->lost_nodes);
    text << " '" << l->reason << "'";
  } else if (const auto* a = std::get_if<protocol::Abort>(&message)) {
    text << ' ' << a->resize_id << " '" << a->reason << "'";
  }
  return text.str();
}

void PrintTo(const Sent& sent, std::ostream* os) { *os << sent.node << " <- " << describe(sent.message); }

const char* kind_name(JobReportKind kind) {
  switch (kind) {
    case JobReportKind::daemon_up: return "daemon_up";
    case JobReportKind::rank_died: return "rank_died";
    case JobReportKind::node_lost: return "node_lost";
    case JobReportKind::recovered: return "recovered";
    case JobReportKind::committed: return "committed";
    case JobReportKind::refused: return "refused";
    case JobReportKind::left: return "left";
    case JobReportKind::cancelled: return "cancelled";
  }
  return "?";
}

/// "rank_died resize 2 node node1 ranks 0: the daemon of node1 went away", with " exit E signal
/// S" before the colon when the report carries how a process ended.
std::string line(const JobReport& r) {
  std::string text = std::string(kind_name(r.kind)) + " resize " + std::to_string(r.resize) +
                     " node " + (r.node.empty() ? "-" : r.node) + " ranks " +
                     std::to_string(r.ranks);
  if (r.rank) text += " rank " + std::to_string(*r.rank);
  if (r.exit_code != -1 || r.signal != 0)
    text += " exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.signal);
  if (!r.text.empty()) text += ": " + r.text;
  return text;
}

protocol::ResizeDecided expand_order(std::uint64_t id, Nodes nodes) {
  protocol::ResizeDecided d;
  d.resize_id = id;
  d.kind = protocol::ResizeKind::expand;
  d.count = static_cast<std::uint32_t>(nodes.size());
  d.new_nodes = std::move(nodes);
  return d;
}

protocol::ResizeDecided shrink_order(std::uint64_t id, Nodes nodes) {
  protocol::ResizeDecided d;
  d.resize_id = id;
  d.kind = protocol::ResizeKind::shrink;
  d.count = static_cast<std::uint32_t>(nodes.size());
  d.leaving_nodes = std::move(nodes);
  return d;
}

using Outcome = protocol::ResizeOutcome;

protocol::ResizeReport report(std::uint64_t id, Outcome outcome, std::uint32_t job_size,
                              std::string text = "", std::vector<std::uint32_t> ranks = {}) {
  return {id, outcome, job_size, std::move(ranks), std::move(text)};
}

/// Job 42 whose first rank runs on node0; node0 and node1 hold the job at the start.
class DaemonJobControlTest : public ::testing::Test {
 protected:
  DaemonJobControlTest() {
    control.set_listener([this](const JobReport& r) { delivered.push_back(line(r)); });
  }

  /// The daemons of the nodes register (and can be reached).
  void register_daemons(const Nodes& nodes) {
    for (const auto& node : nodes) {
      reachable.insert(node);
      control.daemon_registered(node);
    }
  }

  /// The reports delivered by one progress() call.
  Lines progress() {
    delivered.clear();
    control.progress();
    return delivered;
  }

  /// The messages sent since the last call.
  std::vector<Sent> sent_now() {
    std::vector<Sent> out;
    out.swap(sent);
    return out;
  }

  /// Expansion 1 to node2 and node3: daemons started and registered, add_ranks sent.
  void expanding() {
    register_daemons({"node0", "node1"});
    control.start_daemons(1, {"node2", "node3"});
    register_daemons({"node2", "node3"});
    ASSERT_EQ(progress(), (Lines{"daemon_up resize 1 node node2 ranks 0",
                                 "daemon_up resize 1 node node3 ranks 0"}));
    control.add_ranks(1, {"node2", "node3"});
    ASSERT_EQ(sent_now(), (std::vector<Sent>{{"node0", expand_order(1, {"node2", "node3"})}}));
  }

  /// Shrink 2 of the 4-node job: node2 and node3 (started by expansion 1) leave.
  void shrinking() {
    expanding();
    control.resize_report("node0", report(1, Outcome::committed, 4));
    ASSERT_EQ(progress(), (Lines{"committed resize 1 node node0 ranks 4"}));
    (void)sent_now();
    control.remove_ranks(2, {"node2", "node3"});
    ASSERT_EQ(sent_now(), (std::vector<Sent>{{"node0", shrink_order(2, {"node2", "node3"})}}));
    launcher.calls.clear();
  }

  RecordingLauncher launcher;
  std::set<std::string> reachable;
  std::vector<Sent> sent;
  Lines delivered;
  DaemonJobControl control{"42", "node0", launcher,
                           [this](const std::string& node, const protocol::Message& message) {
                             if (!reachable.contains(node)) return false;
                             sent.push_back({node, message});
                             return true;
                           }};
};

// ---------------------------------------------------------------- daemons

TEST_F(DaemonJobControlTest, StartedDaemonsAreUpOnceTheyRegisterOnceEach) {
  control.start_daemons(1, {"node2", "node3"});
  EXPECT_EQ(launcher.calls, (Lines{"launch node2 42", "launch node3 42"}));
  EXPECT_EQ(progress(), Lines{});  // launched is not up
  EXPECT_FALSE(control.registered("node3"));

  control.daemon_registered("node3");
  EXPECT_TRUE(control.registered("node3"));
  EXPECT_EQ(progress(), (Lines{"daemon_up resize 1 node node3 ranks 0"}));
  control.daemon_registered("node2");
  control.daemon_registered("node2");  // a reconnection: up already
  EXPECT_EQ(progress(), (Lines{"daemon_up resize 1 node node2 ranks 0"}));
  EXPECT_TRUE(sent.empty());
}

TEST_F(DaemonJobControlTest, ADaemonRegisteredBeforeItsStartIsUpAtOnce) {
  control.daemon_registered("node2");
  control.start_daemons(3, {"node2"});
  EXPECT_EQ(launcher.calls, (Lines{"launch node2 42"}));
  EXPECT_EQ(progress(), (Lines{"daemon_up resize 3 node node2 ranks 0"}));
}

TEST_F(DaemonJobControlTest, ReportsComeOnlyFromProgress) {
  control.start_daemons(1, {"node2"});
  control.daemon_registered("node2");
  EXPECT_TRUE(delivered.empty());
  EXPECT_EQ(progress(), (Lines{"daemon_up resize 1 node node2 ranks 0"}));
  EXPECT_EQ(progress(), Lines{});
}

TEST_F(DaemonJobControlTest, ADaemonThatCannotStartNeverComesUpAndIsNotStopped) {
  launcher.failing = {"node3"};
  control.start_daemons(1, {"node2", "node3"});
  control.daemon_registered("node2");
  control.daemon_registered("node3");  // some other daemon of that name: not this resize's
  EXPECT_EQ(progress(), (Lines{"daemon_up resize 1 node node2 ranks 0"}));
  control.stop_started_daemons();
  EXPECT_EQ(launcher.calls, (Lines{"launch node2 42", "launch node3 42", "stop node2"}));
}

TEST_F(DaemonJobControlTest, InitialDaemonsAreStartedAndStoppedAtTheEnd) {
  launcher.failing = {"node1"};
  control.start_initial_daemons({"node0", "node1"});
  EXPECT_EQ(control.job_size(), 2u);  // one rank per node
  register_daemons({"node0"});
  EXPECT_EQ(progress(), Lines{});  // the job's own daemons are not a resize's
  control.stop_started_daemons();
  EXPECT_FALSE(control.registered("node0"));
  EXPECT_EQ(launcher.calls, (Lines{"launch node0 42", "launch node1 42", "stop node0"}));
  control.stop_started_daemons();  // nothing left to stop
  EXPECT_EQ(launcher.calls.size(), 3u);
}

// ---------------------------------------------------------------- expansion

TEST_F(DaemonJobControlTest, AddRanksTellsTheFirstNodeOnly) {
  expanding();  // checks the one ResizeDecided to node0
  EXPECT_EQ(progress(), Lines{});
}

TEST_F(DaemonJobControlTest, AddRanksWithoutADaemonOnTheFirstNodeIsADeath) {
  register_daemons({"node1", "node2"});
  control.add_ranks(1, {"node2"});
  EXPECT_TRUE(sent.empty());
  EXPECT_EQ(progress(), (Lines{"rank_died resize 1 node node0 ranks 0: no daemon is registered "
                               "on node0, the job's first node"}));
}

// The controller answers, and takes an operator's resize, while the job's first daemons are
// still starting: a new node's daemon may register before the first node's, and the expand's
// order waits for the first node's daemon instead of counting as a death there.
TEST_F(DaemonJobControlTest, AnOrderDecidedBeforeTheFirstNodesDaemonRegisteredWaitsForIt) {
  control.start_initial_daemons({"node0"});
  control.start_daemons(1, {"node1"});
  register_daemons({"node1"});
  ASSERT_EQ(progress(), (Lines{"daemon_up resize 1 node node1 ranks 0"}));
  control.add_ranks(1, {"node1"});
  control.cancel(1, "the resize passed its limit of 1 s");
  EXPECT_TRUE(sent_now().empty());
  EXPECT_EQ(progress(), Lines{});
  register_daemons({"node0"});
  EXPECT_EQ(sent_now(), (std::vector<Sent>{{"node0", expand_order(1, {"node1"})},
                                           {"node0", protocol::Abort{1, "the resize passed its limit of 1 s"}}}));
  EXPECT_EQ(progress(), Lines{});
  // Registered once, the first node's daemon that is gone is a death there, as at any time.
  reachable.erase("node0");
  control.remove_ranks(2, {"node1"});
  EXPECT_TRUE(sent_now().empty());
  EXPECT_EQ(progress(), (Lines{"rank_died resize 2 node node0 ranks 0: no daemon is registered "
                               "on node0, the job's first node"}));
}

TEST_F(DaemonJobControlTest, AnOrderForAFirstNodeWhoseDaemonCouldNotStartIsADeathAtOnce) {
  launcher.failing = {"node0"};
  control.start_initial_daemons({"node0"});
  register_daemons({"node1"});
  control.add_ranks(1, {"node1"});
  EXPECT_EQ(progress(), (Lines{"rank_died resize 1 node node0 ranks 0: no daemon is registered "
                               "on node0, the job's first node"}));
  control.stop_started_daemons();
  EXPECT_EQ(launcher.calls, (Lines{"launch node0 42"}));
}

TEST_F(DaemonJobControlTest, WithARankLaunchTheNewNodesDaemonsStartTheirRanks) {
  const RankLaunch launch{{"mpiexec", "-n", "1", "/bin/app"}, {"BELLOWS_JOIN=port"}};
  control.set_rank_launch(launch);
  control.start_initial_daemons({"node0", "node1"});
  register_daemons({"node0", "node1", "node2", "node3"});
  EXPECT_EQ(control.job_map(), (std::map<std::string, std::uint32_t>{{"node0", 0}, {"node1", 1}}));
  control.add_ranks(7, {"node2", "node3"});
  // Each new rank knows its place in the grow from its start: the resize, its ordinal in the
  // order of the nodes, and how many join; and its PMIx rank in the job's namespace with the
  // job map, the new nodes taking the next numbers.
  const auto start = [&launch](std::uint64_t resize, std::vector<std::string> place, std::uint32_t rank,
                               std::vector<std::string> nodes, std::vector<std::uint32_t> ranks) {
    std::vector<std::string> environment = launch.environment;
    environment.insert(environment.end(), place.begin(), place.end());
    return protocol::StartRank{resize, launch.command, environment, "42", rank, nodes, ranks, true};
  };
  const std::vector<std::string> map_nodes{"node0", "node1", "node2", "node3"};
  const std::vector<std::uint32_t> map_ranks{0, 1, 2, 3};
  EXPECT_EQ(sent_now(),
            (std::vector<Sent>{
                {"node0", expand_order(7, {"node2", "node3"})},
                {"node2", start(7, {"BELLOWS_JOIN_RESIZE=7", "BELLOWS_JOIN_ORDINAL=0", "BELLOWS_JOIN_COUNT=2"}, 2,
                                map_nodes, map_ranks)},
                {"node3", start(7, {"BELLOWS_JOIN_RESIZE=7", "BELLOWS_JOIN_ORDINAL=1", "BELLOWS_JOIN_COUNT=2"}, 3,
                                map_nodes, map_ranks)}}));
  control.start_ranks(0, {"node1"});
  EXPECT_EQ(sent_now(),
            (std::vector<Sent>{{"node1", start(0, {"BELLOWS_JOIN_RESIZE=0", "BELLOWS_JOIN_ORDINAL=0",
                                                   "BELLOWS_JOIN_COUNT=1"},
                                               1, map_nodes, map_ranks)}}));
  EXPECT_EQ(progress(), Lines{});
}

// The first rank, which `bellows run` starts, is registered by the first node's daemon as rank
// 0 (nothing started there); a node that left leaves the job map but stays in the numbered map
// (PMIx takes ranks 0..n-1 only), and the next grow gets a number never given before, its
// StartRank naming the number that left.
TEST_F(DaemonJobControlTest, TheJobMapNumbersTheFirstRankZeroAndNeverGivesANumberTwice) {
  control.set_rank_launch({{"mpiexec", "/bin/app"}, {}});
  control.start_initial_daemons({"node0", "node1", "node2"});
  register_daemons({"node0", "node1", "node2", "node3"});
  ASSERT_TRUE(control.register_first_rank());
  protocol::StartRank first{0, {"mpiexec", "/bin/app"}, {}, "42", 0, {"node0", "node1", "node2"}, {0, 1, 2}, false};
  EXPECT_EQ(sent_now(), (std::vector<Sent>{{"node0", first}}));
  control.resize_report("node1", {4, protocol::ResizeOutcome::left, 2, {1}, ""});
  (void)progress();
  control.add_ranks(5, {"node3"});
  const auto orders = sent_now();
  ASSERT_EQ(orders.size(), 2u);
  const auto& start = std::get<protocol::StartRank>(orders.back().message);
  EXPECT_EQ(start.rank, 3u);
  EXPECT_EQ(start.map_nodes, (std::vector<std::string>{"node0", "node1", "node2", "node3"}));
  EXPECT_EQ(start.map_ranks, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  // The number that left is named, so that the new rank reads the job without it.
  EXPECT_EQ(start.departed_ranks, (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(control.job_map(), (std::map<std::string, std::uint32_t>{{"node0", 0}, {"node2", 2}, {"node3", 3}}));
}

TEST_F(DaemonJobControlTest, ARankThatCannotBeStartedForLackOfADaemonIsADeath) {
  control.set_rank_launch({{"mpiexec"}, {}});
  register_daemons({"node0"});
  control.add_ranks(1, {"node2"});
  EXPECT_EQ(sent_now(), (std::vector<Sent>{{"node0", expand_order(1, {"node2"})}}));
  EXPECT_EQ(progress(), (Lines{"rank_died resize 1 node node2 ranks 0: no daemon is registered on node2 "
                               "to start its rank"}));
}

TEST_F(DaemonJobControlTest, ARankThatExitedBeforeJoiningIsNamedByItsNode) {
  control.rank_exited("node2", protocol::RankExited{protocol::kNoRank, 812, 1, 0});
  EXPECT_EQ(progress(), (Lines{"rank_died resize 0 node node2 ranks 0 exit 1 signal 0: the rank started on "
                               "node2 (pid 812) exit status 1"}));
}

TEST_F(DaemonJobControlTest, ACommittedExpansionIsReportedAndNothingIsSentBack) {
  expanding();
  control.resize_report("node0", report(1, Outcome::committed, 4));
  EXPECT_EQ(progress(), (Lines{"committed resize 1 node node0 ranks 4"}));
  EXPECT_EQ(control.job_size(), 4u);
  EXPECT_TRUE(sent_now().empty());  // the job's first rank knows: it reported the commit
}

TEST_F(DaemonJobControlTest, ARefusedExpansionIsReportedWithTheJobsTextAndNothingCommitted) {
  expanding();
  control.resize_report("node0", report(1, Outcome::refused, 2, "the job is in its last iteration"));
  EXPECT_EQ(progress(), (Lines{"refused resize 1 node node0 ranks 2: the job is in its last iteration"}));
  EXPECT_EQ(control.job_size(), 2u);
  EXPECT_TRUE(sent.empty());
}

TEST_F(DaemonJobControlTest, ACancelledExpansionIsReportedAndNothingCommitted) {
  expanding();
  control.cancel(1, "the resize passed its limit of 1 s");
  EXPECT_EQ(sent_now(), (std::vector<Sent>{
                            {"node0", protocol::Abort{1, "the resize passed its limit of 1 s"}}}));
  control.resize_report("node0", report(1, Outcome::cancelled, 2, "dropped before apply_pending"));
  EXPECT_EQ(progress(), (Lines{"cancelled resize 1 node node0 ranks 2: dropped before apply_pending"}));
  EXPECT_TRUE(sent.empty());
  control.withdraw(1, {"node2", "node3"});
  EXPECT_EQ(launcher.calls,
            (Lines{"launch node2 42", "launch node3 42", "stop node2", "stop node3"}));
  EXPECT_FALSE(control.registered("node2"));
  // Their daemons were stopped here: their going is no death.
  control.daemon_gone("node2");
  EXPECT_EQ(progress(), Lines{});
}

TEST_F(DaemonJobControlTest, ACancelAnsweredByTheCommitAlreadySentCommits) {
  expanding();
  control.cancel(1, "a rank on node3 died");
  (void)sent_now();
  control.resize_report("node0", report(1, Outcome::committed, 4));
  EXPECT_EQ(progress(), (Lines{"committed resize 1 node node0 ranks 4"}));
  EXPECT_TRUE(sent_now().empty());
}

TEST_F(DaemonJobControlTest, WithdrawBeforeTheJobWasToldStopsTheNewDaemons) {
  register_daemons({"node0", "node1"});
  control.start_daemons(1, {"node2", "node3"});
  register_daemons({"node2"});
  control.withdraw(1, {"node2", "node3"});
  EXPECT_EQ(launcher.calls,
            (Lines{"launch node2 42", "launch node3 42", "stop node2", "stop node3"}));
  // node3 registers late: no resize waits for it any more.
  control.daemon_registered("node3");
  EXPECT_EQ(progress(), (Lines{"daemon_up resize 1 node node2 ranks 0"}));
  EXPECT_TRUE(sent.empty());
}

// ---------------------------------------------------------------- cancel

TEST_F(DaemonJobControlTest, CancelOfAShrinkSendsAbortWithTheReasonToTheFirstNode) {
  shrinking();
  control.cancel(2, "the resize passed its limit of 2.5 s");
  EXPECT_EQ(sent_now(), (std::vector<Sent>{
                            {"node0", protocol::Abort{2, "the resize passed its limit of 2.5 s"}}}));
  control.resize_report("node0", report(2, Outcome::cancelled, 4));
  EXPECT_EQ(progress(), (Lines{"cancelled resize 2 node node0 ranks 4"}));
  // What comes after is reported as it comes: what it means is the controller's to say.
  control.daemon_gone("node2");
  EXPECT_EQ(progress(), (Lines{"node_lost resize 0 node node2 ranks 0: the daemon of node2 went away"}));
  EXPECT_TRUE(launcher.calls.empty());
}

TEST_F(DaemonJobControlTest, CancelWithoutADaemonOnTheFirstNodeIsADeathOfTheFirstNode) {
  expanding();
  reachable.erase("node0");  // the connection is gone, not yet reported
  control.cancel(1, "a rank on node3 died");
  EXPECT_TRUE(sent.empty());
  EXPECT_EQ(progress(), (Lines{"rank_died resize 1 node node0 ranks 0: no daemon is registered "
                               "on node0, the job's first node"}));
}

// ---------------------------------------------------------------- shrink

TEST_F(DaemonJobControlTest, RemoveRanksTellsTheFirstNodeWhichNodesLeave) {
  shrinking();  // checks the one ResizeDecided to node0
  EXPECT_EQ(progress(), Lines{});
}

TEST_F(DaemonJobControlTest, RemoveRanksWithoutADaemonOnTheFirstNodeIsADeath) {
  register_daemons({"node1"});
  control.remove_ranks(2, {"node1"});
  EXPECT_EQ(progress(), (Lines{"rank_died resize 2 node node0 ranks 0: no daemon is registered "
                               "on node0, the job's first node"}));
}

/// The first rank's commit and the leavers' left reports arrive in any order: each is reported
/// as it arrives (joining them is the resize controller's), and a leaving node's daemon, started
/// here, is stopped once its ranks left.
class ShrinkOrder : public DaemonJobControlTest,
                    public ::testing::WithParamInterface<std::vector<std::string>> {};

TEST_P(ShrinkOrder, EachReportIsDeliveredAsItArrives) {
  shrinking();
  const Lines& order = GetParam();
  Lines expected_stops;
  for (const std::string& who : order) {
    if (who == "commit") {
      control.resize_report("node0", report(2, Outcome::committed, 2));
      EXPECT_EQ(progress(), (Lines{"committed resize 2 node node0 ranks 2"})) << who;
    } else {
      control.resize_report(who, report(2, Outcome::left, 0, "", {who == "node2" ? 2u : 3u}));
      EXPECT_EQ(progress(), (Lines{"left resize 2 node " + who + " ranks 0"})) << who;
      expected_stops.push_back("stop " + who);
      EXPECT_FALSE(control.registered(who)) << who;
    }
    EXPECT_TRUE(sent_now().empty()) << "after " << who;
    EXPECT_EQ(launcher.calls, expected_stops) << "after " << who;
  }
  // A stopped leaver's daemon going is no news.
  control.daemon_gone("node3");
  EXPECT_EQ(progress(), Lines{});
}

INSTANTIATE_TEST_SUITE_P(
    AnyOrder, ShrinkOrder,
    ::testing::Values(std::vector<std::string>{"commit", "node2", "node3"},
                      std::vector<std::string>{"node2", "commit", "node3"},
                      std::vector<std::string>{"node3", "node2", "commit"}),
    [](const ::testing::TestParamInfo<std::vector<std::string>>& p) {
      std::string name;
      for (const auto& who : p.param) name += who == "commit" ? "Commit" : who == "node2" ? "Node2" : "Node3";
      return name;
    });

// A job taken over (bellows run --attach): the launcher that started node1's daemon died with
// the controller before, so the daemon is told to stop over its link instead, and node1 has
// left once that daemon has gone (the node is not given back under a daemon still stopping).
TEST_F(DaemonJobControlTest, ALeftNodeNotStartedHereIsToldToStopAndLeavesOnceItsDaemonWent) {
  register_daemons({"node0", "node1"});
  control.remove_ranks(2, {"node1"});
  (void)sent_now();
  control.resize_report("node1", report(2, Outcome::left, 0, "", {1}));
  control.resize_report("node0", report(2, Outcome::committed, 1));
  EXPECT_EQ(progress(), (Lines{"committed resize 2 node node0 ranks 1"}));
  EXPECT_FALSE(control.registered("node1"));
  EXPECT_TRUE(launcher.calls.empty());
  EXPECT_EQ(sent_now(), (std::vector<Sent>{{"node1", protocol::Stop{"its node left the job", 2000}}}));
  control.daemon_gone("node1");
  EXPECT_EQ(progress(), (Lines{"left resize 2 node node1 ranks 0"}));
  control.daemon_gone("node1");  // once only, and never a lost node
  EXPECT_TRUE(progress().empty());
}

// A daemon that cannot be told (no link to it) holds nothing up: the node has left at once.
TEST_F(DaemonJobControlTest, ALeftNodeWhoseDaemonCannotBeToldLeavesAtOnce) {
  register_daemons({"node0", "node1"});
  control.remove_ranks(2, {"node1"});
  (void)sent_now();
  reachable.erase("node1");
  control.resize_report("node1", report(2, Outcome::left, 0, "", {1}));
  EXPECT_EQ(progress(), (Lines{"left resize 2 node node1 ranks 0"}));
  EXPECT_TRUE(sent_now().empty());
}

TEST_F(DaemonJobControlTest, ARefusedShrinkIsReportedAndItsNodesStay) {
  shrinking();
  control.resize_report("node0", report(2, Outcome::refused, 4, "node2 holds the only copy of tile (3,1)"));
  EXPECT_EQ(progress(), (Lines{"refused resize 2 node node0 ranks 4: node2 holds the only copy "
                               "of tile (3,1)"}));
  EXPECT_TRUE(control.registered("node2"));
  EXPECT_TRUE(launcher.calls.empty());
  EXPECT_TRUE(sent.empty());
}

// ---------------------------------------------------------------- deaths

TEST_F(DaemonJobControlTest, ADaemonGoingOnItsOwnDuringAShrinkIsReportedForTheControllerToJudge) {
  shrinking();
  control.daemon_gone("node3");  // a leaver's, before its left report
  control.daemon_gone("node1");
  EXPECT_EQ(progress(), (Lines{"node_lost resize 0 node node3 ranks 0: the daemon of node3 went away",
                               "node_lost resize 0 node node1 ranks 0: the daemon of node1 went away"}));
}

TEST_F(DaemonJobControlTest, ADaemonGoingAwayIsReportedOnce) {
  register_daemons({"node0", "node1"});
  control.daemon_gone("node1");
  control.daemon_gone("node5");  // never registered: nothing to say
  EXPECT_EQ(progress(), (Lines{"node_lost resize 0 node node1 ranks 0: the daemon of node1 went away"}));

  control.start_daemons(1, {"node2"});
  register_daemons({"node2"});
  control.add_ranks(1, {"node2"});
  (void)progress();
  control.daemon_gone("node2");
  control.daemon_gone("node2");  // reported once
  EXPECT_EQ(progress(), (Lines{"node_lost resize 0 node node2 ranks 0: the daemon of node2 went away"}));
}

TEST_F(DaemonJobControlTest, WhatIsLeftOfADaemonThatWentAwayIsEndedAtOnce) {
  register_daemons({"node0", "node1"});
  control.start_daemons(1, {"node2", "node3"});
  register_daemons({"node2", "node3"});
  control.add_ranks(1, {"node2", "node3"});
  (void)progress();
  control.daemon_gone("node2");  // its node died: the failure withdraws it
  (void)progress();
  control.withdraw(2, {"node2"});
  control.daemon_gone("node3");  // went away too; stopped with the others at the job's end
  control.stop_started_daemons();
  EXPECT_EQ(launcher.calls, (Lines{"launch node2 42", "launch node3 42", "stop_gone node2", "stop_gone node3"}));
}

TEST_F(DaemonJobControlTest, ARankExitIsReportedHowItEnded) {
  // Which resize it concerns, if any runs, is the controller's to say (resize 0).
  control.rank_exited("node1", {1, 701, 0, 9});
  control.rank_exited("node2", {2, 812, 3, 0});
  control.rank_exited("node3", {3, 813, -1, 0});
  EXPECT_EQ(progress(), (Lines{"rank_died resize 0 node node1 ranks 0 rank 1 exit 0 signal 9: rank 1 (pid 701) "
                               "killed by signal 9",
                               "rank_died resize 0 node node2 ranks 0 rank 2 exit 3 signal 0: rank 2 (pid 812) "
                               "exit status 3",
                               "rank_died resize 0 node node3 ranks 0 rank 3: rank 3 (pid 813) its process "
                               "disappeared"}));
}

// ---------------------------------------------------------------- a PMIx-native job

/// A PMIx-native job (bellows run --pmix-native) started on node0 and node1, whose grow 3 adds
/// node2 and node3: their daemons up and registered.
class NativeJobControlTest : public DaemonJobControlTest {
 protected:
  void growing() {
    control.set_rank_launch({{"mpiexec", "/bin/app"}, {}, true});
    control.start_initial_daemons({"node0", "node1"});
    register_daemons({"node0", "node1"});
    control.start_daemons(3, {"node2", "node3"});
    register_daemons({"node2", "node3"});
    ASSERT_EQ(progress(), (Lines{"daemon_up resize 3 node node2 ranks 0", "daemon_up resize 3 node node3 ranks 0"}));
    control.add_ranks(3, {"node2", "node3"});
  }
};

// Nobody in a PMIx-native job reads Bellows' resize orders: the new nodes' daemons start their
// ranks, and the grow commits once each new rank's client connected, as the rank of its node
// in the job's namespace; other connections change nothing.
TEST_F(NativeJobControlTest, AGrowCommitsOnceEveryNewRanksClientConnected) {
  growing();
  const auto orders = sent_now();
  ASSERT_EQ(orders.size(), 2u);
  EXPECT_EQ(orders[0].node, "node2");
  EXPECT_EQ(std::get<protocol::StartRank>(orders[0].message).rank, 2u);
  EXPECT_EQ(orders[1].node, "node3");
  EXPECT_EQ(std::get<protocol::StartRank>(orders[1].message).rank, 3u);
  control.rank_connected("node0", {"42", 0});      // an old rank
  control.rank_connected("node2", {"42", 2});
  control.rank_connected("node3", {"other", 3});   // another namespace
  control.rank_connected("node3", {"42", 1});      // not node3's rank
  EXPECT_EQ(progress(), Lines{});
  EXPECT_EQ(control.job_size(), 2u);
  control.rank_connected("node3", {"42", 3});
  EXPECT_EQ(progress(), (Lines{"committed resize 3 node node0 ranks 4: every new rank's PMIx client connected"}));
  EXPECT_EQ(control.job_size(), 4u);
  control.rank_connected("node3", {"42", 3});  // once is enough
  EXPECT_EQ(progress(), Lines{});
  EXPECT_EQ(sent_now(), std::vector<Sent>{});
}

// A shrink sends nothing: the leaving nodes leave the job map at once (the JobView then carries
// the staying ranks, their process set), and each leaving rank's normal end is its node's
// left, its daemon stopped; the last one commits. A normal end elsewhere is nothing.
TEST_F(NativeJobControlTest, AShrinkCommitsOnceEveryLeavingRankEndedNormally) {
  growing();
  control.rank_connected("node2", {"42", 2});
  control.rank_connected("node3", {"42", 3});
  (void)progress();
  (void)sent_now();
  launcher.calls.clear();
  control.remove_ranks(4, {"node1", "node3"});
  EXPECT_EQ(sent_now(), std::vector<Sent>{});
  EXPECT_EQ(control.job_map(), (std::map<std::string, std::uint32_t>{{"node0", 0}, {"node2", 2}}));
  EXPECT_EQ(control.numbered_nodes(), (std::vector<std::string>{"node0", "node1", "node2", "node3"}));
  control.rank_exited("node2", {protocol::kNoRank, 812, 0, 0});  // stays: its end is no leave
  control.rank_exited("node3", {protocol::kNoRank, 813, 0, 0});
  EXPECT_EQ(progress(), (Lines{"left resize 4 node node3 ranks 4: its rank ended with status 0"}));
  EXPECT_EQ(launcher.calls, (Lines{"stop node3"}));
  EXPECT_FALSE(control.registered("node3"));
  control.rank_exited("node1", {protocol::kNoRank, 811, 0, 0});
  EXPECT_EQ(progress(), (Lines{"left resize 4 node node1 ranks 4: its rank ended with status 0",
                               "committed resize 4 node node0 ranks 2: every leaving rank ended"}));
  EXPECT_EQ(launcher.calls, (Lines{"stop node3", "stop node1"}));
  EXPECT_EQ(control.job_size(), 2u);
}

// A leaving rank that crashed is a death like any other; cancelling a grow whose new ranks have
// not all connected drops it, and a late connection commits nothing.
TEST_F(NativeJobControlTest, ACrashIsADeathAndACancelledGrowCommitsNothing) {
  growing();
  control.rank_connected("node2", {"42", 2});
  control.cancel(3, "the deadline passed");
  EXPECT_EQ(progress(), (Lines{"cancelled resize 3 node node0 ranks 2: the deadline passed"}));
  control.withdraw(3, {"node2", "node3"});
  control.rank_connected("node3", {"42", 3});
  EXPECT_EQ(progress(), Lines{});
  control.remove_ranks(5, {"node1"});
  control.rank_exited("node1", {protocol::kNoRank, 811, 0, 9});
  EXPECT_EQ(progress(), (Lines{"rank_died resize 0 node node1 ranks 0 exit 0 signal 9: the rank started on "
                               "node1 (pid 811) killed by signal 9"}));
  EXPECT_EQ(sent_now().size(), 2u);  // the grow's two StartRank, nothing since
}

// A PMIx-native job taken over (bellows run --attach): its daemons were started by the
// controller that died, which had given ranks 0 to 3 and seen 1 and 3 leave. With the job map and
// the numbers given taken from its record, a grow gives number 4 (not 0 again) on the node, the
// StartRank's map is every number given, and the grow commits on rank 4's connection.
TEST_F(NativeJobControlTest, AJobTakenOverGivesTheNextNumberAndCommitsOnItsConnection) {
  control.set_rank_launch({{"mpiexec", "/bin/app"}, {}, true});
  control.set_job_size(2);
  control.take_over_job_map({{"node0", 0}, {"node2", 2}}, {"node0", "node1", "node2", "node3"});
  register_daemons({"node0", "node2", "node1"});
  control.start_daemons(7, {"node1"});
  ASSERT_EQ(progress(), (Lines{"daemon_up resize 7 node node1 ranks 0"}));
  control.add_ranks(7, {"node1"});
  const auto orders = sent_now();
  ASSERT_EQ(orders.size(), 1u);
  const auto& start = std::get<protocol::StartRank>(orders[0].message);
  EXPECT_EQ(orders[0].node, "node1");
  EXPECT_EQ(start.rank, 4u);
  EXPECT_EQ(start.map_nodes, (std::vector<std::string>{"node0", "node1", "node2", "node3", "node1"}));
  EXPECT_EQ(control.job_map(), (std::map<std::string, std::uint32_t>{{"node0", 0}, {"node1", 4}, {"node2", 2}}));
  control.rank_connected("node1", {"42", 1});  // the number that left there before
  EXPECT_EQ(progress(), Lines{});
  control.rank_connected("node1", {"42", 4});
  EXPECT_EQ(progress(), (Lines{"committed resize 7 node node0 ranks 3: every new rank's PMIx client connected"}));
}

// A libbellows job is untouched: connections and normal ends report nothing; the first rank
// is told of its resizes.
TEST_F(DaemonJobControlTest, ALibbellowsJobIgnoresConnectionsAndNormalEnds) {
  control.set_rank_launch({{"mpiexec", "/bin/app"}, {}});
  control.start_initial_daemons({"node0", "node1"});
  register_daemons({"node0", "node1", "node2"});
  control.add_ranks(3, {"node2"});
  control.rank_connected("node2", {"42", 2});
  control.remove_ranks(4, {"node1"});
  control.rank_exited("node1", {protocol::kNoRank, 811, 0, 0});
  EXPECT_EQ(progress(), Lines{});
  const auto orders = sent_now();
  ASSERT_EQ(orders.size(), 3u);
  EXPECT_EQ(orders[0], (Sent{"node0", expand_order(3, {"node2"})}));
  EXPECT_EQ(orders[2], (Sent{"node0", shrink_order(4, {"node1"})}));
}

// ---------------------------------------------------------------- failures

TEST_F(DaemonJobControlTest, ALostNodeCarriesTheRankItsDaemonLastReported) {
  register_daemons({"node0", "node1", "node2"});
  control.note_rank("node2", 2);
  control.daemon_gone("node2");
  // A rank that had no rank yet when it died is named by its node's last known rank.
  control.note_rank("node1", 1);
  control.rank_exited("node1", {protocol::kNoRank, 900, -1, 0});
  EXPECT_EQ(progress(), (Lines{"node_lost resize 0 node node2 ranks 0 rank 2: the daemon of node2 went away",
                               "rank_died resize 0 node node1 ranks 0 rank 1: the rank started on node1 (pid "
                               "900) its process disappeared"}));
}

TEST_F(DaemonJobControlTest, TellLostSendsRanksLostToEverySurvivorAndCountsTheJobSmaller) {
  control.start_initial_daemons({"node0", "node1", "node2"});
  register_daemons({"node0", "node1"});  // node2's daemon is gone
  EXPECT_EQ(control.job_size(), 3u);
  const JobReport node_gone{JobReportKind::node_lost, 0, "node2", 0, "the daemon of node2 went away", 2u};
  const protocol::RanksLost lost{4, {2}, {"node2"}, "the daemon of node2 went away",
                                 protocol::LossCause::node_lost, -1, 0};
  EXPECT_TRUE(control.tell_lost(4, {"node2"}, {2}, "the daemon of node2 went away", node_gone,
                                {"node0", "node1"}));
  EXPECT_EQ(sent_now(), (std::vector<Sent>{{"node0", lost}, {"node1", lost}}));
  EXPECT_EQ(control.job_size(), 2u);
  // A survivor that cannot be reached: false, the others told all the same; a rank killed by a
  // signal is told with its signal.
  const JobReport killed{JobReportKind::rank_died, 0, "node1", 0, "rank 1 (pid 701) killed by signal 9", 1u, 0, 9};
  EXPECT_FALSE(control.tell_lost(5, {"node1"}, {1}, "a rank on node1 died", killed, {"node3", "node0"}));
  const protocol::RanksLost told{5, {1}, {"node1"}, "a rank on node1 died", protocol::LossCause::rank_died, 0, 9};
  EXPECT_EQ(sent_now(), (std::vector<Sent>{{"node0", told}}));
  // The job's recovery comes back as a report of the failure's id.
  control.resize_report("node0", report(4, Outcome::recovered, 2));
  EXPECT_EQ(progress(), (Lines{"recovered resize 4 node node0 ranks 2"}));
}

}  // namespace
}  // namespace bellows::controller
