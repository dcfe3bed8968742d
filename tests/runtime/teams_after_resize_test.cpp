// Teams after a grow or a shrink (docs/teams.md, issue 34): three ranks, each the only process of its own
// mpiexec, joined the way a Bellows job is (grow_by_accept / join_by_connect), each on a node
// of its own for the checkpoints' buddies, run a GEMM under ElasticJob with stealing on, a
// checkpoint at every boundary and team-based message logging in teams of 2 consecutive ranks:
// teams {0, 1} and {2}. Before iteration kExpandAt the first rank asks for an expand by one,
// and a fourth process joins (grow_by_accept on the job's port) as rank 3. The teams are then
// made anew for 4 ranks, {0, 1} and {2, 3}: every rank reads the same teams
// (Runtime::teams()), each rank's buddy is its team mate (on another node), and the logs hold
// bytes again under them (after the second iteration under the new teams, summed).
// The victim (rank 1, from before the expand, or rank 3, the one that joined) then SIGKILLs
// itself in the first task it runs of iteration kKillAt, a few iterations after the expand:
// only its team rolls back (its buddy is its team mate), the other team keeps its state and
// feeds the replay from its log. Checked on every survivor: the lost rank named, the ranks and
// teams rolled back, no reason for a global roll-back, the iterations the team re-ran alone
// (IterationReport::replaying_ranks) in which the ranks that kept their state ran no task, the
// tasks re-run (RankStats::tasks_rerun) 0 on those ranks and, summed, the tasks the team ran
// in the iterations replayed (stealing stays inside the teams: its own tasks and the lost
// rank's), bytes served from their logs (bytes_replayed) only by them and only when an
// iteration was redone; every iteration from the checkpoint rolled back to on ran the GEMM's
// 27 tasks once over the ranks (the replayed ones: the team's again, the other team's from
// before the loss); at the end C bit-identical to a serial run. With VICTIM -1 nobody is
// killed: the teams after the expand alone, every iteration from it on 27 tasks.
// With `shrink` four ranks start, in teams {0, 1} and {2, 3}, and rank 3 is asked to leave
// before iteration kExpandAt instead: the teams are then {0, 1} and {2} (rank 2's buddy of the
// other team, rank 0's and 1's each other), and rank 1 (VICTIM 1) killed as above rolls back
// {0, 1} only, rank 2 keeping its state; the leaver exits 0.
// With `cholesky` the job is the Cholesky factorization instead (4 x 4 tiles of the lower
// triangle, 20 tasks per iteration, A changed after each iteration as recovery_test.cpp's
// Cholesky job does), whose logs hold task outputs sent between the teams, to and from the
// joined rank 3: the ranks that keep their state send them again as activations to the
// ranks re-running the window. A checkpoint every 3 iterations (the one after the expand,
// then after iteration 5), and the victim armed from iteration 7 on until a task of its runs:
// the roll-back goes to the checkpoint after iteration 5 and redoes at least one iteration,
// which the test insists on. The bytes the ranks that kept their state served, summed, are
// those the task graph after the expand predicts (replay_prediction.hpp), and A and L are
// bit-identical to a serial run.
// With `pinned` the expand does not re-grid (RuntimeOptions::rebalance_on_resize off): the
// joined rank 3 owns no tile and gets its work by stealing from its team mate 2 only, and what
// it steals is pinned to it from then on (Runtime::pinned(), the same table on every rank).
// Every task lasts at least 1 ms and any task a victim can spare goes (no cost rule), so that
// rank 3 steals; Cholesky's tiles are smaller (6 x 6 tiles, 56 tasks per iteration). Checked:
// tasks were pinned to rank 3 before the loss (counted, and printed in the result), then the
// team roll-back as above. With `cholesky` the outputs predicted are those of the task graph
// with the pinned tasks on rank 3 as the last iteration before the loss left them: the outputs
// of rank 3's tasks that team {0, 1} takes are served from rank 3's log (VICTIM 1), and those
// team {0, 1} sends to rank 3's tasks go, once it is lost, to the owner of their tiles, rank 2
// (VICTIM 3); at least one output served again is of a pinned task or to one (counted).
// With `pinned teams_of1` the teams are of 1 rank ({0}, {1}, {2}, {3}), where a joined rank
// can steal only across the teams (steal_across_teams on): every rank then rolls back, the
// decision's reason "stealing crosses teams (steal_across_teams)", every task of the iterations
// redone re-run once over the survivors, nothing served from a log, the result as above.
// With `pinned first_iteration` the victim is armed in the first iteration after the expand
// (iteration 3) instead, whose steals are pinned only after it: rank 3 owns no tile, so every
// task it runs there is a steal from rank 2, which holds its first task there until rank 3 has
// run one (rank 3 writes DIR/joined_ran_a_task.3; at most kHoldForTheThief), so that its other
// ready tasks queue up for the thief; rank 1 (VICTIM 1) dies in the first task it starts
// there once rank 3 has run one (GEMM's rank 1 holds its first task for it as rank 2 does:
// otherwise it ran all its tasks before rank 3's first in 1 of about 10 runs). The loss
// then comes with the expand still under way (its checkpoint complete, no iteration completed
// since): every rank rolls back to the checkpoint the expand required, with the decision's
// reason "a resize is under way", no iteration is redone (nothing served from a log, no task
// counted as re-run), the interrupted iteration runs again on the three survivors, nothing the
// joined rank stole in it is pinned (Runtime::pinned() empty after the recovery and at the
// end: rank 3 lost, no joined rank is left; rank 1 lost, the joined rank is a team of one on 3
// ranks and steals from nobody), every task once per iteration from iteration 3 on, the result
// bit-identical to a serial run. Checked: the loss reported in iteration 3, the joined rank's
// tasks run there (rank 1 lost: counted by it, at least one; rank 3 lost: it died in one).
// With `pinned two_joined` the expand adds two processes, ranks 3 and 4, and the teams of the
// 5 ranks are a plan's (MessageLogOptions::rank_team {0, 1, 2, 0, 1}): {0, 3}, {1, 4} and {2},
// so that each joined rank has an old rank of its team to steal from (0 and 1) and a buddy in
// it (before the expand, on 3 ranks, the plan gives consecutive teams of 2, as above). Checked:
// tasks pinned to each joined rank before the loss; the joined rank 4 (VICTIM 4) killed in
// iteration 7 rolls back its team {1, 4} only, ranks 0, 2 and the other joined rank 3 keeping
// their state, the rest as above (with `cholesky`, the outputs served again as predicted).
// With GEMM, ranks 0 and 1 hold their first task of iteration 3 until their joined team mate
// has run one, as rank 2 does above (without it, rank 3 had nothing pinned in 1 of 12 runs).
// BELLOWS_TEST_SEED fixes the pause before the kill; the seed is printed with the result.
//
// The launcher passes when the victim's mpiexec reports the kill, every survivor's mpiexec
// exits 0 with a PASS result, and no process it started is left; it prints one JSON line and
// "teams_after_resize: PASS".
//
//   teams_after_resize_tests MPIEXEC SELF VICTIM [shrink|cholesky] [pinned [teams_of1|first_iteration|two_joined]]
//                                                                           (the launcher)
//   teams_after_resize_tests --member DIR INDEX      (under MPIEXEC -n 1)

