// A rank lost after the job's last iteration (Runtime::finish): three ranks, each the only
// process of its own mpiexec, joined the way a Bellows job is (grow_by_accept /
// join_by_connect), each on a node of its own for the checkpoints' buddies, run a GEMM under
// ElasticJob with stealing on and a checkpoint every second boundary, then end the job with
// Runtime::finish, which gathers C and every rank's statistics to rank 0.
// With `tail` the victim SIGKILLs itself once its last iteration returned (its end-of-iteration
// reductions completed), after a pause of 0 to 3 ms, before it calls finish(): the others meet
// its death in finish(), or, a survivor still at that iteration's end (its watch polled once
// more after its reductions), there; either recovers alike. With `gather` the victim calls
// finish() and SIGKILLs itself right after it posted its first transfer of the gather (an
// MPI_Isend of a tile of C to rank 0, or on rank 0 its first MPI_Irecv of one, caught through
// MPI's profiling interface), after the pause. Either way the survivors must not die of it nor wait for it:
// finish() reports the victim lost, the survivors recover (ElasticJob::recover) to the last
// checkpoint (the victim's tiles from its buddy), run the iterations after it again, and
// finish() again on the two of them: every task of every iteration after the checkpoint ran
// once over them, C on the new rank 0 is bit-identical to a serial run, and rank 0 holds both
// survivors' statistics. Victim -1: nobody dies, finish() completes at once with three ranks'
// statistics and C verified. With `cholesky` the job is the tiled Cholesky factorization of the
// cholesky example instead (L gathered, bit-identical to a serial factorization by the same
// kernels in the same order). With `teams` the GEMM logs its messages between teams of one rank
// (docs/teams.md): only the lost rank and its buddy roll back, and the third rank serves the
// iterations redone from its log.
// BELLOWS_TEST_SEED fixes the pause; the seed is printed with the result.
//
// The launcher passes when the victim's mpiexec reports the kill, every survivor's mpiexec
// exits 0 with a PASS result, and no process it started is left; it prints one JSON line and
// "job_end_loss: PASS".
//
//   job_end_loss_tests MPIEXEC SELF VICTIM tail|gather [cholesky|teams]   (the launcher; no MPI)
//   job_end_loss_tests --member DIR INDEX                (under MPIEXEC -n 1)

#include "bellows/runtime/elastic_job.hpp"
#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/runtime.hpp"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"
#include "loss_test_gemm.hpp"
#include "recovery_references.hpp"
#include "separate_worlds.hpp"
#include "spawned_processes.hpp"
#include "tiled_gemm.hpp"
#include "watchdog.hpp"

