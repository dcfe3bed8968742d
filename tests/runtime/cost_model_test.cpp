// CostModel: compute, transfer and round-trip costs learned from synthetic timings, without
// MPI or a clock.

#include <gtest/gtest.h>

#include <cstdint>

#include "bellows/runtime/cost_model.hpp"

using bellows::runtime::CostModel;
using bellows::runtime::CostModelOptions;
using bellows::runtime::LinearFit;

TEST(LinearFit, PredictsNothingBeforeTheFirstSample) {
  const LinearFit fit;
  EXPECT_FALSE(fit.predict(1.0).has_value());
  EXPECT_EQ(fit.samples(), 0U);
}

TEST(LinearFit, RecoversInterceptAndSlopeFromExactSamples) {
  LinearFit fit(1.0);
  for (double x : {1e6, 2e6, 4e6, 8e6, 16e6}) fit.add(x, 5e-6 + 1e-12 * x);
  EXPECT_NEAR(fit.intercept(), 5e-6, 1e-9);
  EXPECT_NEAR(fit.slope(), 1e-12, 1e-16);
  EXPECT_NEAR(*fit.predict(32e6), 5e-6 + 32e-6, 1e-9);
}

TEST(LinearFit, AllSamplesAtOneXPredictProportionally) {
  LinearFit fit;
  for (int i = 0; i < 10; ++i) fit.add(2e6, 4e-6);
  EXPECT_DOUBLE_EQ(fit.intercept(), 0.0);
  EXPECT_NEAR(*fit.predict(2e6), 4e-6, 1e-12);
  EXPECT_NEAR(*fit.predict(1e6), 2e-6, 1e-12);
}

TEST(LinearFit, ForgettingFollowsAChangeOfRegime) {
  LinearFit fit(0.9);
  for (int i = 0; i < 100; ++i) fit.add(1e6, 1e-3);  // slow at first
  for (int i = 0; i < 100; ++i) fit.add(1e6, 1e-5);  // then 100x faster
  EXPECT_NEAR(*fit.predict(1e6), 1e-5, 1e-7);
}

TEST(LinearFit, NeverPredictsNegativeTimes) {
  LinearFit fit(1.0);
  fit.add(1.0, 10.0);
  fit.add(2.0, 1.0);  // decreasing: no usable slope
  EXPECT_GE(*fit.predict(100.0), 0.0);
  EXPECT_GE(*fit.predict(0.0), 0.0);
}

TEST(CostModel, UsesPriorsUntilSamplesArrive) {
  CostModelOptions o;
  o.seconds_per_flop = 1e-12;
  o.transfer_latency_seconds = 20e-6;
  o.seconds_per_byte = 1e-9;
  o.round_trip_seconds = 100e-6;
  const CostModel model(o);
  EXPECT_DOUBLE_EQ(model.task_seconds(0, 2e9), 2e-3);
  EXPECT_DOUBLE_EQ(model.transfer_seconds(1, 1000), 20e-6 + 1e-6);
  EXPECT_DOUBLE_EQ(model.transfer_seconds(1, 0), 0.0);
  EXPECT_DOUBLE_EQ(model.round_trip_seconds(), 100e-6);
}

TEST(CostModel, LearnsEachTaskClassApart) {
  CostModel model;
  for (int i = 0; i < 20; ++i) {
    model.task_ran(0, 2.7e8, 0.27e-3);  // GEMM tiles at 1 TFLOP/s
    model.task_ran(1, 0.9e8, 0.45e-3);  // POTRF-like tiles at 200 GFLOP/s
  }
  EXPECT_NEAR(model.task_seconds(0, 2.7e8), 0.27e-3, 1e-9);
  EXPECT_NEAR(model.task_seconds(1, 0.9e8), 0.45e-3, 1e-9);
  // A class never seen falls back to the fit over all classes.
  EXPECT_GT(model.task_seconds(7, 1e8), 0.0);
}

TEST(CostModel, LearnsLatencyAndBandwidthPerPeer) {
  CostModel model;
  for (std::uint64_t bytes : {512ULL << 10, 1ULL << 20, 2ULL << 20, 4ULL << 20}) {
    model.transfer_done(1, bytes, 30e-6 + static_cast<double>(bytes) / 2e9);  // 2 GB/s
    model.transfer_done(2, bytes, 30e-6 + static_cast<double>(bytes) / 10e9);  // 10 GB/s
  }
  EXPECT_NEAR(model.transfer_seconds(1, 2u << 20), 30e-6 + (2 << 20) / 2e9, 1e-7);
  EXPECT_NEAR(model.transfer_seconds(2, 2u << 20), 30e-6 + (2 << 20) / 10e9, 1e-7);
  // A peer never seen: the fit over all peers, between the two.
  const double unknown = model.transfer_seconds(3, 2u << 20);
  EXPECT_GT(unknown, model.transfer_seconds(2, 2u << 20));
  EXPECT_LT(unknown, model.transfer_seconds(1, 2u << 20));
}

