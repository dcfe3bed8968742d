// Ranks that leave a running job exit at once, while the job goes on:
// `mpiexec -n 1 leaver_exit_tests` starts rank 0, which grows the job to 3 ranks; a GEMM
// with stealing runs under ElasticJob, and between iterations:
//   before iteration 2: rank 2, one of the job's first ranks, leaves: 3 -> 2;
//   before iteration 3: one rank is added: 2 -> 3;
//   before iteration 4: rank 2, the rank that expand added, leaves: 3 -> 2.
// Both leavers are the highest rank, the case in which the survivors' communicator
// could keep the leavers' connections open (membership.hpp). Right before each shrink
// the ranks gather their pids at rank 0. After the shrink, rank 0 waits, without
// calling MPI, until the leaver's process is gone (or a zombie waiting for hydra's
// proxy), at most kExitLimitSeconds, while the other survivor has gone on into the
// next iteration. A leaver that can only exit once the job ends fails here.
// Also checked: every GEMM task ran exactly once per iteration, and C is bit-identical
// after every iteration. Rank 0 prints one JSON line with "result":"PASS" or "FAIL";
// every process runs under a watchdog.

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/elastic_job.hpp"
#include "spawned_processes.hpp"
#include "elastic_test_main.hpp"
#include "tiled_gemm.hpp"

namespace br = bellows::runtime;
namespace bt = bellows::test;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kChildFlag = "--leaver-exit-child";
constexpr int kN = 288;
constexpr int kTile = 48;
constexpr int kInitialRanks = 3;
constexpr int kIterations = 6;
constexpr int kTasks = (kN / kTile) * (kN / kTile) * (kN / kTile);
constexpr double kExitLimitSeconds = 10.0;

/// Runs iterations first_iteration..kIterations-1 on any rank; returns 0 when everything
/// this rank checked held (rank 0: the whole job).
int run(br::ElasticJob& job, int first_iteration) {
  auto gemm = std::make_unique<bt::TiledGemm>(kN, kTile, kInitialRanks, job.rank(), 7);
  br::RuntimeOptions options;
  options.steal.enabled = true;
  options.steal.chunk = 2;
  br::Runtime runtime(job.communicator(), options);
  job.attach(runtime);
  gemm->attach(runtime);

  int failed = 0;
  std::vector<double> first_c;
  nlohmann::json leavers = nlohmann::json::array();
  for (int it = first_iteration; it < kIterations; ++it) {
    const bool shrink = it == 2 || it == 4;
    std::vector<int> pids(static_cast<std::size_t>(job.size()));
    if (shrink) {
      const int pid = static_cast<int>(::getpid());
      MPI_Gather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, 0, job.communicator());
    }
    if (job.rank() == 0) {
      if (shrink) job.request_shrink({2}, "the highest rank leaves");
      if (it == 3) job.request_expand(1, "one more rank");
    }
    const int rank_before = job.rank();
    const auto outcome = job.apply_pending(it);
    if (outcome == br::ElasticJob::Outcome::left) return 0;  // MPI_Finalize and exit follow
    const auto resized = Clock::now();
    if (shrink && rank_before == 0) {
      // The other survivor is in the next iteration meanwhile.
      const int leaver = pids.at(2);
      const double gone = bellows::testing::wait_gone({leaver}, resized, kExitLimitSeconds);
      const bool survivor_alive = !bellows::testing::process_gone(pids.at(1));
      leavers.push_back({{"before_iteration", it},
                         {"pid", leaver},
                         {"first_rank", it == 2},
                         {"gone_after_shrink_s", gone},
                         {"survivor_alive", survivor_alive}});
      if (gone < 0.0 || !survivor_alive) {
        std::fprintf(stderr,
                     "leaver_exit_tests: FAILED: leaver pid %d (rank 2 before iteration %d) still "
                     "running %.0f s after the shrink\n",
                     leaver, it, kExitLimitSeconds);
        failed = 1;
      }
    }

    const auto executed_before = runtime.stats().tasks_executed;
    job.after_iteration(runtime.run_iteration());
    long long mine = static_cast<long long>(runtime.stats().tasks_executed - executed_before), all = 0;
    MPI_Reduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, 0, job.communicator());
    const auto c = gemm->c.gather_to_root(job.communicator());
    if (job.rank() == 0) {
      if (first_c.empty()) first_c = c;
      const bool exact = c.size() == first_c.size() &&
                         std::memcmp(c.data(), first_c.data(), c.size() * sizeof(double)) == 0;
      if (all != kTasks || !exact) {
        std::fprintf(stderr, "leaver_exit_tests: FAILED: iteration %d ran %lld tasks (expected %d), C %s\n",
                     it, all, kTasks, exact ? "exact" : "differs");
        failed = 1;
      }
    }
  }

  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, job.communicator());
  if (job.rank() == 0) {
    const bool pass = any_failed == 0 && job.size() == 2 && leavers.size() == 2;
    nlohmann::json line{{"test", "leaver_exit"},
                        {"ranks", job.size()},
                        {"leavers", leavers},
                        {"exit_limit_s", kExitLimitSeconds},
                        {"result", pass ? "PASS" : "FAIL"}};
    std::printf("%s\n", line.dump().c_str());
    std::fflush(stdout);
    any_failed = pass ? 0 : 1;
  }
  MPI_Bcast(&any_failed, 1, MPI_INT, 0, job.communicator());
  return any_failed;
}

}  // namespace

int main(int argc, char** argv) {
  return bt::run_elastic_job_test(argc, argv, "leaver_exit_tests", kChildFlag, kInitialRanks, run);
}
