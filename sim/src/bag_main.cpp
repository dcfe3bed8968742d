// bellows-sim-bag: a bag of independent tasks with heavy-tailed costs on a simulated machine
// (SimGrid), distributed by the runtime's Dtree decisions or in static blocks.
// docs/sim.md, "Dtree: a bag of independent tasks".
//   bellows-sim-bag --ranks 1024 --tasks 100000000 --distribution dtree

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "bellows/sim/bag.hpp"
#include "command_line.hpp"

namespace bs = bellows::sim;

namespace {

constexpr const char* kProgram = "bellows-sim-bag";

int fail(const std::string& message) { return bs::fail(kProgram, message); }

}  // namespace

int main(int argc, char** argv) {
  bs::BagOptions o;
  std::string distribution = "dtree", shares = "speed";
  bool quiet = false;
  CLI::App cli{"A bag of independent tasks with log-normal costs on a simulated machine (SimGrid 3.32), "
               "pulled down a Dtree (the runtime's decisions) or split in static blocks"};
  cli.add_option("--ranks", o.ranks, "nodes, one rank each (default 4)");
  cli.add_option("--tasks", o.tasks, "tasks in the bag (default 1000)");
  cli.add_option("--distribution", distribution, "dtree or static (default dtree)");
  cli.add_option("--seed", o.seed, "seed of the task costs (default 1)");
  cli.add_option("--mean-ms", o.mean_ms, "mean task cost on a node of speed 1, milliseconds (default 1)");
  cli.add_option("--sigma", o.sigma, "sigma of the log-normal cost's logarithm, 0 to 4 (default 1.5)");
  cli.add_option("--slow-fraction", o.slow_fraction, "fraction of the nodes that are slow (default 0)");
  cli.add_option("--slow-factor", o.slow_factor, "how many times slower a slow node runs (default 1)");
  cli.add_option("--shares", shares, "speed (Dtree's shares follow the nodes' speeds) or equal (default speed)");
  cli.add_option("--fan-out", o.dtree.fan_out, "Dtree's children per parent at most (default 16)");
  cli.add_option("--max-height", o.dtree.max_height, "Dtree's longest root-to-leaf path (default 3)");
  cli.add_option("--first", o.dtree.first, "fraction of its pool a parent splits at the first asks (default 0.4)");
  cli.add_option("--rest", o.dtree.rest, "fraction of what a parent holds that it splits later (default 0.4)");
  cli.add_option("--min-ask", o.min_ask, "indices a rank asks for at least (default 2: 1.5 x one lane)");
  cli.add_option("--serve-us", o.serve_us, "a server's CPU per request, microseconds (default 40)");
  cli.add_option("--latency-us", o.platform.latency_us, "one-way latency between two nodes, microseconds (default 5)");
  cli.add_option("--bandwidth-gbps", o.platform.bandwidth_gbps, "each node's link, GB/s (default 5)");
  cli.add_flag("--quiet", quiet, "the JSON line only, no summary");
  if (auto code = bs::parse_command_line(cli, argc, argv, kProgram)) return *code;
  if (distribution == "dtree") {
    o.distribution = bs::BagDistribution::dtree;
  } else if (distribution == "static") {
    o.distribution = bs::BagDistribution::static_blocks;
  } else {
    return fail("--distribution must be dtree or static, got '" + distribution + "'");
  }
  if (shares != "speed" && shares != "equal") return fail("--shares must be speed or equal, got '" + shares + "'");
  o.speed_shares = shares == "speed";
  if (auto error = bs::validate(o); !error.empty()) return fail(error);
  try {
    const auto r = bs::simulate_bag(o);
    std::printf("%s\n", r.dump().c_str());
    if (!quiet) {
      std::fprintf(stderr,
                   "%s: %d ranks, %lld tasks: makespan %.6g s, optimal %.6g s (%.3f %% over); %llu requests, "
                   "waiting %.3f %%, serving %.3f %%, idle %.3f %%; %llu events in %.2f s wall (%.3g events/s)\n",
                   r["distribution"].get<std::string>().c_str(), o.ranks, static_cast<long long>(o.tasks),
                   r["makespan"].get<double>(), r["optimal"].get<double>(), 100.0 * r["over_optimal"].get<double>(),
                   static_cast<unsigned long long>(r["requests"].get<std::uint64_t>()),
                   100.0 * r["wait_fraction"].get<double>(), 100.0 * r["serve_fraction"].get<double>(),
                   100.0 * r["idle_fraction"].get<double>(),
                   static_cast<unsigned long long>(r["events"].get<std::uint64_t>()),
                   r["wall_seconds"].get<double>(), r["events_per_second"].get<double>());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bellows-sim-bag: %s\n", e.what());
    return 1;
  }
  return 0;
}
