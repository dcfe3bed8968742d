// The daemon's action once its controller's connection is lost (controller_loss.hpp).
#include <bellows/runtime/controller_loss.hpp>

#include <gtest/gtest.h>

namespace {

using bellows::runtime::ControllerLossAction;
using bellows::runtime::ControllerLossFacts;
using bellows::runtime::ControllerLossLimits;
using bellows::runtime::controller_loss_limits;
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

TEST(ControllerLoss, RanksKeptForATakeoverOutliveTheUnreachableLimit) {
  ControllerLossFacts facts{30.0, 25.0, 2};
  facts.kept_for_takeover = true;
  EXPECT_EQ(on_controller_loss(facts, {}), ControllerLossAction::keep_ranks);
  facts.kept_for_takeover = false;
  EXPECT_EQ(on_controller_loss(facts, {}), ControllerLossAction::end_ranks);
  // Kept or not, the grace and a node without ranks decide first.
  facts = ControllerLossFacts{1.0, 0.5, 2, true};
  EXPECT_EQ(on_controller_loss(facts, {}), ControllerLossAction::wait);
  facts = ControllerLossFacts{30.0, 25.0, 0, true};
  EXPECT_EQ(on_controller_loss(facts, {}), ControllerLossAction::stop);
}

TEST(ControllerLoss, AZeroUnreachableLimitNeverEndsTheRanks) {
  EXPECT_EQ(action(1e6, 1e6, 1, ControllerLossLimits{2.0, 0.0}), ControllerLossAction::keep_ranks);
}

TEST(ControllerLoss, TheDefaultHeartbeatTimeoutKeepsTheLimitsItAlwaysHad) {
  const ControllerLossLimits limits = controller_loss_limits(5.0);
  EXPECT_DOUBLE_EQ(limits.grace_seconds, 2.0);
  EXPECT_DOUBLE_EQ(limits.unreachable_seconds, 5.0);
  EXPECT_DOUBLE_EQ(limits.probe_interval_seconds, 1.0);
}

TEST(ControllerLoss, TheLimitsFollowTheHeartbeatTimeout) {
  // A 2 s job: a heartbeat every 0.4 s; grace of two beats, the host silent for the timeout.
  const ControllerLossLimits two = controller_loss_limits(2.0);
  EXPECT_DOUBLE_EQ(two.grace_seconds, 0.8);
  EXPECT_DOUBLE_EQ(two.unreachable_seconds, 2.0);
  EXPECT_DOUBLE_EQ(two.probe_interval_seconds, 0.4);
  // The longest timeout the policy allows: probes stay a second apart.
  const ControllerLossLimits minute = controller_loss_limits(60.0);
  EXPECT_DOUBLE_EQ(minute.grace_seconds, 24.0);
  EXPECT_DOUBLE_EQ(minute.unreachable_seconds, 60.0);
  EXPECT_DOUBLE_EQ(minute.probe_interval_seconds, 1.0);
  // The shortest: a probe still waits 0.25 s for an answer.
  const ControllerLossLimits half = controller_loss_limits(0.5);
  EXPECT_DOUBLE_EQ(half.grace_seconds, 0.2);
  EXPECT_DOUBLE_EQ(half.unreachable_seconds, 0.5);
  EXPECT_DOUBLE_EQ(half.probe_interval_seconds, 0.25);
}

TEST(ControllerLoss, ANodeCutOffFromA2sJobEndsItsRanksWithinAFewSeconds) {
  // The daemon's connection closes about 2 s after the cut; from then on the decision runs
  // every 0.1 s with the host silent since the first probe after the grace.
  const ControllerLossLimits limits = controller_loss_limits(2.0);
  double ended_after_close = -1.0;
  for (int tick = 0; tick <= 200 && ended_after_close < 0.0; ++tick) {
    const double lost = tick * 0.1;
    const double silent = lost >= limits.grace_seconds ? lost - limits.grace_seconds : 0.0;
    if (action(lost, silent, 1, limits) == ControllerLossAction::end_ranks) ended_after_close = lost;
  }
  // 0.8 s of grace and 2 s of silence (the default's limits: 7 s).
  EXPECT_NEAR(ended_after_close, 2.8, 0.15);
  EXPECT_EQ(action(2.7, 1.9, 1, limits), ControllerLossAction::keep_ranks);
  EXPECT_EQ(action(0.7, 0.0, 1, limits), ControllerLossAction::wait);
  EXPECT_EQ(action(0.8, 0.0, 0, limits), ControllerLossAction::stop);
}

TEST(ControllerLoss, ATimeoutThatIsNotPositiveGetsTheDefaultsLimits) {
  for (const double timeout : {0.0, -1.0}) {
    const ControllerLossLimits limits = controller_loss_limits(timeout);
    EXPECT_DOUBLE_EQ(limits.grace_seconds, 2.0) << timeout;
    EXPECT_DOUBLE_EQ(limits.unreachable_seconds, 5.0) << timeout;
    EXPECT_DOUBLE_EQ(limits.probe_interval_seconds, 1.0) << timeout;
  }
}

TEST(ControllerLoss, ActionsHaveNames) {
  EXPECT_STREQ(to_string(ControllerLossAction::wait), "wait");
  EXPECT_STREQ(to_string(ControllerLossAction::keep_ranks), "keep_ranks");
  EXPECT_STREQ(to_string(ControllerLossAction::end_ranks), "end_ranks");
  EXPECT_STREQ(to_string(ControllerLossAction::stop), "stop");
}

}  // namespace