#include "bellows/runtime/elastic_job.hpp"
#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/runtime.hpp"

#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/kernels/tile_kernels.hpp"
#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"
#include "killing_tasks.hpp"
#include "loss_test_gemm.hpp"
#include "recovery_references.hpp"
#include "replay_prediction.hpp"
#include "separate_worlds.hpp"
#include "spawned_processes.hpp"
#include "tiled_gemm.hpp"
#include "watchdog.hpp"

namespace {

namespace fs = std::filesystem;
namespace br = bellows::runtime;
using bellows::test::kGemmN;
using bellows::test::kGemmSeed;
using bellows::test::kGemmTasks;
using bellows::test::kGemmTile;
using bellows::test::kMostPauseMicroseconds;
using bellows::test::rank_set;
using bellows::test::SurvivorResults;
using Clock = std::chrono::steady_clock;
using bellows::testing::read_file;
using bellows::testing::read_int;
using bellows::testing::write_file;

constexpr int kRanks = 3;            // before the expand
constexpr int kJoiner = kRanks;      // the process index (and rank) the expand adds
// With `two_joined`: the teams of the 5 ranks after an expand by two, each joined rank with an
// old rank.
const std::vector<int> kTwoJoinedTeams{0, 1, 2, 0, 1};
constexpr int kShrinkFrom = 4;       // with `shrink`: the ranks before it, rank 3 leaving
constexpr int kLeaver = 3;
constexpr int kTeamSize = 2;
// With `cholesky`: recovery_test.cpp's Cholesky job (recovery_references.hpp), 4 x 4 tiles.
constexpr int kCholeskyTasksPerIteration = 20;  // 4 POTRF, 6 TRSM, 6 SYRK, 4 GEMM
constexpr int kCholeskyCheckpointEvery = 3;
// With `pinned`, Cholesky's tiles are smaller (6 x 6 of them, 56 tasks per iteration) and each
// task (GEMM's too) lasts at least kPinnedTaskMicroseconds, so that rank 2 has two or more ready
// tasks queued while it runs one (a victim keeps one, StealPolicy::tasks_kept) and rank 3 has
// some to steal (without the pause, GEMM's rank 3 stole nothing in some runs).
constexpr int kPinnedCholeskyTile = 64;
constexpr int kPinnedCholeskyTasksPerIteration = 56;  // 6 POTRF, 15 TRSM, 15 SYRK, 20 GEMM
constexpr int kPinnedTaskMicroseconds = 1000;
constexpr int kIterations = 10;
constexpr int kExpandAt = 2;         // the expand is carried out before loop iteration 2 (iteration 3)
constexpr int kKillAt = 6;           // the victim dies in loop iteration 6 (iteration 7)
constexpr auto kRecoverTimeout = std::chrono::seconds(10);
// With `first_iteration` and `two_joined`: how long an old rank holds its first task of
// iteration 3 at most, until the joined rank of its team has run one, so that its other ready
// tasks queue up for the thief (without the hold, the joined rank stole nothing in that
// iteration in 1 of about 10 GEMM runs).
constexpr auto kHoldForTheThief = std::chrono::seconds(2);
constexpr double kLauncherLimitSeconds = 60.0;  // below the ctest timeout

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "teams_after_resize_tests: FAILED: %s\n", what.c_str());
  }
}

