// bellows-sim-cluster: a batch workload of rigid and malleable jobs on a simulated cluster,
// with elasticity off and then under each policy file (the real policy engine).
// docs/sim.md, "A cluster of elastic and rigid jobs".
//   bellows-sim-cluster --nodes 128 --jobs 500 --policy policies/examples/cluster-friendly.yaml

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <bellows/policy/load.hpp>

#include "bellows/sim/cluster.hpp"
#include "command_line.hpp"

namespace bs = bellows::sim;

namespace {

constexpr const char* kProgram = "bellows-sim-cluster";

int fail(const std::string& message) { return bs::fail(kProgram, message); }

void progress_bar(const std::string& run, std::size_t done, std::size_t total) {
  constexpr int kWidth = 40;
  const double share = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int filled = static_cast<int>(share * kWidth);
  std::fprintf(stderr, "\r%-24.24s [%-*s] %5.1f%%  %zu / %zu jobs", run.c_str(), kWidth,
               std::string(static_cast<std::size_t>(filled), '#').c_str(), share * 100.0, done, total);
  std::fflush(stderr);
}

void print_summary(const nlohmann::json& runs) {
  std::fprintf(stderr, "%-32s %6s %10s %10s %10s %8s %8s %10s %7s %7s %5s\n", "policy", "util", "mean wait",
               "p95 wait", "rigid wait", "bsld", "rig bsld", "makespan", "expand", "shrink", "rev");
  for (const auto& r : runs) {
    const std::string name = r["policy"].is_null() ? "(elasticity off)" : r["policy"].get<std::string>();
    std::fprintf(stderr, "%-32.32s %6.3f %10.0f %10.0f %10.0f %8.2f %8.2f %10.0f %7d %7d %5d\n", name.c_str(),
                 r["utilisation"].get<double>(), r["mean_wait"].get<double>(), r["p95_wait"].get<double>(),
                 r["rigid"]["mean_wait"].get<double>(), r["mean_bounded_slowdown"].get<double>(),
                 r["rigid"]["mean_bounded_slowdown"].get<double>(), r["makespan"].get<double>(),
                 r["resizes"]["expands"].get<int>(), r["resizes"]["shrinks"].get<int>(),
                 r["resizes"]["reversals"].get<int>());
  }
}

}  // namespace

