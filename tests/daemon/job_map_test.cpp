// The job map a daemon registers its job's namespace with (bellows/daemon/job_map.hpp): node
// ids, local ranks, the PMIx_generate_regex and PMIx_generate_ppn inputs, and every refusal.
#include <bellows/daemon/job_map.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace d = bellows::daemon;

namespace {

std::string refusal(const d::JobMap& map, const std::string& node) {
  try {
    (void)d::plan_registration(map, node);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(JobMap, OneRankPerNodeNumbersTheNodesByTheirRanks) {
  const d::JobMap map{{"local0", 0}, {"local1", 1}, {"local2", 2}};
  const d::JobRegistration plan = d::plan_registration(map, "local1");
  EXPECT_EQ(plan.job_size, 3u);
  EXPECT_EQ(plan.num_nodes, 3u);
  EXPECT_EQ(plan.node_list, "local0,local1,local2");
  EXPECT_EQ(plan.ppn_list, "0;1;2");
  EXPECT_EQ(plan.local, (d::MappedNode{"local1", 1, {1}}));
  EXPECT_EQ(plan.procs[2], (d::MappedProc{2, "local2", 2, 0}));
}

// Several ranks on a node get local ranks 0, 1, ...; the nodes are numbered by their lowest rank.
TEST(JobMap, SharedNodes) {
  const d::JobMap map{{"a", 0}, {"b", 1}, {"a", 2}, {"c", 3}, {"b", 4}};
  const d::JobRegistration plan = d::plan_registration(map, "b");
  EXPECT_EQ(plan.job_size, 5u);
  EXPECT_EQ(plan.num_nodes, 3u);
  EXPECT_EQ(plan.node_list, "a,b,c");
  EXPECT_EQ(plan.ppn_list, "0,2;1,4;3");
  EXPECT_EQ(plan.local, (d::MappedNode{"b", 1, {1, 4}}));
  EXPECT_EQ(plan.procs[2], (d::MappedProc{2, "a", 0, 1}));
  EXPECT_EQ(plan.procs[4], (d::MappedProc{4, "b", 1, 1}));
  EXPECT_EQ(d::to_string(map), "0:a,1:b,2:a,3:c,4:b");
}

TEST(JobMap, RefusalsNameWhatIsWrong) {
  EXPECT_EQ(refusal({}, "a"), "job map: no rank");
  EXPECT_EQ(refusal({{"a", 0}, {"", 1}}, "a"), "job map: rank 1 has no node");
  EXPECT_EQ(refusal({{"a", 0}, {"b", 0}}, "a"),
            "job map: rank 0 where rank 1 belongs (every rank 0..n-1 once, ascending): 0:a,0:b");
  EXPECT_EQ(refusal({{"a", 1}, {"b", 2}}, "a"),
            "job map: rank 1 where rank 0 belongs (every rank 0..n-1 once, ascending): 1:a,2:b");
  // A gap: PMIx 4.2.2 would refuse the clients.
  EXPECT_EQ(refusal({{"a", 0}, {"b", 1}, {"a", 3}}, "a"),
            "job map: rank 3 where rank 2 belongs (every rank 0..n-1 once, ascending): 0:a,1:b,3:a");
  EXPECT_EQ(refusal({{"a", 0}, {"b", 1}}, "c"), "job map: no rank on node c, this daemon's: 0:a,1:b");
}

// After a grow the map has the new rank; every daemon plans the same maps from it, whichever
// node it is on.
TEST(JobMap, AGrowsNewRankIsInEveryNodesMaps) {
  const d::JobMap grown{{"local0", 0}, {"local1", 1}, {"local2", 2}};
  for (const char* node : {"local0", "local2"}) {
    const d::JobRegistration plan = d::plan_registration(grown, {0, 1, 2}, node);
    EXPECT_EQ(plan.job_size, 3u);
    EXPECT_EQ(plan.num_nodes, 3u);
    EXPECT_EQ(plan.node_list, "local0,local1,local2");
    EXPECT_EQ(plan.ppn_list, "0;1;2");
    EXPECT_EQ(plan.procs.size(), 3u);
  }
  EXPECT_EQ(d::plan_registration(grown, {0, 1, 2}, "local0"), d::plan_registration(grown, "local0"));
}

// A shrink: the rank that left keeps its number and node (PMIx's ranks are 0..n-1) but leaves
// the size, the node list, the process map and its node's peers; the nodes are numbered again
// among those left.
TEST(JobMap, ARankThatLeftStaysInProcsOnlyAndItsNodeLeavesTheMaps) {
  const d::JobMap map{{"local0", 0}, {"local1", 1}, {"local2", 2}};
  const d::JobRegistration plan = d::plan_registration(map, {0, 2}, "local2");
  EXPECT_EQ(plan.job_size, 2u);
  EXPECT_EQ(plan.num_nodes, 2u);
  EXPECT_EQ(plan.node_list, "local0,local2");
  EXPECT_EQ(plan.ppn_list, "0;2");
  EXPECT_EQ(plan.nodes, (std::vector<d::MappedNode>{{"local0", 0, {0}}, {"local2", 1, {2}}}));
  EXPECT_EQ(plan.local, (d::MappedNode{"local2", 1, {2}}));
  ASSERT_EQ(plan.procs.size(), 3u);
  EXPECT_EQ(plan.procs[1], (d::MappedProc{1, "local1", 0, 0, false}));
  EXPECT_EQ(plan.procs[2], (d::MappedProc{2, "local2", 1, 0, true}));

  // A node whose first rank left keeps its other ones, with local ranks counted again.
  const d::JobMap shared{{"a", 0}, {"b", 1}, {"a", 2}, {"a", 3}};
  const d::JobRegistration left = d::plan_registration(shared, {1, 2, 3}, "a");
  EXPECT_EQ(left.node_list, "b,a");
  EXPECT_EQ(left.ppn_list, "1;2,3");
  EXPECT_EQ(left.local, (d::MappedNode{"a", 1, {2, 3}}));
  EXPECT_EQ(left.procs[3], (d::MappedProc{3, "a", 1, 1, true}));
}

// A grow after a shrink: rank 3 joins on local1, which rank 1 left. Its local and node rank
// count the job's ranks on that node now, as PRRTE's do, so it is 0 there, the node's only
// peer and leader; registered with every number in the job it would have been 1 behind rank 1.
TEST(JobMap, ARankJoiningANodeAnotherNumberLeftIsItsLocalAndNodeRankZero) {
  const d::JobMap map{{"local0", 0}, {"local1", 1}, {"local2", 2}, {"local1", 3}};
  const d::JobRegistration plan = d::plan_registration(map, {0, 2, 3}, "local1");
  EXPECT_EQ(plan.job_size, 3u);
  EXPECT_EQ(plan.node_list, "local0,local2,local1");
  EXPECT_EQ(plan.ppn_list, "0;2;3");
  EXPECT_EQ(plan.local, (d::MappedNode{"local1", 2, {3}}));
  ASSERT_EQ(plan.procs.size(), 4u);
  EXPECT_EQ(plan.procs[1], (d::MappedProc{1, "local1", 0, 0, false}));
  EXPECT_EQ(plan.procs[3], (d::MappedProc{3, "local1", 2, 0, true}));
  EXPECT_EQ(d::plan_registration(map, "local1").procs[3].local_rank, 1u);
}

// A node that started a rank whose number was not below the job's size (rank 3 of ranks 0, 2
// and 3, rank 1 having left) registers the numbers given as the size while that rank is in the
// job, as PMIx 4.2.2 gives a client whose rank is not below PMIX_JOB_SIZE none of its own info.
TEST(JobMap, ANodeThatStartedARankPastTheJobsSizeRegistersTheNumbersGiven) {
  const d::JobMap map{{"local0", 0}, {"local1", 1}, {"local2", 2}, {"local1", 3}};
  const d::JobRegistration plan = d::plan_registration(map, {0, 2, 3}, "local1");
  EXPECT_EQ(plan.job_size, 3u);
  EXPECT_EQ(plan.registered_size, 3u);
  const d::JobRegistration kept = d::keep_size_for_joiners(plan, {3}, 4);
  EXPECT_EQ(kept.job_size, 3u);
  EXPECT_EQ(kept.registered_size, 4u);
  EXPECT_EQ(kept.ppn_list, "0;2;3");
  // Another node, or the rank gone from the job: the job's size.
  EXPECT_EQ(d::keep_size_for_joiners(d::plan_registration(map, {0, 2, 3}, "local2"), {3}, 4).registered_size, 3u);
  const d::JobMap later{{"local0", 0}, {"local1", 1}, {"local2", 2}, {"local1", 3}, {"local1", 4}};
  EXPECT_EQ(d::keep_size_for_joiners(d::plan_registration(later, {0, 2, 4}, "local1"), {3}, 5).registered_size, 3u);
}

TEST(JobMap, RefusalsOfTheRanksInTheJobNameWhatIsWrong) {
  const d::JobMap map{{"a", 0}, {"b", 1}};
  const auto refused = [&](const std::vector<std::uint32_t>& in_job, const std::string& node) -> std::string {
    try {
      (void)d::plan_registration(map, in_job, node);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(refused({}, "a"), "job map 0:a,1:b: no rank in the job");
  EXPECT_EQ(refused({0, 2}, "a"), "job map 0:a,1:b: rank 2 is in the job but not in the map");
  // This node's rank left: it registers nothing.
  EXPECT_EQ(refused({0}, "b"), "job map: no rank on node b, this daemon's: 0:a,1:b");
}

}  // namespace
