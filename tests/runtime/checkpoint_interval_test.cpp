// checkpoint_interval: Young/Daly's interval in seconds and iterations; checkpoint_due.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "bellows/runtime/checkpoint_interval.hpp"

namespace bellows::runtime {
namespace {

constexpr double kYear = 8760.0 * 3600.0;

std::string refusal(double cost, double node_mtbf, int nodes, double iteration) {
  try {
    (void)checkpoint_interval(cost, node_mtbf, nodes, iteration);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CheckpointInterval, DalysHigherOrderFormWhereTheCostIsNotSmall) {
  // C = 10 s, M = 1000 s: sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C.
  const auto out = checkpoint_interval(10, 1000, 1, 10);
  EXPECT_DOUBLE_EQ(out.job_mean_time_between_failures, 1000);
  EXPECT_NEAR(out.seconds, 134.8332569907747, 1e-9);
  EXPECT_EQ(out.iterations, 13);  // 13.48 rounded
  EXPECT_EQ(checkpoint_interval(10, 1000, 1, 20).iterations, 7);  // 6.74 rounded
}

TEST(CheckpointInterval, YoungsFirstOrderFormWhereTheCostIsSmall) {
  const auto out = checkpoint_interval(1, 1e6, 1, 1);
  EXPECT_NEAR(out.seconds, 1413.5469742738485, 1e-9);
  // Within 0.03 % of sqrt(2 C M) - C.
  EXPECT_NEAR(out.seconds / (std::sqrt(2e6) - 1), 1.0, 3e-4);
  EXPECT_EQ(out.iterations, 1414);
}

TEST(CheckpointInterval, ACheckpointCostingTwiceTheMeanTimeBetweenFailuresGivesThatTime) {
  EXPECT_DOUBLE_EQ(checkpoint_interval(2000, 1000, 1, 1).seconds, 1000);
  EXPECT_DOUBLE_EQ(checkpoint_interval(5000, 1000, 1, 1).seconds, 1000);
  EXPECT_NEAR(checkpoint_interval(1999, 1000, 1, 1).seconds, 888.89, 0.01);
}

TEST(CheckpointInterval, TheJobFailsAsOftenAsAllItsNodesTogether) {
  const auto four = checkpoint_interval(10, 4000, 4, 10);
  EXPECT_DOUBLE_EQ(four.job_mean_time_between_failures, 1000);
  EXPECT_NEAR(four.seconds, 134.8332569907747, 1e-9);
  EXPECT_LT(checkpoint_interval(10, 4000, 8, 10).seconds, four.seconds);
}

TEST(CheckpointInterval, AtGpuSpeedTheJobDoesNotCheckpointEveryIteration) {
  // 50 ms iterations, a 5 ms checkpoint, nodes failing once a year: every 5616 iterations
  // (4.7 minutes) on 4 nodes, every 1404 on 64.
  const auto four = checkpoint_interval(0.005, kYear, 4, 0.05);
  EXPECT_NEAR(four.seconds, 280.7812816397018, 1e-6);
  EXPECT_EQ(four.iterations, 5616);
  EXPECT_EQ(checkpoint_interval(0.005, kYear, 64, 0.05).iterations, 1404);
}

TEST(CheckpointInterval, AtLeastOneIteration) {
  const auto free_checkpoint = checkpoint_interval(0, 1000, 1, 1);
  EXPECT_DOUBLE_EQ(free_checkpoint.seconds, 0);
  EXPECT_EQ(free_checkpoint.iterations, 1);
  EXPECT_EQ(checkpoint_interval(10, 1000, 1, 1e6).iterations, 1);
}

TEST(CheckpointInterval, RefusesValuesOutOfRangeByName) {
  EXPECT_EQ(refusal(-1, 1000, 1, 1),
            "checkpoint_interval: the checkpoint cost must be a finite number of seconds, at "
            "least 0, got -1");
  EXPECT_EQ(refusal(std::numeric_limits<double>::quiet_NaN(), 1000, 1, 1),
            "checkpoint_interval: the checkpoint cost must be a finite number of seconds, at "
            "least 0, got nan");
  EXPECT_EQ(refusal(1, 0, 1, 1),
            "checkpoint_interval: a node's mean time between failures must be a finite number "
            "of seconds above 0, got 0");
  EXPECT_EQ(refusal(1, std::numeric_limits<double>::infinity(), 1, 1),
            "checkpoint_interval: a node's mean time between failures must be a finite number "
            "of seconds above 0, got inf");
  EXPECT_EQ(refusal(1, 1000, 0, 1), "checkpoint_interval: the job must have at least 1 node, got 0");
  EXPECT_EQ(refusal(1, 1000, 1, 0),
            "checkpoint_interval: the iteration time must be a finite number of seconds above "
            "0, got 0");
}

TEST(CheckpointDue, AfterTheIntervalAfterAResizeAndAtTheStart) {
  EXPECT_FALSE(checkpoint_due(4, 5, false, true));
  EXPECT_TRUE(checkpoint_due(5, 5, false, true));
  EXPECT_TRUE(checkpoint_due(9, 5, false, true));
  EXPECT_TRUE(checkpoint_due(1, 5, true, true));
  EXPECT_TRUE(checkpoint_due(0, 5, false, false));
  EXPECT_TRUE(checkpoint_due(1, 1, false, true));
}

}  // namespace
}  // namespace bellows::runtime