namespace {

namespace fs = std::filesystem;
namespace br = bellows::runtime;
using bellows::test::kGemmN;
using bellows::test::kGemmSeed;
using bellows::test::kGemmTile;
using bellows::test::rank_set;
using bellows::testing::read_file;
using bellows::testing::read_int;
using bellows::testing::write_file;

constexpr int kRanks = 3;
constexpr int kIterations = 4;
constexpr int kCheckpointEvery = 2;
constexpr auto kRecoverTimeout = std::chrono::seconds(10);
constexpr double kLauncherLimitSeconds = 60.0;  // below the ctest timeout

/// gather: set on the victim as it calls finish(); the first tile transfer of the gather it
/// posts (doubles: the statistics' sizes travel as longs, the watch's receives as bytes) ends it.
std::atomic<bool> die_after_posting_a_tile{false};
std::atomic<int> kill_pause_us{0};

void die_if_armed() {
  if (!die_after_posting_a_tile.load()) return;
  std::this_thread::sleep_for(std::chrono::microseconds(kill_pause_us.load()));
  ::raise(SIGKILL);
}

bellows::test::Checks checks{"job_end_loss_tests"};
void expect(bool ok, const std::string& what) { checks.expect(ok, what); }

/// The tasks of one iteration: GEMM's tiles^3; Cholesky's potrf, trsm, syrk and gemm per step k.
unsigned long long tasks_per_iteration(bool cholesky) {
  const unsigned long long tiles = kGemmN / kGemmTile;
  if (!cholesky) return tiles * tiles * tiles;
  unsigned long long tasks = 0;
  for (unsigned long long k = 0; k < tiles; ++k) {
    const unsigned long long below = tiles - 1 - k;
    tasks += 1 + below + below + below * (below - 1) / 2;
  }
  return tasks;
}

// ------------------------------------------------------------------------------------ member

int run_member(const fs::path& dir, int index) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(45), "job end loss member", index);
  const int victim = read_int(dir / "victim");
  const int pause_us = read_int(dir / "pause_us");
  const bool in_gather = fs::exists(dir / "gather");
  const bool cholesky = fs::exists(dir / "cholesky");
  const bool teams = fs::exists(dir / "teams");
  kill_pause_us = pause_us;
  std::vector<int> payload;
  auto membership = bellows::testing::join_member_job(dir, index, kRanks, payload);
  const int old_rank = membership.rank();
  write_file(dir / ("pid." + std::to_string(index)), std::to_string(::getpid()));
  write_file(dir / ("rank." + std::to_string(index)), std::to_string(old_rank));
  br::ElasticJob job(std::move(membership), br::ElasticJob::Grow(), -1);

  bellows::test::TiledGemm gemm(kGemmN, kGemmTile, kRanks, old_rank, kGemmSeed);
  const auto lower = [](int m, int k) { return m >= k; };
  br::TiledMatrix spd(0, kGemmN, kGemmN, kGemmTile, gemm.grid, old_rank, lower);
  br::TiledMatrix l(1, kGemmN, kGemmN, kGemmTile, gemm.grid, old_rank, lower);
  br::RuntimeOptions options;
  options.comm_max_sleep_us = 100;
  options.same_host_transport = false;  // tiles over MPI, as between nodes
  options.steal.enabled = true;
  options.checkpoint.enabled = true;
  options.checkpoint.every_iterations = kCheckpointEvery;
  options.checkpoint.node = "node" + std::to_string(old_rank);
  options.message_log.enabled = teams;
  options.message_log.team_size = 1;
  auto owned_runtime = std::make_unique<br::Runtime>(job.communicator(), options);
  br::Runtime& runtime = *owned_runtime;
  job.attach(runtime);
  if (cholesky) {
    bellows::examples::fill_spd(spd, kGemmSeed);
    runtime.add_collection(spd);
    runtime.add_collection(l);
    for (auto& task_class : bellows::examples::make_cholesky_tasks(spd, l)) runtime.add_task_class(std::move(task_class));
  } else {
    gemm.attach(runtime);
  }

  nlohmann::json result{{"old_rank", old_rank}};
  int recoveries = 0;
  long checkpoint_at_end = -1, rolled_back_to = -1;
  br::RecoveryReport last_recovery;
  std::vector<int> lost;
  std::map<long, std::uint64_t> tasks_run;  // runtime iteration -> tasks run here, the last run of each
  const br::TiledMatrix* result_collections[] = {cholesky ? &l : &gemm.c};
  br::JobEnd end;
  // Recovers from a loss that `report` names (of an iteration or of finish()); the loop resumes
  // after the checkpoint rolled back to.
  const auto recover = [&](const br::IterationReport& report, int& it) {
    if (recoveries == 0) checkpoint_at_end = runtime.last_checkpoint().value_or(-1);
    const br::RecoveryReport recovery = job.recover(report, kRecoverTimeout);
    ++recoveries;
    lost = recovery.lost;
    rolled_back_to = recovery.iteration;
    last_recovery = recovery;
    // The runtime counts its iterations from 1; the loop resumes after the checkpoint's.
    it -= report.iteration - 1 - static_cast<int>(recovery.iteration);
  };
  for (int it = 0;;) {
    if (it >= kIterations) {
      if (old_rank == victim && recoveries == 0) {
        if (in_gather) {
          die_after_posting_a_tile = true;  // in finish(), below
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
          ::raise(SIGKILL);  // the last iteration's reductions completed everywhere
        }
      }
      end = runtime.finish(result_collections);
      if (end.completed()) break;
      recover(end.report, it);
      continue;
    }
    const br::IterationReport report = runtime.run_iteration();
    if (report.completed()) {
      // A rank that kept its state while other teams replayed the iteration ran it before.
      if (report.ran_here()) tasks_run[report.iteration] = report.local.tasks_executed;
      ++it;
      continue;
    }
    // The victim died right after its last iteration: a survivor still at that iteration's end
    // (its reductions completed, its watch polled once more) finds the loss there. The others,
    // past it, find it in finish(); both recover alike.
    expect(report.iteration == kIterations, "iteration " + std::to_string(report.iteration) + " lost ranks " +
                                                rank_set(report.lost_ranks) + ": the victim dies after the last iteration");
    recover(report, it);
  }
  const bool no_victim = victim < 0;
  expect(recoveries == (no_victim ? 0 : 1),
         "recovered " + std::to_string(recoveries) + " times, expected " + (no_victim ? "never" : "once"));
  expect(no_victim ? lost.empty() : lost == std::vector<int>{victim},
         "lost ranks " + rank_set(lost) + ", expected " + (no_victim ? "{}" : "{" + std::to_string(victim) + "}"));
  const int expected_size = no_victim ? kRanks : kRanks - 1;
  expect(job.size() == expected_size,
         "the job ends on " + std::to_string(job.size()) + " ranks, expected " + std::to_string(expected_size));
  if (!no_victim) {
    expect(rolled_back_to == checkpoint_at_end,
           "rolled back to the checkpoint of iteration " + std::to_string(rolled_back_to) + ", expected " +
               std::to_string(checkpoint_at_end) + " (the last complete one when the last iteration ended)");
  }
  // Every task of every iteration after the checkpoint rolled back to ran once over the ranks
  // that finished (all of them without a victim).
  const int first_counted = no_victim ? 1 : static_cast<int>(rolled_back_to) + 1;
  std::vector<unsigned long long> mine, all(static_cast<std::size_t>(kIterations - first_counted + 1), 0);
  for (int i = first_counted; i <= kIterations; ++i) mine.push_back(tasks_run.count(i) != 0 ? tasks_run[i] : 0);
  MPI_Allreduce(mine.data(), all.data(), static_cast<int>(all.size()), MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                job.communicator());
  const unsigned long long expected_tasks = tasks_per_iteration(cholesky);
  for (std::size_t i = 0; i < all.size(); ++i) {
    expect(all[i] == expected_tasks, "iteration " + std::to_string(first_counted + static_cast<int>(i)) + " ran " +
                                         std::to_string(all[i]) + " tasks over the ranks, expected " +
                                         std::to_string(expected_tasks));
  }
  if (teams && !no_victim) {
    // Teams of one: the lost rank's buddy rolls back with it, the third rank keeps its state.
    expect(last_recovery.ranks_rolled_back.size() == 2,
           "ranks " + rank_set(last_recovery.ranks_rolled_back) + " rolled back, expected the lost rank and its buddy (" +
               last_recovery.rolled_back_globally_because + ")");
    result["ranks_rolled_back"] = last_recovery.ranks_rolled_back;
  }
  if (job.rank() == 0) {
    // Every iteration factors the same matrix: L is that of one iteration.
    const std::vector<double> expected =
        cholesky ? bellows::testing::recovery::cholesky_reference(1, kGemmN, kGemmTile, kGemmSeed).second
                 : bellows::test::serial_gemm_c(kGemmN, kGemmTile, kGemmSeed);
    const std::vector<double>& c = end.gathered.at(0);
    const bool same = c.size() == expected.size() && std::memcmp(c.data(), expected.data(), c.size() * sizeof(double)) == 0;
    expect(same, std::string(cholesky ? "L" : "C") + " differs from a serial run");
    expect(end.stats.size() == static_cast<std::size_t>(expected_size),
           "rank 0 holds the statistics of " + std::to_string(end.stats.size()) + " ranks, expected " +
               std::to_string(expected_size));
    std::uint64_t executed = 0;
    for (const auto& s : end.stats) executed += s.tasks_executed;
    result["tasks_executed_by_survivors"] = executed;
    result["verified"] = same;
  } else {
    expect(end.gathered.empty() && end.stats.empty(), "a rank other than 0 got what finish() gathers");
  }
  result["recoveries"] = recoveries;
  result["lost"] = lost;
  result["checkpoint_at_end"] = checkpoint_at_end;
  result["rolled_back_to"] = rolled_back_to;
  result["tasks_per_iteration_from_the_roll_back"] = all;
  const int status = bellows::test::write_member_result(dir, old_rank, std::move(result), checks.failures);
  owned_runtime.reset();  // its communicator freed before MPI_Finalize
  watchdog.disarm();
  MPI_Finalize();
  return status;
}

