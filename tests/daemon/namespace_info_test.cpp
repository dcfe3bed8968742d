// The info a daemon registers its job's namespace with (bellows/daemon/namespace_info.hpp):
// every job, node and process entry with its key, form and value, for a plan of a shared node,
// a rank that left and a node that keeps the numbers given for a joiner; and the refusals.
#include <bellows/daemon/namespace_info.hpp>

#include <pmix_common.h>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace d = bellows::daemon;

namespace {

std::vector<std::string> constants(const std::vector<d::RegisteredInfo>& entries) {
  std::vector<std::string> names;
  for (const d::RegisteredInfo& entry : entries) names.emplace_back(entry.constant);
  return names;
}

const d::RegisteredInfo& entry(const std::vector<d::RegisteredInfo>& entries, std::string_view constant) {
  for (const d::RegisteredInfo& e : entries)
    if (e.constant == constant) return e;
  throw std::out_of_range("no entry " + std::string(constant));
}

std::string refusal(const std::string& nspace, const d::JobRegistration& plan) {
  try {
    (void)d::namespace_info(nspace, plan);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

// Ranks 0 and 2 on node a, 1 on b, 3 on c; rank 3 left; registered by b's daemon.
d::JobRegistration shared_plan() {
  return d::plan_registration({{"a", 0}, {"b", 1}, {"a", 2}, {"c", 3}}, {0, 1, 2}, "b");
}

TEST(NamespaceInfo, JobEntriesInTheOrderRegisteredWithTheirValues) {
  const d::NamespaceInfo info = d::namespace_info("local-7", shared_plan());
  EXPECT_EQ(constants(info.job),
            (std::vector<std::string>{"PMIX_JOBID", "PMIX_JOB_SIZE", "PMIX_UNIV_SIZE", "PMIX_MAX_PROCS",
                                      "PMIX_NUM_NODES", "PMIX_NODE_MAP", "PMIX_PROC_MAP", "PMIX_JOB_NUM_APPS",
                                      "PMIX_APPNUM", "PMIX_LOCAL_PEERS", "PMIX_LOCAL_SIZE", "PMIX_LOCALLDR",
                                      "PMIX_HOSTNAME"}));
  EXPECT_EQ(entry(info.job, "PMIX_JOBID"),
            (d::RegisteredInfo{PMIX_JOBID, "PMIX_JOBID", d::InfoForm::kString, "local-7", 0}));
  EXPECT_EQ(entry(info.job, "PMIX_JOB_SIZE"),
            (d::RegisteredInfo{PMIX_JOB_SIZE, "PMIX_JOB_SIZE", d::InfoForm::kUint32, "", 3}));
  EXPECT_EQ(entry(info.job, "PMIX_UNIV_SIZE").number, 3u);
  EXPECT_EQ(entry(info.job, "PMIX_MAX_PROCS").number, 3u);
  EXPECT_EQ(entry(info.job, "PMIX_NUM_NODES").number, 2u);
  EXPECT_EQ(entry(info.job, "PMIX_NODE_MAP"),
            (d::RegisteredInfo{PMIX_NODE_MAP, "PMIX_NODE_MAP", d::InfoForm::kNodeRegex, "a,b", 0}));
  EXPECT_EQ(entry(info.job, "PMIX_PROC_MAP"),
            (d::RegisteredInfo{PMIX_PROC_MAP, "PMIX_PROC_MAP", d::InfoForm::kProcRegex, "0,2;1", 0}));
  EXPECT_EQ(entry(info.job, "PMIX_JOB_NUM_APPS").number, 1u);
  EXPECT_EQ(entry(info.job, "PMIX_APPNUM").number, 0u);
  EXPECT_EQ(entry(info.job, "PMIX_LOCAL_PEERS").text, "1");
  EXPECT_EQ(entry(info.job, "PMIX_LOCAL_SIZE").number, 1u);
  EXPECT_EQ(entry(info.job, "PMIX_LOCALLDR"),
            (d::RegisteredInfo{PMIX_LOCALLDR, "PMIX_LOCALLDR", d::InfoForm::kRank, "", 1}));
  EXPECT_EQ(entry(info.job, "PMIX_HOSTNAME").text, "b");
}

TEST(NamespaceInfo, OneArrayPerNodeOfTheJob) {
  const d::NamespaceInfo info = d::namespace_info("local-7", shared_plan());
  ASSERT_EQ(info.nodes.size(), 2u);  // c holds no rank in the job
  const std::vector<d::RegisteredInfo>& a = info.nodes[0];
  EXPECT_EQ(constants(a), (std::vector<std::string>{"PMIX_HOSTNAME", "PMIX_NODEID", "PMIX_LOCAL_PEERS",
                                                    "PMIX_LOCAL_SIZE", "PMIX_NODE_SIZE", "PMIX_LOCALLDR"}));
  EXPECT_EQ(entry(a, "PMIX_HOSTNAME").text, "a");
  EXPECT_EQ(entry(a, "PMIX_NODEID").number, 0u);
  EXPECT_EQ(entry(a, "PMIX_LOCAL_PEERS").text, "0,2");
  EXPECT_EQ(entry(a, "PMIX_LOCAL_SIZE").number, 2u);
  EXPECT_EQ(entry(a, "PMIX_NODE_SIZE").number, 2u);
  EXPECT_EQ(entry(a, "PMIX_LOCALLDR"), (d::RegisteredInfo{PMIX_LOCALLDR, "PMIX_LOCALLDR", d::InfoForm::kRank, "", 0}));
  EXPECT_EQ(entry(info.nodes[1], "PMIX_HOSTNAME").text, "b");
  EXPECT_EQ(entry(info.nodes[1], "PMIX_NODEID").number, 1u);
  EXPECT_EQ(entry(info.nodes[1], "PMIX_LOCALLDR").number, 1u);
}

TEST(NamespaceInfo, OneArrayPerRankARankThatLeftWithoutItsPlaceOnANode) {
  const d::NamespaceInfo info = d::namespace_info("local-7", shared_plan());
  ASSERT_EQ(info.procs.size(), 4u);
  const std::vector<d::RegisteredInfo>& second_on_a = info.procs[2];
  EXPECT_EQ(constants(second_on_a),
            (std::vector<std::string>{"PMIX_RANK", "PMIX_GLOBAL_RANK", "PMIX_APP_RANK", "PMIX_APPNUM",
                                      "PMIX_HOSTNAME", "PMIX_LOCAL_RANK", "PMIX_NODE_RANK", "PMIX_NODEID"}));
  EXPECT_EQ(entry(second_on_a, "PMIX_RANK"), (d::RegisteredInfo{PMIX_RANK, "PMIX_RANK", d::InfoForm::kRank, "", 2}));
  EXPECT_EQ(entry(second_on_a, "PMIX_GLOBAL_RANK").number, 2u);
  EXPECT_EQ(entry(second_on_a, "PMIX_APP_RANK").number, 2u);
  EXPECT_EQ(entry(second_on_a, "PMIX_APPNUM").number, 0u);
  EXPECT_EQ(entry(second_on_a, "PMIX_HOSTNAME").text, "a");
  EXPECT_EQ(entry(second_on_a, "PMIX_LOCAL_RANK"),
            (d::RegisteredInfo{PMIX_LOCAL_RANK, "PMIX_LOCAL_RANK", d::InfoForm::kUint16, "", 1}));
  EXPECT_EQ(entry(second_on_a, "PMIX_NODE_RANK").number, 1u);
  EXPECT_EQ(entry(second_on_a, "PMIX_NODEID").number, 0u);

  const std::vector<d::RegisteredInfo>& left = info.procs[3];
  EXPECT_EQ(constants(left), (std::vector<std::string>{"PMIX_RANK", "PMIX_GLOBAL_RANK", "PMIX_APP_RANK",
                                                       "PMIX_APPNUM", "PMIX_HOSTNAME"}));
  EXPECT_EQ(entry(left, "PMIX_RANK").number, 3u);
  EXPECT_EQ(entry(left, "PMIX_HOSTNAME").text, "c");
}

// A node that started rank 4 of ranks 0, 1 and 4 registers the numbers given as the sizes.
TEST(NamespaceInfo, SizesAreTheRegisteredSize) {
  const d::JobMap map{{"a", 0}, {"b", 1}, {"c", 2}, {"c", 3}, {"c", 4}};
  const d::JobRegistration plan = d::keep_size_for_joiners(d::plan_registration(map, {0, 1, 4}, "c"), {4}, 5);
  const d::NamespaceInfo info = d::namespace_info("local-9", plan);
  EXPECT_EQ(entry(info.job, "PMIX_JOB_SIZE").number, 5u);
  EXPECT_EQ(entry(info.job, "PMIX_UNIV_SIZE").number, 5u);
  EXPECT_EQ(entry(info.job, "PMIX_MAX_PROCS").number, 5u);
  EXPECT_EQ(entry(info.job, "PMIX_NUM_NODES").number, 3u);
  EXPECT_EQ(entry(info.job, "PMIX_LOCAL_PEERS").text, "4");
  EXPECT_EQ(entry(info.procs[4], "PMIX_LOCAL_RANK").number, 0u);
}

TEST(NamespaceInfo, RefusesAPlanWithoutRanksWhereTheyAreNeeded) {
  EXPECT_EQ(refusal("local-7", d::JobRegistration{}), "namespace local-7: no rank on this daemon's node ''");
  d::JobRegistration plan = shared_plan();
  plan.nodes[0].ranks.clear();
  EXPECT_EQ(refusal("local-7", plan), "namespace local-7: node 'a' has no rank of the job");
}

}  // namespace
