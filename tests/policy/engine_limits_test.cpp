// The policy engine: node limits and step, idle nodes, release order, bad input.

#include <gtest/gtest.h>

#include <stdexcept>

#include "engine_support.hpp"

namespace bp = bellows::policy;
using namespace bp::testing;

namespace {

const char* kLimits = R"(
nodes: {min: 2, max: 8, step: 2}
expand: {busy_fraction_above: 0.9}
shrink: {pending_jobs_at_least: 1}
hysteresis_ticks: 1
cooldown: 0s
)";

std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

TEST(PolicyEngineLimits, ExpandStopsAtMax) {
  bp::PolicyEngine engine(policy_from(kLimits));
  auto d = engine.tick(input(t0, nodes(7, 0, 0.95), 10));
  EXPECT_EQ(d.action, bp::Action::expand);
  EXPECT_EQ(d.nodes, 1);
  EXPECT_EQ(d.reason,
            "expand by 1 (nodes.step 2, limited by nodes.max 8): expand.busy_fraction_above: "
            "0.95 > 0.9 (held 1 tick)");
  engine.resize_committed(t0 + 1s, 7, 8);
  d = engine.tick(input(t0 + 2s, nodes(8, 0, 0.95), 10));
  EXPECT_EQ(d.action, bp::Action::hold);
  EXPECT_EQ(d.reason,
            "hold: expand fired (expand.busy_fraction_above: 0.95 > 0.9 (held 1 tick)) but the "
            "job is at nodes.max (8)");
}

TEST(PolicyEngineLimits, ExpandAsksForNoMoreThanTheIdleNodes) {
  bp::PolicyEngine engine(policy_from(kLimits));
  auto d = engine.tick(input(t0, nodes(4, 0, 0.95), 0));
  EXPECT_EQ(d.reason,
            "hold: expand fired (expand.busy_fraction_above: 0.95 > 0.9 (held 1 tick)) but the "
            "partition has no idle node");
  d = engine.tick(input(t0 + 1s, nodes(4, 0, 0.95), 1));
  EXPECT_EQ(d.action, bp::Action::expand);
  EXPECT_EQ(d.nodes, 1);
  EXPECT_EQ(d.reason,
            "expand by 1 (nodes.step 2, limited by 1 idle node): expand.busy_fraction_above: "
            "0.95 > 0.9 (held 2 ticks)");
}

TEST(PolicyEngineLimits, ShrinkStopsAtMin) {
  bp::PolicyEngine engine(policy_from(kLimits));
  auto d = engine.tick(input(t0, nodes(3, 0, 0.5), 0, 4));
  EXPECT_EQ(d.action, bp::Action::shrink);
  EXPECT_EQ(d.nodes, 1);
  EXPECT_EQ(d.reason,
            "shrink by 1 (nodes.step 2, limited by nodes.min 2): shrink.pending_jobs_at_least: "
            "4 >= 1 (held 1 tick); releasing n2 (release_order newest)");
  engine.resize_committed(t0 + 1s, 3, 2);
  d = engine.tick(input(t0 + 2s, nodes(2, 0, 0.5), 0, 4));
  EXPECT_EQ(d.reason,
            "hold: shrink fired (shrink.pending_jobs_at_least: 4 >= 1 (held 1 tick)) but the job "
            "is at nodes.min (2)");
}

TEST(PolicyEngineLimits, ShrinkByAFullStep) {
  bp::PolicyEngine engine(policy_from(kLimits));
  const auto d = engine.tick(input(t0, nodes(6, 0, 0.5), 0, 1));
  EXPECT_EQ(d.nodes, 2);
  EXPECT_EQ(d.release, (std::vector<std::string>{"n5", "n4"}));
}

