// A GEMM that loses a rank mid-iteration and carries on (Runtime::recover): four ranks, each
// the only process of its own mpiexec, joined the way a Bellows job is (grow_by_accept /
// join_by_connect), each on a node of its own for the checkpoints' buddies, run kIterations
// iterations of C = A * B with stealing on and a checkpoint at every boundary; between
// iterations the application changes A (each element a' = a * 0.75 + 0.125 * (iteration + 1),
// new tiles, as an application must), so the result depends on every iteration having been
// applied exactly once. Once rank 0 has finished a random number of iterations (4 to 12), the
// launcher SIGKILLs the victim at a random point of the next iteration's length, counted from
// rank 0's progress (which may fall in the gap between two iterations): moments the test does not
// choose. BELLOWS_TEST_SEED fixes them; the seed is printed with the result. Nothing tells the
// survivors: run_iteration() must notice from MPI alone, abandon the iteration and name the
// lost rank; they agree on the lost set and rebuild the job's communicator without it
// (rebuild_after_loss: agree_on_lost, rebuild_without), recover() rolls back to
// the last checkpoint with the lost rank's tiles from its buddy, and the loop resumes at the
// checkpoint's iteration. At the end the first survivor gathers A and C and compares them bit
// for bit with a serial computation of the same tile kernels in the same order (a run without
// failure), and every iteration after the recovery ran exactly the GEMM's 64 tasks over the
// survivors. VICTIMS may name two ranks ("0,2", whose buddies survive), killed at once (both
// stopped, then both killed): a survivor's iteration may name one or both, and every
// survivor's agreement must name both, recovered from in one recovery. With -1 nobody is killed and the same checks apply
// to the four ranks.
// With `cholesky` the job factors A = L * L^T instead (A symmetric positive definite, its
// lower tiles kept; between iterations a' = a * 0.99 + 0.001, which keeps it so; 20 tasks per
// iteration), checked against a serial factorization by the same kernels in the same order.
// With `no-checkpoint` the checkpoints are off: every survivor must be refused a second
// run_iteration() before recover(), then get recover()'s RecoveryError saying that no copy of
// the lost rank's tiles exists, and still finalize and exit 0.
// With `second=R@MS` a second rank, R, is SIGKILLed MS milliseconds after the first survivor
// started recovering from the first victim's loss (each survivor writes recovering.<rank> when
// its iteration reports the loss), so that it dies during the agreement, the rebuild or
// recover() depending on the delay and the machine. The survivors do what an application
// does (rebuild_after_loss, then recover); they must either fold the second loss in (finish
// without both victims, verified as above) or every one of them be refused with an error that
// names its phase and the ranks, and then still finalize and exit 0. Nothing may hang: a
// member's watchdog and the launcher's limit are shorter in this mode (40 and 50 s).
// With `after=R` (`cholesky-after=R` for the Cholesky job) rank R is SIGKILLed instead at a
// random point of the first iteration after the recovery: a random fraction (from the seed) of
// an iteration's time after the first survivor returned from recover() (it writes
// recovered.<rank>). recover() ended with a complete checkpoint of the state it restored under
// the new buddies, so the survivors must recover from this loss too, never be refused, and
// finish verified as above.
// With `bspgemm-teams=T` the job is the bspgemm example's block-sparse C = A * B instead (its
// `skewed` pattern, half of A's and B's 4 x 4 tiles nonzero; between iterations A changes as in
// the GEMM), checked against a serial run of the same kernel calls in the same order.
// With `teams=T` (`cholesky-teams=T` for the Cholesky job, whose logs hold task outputs that
// the ranks keeping their state send again as activations; `bspgemm-teams=T` for bspgemm,
// whose logs hold collection tiles only, since a C tile's chain of tasks runs on its owner:
// the test checks from the task graph that no task output goes to another team) the job logs
// messages between teams of T consecutive ranks (T = 4: one team)
// and takes a checkpoint every 3 iterations instead of every one: a checkpoint's buddy is of
// the rank's own team where the team has another rank. The victim dies in the iteration after
// the one after a checkpoint, so that at least one completed iteration is redone, and the test
// insists on it. With more than one team only the teams
// of the lost ranks and of their buddies roll back (every rank when the loss hit an
// iteration's end, as the recovery says): they re-run the iterations after the checkpoint
// alone, fed by the other teams' logs (IterationReport::replaying_ranks), while the others run
// no task and leave their tiles as they are; then every rank runs the interrupted iteration.
// The tasks re-run (RankStats::tasks_rerun) are tasks_rerun()'s prediction: the rolled-back
// ranks' tasks times the iterations redone in sum, none on a rank that kept its state, and
// the replayed iterations ran exactly the rolled-back ranks' tasks (each rank's tasks counted
// from the task graph as the job starts), and every rank that kept its state served bytes from
// its log. With one team (T = 4) every rank rolls back, and the recovery says why. With
// `ranks=8` (teams of 4: two teams, buddies in a ring inside each) two victims of one team,
// neither the other's buddy, roll back that team alone; two that are, a rank and its buddy,
// leave no copy of the first's checkpoint, and every survivor must be refused with recover()'s
// text saying so, then still exit 0. Each rank's tasks re-run are printed by old rank
// (`tasks_rerun_by_rank`): none on the ranks that kept their state, some on each rank that
// rolled back. The same with `cholesky-teams=4 ranks=8` and `bspgemm-teams=4 ranks=8`, whose
// buddies follow their uneven tiles: the victims' buddies must be survivors, and differ.
// For Cholesky and bspgemm the bytes the ranks that kept their state serve from their logs
// are predicted from the task graph (replay_prediction.hpp): the task outputs they send again,
// summed over them, and per rank the tiles it serves, exactly where no rank re-running the
// window stole a task, between bounds otherwise. In every mode the examples' JSON report
// (runtime_extra) carries, per failure, the log bytes the survivors kept for the replay: their
// recoveries' sum, none where every rank rolled back.
// With `replay-to-kept` (after a teams mode) the ranks re-running the window send their task
// outputs to the ranks that kept their state too (MessageLogOptions::replay_to_ranks_kept):
// each such rank must drop every one as a copy it holds (ReceivedVersions), exactly the
// outputs of the rolled-back ranks' tasks with a consumer or a written tile on it, once per
// iteration redone (MessageLogStats::copies_dropped), and the result stays bit-identical;
// without it nobody drops anything. Per failure, each rank's recovery counts what its log
// served and the copies it dropped, and the JSON report's recoveries carry their sums.
// With `stopped` the victims are SIGSTOPped instead of killed, as a node cut from the network
// looks: alive, silent, and no MPI call with them ever fails. The launcher then tells the
// survivors what a control plane would (the controller's ranks-lost event, failure 1): each
// survivor's stand-in for the daemon's event handler reads the launcher's file on a thread of
// its own and hands it to LossNotices::tell(), as ControlChannel's PMIx handler does, each
// survivor 100 ms after the one before (daemons hear at different moments). The survivors must
// abandon the iteration, name the victims and recover as above; once every survivor has
// verified and is finishing, the launcher kills the stopped victims.
// With `deaf=R` the victims are killed in a barrier they posted (each stops in its next one
// once rank 0 has reported the iterations before the kill), and survivor R's watch hears
// nothing from MPI (deaf_watch.hpp): its barrier fails, and it learns who died only from the
// control plane's word, told as with `stopped` (every survivor 100 ms after the one before,
// rank R kDeafTellDelay after the kill, ten times the 100 ms the runtime once waited for a
// verdict). Rank R must wait for that word, name the victims and recover like the others.
//
// The launcher passes when the victim's mpiexec reports the kill, every survivor's mpiexec
// exits 0 with a PASS result, and no process it started is left; it prints a JSON line with
// each survivor's times (the kill to the iteration abandoned, to the communicator rebuilt, to
// the runtime recovered, to the first iteration completed after it) and "recovery: PASS".
//
//   recovery_tests MPIEXEC SELF VICTIMS [no-checkpoint|cholesky|second=R@MS|[cholesky-]after=R|stopped|
//                                        [cholesky-|bspgemm-]teams=T] [deaf=R] [replay-to-kept] [ranks=N]
//                                                   (the launcher, recovery_launcher.cpp; no MPI)
//   recovery_tests --member DIR INDEX COUNT VICTIMS (under MPIEXEC -n 1)

