// Which daemon takes a Slurm job over once its first node is lost (first_node_takeover.hpp).
#include <bellows/runtime/first_node_takeover.hpp>

#include <gtest/gtest.h>

namespace {

using bellows::runtime::FirstNodeLossFacts;
using bellows::runtime::plan_first_node_takeover;

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

}  // namespace