TEST(PolicyEngineLimits, TheBatchHostIsNeverReleased) {
  bp::PolicyEngine engine(policy_from(R"(
nodes: {min: 1, max: 8, step: 3}
shrink: {pending_jobs_at_least: 1}
hysteresis_ticks: 1
release_order: least_loaded
)"));
  // Only the batch host and one other node reported.
  auto metrics = nodes(2, 5, 0.5);
  metrics[0].metrics.ready_tasks = 0;  // the least loaded, but index 0
  bp::TickInput in = input(t0, metrics, 0, 1);
  in.nodes = 5;
  auto d = engine.tick(in);
  EXPECT_EQ(d.action, bp::Action::shrink);
  EXPECT_EQ(d.nodes, 1);
  EXPECT_EQ(d.reason,
            "shrink by 1 (nodes.step 3, limited by 1 releasable node): "
            "shrink.pending_jobs_at_least: 1 >= 1 (held 1 tick); releasing n1 (release_order "
            "least_loaded)");
  EXPECT_EQ(d.release, std::vector<std::string>{"n1"});

  bp::PolicyEngine alone(engine.policy());
  const auto host = nodes(1, 0, 0.0);
  in = input(t0, host, 0, 1);
  in.nodes = 3;
  EXPECT_EQ(alone.tick(in).reason,
            "hold: shrink fired (shrink.pending_jobs_at_least: 1 >= 1 (held 1 tick)) but no "
            "reported node can be released (never index 0)");
}

namespace {

// Five nodes whose join order, load and index disagree.
std::vector<bp::NodeMetrics> mixed() {
  auto m = nodes(5, 0, 0.5);
  // name  index joined ready busy
  m[0].joined = 0; m[0].metrics.ready_tasks = 0;  m[0].metrics.busy_fraction = 0.0;  // batch host
  m[1].joined = 4; m[1].metrics.ready_tasks = 9;  m[1].metrics.busy_fraction = 0.9;
  m[2].joined = 1; m[2].metrics.ready_tasks = 1;  m[2].metrics.busy_fraction = 0.7;
  m[3].joined = 3; m[3].metrics.ready_tasks = 1;  m[3].metrics.busy_fraction = 0.2;
  m[4].joined = 2; m[4].metrics.ready_tasks = 5;  m[4].metrics.busy_fraction = 0.1;
  return m;
}

std::vector<std::string> released(const char* order) {
  bp::PolicyEngine engine(policy_from(std::string(R"(
nodes: {min: 1, max: 8, step: 3}
shrink: {pending_jobs_at_least: 1}
hysteresis_ticks: 1
release_order: )") + order + "\n"));
  const auto metrics = mixed();
  const auto d = engine.tick(input(t0, metrics, 0, 1));
  EXPECT_EQ(d.action, bp::Action::shrink);
  EXPECT_EQ(d.nodes, 3);
  return d.release;
}

}  // namespace

TEST(PolicyEngineLimits, ReleaseOrder) {
  EXPECT_EQ(released("newest"), (std::vector<std::string>{"n1", "n3", "n4"}));
  EXPECT_EQ(released("least_loaded"), (std::vector<std::string>{"n3", "n2", "n4"}));
  EXPECT_EQ(released("highest_index"), (std::vector<std::string>{"n4", "n3", "n2"}));
}

TEST(PolicyEngineLimits, AReloadedRangeIsEnforcedFirst) {
  bp::PolicyEngine engine(policy_from(kLimits));
  ASSERT_TRUE(engine.reload("nodes: {min: 2, max: 4, step: 1}\ncooldown: 0s\n", "r.yaml").empty());
  auto d = engine.tick(input(t0, nodes(6, 0, 0.5)));
  EXPECT_EQ(d.action, bp::Action::shrink);
  EXPECT_EQ(d.nodes, 2);
  EXPECT_EQ(d.reason,
            "shrink by 2: the job has 6 nodes, above nodes.max (4); releasing n5, n4 "
            "(release_order newest)");
  engine.resize_committed(t0 + 1s, 6, 4);

  ASSERT_TRUE(engine.reload("nodes: {min: 5, max: 8}\ncooldown: 0s\n", "r.yaml").empty());
  d = engine.tick(input(t0 + 2s, nodes(2, 0, 0.5), 0));
  EXPECT_EQ(d.reason, "hold: the job has 2 nodes, below nodes.min (5), but the partition has no idle node");
  d = engine.tick(input(t0 + 3s, nodes(2, 0, 0.5), 2));
  EXPECT_EQ(d.action, bp::Action::expand);
  EXPECT_EQ(d.nodes, 2);
  EXPECT_EQ(d.reason, "expand by 2: the job has 2 nodes, below nodes.min (5)");
}

TEST(PolicyEngineLimits, NoTriggersWrittenNeverResizes) {
  bp::PolicyEngine engine(policy_from("nodes: {min: 1, max: 8}\nhysteresis_ticks: 1\n"));
  for (int i = 0; i < 5; ++i) {
    const auto d = engine.tick(input(t0 + i * 1s, nodes(3, 100, 1.0), 5, 5));
    EXPECT_EQ(d.reason, "hold: no trigger holds");
  }
}

TEST(PolicyEngineLimits, BadInputIsNamed) {
  bp::PolicyEngine engine(policy_from(kLimits));
  auto metrics = nodes(3, 0, 0.5);
  metrics[1].metrics.busy_fraction = 1.5;
  EXPECT_EQ(thrown([&] { (void)engine.tick(input(t0, metrics)); }),
            "tick input: node 'n1' (index 1): busy_fraction: 1.500000 is not in [0, 1]");
  metrics = nodes(3, 0, 0.5);
  metrics[2].metrics.steals_sent = 3;
  metrics[2].metrics.steals_failed = 4;
  EXPECT_EQ(thrown([&] { (void)engine.tick(input(t0, metrics)); }),
            "tick input: node 'n2' (index 2): steals_failed: 4 exceeds steals_sent 3");
  metrics = nodes(3, 0, 0.5);
  metrics[0].metrics.iteration_seconds = -2.5;
  EXPECT_EQ(thrown([&] { (void)engine.tick(input(t0, metrics)); }),
            "tick input: node 'n0' (index 0): iteration_seconds: -2.500000 is not a finite time "
            ">= 0");
  metrics = nodes(3, 0, 0.5);
  auto in = input(t0, metrics);
  in.nodes = 0;
  EXPECT_EQ(thrown([&] { (void)engine.tick(in); }), "tick input: nodes must be at least 1, got 0");
  in = input(t0, metrics, -1);
  EXPECT_EQ(thrown([&] { (void)engine.tick(in); }),
            "tick input: idle_nodes must not be negative, got -1");
  in = input(t0, metrics, 0, -2);
  EXPECT_EQ(thrown([&] { (void)engine.tick(in); }),
            "tick input: pending_jobs must not be negative, got -2");
  EXPECT_EQ(thrown([&] { engine.resize_committed(t0, 0, 2); }),
            "resize_committed: node counts must be at least 1, got 0 -> 2");
}

TEST(PolicyEngineLimits, AnInconsistentPolicyIsRefused) {
  bp::Policy p;
  p.nodes.min = 4;
  EXPECT_EQ(thrown([&] { bp::PolicyEngine engine(p); }),
            "policy: nodes.min (4) is larger than nodes.max (1)");
  p = bp::Policy{};
  p.hysteresis_ticks = 0;
  EXPECT_EQ(thrown([&] { bp::PolicyEngine engine(p); }),
            "policy: nodes.min, nodes.step and hysteresis_ticks must be at least 1");
}

TEST(PolicyEngineLimits, LargeMeasuresReadPlainly) {
  bp::PolicyEngine engine(policy_from(R"(
nodes: {min: 1, max: 8}
expand: {ready_tasks_per_node_above: 2500}
hysteresis_ticks: 2
)"));
  auto metrics = nodes(2, 12345, 0.5);
  metrics[1].metrics.ready_tasks = 12346;  // 12345.5 per node
  EXPECT_EQ(engine.tick(input(t0, metrics, 1)).reason,
            "hold: waiting: expand.ready_tasks_per_node_above: 12345.5 > 2500 (held 1 of 2 ticks)");
}
