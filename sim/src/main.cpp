// bellows-sim: one iteration of an example's task graph on a simulated machine (SimGrid),
// driven by the runtime's own stealing decisions. docs/sim.md.
//   bellows-sim --app bspgemm --pattern skewed --n 16384 --tile 512 --ranks 64 --steal on

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "bellows/runtime/options.hpp"
#include "bellows/sim/simulation.hpp"
#include "bellows/sim/workload.hpp"
#include "command_line.hpp"

namespace bs = bellows::sim;
namespace br = bellows::runtime;

namespace {

struct Arguments {
  bs::WorkloadOptions workload;
  bs::SimOptions sim;
  std::string steal = "off";
  std::string cost_rule = "on";
  std::string victim = "last-victim";
  std::string serve_cpu = "on";
  std::string output;
  bool progress = false;
  bool quiet = false;
};

std::optional<bool> on_off(const std::string& text) {
  if (text == "on") return true;
  if (text == "off") return false;
  return std::nullopt;
}

constexpr const char* kProgram = "bellows-sim";

int fail(const std::string& message) { return bs::fail(kProgram, message); }

void progress_bar(std::uint64_t done, std::uint64_t total, double simulated) {
  constexpr int kWidth = 40;
  const double share = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int filled = static_cast<int>(share * kWidth);
  std::fprintf(stderr, "\r[%-*s] %5.1f%%  %llu / %llu tasks  simulated %.6f s", kWidth,
               std::string(static_cast<std::size_t>(filled), '#').c_str(), share * 100.0,
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total), simulated);
  std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) {
  Arguments a;
  CLI::App cli{"One iteration of a Bellows example's task graph on a simulated machine (SimGrid 3.32), "
               "with the runtime's own stealing decisions"};
  cli.add_option("--app", a.workload.app, "task graph: gemm, cholesky or bspgemm (default gemm)");
  cli.add_option("--n", a.workload.n, "matrix order (default 2048)");
  cli.add_option("--tile", a.workload.tile, "tile order (default 256)");
  cli.add_option("--pattern", a.workload.pattern, "bspgemm: random, banded or skewed (default skewed)");
  cli.add_option("--density", a.workload.density, "bspgemm: mean fraction of nonzero tiles, in (0, 1] (default 0.5)");
  cli.add_option("--k", a.workload.k, "bspgemm: inner dimension (default n)");
  cli.add_option("--seed", a.workload.seed, "bspgemm: seed of the sparsity pattern (default 42, as the examples)");
  cli.add_option("--ranks", a.sim.ranks, "simulated nodes, one rank each (default 4)");
  cli.add_option("--iterations", a.sim.iterations,
                 "times the task graph runs (default 1); the makespan is the median of all but the first");
  cli.add_option("--gflops", a.sim.platform.gflops, "device speed of each node, GFLOP/s (default 1000)");
  cli.add_option("--lanes", a.sim.platform.lanes, "tasks a node's device runs at once (default 1)");
  cli.add_option("--task-overhead-us", a.sim.task_overhead_us,
                 "fixed cost of one task, microseconds (default 1.5, measured: docs/sim.md)");
  cli.add_option("--latency-us", a.sim.platform.latency_us,
                 "one-way latency between two nodes, microseconds (default 5, measured)");
  cli.add_option("--bandwidth-gbps", a.sim.platform.bandwidth_gbps,
                 "each node's link, GB/s (default 5, measured)");
  cli.add_option("--backbone-gbps", a.sim.platform.backbone_gbps,
                 "the switch's backbone, GB/s (default 0: non-blocking)");
  cli.add_option("--control-bytes", a.sim.control_bytes,
                 "bytes of a control message (activation, fetch request, steal request or reply; default 64)");
  cli.add_option("--platform", a.sim.platform_file,
                 "SimGrid platform XML to load instead of generating one (hosts node-0, node-1, ... or "
                 "the first --ranks hosts by name)");
  cli.add_option("--platform-out", a.sim.platform_out, "write the generated platform XML to FILE");
  cli.add_option("--trace", a.sim.trace_path,
                 "append each rank's ready and completed tasks over time to FILE, as a real run's "
                 "--trace does (scripts/plot_trace.py)");
  cli.add_option("--steal", a.steal, "inter-rank work stealing: on or off (default off)");
  cli.add_option("--steal-cost-rule", a.cost_rule, "steal only when the cost model says it pays: on or off (default on)");
  cli.add_option("--steal-chunk", a.sim.steal.chunk, "tasks asked for in one steal request");
  cli.add_option("--steal-max-hops", a.sim.steal.max_hops, "times a steal request may be forwarded");
  cli.add_option("--steal-device-threshold", a.sim.steal.device_threshold, "a device starves below this many ready tasks");
  cli.add_option("--steal-node-threshold", a.sim.steal.node_threshold, "a rank starves below this many ready tasks");
  cli.add_option("--steal-victim", a.victim, "victim choice: random or last-victim");
  cli.add_option("--steal-seed", a.sim.steal.seed, "seed of the random victim choice");
  cli.add_option("--steal-request-visit-cost-us", a.sim.steal.request_visit_cost_us,
                 "what one victim's handling of a steal request costs, us (default 40)");
  cli.add_option("--tile-cpu-us", a.sim.tile_cpu_us,
                 "CPU of the receiving rank's communication and copy threads per tile it receives, us "
                 "(default 0: free; bench/sim_validate.py measures it)");
  cli.add_option("--serve-cpu", a.serve_cpu,
                 "a victim spends --steal-request-visit-cost-us of CPU serving each steal request: on or off "
                 "(default on)");
  cli.add_option("--host-cores", a.sim.host_cores,
                 "0: each rank has a core of its own for its communication CPU (default); K: all ranks share "
                 "K cores, as ranks on one host");
  cli.add_option("--lane-wake-us", a.sim.lane_wake_us,
                 "an emulated lane's wake-up after each task's sleep, us: the task completes that much after "
                 "its modeled end; a busy lane catches up (default 0: on time; 67 measured on an idle host: docs/sim.md)");
  cli.add_option("--link-concurrency", a.sim.link_concurrency,
                 "transfers each node link carries at once; the others wait for room on both links "
                 "of their route (default 0: no limit, all share the links; docs/sim.md, \"Speed of the simulator\")");
  cli.add_option("--fetch-window", a.sim.fetch_window,
                 "tile requests a rank has out at once; the others wait, in order (default 0: no limit)");
  cli.add_option("--output", a.output, "also write the JSON report to FILE");
  cli.add_flag("--progress", a.progress, "show a progress bar on stderr even when it is not a terminal");
  cli.add_flag("--quiet", a.quiet, "print only the JSON line");
  if (auto code = bs::parse_command_line(cli, argc, argv, kProgram)) return *code;
  const auto steal = on_off(a.steal);
  if (!steal) return fail("--steal must be on or off, got '" + a.steal + "'");
  a.sim.steal.enabled = *steal;
  const auto cost_rule = on_off(a.cost_rule);
  if (!cost_rule) return fail("--steal-cost-rule must be on or off, got '" + a.cost_rule + "'");
  a.sim.steal.cost_rule = *cost_rule;
  const auto serve_cpu = on_off(a.serve_cpu);
  if (!serve_cpu) return fail("--serve-cpu must be on or off, got '" + a.serve_cpu + "'");
  a.sim.serve_cpu = *serve_cpu;
  if (!br::parse_victim_policy(a.victim, a.sim.steal.policy)) {
    return fail("--steal-victim must be random or last-victim, got '" + a.victim + "'");
  }
  if (auto error = bs::validate(a.workload); !error.empty()) return fail(error);
  if (auto error = bs::validate(a.sim); !error.empty()) return fail(error);
  if (a.workload.tile > a.workload.n) {
    return fail("--tile " + std::to_string(a.workload.tile) + " is larger than the matrix (--n " +
                std::to_string(a.workload.n) + ")");
  }

  try {
    const bool show_progress = a.progress || isatty(STDERR_FILENO) == 1;
    const auto workload = bs::make_workload(a.workload, a.sim.ranks);
    const auto report = bs::run_simulation(workload, a.sim, show_progress ? bs::ProgressFn(progress_bar) : bs::ProgressFn());
    if (show_progress) std::fprintf(stderr, "\r%*s\r", 100, "");
    if (!a.quiet) {
      const auto& s = report["sim"];
      const auto& st = report["steal"];
      std::printf("bellows-sim: %s n=%d tile=%d, %zu tasks on %d ranks at %g GFLOP/s, stealing %s%s\n",
                  a.workload.app.c_str(), a.workload.n, a.workload.tile, workload.graph.size(), a.sim.ranks,
                  report["emulated_gflops"].get<double>(), a.steal.c_str(),
                  a.sim.steal.enabled ? (a.sim.steal.cost_rule ? " (cost rule)" : " (no cost rule)") : "");
      std::printf("  makespan %.6f s, bound %.6f s (%.3fx), busiest rank's own work %.6f s\n",
                  s["makespan_seconds"].get<double>(), s["bound_seconds"].get<double>(),
                  s["makespan_over_bound"].get<double>(), report["max_rank_work_seconds"].get<double>());
      std::printf("  steals: %llu requests, %llu failed, %llu tasks stolen; round trip p50 %.1f us, p99 %.1f us\n",
                  st["requests_sent"].get<unsigned long long>(), st["requests_failed"].get<unsigned long long>(),
                  st["tasks_stolen"].get<unsigned long long>(), st["round_trip_us"]["p50"].get<double>(),
                  st["round_trip_us"]["p99"].get<double>());
      std::printf("  %llu simulated events in %.2f s wall (%.0f events/s)\n", s["events"].get<unsigned long long>(),
                  s["wall_seconds"].get<double>(), s["events_per_second"].get<double>());
    }
    const std::string line = report.dump();
    std::printf("%s\n", line.c_str());
    if (!a.output.empty()) {
      std::ofstream out(a.output);
      out << line << "\n";
      if (!out) return fail("cannot write the report to " + a.output);
    }
  } catch (const std::invalid_argument& e) {
    return fail(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bellows-sim: %s\n", e.what());
    return 1;
  }
  return 0;
}
