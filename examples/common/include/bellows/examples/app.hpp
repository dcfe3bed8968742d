#pragma once
// What the example applications (gemm, cholesky, bspgemm) share: command line,
// deterministic matrix contents, and the summary + JSON report.

#include <functional>
#include <mpi.h>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/options.hpp"
#include "bellows/runtime/runtime.hpp"
#include "bellows/runtime/stats.hpp"

namespace CLI {
class App;
}

namespace bellows::examples {

struct AppOptions {
  int n = 2048;
  int tile = 256;
  /// --tile auto: tile is chosen before the first iteration (bellows/examples/tile_auto.hpp).
  bool tile_auto = false;
  int iterations = 1;
  runtime::DeviceKind kernel = runtime::DeviceKind::cpu;
  bool verify = false;
  std::string trace_path;
  std::string grid;               ///< "PxQ"; empty: most square grid for the rank count
  int workers = 1;                ///< CPU worker threads per rank
  double emulated_gflops = 1000;  ///< rate of the emulated device
  int emulated_lanes = 1;
  bool emulated_compute = false;  ///< --emulated-compute on|off
  /// Host <-> device link of the emulated device, GB/s; by default the runtime's
  /// (runtime::emulated_link_of: 12 in hybrid mode, free for the emulated device alone).
  double emulated_link_gbps = runtime::RuntimeOptions::kLinkOfDevice;
  double emulated_link_latency_us = 10.0;
  unsigned seed = 42;
  bool quiet = false;             ///< only the JSON line
  /// --report FILE: the JSON line is also appended to FILE (a job whose first rank's output
  /// is lost with its first node: docs/slurm.md, "The job's first node").
  std::string report_path;
  int comm_max_sleep_us = 200;    ///< see RuntimeOptions::comm_max_sleep_us
  /// --eager-tile-bytes, --comm-poll-us, --comm-thread-task-us (RuntimeOptions::eager_tile_bytes,
  /// comm_poll_us, comm_thread_task_us)
  std::size_t eager_tile_bytes = runtime::RuntimeOptions{}.eager_tile_bytes;
  int comm_poll_us = runtime::RuntimeOptions{}.comm_poll_us;
  int comm_thread_task_us = runtime::RuntimeOptions{}.comm_thread_task_us;
  runtime::StealOptions steal;    ///< --steal on|off and the --steal-* parameters
  runtime::OffloadOptions offload;  ///< --offload on|off, --offload-min-*
  runtime::EmulatedSlowdown slowdown;  ///< --slow-rank, --slow-from, --slow-factor
  runtime::CheckpointOptions checkpoint;  ///< --checkpoint on|off, --checkpoint-mtbf, --checkpoint-every
  runtime::MessageLogOptions message_log;  ///< --message-log on|off, --team-size, --teams, --steal-across-teams
  bool same_host_transport = true;  ///< --same-host on|off
  /// --same-host-mailboxes on|off (RuntimeOptions::same_host_mailboxes)
  bool same_host_mailboxes = runtime::RuntimeOptions{}.same_host_mailboxes;
  /// --workers-read-mail on|off (RuntimeOptions::workers_read_mail)
  bool workers_read_mail = runtime::RuntimeOptions{}.workers_read_mail;
  bool cuda_pinned_tiles = true;    ///< --cuda-pinned on|off
  int cuda_cache_mib = 2048;        ///< --cuda-cache-mib (RuntimeOptions::cuda_tile_cache_bytes)
  int cuda_streams = 4;             ///< --cuda-streams (RuntimeOptions::cuda_streams)
  int gpus = 1;                     ///< --gpus (RuntimeOptions::gpus)
  bool rebalance_on_resize = true;  ///< --rebalance on|off (RuntimeOptions::rebalance_on_resize)
  std::string resize;             ///< --resize "iter=3:+2,iter=6:-3" (see elastic.hpp)
  std::string ask_controller;     ///< --ask-controller "iter=9:+1" (under bellows run)
};

/// Options one example adds to the shared ones: `add` registers them, `check` returns
/// an error message (empty when they are fine) after parsing.
struct ExtraOptions {
  std::function<void(CLI::App&)> add;
  std::function<std::string()> check;
  /// --verify checks something the emulated device need not compute (the bag's digests), so
  /// it does not need --emulated-compute on.
  bool verify_without_compute = false;
};

/// Parses the command line shared by the examples. On a bad option, prints a message
/// naming it to stderr (when `speak`) and returns std::nullopt with exit_code = 2; on
/// --help prints the usage (when `speak`) and returns std::nullopt with exit_code = 0.
std::optional<AppOptions> parse_app_options(const std::string& app, const std::string& description,
                                            int argc, char** argv, int ranks, bool speak,
                                            int& exit_code, const ExtraOptions& extra = {});

/// Initialises MPI with MPI_THREAD_SERIALIZED (what libbellows needs); exits 1 when the
/// library cannot provide it.
void init_mpi(int& argc, char**& argv);

/// The main() of an example: initialises MPI, calls run(argc, argv), and finalizes MPI.
/// An exception from run is printed as "APP: error: ..." and aborts the job with code 1.
/// Returns run's result.
int run_example(const char* app, int argc, char** argv, int (*run)(int, char**));

/// The process grid for the options and rank count (validated by parse_app_options).
runtime::BlockCyclic2D grid_for(const AppOptions& options, int ranks);

runtime::RuntimeOptions runtime_options(const AppOptions& options);

/// Deterministic pseudo-random value in [-0.5, 0.5) for global element (i, j).
double random_entry(unsigned seed, long i, long j) noexcept;

/// Fills every local tile of a general matrix with random_entry.
void fill_random(runtime::TiledMatrix& matrix, unsigned seed);
/// Fills the local tiles of a symmetric positive definite matrix: random symmetric
/// entries plus n on the diagonal. Element (i, j) equals spd_entry(seed, n, i, j).
void fill_spd(runtime::TiledMatrix& matrix, unsigned seed);
double spd_entry(unsigned seed, long n, long i, long j) noexcept;

struct IterationResult {
  double seconds = 0.0;
  double gflops = 0.0;
  int ranks = 0;
  double busiest_compute_share = 0.0;  ///< runtime::IterationReport's
  double mean_compute_share = 0.0;
};

/// After a recovery that rolled back: drops the results of the iterations from `count` on
/// (they run again), keeping the first `count`.
inline void forget_iterations_from(std::vector<IterationResult>& iterations, int count) {
  if (count >= 0 && static_cast<std::size_t>(count) < iterations.size()) {
    iterations.resize(static_cast<std::size_t>(count));
  }
}

/// One iteration of a job of `flops` floating-point operations, as print_report lists it.
[[nodiscard]] IterationResult iteration_result(const runtime::IterationReport& report, double flops);

/// What the runtime adds to an example's JSON report besides its statistics: under
/// "team_plan", the teams TeamLB applied (MessageLogOptions::plan_teams), when it did; under
/// "recoveries", per failure this rank recovered from (Runtime::recoveries()), the lost
/// ranks, the iteration interrupted and the one rolled back to, the iterations redone, the
/// ranks and teams that rolled back and the log bytes kept for the replay (summed over the
/// ranks now in the job; 0 where every rank rolled back). Collective over the runtime's
/// communicator: call it on every rank.
[[nodiscard]] nlohmann::json runtime_extra(const runtime::Runtime& runtime);

/// Prints the human summary (unless quiet) and, as the last line, the JSON object
/// {"app","n","tile","ranks","kernel","iterations":[...],"verified","residual", ...}.
/// Call on rank 0 only.
void print_report(const std::string& app, const AppOptions& options, int ranks,
                  const std::vector<IterationResult>& iterations,
                  const std::optional<bool>& verified, double residual,
                  const std::vector<runtime::RankStats>& rank_stats,
                  const nlohmann::json& extra = {});

}  // namespace bellows::examples
