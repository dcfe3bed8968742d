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
//
// Once the plan is applied (`moves`, `checkpoint`), until the checkpoint under its teams is
// complete: the victim SIGKILLs itself right after posting the barrier that starts iteration 2,
// after the plan's tile moves (`moves`: the MPI_Ibarrier after the plan's own), or right after
// posting the first send of that checkpoint, the first MPI_Isend after that barrier
// (`checkpoint`). The survivors meet its death in the moves' barrier or that checkpoint's
// transfers: iteration 2 reports the loss with the plan applied, every survivor gives the plan
// up (the checkpoint under its teams is not complete) and rolls back to the checkpoint after
// iteration 0 under the tiles' owners and teams from before it, never refused, every rank
// rolling back and one iteration redone; the rest is checked as above.
//
// The same around a re-plan (`replan_moves`, `replan_checkpoint`): one team of the three ranks
// (with teams of 2 on 3 ranks the bound on the cut keeps the tiles where they are), stealing
// off, a window of 3 iterations, and from iteration 3 on rank 0 much slower (its tasks sleep
// 1 ms each, about 10 times their work), so that the window of iterations 2 to 4 weighs it
// slow (the median of its seconds), TeamLB plans again before iteration 5 and moves tiles off
// it; the victim dies as above in that re-plan (the one after the second gather), every
// survivor reports the loss in iteration 5 with the re-plan applied, gives it up, and rolls
// every rank back to the checkpoint after iteration 3 under the first plan's tiles and teams.
// BELLOWS_TEST_SEED fixes the pause; the seed is printed with the result.
//
// The launcher passes when the victim's mpiexec reports the kill, every survivor's mpiexec
// exits 0 with a PASS result, and no process it started is left; it prints one JSON line and
// "teams_plan_loss: PASS".
//
//   teams_plan_loss_tests MPIEXEC SELF VICTIM STEP   (the launcher; no MPI; STEP: gather, broadcast,
//                                                     moves, checkpoint, replan_moves, replan_checkpoint)
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
constexpr int kReplanIterations = 7;
constexpr long kReplannedBefore = 5;  // the window of 3 after the first plan: iterations 2 to 4
constexpr int kLoadWindow = 3;
constexpr int kSlowedRank = 0;
constexpr auto kSlowedTaskSleep = std::chrono::microseconds(1000);
constexpr auto kRecoverTimeout = std::chrono::seconds(10);
constexpr double kLauncherLimitSeconds = 60.0;  // below the ctest timeout

/// The plan's step after whose posting the victim dies (the wrappers of MPI's profiling
/// interface below); `none` on the others.
enum class PlanStep { none, gather, broadcast, moves, checkpoint };
std::atomic<PlanStep> die_after_posting{PlanStep::none};
/// The plan whose step kills the victim: 1, the first; 2, the re-plan (the second gather).
std::atomic<int> dying_plan{1};
std::atomic<int> gathers_posted{0};
std::atomic<bool> gather_posted{false};  // the plan's broadcasts come after its gather
std::atomic<int> barriers_after_gather{0};  // the plan's barrier, then the one starting the iteration
std::atomic<bool> slowed{false};            // on the slowed rank, from iteration 3 on

/// The step of a launcher's argument; `none` for an unknown one.
PlanStep step_named(const std::string& step) {
  if (step == "gather") return PlanStep::gather;
  if (step == "broadcast") return PlanStep::broadcast;
  if (step == "moves" || step == "replan_moves") return PlanStep::moves;
  if (step == "checkpoint" || step == "replan_checkpoint") return PlanStep::checkpoint;
  return PlanStep::none;
}

/// Whether the step is one of the re-plan's.
bool at_replan(const std::string& step) { return step.rfind("replan_", 0) == 0; }

/// Whether the plan is applied before the victim dies.
bool plan_applied_at(PlanStep step) { return step == PlanStep::moves || step == PlanStep::checkpoint; }
std::atomic<int> kill_pause_us{0};

void die_if_armed_for(PlanStep step) {
  if (die_after_posting.load() == step && gathers_posted.load() == dying_plan.load()) {
    bt::die_after_pause(kill_pause_us.load());
  }
}

/// The GEMM's tasks, each sleeping kSlowedTaskSleep first once `slowed` is set: a slow rank.
class SlowedGemm final : public br::TaskClass {
 public:
  explicit SlowedGemm(bt::TiledGemm& gemm) : TaskClass(0), gemm_(0, gemm.a, gemm.b, gemm.c) {}

