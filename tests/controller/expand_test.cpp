// Expansion: the full flow with its event log lines field by field, every abort path, and
// what must never get lost (granted nodes go back; a late grant is given back too).

#include "controller_fixture.hpp"

#include <stdexcept>

namespace bellows::controller::testing {
namespace {

using K = ResizeKind;
using S = ResizeState;
using E = ResizeEvent;
using Nodes = std::vector<std::string>;
constexpr auto kExpand = std::optional<ResizeKind>(ResizeKind::expand);
constexpr auto kPolicy = std::optional<Requester>(Requester::policy);
const std::string kWhy = "ready tasks above threshold";

TEST_F(ControllerTest, ExpandRunsRequestGrantDaemonsCommitAndLogsEveryStep) {
  const Outcome outcome = expand(2);
  EXPECT_TRUE(outcome.accepted);
  EXPECT_EQ(outcome.resize, 1u);
  EXPECT_EQ(outcome.text, "asked the fake resource manager for 2 nodes");
  EXPECT_EQ(ctl->next_timer(), clock.now() + 1500ms);

  advance(700ms);
  EXPECT_EQ(job.calls(), (Nodes{"start_daemons 1 node2,node3"}));
  clock.advance(300ms);
  job.daemon_up(1, "node3");
  ctl->poll();
  EXPECT_EQ(state(), S::granted);  // node2 not up yet
  clock.advance(200ms);
  job.daemon_up(1, "node2");
  ctl->poll();
  EXPECT_EQ(state(), S::reconfiguring);
  clock.advance(1000ms);
  job.committed(1, 4);
  ctl->poll();

  EXPECT_EQ(state(), S::committed);
  EXPECT_FALSE(ctl->active());
  EXPECT_EQ(ctl->next_timer(), std::nullopt);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1", "node2", "node3"}));
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1", "node2", "node3"}));
  EXPECT_EQ(job.calls(), (Nodes{"start_daemons 1 node2,node3", "add_ranks 1 node2,node3"}));
  EXPECT_TRUE(rm.releases().empty());

  const auto r = records();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0], line("2024-05-01T12:00:00.000Z", 1, kExpand, 2, E::request, S::none, S::requested, 0,
                       kPolicy, kWhy, std::nullopt, {}, "asked the fake resource manager for 2 nodes"));
  EXPECT_EQ(r[1], line("2024-05-01T12:00:00.700Z", 1, kExpand, 2, E::rm_granted, S::requested, S::granted,
                       0.7, kPolicy, kWhy,
                       RmAnswerRecord{RmCode::ok, "granted 2 of 2 nodes requested", {"node2", "node3"}},
                       {"node2", "node3"},
                       "granted 2 of 2 nodes requested; starting daemons on node2, node3"));
  EXPECT_EQ(r[2], line("2024-05-01T12:00:01.200Z", 1, kExpand, 2, E::daemons_ready, S::granted,
                       S::reconfiguring, 0.5, kPolicy, kWhy, std::nullopt, {"node2", "node3"},
                       "daemons up on node2, node3; adding ranks on node2, node3"));
  EXPECT_EQ(r[3], line("2024-05-01T12:00:02.200Z", 1, kExpand, 2, E::ranks_committed, S::reconfiguring,
                       S::committed, 1.0, kPolicy, kWhy, std::nullopt, {"node2", "node3"},
                       "the job runs on 4 ranks; job 42 runs on 4 nodes"));
}

TEST_F(ControllerTest, PartialGrantGrowsByWhatWasGranted) {
  rm.script_expand(ExpandScript::partial_grant(1, 700ms));
  ASSERT_TRUE(expand(3).accepted);
  advance(700ms);
  EXPECT_EQ(job.calls(), (Nodes{"start_daemons 1 node2"}));
  job.daemon_up(1, "node2");
  advance(10ms);
  job.committed(1, 3);
  advance(10ms);
  EXPECT_EQ(state(), S::committed);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1", "node2"}));
  const auto r = records();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[1].count, 3u);
  EXPECT_EQ(r[1].nodes, (Nodes{"node2"}));
  EXPECT_EQ(r[1].rm, (RmAnswerRecord{RmCode::ok, "granted 1 of 1 node requested", {"node2"}}));
}

