// bag: an irregular parameter sweep, a bag of independent tasks whose work follows a
// heavy-tailed law, distributed by Dtree, random stealing or static blocks (TaskBag).
//   mpiexec -n 4 ./bag --tasks 20000 --kernel emulated --emulated-gflops 5 --verify
//   bellows run --nodes 2:4 --policy grow.yaml -- ./bag --iterations 8 --verify

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>

#include "bag_costs.hpp"
#include "bellows/examples/app.hpp"
#include "bellows/examples/elastic.hpp"
#include "bellows/runtime/runtime.hpp"
#include "bellows/runtime/task_bag.hpp"

namespace be = bellows::examples;
namespace br = bellows::runtime;

namespace {

struct BagAppOptions {
  std::int64_t tasks = 20000;
  std::string distribution = "dtree";
  std::string costs = "lognormal";
  double cost_shape = 0.0;
  double mean_task_mflop = 1.0;
  int fan_out = 16;
  double dtree_first = 0.4;
  double dtree_rest = 0.4;
  std::int64_t min_ask = 0;
};

be::ExtraOptions bag_options(BagAppOptions& o) {
  return {[&o](CLI::App& cli) {
            cli.add_option("--tasks", o.tasks, "tasks in the sweep, over all iterations");
            cli.add_option("--distribution", o.distribution,
                           "how tasks reach the ranks: dtree, steal (random victims) or static (blocks)");
            cli.add_option("--costs", o.costs, "law of the tasks' work: lognormal or pareto");
            cli.add_option("--cost-shape", o.cost_shape,
                           "the log-normal's sigma or Pareto's alpha (default 1.5)");
            cli.add_option("--mean-task-mflop", o.mean_task_mflop, "mean work of a task, MFLOP");
            cli.add_option("--fan-out", o.fan_out, "Dtree: children per parent at most");
            cli.add_option("--dtree-first", o.dtree_first,
                           "Dtree: fraction of its pool a parent splits at its children's first ask");
            cli.add_option("--dtree-rest", o.dtree_rest,
                           "Dtree: fraction of what a parent holds that it splits later");
            cli.add_option("--min-ask", o.min_ask,
                           "indices a rank asks for at least (default 1.5 x --workers)");
          },
          [&o]() -> std::string {
            br::BagDistribution d{};
            if (!br::parse_bag_distribution(o.distribution, d)) {
              return "--distribution must be dtree, steal or static, got '" + o.distribution + "'";
            }
            be::CostLaw law{};
            if (!be::parse_cost_law(o.costs, law)) {
              return "--costs must be lognormal or pareto, got '" + o.costs + "'";
            }
            if (o.tasks < 0) return "--tasks must not be negative, got " + std::to_string(o.tasks);
            if (o.min_ask < 0) return "--min-ask must not be negative, got " + std::to_string(o.min_ask);
            try {
              (void)be::SweepCosts(law, o.mean_task_mflop * 1e6, o.cost_shape, 0);
              br::DtreeOptions dtree;
              dtree.fan_out = o.fan_out;
              dtree.first = o.dtree_first;
              dtree.rest = o.dtree_rest;
              dtree.validate();
            } catch (const std::invalid_argument& e) {
              return e.what();
            }
            return {};
          },
          /*verify_without_compute=*/true};
}

// The perfect-balance bound of one iteration's tasks: their modeled work over what the
// ranks can do at once (workers, slowed ranks counted at their speed), plus the largest task.
struct Bound {
  double work_seconds = 0.0;
  double largest_seconds = 0.0;
  double seconds = 0.0;
};

Bound bound_of(const be::SweepCosts& costs, std::int64_t begin, std::int64_t end, double rate,
               double capacity) {
  Bound b;
  for (auto i = begin; i < end; ++i) {
    const double s = costs.flops(i) / rate;
    b.work_seconds += s;
    b.largest_seconds = std::max(b.largest_seconds, s);
  }
  b.seconds = b.work_seconds / capacity + b.largest_seconds;
  return b;
}

int run(int argc, char** argv) {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  int exit_code = 0;
  BagAppOptions bag_app;
  auto options = be::parse_app_options("bag", "An irregular parameter sweep: a bag of independent tasks",
                                       argc, argv, world_size, world_rank == 0, exit_code,
                                       bag_options(bag_app));
  if (!options) return exit_code;
  const bool emulated = options->kernel == br::DeviceKind::emulated;
  // The emulated device computes too with --emulated-compute on (within each task's modeled time).
  const bool computes = !emulated || options->emulated_compute;
  if (!emulated && options->kernel != br::DeviceKind::cpu) {
    if (world_rank == 0) std::fprintf(stderr, "bag: error: --kernel must be cpu or emulated\n");
    return 2;
  }
  br::ElasticSession session(argc, argv);
  be::ScheduledResizes resizes(*options, session);
  // The dataflow runtime has no task class here; the session needs it to carry resizes out.
  br::Runtime runtime(session.communicator(), be::runtime_options(*options));
  session.attach(runtime);

  be::CostLaw law{};
  (void)be::parse_cost_law(bag_app.costs, law);
  const be::SweepCosts costs(law, bag_app.mean_task_mflop * 1e6, bag_app.cost_shape, options->seed);
  const double rate = options->emulated_gflops * 1e9;
  br::BagOptions bag_options;
  (void)br::parse_bag_distribution(bag_app.distribution, bag_options.distribution);
  bag_options.dtree.fan_out = bag_app.fan_out;
  bag_options.dtree.first = bag_app.dtree_first;
  bag_options.dtree.rest = bag_app.dtree_rest;
  bag_options.workers = options->workers;
  bag_options.min_ask = bag_app.min_ask;
  bag_options.steal_seed = options->steal.seed;
  br::TaskBag bag(bag_options);

  std::atomic<double> sweep_sum{0.0};
  br::BagTasks tasks;
  std::int64_t offset = 0;  // the iteration's first task
  tasks.body = [&](std::int64_t i) {
    const std::int64_t index = offset + i;
    if (computes) sweep_sum.fetch_add(be::sweep_compute(costs.flops(index), index));
    return costs.digest(index);
  };
  if (emulated) tasks.modeled_seconds = [&](std::int64_t i) { return costs.flops(offset + i) / rate; };

  nlohmann::json rounds = nlohmann::json::array();
  std::uint64_t digest = 0;
  std::int64_t tasks_run = 0;
  double makespan = 0.0, bound_total = 0.0;
  for (int it = session.first_iteration(); it < options->iterations; ++it) {
    resizes.post_before(it);
    if (!session.before_iteration(it)) return 0;  // this rank left the job
    const bool slow = options->slowdown.rank == session.rank() && it + 1 >= options->slowdown.from_iteration;
    bag.set_slowdown(slow ? options->slowdown.factor : 1.0);
    offset = options->iterations > 0 ? bag_app.tasks * it / options->iterations : 0;
    tasks.count = bag_app.tasks * (it + 1) / options->iterations - offset;
    const auto start = std::chrono::steady_clock::now();
    const br::BagReport report = bag.run(session.communicator(), tasks);
    // Ranks lost during the run: the bag re-ran what they had not finished on the survivors,
    // whose communicator the job now carries on on (and, under bellows run, reports recovered).
    if (report.survivors != MPI_COMM_NULL) session.adopt_survivors(report.survivors, report.lost_ranks);
    const int rank = session.rank(), ranks = session.size();

    br::IterationReport iteration;
    iteration.iteration = it + 1;
    iteration.ranks = ranks;
    iteration.seconds = report.seconds;
    double busy_sum = 0.0, busiest = 0.0;
    for (const auto& r : report.ranks) {
      busy_sum += r.busy_seconds;
      busiest = std::max(busiest, r.busy_seconds);
    }
    const double lanes_time = std::max(report.seconds * options->workers, 1e-9);
    iteration.busiest_compute_share = busiest / lanes_time;
    iteration.mean_compute_share = busy_sum / ranks / lanes_time;
    const auto& mine = report.ranks[static_cast<std::size_t>(rank)];
    iteration.local.rank = rank;
    iteration.local.tasks_executed = mine.tasks;
    iteration.local.busy_seconds = mine.busy_seconds;
    iteration.local.idle_seconds = std::max(0.0, report.seconds * options->workers - mine.busy_seconds);
    iteration.start_steady_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    start.time_since_epoch()).count();
    iteration.first_task_steady_ns = mine.tasks > 0 ? iteration.start_steady_ns : 0;
    session.after_iteration(it, iteration);

    digest += report.digest;
    tasks_run += report.tasks;
    makespan += report.seconds;
    if (rank == 0) {
      nlohmann::json round = report;
      round["iteration"] = it + 1;
      round["ranks_in_job"] = ranks;
      if (emulated) {
        double capacity = 0.0;
        for (int r = 0; r < ranks; ++r) {
          const bool r_slow = options->slowdown.rank == r && it + 1 >= options->slowdown.from_iteration;
          capacity += options->workers / (r_slow ? options->slowdown.factor : 1.0);
        }
        const Bound b = bound_of(costs, offset, offset + tasks.count, rate, capacity);
        round["modeled_work_seconds"] = b.work_seconds;
        round["largest_task_seconds"] = b.largest_seconds;
        round["bound_seconds"] = b.seconds;
        round["over_bound"] = b.seconds > 0.0 ? report.seconds / b.seconds - 1.0 : 0.0;
        bound_total += b.seconds;
      }
      rounds.push_back(round);
    }
  }