#include "bellows/runtime/loss_notices.hpp"
#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/rebuild.hpp"
#include "bellows/runtime/runtime.hpp"
#include "bellows/runtime/team_replay.hpp"
#include "deaf_watch.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/kernels/tile_kernels.hpp"
#include "bspgemm_tasks.hpp"
#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"
#include "loss_test_gemm.hpp"
#include "recovery_references.hpp"
#include "recovery_test.hpp"
#include "replay_prediction.hpp"
#include "separate_worlds.hpp"
#include "watchdog.hpp"

namespace bellows::testing::recovery {
namespace {

namespace br = bellows::runtime;
namespace be = bellows::examples;
using bellows::test::rank_set;

constexpr int kGemmTasksPerIteration = 64;
constexpr int kCholeskyTasksPerIteration = 20;  // 4 POTRF, 6 TRSM, 6 SYRK, 4 GEMM
constexpr auto kRebuildTimeout = std::chrono::seconds(10);
/// `deaf=R`: how long after the kill rank R hears the control plane's word.
constexpr auto kDeafTellDelay = std::chrono::milliseconds(1000);
// With a second victim: shorter, so that a phase that could only end at its deadline still
// ends well within the test's timeout (60 s).
constexpr auto kSecondLossRebuildTimeout = std::chrono::seconds(5);
constexpr auto kSecondLossMemberLimit = std::chrono::seconds(40);

/// The job: the GEMM, or a file `cholesky` or `bspgemm` in the run's directory.
Job job_kind = Job::gemm;
bool cholesky_job = false;

double seconds_from(double wall_start) { return wall_seconds() - wall_start; }


}  // namespace

int run_member(const fs::path& dir, int index, int count, const std::vector<int>& victims) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  // A rank killed once the survivors are recovering from the first loss (a file `second`).
  const int second_victim = fs::exists(dir / "second") ? std::atoi(read_file(dir / "second").c_str()) : -1;
  const bool second_loss = second_victim >= 0;
  // The second victim dies in the first iteration after the recovery (a file `after`): the
  // survivors must recover from it like from any loss, never be refused.
  const bool loss_after_recovery = fs::exists(dir / "after");
  bellows::testing::Watchdog watchdog(second_loss ? std::chrono::seconds(kSecondLossMemberLimit)
                                                  : std::chrono::seconds(75),
                                      "recovery member", index);
  std::vector<int> all_victims = victims;
  if (second_loss) all_victims.push_back(second_victim);
  std::sort(all_victims.begin(), all_victims.end());
  MPI_Comm job = bellows::testing::join_member_worlds(dir, index, count);
  MPI_Comm_set_errhandler(job, MPI_ERRORS_RETURN);
  int rank = -1, size = 0;
  MPI_Comm_rank(job, &rank);
  MPI_Comm_size(job, &size);
  const int old_rank = rank;
  expect(size == count, "joined size " + std::to_string(size));
  write_file(dir / ("pid." + std::to_string(rank)), std::to_string(::getpid()));
  const bool stopped_victims = fs::exists(dir / "stopped");
  const int deaf_rank = fs::exists(dir / "deaf") ? std::atoi(read_file(dir / "deaf").c_str()) : -1;
  if (old_rank == deaf_rank) make_watch_deaf();
  std::jthread victim_stopper;  // `deaf=R`: a victim dies in a barrier it posted
  if (deaf_rank >= 0 && std::binary_search(victims.begin(), victims.end(), old_rank)) {
    victim_stopper = std::jthread([dir, old_rank](std::stop_token stop) {
      while (!stop.stop_requested() && !fs::exists(dir / "stop_in_barrier")) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!stop.stop_requested()) stop_in_next_barrier(dir / ("in_barrier." + std::to_string(old_rank)));
    });
  }
  std::jthread teller;
  if (stopped_victims || deaf_rank >= 0) {
    teller = tell_when_told(dir, old_rank == deaf_rank ? kDeafTellDelay : std::chrono::milliseconds(100 * old_rank));
  }

  job_kind = fs::exists(dir / "cholesky") ? Job::cholesky : fs::exists(dir / "bspgemm") ? Job::bspgemm : Job::gemm;
  cholesky_job = job_kind == Job::cholesky;
  const int kill_after = std::atoi(read_file(dir / "kill_after").c_str());
  // GEMM: A, B and C (the result). Cholesky: A and L (the result) over the lower tiles.
  const br::TiledMatrix::TileFilter all_tiles = {};
  const br::TiledMatrix::TileFilter lower = [](int m, int k) { return m >= k; };
  // bspgemm: the nonzero tiles of A and B, and the C tiles that receive a product.
  const be::TilePattern& pattern = bspgemm_pattern();
  const bool sparse = job_kind == Job::bspgemm;
  const br::TiledMatrix::TileFilter a_kept =
      sparse ? [&pattern](int i, int k) { return pattern.a_nonzero(i, k); } : cholesky_job ? lower : all_tiles;
  const br::TiledMatrix::TileFilter b_kept =
      sparse ? [&pattern](int k, int j) { return pattern.b_nonzero(k, j); } : all_tiles;
  const br::TiledMatrix::TileFilter c_kept =
      sparse ? [&pattern](int i, int j) { return pattern.c_nonzero(i, j); } : cholesky_job ? lower : all_tiles;
  const auto grid = br::BlockCyclic2D::square_for(size);
  br::TiledMatrix a(0, kN, kN, kTile, grid, rank, a_kept);
  br::TiledMatrix b(1, kN, kN, kTile, grid, rank, b_kept);
  br::TiledMatrix c(cholesky_job ? 1 : 2, kN, kN, kTile, grid, rank, c_kept);
  if (cholesky_job) {
    be::fill_spd(a, kSeed);
  } else {
    be::fill_random(a, kSeed);
    be::fill_random(b, kSeed + 1);
  }
  const int tasks_per_iteration = cholesky_job ? kCholeskyTasksPerIteration
                                  : sparse     ? static_cast<int>(pattern.products())
                                               : kGemmTasksPerIteration;
  br::RuntimeOptions options;
  options.comm_max_sleep_us = 100;
  options.same_host_transport = false;  // tiles over MPI, as between nodes
  options.steal.enabled = true;
  const bool no_checkpoint = fs::exists(dir / "no-checkpoint");
  options.checkpoint.enabled = !no_checkpoint;
  options.checkpoint.every_iterations = 1;
  options.checkpoint.node = "node" + std::to_string(rank);
  const int team_size = fs::exists(dir / "teams") ? std::atoi(read_file(dir / "teams").c_str()) : 0;
  // `replay-to-kept`: the ranks re-running the window send their outputs to the ranks that
  // kept their state too, which must recognise each as a copy they hold and drop it.
  const bool replay_to_kept = fs::exists(dir / "replay-to-kept");
  if (team_size > 0) {
    options.message_log.enabled = true;
    options.message_log.team_size = team_size;
    options.message_log.replay_to_ranks_kept = replay_to_kept;
    options.checkpoint.every_iterations = kTeamsCheckpointEvery;
  }
  const int checkpoint_every = static_cast<int>(options.checkpoint.every_iterations);
  const auto team_of = [&](int r) { return team_size > 0 && team_size < count ? r / team_size : 0; };
  const bool buddies_in_rings =
      job_kind == Job::gemm && (team_size <= 1 || team_size >= count || count % team_size == 0);
  const auto ring_buddy = [&](int r) { return ring_buddy_of(r, count, team_size); };
  // Victims of which one holds the other's only copy: the recovery must be refused, saying so.
  const std::string buddies_lost_together =
      buddies_in_rings && !second_loss ? buddies_lost_together_text(victims, count, team_size) : "";
  auto owned_runtime = std::make_unique<br::Runtime>(job, options);
  br::Runtime& runtime = *owned_runtime;
  runtime.add_collection(a);
  std::vector<std::unique_ptr<br::TaskClass>> task_classes;
  if (cholesky_job) {
    runtime.add_collection(c);
    task_classes = be::make_cholesky_tasks(a, c);
  } else if (sparse) {
    runtime.add_collection(b);
    runtime.add_collection(c);
    task_classes.push_back(std::make_unique<be::BspgemmTasks>(0, pattern, a, b, c));
  } else {
    runtime.add_collection(b);
    runtime.add_collection(c);
    task_classes.push_back(std::make_unique<be::GemmTasks>(0, a, b, c));
  }
  // The task graph as the job starts (replay_prediction.hpp): each rank's tasks per iteration
  // (GEMM's are spread evenly over the 2 x 2 grid, Cholesky's and bspgemm's are not), the
  // task outputs that go to a task of another team (Cholesky's; a bspgemm chain runs on its C
  // tile's owner and GEMM's tasks have no task successors), the tiles each rank holds, the
  // collection tiles each task reads and, per producer and output slot, the ranks that take it.
  const auto holder_of = [&](const br::TileIndex& t) {
    const br::TiledMatrix& m = t.collection == c.id() ? c : t.collection == a.id() ? a : b;  // L is c
    return m.owner(t.m, t.n);
  };
  const JobGraph graph = job_graph(task_classes, cholesky_job ? std::vector<const br::TiledMatrix*>{&a, &c}
                                                              : std::vector<const br::TiledMatrix*>{&a, &b, &c},
                                   count, holder_of, team_of);
  const std::vector<long>& tasks_per_rank = graph.tasks_per_rank;
  const long task_outputs_between_teams = graph.task_outputs_between_teams;
  const std::vector<std::uint64_t>& tiles_held_at_start = graph.tiles_held_at_start;
  const std::vector<TileRead>& tile_reads = graph.tile_reads;
  const std::vector<OutputTakers>& task_outputs = graph.outputs;
  for (auto& cls : task_classes) runtime.add_task_class(std::move(cls));

  nlohmann::json result{{"old_rank", old_rank}};
  result["tasks_per_rank"] = tasks_per_rank;
  result["task_outputs_between_teams"] = task_outputs_between_teams;
  if (sparse && team_size > 1 && team_size < count) {
    expect(task_outputs_between_teams == 0, "bspgemm: " + std::to_string(task_outputs_between_teams) +
                                                " task outputs go to another team's task");
  }
  std::map<int, std::uint64_t> tasks_after_recovery;  // iteration -> tasks run here
  long steals_in_window = 0;  // tasks this rank stole in the iterations re-run alone
  bool recovered = false;
  int done = 0;
  std::vector<int> old_of(static_cast<std::size_t>(count));  // rank now -> rank at the start
  for (int r = 0; r < count; ++r) old_of[static_cast<std::size_t>(r)] = r;
  std::vector<int> lost_in_all;  // old numbers
  std::string refusal;           // with a second victim: the error that ended the job here
  long first_iterations_redone = -1;
  // The first recovery's: the ranks that rolled back (old numbers) and the iterations they
  // re-ran alone while the others kept their state (a team roll-back; docs/teams.md).
  std::vector<int> first_rolled_back;
  long window_first = 0, window_last = -1;
  std::vector<int> first_buddies;  // after the first iteration, by old rank
  while (done < kIterations && failures == 0) {
    const br::IterationReport report = runtime.run_iteration();
    if (!report.completed()) {
      const double abandoned_at = wall_seconds();
      if (!recovered) write_file(dir / ("recovering." + std::to_string(old_rank)), "1");
      // Where the second loss showed: with the first (the agreement), in a rebuild that had
      // to be tried again, in recover(), or in an iteration after the first recovery.
      if (recovered) result["second_loss_noticed_in"] = "an iteration after the recovery";
      std::vector<int> lost_old;
      for (const int r : report.lost_ranks) lost_old.push_back(old_of[static_cast<std::size_t>(r)]);
      if (second_loss && !recovered && std::find(lost_old.begin(), lost_old.end(), second_victim) != lost_old.end()) {
        result["second_loss_noticed_in"] = "the abandoned iteration";
      }
      if (second_loss) {
        const bool victims_only = std::all_of(lost_old.begin(), lost_old.end(), [&](int r) {
          return std::binary_search(all_victims.begin(), all_victims.end(), r);
        });
        expect(victims_only, "iteration " + std::to_string(report.iteration) + " lost ranks (old numbers) " +
                                 rank_set(lost_old) + ", not among the victims " + rank_set(all_victims));
      } else {
        expect(!recovered, "a second loss");
        // The iteration names the deaths it found before it gave up: of two victims killed at
        // once, one or both. The agreement below must name both.
        const bool among_victims =
            !report.lost_ranks.empty() && std::all_of(report.lost_ranks.begin(), report.lost_ranks.end(), [&](int r) {
              return std::binary_search(victims.begin(), victims.end(), r);
            });
        expect(among_victims, "iteration " + std::to_string(report.iteration) + " lost ranks " +
                                  rank_set(report.lost_ranks) + ", expected some of " + rank_set(victims));
      }
      if (no_checkpoint) {
        std::string refused = "(not refused)";
        try {
          (void)runtime.run_iteration();
        } catch (const std::logic_error& e) {
          refused = e.what();
        }
        const std::string expected_refusal = "run_iteration after iteration " + std::to_string(report.iteration) +
                                             " lost ranks " + rank_set(victims) +
                                             ": call recover() on the survivors' communicator first";
        expect(refused == expected_refusal, "run_iteration: \"" + refused + "\", expected \"" + expected_refusal + "\"");
      }
      br::RebuildReport rebuilt;
      std::vector<int> lost;
      const auto deadline = Clock::now() + (second_loss ? kSecondLossRebuildTimeout : kRebuildTimeout);
      // What an application does (ElasticJob::recover): agree on the lost set and rebuild
      // without it (again with a larger set when a survivor dies during the rebuild), then
      // recover; when survivors die during recover(), agree again on the communicator from
      // before the loss, kept until then, and rebuild and recover without them too.
      const MPI_Comm before = job;
      std::vector<int> known = report.lost_ranks;
      br::RecoveryReport recovery;
      double rebuilt_at = 0.0;
      bool refused_without_checkpoints = false;
      for (;;) {
        MPI_Comm survivors = MPI_COMM_NULL;
        try {
          int attempts = 0;
          survivors = br::rebuild_after_loss(before, known, deadline, lost, &attempts, &rebuilt);
          result["rebuild_attempts"] = result.value("rebuild_attempts", 0) + attempts;
          if (second_loss && !recovered && attempts > 1 && !result.contains("second_loss_noticed_in")) {
            result["second_loss_noticed_in"] = "the rebuild";
          }
          if (second_loss && !recovered && lost.size() > known.size() && !result.contains("second_loss_noticed_in")) {
            result["second_loss_noticed_in"] = "the agreement";
          }
          if (!second_loss) {
            expect(lost == victims, "agreed on ranks " + rank_set(lost) + ", expected " + rank_set(victims));
          }
        } catch (const br::RebuildError& e) {
          if (!second_loss) expect(false, std::string("rebuild_without threw: ") + e.what());
          if (!result.contains("second_loss_noticed_in")) result["second_loss_noticed_in"] = "the rebuild";
          refusal = e.what();
          break;
        }
        MPI_Comm_set_errhandler(survivors, MPI_ERRORS_RETURN);
        rebuilt_at = wall_seconds();
        if (no_checkpoint) {
          std::string error = "(no error)";
          try {
            (void)runtime.recover(survivors, lost);
          } catch (const br::RecoveryError& e) {
            error = e.what();
          }
          const std::string expected = "recover: checkpoints are off (RuntimeOptions::checkpoint.enabled), so no "
                                       "copy of the tiles of ranks " + rank_set(victims) + " exists";
          expect(error == expected, "recover: \"" + error + "\", expected \"" + expected + "\"");
          result["refused"] = error;
          job = survivors;
          refused_without_checkpoints = true;
          break;
        }
        // Ranks r and r + 1 on nodes of their own: r + 1 is r's buddy (docs/recovery.md,
        // "Buddies"). A first recovery without the first victim and its buddy must be refused.
        const int first_victim = victims.empty() ? -1 : victims.front();
        const int buddy = (first_victim + 1) % count;
        const bool buddy_lost_too = second_loss && !recovered &&
                                    std::binary_search(lost.begin(), lost.end(), first_victim) &&
                                    std::binary_search(lost.begin(), lost.end(), buddy);
        const std::string buddy_refusal = "rank " + std::to_string(first_victim) + " and its buddy rank " +
                                          std::to_string(buddy) + " are both lost";
        try {
          recovery = runtime.recover(survivors, lost);
          expect(!buddy_lost_too, "recovered without ranks " + rank_set(lost) + ": " + buddy_refusal);
          expect(buddies_lost_together.empty(),
                 "recovered without ranks " + rank_set(lost) + " although " + buddies_lost_together);
          job = survivors;
          MPI_Comm old = before;
          MPI_Comm_free(&old);  // freed, never disconnected: it holds the dead
          break;
        } catch (const br::LostDuringRecovery& e) {
          if (!second_loss) throw;
          if (!result.contains("second_loss_noticed_in")) result["second_loss_noticed_in"] = "recover";
          const bool among_survivors = std::none_of(e.lost_ranks().begin(), e.lost_ranks().end(), [&](int r) {
            return std::binary_search(lost.begin(), lost.end(), r);
          });
          expect(among_survivors, "recover named ranks " + rank_set(e.lost_ranks()) +
                                      " lost, some of them lost before: " + rank_set(lost));
          known = lost;  // `survivors` is left unfreed: messages may still arrive on it
          known.insert(known.end(), e.lost_ranks().begin(), e.lost_ranks().end());
          std::sort(known.begin(), known.end());
        } catch (const br::RecoveryError& e) {
          if (!second_loss && !buddies_lost_together.empty()) {
            // Two victims, one the other's buddy: no copy of the first's checkpoint is left.
            refusal = e.what();
            const std::string expected_end = ": " + buddies_lost_together;
            const std::string expected_start = "recover: ranks " + rank_set(victims) + " lost in iteration ";
            expect(refusal.rfind(expected_start, 0) == 0 && refusal.size() >= expected_end.size() &&
                       refusal.compare(refusal.size() - expected_end.size(), expected_end.size(), expected_end) == 0,
                   "recover refused with \"" + refusal + "\", expected \"" + expected_start + "N" + expected_end +
                       "\"");
            job = survivors;
            break;
          }
          if (!second_loss) throw;
          if (!result.contains("second_loss_noticed_in")) result["second_loss_noticed_in"] = "recover";
          refusal = e.what();
          expect(!buddy_lost_too || refusal.find(buddy_refusal) != std::string::npos,
                 "recover without ranks " + rank_set(lost) + " refused with \"" + refusal + "\", not \"" +
                     buddy_refusal + "\"");
          job = survivors;
          break;
        }
      }
      if (refused_without_checkpoints || !refusal.empty()) break;
      const double recovered_at = wall_seconds();
      if (!recovered) write_file(dir / ("recovered." + std::to_string(old_rank)), "1");
      std::vector<int> remaining;
      for (int r = 0; r < static_cast<int>(old_of.size()); ++r) {
        if (std::find(lost.begin(), lost.end(), r) == lost.end()) {
          remaining.push_back(old_of[static_cast<std::size_t>(r)]);
        } else {
          lost_in_all.push_back(old_of[static_cast<std::size_t>(r)]);
        }
      }
      old_of = remaining;
      std::sort(lost_in_all.begin(), lost_in_all.end());
      const int expected_rank = static_cast<int>(std::find(old_of.begin(), old_of.end(), old_rank) - old_of.begin());
      expect(recovery.new_rank == expected_rank && recovery.new_size == static_cast<int>(old_of.size()),
             "recover: rank " + std::to_string(recovery.new_rank) + " of " + std::to_string(recovery.new_size) +
                 ", expected " + std::to_string(expected_rank) + " of " + std::to_string(old_of.size()));
      // A checkpoint every K boundaries: at most the iteration in progress and the K before it
      // are redone (the K-th when the death came while that checkpoint's copies travelled).
      expect(recovery.iteration <= done && recovery.iteration >= done - checkpoint_every &&
                 (recovered || recovery.iteration >= kill_after - checkpoint_every),
             "rolled back to iteration " + std::to_string(recovery.iteration) + " with " +
                 std::to_string(done) + " done");
      // Who rolled back and how far, as the recovery reports it.
      const int ranks_before = static_cast<int>(old_of.size() + lost.size());
      std::vector<int> everyone(static_cast<std::size_t>(ranks_before));
      for (int r = 0; r < ranks_before; ++r) everyone[static_cast<std::size_t>(r)] = r;
      // The interrupted iteration is the one after the last any survivor completed: this one's
      // abandoned iteration, or the next when the loss hit its end and another got past it.
      const long interrupted = recovery.interrupted_iteration;
      expect((interrupted == report.iteration || interrupted == report.iteration + 1) &&
                 recovery.iterations_redone == interrupted - 1 - recovery.iteration,
             "recover: interrupted iteration " + std::to_string(interrupted) + " and " +
                 std::to_string(recovery.iterations_redone) + " iterations redone, abandoned iteration " +
                 std::to_string(report.iteration) + ", rolled back to " + std::to_string(recovery.iteration));
      // With teams (more than one), only the teams that lost a rank roll back, with the team of
      // each lost rank's buddy (it takes the lost rank's tiles); every rank when the loss hit
      // an iteration's end (the survivors then completed different iteration counts).
      std::vector<int> expected_rolled_back = everyone;
      const bool logging_between_teams = team_size > 0 && team_size < count;
      const std::string global_because = recovery.rolled_back_globally_because;
      if (logging_between_teams && !recovered) {
        const bool at_an_iterations_end = global_because.rfind("the survivors completed ", 0) == 0;
        expect(global_because.empty() || at_an_iterations_end,
               "recover: rolled back globally because \"" + global_because + "\"");
        if (!at_an_iterations_end) {
          std::set<int> teams;
          for (const int r : lost) {
            teams.insert(team_of(r));
            if (first_buddies.size() == static_cast<std::size_t>(count)) {
              teams.insert(team_of(first_buddies[static_cast<std::size_t>(r)]));
            }
          }
          expected_rolled_back.clear();
          for (int r = 0; r < ranks_before; ++r) {
            if (teams.count(team_of(r)) > 0) expected_rolled_back.push_back(r);
          }
        }
      } else if (team_size > 0 && !recovered) {
        expect(global_because == "message logging between teams is off",
               "recover: one team rolled back globally because \"" + global_because + "\"");
      }
      if (!recovered || !logging_between_teams) {
        expect(recovery.ranks_rolled_back == expected_rolled_back,
               "recover: ranks " + rank_set(recovery.ranks_rolled_back) + " rolled back, expected " +
                   rank_set(expected_rolled_back));
      }
      const bool rolled_back_here = std::binary_search(recovery.ranks_rolled_back.begin(),
                                                       recovery.ranks_rolled_back.end(), recovery.old_rank);
      // Every GEMM rank holds tiles of A and B that every other rank reads; a Cholesky or a
      // bspgemm rank may hold nothing a rank rolling back takes (checked from the task graph
      // below).
      expect(rolled_back_here || recovery.log_bytes_for_replay > 0 || recovery.iterations_redone == 0 ||
                 job_kind != Job::gemm,
             "recover: rank " + std::to_string(old_rank) + " kept its state with nothing in its log for the replay");
      if (!recovered) {  // the teams of the job as it started (a recovery makes them anew)
        first_rolled_back = recovery.ranks_rolled_back;
        window_first = recovery.iteration + 1;
        window_last = recovery.interrupted_iteration - 1;
        result["ranks_rolled_back"] = recovery.ranks_rolled_back;
        result["log_bytes_for_replay"] = recovery.log_bytes_for_replay;
        result["rolled_back_globally_because"] = recovery.rolled_back_globally_because;
        std::set<int> teams_before;
        for (const int r : expected_rolled_back) teams_before.insert(team_of(r));
        const std::vector<int> expected_teams(teams_before.begin(), teams_before.end());
        expect(recovery.teams_rolled_back == expected_teams, "recover: teams " + rank_set(recovery.teams_rolled_back) +
                                                                 " rolled back, expected " + rank_set(expected_teams));
        first_iterations_redone = recovery.iterations_redone;
        // With teams the launcher kills in the iteration after the one after a checkpoint:
        // at least that one is redone, so the replay is exercised.
        expect(team_size == 0 || recovery.iterations_redone >= 1,
               "recover: " + std::to_string(recovery.iterations_redone) +
                   " iterations redone after rolling back to " + std::to_string(recovery.iteration) + " (killed after " + std::to_string(kill_after) +
                   "), expected at least 1");
      }
      expect(!runtime.recoveries().empty() && runtime.recoveries().back().iteration == recovery.iteration,
             "Runtime::recoveries() does not end with this recovery");
      if (!recovered && rolled_back_here && first_buddies.size() == static_cast<std::size_t>(count)) {
        // The tiles it installs: its own copy's and its lost wards', as the job started (nothing
        // moves a tile before the first recovery). A rank may hold none: bspgemm's rank 4 on 8
        // ranks, which restores nothing when the loss at an iteration's end rolls back every rank.
        std::uint64_t wards_tiles = 0;
        for (const int v : lost) {
          const bool ward = first_buddies[static_cast<std::size_t>(v)] == old_rank;
          wards_tiles += ward ? tiles_held_at_start[static_cast<std::size_t>(v)] : 0;
        }
        const std::uint64_t own_tiles = tiles_held_at_start[static_cast<std::size_t>(old_rank)];
        expect(recovery.tiles_restored == own_tiles + wards_tiles && recovery.tiles_taken_over == wards_tiles,
               "rank " + std::to_string(old_rank) + " rolled back to iteration " + std::to_string(recovery.iteration) +
                   " and restored " + std::to_string(recovery.tiles_restored) + " tiles, " +
                   std::to_string(recovery.tiles_taken_over) + " of them taken over; expected its " +
                   std::to_string(own_tiles) + " and its lost wards' " + std::to_string(wards_tiles) + " (buddies " +
                   rank_set(first_buddies) + ", lost " + rank_set(lost) + ")");
      } else {
        expect(recovery.tiles_restored > 0 || !rolled_back_here, "no tile restored");
      }
      result["recoveries"] = result.value("recoveries", 0) + 1;
      result["lost"] = lost_in_all;
      if (recovered) {
        tasks_after_recovery.clear();  // counted from the last recovery on
        window_last = window_first - 1;  // the replay checks are the first recovery's
        result["second_rolled_back_to"] = recovery.iteration;
        result["second_iterations_redone"] = done - recovery.iteration;
        result["second_recover_seconds"] = recovery.seconds;
        result["second_recover_checkpoint_seconds"] = recovery.checkpoint_seconds;
        done = static_cast<int>(recovery.iteration);
        continue;
      }
      // Written by the launcher right after the kill, for the times only.
      while (!fs::exists(dir / "killed")) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const double kill_time = std::stod(read_file(dir / "killed"));
      result["abandoned_iteration"] = report.iteration;
      result["rolled_back_to"] = recovery.iteration;
      result["iterations_redone"] = done - recovery.iteration;
      result["tiles_restored"] = recovery.tiles_restored;
      result["tiles_taken_over"] = recovery.tiles_taken_over;
      result["tiles_regridded"] = recovery.tiles_regridded;
      result["kill_to_abandoned_seconds"] = abandoned_at - kill_time;
      result["kill_to_rebuilt_seconds"] = rebuilt_at - kill_time;
      result["kill_to_recovered_seconds"] = recovered_at - kill_time;
      result["rebuild_seconds"] = rebuilt.total_seconds;
      result["recover_seconds"] = recovery.seconds;
      result["recover_checkpoint_seconds"] = recovery.checkpoint_seconds;
      result["kill_time"] = kill_time;
      done = static_cast<int>(recovery.iteration);
      recovered = true;
      continue;
    }
    if (done == 0) first_buddies = runtime.checkpoint_buddies();
    if (done == 0 && buddies_in_rings && first_buddies.size() == static_cast<std::size_t>(count)) {
      for (int r = 0; r < count; ++r) {
        const int buddy = first_buddies[static_cast<std::size_t>(r)];
        expect(buddy == ring_buddy(r), "rank " + std::to_string(r) + "'s buddy is rank " + std::to_string(buddy) +
                                           ", expected rank " + std::to_string(ring_buddy(r)) +
                                           " (the next of its team's ring)");
      }
    }
    if (done == 0 && victims.size() > 1 && !buddies_in_rings && first_buddies.size() == static_cast<std::size_t>(count)) {
      // Victims whose buddies are survivors, and differ: each lost rank's tiles go to a rank of
      // its own.
      std::set<int> buddies_of_victims;
      for (const int v : victims) {
        const int buddy = first_buddies[static_cast<std::size_t>(v)];
        buddies_of_victims.insert(buddy);
        expect(!std::binary_search(victims.begin(), victims.end(), buddy),
               "victim " + std::to_string(v) + "'s buddy is rank " + std::to_string(buddy) + ", another victim");
      }
      expect(buddies_of_victims.size() == victims.size(),
             "the victims " + rank_set(victims) + " share a buddy: " + rank_set(first_buddies));
    }
    if (done == 0 && team_size > 1 && team_size < count) {
      // The first checkpoint's buddies: each rank's is of its own team on another node.
      const std::vector<int> buddies = runtime.checkpoint_buddies();
      for (int r = 0; r < count && buddies.size() == static_cast<std::size_t>(count); ++r) {
        const int buddy = buddies[static_cast<std::size_t>(r)];
        expect(buddy >= 0 && team_of(buddy) == team_of(r), "rank " + std::to_string(r) + "'s buddy " +
                                                               std::to_string(buddy) + " is not of its team");
      }
      expect(buddies.size() == static_cast<std::size_t>(count), "no buddies after the first iteration");
    }
    if (recovered) {
      if (!result.contains("kill_to_progress_seconds")) {
        result["kill_to_progress_seconds"] = seconds_from(result["kill_time"].get<double>());
      }
      tasks_after_recovery[report.iteration] = report.local.tasks_executed;
      // The iterations the teams that rolled back re-run alone: the others run no task and
      // leave their tiles as they are.
      const bool in_window = report.iteration >= window_first && report.iteration <= window_last &&
                             first_rolled_back.size() < old_of.size() + lost_in_all.size();
      if (in_window) steals_in_window += static_cast<long>(report.local.steal.tasks_stolen);
      expect(in_window == !report.replaying_ranks.empty(),
             "iteration " + std::to_string(report.iteration) + (in_window ? " not" : "") + " replayed by teams");
      expect(report.ran_here() || report.local.tasks_executed == 0,
             "rank " + std::to_string(old_rank) + " kept its state but ran " +
                 std::to_string(report.local.tasks_executed) + " tasks in iteration " + std::to_string(report.iteration));
    }
    if (report.ran_here()) evolve(a, done, job_kind);
    ++done;
    if (old_rank == 0) write_file(dir / "progress", std::to_string(done));
    if (old_rank == 0 && team_size > 0 && !recovered && !victims.empty() && done == kill_after) {
      // With teams the victims must die in the next iteration, the one after the one after a
      // checkpoint (the launcher). Rank 0 starts it only once the launcher has killed them:
      // the others wait in it for rank 0's part, so the kill falls there however late the
      // launcher gets to run on a loaded machine.
      const auto until = Clock::now() + kRebuildTimeout;
      while (!fs::exists(dir / "killed") && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  if (!refusal.empty()) {
    // The job could not recover (from the second loss, or from victims that held each other's
    // only copies): it said why, and still ends.
    expect(names_phase_and_ranks(refusal), "a refusal that names no phase or ranks: " + refusal);
    expect(!loss_after_recovery, "a loss in the first iteration after the recovery was refused: " + refusal);
    result["refused"] = refusal;
    owned_runtime.reset();
    const auto t = Clock::now();
    MPI_Comm_free(&job);
    MPI_Finalize();
    result["finalize_seconds"] = std::chrono::duration<double>(Clock::now() - t).count();
    watchdog.disarm();
    result["verified"] = true;  // nothing to verify: the job could not recover, and said why
    result["result"] = failures == 0 ? "PASS" : "FAIL: " + first_failure;
    write_file(dir / ("result." + std::to_string(old_rank)), result.dump());
    return failures == 0 ? 0 : 1;
  }
  if (no_checkpoint) {
    owned_runtime.reset();
    MPI_Comm_free(&job);
    MPI_Finalize();
    watchdog.disarm();
    expect(result.contains("refused"), "no loss noticed");
    result["verified"] = true;  // nothing to verify: the job could not recover, and said why
    result["result"] = failures == 0 ? "PASS" : "FAIL: " + first_failure;
    write_file(dir / ("result." + std::to_string(old_rank)), result.dump());
    return failures == 0 ? 0 : 1;
  }
  expect(done == kIterations, "finished " + std::to_string(done) + " iterations");
  expect(recovered == !victims.empty(), recovered ? "recovered without a kill" : "no loss noticed");
  if (second_loss) {
    expect(lost_in_all == all_victims, "recovered without ranks " + rank_set(lost_in_all) + ", expected " +
                                           rank_set(all_victims));
  }

  // Every iteration after the recovery ran each task exactly once over the survivors.
  MPI_Comm_size(job, &size);
  MPI_Comm_rank(job, &rank);
  // The prediction of the work redone (tasks_rerun(), team_replay.hpp): the tasks of the ranks
  // that rolled back, once per iteration of the window (each rank's tasks as the job
  // started), a lost rank's run on the rank that took its tiles.
  const std::vector<long>& per_rank = tasks_per_rank;
  const std::vector<long> predicted_rerun =
      recovered && !second_loss
          ? br::tasks_rerun(per_rank, first_rolled_back, br::replay_window(window_first - 1, window_last + 1))
          : std::vector<long>(per_rank.size(), 0);
  long predicted_in_window = 0;
  for (const int r : first_rolled_back) predicted_in_window += per_rank[static_cast<std::size_t>(r)];
  std::vector<long> mine, expected_tasks;
  for (const auto& [iteration, tasks] : tasks_after_recovery) {
    mine.push_back(static_cast<long>(tasks));
    const bool in_window = iteration >= window_first && iteration <= window_last && !second_loss;
    expected_tasks.push_back(in_window ? predicted_in_window : tasks_per_iteration);
  }
  long iterations_after = static_cast<long>(mine.size()), fewest = 0;
  MPI_Allreduce(&iterations_after, &fewest, 1, MPI_LONG, MPI_MIN, job);
  expect(fewest == iterations_after, "survivors completed different iteration counts after recovery");
  std::vector<long> summed(mine.size(), 0);
  MPI_Allreduce(mine.data(), summed.data(), static_cast<int>(mine.size()), MPI_LONG, MPI_SUM, job);
  long wrong = 0;
  for (std::size_t i = 0; i < summed.size(); ++i) wrong += summed[i] != expected_tasks[i] ? 1 : 0;
  expect(wrong == 0, std::to_string(wrong) + " iterations after recovery did not run exactly " +
                         std::to_string(tasks_per_iteration) + " tasks (" + std::to_string(predicted_in_window) +
                         " in those the teams that rolled back re-ran alone)");
  result["iterations_after_recovery"] = iterations_after;
  // The work redone: the survivors re-ran each task of the iterations redone exactly once.
  long rerun = static_cast<long>(runtime.stats().tasks_rerun), rerun_summed = 0;
  MPI_Allreduce(&rerun, &rerun_summed, 1, MPI_LONG, MPI_SUM, job);
  if (recovered && !second_loss) {
    long predicted_summed = 0;
    for (const long tasks : predicted_rerun) predicted_summed += tasks;
    expect(rerun_summed == predicted_summed && predicted_summed == predicted_in_window * first_iterations_redone,
           "the survivors re-ran " + std::to_string(rerun_summed) + " tasks, expected " +
               std::to_string(predicted_in_window) + " x " + std::to_string(first_iterations_redone));
    // A rank that kept its state re-ran nothing; one that rolled back re-ran some of the
    // window's tasks where it owed some: its own, and those of the lost ranks it was the
    // buddy of (with stealing inside the replaying ranks, not exactly those; a rank that owed
    // none, holding no tasks, may steal some).
    const bool rolled_back_here =
        std::binary_search(first_rolled_back.begin(), first_rolled_back.end(), old_rank);
    long owed_here = predicted_rerun[static_cast<std::size_t>(old_rank)];
    for (const int v : lost_in_all) {
      const bool ward = first_buddies.size() == static_cast<std::size_t>(count) &&
                        first_buddies[static_cast<std::size_t>(v)] == old_rank;
      owed_here += ward ? predicted_rerun[static_cast<std::size_t>(v)] : 0;
    }
    expect(rolled_back_here ? owed_here == 0 || rerun > 0 : rerun == 0,
           "rank " + std::to_string(old_rank) +
               (rolled_back_here ? " rolled back, owed " + std::to_string(owed_here) + " tasks and re-ran "
                                 : " kept its state but re-ran ") +
               std::to_string(rerun) + " tasks");
  }
  // Per rank (old numbers), as the survivors counted them; -1 for a rank lost.
  std::vector<long> rerun_by_new_rank(static_cast<std::size_t>(size), 0);
  MPI_Allgather(&rerun, 1, MPI_LONG, rerun_by_new_rank.data(), 1, MPI_LONG, job);
  std::vector<long> rerun_by_old_rank(static_cast<std::size_t>(count), -1);
  for (std::size_t r = 0; r < old_of.size() && r < rerun_by_new_rank.size(); ++r) {
    rerun_by_old_rank[static_cast<std::size_t>(old_of[r])] = rerun_by_new_rank[r];
  }
  result["tasks_rerun_by_rank"] = rerun_by_old_rank;
  result["tasks_rerun_predicted"] = predicted_rerun;
  // The replay's messages: served from the logs of the ranks that kept their state, only.
  const auto replayed = static_cast<long>(runtime.stats().message_log.bytes_replayed);
  result["log_bytes_replayed_here"] = replayed;
  if (recovered && !second_loss) {
    const bool kept_state = !std::binary_search(first_rolled_back.begin(), first_rolled_back.end(), old_rank);
    // Every GEMM rank holds tiles of A and B that each other rank reads; a Cholesky or a
    // bspgemm rank may hold nothing a rank rolling back takes (predicted below).
    expect(kept_state ? replayed > 0 || job_kind != Job::gemm : replayed == 0,
           "rank " + std::to_string(old_rank) + (kept_state ? " kept its state" : " rolled back") + " and served " +
               std::to_string(replayed) + " bytes from its log to the replay");
    if (job_kind != Job::gemm && first_buddies.size() == static_cast<std::size_t>(count)) {
      // Per iteration redone, from the task graph as the job started (replay_prediction.hpp):
      // the collection tiles a rank that kept its state serves, each once to each rank now
      // running a task of a rank that rolled back that reads it (a lost rank's tasks run on
      // its buddy), and the task outputs the ranks that kept their state send again, one
      // activation per producer, slot and rank now running a taker. Where the job put the
      // tasks unless a rank re-running the window stole one; then between each tile once and
      // once per rank re-running. The outputs are compared summed over the ranks that kept
      // their state: stealing inside their teams before the loss moves a producer to a rank
      // of its team, which logged the output in its place.
      const long tile_bytes = static_cast<long>(kTile) * kTile * static_cast<long>(sizeof(double));
      const long redone = first_iterations_redone;
      const TilesServed tiles =
          kept_state ? tiles_served(tile_reads, old_rank, first_rolled_back, lost_in_all, first_buddies) : TilesServed{};
      const long outputs = outputs_replayed(task_outputs, first_rolled_back, lost_in_all, first_buddies);
      std::array<long, 5> here{steals_in_window, kept_state ? replayed : 0L, tiles.as_placed, tiles.fewest, tiles.most};
      std::array<long, 5> all{};
      MPI_Allreduce(here.data(), all.data(), static_cast<int>(here.size()), MPI_LONG, MPI_SUM, job);
      const long steals = all[0], served_by_kept = all[1];
      const bool as_placed = steals == 0;
      result["tasks_stolen_in_window"] = steals;
      result["log_bytes_replayed_predicted"] = tiles.as_placed * tile_bytes * redone;
      result["log_outputs_replayed_predicted"] = outputs * redone;
      result["log_bytes_replayed_by_ranks_that_kept_state"] = served_by_kept;
      const auto bytes = [&](long tile_count) { return tile_count * tile_bytes * redone; };
      if (outputs == 0) {  // what this rank served is tiles only
        const bool within = as_placed ? replayed == bytes(tiles.as_placed)
                                      : replayed >= bytes(tiles.fewest) && replayed <= bytes(tiles.most);
        expect(within, "rank " + std::to_string(old_rank) + " served " + std::to_string(replayed) +
                           " bytes from its log, predicted " +
                           (as_placed ? std::to_string(tiles.as_placed) + " tiles"
                                      : std::to_string(tiles.fewest) + " to " + std::to_string(tiles.most) +
                                            " tiles (" + std::to_string(steals) + " tasks stolen in the window)") +
                           " x " + std::to_string(tile_bytes) + " bytes x " + std::to_string(redone) +
                           " iterations redone");
      }
      const long fewest_bytes = bytes(outputs + (as_placed ? all[2] : all[3]));
      const long most_bytes = bytes(outputs + (as_placed ? all[2] : all[4]));
      expect(served_by_kept >= fewest_bytes && served_by_kept <= most_bytes,
             "the ranks that kept their state served " + std::to_string(served_by_kept) +
                 " bytes from their logs, predicted " + std::to_string(outputs) + " task outputs and " +
                 (as_placed ? std::to_string(all[2]) : std::to_string(all[3]) + " to " + std::to_string(all[4])) +
                 " tiles x " + std::to_string(tile_bytes) + " bytes x " + std::to_string(redone) +
                 " iterations redone");
    }
  }
  // The receiver's check (ReceivedVersions): with the sends to the ranks that kept their state
  // left in, each such rank drops every task output a rank replaying sent it again, one
  // activation per output of a task of a rank that rolled back with a consumer or a written
  // tile here, per iteration redone; without them nobody drops anything.
  const auto copies_dropped = static_cast<long>(runtime.stats().message_log.copies_dropped);
  result["copies_dropped_here"] = copies_dropped;
  if (recovered && !second_loss) {
    const bool kept_state = !std::binary_search(first_rolled_back.begin(), first_rolled_back.end(), old_rank);
    const long copies_predicted =
        replay_to_kept && kept_state
            ? copies_dropped_per_iteration(task_outputs, first_rolled_back, old_rank) * first_iterations_redone
            : 0;
    result["copies_dropped_predicted"] = copies_predicted;
    expect(copies_dropped == copies_predicted,
           "rank " + std::to_string(old_rank) + (kept_state ? " kept its state" : " rolled back") + " and dropped " +
               std::to_string(copies_dropped) + " copies of task outputs it held, predicted " +
               std::to_string(copies_predicted) + (replay_to_kept ? " (the replay sent to it)" : ""));
    // Per failure, as this rank counted them: the bytes its log served and the copies it dropped.
    const br::RecoveryReport& first = runtime.recoveries().front();
    expect(first.bytes_replayed == static_cast<std::uint64_t>(replayed) &&
               first.copies_dropped == static_cast<std::uint64_t>(copies_dropped),
           "the recovery counts " + std::to_string(first.bytes_replayed) + " bytes replayed and " +
               std::to_string(first.copies_dropped) + " copies dropped, the rank " + std::to_string(replayed) +
               " and " + std::to_string(copies_dropped));
  }
  result["tasks_rerun_here"] = rerun;
  result["tasks_rerun"] = rerun_summed;
  // The examples' JSON report (runtime_extra, on every rank): per failure, the log bytes kept
  // for the replay, summed over the ranks, as each survivor's recovery counted them; none
  // where every rank rolled back.
  const nlohmann::json extra = be::runtime_extra(runtime);
  if (recovered && !second_loss) {
    unsigned long long kept_here = runtime.recoveries().front().log_bytes_for_replay, kept_summed = 0;
    MPI_Allreduce(&kept_here, &kept_summed, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, job);
    const nlohmann::json reported = extra.value("recoveries", nlohmann::json::array());
    const auto in_report = reported.size() == 1 ? reported[0].value("log_bytes_for_replay", -1LL) : -1LL;
    const bool every_rank = first_rolled_back.size() == old_of.size() + lost_in_all.size();
    expect(in_report == static_cast<long long>(kept_summed) &&
               (every_rank ? kept_summed == 0 : kept_summed > 0),
           "the JSON report's recoveries carry " + std::to_string(in_report) + " log bytes kept for the replay (" +
               std::to_string(reported.size()) + " recoveries), the survivors kept " + std::to_string(kept_summed) +
               (every_rank ? " with every rank rolled back" : " with ranks " + rank_set(first_rolled_back) +
                                                                  " rolled back"));
    result["log_bytes_for_replay_reported"] = in_report;
    // And the bytes the replay served and the copies dropped, summed over the ranks.
    const long long counted[2] = {replayed, static_cast<long long>(runtime.stats().message_log.copies_dropped)};
    long long summed_counts[2] = {0, 0};
    MPI_Allreduce(counted, summed_counts, 2, MPI_LONG_LONG, MPI_SUM, job);
    const auto served_in_report = reported.size() == 1 ? reported[0].value("bytes_replayed", -1LL) : -1LL;
    const auto dropped_in_report = reported.size() == 1 ? reported[0].value("copies_dropped", -1LL) : -1LL;
    expect(served_in_report == summed_counts[0] && dropped_in_report == summed_counts[1],
           "the JSON report's recoveries carry " + std::to_string(served_in_report) + " bytes replayed and " +
               std::to_string(dropped_in_report) + " copies dropped, the ranks counted " +
               std::to_string(summed_counts[0]) + " and " + std::to_string(summed_counts[1]));
    result["bytes_replayed_reported"] = served_in_report;
    result["copies_dropped_reported"] = dropped_in_report;
  }

  const std::vector<double> a_all = a.gather_to_root(job);
  const std::vector<double> c_all = c.gather_to_root(job);
  if (rank == 0) {
    const auto [a_ref, c_ref] = reference(job_kind);
    const std::size_t a_wrong = differing(a_all, a_ref), c_wrong = differing(c_all, c_ref);
    expect(a_wrong == 0, std::to_string(a_wrong) + " elements of A differ from a run without failure");
    expect(c_wrong == 0, std::to_string(c_wrong) + (cholesky_job ? " elements of L" : " elements of C") +
                             " differ from a run without failure");
    result["verified"] = a_wrong == 0 && c_wrong == 0;
  }
  if (stopped_victims) {
    result["told_lost"] = br::loss_notices().settled_through();
    expect(br::loss_notices().settled_through() == 1 && br::loss_notices().ranks_lost(count).empty(),
           "failure 1 not settled by the rebuild: settled through " +
               std::to_string(br::loss_notices().settled_through()) + ", ranks still named " +
               rank_set(br::loss_notices().ranks_lost(count)));
    write_file(dir / ("finishing." + std::to_string(old_rank)), "1");  // the stopped may go now
  }
  if (old_rank == deaf_rank) {
    result["deaf_watch_receives"] = deaf_watch_receives();
    expect(deaf_watch_receives() > 0, "rank " + std::to_string(old_rank) + "'s watch posted no receive on the "
                                      "watch's tag: deaf_watch.cpp's tag is not the runtime's");
  }
  owned_runtime.reset();
  const auto t = Clock::now();
  MPI_Comm_free(&job);
  MPI_Finalize();
  result["finalize_seconds"] = std::chrono::duration<double>(Clock::now() - t).count();
  watchdog.disarm();
  result["result"] = failures == 0 ? "PASS" : "FAIL: " + first_failure;
  write_file(dir / ("result." + std::to_string(old_rank)), result.dump());
  return failures == 0 ? 0 : 1;
}

}  // namespace bellows::testing::recovery

int main(int argc, char** argv) {
  using namespace bellows::testing::recovery;
  if (argc == 6 && std::strcmp(argv[1], "--member") == 0) {
    return run_member(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), parse_victims(argv[5]));
  }
  // A last argument `ranks=N`: a job of N ranks instead of kDefaultRanks.
  int ranks = kDefaultRanks;
  if (argc >= 5 && std::sscanf(argv[argc - 1], "ranks=%d", &ranks) == 1) {
    --argc;
    if (ranks < 2) {
      std::fprintf(stderr, "recovery_tests: ranks=%d: a job needs 2 ranks or more\n", ranks);
      return 2;
    }
  }
  // Before it, `replay-to-kept`: the sender's filter of the replay off (with a teams mode).
  bool replay_to_kept = false;
  if (argc >= 5 && std::strcmp(argv[argc - 1], "replay-to-kept") == 0) {
    --argc;
    replay_to_kept = true;
  }
  // Before it, `deaf=R`: survivor R's watch hears nothing from MPI (with any mode, or alone).
  int deaf_rank = -1;
  if (argc >= 5 && std::sscanf(argv[argc - 1], "deaf=%d", &deaf_rank) == 1) {
    --argc;
    if (deaf_rank < 0) {
      std::fprintf(stderr, "recovery_tests: deaf=%d: not a rank\n", deaf_rank);
      return 2;
    }
  }
  const bool no_checkpoint = argc == 5 && std::strcmp(argv[4], "no-checkpoint") == 0;
  const bool cholesky_only = argc == 5 && std::strcmp(argv[4], "cholesky") == 0;
  SecondVictim second;
  bool second_loss = argc == 5 && std::sscanf(argv[4], "second=%d@%d", &second.rank, &second.delay_ms) == 2;
  bool cholesky_after = false;
  if (argc == 5 && !second_loss) {
    // after=R, or cholesky-after=R for the Cholesky job.
    cholesky_after = std::strncmp(argv[4], "cholesky-", 9) == 0;
    second.after_recovery = std::sscanf(argv[4] + (cholesky_after ? 9 : 0), "after=%d", &second.rank) == 1;
    second_loss = second.after_recovery;
    cholesky_after = cholesky_after && second_loss;
  }
  const bool stopped = argc == 5 && std::strcmp(argv[4], "stopped") == 0;
  // teams=T, or cholesky-teams=T / bspgemm-teams=T for the Cholesky or bspgemm job.
  const bool cholesky_prefix = argc == 5 && std::strncmp(argv[4], "cholesky-", 9) == 0;
  const bool bspgemm_prefix = argc == 5 && std::strncmp(argv[4], "bspgemm-", 8) == 0;
  const int prefix_length = cholesky_prefix ? 9 : bspgemm_prefix ? 8 : 0;
  int team_size = 0;
  const bool teams = argc == 5 && std::sscanf(argv[4] + prefix_length, "teams=%d", &team_size) == 1 && team_size > 0;
  const bool cholesky = cholesky_only || cholesky_after || (cholesky_prefix && teams);
  const bool bspgemm = bspgemm_prefix && teams;
  if (argc != 4 && !no_checkpoint && !cholesky && !second_loss && !stopped && !teams) {
    std::fprintf(stderr, "usage: recovery_tests MPIEXEC SELF VICTIMS [no-checkpoint|cholesky|second=RANK@MS|"
                         "[cholesky-]after=RANK|stopped|[cholesky-|bspgemm-]teams=T] [deaf=RANK] [replay-to-kept] [ranks=N] | "
                         "--member DIR INDEX COUNT VICTIMS\n");
    return 2;
  }
  const Job job = cholesky ? Job::cholesky : bspgemm ? Job::bspgemm : Job::gemm;
  if (replay_to_kept && !teams) {
    std::fprintf(stderr, "recovery_tests: replay-to-kept needs a teams mode ([cholesky-|bspgemm-]teams=T)\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2], argv[3], no_checkpoint, job, second, stopped, deaf_rank,
                      teams ? team_size : 0, replay_to_kept, ranks);
}
