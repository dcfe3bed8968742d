// Shrink: nodes go back to the resource manager only after the leaving ranks drained and
// exited; an aborted shrink keeps the job at its size; bad orders are refused by name.

#include "controller_fixture.hpp"

#include <algorithm>
#include <iterator>

namespace bellows::controller::testing {
namespace {

using S = ResizeState;
using E = ResizeEvent;
using Nodes = std::vector<std::string>;
constexpr auto kShrink = std::optional<ResizeKind>(ResizeKind::shrink);
constexpr auto kApplication = std::optional<Requester>(Requester::application);

class ShrinkTest : public ControllerTest {
 protected:
  /// Grows the job to node0..node3 (resize 1) and clears the log.
  void grow_to_four() {
    expand_to_reconfiguring();
    job.committed(1, 4);
    advance(10ms);
    ASSERT_EQ(ctl->nodes(), (Nodes{"node0", "node1", "node2", "node3"}));
  }
};

TEST_F(ShrinkTest, ReleasesOnlyAfterTheLeavingRanksDrainedAndLogsEveryStep) {
  const Outcome outcome = shrink(1, Requester::application, "phase 2 needs fewer ranks");
  EXPECT_TRUE(outcome.accepted);
  EXPECT_EQ(outcome.text, "ranks on node1 leave");
  EXPECT_EQ(job.calls(), (Nodes{"remove_ranks 1 node1"}));

  advance(4000ms);
  job.committed(1, 1);  // the others run without the leaving ranks; they have not exited yet
  ctl->poll();
  EXPECT_EQ(state(), S::draining);
  advance(1000ms);
  EXPECT_TRUE(rm.releases().empty());
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));

  job.left(1);
  ctl->poll();
  EXPECT_EQ(state(), S::releasing);
  EXPECT_EQ(rm.releases(), (std::vector<ReleaseCall>{{"42", {"node1"}}}));
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0"}));
  advance(100ms);
  EXPECT_EQ(state(), S::committed);
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0"}));
  EXPECT_EQ(job.calls(), (Nodes{"remove_ranks 1 node1"}));

  const std::string why = "phase 2 needs fewer ranks";
  const auto r = records();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0], line("2024-05-01T12:00:00.000Z", 1, kShrink, 1, E::request, S::none, S::reconfiguring, 0,
                       kApplication, why, std::nullopt, {"node1"}, "ranks on node1 leave"));
  EXPECT_EQ(r[1], line("2024-05-01T12:00:04.000Z", 1, kShrink, 1, E::ranks_committed, S::reconfiguring,
                       S::draining, 4.0, kApplication, why, std::nullopt, {"node1"},
                       "the job runs on 1 rank"));
  EXPECT_EQ(r[2], line("2024-05-01T12:00:05.000Z", 1, kShrink, 1, E::drain_done, S::draining,
                       S::releasing, 1.0, kApplication, why, std::nullopt, {"node1"},
                       "the leaving ranks exited; giving node1 back to the resource manager"));
  EXPECT_EQ(r[3], line("2024-05-01T12:00:05.100Z", 1, kShrink, 1, E::release_done, S::releasing,
                       S::committed, 0.1, kApplication, why,
                       RmAnswerRecord{RmCode::ok, "released 1 node of job 42", {}}, {"node1"},
                       "released 1 node of job 42"));
}

TEST_F(ShrinkTest, ByCountTheNodesAddedLastLeave) {
  grow_to_four();
  ASSERT_TRUE(shrink(2).accepted);
  EXPECT_EQ(job.calls().back(), "remove_ranks 2 node2,node3");
  EXPECT_EQ(ctl->active()->nodes, (Nodes{"node2", "node3"}));
}