/// C as a run without failure computes it.
std::vector<double> reference_c() { return bellows::test::serial_gemm_c(kGemmN, kGemmTile, kGemmSeed); }

/// Sums `mine` over the job's ranks.
std::vector<unsigned long long> summed(std::vector<unsigned long long> mine, MPI_Comm comm) {
  std::vector<unsigned long long> all(mine.size(), 0);
  MPI_Allreduce(mine.data(), all.data(), static_cast<int>(mine.size()), MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
  return all;
}

int run_member(const fs::path& dir, int index) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(45), "teams after resize member", index);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  const int victim = read_int(dir / "victim");
  const int pause_us = read_int(dir / "pause_us");
  const bool shrink = fs::exists(dir / "shrink");
  const bool cholesky = fs::exists(dir / "cholesky");
  const bool pinned = fs::exists(dir / "pinned");
  const bool teams_of1 = fs::exists(dir / "teams_of1");
  const bool first_iteration = fs::exists(dir / "first_iteration");  // the loss in iteration kExpandAt + 1
  const bool two_joined = fs::exists(dir / "two_joined");            // the expand adds two processes
  const int joining = two_joined ? 2 : 1;
  const int first_ranks = shrink ? kShrinkFrom : kRanks;
  const bool joiner = !shrink && index >= kJoiner;
  std::vector<int> payload;
  // The joiner connects once the expand is carried out (the first rank says so).
  auto membership = bellows::testing::join_member_job(dir, index, first_ranks, payload, joiner ? dir / "expand" : fs::path());
  const int old_rank = membership.rank();
  write_file(dir / ("pid." + std::to_string(index)), std::to_string(::getpid()));
  write_file(dir / ("rank." + std::to_string(index)), std::to_string(old_rank));
  const int joined_at = joiner ? payload.at(0) : -1;
  br::ElasticJob job(
      std::move(membership),
      br::ElasticJob::Grow([&](br::Membership& m, int count, int join_iteration, std::uint64_t) -> const br::GrowReport& {
        if (m.rank() == 0) write_file(dir / "expand", "1");
        const std::array<int, 1> join{join_iteration};
        return m.grow_by_accept(count, read_file(dir / "port"), join);
      }),
      joined_at);
  int refused = 0;
  std::string refusal;
  job.on_resize_refused([&](const br::ResizeEvent& e) {
    ++refused;
    refusal = e.reason;
  });

  std::atomic<bool> kill_in_next_task{false};
  // With `first_iteration` and `two_joined`: the tasks a joined rank runs in the first
  // iteration after the expand (all stolen: it owns no tile and nothing is pinned yet; the
  // first writes DIR/joined_ran_a_task.RANK), and the waits for one (kHoldForTheThief).
  const auto joined_ran_a_task = [&](int rank) { return dir / ("joined_ran_a_task." + std::to_string(rank)); };
  std::atomic<int> counting_as_joined_rank{-1};
  std::atomic<long> joined_tasks_in_first_iteration{0};
  std::atomic<int> holding_for_rank{-1};
  bellows::test::KillingHooks hooks;
  if (first_iteration || two_joined) {
    hooks.on_run = [&] {
      const int joined = counting_as_joined_rank.load();
      if (joined >= 0 && joined_tasks_in_first_iteration.fetch_add(1) == 0) write_file(joined_ran_a_task(joined), "1");
      if (const int thief = holding_for_rank.exchange(-1); thief >= 0) {
        const auto give_up = Clock::now() + kHoldForTheThief;
        while (!fs::exists(joined_ran_a_task(thief)) && Clock::now() < give_up) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
    };
    if (first_iteration && victim == 1) hooks.may_kill = [&] { return fs::exists(joined_ran_a_task(kJoiner)); };
  }
  bellows::test::TiledGemm gemm(kGemmN, kGemmTile, first_ranks, old_rank, kGemmSeed);
  // The Cholesky job's A and L (lower tiles), and its task graph as the tiles lie (the tasks
  // the runtime runs are the same, wrapped to kill).
  const br::TiledMatrix::TileFilter lower = [](int m, int k) { return m >= k; };
  const int cholesky_tile = pinned ? kPinnedCholeskyTile : bellows::testing::recovery::kTile;
  const int cholesky_n = cholesky ? bellows::testing::recovery::kN : cholesky_tile;
  const auto first_grid = br::BlockCyclic2D::square_for(first_ranks);
  br::TiledMatrix cholesky_a(0, cholesky_n, cholesky_n, cholesky_tile, first_grid, old_rank, lower);
  br::TiledMatrix cholesky_l(1, cholesky_n, cholesky_n, cholesky_tile, first_grid, old_rank, lower);
  if (cholesky) bellows::examples::fill_spd(cholesky_a, bellows::testing::recovery::kSeed);
  const auto cholesky_graph = bellows::examples::make_cholesky_tasks(cholesky_a, cholesky_l);
  const int tasks_per_iteration =
      cholesky ? (pinned ? kPinnedCholeskyTasksPerIteration : kCholeskyTasksPerIteration) : kGemmTasks;
  auto options = bellows::test::loss_test_options(old_rank, teams_of1 ? 1 : kTeamSize);
  // A team of one has no one to steal from inside it.
  options.message_log.steal_across_teams = teams_of1;
  options.checkpoint.every_iterations = cholesky ? kCholeskyCheckpointEvery : 1;
  options.rebalance_on_resize = !pinned;
  if (two_joined) options.message_log.rank_team = kTwoJoinedTeams;
  // Any task a victim can spare goes (no cost rule, as in John & Milthorpe): with the rule,
  // rank 3 stole nothing in either job.
  if (pinned) options.steal.cost_rule = false;
  br::Runtime runtime(job.communicator(), options);
  job.attach(runtime);
  if (cholesky) {
    runtime.add_collection(cholesky_a);
    runtime.add_collection(cholesky_l);
    for (auto& tasks : bellows::test::killing(bellows::examples::make_cholesky_tasks(cholesky_a, cholesky_l),
                                              kill_in_next_task, pause_us,
                                              pinned ? kPinnedTaskMicroseconds : 0, hooks)) {
      runtime.add_task_class(std::move(tasks));
    }
  } else if (pinned) {
    // Each task lasts at least kPinnedTaskMicroseconds, as Cholesky's, so that rank 3 steals.
    runtime.add_collection(gemm.a);
    runtime.add_collection(gemm.b);
    runtime.add_collection(gemm.c);
    std::vector<std::unique_ptr<br::TaskClass>> gemm_tasks;
    gemm_tasks.push_back(std::make_unique<bellows::examples::GemmTasks>(0, gemm.a, gemm.b, gemm.c));
    for (auto& tasks :
         bellows::test::killing(std::move(gemm_tasks), kill_in_next_task, pause_us, kPinnedTaskMicroseconds, hooks)) {
      runtime.add_task_class(std::move(tasks));
    }
  } else {
    bellows::test::add_gemm(runtime, gemm, kill_in_next_task, pause_us);
  }

  nlohmann::json result{{"old_rank", old_rank}};
  int recoveries = 0, resized = 0;
  br::RecoveryReport recovery;
  std::vector<int> teams_after_resize, buddies_after_resize;
  std::vector<bellows::testing::recovery::OutputTakers> outputs_after_resize;  // Cholesky's task graph then
  std::vector<bellows::testing::recovery::OutputTakers> outputs_before_loss;   // ... after the last iteration before it
  std::size_t pinned_before_loss = 0;      // tasks pinned to new ranks then (the same on every rank)
  std::map<int, std::size_t> pinned_to_rank_before_loss;  // ... to each of them
  std::map<long, std::uint64_t> tasks_run;        // iteration -> tasks run here, in its last run here
  std::map<long, std::uint64_t> log_bytes_held;   // iteration -> bytes the log held after it
  std::vector<long> replayed_iterations;          // the iterations the rolled-back team re-ran alone
  std::uint64_t tasks_run_in_replay = 0;          // tasks this rank ran in those
  long loss_iteration = -1;                       // the iteration that reported the loss
  long joined_tasks_before_loss = 0;              // first_iteration: the joined rank's, in it
  std::size_t pinned_after_recovery = 0;
  for (int it = joiner ? joined_at : 0; it < kIterations;) {
    if (old_rank == 0 && it == kExpandAt && resized == 0) {
      if (shrink) {
        job.request_shrink({kLeaver}, "the test's shrink", 0);
      } else {
        job.request_expand(joining, "the test's expand", 0);
      }
    }
    const br::ElasticJob::Outcome outcome = job.apply_pending(it);
    if (outcome == br::ElasticJob::Outcome::left) {  // the leaver of `shrink`
      result["left"] = true;
      result["result"] = failures == 0 ? "PASS" : "FAIL";
      write_file(dir / ("result." + std::to_string(old_rank)), result.dump());
      watchdog.disarm();
      return failures == 0 ? 0 : 1;
    }
    if (outcome == br::ElasticJob::Outcome::resized) ++resized;
    // The Cholesky victim runs few tasks, which its team mate may steal: armed until one runs.
    // With `first_iteration`, in the first iteration after the expand only.
    const int kill_at = first_iteration ? kExpandAt : kKillAt;
    kill_in_next_task =
        job.rank() == victim && (cholesky && !first_iteration ? it >= kill_at : it == kill_at) && recoveries == 0;
    // In the first iteration after the expand, an old rank holds its first task until the
    // joined rank of its team (its thief) has run one: `first_iteration`'s rank 2, and GEMM's
    // rank 1 when it is to die there; `two_joined`'s ranks 0 and 1 with GEMM (a GEMM task
    // holds up no other rank's task; Cholesky's rank 0 or 1 would hold up the tasks a thief
    // could take).
    const bool first_after_expand = it == kExpandAt && recoveries == 0;
    counting_as_joined_rank = first_after_expand && job.rank() >= kJoiner ? job.rank() : -1;
    int thief = -1;
    if (first_after_expand && first_iteration) {
      thief = job.rank() == kJoiner - 1 || (job.rank() == victim && victim == 1 && !cholesky) ? kJoiner : -1;
    } else if (first_after_expand && two_joined && !cholesky && job.rank() < kJoiner) {
      const auto mate = std::find(kTwoJoinedTeams.begin() + kJoiner, kTwoJoinedTeams.end(),
                                  kTwoJoinedTeams[static_cast<std::size_t>(job.rank())]);
      thief = mate != kTwoJoinedTeams.end() ? static_cast<int>(mate - kTwoJoinedTeams.begin()) : -1;
    }
    holding_for_rank = thief;
    const br::IterationReport report = runtime.run_iteration();
    if (report.completed()) {
      if (report.iteration == kExpandAt + 2 && recoveries == 0) {
        // Under the teams made for the grown job, with their first checkpoint complete.
        teams_after_resize = runtime.teams();
        buddies_after_resize = runtime.checkpoint_buddies();
        outputs_after_resize = bellows::testing::recovery::output_takers(
            cholesky_graph, [&](const br::TileIndex& t) { return cholesky_l.owner(t.m, t.n); });
      }
      if (!report.replaying_ranks.empty()) {
        replayed_iterations.push_back(report.iteration);
        if (report.ran_here()) tasks_run_in_replay += report.local.tasks_executed;
        expect(report.ran_here() || report.local.tasks_executed == 0,
               "rank " + std::to_string(job.rank()) + " kept its state but ran " +
                   std::to_string(report.local.tasks_executed) + " tasks in iteration " +
                   std::to_string(report.iteration));
      }
      if (report.ran_here()) tasks_run[report.iteration] = report.local.tasks_executed;
      if (recoveries == 0) {
        log_bytes_held[report.iteration] = report.local.message_log.bytes_held;
        // The replay sends outputs to the consumers' ranks as they are at the loss, pinned
        // tasks included (the table grows after every iteration with the new ranks' steals).
        pinned_before_loss = runtime.pinned().size();
        pinned_to_rank_before_loss.clear();
        for (const auto& [key, rank] : runtime.pinned()) ++pinned_to_rank_before_loss[rank];
        if (cholesky && report.iteration > kExpandAt + 2) {
          outputs_before_loss = bellows::testing::recovery::output_takers(
              cholesky_graph, [&](const br::TileIndex& t) { return cholesky_l.owner(t.m, t.n); }, runtime.pinned());
        }
      }
      // As recovery_test.cpp's Cholesky job: a rank that kept its state leaves its tiles.
      if (cholesky && report.ran_here()) {
        bellows::testing::recovery::evolve(cholesky_a, it, bellows::testing::recovery::Job::cholesky);
      }
      ++it;
      continue;
    }
    loss_iteration = report.iteration;
    if (first_iteration && report.iteration == kExpandAt + 1) {
      // The teams and buddies of the grown job: its first checkpoint was complete before the
      // iteration's tasks, which no rank completed.
      teams_after_resize = runtime.teams();
      buddies_after_resize = runtime.checkpoint_buddies();
      joined_tasks_before_loss = joined_tasks_in_first_iteration.load();
    }
    counting_as_joined_rank = -1;
    recovery = job.recover(report, kRecoverTimeout);
    ++recoveries;
    pinned_after_recovery = runtime.pinned().size();
    // The runtime counts its iterations from 1; the loop resumes after the checkpoint's.
    it -= report.iteration - 1 - static_cast<int>(recovery.iteration);
  }

  expect(refused == 0, std::to_string(refused) + " resizes refused, the last with \"" + refusal + "\"");
  expect(resized == (joiner ? 0 : 1), "carried out " + std::to_string(resized) + " resizes, expected " +
                                          (joiner ? "none (it joined through the expand)" : "the resize"));
  // After a shrink to 3 ranks, rank 2 is a team of one, whose buddy is of the other team.
  const std::vector<int> expected_teams = shrink       ? std::vector<int>{0, 0, 1}
                                          : teams_of1  ? std::vector<int>{0, 1, 2, 3}
                                          : two_joined ? kTwoJoinedTeams
                                                       : std::vector<int>{0, 0, 1, 1};
  expect(teams_after_resize == expected_teams, "teams after the resize " + rank_set(teams_after_resize) +
                                                   " (per rank), expected " + rank_set(expected_teams));
  const std::vector<int>& buddy = buddies_after_resize;
  const bool buddies_as_expected =
      shrink       ? buddy.size() == 3 && buddy[0] == 1 && buddy[1] == 0 && (buddy[2] == 0 || buddy[2] == 1)
      : teams_of1  ? buddy.size() == 4 && buddy[0] != 0 && buddy[1] != 1 && buddy[2] != 2 && buddy[3] != 3
      : two_joined ? buddy.size() == 5 && buddy[0] == 3 && buddy[1] == 4 && buddy[2] != 2 && buddy[3] == 0 &&
                         buddy[4] == 1
                   : buddy == std::vector<int>{1, 0, 3, 2};
  expect(buddies_as_expected, "buddies after the resize " + rank_set(buddies_after_resize) + " (per rank), expected " +
                                  (shrink       ? "{1, 0, 0 or 1}"
                                   : teams_of1  ? "another rank each"
                                   : two_joined ? "{3, 4, another rank, 0, 1}"
                                                : "{1, 0, 3, 2}"));
  // The iterations under the new teams log what crosses them (none completed under them when
  // the loss came in the first).
  const std::uint64_t held_after_expand = log_bytes_held.count(kExpandAt + 2) != 0 ? log_bytes_held[kExpandAt + 2] : 0;
  const auto held_by_survivors = summed({held_after_expand}, job.communicator());
  if (!first_iteration) {
    expect(held_by_survivors[0] > 0, "no survivor's log held a byte after iteration " +
                                         std::to_string(kExpandAt + 2) + " under the teams of the grown job");
  }
  result["log_bytes_held_after_the_expand"] = held_after_expand;

  // Without the re-grid the joined rank owns nothing and what it stole is pinned to it, after
  // the iteration it stole in.
  if (first_iteration) {
    expect(loss_iteration == kExpandAt + 1, "the loss came in iteration " + std::to_string(loss_iteration) +
                                                ", expected the first after the expand, " +
                                                std::to_string(kExpandAt + 1));
    // Rank 3 lost: it died in a task it ran there, a stolen one. Rank 1 lost: counted by rank 3.
    const auto joined_tasks = summed({static_cast<unsigned long long>(joined_tasks_before_loss)}, job.communicator());
    if (victim == 1) {
      expect(joined_tasks[0] > 0, "the joined rank ran no task in iteration " + std::to_string(kExpandAt + 1) +
                                      " before the loss");
    }
    result["tasks_the_joined_rank_ran_before_the_loss"] = joined_tasks[0];
    expect(pinned_before_loss == 0 && pinned_after_recovery == 0 && runtime.pinned().empty(),
           "tasks pinned: " + std::to_string(pinned_before_loss) + " before the loss, " +
               std::to_string(pinned_after_recovery) + " after the recovery, " +
               std::to_string(runtime.pinned().size()) + " at the end, expected none (the joined rank's steals " +
               "of the interrupted iteration are not pinned, and no joined rank steals after it)");
    result["tasks_pinned_at_the_end"] = runtime.pinned().size();
  } else if (pinned) {
    expect(pinned_before_loss > 0, "no task was pinned to the joined rank before the loss");
    for (int joined = kJoiner; two_joined && joined < kJoiner + joining; ++joined) {
      const std::size_t to_it = pinned_to_rank_before_loss.count(joined) != 0 ? pinned_to_rank_before_loss[joined] : 0;
      expect(to_it > 0, "no task was pinned to the joined rank " + std::to_string(joined) + " before the loss");
      result["tasks_pinned_to_rank_" + std::to_string(joined) + "_before_the_loss"] = to_it;
    }
  } else {
    expect(pinned_before_loss == 0, std::to_string(pinned_before_loss) + " tasks pinned with the re-grid on");
  }
  result["tasks_pinned_before_the_loss"] = pinned_before_loss;

  const bool no_victim = victim < 0;
  expect(recoveries == (no_victim ? 0 : 1), "recovered " + std::to_string(recoveries) + " times");
  const int expected_size = (shrink ? kShrinkFrom - 1 : kRanks + joining) - (no_victim ? 0 : 1);
  expect(job.size() == expected_size,
         "the job has " + std::to_string(job.size()) + " ranks, expected " + std::to_string(expected_size));
  if (!no_victim) {
    // Only the victim's team rolls back: its buddy is its team mate. With teams of 1, whose
    // steals cross the teams, every rank rolls back, and the decision says why; so does a loss
    // in the first iteration after the expand, which is still under way.
    const bool global = teams_of1 || first_iteration;
    const int victim_team = expected_teams.at(static_cast<std::size_t>(victim));
    std::vector<int> team_of_victim;  // the ranks expected to roll back, then their teams
    std::set<int> teams_of_those;
    for (int r = 0; r < static_cast<int>(expected_teams.size()); ++r) {
      if (!global && expected_teams[static_cast<std::size_t>(r)] != victim_team) continue;
      team_of_victim.push_back(r);
      teams_of_those.insert(expected_teams[static_cast<std::size_t>(r)]);
    }
    const std::vector<int> teams_expected(teams_of_those.begin(), teams_of_those.end());
    const std::string global_reason = first_iteration ? "a resize is under way"
                                      : teams_of1     ? "stealing crosses teams (steal_across_teams)"
                                                      : "";
    expect(recovery.lost == std::vector<int>{victim}, "lost " + rank_set(recovery.lost));
    expect(recovery.rolled_back_globally_because == global_reason,
           "rolled back globally because \"" + recovery.rolled_back_globally_because + "\", expected \"" +
               global_reason + "\"");
    expect(recovery.ranks_rolled_back == team_of_victim, "ranks " + rank_set(recovery.ranks_rolled_back) +
                                                             " rolled back, expected " + rank_set(team_of_victim));
    expect(recovery.teams_rolled_back == teams_expected, "teams " + rank_set(recovery.teams_rolled_back) +
                                                             " rolled back, expected " + rank_set(teams_expected));
    const bool kept_state = !global && expected_teams.at(static_cast<std::size_t>(recovery.old_rank)) != victim_team;
    const std::uint64_t rerun = runtime.stats().tasks_rerun;
    const std::uint64_t replayed_bytes = runtime.stats().message_log.bytes_replayed;
    // The team re-ran the iterations after the checkpoint alone.
    const auto redone = static_cast<std::size_t>(recovery.iterations_redone);
    const std::size_t replayed_expected = global ? 0 : redone;
    expect(replayed_iterations.size() == replayed_expected, std::to_string(replayed_iterations.size()) +
                                                                 " iterations replayed by the team, expected " +
                                                                 std::to_string(replayed_expected));
    // The checkpoints overlap the iterations: the one completed last is at the boundary before
    // the interrupted iteration or the one before it. Cholesky's, every 3 iterations, is after
    // iteration 5: the loss in iteration 7 (or 8) redoes 6 (and 7).
    if (first_iteration) {
      // Back to the checkpoint the expand required, before the interrupted iteration.
      expect(redone == 0 && recovery.iteration == kExpandAt,
             std::to_string(redone) + " iterations redone after rolling back to " +
                 std::to_string(recovery.iteration) + ", expected none after " + std::to_string(kExpandAt));
    } else if (cholesky) {
      expect(redone >= 1 && redone <= 2 && recovery.iteration == 5,
             std::to_string(redone) + " iterations redone after rolling back to " +
                 std::to_string(recovery.iteration) + ", expected 1 or 2 after 5");
    } else {
      expect(redone <= 1, std::to_string(redone) + " iterations redone, expected 0 or 1");
    }
    // Stealing stays inside the teams, so what the team re-ran is its own tasks: summed over
    // the survivors, what they ran in the replayed iterations, and the bytes served from the
    // logs of the ranks that kept their state.
    const auto all_rerun = summed({rerun, tasks_run_in_replay, replayed_bytes}, job.communicator());
    if (kept_state) {
      expect(rerun == 0, "rank " + std::to_string(recovery.old_rank) + " kept its state but re-ran " +
                             std::to_string(rerun) + " tasks");
    } else {
      expect(replayed_bytes == 0, "rank " + std::to_string(recovery.old_rank) + " rolled back but served " +
                                      std::to_string(replayed_bytes) + " bytes from its log");
    }
    if (global) {
      // Every task of the iterations redone ran again, and nothing came from a log.
      const auto all_tasks = static_cast<unsigned long long>(tasks_per_iteration) * redone;
      expect(all_rerun[0] == all_tasks && all_rerun[2] == 0,
             "the survivors re-ran " + std::to_string(all_rerun[0]) + " tasks (expected " +
                 std::to_string(all_tasks) + ") and served " + std::to_string(all_rerun[2]) +
                 " bytes from their logs in a global roll-back");
    } else {
      expect(all_rerun[0] == all_rerun[1], "the survivors re-ran " + std::to_string(all_rerun[0]) +
                                               " tasks, but ran " + std::to_string(all_rerun[1]) +
                                               " in the iterations replayed");
      expect((redone == 0) == (all_rerun[0] == 0) && (redone == 0) == (all_rerun[2] == 0),
             std::to_string(redone) + " iterations redone, " + std::to_string(all_rerun[0]) + " tasks re-run and " +
                 std::to_string(all_rerun[2]) + " bytes served from the logs of the ranks that kept their state");
    }
    if (cholesky && !global) {
      // The task outputs the ranks that kept their state sent again: one activation per
      // producer, slot and rank now running a taker of the team that rolled back (the lost
      // rank's on its buddy), as the task graph after the expand has them.
      const long tile_bytes = static_cast<long>(cholesky_tile) * cholesky_tile * static_cast<long>(sizeof(double));
      const long outputs = bellows::testing::recovery::outputs_replayed(
          pinned ? outputs_before_loss : outputs_after_resize, recovery.ranks_rolled_back, recovery.lost,
          buddies_after_resize);
      const auto predicted = static_cast<unsigned long long>(outputs * tile_bytes * static_cast<long>(redone));
      expect(all_rerun[2] == predicted && outputs > 0,
             "the ranks that kept their state served " + std::to_string(all_rerun[2]) + " bytes from their logs, " +
                 "predicted " + std::to_string(outputs) + " task outputs x " + std::to_string(tile_bytes) +
                 " bytes x " + std::to_string(redone) + " iterations redone");
      result["bytes_replayed_predicted"] = predicted;
      if (pinned) {
        // Of those, the outputs of a pinned task or to one: the victim's team is fed by rank
        // 3's pinned tasks (VICTIM 1), or fed rank 3's pinned tasks (VICTIM 3). How many
        // depends on the steals; the sum above does not (a pinned task stays in its team).
        std::vector<bellows::testing::recovery::OutputTakers> of_pinned;
        for (const auto& output : outputs_before_loss) {
          if (output.pinned) of_pinned.push_back(output);
        }
        const long of_pinned_replayed = bellows::testing::recovery::outputs_replayed(
            of_pinned, recovery.ranks_rolled_back, recovery.lost, buddies_after_resize);
        expect(of_pinned_replayed > 0, "no task output served again was of a pinned task or to one (" +
                                           std::to_string(of_pinned.size()) + " outputs of or to pinned tasks)");
        result["pinned_task_outputs_replayed"] = of_pinned_replayed;
      }
    }
    result["iterations_redone"] = recovery.iterations_redone;
    result["rolled_back_to"] = recovery.iteration;
    result["ranks_rolled_back"] = recovery.ranks_rolled_back;
    result["tasks_rerun"] = rerun;
    result["tasks_rerun_by_the_survivors"] = all_rerun[0];
    result["bytes_replayed"] = replayed_bytes;
    result["bytes_replayed_by_the_survivors"] = all_rerun[2];
  }
  // Every task of every iteration from the expand on (after a loss: from the checkpoint rolled
  // back to on, since the victim's count went with it) ran once over the ranks: in the
  // iterations replayed, the team that rolled back ran again its own tasks, the lost rank's
  // with them, and the other team's count is that of its run before the loss.
  const int first_counted = no_victim ? kExpandAt + 1 : static_cast<int>(recovery.iteration) + 1;
  std::vector<unsigned long long> mine;
  for (int i = first_counted; i <= kIterations; ++i) mine.push_back(tasks_run.count(i) != 0 ? tasks_run[i] : 0);
  const auto all = summed(mine, job.communicator());
  for (std::size_t i = 0; i < all.size(); ++i) {
    expect(all[i] == static_cast<unsigned long long>(tasks_per_iteration),
           "iteration " + std::to_string(first_counted + static_cast<int>(i)) + " ran " + std::to_string(all[i]) +
               " tasks over the ranks, expected " + std::to_string(tasks_per_iteration));
  }
  result["first_iteration_counted"] = first_counted;
  result["tasks_per_iteration_counted"] = all;
  if (cholesky) {
    const std::vector<double> a_all = cholesky_a.gather_to_root(job.communicator());
    const std::vector<double> l_all = cholesky_l.gather_to_root(job.communicator());
    if (job.rank() == 0) {
      const auto [a_ref, l_ref] =
          bellows::testing::recovery::cholesky_reference(kIterations, cholesky_n, cholesky_tile);
      const std::size_t a_wrong = bellows::testing::recovery::differing(a_all, a_ref);
      const std::size_t l_wrong = bellows::testing::recovery::differing(l_all, l_ref);
      expect(a_wrong == 0 && l_wrong == 0, std::to_string(a_wrong) + " elements of A and " + std::to_string(l_wrong) +
                                               " of L differ from a serial run");
      result["verified"] = a_wrong == 0 && l_wrong == 0;
    }
  }
  if (!cholesky) {
    const std::vector<double> c = gemm.c.gather_to_root(job.communicator());
    if (job.rank() == 0) {
      const std::vector<double> expected = reference_c();
      const bool same =
          c.size() == expected.size() && std::memcmp(c.data(), expected.data(), c.size() * sizeof(double)) == 0;
      expect(same, "C differs from a serial run");
      result["verified"] = same;
    }
  }
  result["recoveries"] = recoveries;
  watchdog.disarm();
  return bellows::test::write_member_result(dir, old_rank, result, failures);
}

