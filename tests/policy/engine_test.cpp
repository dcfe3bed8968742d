// The policy engine: triggers, hysteresis, in-flight resizes, cooldown, efficiency, reload.

#include <gtest/gtest.h>

#include <fstream>

#include "engine_support.hpp"

namespace bp = bellows::policy;
using namespace bp::testing;

namespace {

const char* kBusy = R"(
nodes: {min: 1, max: 8, step: 2}
expand:
  busy_fraction_above: 0.9
hysteresis_ticks: 3
cooldown: 30s
resize_timeout: 1m
)";

}  // namespace

TEST(PolicyEngine, TriggerFiresAfterHysteresisTicks) {
  bp::PolicyEngine engine(policy_from(kBusy));
  const auto busy = nodes(4, 2, 0.95);
  auto d = engine.tick(input(t0, busy, 10));
  EXPECT_EQ(d.action, bp::Action::hold);
  EXPECT_EQ(d.nodes, 0);
  EXPECT_EQ(d.reason, "hold: waiting: expand.busy_fraction_above: 0.95 > 0.9 (held 1 of 3 ticks)");
  d = engine.tick(input(t0 + 5s, busy, 10));
  EXPECT_EQ(d.reason, "hold: waiting: expand.busy_fraction_above: 0.95 > 0.9 (held 2 of 3 ticks)");
  d = engine.tick(input(t0 + 10s, busy, 10));
  EXPECT_EQ(d.action, bp::Action::expand);
  EXPECT_EQ(d.nodes, 2);
  EXPECT_EQ(d.reason, "expand by 2: expand.busy_fraction_above: 0.95 > 0.9 (held 3 ticks)");
  EXPECT_TRUE(d.release.empty());
  EXPECT_TRUE(engine.resize_in_flight());
}

TEST(PolicyEngine, ATickWithoutTheTriggerStartsTheCountAgain) {
  bp::PolicyEngine engine(policy_from(kBusy));
  const auto busy = nodes(4, 2, 0.95);
  const auto calm = nodes(4, 2, 0.9);  // not above 0.9
  (void)engine.tick(input(t0, busy, 10));
  (void)engine.tick(input(t0 + 5s, busy, 10));
  auto d = engine.tick(input(t0 + 10s, calm, 10));
  EXPECT_EQ(d.reason, "hold: no trigger holds");
  d = engine.tick(input(t0 + 15s, busy, 10));
  EXPECT_EQ(d.reason, "hold: waiting: expand.busy_fraction_above: 0.95 > 0.9 (held 1 of 3 ticks)");
  (void)engine.tick(input(t0 + 20s, busy, 10));
  EXPECT_EQ(engine.tick(input(t0 + 25s, busy, 10)).action, bp::Action::expand);
}

TEST(PolicyEngine, HoldsWhileAResizeIsInFlightAndSaysWhenItIsOverdue) {
  bp::PolicyEngine engine(policy_from(kBusy));
  const auto busy = nodes(4, 2, 0.95);
  for (int i = 0; i < 2; ++i) (void)engine.tick(input(t0, busy, 10));
  ASSERT_EQ(engine.tick(input(t0, busy, 10)).action, bp::Action::expand);
  for (int i = 1; i <= 12; ++i) {  // 5s ... 55s, then 1m
    const auto d = engine.tick(input(t0 + i * 5s, busy, 10));
    EXPECT_EQ(d.action, bp::Action::hold);
    EXPECT_EQ(d.reason, "hold: a resize is in flight (for " + bp::format_duration(i * 5s) + ")");
  }
  EXPECT_FALSE(engine.resize_overdue(t0 + 60s));
  EXPECT_TRUE(engine.resize_overdue(t0 + 61s));
  EXPECT_EQ(engine.tick(input(t0 + 61s, busy, 10)).reason,
            "hold: a resize has been in flight for 61s, past resize_timeout (1m): abort it");
  engine.resize_aborted(t0 + 62s);
  EXPECT_FALSE(engine.resize_in_flight());
}

