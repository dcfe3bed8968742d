// predict_expand(): the efficiency of an expand predicted from a job's task graph.

#include <gtest/gtest.h>

#include "bellows/policy/scaling.hpp"

namespace bp = bellows::policy;

namespace {

bp::ScalingInput job(int nodes, int added, double t, double work, double critical, std::uint64_t lanes = 1) {
  return bp::ScalingInput{nodes, added, t, work, critical, lanes};
}

TEST(PredictExpand, WorkThatSpreadsPredictsFullEfficiency) {
  // 4 s of work on 4 nodes, nothing unexplained: 2 s on 8 nodes.
  const auto p = bp::predict_expand(job(4, 4, 1.0, 4.0, 0.01));
  ASSERT_TRUE(p.has_value());
  EXPECT_DOUBLE_EQ(p->bound_now, 1.0);
  EXPECT_DOUBLE_EQ(p->bound_after, 0.5);
  EXPECT_DOUBLE_EQ(p->unexplained_seconds, 0.0);
  EXPECT_DOUBLE_EQ(p->seconds_after, 0.5);
  EXPECT_DOUBLE_EQ(p->efficiency, 1.0);
}

TEST(PredictExpand, TheCriticalPathCapsTheGain) {
  // Bound now max(8 / 4, 1.5) = 2; after max(1, 1.5) = 1.5: E = (2 / 1.5 - 1) / 1 = 1/3.
  const auto p = bp::predict_expand(job(4, 4, 2.0, 8.0, 1.5));
  ASSERT_TRUE(p.has_value());
  EXPECT_DOUBLE_EQ(p->seconds_after, 1.5);
  EXPECT_NEAR(p->efficiency, 1.0 / 3.0, 1e-12);
}

TEST(PredictExpand, WhatTheGraphDoesNotExplainStays) {
  // A communication-bound job: 0.1 s of compute per node in a 1 s iteration.
  const auto p = bp::predict_expand(job(4, 2, 1.0, 0.4, 0.01));
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->unexplained_seconds, 0.9, 1e-12);
  EXPECT_NEAR(p->seconds_after, 0.4 / 6 + 0.9, 1e-12);
  EXPECT_LT(p->efficiency, 0.1);
}

TEST(PredictExpand, LanesShareTheWork) {
  const auto one = bp::predict_expand(job(2, 2, 4.0, 8.0, 0.0, 1));
  const auto four = bp::predict_expand(job(2, 2, 1.0, 8.0, 0.0, 4));
  ASSERT_TRUE(one && four);
  EXPECT_DOUBLE_EQ(one->bound_now, 4.0);
  EXPECT_DOUBLE_EQ(four->bound_now, 1.0);
  EXPECT_DOUBLE_EQ(four->efficiency, 1.0);
}

TEST(PredictExpand, NoPredictionWithoutAGraphOrAnIteration) {
  EXPECT_FALSE(bp::predict_expand(job(2, 1, 1.0, 0.0, 0.0)).has_value());
  EXPECT_FALSE(bp::predict_expand(job(2, 1, 0.0, 1.0, 0.0)).has_value());
  EXPECT_FALSE(bp::predict_expand(job(2, 1, 1.0, 1.0, 0.0, 0)).has_value());
  EXPECT_FALSE(bp::predict_expand(job(0, 1, 1.0, 1.0, 0.0)).has_value());
  EXPECT_FALSE(bp::predict_expand(job(2, 0, 1.0, 1.0, 0.0)).has_value());
}

}  // namespace