  [[nodiscard]] std::string_view name() const override { return gemm_.name(); }
  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override { gemm_.for_each_task(fn); }
  [[nodiscard]] int owner(const br::TaskKey& key) const override { return gemm_.owner(key); }
  void inputs(const br::TaskKey& key, std::vector<br::InputSource>& out) const override { gemm_.inputs(key, out); }
  void successors(const br::TaskKey& key, int slot, std::vector<br::Successor>& out) const override {
    gemm_.successors(key, slot, out);
  }
  [[nodiscard]] double flops(const br::TaskKey& key) const override { return gemm_.flops(key); }
  [[nodiscard]] std::int64_t priority(const br::TaskKey& key) const override { return gemm_.priority(key); }
  void execute_cpu(const br::TaskKey& key, std::span<br::Tile* const> tiles) const override {
    if (slowed.load()) std::this_thread::sleep_for(kSlowedTaskSleep);
    gemm_.execute_cpu(key, tiles);
  }

 private:
  bellows::examples::GemmTasks gemm_;
};

bellows::test::Checks checks{"teams_plan_loss_tests"};
void expect(bool ok, const std::string& what) { checks.expect(ok, what); }

/// The step the launcher wrote (one of the files gather, broadcast, moves, checkpoint).
std::string read_step(const fs::path& dir) {
  for (const char* step : {"gather", "broadcast", "moves", "checkpoint", "replan_moves", "replan_checkpoint"}) {
    if (fs::exists(dir / step)) return step;
  }
  return "";
}

int run_member(const fs::path& dir, int index) {
  bellows::testing::Watchdog watchdog(std::chrono::seconds(45), "teams plan loss member", index);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  const int victim = read_int(dir / "victim");
  const std::unique_ptr<br::ElasticJob> joined_job = bellows::test::join_fixed_job(dir, index, kRanks);
  br::ElasticJob& job = *joined_job;
  const int rank = job.rank();
  if (rank == victim) {
    kill_pause_us = read_int(dir / "pause_us");
    die_after_posting = step_named(read_step(dir));
  }
  const PlanStep step = step_named(read_step(dir));
  const bool replan = at_replan(read_step(dir));
  dying_plan = replan ? 2 : 1;
  const int iterations = replan ? kReplanIterations : kIterations;
  const long lost_before = replan ? kReplannedBefore : kPlannedBefore;

  bt::TiledGemm gemm(bt::kGemmN, bt::kGemmTile, kRanks, rank, bt::kGemmSeed);
  const std::atomic<bool> never{false};
  // A re-plan in one team of the three ranks: with teams of 2 on 3 ranks, moving tiles off the
  // slowed rank costs more crossing bytes than TeamLB's bound on the cut allows.
  br::RuntimeOptions options = bt::loss_test_options(rank, replan ? kRanks : kTeamSize);
  options.message_log.plan_teams = true;
  if (replan) {
    options.steal.enabled = false;  // the slowed rank keeps its tasks, and its slowness shows
    options.message_log.load_window = kLoadWindow;
  }
  br::Runtime runtime(job.communicator(), options);
  job.attach(runtime);
  if (replan) {
    runtime.add_collection(gemm.a);
    runtime.add_collection(gemm.b);
    runtime.add_collection(gemm.c);
    runtime.add_task_class(std::make_unique<SlowedGemm>(gemm));
  } else {
    bt::add_gemm(runtime, gemm, never, 0);
  }

  nlohmann::json result{{"old_rank", rank}};
  int recoveries = 0;
  long lost_in = -1;
  bool plan_applied_before_recovery = false;
  std::string refusal;
  br::RecoveryReport recovery;
  std::map<long, std::uint64_t> tasks_run;  // iteration -> tasks run here, in its last run here
  bool replanned_before_recovery = false;
  for (int it = 0; it < iterations;) {
    (void)job.apply_pending(it);
    const br::IterationReport report = runtime.run_iteration();
    if (report.completed()) {
      // Slow from iteration 3: the window after the first plan (iterations 2 to 4) weighs it slow.
      if (replan && report.iteration == 2) slowed = rank == kSlowedRank;
      if (report.ran_here()) tasks_run[report.iteration] = report.local.tasks_executed;
      ++it;
      continue;
    }
    lost_in = report.iteration;
    plan_applied_before_recovery = runtime.teams_applied().has_value();
    replanned_before_recovery = plan_applied_before_recovery && runtime.teams_applied()->replanned;
    if (plan_applied_before_recovery) result["tiles_moved_by_plan"] = runtime.teams_applied()->tiles_moved;
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
  expect(lost_in == lost_before, "the loss reported in iteration " + std::to_string(lost_in) + ", expected " +
                                     std::to_string(lost_before) + " (the plan before it)");
  expect(replanned_before_recovery == replan, replan ? "TeamLB did not plan again before the loss"
                                                     : "TeamLB planned again before the loss");
  if (plan_applied_at(step)) {
    // Given up: every rank rolled back to the checkpoint before the plan, one iteration redone.
    expect(plan_applied_before_recovery, "TeamLB's plan was not applied before the loss");
    expect(recovery.iteration == lost_before - 2 && recovery.iterations_redone == 1,
           "rolled back to the checkpoint after iteration " + std::to_string(recovery.iteration) + ", " +
               std::to_string(recovery.iterations_redone) + " iterations redone; expected " +
               std::to_string(lost_before - 2) + " and 1");
    expect(recovery.ranks_rolled_back == std::vector<int>{0, 1, 2},
           "ranks " + bt::rank_set(recovery.ranks_rolled_back) + " rolled back, expected every rank");
  } else {
    expect(!plan_applied_before_recovery, "TeamLB's plan was applied although a rank was lost sharing it");
  }
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
    std::vector<unsigned long long> mine, all(static_cast<std::size_t>(iterations - first_counted + 1), 0);
    for (int i = first_counted; i <= iterations; ++i) mine.push_back(tasks_run.count(i) != 0 ? tasks_run[i] : 0);
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
  return bt::write_member_result(dir, rank, result, checks.failures);
}

int run_launcher(const std::string& mpiexec, const std::string& self, int victim, const std::string& step) {
  if (victim < 0 || victim >= kRanks || step_named(step) == PlanStep::none) {
    std::fprintf(stderr, "teams_plan_loss_tests: the victim must be a rank of %d and the step gather, "
                         "broadcast, moves or checkpoint, got %d and '%s'\n", kRanks, victim, step.c_str());
    return 2;
  }
  const bt::LossRun run("teams-plan-loss", victim, bt::kMostPauseMicroseconds);
  write_file(run.dir / step, "1");
  return run.to_the_end("teams_plan_loss", mpiexec, self, kRanks, kLauncherLimitSeconds, {{"step", step}},
                        checks.failures);
}

}  // namespace

