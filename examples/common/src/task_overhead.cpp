#include "bellows/examples/task_overhead.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"

namespace bellows::examples {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// C = A * B on `side` x `side` tiles of `tile` on this rank alone.
class ProbeGemm {
 public:
  ProbeGemm(int side, int tile, const AppOptions& options)
      : a_(0, side * tile, side * tile, tile, runtime::BlockCyclic2D{}, 0),
        b_(1, side * tile, side * tile, tile, runtime::BlockCyclic2D{}, 0),
        c_(2, side * tile, side * tile, tile, runtime::BlockCyclic2D{}, 0),
        runtime_(MPI_COMM_SELF, probe_options(options)) {
    fill_random(a_, options.seed);
    fill_random(b_, options.seed + 1);
    runtime_.add_collection(a_);
    runtime_.add_collection(b_);
    runtime_.add_collection(c_);
    runtime_.add_task_class(std::make_unique<GemmTasks>(0, a_, b_, c_));
  }

  /// One iteration's wall time.
  double run() { return runtime_.run_iteration().seconds; }

 private:
  static runtime::RuntimeOptions probe_options(const AppOptions& options) {
    runtime::RuntimeOptions r;
    r.device = runtime::DeviceKind::cpu;
    r.cpu_workers = 1;
    r.comm_max_sleep_us = options.comm_max_sleep_us;
    r.comm_poll_us = options.comm_poll_us;
    r.comm_thread_task_us = options.comm_thread_task_us;
    r.same_host_transport = false;
    return r;
  }

  runtime::TiledMatrix a_, b_, c_;
  runtime::Runtime runtime_;
};

}  // namespace

TaskOverheadMeasurement measure_task_overhead(int tile, double gemm_gflops,
                                              const AppOptions& options) {
  const auto start = Clock::now();
  // One graph after the other: two runtimes alive at once would have two communication threads
  // calling MPI, which MPI_THREAD_SERIALIZED does not allow.
  const auto fastest_iteration = [&](int side) {
    ProbeGemm graph(side, tile, options);
    double fastest = 1e300, spent = 0.0;
    for (int runs = 0; runs < kTaskOverheadMaxRuns &&
                       (runs < kTaskOverheadMinRuns || spent < kTaskOverheadRunSeconds);
         ++runs) {
      const double seconds = graph.run();
      fastest = std::min(fastest, seconds);
      spent += seconds;
    }
    return fastest;
  };
  const double fastest_small = fastest_iteration(kTaskOverheadSmallSide);
  const double fastest_large = fastest_iteration(kTaskOverheadLargeSide);
  const double b = tile;
  const auto tasks = [](int side) { return static_cast<double>(side) * side * side; };
  TaskOverheadMeasurement m;
  m.tile = tile;
  m.seconds_per_task = (fastest_large - fastest_small) /
                       (tasks(kTaskOverheadLargeSide) - tasks(kTaskOverheadSmallSide));
  m.kernel_seconds = 2.0 * b * b * b / (gemm_gflops * 1e9);
  m.overhead_seconds = std::max(0.0, m.seconds_per_task - m.kernel_seconds);
  m.measuring_seconds = seconds_since(start);
  return m;
}

}  // namespace bellows::examples
