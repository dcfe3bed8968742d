// Reading policies: good files, every bad file in bad/ against its exact diagnostics,
// the shipped examples, node ranges.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bellows/policy/load.hpp"

namespace bp = bellows::policy;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> formatted(const bp::LoadResult& result) {
  std::vector<std::string> out;
  for (const auto& d : result.diagnostics) out.push_back(bp::format(d));
  return out;
}

}  // namespace

TEST(PolicyParse, EveryKeyWritten) {
  const auto result = bp::parse_policy(R"(# all keys
nodes: {min: 2, max: 10, step: 2}
expand:
  combine: all
  ready_tasks_per_node_above: 8.5
  busy_fraction_above: 0.9
  steal_failure_ratio_below: 0.1
  idle_nodes_at_least: 3
shrink:
  combine: any
  ready_tasks_per_node_below: 0.5
  busy_fraction_below: 0.25
  steal_failure_ratio_above: 0.75
  iteration_efficiency_below: -0.5
  pending_jobs_at_least: 2
tick: 1500ms
hysteresis_ticks: 4
cooldown: 2m
resize_timeout: 1h
release_order: least_loaded
stealing:
  enabled: true
  chunk: 6
  max_hops: 0
  device_threshold: 2
  node_threshold: 3
  victim: random
  seed: 4294967295
  min_backoff_us: 10
  max_backoff_us: 10
  victim_poll_us: 7
recovery:
  on_node_loss: shrink
  node_mean_time_between_failures: 43800h
  heartbeat_timeout: 2500ms
)",
                                       "all.yaml");
  ASSERT_TRUE(result.ok()) << (result.diagnostics.empty() ? "" : bp::format(result.diagnostics[0]));
  const bp::Policy& p = *result.policy;
  EXPECT_EQ(p.nodes, (bp::NodeLimits{2, 10, 2}));
  EXPECT_EQ(p.expand.combine, bp::Combine::all);
  EXPECT_EQ(p.expand.ready_tasks_per_node_above, 8.5);
  EXPECT_EQ(p.expand.busy_fraction_above, 0.9);
  EXPECT_EQ(p.expand.steal_failure_ratio_below, 0.1);
  EXPECT_EQ(p.expand.idle_nodes_at_least, 3);
  EXPECT_EQ(p.shrink.combine, bp::Combine::any);
  EXPECT_EQ(p.shrink.ready_tasks_per_node_below, 0.5);
  EXPECT_EQ(p.shrink.busy_fraction_below, 0.25);
  EXPECT_EQ(p.shrink.steal_failure_ratio_above, 0.75);
  EXPECT_EQ(p.shrink.iteration_efficiency_below, -0.5);
  EXPECT_EQ(p.shrink.pending_jobs_at_least, 2);
  EXPECT_EQ(p.tick, 1500ms);
  EXPECT_EQ(p.hysteresis_ticks, 4);
  EXPECT_EQ(p.cooldown, 120s);
  EXPECT_EQ(p.resize_timeout, 3600s);
  EXPECT_EQ(p.release_order, bp::ReleaseOrder::least_loaded);
  EXPECT_EQ(p.stealing, (bp::StealParameters{true, 6, 0, 2, 3, bp::VictimPolicy::random,
                                             4294967295u, 10, 10, 7}));
  EXPECT_EQ(p.recovery, (bp::RecoveryParameters{bp::NodeLossAction::shrink, 43800h, 2500ms}));
}

TEST(PolicyParse, UnwrittenKeysKeepTheirDefaults) {
  const auto result = bp::parse_policy("nodes:\n  max: 4\nshrink:\n  busy_fraction_below: 0.2\n",
                                       "some.yaml");
  ASSERT_TRUE(result.ok());
  bp::Policy expected;
  expected.nodes.max = 4;
  expected.shrink.busy_fraction_below = 0.2;
  EXPECT_EQ(*result.policy, expected);
}