// ------------------------------------------------------------------------------------ launcher

int run_launcher(const std::string& mpiexec, const std::string& self, int victim, const std::string& mode,
                 const std::string& variant) {
  if (victim < -1 || victim >= kRanks) {
    std::fprintf(stderr, "job_end_loss_tests: the victim must be a rank from 0 to %d, or -1 for none, got %d\n",
                 kRanks - 1, victim);
    return 2;
  }
  const bellows::test::LossRun run("job-end-loss", victim, bellows::test::kMostPauseMicroseconds);
  write_file(run.dir / mode, "1");
  if (!variant.empty()) write_file(run.dir / variant, "1");
  return run.to_the_end("job_end_loss", mpiexec, self, kRanks, kLauncherLimitSeconds,
                        {{"mode", mode}, {"variant", variant}}, checks.failures);
}

}  // namespace

// MPI's profiling interface: the gather's victim dies right after it posted its first tile
// transfer of finish(). Every other call goes straight to MPI.
extern "C" int MPI_Isend(const void* buffer, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                         MPI_Request* request) {
  const int posted = PMPI_Isend(buffer, count, datatype, dest, tag, comm, request);
  if (datatype == MPI_DOUBLE && count > 1) die_if_armed();
  return posted;
}

extern "C" int MPI_Irecv(void* buffer, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                         MPI_Request* request) {
  const int posted = PMPI_Irecv(buffer, count, datatype, source, tag, comm, request);
  if (datatype == MPI_DOUBLE && count > 1) die_if_armed();
  return posted;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--member") == 0) return run_member(argv[2], std::atoi(argv[3]));
  const std::string mode = argc >= 5 ? argv[4] : "";
  const std::string variant = argc == 6 ? argv[5] : "";
  if ((argc != 5 && argc != 6) || (mode != "tail" && mode != "gather") ||
      (!variant.empty() && variant != "cholesky" && variant != "teams")) {
    std::fprintf(stderr, "usage: job_end_loss_tests MPIEXEC SELF VICTIM tail|gather [cholesky|teams] | --member DIR INDEX\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2], std::atoi(argv[3]), mode, variant);
}