TEST_F(ShrinkTest, ExplicitNodesLeaveInTheGivenOrder) {
  grow_to_four();
  ShrinkOrder order;
  order.nodes = {"node3", "node1"};
  order.requester = Requester::operator_;
  order.reason = "bellows resize 42 -node3 -node1";
  ASSERT_TRUE(ctl->request_shrink(order).accepted);
  EXPECT_EQ(job.calls().back(), "remove_ranks 2 node3,node1");
  job.committed(2, 2);
  job.left(2, "node3");
  advance(10ms);
  EXPECT_EQ(state(), S::draining);  // node1's ranks have not left yet
  job.left(2, "node1");
  advance(10ms);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node2"}));
  advance(100ms);
  EXPECT_EQ(state(), S::committed);
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node2"}));
}

TEST_F(ShrinkTest, MalformedOrdersAreRefusedNamingTheProblem) {
  grow_to_four();
  const auto refused = [&](ShrinkOrder order) { return ctl->request_shrink(order).text; };
  ShrinkOrder both;
  both.count = 1;
  both.nodes = {"node2"};
  EXPECT_EQ(refused(both), "resize 2 refused: a shrink takes a count or a list of nodes, not both");
  EXPECT_EQ(refused(ShrinkOrder{}), "resize 3 refused: shrink count must be at least 1, got 0");
  ShrinkOrder all;
  all.count = 4;
  EXPECT_EQ(refused(all),
            "resize 4 refused: cannot shrink by 4: job 42 has 4 nodes and keeps at least its first node (node0)");
  ShrinkOrder stranger;
  stranger.nodes = {"node2", "node5"};
  EXPECT_EQ(refused(stranger),
            "resize 5 refused: node5 is not a node of job 42 (its nodes: node0, node1, node2, node3)");
  ShrinkOrder first;
  first.nodes = {"node0"};
  EXPECT_EQ(refused(first), "resize 6 refused: node0 is the first node of job 42 and cannot leave");
  ShrinkOrder twice;
  twice.nodes = {"node2", "node2"};
  EXPECT_EQ(refused(twice), "resize 7 refused: node2 is listed twice");
  ShrinkOrder no_time;
  no_time.count = 1;
  no_time.deadline = -1ms;
  EXPECT_EQ(refused(no_time), "resize 8 refused: resize deadline must be positive, got -1 ms");

  EXPECT_FALSE(ctl->active());
  EXPECT_EQ(job.calls().size(), 2u);  // those of the expansion only
  const EventRecord r = last_record();
  EXPECT_TRUE(r.refused);
  EXPECT_EQ(r.kind, kShrink);
  EXPECT_EQ(r.count, 1u);
  EXPECT_EQ(r.event, E::request);
}

