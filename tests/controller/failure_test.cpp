// Failures (failure_state.hpp): a rank that dies, or a daemon that goes away, while no resize
// runs, recorded apart from the resizes and shown like one; the failure table itself.

#include "controller_fixture.hpp"

#include "bellows/controller/failure_state.hpp"

#include <set>
#include <tuple>

namespace bellows::controller::testing {
namespace {

using Calls = std::vector<std::string>;

class FailureTest : public ControllerTest {
 protected:
  /// The daemon of `node` saw rank `rank` end without leaving.
  void rank_killed(const std::string& node, std::uint32_t rank) {
    std::string how = "rank ";
    how += std::to_string(rank);
    how += " (pid 4711) killed by signal 9";
    job.report({JobReportKind::rank_died, 0, node, 0, how, rank, 0, 9});
  }
  void recovered(ResizeId failure, unsigned ranks) {
    job.report({JobReportKind::recovered, failure, "node0", ranks, "", {}});
  }
  FailureView failure(std::size_t index) const {
    const auto all = ctl->failures();
    EXPECT_GT(all.size(), index);
    return all.size() > index ? all[index] : FailureView{};
  }
};

TEST_F(FailureTest, ARankKilledOutsideAResizeIsDetectedTheNodeDroppedAndTheSurvivorsTold) {
  rank_killed("node1", 1);
  advance(10ms);
  EXPECT_EQ(job.calls(), (Calls{"tell_lost 1 node1 ranks 1 to node0", "withdraw 1 node1"}));
  // The survivors are told how the rank ended, as the report that found it said.
  ASSERT_EQ(job.lost_found_by.size(), 1u);
  EXPECT_EQ(job.lost_found_by[0].kind, JobReportKind::rank_died);
  EXPECT_EQ(job.lost_found_by[0].exit_code, 0);
  EXPECT_EQ(job.lost_found_by[0].signal, 9);
  EXPECT_EQ(ctl->nodes(), (std::vector<std::string>{"node0"}));
  EXPECT_FALSE(ctl->active().has_value());
  EXPECT_TRUE(ctl->finished().empty());
  const FailureView f = failure(0);
  EXPECT_EQ(f.id, 1u);
  EXPECT_EQ(f.state, ResizeState::agreed);
  EXPECT_EQ(f.nodes, (std::vector<std::string>{"node1"}));
  EXPECT_EQ(f.ranks, (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(f.reason, "a rank on node1 died: rank 1 (pid 4711) killed by signal 9");
  EXPECT_TRUE(ctl->degraded());

  const auto lines = records();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].kind, ResizeKind::failure);
  EXPECT_EQ(lines[0].resize, 1u);
  EXPECT_EQ(lines[0].event, ResizeEvent::rank_died);
  EXPECT_EQ(lines[0].from, ResizeState::none);
  EXPECT_EQ(lines[0].to, ResizeState::detected);
  EXPECT_EQ(lines[0].count, 1u);
  EXPECT_EQ(lines[0].requester, std::nullopt);
  EXPECT_EQ(lines[0].nodes, (std::vector<std::string>{"node1"}));
  EXPECT_FALSE(lines[0].refused);
  EXPECT_EQ(lines[0].detail,
            "a rank on node1 died: rank 1 (pid 4711) killed by signal 9; lost rank 1 on node1; dropped node1 "
            "from the job, giving it back to the fake resource manager");
  EXPECT_EQ(lines[1].event, ResizeEvent::survivors_told);
  EXPECT_EQ(lines[1].from, ResizeState::detected);
  EXPECT_EQ(lines[1].to, ResizeState::agreed);
  EXPECT_EQ(lines[1].detail, "the daemons of node0 were told: rank 1 on node1 lost");

  // The node goes back to the resource manager.
  advance(100ms);
  ASSERT_EQ(rm.releases().size(), 1u);
  EXPECT_EQ(rm.releases()[0].nodes, (std::vector<std::string>{"node1"}));

  // The job's first rank reports its recovery: the failure ends, the job is whole again.
  clock.advance(1500ms);
  recovered(1, 1);
  advance(0ms);
  EXPECT_EQ(failure(0).state, ResizeState::recovered);
  EXPECT_NEAR(failure(0).seconds_to_end, 1.6, 1e-9);  // detected at 0.01 s, recovered at 1.61 s
  EXPECT_FALSE(ctl->degraded());
  const EventRecord last = last_record();
  EXPECT_EQ(last.event, ResizeEvent::job_recovered);
  EXPECT_EQ(last.from, ResizeState::agreed);
  EXPECT_EQ(last.to, ResizeState::recovered);
  EXPECT_EQ(last.detail, "the job runs on 1 rank without the lost ones (rank 1 on node1); 1.6 s after it was "
                         "detected");
}

TEST_F(FailureTest, ANodeLostBeforeATakeoverIsDeclaredToTheSurvivorsWithNothingGivenBack) {
  // A controller that took the job over after its first node, gone0, left the job (Slurm
  // took it out): the survivors never heard that its rank 0 is lost.
  const std::string why = "rank 0 on gone0, the job's first node, lost before this controller took the job over";
  const Outcome declared = ctl->declare_lost("gone0", {0}, why, false);
  EXPECT_TRUE(declared.accepted) << declared.text;
  advance(10ms);
  EXPECT_EQ(job.calls(), (Calls{"tell_lost 1 gone0 ranks 0 to node0,node1"}));
  ASSERT_EQ(job.lost_found_by.size(), 1u);
  EXPECT_EQ(job.lost_found_by[0].kind, JobReportKind::node_lost);
  EXPECT_FALSE(job.lost_found_by[0].lowers_job_size);
  EXPECT_EQ(ctl->nodes(), (std::vector<std::string>{"node0", "node1"}));
  const FailureView f = failure(0);
  EXPECT_EQ(f.state, ResizeState::agreed);
  EXPECT_EQ(f.nodes, (std::vector<std::string>{"gone0"}));
  EXPECT_EQ(f.ranks, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(f.reason, why);
  const auto lines = records();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].event, ResizeEvent::node_lost);
  EXPECT_EQ(lines[0].to, ResizeState::detected);
  EXPECT_EQ(lines[0].detail, why + "; lost rank 0 on gone0; gone0 is no node of the job any more: nothing to give back");
  EXPECT_EQ(lines[1].detail, "the daemons of node0, node1 were told: rank 0 on gone0 lost");
  advance(100ms);
  EXPECT_TRUE(rm.releases().empty());