int main(int argc, char** argv) {
  bs::SyntheticOptions synthetic;
  bs::MalleableOptions malleable;
  bs::ClusterOptions cluster;
  bs::SwfOptions swf;
  std::string workload_path, output_path;
  std::vector<std::string> policy_paths;
  std::uint64_t seed = 1;
  bool quiet = false, progress = false, schedule = false;
  CLI::App cli{"A batch workload of rigid and malleable jobs on a simulated cluster: FCFS with EASY "
               "backfilling for every job, and Bellows' policy engine resizing the malleable ones"};
  cli.add_option("--nodes", cluster.nodes, "nodes of the cluster (default 128)");
  cli.add_option("--workload", workload_path, "a Standard Workload Format file (default: a synthetic workload)");
  cli.add_option("--cores-per-node", swf.cores_per_node, "SWF: processors of one node (default 1)");
  cli.add_option("--jobs", synthetic.jobs, "synthetic: jobs (default 500)");
  cli.add_option("--seed", seed, "seed of the synthetic workload and of which jobs are malleable (default 1)");
  cli.add_option("--load", synthetic.load, "synthetic: offered load, node-seconds over the cluster's (default 0.9)");
  cli.add_option("--max-size-fraction", synthetic.max_size_fraction,
                 "synthetic: largest job as a fraction of the nodes (default 0.25)");
  cli.add_option("--min-runtime", synthetic.min_runtime, "synthetic: shortest run time, seconds (default 60)");
  cli.add_option("--max-runtime", synthetic.max_runtime, "synthetic: longest run time, seconds (default 14400)");
  cli.add_option("--max-overestimate", synthetic.max_overestimate,
                 "synthetic: time limit over run time at most (default 3)");
  cli.add_option("--malleable-fraction", malleable.fraction, "share of the jobs that are malleable (default 1/3)");
  cli.add_option("--range-factor", malleable.range_factor,
                 "a malleable job of n nodes runs on n / F to n x F nodes (default 2)");
  cli.add_option("--serial-min", malleable.serial_min, "malleable jobs' Amdahl serial fraction, lowest (default 0.01)");
  cli.add_option("--serial-max", malleable.serial_max, "malleable jobs' Amdahl serial fraction, highest (default 0.1)");
  cli.add_option("--policy", policy_paths, "a policy file; one run per file, after the run with elasticity off");
  cli.add_option("--expand-seconds", cluster.model.expand_seconds,
                 "a job's pause for an expand, seconds (default 0.502, measured on Slurm)");
  cli.add_option("--shrink-seconds", cluster.model.shrink_seconds,
                 "a job's pause for a shrink, seconds (default 0.174, measured on Slurm)");
  cli.add_option("--iteration-seconds", cluster.model.iteration_seconds,
                 "a malleable job's iteration on its submitted nodes, seconds (default 10)");
  cli.add_option("--tasks-per-node", cluster.model.tasks_per_node,
                 "tasks of an iteration per submitted node (default 32)");
  cli.add_option("--tau", cluster.tau_seconds, "bounded slowdown's threshold, seconds (default 10)");
  cli.add_flag("--schedule", schedule, "add every job's start, end and resizes to the report");
  cli.add_option("--output", output_path, "also write the JSON line to this file");
  cli.add_flag("--progress", progress, "show a progress bar on stderr even when it is not a terminal");
  cli.add_flag("--quiet", quiet, "the JSON line only, no summary");
  if (auto code = bs::parse_command_line(cli, argc, argv, kProgram)) return *code;

  std::vector<bellows::policy::Policy> policies;
  for (const std::string& path : policy_paths) {
    auto loaded = bellows::policy::load_policy_file(path);
    if (!loaded.ok()) {
      std::string text = "--policy " + path + " is not a valid policy:";
      for (const auto& d : loaded.diagnostics) text += "\n  " + bellows::policy::format(d);
      return fail(text);
    }
    policies.push_back(*loaded.policy);
  }
  const auto started = std::chrono::steady_clock::now();
  bs::ClusterWorkload workload;
  nlohmann::json report;
  try {
    synthetic.seed = malleable.seed = seed;
    synthetic.cluster_nodes = malleable.cluster_nodes = swf.cluster_nodes = cluster.nodes;
    if (workload_path.empty()) {
      workload = bs::generate_workload(synthetic);
      report["workload"] = {{"source", "synthetic"}, {"seed", seed}, {"load", synthetic.load}};
    } else {
      workload = bs::read_swf_file(workload_path, swf);
      report["workload"] = {{"source", workload_path},
                            {"skipped_not_run", workload.skipped_not_run},
                            {"skipped_too_large", workload.skipped_too_large}};
    }
    bs::make_malleable(workload, malleable);
  } catch (const std::invalid_argument& e) {
    return fail(e.what());
  }
  if (workload.jobs.empty()) return fail("the workload has no job to run");

  cluster.record_schedule = schedule;
  const bool show_progress = progress || isatty(STDERR_FILENO) == 1;
  report["nodes"] = cluster.nodes;
  report["jobs"] = workload.jobs.size();
  report["expand_seconds"] = cluster.model.expand_seconds;
  report["shrink_seconds"] = cluster.model.shrink_seconds;
  report["runs"] = nlohmann::json::array();
  try {
    for (std::size_t run = 0; run <= policies.size(); ++run) {
      const std::string name = run == 0 ? "elasticity off" : policy_paths[run - 1];
      cluster.policy.reset();
      if (run > 0) cluster.policy = policies[run - 1];
      bs::ClusterProgressFn bar;
      if (show_progress) bar = [&name](std::size_t done, std::size_t total) { progress_bar(name, done, total); };
      nlohmann::json r = bs::simulate_cluster(workload, cluster, bar);
      if (show_progress) std::fprintf(stderr, "\r%*s\r", 100, "");
      r["policy"] = run == 0 ? nlohmann::json(nullptr) : nlohmann::json(name);
      report["runs"].push_back(std::move(r));
    }
  } catch (const std::invalid_argument& e) {
    return fail(e.what());
  }
  report["wall_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::string line = report.dump();
  std::printf("%s\n", line.c_str());
  if (!output_path.empty()) {
    std::ofstream out(output_path);
    out << line << '\n';
    if (!out) {
      std::fprintf(stderr, "%s: cannot write %s\n", kProgram, output_path.c_str());
      return 1;
    }
  }
  if (!quiet) print_summary(report["runs"]);
  return 0;
}
