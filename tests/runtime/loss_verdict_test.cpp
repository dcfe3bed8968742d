// What a rank does while an iteration fails (loss_verdict.hpp).
#include <bellows/runtime/loss_verdict.hpp>

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace {

using bellows::runtime::decide_loss_verdict;
using bellows::runtime::LossVerdict;
using bellows::runtime::LossVerdictFacts;
using bellows::runtime::LossVerdictLimits;

LossVerdict unnamed_failure(double since_failure, LossVerdictLimits limits = {}) {
  return decide_loss_verdict(LossVerdictFacts{false, 0.0, since_failure}, limits);
}

LossVerdict peer_lost(double since_first_loss, double since_failure, LossVerdictLimits limits = {}) {
  return decide_loss_verdict(LossVerdictFacts{true, since_first_loss, since_failure}, limits);
}

TEST(LossVerdict, AFailureNamingNoPeerWaitsPastTheGrace) {
  // The case seen on 16 loaded ranks: the barrier failed, the watch had not spoken 100 ms on.
  EXPECT_EQ(unnamed_failure(0.0), LossVerdict::wait);
  EXPECT_EQ(unnamed_failure(0.1), LossVerdict::wait);
  EXPECT_EQ(unnamed_failure(0.5), LossVerdict::wait);
  EXPECT_EQ(unnamed_failure(9.99), LossVerdict::wait);
}

TEST(LossVerdict, AFailureNamingNoPeerIsUnexplainedAtTheVerdictLimit) {
  EXPECT_EQ(unnamed_failure(10.0), LossVerdict::unexplained);
  EXPECT_EQ(unnamed_failure(3600.0), LossVerdict::unexplained);
  LossVerdictLimits short_limit;
  short_limit.verdict_seconds = 2.0;
  EXPECT_EQ(unnamed_failure(1.99, short_limit), LossVerdict::wait);
  EXPECT_EQ(unnamed_failure(2.0, short_limit), LossVerdict::unexplained);
}

TEST(LossVerdict, TheDefaultsWaitLongerForAVerdictThanForOthersDeadTogether) {
  const LossVerdictLimits limits;
  EXPECT_DOUBLE_EQ(limits.grace_seconds, 0.1);
  EXPECT_DOUBLE_EQ(limits.verdict_seconds, 10.0);
  EXPECT_GT(limits.verdict_seconds, 5.0);  // past the controller's default heartbeat timeout
}

TEST(LossVerdict, APeerFoundLostIsReportedAfterTheGraceFromTheFirstLoss) {
  EXPECT_EQ(peer_lost(0.0, 0.0), LossVerdict::wait);
  EXPECT_EQ(peer_lost(0.099, 0.099), LossVerdict::wait);
  EXPECT_EQ(peer_lost(0.1, 0.1), LossVerdict::report_lost);
  // Found lost late in a long wait for a verdict: the grace counts from the loss, not the failure.
  EXPECT_EQ(peer_lost(0.05, 4.0), LossVerdict::wait);
  EXPECT_EQ(peer_lost(0.1, 4.05), LossVerdict::report_lost);
  // Found lost after the verdict limit passed: still reported, never unexplained.
  EXPECT_EQ(peer_lost(0.2, 30.0), LossVerdict::report_lost);
}

TEST(LossVerdict, ANanTimeEndsTheWaitInsteadOfProlongingIt) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(unnamed_failure(nan), LossVerdict::unexplained);
  EXPECT_EQ(peer_lost(nan, 0.0), LossVerdict::report_lost);
}

TEST(LossVerdict, NamesEachVerdict) {
  EXPECT_EQ(std::string(to_string(LossVerdict::wait)), "wait");
  EXPECT_EQ(std::string(to_string(LossVerdict::report_lost)), "report_lost");
  EXPECT_EQ(std::string(to_string(LossVerdict::unexplained)), "unexplained");
}

}  // namespace