  recovered(1, 2);
  advance(0ms);
  EXPECT_EQ(failure(0).state, ResizeState::recovered);
  EXPECT_EQ(last_record().detail, "the job runs on 2 ranks without the lost ones (rank 0 on gone0); 0.1 s after it "
                                  "was detected");
  // Declared once; a node of the job is found lost, not declared.
  EXPECT_EQ(ctl->declare_lost("gone0", {0}, why, false).text,
            "node_lost refused: gone0 was lost in failure 1 already (" + why + ")");
  EXPECT_FALSE(ctl->declare_lost("node1", {1}, why, false).accepted);
  EXPECT_EQ(last_record().detail,
            "node_lost refused: node1 is a node of job 42: its loss is found, not declared (" + why + ")");
  EXPECT_EQ(ctl->failures().size(), 1u);
}

TEST_F(FailureTest, ADaemonGoneIsALostNode) {
  job.report({JobReportKind::node_lost, 0, "node1", 0, "the daemon of node1 went away", 1u});
  advance(10ms);
  EXPECT_EQ(job.calls(), (Calls{"tell_lost 1 node1 ranks 1 to node0", "withdraw 1 node1"}));
  ASSERT_EQ(job.lost_found_by.size(), 1u);
  EXPECT_EQ(job.lost_found_by[0].kind, JobReportKind::node_lost);
  EXPECT_EQ(job.lost_found_by[0].signal, 0);
  const auto lines = records();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].event, ResizeEvent::node_lost);
  EXPECT_EQ(failure(0).reason, "the daemon of node1 went away");
  EXPECT_EQ(failure(0).state, ResizeState::agreed);
}