TEST_F(ControllerTest, DeniedExpandAbortsAndTheJobKeepsItsSize) {
  rm.script_expand(ExpandScript::deny("2 nodes requested, 0 idle", 700ms));
  ASSERT_TRUE(expand(2).accepted);
  advance(700ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(last_record(), line("2024-05-01T12:00:00.700Z", 1, kExpand, 2, E::rm_denied, S::requested,
                                S::aborted, 0.7, kPolicy, kWhy,
                                RmAnswerRecord{RmCode::denied, "2 nodes requested, 0 idle", {}}, {},
                                "2 nodes requested, 0 idle"));
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
  EXPECT_TRUE(job.calls().empty());
  EXPECT_TRUE(rm.releases().empty());
  // The next resize may start.
  EXPECT_EQ(expand(1).resize, 2u);
  EXPECT_EQ(state(), S::requested);
}

TEST_F(ControllerTest, AnErrorAnswerOrAnEmptyGrantCountsAsDenied) {
  (void)rm.pool().allocate("other", 6);  // nothing idle: the fake's grant fails in the pool
  ASSERT_TRUE(expand(1).accepted);
  advance(700ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(last_record().event, E::rm_denied);
  EXPECT_EQ(last_record().rm->code, RmCode::denied);
  EXPECT_EQ(last_record().detail, "allocation for job 42: 1 node requested, 0 idle in node0..node7");
}

TEST_F(ControllerTest, ResourceManagerThatNeverAnswersTimesOutAndTheRequestIsWithdrawn) {
  rm.script_expand(ExpandScript::never());
  ASSERT_TRUE(expand(2).accepted);
  advance(1499ms);
  EXPECT_EQ(state(), S::requested);
  advance(1ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(rm.cancel_calls(), (std::vector<RmRequestId>{1}));
  EXPECT_EQ(rm.unanswered(), 0u);
  EXPECT_EQ(last_record(), line("2024-05-01T12:00:01.500Z", 1, kExpand, 2, E::rm_timeout, S::requested,
                                S::aborted, 1.5, kPolicy, kWhy, std::nullopt, {},
                                "no answer from the resource manager within 1.5 s; "
                                "request withdrawn from the resource manager"));
}

TEST_F(ControllerTest, TimeoutAnsweredByTheResourceManagerAborts) {
  rm.script_expand(ExpandScript::answer_timeout("expansion job still pending after 1 s", 1000ms));
  ASSERT_TRUE(expand(2).accepted);
  advance(1000ms);
  EXPECT_EQ(state(), S::aborted);
  const EventRecord r = last_record();
  EXPECT_EQ(r.event, E::rm_timeout);
  EXPECT_EQ(r.rm, (RmAnswerRecord{RmCode::timeout, "expansion job still pending after 1 s", {}}));
  EXPECT_EQ(r.detail,
            "expansion job still pending after 1 s");
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
}

TEST_F(ControllerTest, DaemonThatNeverComesUpAbortsAndGivesTheGrantedNodesBack) {
  expand_to_granted();
  job.daemon_up(1, "node2");
  advance(1999ms);
  EXPECT_EQ(state(), S::granted);
  advance(1ms);
  EXPECT_EQ(state(), S::aborting);
  EXPECT_EQ(job.calls(), (Nodes{"start_daemons 1 node2,node3", "withdraw 1 node2,node3"}));
  EXPECT_EQ(rm.releases(), (std::vector<ReleaseCall>{{"42", {"node2", "node3"}}}));
  EXPECT_EQ(last_record(), line("2024-05-01T12:00:02.700Z", 1, kExpand, 2, E::daemon_start_timeout,
                                S::granted, S::aborting, 2.0, kPolicy, kWhy, std::nullopt,
                                {"node2", "node3"},
                                "no daemon came up on node3 within 2 s; "
                                "giving node2, node3 back to the resource manager"));
  advance(100ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(last_record(), line("2024-05-01T12:00:02.800Z", 1, kExpand, 2, E::release_done, S::aborting,
                                S::aborted, 0.1, kPolicy, kWhy,
                                RmAnswerRecord{RmCode::ok, "released 2 nodes of job 42", {}},
                                {"node2", "node3"}, "released 2 nodes of job 42"));
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1"}));
  EXPECT_EQ(rm.pool().idle_nodes().size(), 6u);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
  EXPECT_TRUE(ctl->unreleased_nodes().empty());
}

TEST_F(ControllerTest, RankDeathDuringReconfigurationCancelsAndGivesTheNodesBackOnceTheJobDropsIt) {
  expand_to_reconfiguring();
  job.died(1, "node3", "exit code 134");
  advance(10ms);
  EXPECT_EQ(state(), S::cancelling);
  EXPECT_EQ(last_record().detail, "a rank on node3 died: exit code 134; asked the job to drop it");
  EXPECT_EQ(job.calls().back(), "cancel 1");
  EXPECT_TRUE(rm.releases().empty());  // nothing goes back before the job answered
  job.cancelled(1);
  advance(10ms);
  EXPECT_EQ(state(), S::aborting);
  EXPECT_EQ(last_record().detail,
            "the job dropped the resize before carrying it out; giving node2, node3 back to the "
            "resource manager");
  EXPECT_EQ(last_record().nodes, (Nodes{"node2", "node3"}));
  EXPECT_EQ(job.calls().back(), "withdraw 1 node2,node3");
  advance(100ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1"}));
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
}

// The job gave the expand up because a rank it was adding was lost between the merge and the
// grown communicator's confirmation (docs/recovery.md, "A loss during the expand itself"): its
// refusal withdraws the new nodes and gives them back. The lost rank was never one of the
// job's, so its daemon's word of the death, arriving once the nodes are gone, is refused and is
// no failure of the job.
TEST_F(ControllerTest, AnExpandGivenUpForALostNewRankGivesItsNodesBackAndIsNoFailure) {
  expand_to_reconfiguring();
  const std::string given_up =
      "expand by 2 given up: ranks {3} were lost while the new ranks of the expand joined (the accept and "
      "merge, their setup), before every member confirmed the grown communicator";
  job.refused(1, given_up);
  advance(10ms);
  EXPECT_EQ(state(), S::aborting);
  EXPECT_EQ(last_record().event, E::job_refused);
  EXPECT_EQ(last_record().detail, "the job refused the resize: " + given_up + "; giving node2, node3 back to the "
                                  "resource manager");
  EXPECT_EQ(job.calls().back(), "withdraw 1 node2,node3");
  advance(100ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1"}));
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
  const std::size_t lines = records().size();
  job.died(1, "node3", "exit status 9");
  advance(10ms);
  ASSERT_EQ(records().size(), lines + 1);
  EXPECT_TRUE(last_record().refused);
  EXPECT_EQ(last_record().detail, "rank_died refused: node3 is not a node of job 42 (a rank on node3 died: exit "
                                  "status 9)");
  EXPECT_TRUE(ctl->failures().empty());
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
}

// The same loss, its daemon's word first: the expand is called off, and the job's refusal that
// follows gives the nodes back, with no failure either.
TEST_F(ControllerTest, ANewRanksDeathToldBeforeTheJobGaveTheExpandUpIsNoFailure) {
  expand_to_reconfiguring();
  job.died(1, "node3", "exit status 9");
  advance(10ms);
  EXPECT_EQ(state(), S::cancelling);
  job.refused(1, "expand by 2 given up: ranks {3} were lost while the new ranks of the expand joined");
  advance(10ms);
  EXPECT_EQ(state(), S::aborting);
  EXPECT_EQ(last_record().event, E::job_refused);
  EXPECT_EQ(job.calls().back(), "withdraw 1 node2,node3");
  advance(100ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_TRUE(ctl->failures().empty());
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1"}));
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
}

// The job carried the expansion out before the cancellation reached it: its commit stands,
// and the controller counts the new nodes as the job does.
TEST_F(ControllerTest, ACancelledExpansionTheJobAlreadyCarriedOutCommits) {
  expand_to_reconfiguring();
  ASSERT_TRUE(ctl->deliver(0, E::resize_deadline, "limit passed").accepted);
  EXPECT_EQ(state(), S::cancelling);
  job.committed(1, 4);
  advance(10ms);
  EXPECT_EQ(state(), S::committed);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1", "node2", "node3"}));
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1", "node2", "node3"}));
  EXPECT_TRUE(rm.releases().empty());
  EXPECT_EQ(job.calls(), (Nodes{"start_daemons 1 node2,node3", "add_ranks 1 node2,node3", "cancel 1"}));
}

// A job that never answers (its first rank is gone): the controller decides alone after
// cancel_timeout, and says so.
TEST_F(ControllerTest, ACancellationTheJobDoesNotAnswerTimesOutAndGivesTheNodesBack) {
  expand_to_reconfiguring();
  ASSERT_TRUE(ctl->deliver(0, E::resize_deadline, "limit passed").accepted);
  advance(3999ms);
  EXPECT_EQ(state(), S::cancelling);
  advance(1ms);
  EXPECT_EQ(state(), S::aborting);
  EXPECT_EQ(last_record().event, E::cancel_timeout);
  EXPECT_EQ(last_record().detail,
            "the job did not answer the cancellation within 4 s; giving node2, node3 back to the "
            "resource manager");
  advance(100ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
}

TEST_F(ControllerTest, ResizeDeadlineDuringReconfigurationCancelsAndGivesTheNodesBack) {
  ExpandOrder order;
  order.count = 2;
  order.reason = kWhy;
  order.deadline = 1500ms;
  ASSERT_TRUE(ctl->request_expand(order).accepted);
  advance(700ms);
  job.daemon_up(1, "node2");
  job.daemon_up(1, "node3");
  advance(100ms);
  ASSERT_EQ(state(), S::reconfiguring);
  advance(699ms);
  EXPECT_EQ(state(), S::reconfiguring);
  advance(1ms);
  EXPECT_EQ(state(), S::cancelling);
  EXPECT_EQ(last_record(), line("2024-05-01T12:00:01.500Z", 1, kExpand, 2, E::resize_deadline,
                                S::reconfiguring, S::cancelling, 0.7, kPolicy, kWhy, std::nullopt,
                                {"node2", "node3"},
                                "the resize passed its limit of 1.5 s; asked the job to drop it"));
  job.cancelled(1);
  advance(10ms);
  EXPECT_EQ(state(), S::aborting);
  advance(100ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1"}));
}

TEST_F(ControllerTest, ResizeDeadlineWhileRequestedWithdrawsTheRequest) {
  rm.script_expand(ExpandScript::never());
  ExpandOrder order;
  order.count = 2;
  order.deadline = 1200ms;
  ASSERT_TRUE(ctl->request_expand(order).accepted);
  advance(1200ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(last_record().event, E::resize_deadline);
  EXPECT_EQ(last_record().detail,
            "the resize passed its limit of 1.2 s; request withdrawn from the resource manager");
  EXPECT_EQ(rm.cancel_calls(), (std::vector<RmRequestId>{1}));
}

TEST_F(ControllerTest, ResourceManagerIsAskedToAnswerBeforeTheResizeLimit) {
  // rm_request_timeout 1 s and rm_answer_grace 0.5 s: a resize limited to 1.2 s leaves the
  // resource manager 0.7 s; one limited to 10 s keeps the configured 1 s.
  rm.script_expand(ExpandScript::never());
  ExpandOrder order;
  order.count = 1;
  order.deadline = 1200ms;
  ASSERT_TRUE(ctl->request_expand(order).accepted);
  EXPECT_EQ(rm.expand_requests().back().timeout, 700ms);
  advance(1200ms);
  ASSERT_EQ(state(), S::aborted);
  order.deadline = 10000ms;
  ASSERT_TRUE(ctl->request_expand(order).accepted);
  EXPECT_EQ(rm.expand_requests().back().timeout, 1000ms);
}

TEST_F(ControllerTest, ReleaseThatNeverAnswersLeavesTheNodesListedAsUnreleased) {
  rm.script_release(ReleaseScript::never());
  ExpandOrder order;
  order.count = 2;
  order.deadline = 4000ms;
  ASSERT_TRUE(ctl->request_expand(order).accepted);
  advance(700ms);
  advance(2000ms);  // daemon_start_timeout at 2.7 s
  ASSERT_EQ(state(), S::aborting);
  advance(1300ms);  // the deadline at 4 s changes nothing while the nodes go back
  EXPECT_EQ(state(), S::aborting);
  EXPECT_EQ(last_record(), line("2024-05-01T12:00:04.000Z", 1, kExpand, 2, E::resize_deadline,
                                S::aborting, S::aborting, 1.3, kPolicy, "", std::nullopt,
                                {"node2", "node3"}, "the resize passed its limit of 4 s"));
  advance(1700ms);  // release timeout 3 s after 2.7 s
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(last_record().event, E::release_failed);
  EXPECT_EQ(last_record().rm, std::nullopt);
  EXPECT_EQ(last_record().detail,
            "no answer from the resource manager to the release of node2, node3 within 3 s; "
            "node2, node3 stay with job 42 until released by hand");
  EXPECT_EQ(ctl->unreleased_nodes(), (Nodes{"node2", "node3"}));
}

TEST_F(ControllerTest, FailedReleaseAfterAbortListsTheNodes) {
  rm.script_release(ReleaseScript::fail(RmCode::unavailable, "slurmctld not responding", 100ms));
  expand_to_granted();
  advance(2000ms);
  advance(100ms);
  EXPECT_EQ(state(), S::aborted);
  EXPECT_EQ(last_record().rm, (RmAnswerRecord{RmCode::unavailable, "slurmctld not responding", {}}));
  EXPECT_EQ(last_record().detail,
            "slurmctld not responding; node2, node3 stay with job 42 until released by hand");
  EXPECT_EQ(ctl->unreleased_nodes(), (Nodes{"node2", "node3"}));
}

TEST_F(ControllerTest, LateReleaseAnswerTakesTheNodesOffTheUnreleasedList) {
  rm.script_release(ReleaseScript::pool(5000ms));
  expand_to_granted();
  advance(2000ms);  // aborting at 2.7 s, release answer due at 7.7 s, timer at 5.7 s
  advance(3000ms);
  ASSERT_EQ(state(), S::aborted);
  ASSERT_EQ(ctl->unreleased_nodes(), (Nodes{"node2", "node3"}));
  advance(2000ms);
  EXPECT_TRUE(ctl->unreleased_nodes().empty());
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1"}));
  const EventRecord r = last_record();
  EXPECT_TRUE(r.refused);
  EXPECT_EQ(r.event, E::release_done);
  EXPECT_EQ(r.from, S::aborted);
  EXPECT_EQ(r.to, S::aborted);
  EXPECT_EQ(r.detail,
            "release_done refused: resize 1 no longer waits for this answer; node2, node3 went back "
            "after all (released 2 nodes of job 42)");
}

TEST_F(ControllerTest, GrantArrivingAfterTheRequestWasWithdrawnIsGivenBack) {
  ExpandScript late = ExpandScript::grant(3000ms);
  late.ignore_cancel = true;
  rm.script_expand(late);
  ASSERT_TRUE(expand(2).accepted);
  advance(1500ms);
  ASSERT_EQ(state(), S::aborted);
  advance(1500ms);  // the grant arrives anyway
  EXPECT_EQ(rm.releases(), (std::vector<ReleaseCall>{{"42", {"node2", "node3"}}}));
  const EventRecord r = last_record();
  EXPECT_TRUE(r.refused);
  EXPECT_EQ(r.event, E::rm_granted);
  EXPECT_EQ(r.nodes, (Nodes{"node2", "node3"}));
  EXPECT_EQ(r.detail,
            "rm_granted refused: resize 1 no longer waits for nodes; giving node2, node3 back "
            "(granted 2 of 2 nodes requested)");
  advance(100ms);
  EXPECT_EQ(rm.pool().nodes_of("42"), (Nodes{"node0", "node1"}));
  EXPECT_EQ(ctl->nodes(), (Nodes{"node0", "node1"}));
  EXPECT_TRUE(ctl->unreleased_nodes().empty());
}

TEST_F(ControllerTest, FailedGiveBackOfALateGrantListsTheNodes) {
  ExpandScript late = ExpandScript::grant(3000ms);
  late.ignore_cancel = true;
  rm.script_expand(late);
  rm.script_release(ReleaseScript::fail(RmCode::unavailable, "slurmctld not responding", 100ms));
  ASSERT_TRUE(expand(2).accepted);
  advance(1500ms);
  advance(1500ms);
  advance(100ms);
  EXPECT_EQ(ctl->unreleased_nodes(), (Nodes{"node2", "node3"}));
  EXPECT_EQ(last_record().event, E::release_failed);
  EXPECT_TRUE(last_record().refused);
  EXPECT_EQ(last_record().detail,
            "release_failed refused: giving back the late grant failed: slurmctld not responding; "
            "node2, node3 stay with job 42 until released by hand");
}

TEST_F(ControllerTest, SecondResizeWhileOneRunsIsRefusedWithTheReason) {
  ASSERT_TRUE(expand(2).accepted);
  const Outcome second = expand(1, Requester::operator_, "bellows resize 42 +1");
  EXPECT_FALSE(second.accepted);
  EXPECT_EQ(second.resize, 2u);
  EXPECT_EQ(second.text,
            "resize 2 refused: resize 1 (expand by 2, asked by policy) is in flight, in state requested");
  EXPECT_EQ(last_record(), line("2024-05-01T12:00:00.000Z", 2, kExpand, 1, E::request, S::none, S::none, 0,
                                Requester::operator_, "bellows resize 42 +1", std::nullopt, {},
                                second.text, true));
  advance(700ms);
  const Outcome third = shrink(1, Requester::application, "done with phase 1");
  EXPECT_FALSE(third.accepted);
  EXPECT_EQ(third.text,
            "resize 3 refused: resize 1 (expand by 2, asked by policy) is in flight, in state granted");
  EXPECT_EQ(rm.expand_requests().size(), 1u);
  EXPECT_EQ(job.calls(), (Nodes{"start_daemons 1 node2,node3"}));
  EXPECT_EQ(ctl->active()->id, 1u);
  // Once it is over, the next one starts.
  job.daemon_up(1, "node2");
  job.daemon_up(1, "node3");
  advance(10ms);
  job.committed(1, 4);
  advance(10ms);
  EXPECT_TRUE(expand(1).accepted);
  EXPECT_EQ(ctl->active()->id, 4u);
}

TEST_F(ControllerTest, MalformedExpandOrdersAreRefused) {
  EXPECT_EQ(expand(0).text, "resize 1 refused: expand count must be at least 1, got 0");
  ExpandOrder order;
  order.count = 1;
  order.deadline = 0ms;
  EXPECT_EQ(ctl->request_expand(order).text, "resize 2 refused: resize deadline must be positive, got 0 ms");
  EXPECT_EQ(records().size(), 2u);
  EXPECT_TRUE(last_record().refused);
  EXPECT_FALSE(ctl->active());
  EXPECT_TRUE(rm.expand_requests().empty());
}

TEST_F(ControllerTest, DaemonReportsThatDoNotFitAreRefused) {
  expand_to_granted();
  job.daemon_up(1, "node7");
  advance(10ms);
  EXPECT_EQ(last_record().detail,
            "daemons_ready refused: resize 1 started no daemon on node7 (daemon on node7 came up)");
  EXPECT_EQ(last_record().nodes, (Nodes{"node7"}));
  job.daemon_up(1, "node2");
  job.daemon_up(1, "node2");
  advance(10ms);
  EXPECT_EQ(last_record().detail,
            "daemons_ready refused: the daemon on node2 was already up (daemon on node2 came up)");
  EXPECT_EQ(state(), S::granted);
  job.daemon_up(1, "node3");
  advance(10ms);
  EXPECT_EQ(state(), S::reconfiguring);
  job.daemon_up(1, "node3");  // too late to matter: refused by the table
  advance(10ms);
  EXPECT_EQ(last_record().detail,
            "daemons_ready refused: daemons_ready is not allowed for an expand in state reconfiguring "
            "(daemon on node3 came up)");
}

TEST_F(ControllerTest, EventsForNoOrAnotherResizeAreRefused) {
  EXPECT_EQ(ctl->deliver(5, E::drain_done).text, "drain_done refused: there is no resize 5");
  // (A rank's death reported by the job with no resize in flight is a failure: failure_test.cpp.)
  EXPECT_EQ(ctl->deliver(0, E::rank_died, "a rank on node1 died: signal 9").text,
            "rank_died refused: no resize is in flight (a rank on node1 died: signal 9)");
  EXPECT_EQ(last_record(), line("2024-05-01T12:00:00.000Z", 0, std::nullopt, 0, E::rank_died, S::none,
                                S::none, 0, std::nullopt, "", std::nullopt, {},
                                "rank_died refused: no resize is in flight (a rank on node1 died: signal 9)",
                                true));
  rm.script_expand(ExpandScript::deny("no", 700ms));
  ASSERT_TRUE(expand(2).accepted);
  advance(700ms);
  ASSERT_TRUE(expand(2).accepted);
  EXPECT_EQ(ctl->deliver(1, E::ranks_committed).text, "ranks_committed refused: resize 1 is already aborted");
  EXPECT_EQ(last_record().from, S::aborted);
  EXPECT_EQ(last_record().kind, kExpand);
  EXPECT_EQ(ctl->deliver(7, E::rank_died).text, "rank_died refused: resize 7 is not in flight (resize 2 is)");
  EXPECT_EQ(ctl->deliver(0, E::rm_granted).text, "rm_granted refused: rm_granted cannot be delivered from outside");
  EXPECT_EQ(ctl->deliver(0, E::request).text, "request refused: request cannot be delivered from outside");
  EXPECT_EQ(state(), S::requested);
}

TEST_F(ControllerTest, ConstructorRejectsWhatCannotBeAJob) {
  auto make = [&](std::string id, Nodes nodes, ResizeLimits limits) {
    ResizeController c(std::move(id), std::move(nodes), rm, job, clock, log, limits);
  };
  const auto limits = test_limits();
  auto message = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "no exception";
  };
  EXPECT_EQ(message([&] { make("", {"node0"}, limits); }), "resize controller: the job id is empty");
  EXPECT_EQ(message([&] { make("42", {}, limits); }), "resize controller: job 42 has no nodes");
  EXPECT_EQ(message([&] { make("42", {"node0", "node0"}, limits); }),
            "resize controller: job 42: node node0 listed twice");
  ResizeLimits zero = limits;
  zero.daemon_start = 0ms;
  EXPECT_EQ(message([&] { make("42", {"node0"}, zero); }),
            "controller.daemon_start_timeout must be positive, got 0 ms");
}

TEST_F(ControllerTest, AnswersAfterTheControllerIsGoneAreDropped) {
  ASSERT_TRUE(expand(2).accepted);
  ctl.reset();
  EXPECT_FALSE(job.has_listener());
  clock.advance(700ms);
  rm.progress();  // the grant's callback must not reach the destroyed controller
  job.left(1);
  job.progress();
  EXPECT_EQ(rm.unanswered(), 0u);
}

TEST(ResizeLimits, EachSettingIsDeclaredOnceWithDefaultAndHelp) {
  const ResizeLimits d = ResizeLimits::defaults();
  EXPECT_EQ(d.rm_request, 10000ms);
  EXPECT_EQ(d.rm_answer_grace, 2000ms);
  EXPECT_EQ(d.daemon_start, 15000ms);
  EXPECT_EQ(d.release, 30000ms);
  EXPECT_EQ(d.resize_deadline, 120000ms);
  for (const ResizeSetting& s : resize_settings()) EXPECT_FALSE(s.help.empty()) << s.key;
  ResizeLimits l = d;
  try {
    set_limit(l, "controller.deamon_start_timeout", 1000ms);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown controller setting 'controller.deamon_start_timeout' (known: "
                 "controller.rm_request_timeout, controller.rm_answer_grace, "
                 "controller.daemon_start_timeout, controller.release_timeout, "
                 "controller.cancel_timeout, controller.resize_deadline)");
  }
  try {
    set_limit(l, "controller.release_timeout", -5ms);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "controller.release_timeout must be positive, got -5 ms");
  }
  set_limit(l, "controller.release_timeout", 1234ms);
  EXPECT_EQ(l.release, 1234ms);
}

}  // namespace
}  // namespace bellows::controller::testing
