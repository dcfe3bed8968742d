// The schema table: defaults, durations, and the stealing and recovery keys against libbellows.

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "bellows/policy/load.hpp"
#include "bellows/policy/schema.hpp"
#include "bellows/runtime/checkpoint_interval.hpp"
#include "bellows/runtime/options.hpp"
#include "bellows/runtime/recovery_plan.hpp"

namespace bp = bellows::policy;
namespace rt = bellows::runtime;
using namespace std::chrono_literals;

TEST(PolicySchema, EveryKeyOnceWithHelpAndItsSectionFirst) {
  std::set<std::string_view> seen;
  for (const bp::KeyInfo& key : bp::schema()) {
    EXPECT_TRUE(seen.insert(key.path).second) << key.path;
    EXPECT_FALSE(key.help.empty()) << key.path;
    const auto section = bp::key_section(key.path);
    if (!section.empty()) {
      EXPECT_TRUE(seen.count(section)) << key.path << " comes before its section";
    }
    EXPECT_EQ(key.type == bp::KeyType::section, key.store == nullptr) << key.path;
    if (key.type == bp::KeyType::choice) {
      EXPECT_FALSE(key.choices.empty()) << key.path;
    }
  }
  EXPECT_EQ(seen.size(), 38u);  // 4 nodes, 7 expand, 7 shrink, 5 top-level, 11 stealing, 4 recovery
}

TEST(PolicySchema, DefaultsComeFromTheTable) {
  const bp::Policy p;
  EXPECT_EQ(p.nodes, (bp::NodeLimits{1, 1, 1}));
  EXPECT_EQ(p.expand, bp::ExpandTriggers{});
  EXPECT_EQ(p.shrink, bp::ShrinkTriggers{});
  EXPECT_EQ(p.expand.combine, bp::Combine::any);
  EXPECT_EQ(p.tick, 5s);
  EXPECT_EQ(p.hysteresis_ticks, 3);
  EXPECT_EQ(p.cooldown, 60s);
  EXPECT_EQ(p.resize_timeout, 120s);
  EXPECT_EQ(p.release_order, bp::ReleaseOrder::newest);
  EXPECT_EQ(p.recovery.on_node_loss, bp::NodeLossAction::replace);
  EXPECT_EQ(p.recovery.node_mean_time_between_failures, 8760h);
  EXPECT_EQ(p.recovery.heartbeat_timeout, 5s);
  EXPECT_TRUE(bp::check_consistency(p).empty());
  // A file that writes only a section with nothing in it is the default policy.
  const auto loaded = bp::parse_policy("stealing: {}\n", "defaults.yaml");
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(*loaded.policy, p);
}

// The caller copies the stealing keys into runtime::StealOptions field by field.
rt::StealOptions to_runtime(const bp::StealParameters& s) {
  rt::StealOptions o;
  o.enabled = s.enabled;
  o.chunk = s.chunk;
  o.max_hops = s.max_hops;
  o.device_threshold = s.device_threshold;
  o.node_threshold = s.node_threshold;
  o.policy = s.victim == bp::VictimPolicy::random ? rt::VictimPolicy::random
                                                  : rt::VictimPolicy::last_victim;
  o.seed = s.seed;
  o.min_backoff_us = s.min_backoff_us;
  o.max_backoff_us = s.max_backoff_us;
  o.victim_poll_us = s.victim_poll_us;
  return o;
}

TEST(PolicySchema, StealingDefaultsAreTheRuntimes) {
  const rt::StealOptions policy_defaults = to_runtime(bp::Policy{}.stealing);
  const rt::StealOptions runtime_defaults;
  EXPECT_EQ(policy_defaults.enabled, runtime_defaults.enabled);
  EXPECT_EQ(policy_defaults.chunk, runtime_defaults.chunk);
  EXPECT_EQ(policy_defaults.max_hops, runtime_defaults.max_hops);
  EXPECT_EQ(policy_defaults.device_threshold, runtime_defaults.device_threshold);
  EXPECT_EQ(policy_defaults.node_threshold, runtime_defaults.node_threshold);
  EXPECT_EQ(policy_defaults.policy, runtime_defaults.policy);
  EXPECT_EQ(policy_defaults.seed, runtime_defaults.seed);
  EXPECT_EQ(policy_defaults.min_backoff_us, runtime_defaults.min_backoff_us);
  EXPECT_EQ(policy_defaults.max_backoff_us, runtime_defaults.max_backoff_us);
  EXPECT_EQ(policy_defaults.victim_poll_us, runtime_defaults.victim_poll_us);
  EXPECT_EQ(rt::to_string(runtime_defaults.policy), "last-victim");
}