TEST_F(FailureTest, AReplacementAsksTheResourceManagerForNoneOfTheNodesTheJobLost) {
  job.report({JobReportKind::node_lost, 0, "node1", 0, "the daemon of node1 went away", 1u});
  advance(10ms);
  recovered(1, 1);
  advance(10ms);
  ASSERT_EQ(failure(0).state, ResizeState::recovered);

  const ExpandOrder order = replacement_order(1, {"node1"}, ctl->failures(), "node0");
  EXPECT_EQ(order.count, 1u);
  EXPECT_EQ(order.requester, Requester::policy);
  EXPECT_EQ(order.reason, "replacing node1, lost in failure 1 (recovery.on_node_loss: replace)");
  EXPECT_EQ(order.exclude, (std::vector<std::string>{"node1"}));
  const Outcome outcome = ctl->request_expand(order);
  ASSERT_TRUE(outcome.accepted) << outcome.text;
  EXPECT_EQ(outcome.text, "asked the fake resource manager for 1 node, not node1");
  ASSERT_EQ(rm.expand_requests().size(), 1u);
  EXPECT_EQ(rm.expand_requests()[0].job, "42");
  EXPECT_EQ(rm.expand_requests()[0].count, 1u);
  EXPECT_EQ(rm.expand_requests()[0].exclude, (std::vector<std::string>{"node1"}));
  EXPECT_EQ(last_record().detail, "asked the fake resource manager for 1 node, not node1");
}

TEST_F(FailureTest, AGrowThatReplacesNothingExcludesNothing) {
  ASSERT_TRUE(expand(1).accepted);
  ASSERT_EQ(rm.expand_requests().size(), 1u);
  EXPECT_TRUE(rm.expand_requests()[0].exclude.empty());
  EXPECT_EQ(last_record().detail, "asked the fake resource manager for 1 node");
}

TEST(ReplacementOrder, ExcludesEveryNodeTheJobLostButItsFirstOnceEach) {
  FailureView first;
  first.id = 2;
  first.state = ResizeState::recovered;
  first.nodes = {"n3"};
  FailureView second;
  second.id = 5;
  second.state = ResizeState::recovered;
  second.nodes = {"n1", "n4", "n3"};  // n1: the first node, whose rank was lost; n3 came back
  const ExpandOrder order = replacement_order(5, {"n4", "n3"}, {first, second}, "n1");
  EXPECT_EQ(order.count, 2u);
  EXPECT_EQ(order.reason, "replacing n4, n3, lost in failure 5 (recovery.on_node_loss: replace)");
  EXPECT_EQ(order.exclude, (std::vector<std::string>{"n3", "n4"}));
  // A node dropped that no failure of the list names (a failure not yet listed) is excluded too.
  EXPECT_EQ(replacement_order(6, {"n2"}, {first}, "n1").exclude, (std::vector<std::string>{"n3", "n2"}));
}

TEST_F(FailureTest, ANodeWhoseRankWasNeverReportedIsLostWithNoKnownRank) {
  job.report({JobReportKind::node_lost, 0, "node1", 0, "", {}});
  advance(10ms);
  EXPECT_EQ(job.calls(), (Calls{"tell_lost 1 node1 ranks to node0", "withdraw 1 node1"}));
  EXPECT_TRUE(failure(0).ranks.empty());
  EXPECT_NE(records()[0].detail.find("lost no known rank on node1"), std::string::npos) << records()[0].detail;
}

