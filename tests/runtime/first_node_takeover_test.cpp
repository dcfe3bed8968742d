// Which daemon takes a Slurm job over once its first node is lost (first_node_takeover.hpp).
#include <bellows/runtime/first_node_takeover.hpp>

#include <gtest/gtest.h>

#include <cmath>

namespace {

using bellows::runtime::FirstNodeLossFacts;
using bellows::runtime::keep_ranks_for_takeover;
using bellows::runtime::lost_ranks_after_takeover;
using bellows::runtime::TakeoverLossAction;
using bellows::runtime::TakeoverLossFacts;
using bellows::runtime::plan_first_node_takeover;
using bellows::runtime::SilentControllerFacts;
using bellows::runtime::takeover_grace_seconds;

/// A no-kill batch job of 3 nodes whose batch host n1 failed: Slurm took it out of the job.
FirstNodeLossFacts first_node_lost() {
  return {"RUNNING", true, "n1", "DOWN+NOT_RESPONDING", {"n2", "n3"}};
}

TEST(FirstNodeTakeover, TheFirstNodeLeftInSlurmsOrderTakesTheJobOver) {
  const auto plan = plan_first_node_takeover(first_node_lost());
  EXPECT_TRUE(plan.take_over);
  EXPECT_EQ(plan.node, "n2");
  EXPECT_EQ(plan.why,
            "the job's first node n1 (its batch host, where `bellows run` ran) is DOWN+NOT_RESPONDING: Slurm took "
            "it out of the job (no-kill), and the batch script and the job's controller died with it; the job runs "
            "on 2 nodes, and the daemon of n2, the first of them, starts a controller that takes it over");
}

TEST(FirstNodeTakeover, EveryDaemonGetsTheSameAnswerFromTheSameFacts) {
  FirstNodeLossFacts facts = first_node_lost();
  facts.job_nodes = {"n4", "n2", "n3"};  // slurmctld's order, not the names'
  EXPECT_EQ(plan_first_node_takeover(facts).node, "n4");
  EXPECT_EQ(plan_first_node_takeover(facts).node, plan_first_node_takeover(facts).node);
  facts.job_nodes = {"n3"};
  const auto plan = plan_first_node_takeover(facts);
  EXPECT_TRUE(plan.take_over);
  EXPECT_EQ(plan.node, "n3");
  EXPECT_NE(plan.why.find("the job runs on 1 node, and the daemon of n3"), std::string::npos) << plan.why;
}

TEST(FirstNodeTakeover, ABatchHostThatIsNotDownIsNoLoss) {
  FirstNodeLossFacts facts = first_node_lost();
  facts.batch_host_state = "MIXED";
  auto plan = plan_first_node_takeover(facts);
  EXPECT_FALSE(plan.take_over);
  EXPECT_EQ(plan.why, "the job's batch host n1 is MIXED");
  facts.batch_host_state = "";
  EXPECT_EQ(plan_first_node_takeover(facts).why, "the job's batch host n1 is unknown");
}

TEST(FirstNodeTakeover, ABatchHostStillInTheJobIsLeftToSlurm) {
  FirstNodeLossFacts facts = first_node_lost();
  facts.job_nodes = {"n1", "n2", "n3"};
  const auto plan = plan_first_node_takeover(facts);
  EXPECT_FALSE(plan.take_over);
  EXPECT_EQ(plan.why, "the job's batch host n1 is DOWN but still one of its nodes");
}

TEST(FirstNodeTakeover, OnlyARunningBatchJobWithNodesLeftIsTakenOver) {
  FirstNodeLossFacts facts = first_node_lost();
  facts.job_state = "COMPLETING";
  EXPECT_EQ(plan_first_node_takeover(facts).why, "the job is COMPLETING");
  facts.job_state = "";
  EXPECT_EQ(plan_first_node_takeover(facts).why, "the job is unknown");
  facts = first_node_lost();
  facts.batch_job = false;
  EXPECT_EQ(plan_first_node_takeover(facts).why, "the job is not a batch job");
  facts = first_node_lost();
  facts.batch_host = "(null)";
  EXPECT_EQ(plan_first_node_takeover(facts).why, "the job names no batch host");
  facts = first_node_lost();
  facts.job_nodes.clear();
  const auto plan = plan_first_node_takeover(facts);
  EXPECT_FALSE(plan.take_over);
  EXPECT_EQ(plan.why, "the job has no node left");
}

/// The same job seen by a daemon on n2 whose controller's host n1 has answered nothing for
/// 10 s, before slurmctld noticed (its pings come every third of SlurmdTimeout).
SilentControllerFacts batch_host_silent() {
  FirstNodeLossFacts job = first_node_lost();
  job.batch_host_state = "ALLOCATED";
  job.job_nodes = {"n1", "n2", "n3"};
  return {job, true, 10.0, 450.0};
}

TEST(FirstNodeTakeover, RanksAreKeptWhileSlurmctldHasNotFoundTheSilentBatchHost) {
  SilentControllerFacts facts = batch_host_silent();
  auto verdict = keep_ranks_for_takeover(facts);
  EXPECT_TRUE(verdict.keep_ranks);
  EXPECT_EQ(verdict.why,
            "slurmctld says the job's batch host n1 is ALLOCATED (it sets a silent node DOWN after SlurmdTimeout): "
            "the ranks are kept for a takeover for at most the takeover grace of 450 s");
  facts.slurmctld_said->batch_host_state = "ALLOCATED+NOT_RESPONDING";
  facts.silent_seconds = 449.9;
  EXPECT_TRUE(keep_ranks_for_takeover(facts).keep_ranks);
  facts.slurmctld_said->batch_host_state = "";
  verdict = keep_ranks_for_takeover(facts);
  EXPECT_TRUE(verdict.keep_ranks);
  EXPECT_NE(verdict.why.find("batch host n1 is unknown"), std::string::npos) << verdict.why;
}

TEST(FirstNodeTakeover, RanksAreKeptOnceTheBatchHostIsDownWhateverTheGrace) {
  SilentControllerFacts facts = batch_host_silent();
  facts.slurmctld_said = first_node_lost();  // DOWN, out of the job
  facts.silent_seconds = 1000.0;
  auto verdict = keep_ranks_for_takeover(facts);
  EXPECT_TRUE(verdict.keep_ranks);
  EXPECT_EQ(verdict.why, "slurmctld says the job's batch host n1 is DOWN+NOT_RESPONDING: the ranks are kept for "
                         "the controller that takes the job over");
  facts.slurmctld_said->job_nodes = {"n1", "n2", "n3"};  // DOWN, not taken out of the job yet
  EXPECT_TRUE(keep_ranks_for_takeover(facts).keep_ranks);
}

TEST(FirstNodeTakeover, RanksEndOnceTheGracePassesWithTheBatchHostNotDown) {
  SilentControllerFacts facts = batch_host_silent();
  facts.silent_seconds = 450.0;
  auto verdict = keep_ranks_for_takeover(facts);
  EXPECT_FALSE(verdict.keep_ranks);
  EXPECT_EQ(verdict.why, "slurmctld still says the job's batch host n1 is ALLOCATED after 450 s of silence, past the "
                         "takeover grace of 450 s: only this node cannot reach it");
  facts.grace_seconds = 0.0;
  facts.silent_seconds = 5.0;
  EXPECT_FALSE(keep_ranks_for_takeover(facts).keep_ranks);
}

TEST(FirstNodeTakeover, RanksEndWhenSlurmctldSaysTheJobIsGoneOrEnding) {
  SilentControllerFacts facts = batch_host_silent();
  for (const char* state : {"COMPLETING", "CANCELLED", "PENDING", "REQUEUED"}) {
    facts.slurmctld_said->job_state = state;
    const auto verdict = keep_ranks_for_takeover(facts);
    EXPECT_FALSE(verdict.keep_ranks) << state;
    EXPECT_EQ(verdict.why, std::string("slurmctld says the job is ") + state);
  }
  facts.slurmctld_said->job_state = "";  // "Invalid job id": slurmctld no longer knows it
  EXPECT_EQ(keep_ranks_for_takeover(facts).why, "slurmctld says the job is unknown");
  EXPECT_FALSE(keep_ranks_for_takeover(facts).keep_ranks);
}

TEST(FirstNodeTakeover, RanksEndWhenNoTakeoverCanCome) {
  SilentControllerFacts facts = batch_host_silent();
  facts.slurmctld_said.reset();
  auto verdict = keep_ranks_for_takeover(facts);
  EXPECT_FALSE(verdict.keep_ranks);
  EXPECT_EQ(verdict.why, "slurmctld does not answer either: this node is cut off, no takeover to wait for");
  facts = batch_host_silent();
  facts.controller_on_batch_host = false;
  EXPECT_EQ(keep_ranks_for_takeover(facts).why,
            "the controller took the job over after its first node was lost: no takeover to wait for");
  facts = batch_host_silent();
  facts.slurmctld_said->batch_job = false;
  EXPECT_EQ(keep_ranks_for_takeover(facts).why, "the job is not a batch job: no takeover to wait for");
  facts = batch_host_silent();
  facts.slurmctld_said->batch_host = "(null)";
  EXPECT_EQ(keep_ranks_for_takeover(facts).why, "the job names no batch host: no takeover to wait for");
  EXPECT_FALSE(keep_ranks_for_takeover(facts).keep_ranks);
}

TEST(FirstNodeTakeover, TheGraceIsConfiguredOrOneAndAHalfSlurmdTimeouts) {
  EXPECT_DOUBLE_EQ(takeover_grace_seconds(std::nullopt, 300.0), 450.0);
  EXPECT_DOUBLE_EQ(takeover_grace_seconds(std::nullopt, 20.0), 30.0);
  EXPECT_DOUBLE_EQ(takeover_grace_seconds(std::nullopt, std::nullopt), 450.0);
  EXPECT_DOUBLE_EQ(takeover_grace_seconds(std::nullopt, 0.0), 450.0);
  EXPECT_DOUBLE_EQ(takeover_grace_seconds(std::nullopt, std::nan("")), 450.0);
  EXPECT_DOUBLE_EQ(takeover_grace_seconds(60.0, 300.0), 60.0);
  EXPECT_DOUBLE_EQ(takeover_grace_seconds(0.0, 300.0), 0.0);
  EXPECT_DOUBLE_EQ(takeover_grace_seconds(-5.0, 300.0), 0.0);
}

/// The controller that took the job over after n1, its first node, went silent: n2 and n3 are
/// back and report ranks 1 and 2, as before the loss (MPI told them nothing).
TakeoverLossFacts silent_first_node_lost() {
  TakeoverLossFacts facts;
  facts.lost_node = "n1";
  facts.lost_node_ranks = {0};
  facts.survivor_ranks = {1, 2};
  facts.every_survivor_reported = true;
  return facts;
}

TEST(FirstNodeTakeover, TheSilentFirstNodesRankIsDeclaredLostOnceTheSurvivorsReported) {
  const auto declared = lost_ranks_after_takeover(silent_first_node_lost());
  EXPECT_EQ(declared.action, TakeoverLossAction::declare);
  EXPECT_EQ(declared.ranks, (std::vector<std::uint32_t>{0}));
  EXPECT_FALSE(declared.lower_job_size);
  EXPECT_EQ(declared.why,
            "rank 0 on n1, the job's first node, lost before this controller took the job over: no survivor "
            "reports it as its own; the job's size counts them out already");
}

TEST(FirstNodeTakeover, NothingIsDeclaredForRanksTheSurvivorsRenumberedAlready) {
  // n1 was killed: MPI failed the survivors' calls, they rebuilt without rank 0 and are 0 and 1.
  TakeoverLossFacts facts = silent_first_node_lost();
  facts.survivor_ranks = {0, 1};
  const auto declared = lost_ranks_after_takeover(facts);
  EXPECT_EQ(declared.action, TakeoverLossAction::nothing);
  EXPECT_TRUE(declared.ranks.empty());
  EXPECT_FALSE(declared.lower_job_size);
  EXPECT_EQ(declared.why,
            "every rank n1 held (rank 0) is reported by a survivor as its own: the survivors found the loss and "
            "renumbered already");
}

TEST(FirstNodeTakeover, OnlyTheLostRanksNoSurvivorReportsAreDeclared) {
  TakeoverLossFacts facts = silent_first_node_lost();
  facts.lost_node_ranks = {3, 0, 3};
  facts.survivor_ranks = {0, 1, 2};
  const auto declared = lost_ranks_after_takeover(facts);
  EXPECT_EQ(declared.action, TakeoverLossAction::declare);
  EXPECT_EQ(declared.ranks, (std::vector<std::uint32_t>{3}));
  facts.lost_node_ranks = {2, 0};
  facts.survivor_ranks = {1};
  EXPECT_EQ(lost_ranks_after_takeover(facts).ranks, (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(lost_ranks_after_takeover(facts).why.substr(0, 17), "ranks 0, 2 on n1,");
}

TEST(FirstNodeTakeover, TheDeclarationWaitsForEverySurvivorUntilTheReturnWindowIsOver) {
  TakeoverLossFacts facts = silent_first_node_lost();
  facts.every_survivor_reported = false;
  facts.survivor_ranks = {1};
  auto declared = lost_ranks_after_takeover(facts);
  EXPECT_EQ(declared.action, TakeoverLossAction::wait);
  EXPECT_TRUE(declared.ranks.empty());
  EXPECT_EQ(declared.why, "waiting for every surviving daemon to come back and report its rank");
  facts.return_window_over = true;
  declared = lost_ranks_after_takeover(facts);
  EXPECT_EQ(declared.action, TakeoverLossAction::declare);
  EXPECT_EQ(declared.ranks, (std::vector<std::uint32_t>{0}));
  EXPECT_NE(declared.why.find("(not every surviving daemon came back or reported its rank in time)"),
            std::string::npos)
      << declared.why;
}

TEST(FirstNodeTakeover, ALossIsDecidedOnceAndLowersTheJobsSizeOnce) {
  TakeoverLossFacts facts = silent_first_node_lost();
  facts.decided_already = true;
  auto declared = lost_ranks_after_takeover(facts);
  EXPECT_EQ(declared.action, TakeoverLossAction::nothing);
  EXPECT_EQ(declared.why, "the loss of n1 was decided on already");
  // A size that still counts the lost rank is lowered by the declaration, once.
  facts.decided_already = false;
  facts.size_counts_them_out = false;
  declared = lost_ranks_after_takeover(facts);
  EXPECT_EQ(declared.action, TakeoverLossAction::declare);
  EXPECT_TRUE(declared.lower_job_size);
  EXPECT_NE(declared.why.find("the job's size is lowered by them"), std::string::npos) << declared.why;
}

TEST(FirstNodeTakeover, AFirstNodeThatHeldNoRankHasNothingToDeclare) {
  // The job's first rank was lost before, and the job recovered without it.
  TakeoverLossFacts facts = silent_first_node_lost();
  facts.lost_node_ranks.clear();
  facts.every_survivor_reported = false;
  const auto declared = lost_ranks_after_takeover(facts);
  EXPECT_EQ(declared.action, TakeoverLossAction::nothing);
  EXPECT_EQ(declared.why, "n1 held no rank of the job: no rank to declare lost");
}

}  // namespace