// For each case the policy file is accepted exactly when runtime::validate accepts the
// same values, and an accepted file gives exactly those values.
TEST(PolicySchema, StealingRulesAreTheRuntimes) {
  const char* cases[] = {
      "enabled: true\n  chunk: 1\n  max_hops: 0\n  device_threshold: 0\n  node_threshold: 0",
      "chunk: 0",
      "chunk: -3",
      "max_hops: -1",
      "device_threshold: -1",
      "node_threshold: -1",
      "min_backoff_us: 0",
      "min_backoff_us: 10\n  max_backoff_us: 10",
      "min_backoff_us: 11\n  max_backoff_us: 10",
      "victim_poll_us: 0",
      "victim_poll_us: 1\n  seed: 4294967295\n  victim: random",
  };
  for (const char* body : cases) {
    const std::string text = std::string("stealing:\n  ") + body + "\n";
    const auto loaded = bp::parse_policy(text, "stealing.yaml");
    // The same values written straight into StealOptions.
    rt::StealOptions direct;
    const std::string b = body;
    auto value_of = [&b](const std::string& key, int fallback) {
      const auto at = b.find(key + ": ");
      return at == std::string::npos ? fallback : std::stoi(b.substr(at + key.size() + 2));
    };
    direct.chunk = value_of("chunk", direct.chunk);
    direct.max_hops = value_of("max_hops", direct.max_hops);
    direct.device_threshold = value_of("device_threshold", direct.device_threshold);
    direct.node_threshold = value_of("node_threshold", direct.node_threshold);
    direct.min_backoff_us = value_of("min_backoff_us", direct.min_backoff_us);
    direct.max_backoff_us = value_of("max_backoff_us", direct.max_backoff_us);
    direct.victim_poll_us = value_of("victim_poll_us", direct.victim_poll_us);
    const bool runtime_accepts = rt::validate(direct).empty();
    EXPECT_EQ(loaded.ok(), runtime_accepts) << body << "\n" << rt::validate(direct);
    if (loaded.ok()) {
      const rt::StealOptions copied = to_runtime(loaded.policy->stealing);
      EXPECT_EQ(copied.chunk, direct.chunk) << body;
      EXPECT_EQ(copied.max_hops, direct.max_hops) << body;
      EXPECT_EQ(copied.min_backoff_us, direct.min_backoff_us) << body;
      EXPECT_EQ(copied.max_backoff_us, direct.max_backoff_us) << body;
      EXPECT_EQ(copied.victim_poll_us, direct.victim_poll_us) << body;
      EXPECT_TRUE(rt::validate(copied).empty()) << body;
    }
  }
}

// The caller hands recovery.on_node_loss to runtime::plan_recovery by name.
TEST(PolicySchema, NodeLossActionsAreTheRuntimes) {
  for (const auto action : {bp::NodeLossAction::shrink, bp::NodeLossAction::replace}) {
    rt::NodeLossAction runtime_action{};
    ASSERT_TRUE(rt::parse_node_loss_action(bp::to_string(action), runtime_action)) << bp::to_string(action);
    EXPECT_EQ(rt::to_string(runtime_action), bp::to_string(action));
  }
  const bp::KeyInfo* key = bp::find_key("recovery.on_node_loss");
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(key->choices.size(), 2U);
}

// recovery.node_mean_time_between_failures, as the runtime's checkpoint interval takes it:
// the default (a year per node) on 4 nodes at 50 ms iterations and a 5 ms checkpoint.
TEST(PolicySchema, TheDefaultMeanTimeBetweenFailuresGivesAnIntervalOfMinutes) {
  const bp::Policy p;
  const double node_mtbf = std::chrono::duration<double>(p.recovery.node_mean_time_between_failures).count();
  const auto interval = rt::checkpoint_interval(0.005, node_mtbf, 4, 0.05);
  EXPECT_EQ(interval.iterations, 5616);
}

// recovery.heartbeat_timeout: from half a second to a minute, in whole milliseconds.
TEST(PolicySchema, HeartbeatTimeoutWithinItsRange) {
  const auto shortest = bp::parse_policy("recovery:\n  heartbeat_timeout: 500ms\n", "hb.yaml");
  ASSERT_TRUE(shortest.ok());
  EXPECT_EQ(shortest.policy->recovery.heartbeat_timeout, 500ms);
  const auto two = bp::parse_policy("recovery: {heartbeat_timeout: 2s}\n", "hb.yaml");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two.policy->recovery.heartbeat_timeout, 2s);
  const auto longest = bp::parse_policy("recovery: {heartbeat_timeout: 1m}\n", "hb.yaml");
  ASSERT_TRUE(longest.ok());
  EXPECT_EQ(longest.policy->recovery.heartbeat_timeout, 60s);
}