int finalize_member(const fs::path& dir, int index) {
  const int status = run_member(dir, index);
  MPI_Finalize();
  return status;
}

// ------------------------------------------------------------------------------------ launcher

int run_launcher(const std::string& mpiexec, const std::string& self, int victim, bool shrink, bool cholesky,
                 bool pinned, bool teams_of1, bool first_iteration, bool two_joined) {
  const int joining = two_joined ? 2 : 1;
  if (victim != -1 && victim != 1 && (shrink || victim < kJoiner || victim >= kJoiner + joining)) {
    std::fprintf(stderr, "teams_after_resize_tests: the victim must be -1 (none), 1%s, got %d\n",
                 shrink ? " (with shrink)" : (" or a joined rank, " + std::to_string(kJoiner) + " to " +
                                              std::to_string(kJoiner + joining - 1)).c_str(), victim);
    return 2;
  }
  const int processes = shrink ? kShrinkFrom : kRanks + joining;
  const bellows::test::LossRun run("teams-after-resize", victim, kMostPauseMicroseconds);
  if (shrink) write_file(run.dir / "shrink", "1");
  if (cholesky) write_file(run.dir / "cholesky", "1");
  if (pinned) write_file(run.dir / "pinned", "1");
  if (teams_of1) write_file(run.dir / "teams_of1", "1");
  if (first_iteration) write_file(run.dir / "first_iteration", "1");
  if (two_joined) write_file(run.dir / "two_joined", "1");
  return run.to_the_end("teams_after_resize", mpiexec, self, processes, kLauncherLimitSeconds,
                        {{"shrink", shrink},
                         {"cholesky", cholesky},
                         {"pinned", pinned},
                         {"teams_of1", teams_of1},
                         {"first_iteration", first_iteration},
                         {"two_joined", two_joined}},
                        failures);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--member") == 0) return finalize_member(argv[2], std::atoi(argv[3]));
  bool shrink = false, cholesky = false, pinned = false, teams_of1 = false, first_iteration = false, two_joined = false;
  bool known = argc >= 4 && argc <= 7;
  const std::map<std::string, bool*> words{{"shrink", &shrink},
                                           {"cholesky", &cholesky},
                                           {"pinned", &pinned},
                                           {"teams_of1", &teams_of1},
                                           {"first_iteration", &first_iteration},
                                           {"two_joined", &two_joined}};
  for (int i = 4; i < argc && known; ++i) {
    const auto word = words.find(argv[i]);
    known = word != words.end() && !*word->second;
    if (known) *word->second = true;
  }
  if (!known || (shrink && (cholesky || pinned)) || ((teams_of1 || first_iteration || two_joined) && !pinned) ||
      (teams_of1 + first_iteration + two_joined > 1)) {
    std::fprintf(stderr, "usage: teams_after_resize_tests MPIEXEC SELF VICTIM [shrink|cholesky] "
                         "[pinned [teams_of1|first_iteration|two_joined]] | --member DIR INDEX\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2], std::atoi(argv[3]), shrink, cholesky, pinned, teams_of1, first_iteration,
                      two_joined);
}