TEST(PolicyEngine, CooldownAfterCommitThenCountingStartsAfresh) {
  bp::PolicyEngine engine(policy_from(kBusy));
  const auto busy = nodes(6, 2, 0.95);
  engine.resize_started(t0);
  EXPECT_EQ(engine.tick(input(t0 + 1s, busy, 10)).reason, "hold: a resize is in flight (for 1s)");
  engine.resize_committed(t0 + 2s, 4, 6);
  EXPECT_FALSE(engine.resize_in_flight());
  EXPECT_EQ(engine.tick(input(t0 + 12s, busy, 10)).reason,
            "hold: cooldown after the last resize, 20s left");
  EXPECT_EQ(engine.tick(input(t0 + 31500ms, busy, 10)).reason,
            "hold: cooldown after the last resize, 500ms left");
  // Cooldown over: the ticks in it did not count.
  EXPECT_EQ(engine.tick(input(t0 + 32s, busy, 10)).reason,
            "hold: waiting: expand.busy_fraction_above: 0.95 > 0.9 (held 1 of 3 ticks)");
  (void)engine.tick(input(t0 + 37s, busy, 10));
  const auto d = engine.tick(input(t0 + 42s, busy, 10));
  EXPECT_EQ(d.action, bp::Action::expand);
  EXPECT_EQ(d.nodes, 2);
}

TEST(PolicyEngine, CooldownAfterAbortToo) {
  bp::PolicyEngine engine(policy_from(kBusy));
  engine.resize_started(t0);
  engine.resize_aborted(t0 + 10s);
  EXPECT_EQ(engine.tick(input(t0 + 25s, nodes(2, 0, 0.95), 1)).reason,
            "hold: cooldown after the last resize, 15s left");
}

// A controller that takes a job over starts a new engine. Without the time of the job's last
// resize it would decide at its first tick; with it the cooldown runs on from that resize's end.
TEST(PolicyEngine, ANewEngineDecidesAtOnceWithoutTheLastResizesTime) {
  bp::PolicyEngine engine(policy_from(kBusy));
  const auto busy = nodes(4, 2, 0.95);
  (void)engine.tick(input(t0, busy, 10));
  (void)engine.tick(input(t0 + 1s, busy, 10));
  EXPECT_EQ(engine.tick(input(t0 + 2s, busy, 10)).action, bp::Action::expand);
}

TEST(PolicyEngine, ACooldownCarriesOverATakeover) {
  bp::PolicyEngine engine(policy_from(kBusy));  // cooldown 30s
  const auto busy = nodes(4, 2, 0.95);
  engine.resize_finished_earlier(t0, 12s);  // the last resize ended 12 s before the takeover
  EXPECT_FALSE(engine.resize_in_flight());
  EXPECT_EQ(engine.tick(input(t0, busy, 10)).reason, "hold: cooldown after the last resize, 18s left");
  EXPECT_EQ(engine.tick(input(t0 + 17s, busy, 10)).reason, "hold: cooldown after the last resize, 1s left");
  // Over 30 s after the resize: the ticks in the cooldown did not count.
  EXPECT_EQ(engine.tick(input(t0 + 18s, busy, 10)).reason,
            "hold: waiting: expand.busy_fraction_above: 0.95 > 0.9 (held 1 of 3 ticks)");
  (void)engine.tick(input(t0 + 19s, busy, 10));
  EXPECT_EQ(engine.tick(input(t0 + 20s, busy, 10)).action, bp::Action::expand);
}

TEST(PolicyEngine, ACooldownThatRanOutBeforeTheTakeoverHoldsNothing) {
  bp::PolicyEngine engine(policy_from(kBusy));
  const auto busy = nodes(4, 2, 0.95);
  engine.resize_finished_earlier(t0, 30s);
  EXPECT_EQ(engine.tick(input(t0, busy, 10)).reason,
            "hold: waiting: expand.busy_fraction_above: 0.95 > 0.9 (held 1 of 3 ticks)");
}