TEST(PolicySchema, Durations) {
  bp::Duration d{};
  EXPECT_EQ(bp::parse_duration("500ms", d), "");
  EXPECT_EQ(d, 500ms);
  EXPECT_EQ(bp::parse_duration("5s", d), "");
  EXPECT_EQ(d, 5s);
  EXPECT_EQ(bp::parse_duration("1.5s", d), "");
  EXPECT_EQ(d, 1500ms);
  EXPECT_EQ(bp::parse_duration("2m", d), "");
  EXPECT_EQ(d, 120s);
  EXPECT_EQ(bp::parse_duration("1h", d), "");
  EXPECT_EQ(d, 3600s);
  EXPECT_EQ(bp::parse_duration("0s", d), "");
  EXPECT_EQ(d, 0ms);
  EXPECT_EQ(bp::parse_duration("5", d), "a duration needs a unit (ms, s, m or h), got '5'; write e.g. '5s'");
  EXPECT_EQ(bp::parse_duration("-5", d), "a duration needs a unit (ms, s, m or h), got '-5'; write e.g. '5s'");
  EXPECT_EQ(bp::parse_duration("-5s", d), "must not be negative, got '-5s'");
  EXPECT_EQ(bp::parse_duration("5 s", d), "expected a duration such as 500ms, 5s, 2m or 1h, got '5 s'");
  EXPECT_EQ(bp::parse_duration("5sec", d), "expected a duration such as 500ms, 5s, 2m or 1h, got '5sec'");
  EXPECT_EQ(bp::parse_duration("s", d), "expected a duration such as 500ms, 5s, 2m or 1h, got 's'");
  EXPECT_EQ(bp::parse_duration("1..5s", d), "expected a duration such as 500ms, 5s, 2m or 1h, got '1..5s'");
  EXPECT_EQ(bp::parse_duration("0.5ms", d), "must be a whole number of milliseconds, got '0.5ms'");
  EXPECT_EQ(bp::parse_duration("9999999999h", d), "duration '9999999999h' is too large");
  EXPECT_EQ(bp::format_duration(0ms), "0s");
  EXPECT_EQ(bp::format_duration(500ms), "500ms");
  EXPECT_EQ(bp::format_duration(1500ms), "1500ms");
  EXPECT_EQ(bp::format_duration(90s), "90s");
  EXPECT_EQ(bp::format_duration(120s), "2m");
  EXPECT_EQ(bp::format_duration(7200s), "2h");
}

TEST(PolicySchema, TypeDescriptions) {
  EXPECT_EQ(bp::describe_type(*bp::find_key("nodes.min")), "integer, at least 1");
  EXPECT_EQ(bp::describe_type(*bp::find_key("hysteresis_ticks")), "integer, 1 to 1000");
  EXPECT_EQ(bp::describe_type(*bp::find_key("expand.busy_fraction_above")), "fraction, 0 to 1");
  EXPECT_EQ(bp::describe_type(*bp::find_key("tick")), "duration, 100ms to 1h");
  EXPECT_EQ(bp::describe_type(*bp::find_key("release_order")),
            "one of: newest, least_loaded, highest_index");
  EXPECT_EQ(bp::describe_type(*bp::find_key("stealing.enabled")), "true or false");
  EXPECT_EQ(bp::describe_type(*bp::find_key("recovery.on_node_loss")), "one of: shrink, replace");
  EXPECT_EQ(bp::describe_type(*bp::find_key("recovery.node_mean_time_between_failures")),
            "duration, 1s to 876000h");
  EXPECT_EQ(bp::find_key("nodes.nope"), nullptr);
}

TEST(PolicySchema, KeyReferenceHasEveryKey) {
  const std::string text = bp::keys_as_text();
  const std::string markdown = bp::keys_as_markdown();
  EXPECT_EQ(text.rfind("KEY ", 0), 0u);
  for (const bp::KeyInfo& key : bp::schema()) {
    std::string line_start = "\n";
    line_start.append(key.path).append(" ");
    std::string row_start = "| `";
    row_start.append(key.path).append("` |");
    EXPECT_NE(text.find(line_start), std::string::npos) << key.path;
    EXPECT_NE(markdown.find(row_start), std::string::npos) << key.path;
  }
  EXPECT_NE(text.find("\ntick                                      duration, 100ms to 1h"), std::string::npos);
  EXPECT_NE(markdown.find("| `stealing.victim` | one of: random, last-victim | `last-victim` |"),
            std::string::npos);
}
