// A rank lost while TeamLB's plan is shared (docs/teams.md, MessageLogOptions::plan_teams):
// three ranks, each the only process of its own mpiexec, joined the way a Bellows job is
// (grow_by_accept / join_by_connect), each on a node of its own for the checkpoints' buddies,
// run a GEMM under ElasticJob with stealing on, a checkpoint at every boundary and team-based
// message logging in teams of 2 ({0, 1} and {2}) that TeamLB plans after the first iteration,
// before iteration 2. The victim SIGKILLs itself in that plan, right after it posted the plan's
// gather (`gather`: its MPI_Ireduce of the seconds measured per tile) or its first broadcast
// (`broadcast`: the MPI_Ibcast of the plan's length), caught through MPI's profiling interface,
// after a pause of 0 to 3 ms. The survivors meet its death in the plan's collectives, which are
// watched as the runtime's others between iterations are: none applies the plan, iteration 2
// reports the loss on every survivor (nothing of a plan in Runtime::teams_applied()), and they
// recover (ElasticJob::recover) as from a loss in an iteration, never refused. Checked on every
// survivor: the lost rank named, the loss in iteration 2, TeamLB planning again on the two
// survivors after the recovery, every iteration from the checkpoint rolled back to on running
// the GEMM's 27 tasks once over the ranks, and at the end C bit-identical to a serial run.
// BELLOWS_TEST_SEED fixes the pause; the seed is printed with the result.
//
// The launcher passes when the victim's mpiexec reports the kill, every survivor's mpiexec
// exits 0 with a PASS result, and no process it started is left; it prints one JSON line and
// "teams_plan_loss: PASS".
//
//   teams_plan_loss_tests MPIEXEC SELF VICTIM gather|broadcast    (the launcher; no MPI)
//   teams_plan_loss_tests --member DIR INDEX                      (under MPIEXEC -n 1)

#include "bellows/runtime/elastic_job.hpp"
#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/runtime.hpp"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "loss_test_gemm.hpp"
#include "separate_worlds.hpp"
#include "tiled_gemm.hpp"
#include "watchdog.hpp"

namespace {

namespace fs = std::filesystem;
namespace br = bellows::runtime;
namespace bt = bellows::test;
using bellows::testing::read_int;
using bellows::testing::write_file;

constexpr int kRanks = 3;
constexpr int kTeamSize = 2;
constexpr int kIterations = 6;
constexpr long kPlannedBefore = 2;  // TeamLB plans after the first iteration since the attach
constexpr auto kRecoverTimeout = std::chrono::seconds(10);
constexpr double kLauncherLimitSeconds = 60.0;  // below the ctest timeout

/// The plan's step after whose posting the victim dies (the wrappers of MPI's profiling
/// interface below); `none` on the others.
enum class PlanStep { none, gather, broadcast };
std::atomic<PlanStep> die_after_posting{PlanStep::none};
std::atomic<bool> gather_posted{false};  // the plan's broadcasts come after its gather
std::atomic<int> kill_pause_us{0};

void die_if_armed_for(PlanStep step) {
  if (die_after_posting.load() == step) bt::die_after_pause(kill_pause_us.load());
}

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "teams_plan_loss_tests: FAILED: %s\n", what.c_str());
  }
}