TEST(PolicyEngine, AResizeThatEndsAfterNowIsRefused) {
  bp::PolicyEngine engine(policy_from(kBusy));
  try {
    engine.resize_finished_earlier(t0, -1s);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "resize_finished_earlier: the last resize cannot end after now, got -1s ago");
  }
}

TEST(PolicyEngine, CombineAllWaitsForEveryTrigger) {
  bp::PolicyEngine engine(policy_from(R"(
nodes: {min: 1, max: 8, step: 2}
expand:
  combine: all
  busy_fraction_above: 0.9
  idle_nodes_at_least: 2
hysteresis_ticks: 1
)"));
  const auto busy = nodes(2, 0, 0.95);
  EXPECT_EQ(engine.tick(input(t0, busy, 1)).reason,
            "hold: waiting: expand.busy_fraction_above: 0.95 > 0.9 (held 1 tick); combine all: "
            "1 of 2 triggers fired");
  const auto d = engine.tick(input(t0 + 5s, busy, 2));
  EXPECT_EQ(d.action, bp::Action::expand);
  EXPECT_EQ(d.reason,
            "expand by 2: expand.busy_fraction_above: 0.95 > 0.9 (held 2 ticks); "
            "expand.idle_nodes_at_least: 2 >= 2 (held 1 tick)");
}

TEST(PolicyEngine, CombineAnyNamesEveryTriggerThatFired) {
  bp::PolicyEngine engine(policy_from(R"(
nodes: {min: 1, max: 8, step: 1}
expand:
  ready_tasks_per_node_above: 8
  busy_fraction_above: 0.9
  steal_failure_ratio_below: 0.2
hysteresis_ticks: 1
)"));
  auto metrics = nodes(2, 0, 0.95);
  metrics[0].metrics.ready_tasks = 10;
  metrics[1].metrics.ready_tasks = 30;  // 20 per node
  metrics[0].metrics.steals_sent = 60;
  metrics[0].metrics.steals_failed = 6;
  metrics[1].metrics.steals_sent = 40;
  metrics[1].metrics.steals_failed = 4;  // 10 of 100 failed
  const auto d = engine.tick(input(t0, metrics, 5));
  EXPECT_EQ(d.reason,
            "expand by 1: expand.ready_tasks_per_node_above: 20 > 8 (held 1 tick); "
            "expand.busy_fraction_above: 0.95 > 0.9 (held 1 tick); "
            "expand.steal_failure_ratio_below: 0.1 < 0.2 (held 1 tick)");
}

TEST(PolicyEngine, StealFailureRatioNeedsStealRequests) {
  bp::PolicyEngine engine(policy_from(R"(
nodes: {min: 1, max: 8}
shrink:
  steal_failure_ratio_above: 0.8
hysteresis_ticks: 1
)"));
  auto metrics = nodes(3, 0, 0.1);
  EXPECT_EQ(engine.tick(input(t0, metrics)).reason, "hold: no trigger holds");
  metrics[1].metrics.steals_sent = 10;
  metrics[1].metrics.steals_failed = 9;
  const auto d = engine.tick(input(t0 + 5s, metrics));
  EXPECT_EQ(d.action, bp::Action::shrink);
  EXPECT_EQ(d.reason,
            "shrink by 1: shrink.steal_failure_ratio_above: 0.9 > 0.8 (held 1 tick); "
            "releasing n2 (release_order newest)");
  EXPECT_EQ(d.release, std::vector<std::string>{"n2"});
}

TEST(PolicyEngine, ExpandAndShrinkTogetherHold) {
  bp::PolicyEngine engine(policy_from(R"(
nodes: {min: 1, max: 8}
expand: {idle_nodes_at_least: 1}
shrink: {pending_jobs_at_least: 1}
hysteresis_ticks: 1
)"));
  const auto d = engine.tick(input(t0, nodes(3, 0, 0.5), 2, 1));
  EXPECT_EQ(d.action, bp::Action::hold);
  EXPECT_EQ(d.reason,
            "hold: expand and shrink both fired (expand.idle_nodes_at_least: 2 >= 1 (held 1 "
            "tick) | shrink.pending_jobs_at_least: 1 >= 1 (held 1 tick))");
  EXPECT_FALSE(engine.resize_in_flight());
}

TEST(PolicyEngine, NoMetricsNoDecision) {
  bp::PolicyEngine engine(policy_from(kBusy));
  bp::TickInput in;
  in.now = t0;
  in.nodes = 3;
  EXPECT_EQ(engine.tick(in).reason, "hold: no node reported metrics");
}

namespace {

const char* kEfficiency = R"(
nodes: {min: 1, max: 8, step: 2}
shrink:
  iteration_efficiency_below: 0.5
hysteresis_ticks: 1
cooldown: 0s
)";

std::vector<bp::NodeMetrics> iterated(int count, std::uint64_t iterations, double seconds) {
  auto out = nodes(count, 1.0, 0.8);
  for (auto& m : out) {
    m.metrics.iteration = iterations;
    m.metrics.iteration_seconds = seconds;
  }
  return out;
}

}  // namespace

TEST(PolicyEngine, IterationEfficiencyAfterAnExpand) {
  bp::PolicyEngine engine(policy_from(kEfficiency));
  EXPECT_EQ(engine.tick(input(t0, iterated(2, 5, 10.0))).reason, "hold: no trigger holds");
  engine.resize_started(t0 + 1s);
  engine.resize_committed(t0 + 2s, 2, 4);
  // The first tick after the commit: new nodes have no iteration yet; the old ones' count
  // becomes the baseline, whatever size its iterations ran at.
  auto after = iterated(4, 5, 10.0);
  after[2].metrics.iteration = after[3].metrics.iteration = 0;
  after[2].metrics.iteration_seconds = after[3].metrics.iteration_seconds = 0.0;
  EXPECT_EQ(engine.tick(input(t0 + 3s, after)).reason, "hold: no trigger holds");
  EXPECT_FALSE(engine.iteration_efficiency().has_value());
  // Iteration 6 at 4 nodes took 8 s against 10 s at 2: E = (10 / 8 - 1) / (2 / 2) = 0.25.
  auto measured = iterated(4, 6, 8.0);
  measured[1].metrics.iteration_seconds = 7.5;  // the job's time is the slowest node's
  const auto d = engine.tick(input(t0 + 13s, measured));
  ASSERT_TRUE(engine.iteration_efficiency().has_value());
  EXPECT_DOUBLE_EQ(*engine.iteration_efficiency(), 0.25);
  EXPECT_EQ(d.action, bp::Action::shrink);
  EXPECT_EQ(d.nodes, 2);
  EXPECT_EQ(d.reason,
            "shrink by 2: shrink.iteration_efficiency_below: 0.25 < 0.5 (held 1 tick); "
            "releasing n3, n2 (release_order newest)");
  EXPECT_EQ(d.release, (std::vector<std::string>{"n3", "n2"}));
  // The shrink forgets the measurement.
  engine.resize_committed(t0 + 14s, 4, 2);
  EXPECT_FALSE(engine.iteration_efficiency().has_value());
  EXPECT_EQ(engine.tick(input(t0 + 15s, iterated(2, 7, 16.0))).reason, "hold: no trigger holds");
}

TEST(PolicyEngine, IterationEfficiencySkipsTheIterationAroundTheCommit) {
  bp::PolicyEngine engine(policy_from(kEfficiency));
  (void)engine.tick(input(t0, iterated(2, 5, 10.0)));
  engine.resize_started(t0 + 1s);
  engine.resize_committed(t0 + 2s, 2, 4);
  // Iteration 6 finished between the last tick and the commit, still at 2 nodes.
  (void)engine.tick(input(t0 + 3s, iterated(4, 6, 10.0)));
  (void)engine.tick(input(t0 + 4s, iterated(4, 6, 10.0)));
  EXPECT_FALSE(engine.iteration_efficiency().has_value());
  // Iteration 7 at 4 nodes: 5 s, twice as fast: E = (10 / 5 - 1) / 1 = 1, no shrink.
  const auto d = engine.tick(input(t0 + 9s, iterated(4, 7, 5.0)));
  ASSERT_TRUE(engine.iteration_efficiency().has_value());
  EXPECT_DOUBLE_EQ(*engine.iteration_efficiency(), 1.0);
  EXPECT_EQ(d.reason, "hold: no trigger holds");
}

TEST(PolicyEngine, IterationEfficiencyOfAnExpandByOneOfFour) {
  bp::PolicyEngine engine(policy_from(kEfficiency));
  (void)engine.tick(input(t0, iterated(4, 3, 12.0)));
  engine.resize_started(t0);
  engine.resize_committed(t0, 4, 5);
  (void)engine.tick(input(t0 + 1s, iterated(5, 3, 12.0)));
  (void)engine.tick(input(t0 + 2s, iterated(5, 4, 10.0)));
  // (12 / 10 - 1) / (1 / 4) = 0.8
  ASSERT_TRUE(engine.iteration_efficiency().has_value());
  EXPECT_DOUBLE_EQ(*engine.iteration_efficiency(), 0.8);
}

TEST(PolicyEngine, ReloadSwapsOnlyAValidPolicy) {
  const bp::Policy original = policy_from(kBusy);
  bp::PolicyEngine engine(original);
  const auto busy = nodes(4, 2, 0.95);
  (void)engine.tick(input(t0, busy, 10));
  (void)engine.tick(input(t0 + 5s, busy, 10));

  const auto errors = engine.reload("nodes: {min: 1, max: 8, step: 2}\nhysteresis_ticks: 0\ncooldwn: 5s\n",
                                    "new.yaml");
  std::vector<std::string> text;
  for (const auto& e : errors) text.push_back(bp::format(e));
  EXPECT_EQ(text, (std::vector<std::string>{
                      "new.yaml:2:19: hysteresis_ticks: must be between 1 and 1000, got 0",
                      "new.yaml:3:1: unknown key 'cooldwn'; did you mean 'cooldown'?"}));
  EXPECT_EQ(engine.policy(), original);
  // The failed reload did not disturb the count: the third busy tick still expands.
  EXPECT_EQ(engine.tick(input(t0 + 10s, busy, 10)).action, bp::Action::expand);
  engine.resize_committed(t0 + 11s, 4, 6);

  // A good reload takes effect and starts the counts afresh.
  EXPECT_TRUE(engine.reload("nodes: {min: 1, max: 8, step: 1}\nexpand: {busy_fraction_above: 0.5}\n"
                            "hysteresis_ticks: 2\ncooldown: 0s\n",
                            "new.yaml")
                  .empty());
  EXPECT_EQ(engine.policy().hysteresis_ticks, 2);
  EXPECT_EQ(engine.policy().expand.busy_fraction_above, 0.5);
  // The cooldown that started under the old policy (30s from the commit) carries on.
  const auto six = nodes(6, 1, 0.6);
  EXPECT_EQ(engine.tick(input(t0 + 12s, six, 10)).reason,
            "hold: cooldown after the last resize, 29s left");
  EXPECT_EQ(engine.tick(input(t0 + 41s, six, 10)).reason,
            "hold: waiting: expand.busy_fraction_above: 0.6 > 0.5 (held 1 of 2 ticks)");
  EXPECT_EQ(engine.tick(input(t0 + 42s, six, 10)).reason,
            "expand by 1: expand.busy_fraction_above: 0.6 > 0.5 (held 2 ticks)");
}

TEST(PolicyEngine, ReloadFromFile) {
  bp::PolicyEngine engine(policy_from(kBusy));
  const auto missing = engine.reload_file("/nonexistent/p.yaml");
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(bp::format(missing[0]),
            "/nonexistent/p.yaml: cannot read the policy file: No such file or directory");
  EXPECT_EQ(engine.policy(), policy_from(kBusy));
  const std::string path = ::testing::TempDir() + "policy_reload_test.yaml";
  {
    std::ofstream out(path);
    out << "nodes: {min: 2, max: 4}\n";
  }
  EXPECT_TRUE(engine.reload_file(path).empty());
  EXPECT_EQ(engine.policy().nodes, (bp::NodeLimits{2, 4, 1}));
  std::remove(path.c_str());
}

namespace {

const char* kPredicted = R"(
nodes: {min: 1, max: 8, step: 2}
expand:
  busy_fraction_above: 0.5
  predicted_efficiency_above: 0.5
hysteresis_ticks: 1
cooldown: 0s
)";

/// Two busy nodes after iteration 5 at 1 s each; n0 reports a graph of `work` seconds with a
/// critical path of `critical` on 1 lane per rank.
std::vector<bp::NodeMetrics> shaped(double work, double critical) {
  auto out = iterated(2, 5, 1.0);
  out[0].metrics.graph_work_seconds = work;
  out[0].metrics.graph_critical_path_seconds = critical;
  out[0].metrics.lanes_per_rank = 1;
  return out;
}

}  // namespace

TEST(PolicyEngine, PredictedEfficiencyLetsAnExpandThatSpreadsItsWork) {
  bp::PolicyEngine engine(policy_from(kPredicted));
  // 1.8 s of work on 2 nodes: bound 0.9 s, 0.1 s unexplained; on 4: 0.45 + 0.1 = 0.55 s.
  // E = (1 / 0.55 - 1) / (2 / 2) = 0.818.
  const auto d = engine.tick(input(t0, shaped(1.8, 0.05), 4));
  EXPECT_EQ(d.action, bp::Action::expand);
  EXPECT_EQ(d.nodes, 2);
  EXPECT_EQ(d.reason,
            "expand by 2: expand.busy_fraction_above: 0.8 > 0.5 (held 1 tick); "
            "expand.predicted_efficiency_above: 0.8182 > 0.5 (iteration 1 s now, 0.55 s "
            "predicted on 4 nodes (work 1.8 s over 2 x 1 lanes, critical path 0.05 s, "
            "unexplained 0.1 s))");
}

TEST(PolicyEngine, PredictedEfficiencyHoldsAJobBoundByItsCriticalPath) {
  bp::PolicyEngine engine(policy_from(kPredicted));
  // The critical path is 0.8 s of the 1 s: on 4 nodes 0.8 + 0.2 = 1 s, no gain.
  const auto d = engine.tick(input(t0, shaped(1.6, 0.8), 4));
  EXPECT_EQ(d.action, bp::Action::hold);
  EXPECT_EQ(d.reason,
            "hold: expand fired (expand.busy_fraction_above: 0.8 > 0.5 (held 1 tick)) but "
            "expand.predicted_efficiency_above: 0 <= 0.5 (iteration 1 s now, 1 s predicted on 4 "
            "nodes (work 1.6 s over 2 x 1 lanes, critical path 0.8 s, unexplained 0.2 s))");
  EXPECT_FALSE(engine.resize_in_flight());
}

TEST(PolicyEngine, PredictedEfficiencyWaitsForTheGraph) {
  bp::PolicyEngine engine(policy_from(kPredicted));
  const auto d = engine.tick(input(t0, iterated(2, 5, 1.0), 4));
  EXPECT_EQ(d.action, bp::Action::hold);
  EXPECT_EQ(d.reason,
            "hold: expand fired (expand.busy_fraction_above: 0.8 > 0.5 (held 1 tick)) but "
            "expand.predicted_efficiency_above waits for the job's task graph and iteration "
            "time (not reported yet)");
}
