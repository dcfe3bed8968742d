// The job map a daemon registers its job's namespace with (bellows/daemon/job_map.hpp): node
// ids, local ranks, the PMIx_generate_regex and PMIx_generate_ppn inputs, and every refusal.
#include <bellows/daemon/job_map.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

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

}  // namespace