TEST_F(FailureTest, NoRecoveryReportedInTimeGivesUpAndTheJobStaysDegraded) {
  rank_killed("node1", 1);
  advance(10ms);
  advance(9980ms);
  EXPECT_EQ(failure(0).state, ResizeState::agreed);
  advance(20ms);
  EXPECT_EQ(failure(0).state, ResizeState::given_up);
  EXPECT_TRUE(ctl->degraded());
  const EventRecord last = last_record();
  EXPECT_EQ(last.event, ResizeEvent::recovery_deadline);
  EXPECT_EQ(last.detail, "the job did not report its recovery within 10.0 s; it stays degraded; 10.0 s after "
                         "it was detected");
  // A late report changes nothing, and says so.
  recovered(1, 1);
  advance(0ms);
  EXPECT_EQ(failure(0).state, ResizeState::given_up);
  EXPECT_TRUE(last_record().refused);
  EXPECT_EQ(last_record().detail, "job_recovered refused: job_recovered is not allowed for a failure in state "
                                  "given_up (the job runs on 1 rank without the lost ones (rank 1 on node1))");
}

TEST_F(FailureTest, ASecondFailureDuringARecoveryIsRecordedOnItsOwnAndOneReportEndsBoth) {
  rank_killed("node1", 1);
  advance(10ms);
  // The job's first rank dies while the job recovers: its node stays (the job cannot run on
  // without it), and nobody is left to tell.
  rank_killed("node0", 0);
  advance(10ms);
  EXPECT_EQ(ctl->nodes(), (std::vector<std::string>{"node0"}));
  ASSERT_EQ(ctl->failures().size(), 2u);
  EXPECT_EQ(failure(1).id, 2u);
  EXPECT_EQ(failure(1).state, ResizeState::agreed);
  const auto lines = records();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2].detail,
            "a rank on node0 died: rank 0 (pid 4711) killed by signal 9; failure 1 is still being recovered "
            "from: this one is recorded and told on its own; lost rank 0 on node0; node0 is the job's first "
            "node and stays in the job, where `bellows run` runs");
  EXPECT_EQ(job.calls().back(), "tell_lost 2 node0 ranks 0 to");
  // The same node again: already lost, refused and logged.
  rank_killed("node1", 1);
  advance(10ms);
  EXPECT_TRUE(last_record().refused);
  EXPECT_EQ(last_record().detail, "rank_died refused: node1 was lost in failure 1 already (a rank on node1 "
                                  "died: rank 1 (pid 4711) killed by signal 9)");
  // The recovery from failure 2 covers failure 1, which the job was told of before.
  recovered(2, 0);
  advance(0ms);
  EXPECT_EQ(failure(0).state, ResizeState::recovered);
  EXPECT_EQ(failure(1).state, ResizeState::recovered);
  EXPECT_FALSE(ctl->degraded());
  const auto all = records();
  EXPECT_EQ(all[all.size() - 2].resize, 1u);
  EXPECT_EQ(all[all.size() - 2].detail, "the job runs on 0 ranks without the lost ones (rank 1 on node1); "
                                        "reported with failure 2, which came after it; 0.0 s after it was detected");
  EXPECT_EQ(all.back().resize, 2u);
}

TEST_F(FailureTest, ADeathDuringAResizeAbortsItAndIsAFailureOnceItEnded) {
  expand_to_granted();
  rank_killed("node1", 1);
  advance(10ms);
  EXPECT_EQ(state(), ResizeState::aborting);
  EXPECT_TRUE(ctl->failures().empty());  // the resize's, while it runs
  EXPECT_FALSE(ctl->degraded());
  advance(100ms);  // the granted nodes given back: aborted
  EXPECT_FALSE(ctl->active());
  ASSERT_EQ(ctl->failures().size(), 1u);
  EXPECT_EQ(failure(0).id, 2u);  // after the resize, in the same sequence of ids
  EXPECT_EQ(failure(0).nodes, (std::vector<std::string>{"node1"}));
  EXPECT_EQ(failure(0).state, ResizeState::agreed);
  EXPECT_TRUE(ctl->degraded());
  EXPECT_EQ(ctl->nodes(), (std::vector<std::string>{"node0"}));
}

TEST_F(FailureTest, ADeathOfANodeTheResizeAddedIsTheResizesAlone) {
  expand_to_granted();
  rank_killed("node2", 2);  // a rank the expand started
  advance(10ms);
  EXPECT_EQ(state(), ResizeState::aborting);
  advance(100ms);
  EXPECT_FALSE(ctl->active());
  EXPECT_TRUE(ctl->failures().empty());
  EXPECT_FALSE(ctl->degraded());
}