TEST_F(ShrinkTest, RankDeathDuringReconfigurationCancelsAndTheJobKeepsItsSizeWhenItDropsIt) {
  ASSERT_TRUE(shrink(1).accepted);
  job.died(1, "node0", "signal 11");
  advance(10ms);
  EXPECT_EQ(state(), S::cancelling);
  EXPECT_EQ(job.calls(), (Nodes{"remove_ranks 1 node1", "cancel 1"}));
  EXPECT_EQ(last_record().detail, "a rank on node0 died: signal 11; asked the job to drop it");
  job.cancelled(1);
  advance(10ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_TRUE(rm.releases().empty());
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1"}));
  const auto all = records();
  const auto aborted = std::ranges::find_if(all, [](const EventRecord& r) {
    return r.resize == 1u && r.to == S::aborted;
  });
  ASSERT_NE(aborted, all.end());
  EXPECT_EQ(aborted->detail, "the job dropped the resize before carrying it out; the ranks on node1 stay");
  // The rank that died is a failure of its own once the shrink ended, recorded after it.
  ASSERT_EQ(ctl->failures().size(), 1u);
  EXPECT_EQ(ctl->failures()[0].id, 2u);
  EXPECT_EQ(ctl->failures()[0].nodes, (Nodes{"node0"}));
  EXPECT_EQ(std::next(aborted)->resize, 2u);
}

// The job had already run the shrink when the cancellation reached it: the leaving ranks
// are gone, so the shrink goes on and their node goes back once they exited.
TEST_F(ShrinkTest, ACancelledShrinkTheJobAlreadyCarriedOutGoesOn) {
  ASSERT_TRUE(shrink(1).accepted);
  ASSERT_TRUE(ctl->deliver(0, E::resize_deadline, "limit passed").accepted);
  EXPECT_EQ(state(), S::cancelling);
  job.committed(1, 1);
  advance(10ms);
  EXPECT_EQ(state(), S::draining);
  job.left(1);
  advance(10ms);
  EXPECT_EQ(state(), S::releasing);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0"}));
  advance(100ms);
  EXPECT_EQ(state(), S::committed);
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0"}));
}

TEST_F(ShrinkTest, DeadlineDuringReconfigurationCancelsAndTheJobKeepsItsSize) {
  ShrinkOrder order;
  order.count = 1;
  order.deadline = 2500ms;
  ASSERT_TRUE(ctl->request_shrink(order).accepted);
  advance(2499ms);
  EXPECT_EQ(state(), S::reconfiguring);
  advance(1ms);
  EXPECT_EQ(state(), S::cancelling);
  EXPECT_EQ(job.calls().back(), "cancel 1");
  EXPECT_EQ(last_record().detail, "the resize passed its limit of 2.5 s; asked the job to drop it");
  job.cancelled(1);
  advance(10ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_TRUE(rm.releases().empty());
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
  // A left report that comes after the abort is refused and changes nothing.
  job.left(1);
  advance(10ms);
  EXPECT_TRUE(last_record().refused);
  EXPECT_EQ(last_record().detail, "drain_done refused: resize 1 is already aborted (the leaving ranks exited)");
  EXPECT_TRUE(rm.releases().empty());
}

// The job took the shrink (ranks_committed) but the leaving ranks never reported that they
// exited: at the deadline the shrink commits, the job's node list no longer holds the leavers'
// node, and the node is listed as unreleased (it is not given back while a rank may live there).
TEST_F(ShrinkTest, DeadlineWhileDrainingCommitsWithoutTheLeavingNodes) {
  ShrinkOrder order;
  order.count = 1;
  order.deadline = 2500ms;
  ASSERT_TRUE(ctl->request_shrink(order).accepted);
  advance(1000ms);
  job.committed(1, 1);
  ctl->poll();
  EXPECT_EQ(state(), S::draining);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
  advance(1500ms);
  EXPECT_EQ(state(), S::committed);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0"}));
  EXPECT_EQ(ctl->unreleased_nodes(), (Nodes{"node1"}));
  EXPECT_TRUE(rm.releases().empty());
  EXPECT_EQ(last_record().event, E::resize_deadline);
  EXPECT_EQ(last_record().detail,
            "the resize passed its limit of 2.5 s; the leaving ranks did not exit in time; node1 stays "
            "with job 42 until released by hand");
}

TEST_F(ShrinkTest, FailedReleaseAfterDrainCommitsAndListsTheNode) {
  rm.script_release(ReleaseScript::fail(RmCode::not_owner, "node1 is not part of job 42", 100ms));
  ASSERT_TRUE(shrink(1).accepted);
  job.left(1);  // before the first rank's commit: the shrink drains once that comes
  advance(10ms);
  EXPECT_EQ(state(), S::reconfiguring);
  job.committed(1, 1);
  advance(10ms);
  advance(100ms);
  EXPECT_EQ(state(), S::committed);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0"}));
  EXPECT_EQ(ctl->unreleased_nodes(), (Nodes{"node1"}));
  EXPECT_EQ(last_record().rm, (RmAnswerRecord{RmCode::not_owner, "node1 is not part of job 42", {}}));
  EXPECT_EQ(last_record().detail,
            "node1 is not part of job 42; node1 stays with job 42 until released by hand");
}

}  // namespace
}  // namespace bellows::controller::testing
