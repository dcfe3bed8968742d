// A rank lost while the teams that rolled back replay (docs/teams.md, "A loss during the
// replay"): four ranks, each the only process of its own mpiexec, joined the way a Bellows
// job is (grow_by_accept / join_by_connect), each on a node of its own for the checkpoints'
// buddies, run the recovery tests' GEMM (4 x 4 tiles, 64 tasks per iteration) or Cholesky
// factorization (20 tasks per iteration) under ElasticJob, A changed after each iteration
// (recovery_references.hpp), stealing on (off for Cholesky, where rank 1 owns 2 tasks), messages logged between teams of TEAMS consecutive
// ranks (1 or 2) and a checkpoint every 3 iterations (after iterations 0, 3, 6 and 9).
// Rank 1 SIGKILLs itself in the first task it runs from iteration 5 on: only its team and its
// buddy's roll back, to the checkpoint after iteration 3 (teams of 2: ranks 0 and 1; teams of
// 1: rank 1 and its buddy 2), and rank 3 keeps its state. recover() re-homes that checkpoint's
// copies for the survivors before the replay. Then, with `kept`, rank 3 stops itself right
// after it posted the barrier that starts the first iteration replayed (iteration 4), after a
// pause of 0 to 3 ms, and the launcher kills it: every survivor must report the loss in
// iteration 4, roll every rank back to the checkpoint after iteration 3 again (the reason
// names the replay), run every task of every iteration from there once over the two ranks
// left, end with A and C (or L) bit-identical to a run without failure, and exit 0. With
// `with_buddy` rank 3 and its new buddy (the survivor that holds its re-homed copy) stop
// there and are killed together: no copy of rank 3's checkpoint is left, and the one survivor
// must be refused with recover()'s text naming both, and exit 0. With `after_replay` rank 3
// stops instead right after it posted the first send of the checkpoint at the start of the
// interrupted iteration, after the replay and the recovery's re-grid moves, before that
// checkpoint is complete: every survivor must report the loss in the interrupted iteration and
// roll every rank back to the re-homed checkpoint after iteration 3 (the tiles' owners put
// back as they were before the moves), and end as with `kept`.
// Each rank writes the bytes it sent re-homing the checkpoint (RecoveryReport::
// checkpoint_bytes_rehomed); the launcher prints their sum. BELLOWS_TEST_SEED fixes the pauses.
//
// The launcher passes when the victims' mpiexecs report their kills, every survivor's exits 0
// with a PASS result, and no process it started is left; it prints one JSON line and
// "replay_loss: PASS".
//
//   replay_loss_tests MPIEXEC SELF gemm|cholesky TEAMS kept|with_buddy|after_replay   (the launcher; no MPI)
//   replay_loss_tests --member DIR INDEX                                 (under MPIEXEC -n 1)

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
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/kernels/tile_kernels.hpp"
#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"
#include "killing_tasks.hpp"
#include "loss_test_gemm.hpp"
#include "recovery_references.hpp"
#include "separate_worlds.hpp"
#include "spawned_processes.hpp"
#include "watchdog.hpp"

