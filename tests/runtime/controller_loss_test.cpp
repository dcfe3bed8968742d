// The daemon's action once its controller's connection is lost (controller_loss.hpp).
#include <bellows/runtime/controller_loss.hpp>

#include <gtest/gtest.h>

namespace {

using bellows::runtime::ControllerLossAction;
using bellows::runtime::ControllerLossFacts;
using bellows::runtime::ControllerLossLimits;
using bellows::runtime::on_controller_loss;

ControllerLossAction action(double lost, double unreachable, std::size_t ranks,
                            ControllerLossLimits limits = {}) {
  return on_controller_loss(ControllerLossFacts{lost, unreachable, ranks}, limits);
}

TEST(ControllerLoss, WaitsWithinTheGraceWhateverTheHostDoes) {
  EXPECT_EQ(action(0.0, 0.0, 1), ControllerLossAction::wait);
  EXPECT_EQ(action(1.99, 0.0, 0), ControllerLossAction::wait);
  // A host silent for long already, the connection lost a moment ago: still the grace.
  EXPECT_EQ(action(1.0, 30.0, 2), ControllerLossAction::wait);
}

TEST(ControllerLoss, StopsOnceNoRankRuns) {
  EXPECT_EQ(action(2.0, 0.0, 0), ControllerLossAction::stop);
  EXPECT_EQ(action(60.0, 60.0, 0), ControllerLossAction::stop);
}

TEST(ControllerLoss, KeepsTheRanksWhileTheControllersHostAnswers) {
  // The controller's process died (its port refuses): the job runs on at its size.
  EXPECT_EQ(action(2.0, 0.0, 1), ControllerLossAction::keep_ranks);
  EXPECT_EQ(action(3600.0, 0.0, 3), ControllerLossAction::keep_ranks);
}

TEST(ControllerLoss, EndsTheRanksOnceTheHostHasAnsweredNothingForTheLimit) {
  EXPECT_EQ(action(7.0, 4.99, 1), ControllerLossAction::keep_ranks);
  EXPECT_EQ(action(7.0, 5.0, 1), ControllerLossAction::end_ranks);
  EXPECT_EQ(action(30.0, 25.0, 2), ControllerLossAction::end_ranks);
  ControllerLossLimits patient{2.0, 60.0};
  EXPECT_EQ(action(30.0, 25.0, 2, patient), ControllerLossAction::keep_ranks);
  EXPECT_EQ(action(70.0, 60.0, 2, patient), ControllerLossAction::end_ranks);
}

TEST(ControllerLoss, AZeroUnreachableLimitNeverEndsTheRanks) {
  EXPECT_EQ(action(1e6, 1e6, 1, ControllerLossLimits{2.0, 0.0}), ControllerLossAction::keep_ranks);
}

TEST(ControllerLoss, ActionsHaveNames) {
  EXPECT_STREQ(to_string(ControllerLossAction::wait), "wait");
  EXPECT_STREQ(to_string(ControllerLossAction::keep_ranks), "keep_ranks");
  EXPECT_STREQ(to_string(ControllerLossAction::end_ranks), "end_ranks");
  EXPECT_STREQ(to_string(ControllerLossAction::stop), "stop");
}

}  // namespace