int run_member(const fs::path& dir, int index) {
  bellows::testing::Watchdog watchdog(std::chrono::seconds(45), "teams plan loss member", index);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  const int victim = read_int(dir / "victim");
  MPI_Comm joined = bellows::testing::join_member_worlds(dir, index, kRanks);
  br::ElasticJob job(br::Membership(joined),
                     br::ElasticJob::Grow([](br::Membership&, int, int, std::uint64_t) -> const br::GrowReport& {
                       throw std::logic_error("this test does not grow");
                     }));
  MPI_Comm_free(&joined);
  const int rank = job.rank();
  write_file(dir / ("pid." + std::to_string(index)), std::to_string(::getpid()));
  write_file(dir / ("rank." + std::to_string(index)), std::to_string(rank));
  if (rank == victim) {
    kill_pause_us = read_int(dir / "pause_us");
    die_after_posting = fs::exists(dir / "gather") ? PlanStep::gather : PlanStep::broadcast;
  }

  bt::TiledGemm gemm(bt::kGemmN, bt::kGemmTile, kRanks, rank, bt::kGemmSeed);
  const std::atomic<bool> never{false};
  br::RuntimeOptions options = bt::loss_test_options(rank, kTeamSize);
  options.message_log.plan_teams = true;
  br::Runtime runtime(job.communicator(), options);
  job.attach(runtime);
  bt::add_gemm(runtime, gemm, never, 0);

  nlohmann::json result{{"old_rank", rank}};
  int recoveries = 0;
  long lost_in = -1;
  bool plan_applied_before_recovery = false;
  std::string refusal;
  br::RecoveryReport recovery;
  std::map<long, std::uint64_t> tasks_run;  // iteration -> tasks run here, in its last run here
  for (int it = 0; it < kIterations;) {
    (void)job.apply_pending(it);
    const br::IterationReport report = runtime.run_iteration();
    if (report.completed()) {
      if (report.ran_here()) tasks_run[report.iteration] = report.local.tasks_executed;
      ++it;
      continue;
    }
    lost_in = report.iteration;
    plan_applied_before_recovery = runtime.teams_applied().has_value();
    try {
      recovery = job.recover(report, kRecoverTimeout);
    } catch (const std::exception& e) {
      refusal = e.what();
      break;
    }
    ++recoveries;
    // The runtime counts its iterations from 1; the loop resumes after the checkpoint's.
    it -= static_cast<int>(report.iteration - 1 - recovery.iteration);
  }

  expect(refusal.empty(), "refused: " + refusal);
  expect(recoveries == 1, "recovered " + std::to_string(recoveries) + " times");
  expect(lost_in == kPlannedBefore, "the loss reported in iteration " + std::to_string(lost_in) + ", expected " +
                                        std::to_string(kPlannedBefore) + " (the plan before it)");
  expect(!plan_applied_before_recovery, "TeamLB's plan was applied although a rank was lost sharing it");
  expect(recovery.lost == std::vector<int>{victim}, "lost " + bt::rank_set(recovery.lost));
  expect(job.size() == kRanks - 1, "the job has " + std::to_string(job.size()) + " ranks");
  // The runtime counts its iterations again from the checkpoint rolled back to, and TeamLB
  // plans after the first iteration it completes on the survivors.
  const auto applied = runtime.teams_applied();
  expect(applied && applied->before_iteration > recovery.iteration + 1 && applied->rank_team.size() == kRanks - 1,
         "TeamLB did not plan again on the survivors after the recovery");
  if (refusal.empty()) {
    // Every task of every iteration from the checkpoint rolled back to on ran once over the ranks.
    const int first_counted = static_cast<int>(recovery.iteration) + 1;
    std::vector<unsigned long long> mine, all(static_cast<std::size_t>(kIterations - first_counted + 1), 0);
    for (int i = first_counted; i <= kIterations; ++i) mine.push_back(tasks_run.count(i) != 0 ? tasks_run[i] : 0);
    MPI_Allreduce(mine.data(), all.data(), static_cast<int>(mine.size()), MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                  job.communicator());
    for (std::size_t i = 0; i < all.size(); ++i) {
      expect(all[i] == bt::kGemmTasks, "iteration " + std::to_string(first_counted + static_cast<int>(i)) +
                                               " ran " + std::to_string(all[i]) + " tasks over the ranks");
    }
    const std::vector<double> c = gemm.c.gather_to_root(job.communicator());
    if (job.rank() == 0) {
      const std::vector<double> expected = bt::serial_gemm_c(bt::kGemmN, bt::kGemmTile, bt::kGemmSeed);
      const bool same = c.size() == expected.size() && std::memcmp(c.data(), expected.data(), c.size() * sizeof(double)) == 0;
      expect(same, "C differs from a serial run");
      result["verified"] = same;
    }
    result["rolled_back_to"] = recovery.iteration;
    result["ranks_rolled_back"] = recovery.ranks_rolled_back;
    result["rolled_back_globally_because"] = recovery.rolled_back_globally_because;
    result["recovery_seconds"] = recovery.seconds;
    result["planned_again_before"] = applied ? applied->before_iteration : -1;
  }
  result["lost_in_iteration"] = lost_in;
  watchdog.disarm();
  return bt::write_member_result(dir, rank, result, failures);
}

int finalize_member(const fs::path& dir, int index) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  const int status = run_member(dir, index);
  MPI_Finalize();
  return status;
}

int run_launcher(const std::string& mpiexec, const std::string& self, int victim, const std::string& step) {
  if (victim < 0 || victim >= kRanks || (step != "gather" && step != "broadcast")) {
    std::fprintf(stderr, "teams_plan_loss_tests: the victim must be a rank of %d and the step gather or "
                         "broadcast, got %d and '%s'\n", kRanks, victim, step.c_str());
    return 2;
  }
  const bt::LossRun run("teams-plan-loss", victim, bt::kMostPauseMicroseconds);
  write_file(run.dir / step, "1");
  return run.to_the_end("teams_plan_loss", mpiexec, self, kRanks, kLauncherLimitSeconds, {{"step", step}}, failures);
}

}  // namespace

// MPI's profiling interface: the victim dies right after it posted the plan's step its mode
// names. The plan's gather is the runtime's only MPI_Ireduce; its first broadcast after it
// is the plan's length (one MPI_INT64_T). Every other call goes straight to MPI.
extern "C" int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                           MPI_Comm comm, MPI_Request* request) {
  const int posted = PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
  gather_posted = true;
  die_if_armed_for(PlanStep::gather);
  return posted;
}

extern "C" int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                          MPI_Request* request) {
  const int posted = PMPI_Ibcast(buffer, count, datatype, root, comm, request);
  if (gather_posted.load() && datatype == MPI_INT64_T && count == 1) die_if_armed_for(PlanStep::broadcast);
  return posted;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--member") == 0) return finalize_member(argv[2], std::atoi(argv[3]));
  if (argc != 5) {
    std::fprintf(stderr, "usage: teams_plan_loss_tests MPIEXEC SELF VICTIM gather|broadcast | --member DIR INDEX\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2], std::atoi(argv[3]), argv[4]);
}
