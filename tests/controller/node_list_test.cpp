// Hostlists, release plans and allocation order: the Slurm backend's bookkeeping, without Slurm.

#include "bellows/controller/node_list.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace bellows::controller {
namespace {

using Nodes = std::vector<std::string>;

TEST(Hostlist, ExpandsRangesListsAndPlainNames) {
  EXPECT_EQ(expand_hostlist("n[1-3,7],login"), (Nodes{"n1", "n2", "n3", "n7", "login"}));
  EXPECT_EQ(expand_hostlist("n4"), (Nodes{"n4"}));
  EXPECT_EQ(expand_hostlist(""), Nodes{});
  EXPECT_EQ(expand_hostlist("a[2],b[5-6]"), (Nodes{"a2", "b5", "b6"}));
}

TEST(Hostlist, KeepsZeroPaddingAndSuffixes) {
  EXPECT_EQ(expand_hostlist("n[08-10]"), (Nodes{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_hostlist("rack[1-2]-ib"), (Nodes{"rack1-ib", "rack2-ib"}));
}

TEST(Hostlist, RefusesMalformedTextNamingTheProblem) {
  auto message = [](const char* text) {
    try {
      (void)expand_hostlist(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message("n[3-1]"), "hostlist 'n[3-1]': range 3-1 runs backwards");
  EXPECT_EQ(message("n[1-3"), "hostlist 'n[1-3': '[' without ']'");
  EXPECT_EQ(message("n1-3]"), "hostlist 'n1-3]': ']' without '['");
  EXPECT_EQ(message("n[a-3]"), "hostlist 'n[a-3]': 'a' is not a number");
  EXPECT_EQ(message("n[]"), "hostlist 'n[]': empty brackets");
  EXPECT_EQ(message("n1,,n2"), "hostlist 'n1,,n2': empty name");
  EXPECT_EQ(message("n[1,]"), "hostlist 'n[1,]': '' is not a number");
}

TEST(Hostlist, CompressesRunsPerPrefixAndWidth) {
  EXPECT_EQ(compress_hostlist({"n1", "n2", "n3", "n7"}), "n[1-3,7]");
  EXPECT_EQ(compress_hostlist({"n2"}), "n2");
  EXPECT_EQ(compress_hostlist({}), "");
  EXPECT_EQ(compress_hostlist({"n08", "n09", "n10", "login"}), "n[08-10],login");
  EXPECT_EQ(compress_hostlist({"n1", "m1", "n2"}), "n[1-2],m1");
  EXPECT_EQ(compress_hostlist({"n1", "n01"}), "n1,n01");
}

TEST(Hostlist, RoundTrips) {
  for (const Nodes& nodes : {Nodes{"n1", "n2", "n4", "n5", "n6", "x"}, Nodes{"a09", "a10", "b1"},
                             Nodes{"node17"}}) {
    EXPECT_EQ(expand_hostlist(compress_hostlist(nodes)), nodes) << compress_hostlist(nodes);
  }
}

TEST(Hostlist, JoinsWithCommas) {
  EXPECT_EQ(join_nodes({"n3", "n4"}), "n3,n4");
  EXPECT_EQ(join_nodes({}), "");
}

const Nodes kCluster{"n1", "n2", "n3", "n4"};

TEST(ReleasePlan, KeepsTheOtherNodesInTheJobsOrder) {
  const ReleasePlan plan = plan_release("5", {"n1", "n2", "n3", "n4"}, "n1", {"n4", "n2"}, kCluster);
  EXPECT_TRUE(plan.status.ok()) << plan.status.text;
  EXPECT_EQ(plan.remaining, (Nodes{"n1", "n3"}));
}

TEST(ReleasePlan, RefusesTheBatchHostNamingIt) {
  const ReleasePlan plan = plan_release("5", {"n1", "n2"}, "n1", {"n2", "n1"}, kCluster);
  EXPECT_EQ(plan.status.code, RmCode::bad_request);
  EXPECT_EQ(plan.status.text,
            "release by job 5: n1 is the batch host of job 5 (its batch script runs there): "
            "Slurm cannot take it away");
  EXPECT_TRUE(plan.remaining.empty());
}

TEST(ReleasePlan, NamesTheFirstOffendingNode) {
  auto plan = plan_release("5", {"n1", "n2"}, "n1", {"n2", "n3"}, kCluster);
  EXPECT_EQ(plan.status.code, RmCode::not_owner);
  EXPECT_EQ(plan.status.text, "release by job 5: n3 is not allocated to job 5");
  plan = plan_release("5", {"n1", "n2"}, "n1", {"n9", "n3"}, kCluster);
  EXPECT_EQ(plan.status.code, RmCode::unknown_node);
  EXPECT_EQ(plan.status.text, "release by job 5: n9 is no node of the cluster");
  plan = plan_release("5", {"n1", "n2", "n3"}, "n1", {"n2", "n2"}, kCluster);
  EXPECT_EQ(plan.status.code, RmCode::bad_request);
  EXPECT_EQ(plan.status.text, "release by job 5: n2 is listed twice");
  plan = plan_release("5", {"n1", "n2"}, "n1", {}, kCluster);
  EXPECT_EQ(plan.status.code, RmCode::bad_request);
  EXPECT_EQ(plan.status.text, "release by job 5: no node listed");
}

TEST(TakenOutOnFailure, OnlyNodesGoneFromTheJobThatFailed) {
  // n3 went DOWN and Slurm took it out; n4 is down but still listed (Slurm has not acted
  // yet); n2 is gone from the job but healthy (not the job's: a release refuses it).
  EXPECT_EQ(taken_out_on_failure({"n4", "n3", "n2"}, {"n1", "n4"}, {"n3", "n4", "n7"}), (Nodes{"n3"}));
  EXPECT_EQ(taken_out_on_failure({"n3", "n5"}, {"n1"}, {"n5", "n3"}), (Nodes{"n3", "n5"}));
  EXPECT_TRUE(taken_out_on_failure({"n2"}, {"n1", "n2"}, {}).empty());
  EXPECT_TRUE(taken_out_on_failure({}, {"n1"}, {"n1"}).empty());
}

TEST(AllocationOrder, BatchHostThenFirstNodesThenGrantsInOrder) {
  // Slurm lists n1..n4 in its node order; the job started on n3 and n1, then got n4, then n2.
  EXPECT_EQ(allocation_order({"n1", "n2", "n3", "n4"}, "n3", {"n4", "n2"}),
            (Nodes{"n3", "n1", "n4", "n2"}));
  // A granted node given back is left out.
  EXPECT_EQ(allocation_order({"n1", "n3"}, "n3", {"n4", "n2"}), (Nodes{"n3", "n1"}));
  EXPECT_EQ(allocation_order({"n2"}, "n2", {}), (Nodes{"n2"}));
  EXPECT_EQ(allocation_order({}, "", {"n2"}), Nodes{});
}

}  // namespace
}  // namespace bellows::controller
