#pragma once
// Building policies and node metrics for the engine tests.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bellows/policy/engine.hpp"

namespace bellows::policy::testing {

using namespace std::chrono_literals;

/// A policy from YAML text; fails the test on any diagnostic.
inline Policy policy_from(const std::string& text) {
  const LoadResult result = parse_policy(text, "test.yaml");
  EXPECT_TRUE(result.ok()) << (result.diagnostics.empty() ? "" : format(result.diagnostics[0]));
  return result.policy.value_or(Policy{});
}

/// `count` nodes n0, n1, ... with index and join order equal to their number.
inline std::vector<NodeMetrics> nodes(int count, std::uint64_t ready_tasks, double busy_fraction) {
  std::vector<NodeMetrics> out;
  for (int i = 0; i < count; ++i) {
    NodeMetrics m;
    m.name = std::to_string(i);
    m.name.insert(0, 1, 'n');  // not "n" + ...: GCC 12 -Wrestrict false positive at -O3
    m.index = i;
    m.joined = static_cast<std::uint64_t>(i);
    m.metrics.ready_tasks = ready_tasks;
    m.metrics.busy_fraction = busy_fraction;
    out.push_back(m);
  }
  return out;
}

inline const TimePoint t0{};

inline TickInput input(TimePoint now, const std::vector<NodeMetrics>& metrics, int idle = 0,
                       int pending = 0) {
  TickInput in;
  in.now = now;
  in.nodes = static_cast<int>(metrics.size());
  in.metrics = metrics;
  in.idle_nodes = idle;
  in.pending_jobs = pending;
  return in;
}

}  // namespace bellows::policy::testing
