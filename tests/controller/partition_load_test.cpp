// partition_load(): what a policy tick weighs of the partition, and an error naming the
// question the resource manager left unanswered (the tick is skipped rather than guessed).

#include "fake_clock.hpp"
#include "fake_resource_manager.hpp"

#include "bellows/controller/resource_manager.hpp"

#include <gtest/gtest.h>

namespace bellows::controller::testing {
namespace {

class PartitionLoadTest : public ::testing::Test {
 protected:
  FakeClock clock;
  FakeResourceManager rm{clock, 4};
};

TEST_F(PartitionLoadTest, CountsIdleNodesAndPendingJobs) {
  (void)rm.pool().allocate("5", 1);
  rm.set_pending_jobs({{"8", 2}, {"9", 1}});
  const auto load = partition_load(rm);
  ASSERT_TRUE(load.status.ok()) << load.status.text;
  EXPECT_EQ(load.value.idle_nodes, 3);
  EXPECT_EQ(load.value.pending_jobs, 2);
}

TEST_F(PartitionLoadTest, UnansweredPendingJobsAreAnErrorNotZero) {
  rm.set_pending_jobs({{"8", 2}});
  rm.set_pending_jobs_status(
      {RmCode::unavailable, "slurm_load_jobs: Socket timed out on send/recv operation"});
  const auto load = partition_load(rm);
  EXPECT_EQ(load.status.code, RmCode::unavailable);
  EXPECT_EQ(load.status.text, "pending jobs: slurm_load_jobs: Socket timed out on send/recv operation");

  rm.set_pending_jobs_status({});
  const auto again = partition_load(rm);
  ASSERT_TRUE(again.status.ok());
  EXPECT_EQ(again.value.pending_jobs, 1);
}

TEST_F(PartitionLoadTest, UnansweredIdleNodesAreAnErrorNotZero) {
  rm.set_idle_nodes_status({RmCode::unavailable, "slurm_load_node: Unable to contact slurm controller"});
  const auto load = partition_load(rm);
  EXPECT_EQ(load.status.code, RmCode::unavailable);
  EXPECT_EQ(load.status.text, "idle nodes: slurm_load_node: Unable to contact slurm controller");
}

}  // namespace
}  // namespace bellows::controller::testing