// MPI's profiling interface: the victim dies right after it posted the plan's step its mode
// names. The plan's gather is the runtime's only MPI_Ireduce; its first broadcast after it
// is the plan's length (one MPI_INT64_T). Every other call goes straight to MPI.
extern "C" int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                           MPI_Comm comm, MPI_Request* request) {
  const int posted = PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
  gather_posted = true;
  ++gathers_posted;
  barriers_after_gather = 0;
  die_if_armed_for(PlanStep::gather);
  return posted;
}

extern "C" int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                          MPI_Request* request) {
  const int posted = PMPI_Ibcast(buffer, count, datatype, root, comm, request);
  if (gather_posted.load() && datatype == MPI_INT64_T && count == 1) die_if_armed_for(PlanStep::broadcast);
  return posted;
}

// After the plan's barrier (the first MPI_Ibarrier after its gather), the second starts
// iteration 2 once the plan's tile moves are done; the first MPI_Isend after that is the first
// send of the checkpoint under the plan's teams (the communication thread starts after it).
extern "C" int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  const int posted = PMPI_Ibarrier(comm, request);
  if (gathers_posted.load() > 0 && ++barriers_after_gather == 2) die_if_armed_for(PlanStep::moves);
  return posted;
}

extern "C" int MPI_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                         MPI_Request* request) {
  const int posted = PMPI_Isend(buf, count, datatype, dest, tag, comm, request);
  if (barriers_after_gather.load() >= 2) die_if_armed_for(PlanStep::checkpoint);
  return posted;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--member") == 0) {
    return bt::run_member_under_mpi(run_member, argv[2], std::atoi(argv[3]));
  }
  if (argc != 5) {
    std::fprintf(stderr, "usage: teams_plan_loss_tests MPIEXEC SELF VICTIM gather|broadcast|moves|checkpoint | --member DIR INDEX\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2], std::atoi(argv[3]), argv[4]);
}