TEST(CostModel, RoundTripIsAWeightedMeanOfTheMeasuredOnes) {
  CostModel model;
  model.round_trip_done(40e-6);
  EXPECT_DOUBLE_EQ(model.round_trip_seconds(), 40e-6);  // the first replaces the prior
  for (int i = 0; i < 200; ++i) model.round_trip_done(80e-6);
  EXPECT_NEAR(model.round_trip_seconds(), 80e-6, 1e-7);
}

TEST(CostModel, WorkSecondsScaleWithFlopsAndTasks) {
  CostModel model;
  for (double f : {1e8, 2e8, 4e8}) model.task_ran(0, f, 10e-6 + f * 1e-12);
  EXPECT_NEAR(model.work_seconds(10, 10 * 2e8), 10 * (10e-6 + 2e8 * 1e-12), 1e-8);
  EXPECT_DOUBLE_EQ(model.work_seconds(0, 0), 0.0);
}

TEST(CostModel, SummaryReportsTheFits) {
  CostModel model;
  for (double f : {1e8, 2e8, 4e8}) model.task_ran(0, f, 10e-6 + f * 1e-12);
  for (double b : {1e6, 2e6, 4e6}) model.transfer_done(1, static_cast<std::uint64_t>(b), 20e-6 + b / 4e9);
  model.round_trip_done(50e-6);
  const auto s = model.summary();
  EXPECT_EQ(s.task_samples, 3U);
  EXPECT_NEAR(s.task_overhead_us, 10.0, 1e-3);
  EXPECT_NEAR(s.seconds_per_gflop, 1e-3, 1e-9);
  EXPECT_EQ(s.transfer_samples, 3U);
  EXPECT_NEAR(s.transfer_latency_us, 20.0, 1e-3);
  EXPECT_NEAR(s.transfer_gbytes_per_s, 4.0, 1e-6);
  EXPECT_EQ(s.round_trip_samples, 1U);
  EXPECT_NEAR(s.round_trip_us, 50.0, 1e-9);
}

TEST(CostModel, RecentTaskSecondsFollowTheTasksRun) {
  CostModel model;
  EXPECT_FALSE(model.recent_task_seconds().has_value());
  model.task_ran(0, 1e9, 2e-3);
  EXPECT_DOUBLE_EQ(model.recent_task_seconds().value(), 2e-3);
  model.task_ran(1, 1e6, 4e-3);  // over all classes
  const double mean = (0.97 * 2e-3 + 4e-3) / (0.97 + 1.0);
  EXPECT_NEAR(model.recent_task_seconds().value(), mean, 1e-12);
}

TEST(DeviceCostPriors, TheEmulatedDeviceAtItsStatedSpeedEverythingElseAtACoresDgemm) {
  using bellows::runtime::DeviceKind;
  bellows::runtime::RuntimeOptions options;
  options.emulated_gflops = 250.0;
  options.device = DeviceKind::emulated;
  EXPECT_DOUBLE_EQ(bellows::runtime::device_cost_priors(options, 0).seconds_per_flop, 1.0 / 250e9);
  options.device = DeviceKind::hybrid;  // the emulated device first, then the CPU workers
  EXPECT_DOUBLE_EQ(bellows::runtime::device_cost_priors(options, 0).seconds_per_flop, 1.0 / 250e9);
  EXPECT_DOUBLE_EQ(bellows::runtime::device_cost_priors(options, 1).seconds_per_flop, 1e-10);
  options.device = DeviceKind::cpu;
  EXPECT_DOUBLE_EQ(bellows::runtime::device_cost_priors(options, 0).seconds_per_flop, 1e-10);
  options.device = DeviceKind::cuda;
  EXPECT_DOUBLE_EQ(bellows::runtime::device_cost_priors(options, 0).seconds_per_flop, 1e-10);
  // The rest of the priors are CostModelOptions' own.
  EXPECT_DOUBLE_EQ(bellows::runtime::device_cost_priors(options, 0).round_trip_seconds,
                   bellows::runtime::CostModelOptions{}.round_trip_seconds);
}
