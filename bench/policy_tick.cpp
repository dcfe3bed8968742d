// Cost of one policy-engine tick for a large job.
//
// Builds `--nodes` nodes' metrics (seeded, varied) and times `--ticks` ticks one by one in
// two cases:
//   hold    every trigger written and evaluated over all nodes, none fires (the common tick)
//   shrink  a shrink fires on every tick and releases half the nodes chosen least_loaded
//           (the most work a tick does: a partial sort of the nodes)
//
//   ./bellows_policy_tick_bench --nodes 1024 --ticks 20000
//
// Prints median, p99 and max per tick in microseconds against the 10 ms budget, and as the
// last line a JSON object with the same numbers.

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bellows/policy/engine.hpp"

namespace bp = bellows::policy;
using Clock = std::chrono::steady_clock;

namespace {

struct Summary {
  double median_us = 0;
  double p99_us = 0;
  double max_us = 0;
};

Summary summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  const auto at = [&us](double q) {
    return us[std::min(us.size() - 1, static_cast<std::size_t>(q * static_cast<double>(us.size())))];
  };
  return {at(0.5), at(0.99), us.back()};
}

std::vector<bp::NodeMetrics> make_metrics(int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> ready(0, 4);
  std::uniform_real_distribution<double> busy(0.3, 0.8);
  std::uniform_int_distribution<int> steals(0, 50);
  std::vector<bp::NodeMetrics> out(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    auto& m = out[static_cast<std::size_t>(i)];
    m.name = "node" + std::to_string(i);
    m.index = i;
    m.joined = static_cast<std::uint64_t>(i);
    m.metrics.ready_tasks = static_cast<std::uint64_t>(ready(rng));
    m.metrics.busy_fraction = busy(rng);
    m.metrics.steals_sent = static_cast<std::uint64_t>(steals(rng));
    m.metrics.steals_failed = m.metrics.steals_sent / 3;
    m.metrics.iteration_seconds = 10.0 + busy(rng);
    m.metrics.iteration = 40;
  }
  return out;
}

bp::Policy policy_from(const char* text) {
  auto loaded = bp::parse_policy(text, "bench.yaml");
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", bp::format(loaded.diagnostics.front()).c_str());
    std::exit(1);
  }
  return *loaded.policy;
}

// Times each tick; `after` runs outside the timed region (e.g. to end the resize).
template <typename After>
Summary run(bp::PolicyEngine& engine, const std::vector<bp::NodeMetrics>& metrics, int ticks,
            bp::Action expected, After after) {
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(ticks));
  bp::TickInput in;
  in.nodes = static_cast<int>(metrics.size());
  in.metrics = metrics;
  in.idle_nodes = 0;
  in.pending_jobs = 2;
  for (int t = 0; t < ticks; ++t) {
    in.now = bp::TimePoint{} + std::chrono::seconds(t);
    const auto start = Clock::now();
    const bp::Decision d = engine.tick(in);
    const auto stop = Clock::now();
    if (d.action != expected) {
      std::fprintf(stderr, "tick %d: unexpected decision: %s\n", t, d.reason.c_str());
      std::exit(1);
    }
    us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
    after(in.now);
  }
  return summarize(std::move(us));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Cost of one policy-engine tick"};
  int nodes = 1024;
  int ticks = 20000;
  app.add_option("--nodes", nodes, "Nodes' metrics per tick")->check(CLI::Range(2, 1 << 20));
  app.add_option("--ticks", ticks, "Ticks timed per case")->check(CLI::Range(1, 10'000'000));
  CLI11_PARSE(app, argc, argv);

  const auto metrics = make_metrics(nodes, 7);

  bp::PolicyEngine holding(policy_from(R"(
nodes: {min: 1, max: 1000000}
expand:
  ready_tasks_per_node_above: 1000
  busy_fraction_above: 0.99
  steal_failure_ratio_below: 0.01
  idle_nodes_at_least: 1
shrink:
  combine: all
  ready_tasks_per_node_below: 0.5
  busy_fraction_below: 0.1
  steal_failure_ratio_above: 0.9
  iteration_efficiency_below: 0.1
  pending_jobs_at_least: 1
hysteresis_ticks: 3
)"));
  const Summary hold = run(holding, metrics, ticks, bp::Action::hold, [](bp::TimePoint) {});

  const std::string shrink_policy = "nodes: {min: 1, max: 1000000, step: " +
                                    std::to_string(nodes / 2) + "}\n" + R"(
shrink: {pending_jobs_at_least: 1, busy_fraction_below: 0.9}
hysteresis_ticks: 1
cooldown: 0s
release_order: least_loaded
)";
  bp::PolicyEngine shrinking(policy_from(shrink_policy.c_str()));
  const Summary shrink = run(shrinking, metrics, ticks, bp::Action::shrink,
                             [&shrinking](bp::TimePoint now) { shrinking.resize_aborted(now); });

  const double budget_us = 10'000.0;
  std::printf("policy tick, %d nodes, %d ticks per case (budget %.0f us)\n", nodes, ticks, budget_us);
  std::printf("  %-7s median %8.2f us   p99 %8.2f us   max %8.2f us\n", "hold", hold.median_us,
              hold.p99_us, hold.max_us);
  std::printf("  %-7s median %8.2f us   p99 %8.2f us   max %8.2f us\n", "shrink", shrink.median_us,
              shrink.p99_us, shrink.max_us);
  const bool within = hold.p99_us < budget_us && shrink.p99_us < budget_us;
  std::printf("  p99 %s the budget\n", within ? "within" : "OVER");
  nlohmann::json report = {
      {"bench", "policy_tick"}, {"nodes", nodes}, {"ticks", ticks},
      {"hold", {{"median_us", hold.median_us}, {"p99_us", hold.p99_us}, {"max_us", hold.max_us}}},
      {"shrink", {{"median_us", shrink.median_us}, {"p99_us", shrink.p99_us}, {"max_us", shrink.max_us}}},
      {"within_budget", within}};
  std::printf("%s\n", report.dump().c_str());
  return within ? 0 : 1;
}
