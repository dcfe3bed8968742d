// METG, Task Bench's "minimum effective task granularity" (Slaughter et al., SC 2020): the
// efficiency of a stencil graph with 3 dependencies per task (metg_stencil.hpp) as the tasks
// get shorter, in libbellows or in hand-written MPI (--system).
//
//   mpiexec -n 2 ./bellows_metg --system bellows --largest-us 256 --smallest-us 0.5
//
// The busy loop is calibrated once at the start (the fastest of many short timed runs on each
// rank, the fastest rank's). Each point halves the loop's iterations; its efficiency is
//   tasks x task duration / (ranks x 1 core x wall time),
// from the median wall time of --repeat iterations after one that warms up. Each rank computes
// on one core: libbellows with one worker thread (its communication thread comes on top), MPI
// in the rank's own thread. bench/metg.py runs the versions side by side and finds METG(50 %).
//
// Prints a line per point and, as the last line, a JSON object with every point.

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "metg.hpp"

namespace bb = bellows::bench;

namespace {

struct SweepOptions {
  std::string system;
  int width_per_rank = 4;
  double largest_us = 256.0;
  double smallest_us = 0.5;
  double seconds_per_point = 0.1;
  int min_steps = 8;
  int max_steps = 50000;
  int fixed_steps = 0;                  // 0: from seconds_per_point
  std::int64_t largest_iterations = 0;  // 0: from largest_us
  int repeat = 3;
  bool same_host = true;
  bool mailboxes = true;
  std::size_t eager_tile_bytes = bellows::runtime::RuntimeOptions{}.eager_tile_bytes;
  int comm_poll_us = bellows::runtime::RuntimeOptions{}.comm_poll_us;
  int comm_thread_task_us = bellows::runtime::RuntimeOptions{}.comm_thread_task_us;
  bool workers_read_mail = bellows::runtime::RuntimeOptions{}.workers_read_mail;
  int worker_poll_us = bellows::runtime::RuntimeOptions{}.worker_poll_us;
  bool quiet = false;
};

// Nanoseconds per iteration of the busy loop: the fastest of many short timed runs on each rank,
// then the fastest rank's (every rank calibrates at once, as they compute at once later). Runs
// of about 0.1 ms mostly fit between the preemptions of a loaded machine, so the fastest is the
// core's own speed.
double calibrate_ns_per_iteration(MPI_Comm comm) {
  constexpr std::int64_t kIterations = std::int64_t{1} << 16;
  constexpr int kRuns = 400;
  double fastest = std::numeric_limits<double>::infinity();
  volatile double sink = 0.0;
  for (int run = 0; run < kRuns; ++run) {
    const auto begin = std::chrono::steady_clock::now();
    sink = sink + bb::busy_loop(static_cast<double>(run), kIterations);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - begin;
    fastest = std::min(fastest, took.count());
  }
  double ns = fastest / static_cast<double>(kIterations) * 1e9, overall = 0.0;
  MPI_Allreduce(&ns, &overall, 1, MPI_DOUBLE, MPI_MIN, comm);
  return overall;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

int steps_for(const SweepOptions& o, const bb::StencilShape& shape, double task_seconds) {
  if (o.fixed_steps > 0) return o.fixed_steps;
  const double steps = o.seconds_per_point * shape.ranks / (shape.width * task_seconds);
  return static_cast<int>(std::clamp(std::llround(steps), static_cast<long long>(o.min_steps),
                                     static_cast<long long>(o.max_steps)));
}

nlohmann::json counters_json(const bb::RuntimeCounters& c, std::int64_t tasks_measured) {
  const double per_task = tasks_measured > 0 ? 1e6 / static_cast<double>(tasks_measured) : 0.0;
  return {{"busy_us_per_task", c.busy_seconds * per_task},
          {"idle_us_per_task", c.idle_seconds * per_task},
          {"comm_cpu_us_per_task", c.comm_cpu_seconds * per_task},
          {"messages_per_task", static_cast<double>(c.messages_sent) * per_task * 1e-6},
          {"bytes_sent_per_task", static_cast<double>(c.bytes_sent) * per_task * 1e-6}};
}

int run(const SweepOptions& o, int rank, int size) {
  const double ns = calibrate_ns_per_iteration(MPI_COMM_WORLD);
  bb::StencilShape shape;
  shape.ranks = size;
  shape.width = o.width_per_rank * size;
  const auto largest = o.largest_iterations > 0
                           ? o.largest_iterations
                           : std::max<std::int64_t>(1, std::llround(o.largest_us * 1e3 / ns));
  const int points = 1 + static_cast<int>(std::floor(std::log2(o.largest_us / o.smallest_us) + 1e-9));
  bellows::runtime::RuntimeOptions options;
  options.cpu_workers = 1;
  options.same_host_transport = o.same_host;
  options.same_host_mailboxes = o.mailboxes;
  options.eager_tile_bytes = o.eager_tile_bytes;
  options.comm_poll_us = o.comm_poll_us;
  options.comm_thread_task_us = o.comm_thread_task_us;
  options.workers_read_mail = o.workers_read_mail;
  options.worker_poll_us = o.worker_poll_us;
  if (rank == 0 && !o.quiet) {
    std::printf("%s on %d rank(s) x 1 core, width %d, busy loop %.3f ns per iteration\n",
                o.system.c_str(), size, shape.width, ns);
    std::printf("%10s %12s %8s %10s %10s\n", "task us", "iterations", "steps", "seconds", "efficiency");
  }
  nlohmann::json rows = nlohmann::json::array();
  for (int p = 0; p < points; ++p) {
    const std::int64_t iterations = std::max<std::int64_t>(1, largest >> p);
    const double task_seconds = static_cast<double>(iterations) * ns * 1e-9;
    shape.steps = steps_for(o, shape, task_seconds);
    const bb::PointTiming t =
        o.system == "bellows" ? bb::run_bellows_point(shape, iterations, o.repeat, MPI_COMM_WORLD, options)
                              : bb::run_mpi_point(shape, iterations, o.repeat, MPI_COMM_WORLD);
    const double seconds = median(t.seconds);
    const double efficiency =
        static_cast<double>(shape.tasks()) * task_seconds / (static_cast<double>(size) * seconds);
    if (rank != 0) continue;
    if (!o.quiet) {
      std::printf("%10.3f %12lld %8d %10.4f %10.3f\n", task_seconds * 1e6,
                  static_cast<long long>(iterations), shape.steps, seconds, efficiency);
      std::fflush(stdout);
    }
    nlohmann::json row{{"task_us", task_seconds * 1e6}, {"iterations", iterations},
                       {"steps", shape.steps}, {"tasks", shape.tasks()},
                       {"tasks_executed", t.tasks_executed}, {"seconds", t.seconds},
                       {"median_seconds", seconds}, {"efficiency", efficiency},
                       {"checksum", t.checksum}};
    if (o.system == "bellows") {
      row["runtime"] = counters_json(t.counters, t.tasks_executed * o.repeat);
    }
    rows.push_back(std::move(row));
  }
  if (rank == 0) {
    const nlohmann::json report{{"app", "metg"}, {"system", o.system}, {"ranks", size},
                                {"cores", size}, {"width", shape.width},
                                {"dependencies", 3}, {"edges", "clipped"},
                                {"ns_per_iteration", ns}, {"repeat", o.repeat},
                                {"points", rows}};
    std::printf("%s\n", report.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  SweepOptions o;
  std::string same_host = "on";
  std::string mailboxes = "on";
  std::string workers_read_mail = o.workers_read_mail ? "on" : "off";
  CLI::App cli("METG of a 3-dependency stencil: libbellows or hand-written MPI", "bellows_metg");
  cli.add_option("--system", o.system, "bellows or mpi")
      ->required()->check(CLI::IsMember({"bellows", "mpi"}));
  cli.add_option("--width-per-rank", o.width_per_rank, "stencil columns per rank")
      ->check(CLI::PositiveNumber);
  cli.add_option("--largest-us", o.largest_us, "task duration of the first point, microseconds")
      ->check(CLI::PositiveNumber);
  cli.add_option("--smallest-us", o.smallest_us,
                 "halve the task duration down to this, microseconds")->check(CLI::PositiveNumber);
  cli.add_option("--seconds-per-point", o.seconds_per_point,
                 "compute seconds per rank of one iteration of a point (sets the timesteps)")
      ->check(CLI::PositiveNumber);
  cli.add_option("--min-steps", o.min_steps, "fewest timesteps of a point")->check(CLI::PositiveNumber);
  cli.add_option("--max-steps", o.max_steps, "most timesteps of a point")->check(CLI::PositiveNumber);
  cli.add_option("--steps", o.fixed_steps, "timesteps of every point (instead of --seconds-per-point)")
      ->check(CLI::PositiveNumber);
  cli.add_option("--largest-iterations", o.largest_iterations,
                 "busy-loop iterations of the first point (instead of --largest-us; the number of "
                 "points still follows --largest-us / --smallest-us)")->check(CLI::PositiveNumber);
  cli.add_option("--repeat", o.repeat, "measured iterations per point, after one warm-up")
      ->check(CLI::PositiveNumber);
  cli.add_option("--same-host", same_host, "libbellows' same-host transport")
      ->check(CLI::IsMember({"on", "off"}));
  cli.add_option("--mailboxes", mailboxes,
                 "libbellows: workers write small activations for ranks of the same host into "
                 "their mailboxes (off: through the communication thread and MPI)")
      ->check(CLI::IsMember({"on", "off"}));
  cli.add_option("--eager-tile-bytes", o.eager_tile_bytes,
                 "libbellows: a tile of at most this many bytes travels in its activation (0: "
                 "every tile is fetched)");
  cli.add_option("--comm-poll-us", o.comm_poll_us,
                 "libbellows: microseconds the communication thread polls after a message");
  cli.add_option("--comm-thread-task-us", o.comm_thread_task_us,
                 "libbellows: the communication thread runs a task a message made ready itself "
                 "when every worker sleeps and tasks lately took at most this long (0: never)");
  cli.add_option("--workers-read-mail", workers_read_mail,
                 "libbellows: the worker reads the same-host mailboxes itself between tasks and "
                 "before it sleeps; peers ring only a rank whose worker sleeps")
      ->check(CLI::IsMember({"on", "off"}));
  cli.add_option("--worker-poll-us", o.worker_poll_us,
                 "libbellows, with --workers-read-mail on: microseconds an idle worker polls the "
                 "mailboxes before it sleeps");
  cli.add_flag("--quiet", o.quiet, "only the JSON line");
  try {
    cli.parse(argc, argv);
    if (o.smallest_us > o.largest_us) {
      throw CLI::ValidationError("--smallest-us", "must not exceed --largest-us (" +
                                 std::to_string(o.largest_us) + "), got " +
                                 std::to_string(o.smallest_us));
    }
    bellows::runtime::RuntimeOptions communication;
    communication.eager_tile_bytes = o.eager_tile_bytes;
    communication.comm_poll_us = o.comm_poll_us;
    communication.comm_thread_task_us = o.comm_thread_task_us;
    communication.worker_poll_us = o.worker_poll_us;
    if (const auto problem = bellows::runtime::validate_communication(communication);
        !problem.empty()) {
      throw CLI::ValidationError(
          "--eager-tile-bytes/--comm-poll-us/--comm-thread-task-us/--worker-poll-us", problem);
    }
    if (o.min_steps > o.max_steps) {
      throw CLI::ValidationError("--min-steps", "must not exceed --max-steps (" +
                                 std::to_string(o.max_steps) + "), got " +
                                 std::to_string(o.min_steps));
    }
  } catch (const CLI::ParseError& e) {
    if (rank == 0) std::fprintf(stderr, "bellows_metg: error: %s\n", e.what());
    MPI_Finalize();
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  o.same_host = same_host == "on";
  o.mailboxes = mailboxes == "on";
  o.workers_read_mail = workers_read_mail == "on";
  const int status = run(o, rank, size);
  MPI_Finalize();
  return status;
}