namespace {

namespace fs = std::filesystem;
namespace br = bellows::runtime;
namespace be = bellows::examples;
namespace rt = bellows::testing::recovery;
using bellows::test::rank_set;
using bellows::testing::read_file;
using bellows::testing::read_int;
using bellows::testing::write_file;
using Clock = std::chrono::steady_clock;

constexpr int kRanks = 4;
constexpr int kFirstVictim = 1;
constexpr int kSecondVictim = 3;  // keeps its state at the first recovery, with teams of 1 or 2
constexpr int kIterations = 10;
constexpr int kCheckpointEvery = 3;
constexpr int kArmedFrom = 4;  // loop index: iteration 5, after the one after the checkpoint after 3
constexpr long kRolledBackTo = 3;
constexpr int kGemmTasksPerIteration = 64;
constexpr int kCholeskyTasksPerIteration = 20;
constexpr auto kRecoverTimeout = std::chrono::seconds(10);
constexpr double kLauncherLimitSeconds = 60.0;  // below the ctest timeout

/// On a second victim: stop in the next MPI_Ibarrier this process posts (the wrapper below).
std::atomic<bool> stop_in_next_barrier{false};
/// With `after_replay`: stop in the next checkpoint send this process posts (tag 32100,
/// buddy_checkpoints.cpp's kCheckpointTag), the first after the replay.
std::atomic<bool> stop_in_next_checkpoint_send{false};
constexpr int kCheckpointTag = 32100;
std::atomic<int> stop_pause_us{0};
fs::path stopped_file;

bellows::test::Checks checks{"replay_loss_tests"};
void expect(bool ok, const std::string& what) { checks.expect(ok, what); }

/// A and C of the GEMM job after kIterations iterations without failure (A evolved after each).
std::pair<std::vector<double>, std::vector<double>> gemm_reference() {
  const auto one_rank = br::BlockCyclic2D::square_for(1);
  br::TiledMatrix a(0, rt::kN, rt::kN, rt::kTile, one_rank, 0);
  br::TiledMatrix b(1, rt::kN, rt::kN, rt::kTile, one_rank, 0);
  br::TiledMatrix c(2, rt::kN, rt::kN, rt::kTile, one_rank, 0);
  be::fill_random(a, rt::kSeed);
  be::fill_random(b, rt::kSeed + 1);
  const int tiles = rt::kN / rt::kTile;
  for (int it = 0; it < kIterations; ++it) {
    for (int j = 0; j < tiles; ++j) {
      for (int i = 0; i < tiles; ++i) {
        auto result = std::make_shared<br::Tile>(rt::kTile, rt::kTile);
        for (int k = 0; k < tiles; ++k) {
          bellows::kernels::gemm_nn(*a.tile(i, k), *b.tile(k, j), k == 0 ? 0.0 : 1.0, *result);
        }
        c.set_tile(i, j, std::move(result));
      }
    }
    rt::evolve(a, it, rt::Job::gemm);
  }
  return {a.gather_to_root(MPI_COMM_SELF), c.gather_to_root(MPI_COMM_SELF)};
}

/// What recover() says when ranks `lost` (sorted, numbers after the first recovery) include
/// ranks whose buddies (`buddies`) are lost too.
std::string refusal_for(const std::vector<int>& lost, const std::vector<int>& buddies, long iteration) {
  std::string text = "recover: ranks " + rank_set(lost) + " lost in iteration " + std::to_string(iteration) + ": ";
  bool first = true;
  for (const int r : lost) {
    const int buddy = buddies[static_cast<std::size_t>(r)];
    if (!std::binary_search(lost.begin(), lost.end(), buddy)) continue;
    text += std::string(first ? "" : "; ") + "rank " + std::to_string(r) + " and its buddy rank " +
            std::to_string(buddy) + " are both lost: no copy of rank " + std::to_string(r) + "'s checkpoint is left";
    first = false;
  }
  return text;
}

int run_member(const fs::path& dir, int index) {
  bellows::testing::Watchdog watchdog(std::chrono::seconds(45), "replay loss member", index);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  const bool cholesky = fs::exists(dir / "cholesky");
  const bool with_buddy = fs::exists(dir / "with_buddy");
  const bool after_replay = fs::exists(dir / "after_replay");
  const int team_size = read_int(dir / "teams");
  const int pause_us = read_int(dir / "pause_us");
  stop_pause_us = read_int(dir / "stop_pause_us");
  const std::unique_ptr<br::ElasticJob> joined_job = bellows::test::join_fixed_job(dir, index, kRanks);
  br::ElasticJob& job = *joined_job;
  const int old_rank = job.rank();
  stopped_file = dir / ("stopped." + std::to_string(old_rank));

  const rt::Job kind = cholesky ? rt::Job::cholesky : rt::Job::gemm;
  const br::TiledMatrix::TileFilter lower = [](int m, int k) { return m >= k; };
  const br::TiledMatrix::TileFilter all_tiles = {};
  const auto grid = br::BlockCyclic2D::square_for(kRanks);
  br::TiledMatrix a(0, rt::kN, rt::kN, rt::kTile, grid, old_rank, cholesky ? lower : all_tiles);
  br::TiledMatrix b(1, rt::kN, rt::kN, rt::kTile, grid, old_rank);
  br::TiledMatrix c(cholesky ? 1 : 2, rt::kN, rt::kN, rt::kTile, grid, old_rank, cholesky ? lower : all_tiles);
  if (cholesky) {
    be::fill_spd(a, rt::kSeed);
  } else {
    be::fill_random(a, rt::kSeed);
    be::fill_random(b, rt::kSeed + 1);
  }
  br::RuntimeOptions options = bellows::test::loss_test_options(old_rank, team_size);
  options.checkpoint.every_iterations = kCheckpointEvery;
  // Rank 1 owns 2 of the Cholesky job's 20 tasks, which its team mate could steal for
  // iterations on end: without stealing it dies in iteration 5, before the checkpoint after 6.
  if (cholesky) options.steal.enabled = false;
  br::Runtime runtime(job.communicator(), options);
  job.attach(runtime);
  std::atomic<bool> kill_in_next_task{false};
  std::vector<std::unique_ptr<br::TaskClass>> classes;
  runtime.add_collection(a);
  if (cholesky) {
    runtime.add_collection(c);
    classes = be::make_cholesky_tasks(a, c);
  } else {
    runtime.add_collection(b);
    runtime.add_collection(c);
    classes.push_back(std::make_unique<be::GemmTasks>(0, a, b, c));
  }
  for (auto& tasks : bellows::test::killing(std::move(classes), kill_in_next_task, pause_us)) {
    runtime.add_task_class(std::move(tasks));
  }
  const int tasks_per_iteration = cholesky ? kCholeskyTasksPerIteration : kGemmTasksPerIteration;

  nlohmann::json result{{"old_rank", old_rank}};
  std::vector<br::RecoveryReport> recoveries;
  std::vector<long> lost_in;                  // the iteration each loss was reported in
  std::map<long, std::uint64_t> tasks_run;    // iteration -> tasks run here, in its last run here
  std::vector<int> buddies_after_first;       // the re-homed checkpoint's buddies, new numbers
  std::vector<int> second_victims;            // old numbers
  std::string refusal;
  for (int it = 0; it < kIterations;) {
    (void)job.apply_pending(it);
    // Armed until a task of its runs (the GEMM's team mate may steal some).
    kill_in_next_task = old_rank == kFirstVictim && it >= kArmedFrom && recoveries.empty();
    const br::IterationReport report = runtime.run_iteration();
    if (report.completed()) {
      if (report.ran_here()) {
        tasks_run[report.iteration] = report.local.tasks_executed;
        rt::evolve(a, it, kind);  // a rank that kept its state leaves its tiles as they are
      }
      ++it;
      continue;
    }
    lost_in.push_back(report.iteration);
    try {
      recoveries.push_back(job.recover(report, kRecoverTimeout));
    } catch (const br::RecoveryError& e) {
      refusal = e.what();
      break;
    }
    const br::RecoveryReport& recovery = recoveries.back();
    // The runtime counts its iterations from 1; the loop resumes after the checkpoint's.
    it -= static_cast<int>(report.iteration - 1 - recovery.iteration);
    if (recoveries.size() != 1) continue;
    write_file(dir / ("rehomed." + std::to_string(old_rank)), std::to_string(recovery.checkpoint_bytes_rehomed));
    // The second victims: rank 3 and, with `with_buddy`, the survivor that holds its re-homed copy.
    std::vector<int> survivors;
    for (int r = 0; r < kRanks; ++r) {
      if (!std::binary_search(recovery.lost.begin(), recovery.lost.end(), r)) survivors.push_back(r);
    }
    buddies_after_first = runtime.checkpoint_buddies();
    const auto second_now = std::find(survivors.begin(), survivors.end(), kSecondVictim) - survivors.begin();
    second_victims = {kSecondVictim};
    if (with_buddy && buddies_after_first.size() == survivors.size()) {
      const int buddy = buddies_after_first[static_cast<std::size_t>(second_now)];
      if (buddy >= 0) second_victims.push_back(survivors[static_cast<std::size_t>(buddy)]);
    }
    std::sort(second_victims.begin(), second_victims.end());
    if (std::binary_search(second_victims.begin(), second_victims.end(), old_rank)) {
      (after_replay ? stop_in_next_checkpoint_send : stop_in_next_barrier) = true;
    }
  }

  // The first recovery: rank 1 lost, its team and its buddy's rolled back, at least one
  // iteration redone, rank 3 kept its state; the checkpoint's copies re-homed.
  const std::vector<int> first_rolled_back = team_size == 2 ? std::vector<int>{0, 1} : std::vector<int>{1, 2};
  expect(!recoveries.empty(), "no recovery");
  if (!recoveries.empty()) {
    const br::RecoveryReport& first = recoveries.front();
    expect(first.lost == std::vector<int>{kFirstVictim}, "the first recovery lost " + rank_set(first.lost));
    expect(first.ranks_rolled_back == first_rolled_back && first.rolled_back_globally_because.empty(),
           "the first recovery rolled back ranks " + rank_set(first.ranks_rolled_back) + " (\"" +
               first.rolled_back_globally_because + "\"), expected " + rank_set(first_rolled_back));
    expect(first.iteration == kRolledBackTo && first.iterations_redone >= 1,
           "the first recovery rolled back to " + std::to_string(first.iteration) + " redoing " +
               std::to_string(first.iterations_redone) + " iterations, expected 3 and at least 1");
    expect(buddies_after_first.size() == kRanks - 1, "no re-homed buddies: " + rank_set(buddies_after_first));
    result["first_rolled_back_to"] = first.iteration;
    result["first_iterations_redone"] = first.iterations_redone;
    result["first_tiles_regridded"] = first.tiles_regridded;
    result["checkpoint_bytes_rehomed"] = first.checkpoint_bytes_rehomed;
    result["buddies_after_first"] = buddies_after_first;
  }
  std::vector<int> second_lost_now;  // numbers after the first recovery
  {
    std::vector<int> survivors;
    for (int r = 0; r < kRanks; ++r) {
      if (r != kFirstVictim) survivors.push_back(r);
    }
    for (const int v : second_victims) {
      second_lost_now.push_back(static_cast<int>(std::find(survivors.begin(), survivors.end(), v) - survivors.begin()));
    }
    std::sort(second_lost_now.begin(), second_lost_now.end());
  }
  result["second_victims"] = second_victims;
  result["lost_in"] = lost_in;
  // The second loss: in the first iteration replayed, or with `after_replay` in the
  // interrupted iteration, which every rank runs again after the replay.
  const long second_expected_in =
      after_replay && !recoveries.empty() ? recoveries.front().interrupted_iteration : kRolledBackTo + 1;
  expect(lost_in.size() == 2 && lost_in[1] == second_expected_in,
         "losses reported in iterations " + rank_set(std::vector<int>(lost_in.begin(), lost_in.end())) +
             ", the second expected in iteration " + std::to_string(second_expected_in));
  if (with_buddy) {
    const std::string expected = refusal_for(second_lost_now, buddies_after_first, kRolledBackTo + 1);
    expect(refusal == expected, "refused with \"" + refusal + "\", expected \"" + expected + "\"");
    result["refused"] = refusal;
    result["verified"] = true;  // nothing to verify: the job could not recover, and said why
    watchdog.disarm();
    return bellows::test::write_member_result(dir, old_rank, result, checks.failures);
  }
  expect(refusal.empty(), "refused: " + refusal);
  expect(recoveries.size() == 2, "recovered " + std::to_string(recoveries.size()) + " times");
  if (recoveries.size() == 2) {
    const br::RecoveryReport& second = recoveries.back();
    const std::string reason = "the loss came during the replay of an earlier team roll-back (its ranks were at "
                               "different iterations, and no log was kept from its checkpoint for a replay of a replay)";
    expect(second.lost == second_lost_now, "the second recovery lost " + rank_set(second.lost) + ", expected " +
                                               rank_set(second_lost_now));
    expect(second.iteration == kRolledBackTo && second.ranks_rolled_back == std::vector<int>{0, 1, 2} &&
               second.rolled_back_globally_because == reason,
           "the second recovery rolled ranks " + rank_set(second.ranks_rolled_back) + " back to " +
               std::to_string(second.iteration) + " because \"" + second.rolled_back_globally_because + "\"");
    result["second_rolled_back_to"] = second.iteration;
    result["second_ranks_rolled_back"] = second.ranks_rolled_back;
  }
  expect(job.size() == kRanks - 2, "the job has " + std::to_string(job.size()) + " ranks");
  // Every task of every iteration after the checkpoint rolled back to ran once over the two
  // ranks left, in its last run.
  std::vector<unsigned long long> mine, all(static_cast<std::size_t>(kIterations - kRolledBackTo), 0);
  for (long i = kRolledBackTo + 1; i <= kIterations; ++i) mine.push_back(tasks_run.count(i) != 0 ? tasks_run[i] : 0);
  MPI_Allreduce(mine.data(), all.data(), static_cast<int>(mine.size()), MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                job.communicator());
  for (std::size_t i = 0; i < all.size(); ++i) {
    expect(all[i] == static_cast<unsigned long long>(tasks_per_iteration),
           "iteration " + std::to_string(kRolledBackTo + 1 + static_cast<long>(i)) + " ran " +
               std::to_string(all[i]) + " tasks over the ranks, expected " + std::to_string(tasks_per_iteration));
  }
  result["tasks_per_iteration_counted"] = all;
  const std::vector<double> a_all = a.gather_to_root(job.communicator());
  const std::vector<double> c_all = c.gather_to_root(job.communicator());
  if (job.rank() == 0) {
    std::size_t a_wrong = 0, c_wrong = 0;
    if (cholesky) {
      const auto [a_ref, l_ref] = rt::cholesky_reference(kIterations);
      a_wrong = rt::differing(a_all, a_ref);
      c_wrong = rt::differing(c_all, l_ref);
    } else {
      const auto [a_ref, c_ref] = gemm_reference();
      a_wrong = rt::differing(a_all, a_ref);
      c_wrong = rt::differing(c_all, c_ref);
    }
    expect(a_wrong == 0 && c_wrong == 0, std::to_string(a_wrong) + " elements of A and " + std::to_string(c_wrong) +
                                             (cholesky ? " of L" : " of C") + " differ from a run without failure");
    result["verified"] = a_wrong == 0 && c_wrong == 0;
  }
  watchdog.disarm();
  return bellows::test::write_member_result(dir, old_rank, result, checks.failures);
}

// ------------------------------------------------------------------------------------ launcher

int run_launcher(const std::string& mpiexec, const std::string& self, bool cholesky, int team_size,
                 const std::string& second) {
  const bool with_buddy = second == "with_buddy";
  const bellows::test::LossRun run("replay-loss", kFirstVictim, bellows::test::kMostPauseMicroseconds);
  const fs::path& dir = run.dir;
  if (cholesky) write_file(dir / "cholesky", "1");
  if (second != "kept") write_file(dir / second, "1");
  write_file(dir / "teams", std::to_string(team_size));
  // The second victims' pause before they stop, drawn after the first's.
  std::mt19937 random(run.seed + 1);
  const int pause_before_stop_us =
      std::uniform_int_distribution<int>(0, bellows::test::kMostPauseMicroseconds)(random);
  write_file(dir / "stop_pause_us", std::to_string(pause_before_stop_us));
  bellows::testing::LaunchedMembers members(
      mpiexec, kRanks, dir,
      [&](int i) { return std::vector<std::string>{self, "--member", dir.string(), std::to_string(i)}; },
      kLauncherLimitSeconds);
  // The second victims stop themselves; once all have, they die together.
  const std::size_t expected_stopped = with_buddy ? 2 : 1;
  std::vector<int> second_victims;
  while (Clock::now() < members.limit() && !members.reap()) {
    std::vector<int> stopped;
    for (int r = 0; r < kRanks; ++r) {
      if (fs::exists(dir / ("stopped." + std::to_string(r)))) stopped.push_back(r);
    }
    if (stopped.size() == expected_stopped) {
      for (const int r : stopped) {
        expect(::kill(read_int(dir / ("stopped." + std::to_string(r))), SIGKILL) == 0,
               "kill -9 of rank " + std::to_string(r) + " failed");
      }
      second_victims = stopped;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  expect(second_victims.size() == expected_stopped,
         std::to_string(second_victims.size()) + " second victims stopped, expected " + std::to_string(expected_stopped));
  members.reap_until_limit();
  bellows::test::SurvivorResults read;
  read.wrong = members.end("pid");
  std::vector<int> victims = second_victims;
  victims.push_back(kFirstVictim);
  std::set<std::string> refusals;
  long long rehomed_bytes = 0;
  for (int r = 0; r < kRanks; ++r) {
    const fs::path rehomed = dir / ("rehomed." + std::to_string(r));
    if (fs::exists(rehomed)) rehomed_bytes += std::atoll(read_file(rehomed).c_str());
  }
  for (std::size_t i = 0; i < members.size(); ++i) {
    const fs::path rank_file = dir / ("rank." + std::to_string(i));
    if (!fs::exists(rank_file)) {
      read.wrong.push_back("member " + std::to_string(i) + " never joined the job");
      continue;
    }
    const int r = read_int(rank_file);
    if (std::find(victims.begin(), victims.end(), r) != victims.end()) {
      if (members.exited_zero(i)) read.wrong.push_back("victim " + std::to_string(r) + "'s mpiexec exited 0");
      continue;
    }
    if (!members.exited_zero(i)) read.wrong.push_back("survivor " + std::to_string(r) + "'s mpiexec did not exit 0");
    const fs::path result_file = dir / ("result." + std::to_string(r));
    if (!fs::exists(result_file)) {
      read.wrong.push_back("survivor " + std::to_string(r) + " wrote no result");
      continue;
    }
    const auto result = nlohmann::json::parse(read_file(result_file));
    if (result.value("result", "") != "PASS") read.wrong.push_back("survivor " + std::to_string(r) + ": " + result.dump());
    read.verified = read.verified || result.value("verified", false);
    if (result.contains("refused")) refusals.insert(result["refused"].get<std::string>());
    read.results.push_back(result);
  }
  if (with_buddy) expect(refusals.size() == 1, std::to_string(refusals.size()) + " different refusals");
  read.outputs = members.outputs();
  return bellows::test::report_launcher("replay_loss",
                                        {{"job", cholesky ? "cholesky" : "gemm"},
                                         {"teams", team_size},
                                         {"second", second},
                                         {"second_victims", second_victims},
                                         {"checkpoint_bytes_rehomed", rehomed_bytes},
                                         {"seed", run.seed},
                                         {"pause_us", run.pause_us},
                                         {"stop_pause_us", pause_before_stop_us}},
                                        read, true, checks.failures, dir, run.start);
}

}  // namespace

// MPI's profiling interface: a second victim stops right after it posted the first
// checkpoint send after its first recovery (`after_replay`; recover()'s own come before it is
// armed, and none is taken during the replay), or the first
// MPI_Ibarrier after its first recovery, the one that starts the first iteration replayed
// (recover()'s own barriers come before it is armed), after a pause; the launcher kills it.
extern "C" int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  const int posted = PMPI_Ibarrier(comm, request);
  if (stop_in_next_barrier.exchange(false)) {
    std::this_thread::sleep_for(std::chrono::microseconds(stop_pause_us.load()));
    write_file(stopped_file, std::to_string(::getpid()));
    ::raise(SIGSTOP);
  }
  return posted;
}

extern "C" int MPI_Isend(const void* buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                         MPI_Request* request) {
  const int posted = PMPI_Isend(buf, count, datatype, dest, tag, comm, request);
  if (tag == kCheckpointTag && stop_in_next_checkpoint_send.exchange(false)) {
    std::this_thread::sleep_for(std::chrono::microseconds(stop_pause_us.load()));
    write_file(stopped_file, std::to_string(::getpid()));
    ::raise(SIGSTOP);
  }
  return posted;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--member") == 0) {
    return bellows::test::run_member_under_mpi(run_member, argv[2], std::atoi(argv[3]));
  }
  const bool job_named = argc == 6 && (std::strcmp(argv[3], "gemm") == 0 || std::strcmp(argv[3], "cholesky") == 0);
  const int team_size = argc == 6 ? std::atoi(argv[4]) : 0;
  const std::string second = argc == 6 ? argv[5] : "";
  const bool second_named = second == "kept" || second == "with_buddy" || second == "after_replay";
  if (!job_named || (team_size != 1 && team_size != 2) || !second_named) {
    std::fprintf(stderr, "usage: replay_loss_tests MPIEXEC SELF gemm|cholesky 1|2 kept|with_buddy|after_replay | "
                         "--member DIR INDEX\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2], std::strcmp(argv[3], "cholesky") == 0, team_size, second);
}