TEST_F(FailureTest, AShrinkTheJobGaveUpAfterALossIsAbortedThenTheLossAFailure) {
  ASSERT_TRUE(shrink(1).accepted);  // node1 asked to leave
  rank_killed("node1", 1);          // the daemon saw the leaver die before the job's word came
  advance(10ms);
  job.refused(1, "shrink without ranks {1} given up: ranks {1} were lost during the hand-off of the tiles");
  advance(10ms);
  EXPECT_FALSE(ctl->active());
  ASSERT_EQ(ctl->failures().size(), 1u);
  EXPECT_EQ(failure(0).nodes, (std::vector<std::string>{"node1"}));
  const auto all = records();
  ASSERT_GE(all.size(), 2u);
  bool aborted_before_detected = false;
  for (std::size_t i = 1; i < all.size(); ++i) {
    if (all[i - 1].resize == 1u && all[i - 1].to == ResizeState::aborted && all[i].resize == 2u &&
        all[i].to == ResizeState::detected) {
      aborted_before_detected = true;
    }
  }
  EXPECT_TRUE(aborted_before_detected) << "the shrink's aborted line, then the failure's detected line";
}

TEST_F(FailureTest, SurvivorsThatCannotAllBeToldLeaveTheFailureDetected) {
  job.tell_lost_answer = false;
  rank_killed("node1", 1);
  advance(10ms);
  EXPECT_EQ(failure(0).state, ResizeState::detected);
  EXPECT_NE(last_record().detail.find("not every surviving node's daemon could be told; the failure stays "
                                      "detected"),
            std::string::npos)
      << last_record().detail;
}

TEST_F(FailureTest, TheJobsEndGivesUpTheOpenFailures) {
  rank_killed("node1", 1);
  advance(10ms);
  ctl->end_failures("the job ended before it reported its recovery");
  EXPECT_EQ(failure(0).state, ResizeState::given_up);
  EXPECT_EQ(last_record().event, ResizeEvent::job_ended);
  EXPECT_EQ(ctl->next_timer(), std::nullopt);
}

TEST_F(FailureTest, ARecoveryOfNoFailureIsRefused) {
  recovered(7, 2);
  advance(0ms);
  EXPECT_TRUE(last_record().refused);
  EXPECT_EQ(last_record().detail, "job_recovered refused: there is no failure 7");
}

TEST(FailureTable, OneRowPerStateAndEventEveryOpenStateLeftAndBothEndsReached) {
  std::set<std::tuple<ResizeState, ResizeEvent>> seen;
  std::set<ResizeState> entered, left;
  for (const ResizeTransition& t : failure_transitions()) {
    EXPECT_EQ(t.kind, ResizeKind::failure);
    EXPECT_TRUE(seen.insert({t.from, t.event}).second) << to_string(t.from) << " " << to_string(t.event);
    EXPECT_FALSE(is_final(t.from)) << to_string(t.from);
    EXPECT_FALSE(find_transition(ResizeKind::failure, t.from, t.event).has_value())
        << "a failure row in the resizes' table";
    entered.insert(t.to);
    left.insert(t.from);
  }
  for (ResizeState s : entered) EXPECT_TRUE(is_final(s) || left.contains(s)) << to_string(s);
  EXPECT_TRUE(entered.contains(ResizeState::recovered));
  EXPECT_TRUE(entered.contains(ResizeState::given_up));
  EXPECT_EQ(find_failure_transition(ResizeState::detected, ResizeEvent::job_recovered), std::nullopt);
  EXPECT_EQ(parse_resize_kind("failure"), ResizeKind::failure);
  EXPECT_EQ(parse_resize_state("given_up"), ResizeState::given_up);
  EXPECT_EQ(parse_resize_event("survivors_told"), ResizeEvent::survivors_told);
}

}  // namespace
}  // namespace bellows::controller::testing