TEST(PolicyParse, BooleansInTheirCoreSchemaSpellings) {
  for (const char* yes : {"true", "True", "TRUE"}) {
    const auto r = bp::parse_policy(std::string("stealing: {enabled: ") + yes + "}\n", "b.yaml");
    ASSERT_TRUE(r.ok()) << yes;
    EXPECT_TRUE(r.policy->stealing.enabled) << yes;
  }
  for (const char* no : {"false", "False", "FALSE"}) {
    const auto r = bp::parse_policy(std::string("stealing: {enabled: ") + no + "}\n", "b.yaml");
    ASSERT_TRUE(r.ok()) << no;
    EXPECT_FALSE(r.policy->stealing.enabled) << no;
  }
}

TEST(PolicyParse, FixedSizeJobNeedsNoStepCheck) {
  // min == max: no resize can happen, so a step larger than the range is not an error.
  const auto result = bp::parse_policy("nodes: {min: 4, max: 4, step: 2}\n", "fixed.yaml");
  EXPECT_TRUE(result.ok());
}

// One test per file in bad/: exactly the diagnostics in NAME.expected, in order.
std::vector<std::string> bad_file_stems() {
  std::vector<std::string> stems;
  for (const auto& entry : fs::directory_iterator(BELLOWS_POLICY_BAD_DIR)) {
    if (entry.path().extension() == ".yaml") stems.push_back(entry.path().stem().string());
  }
  std::sort(stems.begin(), stems.end());
  return stems;
}

class PolicyBadFile : public ::testing::TestWithParam<std::string> {};

TEST_P(PolicyBadFile, GivesExactlyItsDiagnostics) {
  const fs::path dir = BELLOWS_POLICY_BAD_DIR;
  const fs::path expected_file = dir / (GetParam() + ".expected");
  ASSERT_TRUE(fs::exists(expected_file)) << expected_file;
  const auto expected = lines_of(read_text(expected_file));
  ASSERT_FALSE(expected.empty());
  const std::string name = GetParam() + ".yaml";
  const auto result = bp::parse_policy(read_text(dir / name), name);
  EXPECT_FALSE(result.ok());
  EXPECT_FALSE(result.policy.has_value());
  EXPECT_EQ(formatted(result), expected);
}

INSTANTIATE_TEST_SUITE_P(Bad, PolicyBadFile, ::testing::ValuesIn(bad_file_stems()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return param.param;
                         });

TEST(PolicyParse, AtLeastTwentyBadFiles) { EXPECT_GE(bad_file_stems().size(), 20u); }

TEST(PolicyParse, DidYouMean) {
  auto first = [](const char* text) {
    const auto result = bp::parse_policy(text, "t.yaml");
    return result.diagnostics.empty() ? std::string("(none)") : bp::format(result.diagnostics[0]);
  };
  EXPECT_EQ(first("cooldwn: 5s\n"), "t.yaml:1:1: unknown key 'cooldwn'; did you mean 'cooldown'?");
  EXPECT_EQ(first("expand:\n  busy_fraction_abve: 0.5\n"),
            "t.yaml:2:3: unknown key 'busy_fraction_abve' in 'expand'; did you mean "
            "'busy_fraction_above'?");
  EXPECT_EQ(first("shrink:\n  busy_fraction_above: 0.5\n"),
            "t.yaml:2:3: unknown key 'busy_fraction_above' in 'shrink'; did you mean "
            "'busy_fraction_above' in 'expand'?");
  EXPECT_EQ(first("stealing:\n  victim_poll: 5\n"),
            "t.yaml:2:3: unknown key 'victim_poll' in 'stealing'; did you mean 'victim_poll_us'?");
  EXPECT_EQ(first("recovery:\n  on_node_lost: shrink\n"),
            "t.yaml:2:3: unknown key 'on_node_lost' in 'recovery'; did you mean 'on_node_loss'?");
  EXPECT_EQ(first("on_node_loss: shrink\n"),
            "t.yaml:1:1: unknown key 'on_node_loss'; did you mean 'on_node_loss' in 'recovery'?");
  EXPECT_EQ(first("stealing:\n  tick: 5s\n"),
            "t.yaml:2:3: unknown key 'tick' in 'stealing'; did you mean 'tick' at the top level?");
  EXPECT_EQ(first("zzz: 1\n"),
            "t.yaml:1:1: unknown key 'zzz'; allowed: nodes, expand, shrink, tick, "
            "hysteresis_ticks, cooldown, resize_timeout, release_order, stealing, recovery");
}