  // Every rank ran its share; rank 0 checks the sum over the job.
  std::optional<bool> verified;
  if (session.rank() == 0 && options->verify) {
    std::uint64_t expected = 0;
    for (std::int64_t i = 0; i < bag_app.tasks; ++i) expected += costs.digest(i);
    verified = digest == expected && tasks_run == bag_app.tasks;
  }
  double sum = sweep_sum.load(), total_sum = 0.0;
  MPI_Reduce(&sum, &total_sum, 1, MPI_DOUBLE, MPI_SUM, 0, session.communicator());
  if (session.rank() == 0) {
    nlohmann::json j;
    j["app"] = "bag";
    j["tasks"] = bag_app.tasks;
    j["tasks_run"] = tasks_run;
    j["ranks"] = session.size();
    j["kernel"] = std::string(br::to_string(options->kernel));
    j["workers"] = options->workers;
    if (emulated) j["emulated_gflops"] = options->emulated_gflops;
    j["distribution"] = bag_app.distribution;
    j["costs"] = {{"law", std::string(be::to_string(law))}, {"shape", costs.shape()},
                  {"mean_mflop", bag_app.mean_task_mflop}, {"seed", options->seed}};
    j["makespan_seconds"] = makespan;
    if (emulated) {
      j["bound_seconds"] = bound_total;
      j["over_bound"] = bound_total > 0.0 ? makespan / bound_total - 1.0 : 0.0;
    }
    if (computes) j["sweep_sum"] = total_sum;
    j["iterations"] = rounds;
    j["digest"] = digest;
    j["verified"] = verified.value_or(false);
    if (!session.telemetry().empty()) j["resizes"] = session.telemetry();
    if (!options->quiet) {
      std::printf("bag: %lld tasks (%s, shape %g, mean %g MFLOP) on %d ranks, %s, kernel %s\n",
                  static_cast<long long>(bag_app.tasks), std::string(be::to_string(law)).c_str(),
                  costs.shape(), bag_app.mean_task_mflop, session.size(),
                  bag_app.distribution.c_str(), std::string(br::to_string(options->kernel)).c_str());
      for (const auto& r : rounds) {
        std::printf("  iteration %d: %lld tasks on %d ranks in %.4f s", r["iteration"].get<int>(),
                    r["tasks"].get<long long>(), r["ranks_in_job"].get<int>(), r["seconds"].get<double>());
        if (r.contains("bound_seconds")) {
          std::printf(" (bound %.4f s, %+.1f %%)", r["bound_seconds"].get<double>(),
                      100.0 * r["over_bound"].get<double>());
        }
        std::printf("\n");
      }
      if (verified) std::printf("  verification: %s\n", *verified ? "passed" : "FAILED");
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  int failed = verified.has_value() && !*verified ? 1 : 0;
  MPI_Bcast(&failed, 1, MPI_INT, 0, session.communicator());
  return failed;
}

}  // namespace

int main(int argc, char** argv) { return be::run_example("bag", argc, argv, run); }