TEST(PolicyParse, NonScalarKeyAndFlowStyle) {
  const auto result = bp::parse_policy("? [a, b]\n: 1\nnodes: {min: 2, max: 3}\n", "t.yaml");
  EXPECT_EQ(formatted(result),
            std::vector<std::string>{"t.yaml:1:3: expected a key name, got a sequence"});
}

TEST(PolicyParse, ShippedExamplesLoad) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(BELLOWS_POLICY_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    const auto result = bp::load_policy_file(entry.path().string());
    EXPECT_TRUE(result.ok()) << entry.path() << ": "
                             << (result.diagnostics.empty() ? "" : bp::format(result.diagnostics[0]));
  }
  EXPECT_EQ(count, 4);
  const auto throughput =
      bp::load_policy_file(std::string(BELLOWS_POLICY_EXAMPLES_DIR) + "/throughput.yaml");
  ASSERT_TRUE(throughput.ok());
  EXPECT_EQ(throughput.policy->nodes, (bp::NodeLimits{2, 16, 2}));
  EXPECT_TRUE(throughput.policy->stealing.enabled);
}

TEST(PolicyParse, UnreadableFiles) {
  const auto missing = bp::load_policy_file("/nonexistent/policy.yaml");
  EXPECT_EQ(formatted(missing), std::vector<std::string>{
                                    "/nonexistent/policy.yaml: cannot read the policy file: No "
                                    "such file or directory"});
  const auto directory = bp::load_policy_file("/tmp");
  EXPECT_EQ(formatted(directory),
            std::vector<std::string>{"/tmp: cannot read the policy file: it is a directory"});
}

TEST(PolicyParse, FormatWithAndWithoutPosition) {
  EXPECT_EQ(bp::format({"a.yaml", 3, 7, "m"}), "a.yaml:3:7: m");
  EXPECT_EQ(bp::format({"a.yaml", 0, 0, "m"}), "a.yaml: m");
}

TEST(PolicyNodeRange, Good) {
  EXPECT_EQ(bp::parse_node_range("2:8").range, (bp::NodeRange{2, 8}));
  EXPECT_EQ(bp::parse_node_range("3:3").range, (bp::NodeRange{3, 3}));
  EXPECT_EQ(bp::parse_node_range("2:8").error, "");
}

TEST(PolicyNodeRange, Bad) {
  auto error = [](const char* text) {
    const auto r = bp::parse_node_range(text);
    EXPECT_FALSE(r.range.has_value()) << text;
    return r.error;
  };
  EXPECT_EQ(error("8:2"), "node range '8:2': MIN (8) is larger than MAX (2)");
  EXPECT_EQ(error("x:3"), "node range 'x:3': MIN 'x' is not a whole number");
  EXPECT_EQ(error("2:y"), "node range '2:y': MAX 'y' is not a whole number");
  EXPECT_EQ(error("0:4"), "node range '0:4': MIN must be at least 1, got 0");
  EXPECT_EQ(error("-1:4"), "node range '-1:4': MIN must be at least 1, got -1");
  EXPECT_EQ(error("5"), "node range '5': expected MIN:MAX, e.g. 2:8");
  EXPECT_EQ(error("1:2:3"), "node range '1:2:3': expected MIN:MAX, e.g. 2:8");
  EXPECT_EQ(error(":4"), "node range ':4': MIN is missing");
  EXPECT_EQ(error("2:"), "node range '2:': MAX is missing");
  EXPECT_EQ(error("2.5:4"), "node range '2.5:4': MIN '2.5' is not a whole number");
  EXPECT_EQ(error("1:99999999999"), "node range '1:99999999999': MAX '99999999999' is not a whole number");
}

TEST(PolicyNodeRange, ApplyKeepsStepAndChecksIt) {
  bp::Policy p = *bp::parse_policy("nodes: {min: 2, max: 10, step: 4}\n", "p.yaml").policy;
  EXPECT_TRUE(bp::apply_node_range(p, {1, 6}).empty());
  EXPECT_EQ(p.nodes, (bp::NodeLimits{1, 6, 4}));
  const auto problems = bp::apply_node_range(p, {2, 4});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].message, "nodes.step (4) is larger than nodes.max - nodes.min (2)");
  EXPECT_EQ(p.nodes, (bp::NodeLimits{1, 6, 4}));  // unchanged
}
