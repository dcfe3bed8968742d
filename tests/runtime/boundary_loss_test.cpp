// A rank lost at an iteration boundary, while the ranks agree on the next resize request
// (ElasticJob::apply_pending, which ElasticSession::before_iteration calls): three ranks, each
// the only process of its own mpiexec, joined the way a Bellows job is (grow_by_accept /
// join_by_connect), each on a node of its own for the checkpoints' buddies, run a GEMM under
// ElasticJob with stealing on and a checkpoint at every boundary. Before iteration KILL_AT the
// victim SIGKILLs itself right where it would call apply_pending(), after a pause of 0 to 3 ms,
// so the survivors meet its death in their agreement's MPI_Iallreduce: posted before the death
// or while waiting in it. With `with-request` the victim has a request: it takes the
// agreement's first step (the MPI_Iallreduce that names it the requester) and dies before it
// broadcasts the request, so the survivors meet its death in their MPI_Ibcast instead. A survivor must not die of it (MPICH's
// fatal handler: "Fatal error in internal_Test ... Invalid communicator"): apply_pending gives
// the agreement up, the iteration that follows finds the lost rank, and the survivors recover
// (ElasticJob::recover), finish every iteration and gather a C bit-identical to a serial run.
// With `during-shrink` the first rank asks before iteration KILL_AT that rank 2 leave, and the
// victim (1, a rank that stays, or 2, the leaver) SIGKILLs itself when the shrink starts
// (on_resize_start), after the pause: the others meet its death while the shrink is carried out
// (prepare_shrink's hand-off of the tiles). They must give the shrink up alike (reported
// refused, with a reason that names the lost rank and the phase), every rank staying, then
// recover from the last checkpoint and finish on the two survivors, C bit-identical as above.
// With `after-expand` a fourth process, started with the others, joins when the first rank's
// request to expand by one is carried out before iteration KILL_AT (grow_by_accept on the job's
// port); with `after-shrink` the first rank asks instead that rank 2 leave. The victim (an old
// rank or, after an expand, the new rank 3) then SIGKILLs itself in the first task it runs of
// the first iteration after the resize, after the pause: that iteration's checkpoint, the first
// under the new buddies, completed before its tasks started, so the survivors must roll back to
// it (the boundary the resize ended at, one iteration redone), none refused, and finish on the
// job's size less one, C bit-identical as above. A rank that joined must agree on the next
// request at the boundary it joined through once the roll-back returns there.
// With `shrink-done` the same shrink as `after-shrink`, and rank 1 (a rank that stays) SIGKILLs
// itself once the shrink returned (the leaver gone, the job's communicator from before
// disconnected), before the first iteration after it: the others meet its death at that
// iteration's start. The survivors' first checkpoint under their buddies completed inside the
// shrink, before the leaver went, so rank 0 must roll back to it (the boundary of the shrink,
// one iteration redone), none refused, and finish alone, C bit-identical as above.
// With `expand-moves` the victim dies instead right after the expand, before the first
// iteration after it: the others meet its death at that iteration's start (its tile moves),
// before any checkpoint under the new buddies, and the copies from before the expand were
// dropped. Every survivor must be refused alike, with an error naming that phase (no copy of
// the tiles as they are exists), and still finalize and exit 0; never a hang.
// With `after-hand-off` rank 2 is asked to leave as with `during-shrink`, and the victim SIGKILLs
// itself once the hand-off of the tiles completed on every rank (on_tiles_handed_off, after the
// pause): the others meet its death in the shrink's numbers, the first collective after the
// hand-off's barrier. The leaver lost: the two ranks that stay hold its tiles already, so the
// shrink is finished without it (no resize refused, no recovery, nothing redone), every task of
// every iteration from the shrink on runs once over them, and C is bit-identical as above. Rank 1
// (a rank that stays) lost: the runtime still holds the copies from before the shrink and the
// tiles as they were, so rank 0 and the leaver give the shrink up alike (reported refused, the
// phase named, the hand-off undone), recover once from the checkpoint before the shrink (rank 1's
// tiles from its buddy, the leaver staying) and finish on the two of them: every task of every
// iteration from the one rolled back to runs once over them, and C is bit-identical as above.
// With `in-membership-shrink` the same shrink, and the victim (1 or 2) dies later, inside
// Membership::shrink, once the survivors' communicator is made (rank 1 took part), as it posts
// its next MPI_Ibarrier (caught through MPI's profiling interface): the leaver the one that
// confirms the survivors' communicator over the job's, rank 1 the one that ends the survivors'
// first checkpoint on theirs, before that confirmation. The others meet its death in those
// barriers, with the job's communicator not yet disconnected: everything said for
// `after-hand-off` then holds alike. With `in-confirming-barrier` the same shrink, and the victim
// (1, a rank that stays, or 2, the leaver) dies inside the barrier over every rank that confirms
// the survivors' communicator: it posts it (its first round goes out), waits 2 ms and SIGKILLs
// itself, so that in MPICH's dissemination barrier over 3 ranks some ranks pass it and others do
// not (rank 1 lost: the leaver, which needs rank 1's first round and rank 0's second, passes it,
// while rank 0, which needs rank 1's second round, does not). With `before-confirming-barrier`
// rank 1 dies as it would post that barrier, its word to every rank sent (Membership::shrink), so
// that the leaver's barrier fails and it must learn from the words of the ranks that stay. Every
// rank that stays passed the survivors' checkpoint barrier, the shrink's point of no return, so
// the shrink stands on every rank alive: the leaver leaves, and without rank 1 rank 0 rolls back
// to the checkpoint the ranks that stay completed inside the shrink (one iteration redone) and
// finishes alone, the shrink's record naming rank 1 lost after the hand-off; without the leaver
// ranks 0 and 1 finish the shrink, nothing recovered (rank 0's record names the leaver unless rank 0
// passed the barrier and had every word before it died). Before the shrink had its point of no return, `in-confirming-barrier`
// with rank 1 failed 5 runs of 5: the leaver left, and rank 0 gave the shrink up and waited for
// the leaver in agree_on_lost until its deadline (RebuildError 30 s after the start).
// With `two-leavers-after-hand-off` ranks 1
// and 2 are asked to leave, and rank 1 or 2 dies as with `after-hand-off`: the other leaver
// leaves and rank 0 finishes the shrink alone (no resize refused, no recovery, every task once
// per iteration on it, verified).
// With `during-expand` the first rank asks for an expand by one before iteration KILL_AT, as with
// `after-expand`, and the victim SIGKILLs itself during the expand, once the accept and merge are
// done and before it confirmed the grown communicator (ElasticJob's confirmation): rank 0 or 1 (a
// rank from before the expand) in the grow it takes part in, the joining rank 3 right after its join,
// before its setup. The expand must be given up alike on the ranks from before it (reported
// refused, naming the lost rank and the phase) and they carry on on their communicator. The joiner
// lost: nothing is recovered or redone, and the job finishes on its three ranks. Rank 0 or 1 lost: the
// joiner is sent away (ExpandGivenUp naming the lost rank; it finalizes and exits 0), and the
// others recover from the checkpoint before the expand as from a loss outside a resize (one
// iteration redone) and finish on two ranks. Either way every task of every iteration from the
// expand on ran once over the ranks, and C is bit-identical as above.
// With `during-expand-onto` the same expand, and the victim dies later, after every member
// confirmed the grown communicator: inside the runtime's mapping broadcasts (Runtime::expand_onto
// on rank 0 or 1, Runtime::join_expansion on the joining rank 3), right after it posted the first
// of them (MPI_Ibcast, caught through MPI's profiling interface), after the pause. The others meet
// its death in those broadcasts or in the barrier after them, with the communicator and the
// buddies' copies from before the expand still held: everything said for `during-expand` then
// holds alike, with the phase named "while the runtime moved onto the communicator of the expand"
// (the joiner is sent away by ElasticJob::attach instead of its constructor).
// `during-expand-dup`, `during-expand-probe` and `during-expand-nodes` end alike, the victim dying
// right after it posted another step of the runtime's setup on the grown communicator: its
// MPI_Comm_idup, the same-host probe's first MPI_Ibcast, or the nodes' MPI_Iallgather (rank 1 in
// expand_onto, the joining rank 3 in its Runtime constructor), so that the others meet its death
// in those steps, the joiner in its Runtime constructor. `during-expand-probe-teams` is
// `during-expand-probe` with messages logged between teams of one rank: the survivors of rank 1
// roll back by teams, and a survivor that keeps its state serves the replay from the entries its
// log held from before the expand (RecoveryReport::log_bytes_for_replay).
// BELLOWS_TEST_SEED fixes KILL_AT (2 to 5) and the pause; the seed is printed with the result.
// A fatal MPI error still ends a member as MPI's default handler would, but first prints its
// stack, which names the call that failed.
//
// The launcher passes when the victim's mpiexec reports the kill, every survivor's mpiexec
// exits 0 with a PASS result, and no process it started is left; it prints one JSON line and
// "boundary_loss: PASS".
//
//   boundary_loss_tests MPIEXEC SELF VICTIM
//       [with-request|during-shrink|after-hand-off|in-membership-shrink|in-confirming-barrier|
//        before-confirming-barrier|two-leavers-after-hand-off|
//        after-expand|after-shrink|shrink-done|expand-moves|during-expand|during-expand-onto|
//        during-expand-dup|during-expand-probe|during-expand-nodes|during-expand-probe-teams]
//                                                                 (the launcher; no MPI)
//   boundary_loss_tests --member DIR INDEX                        (under MPIEXEC -n 1)

#include "bellows/runtime/elastic_job.hpp"
#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/runtime.hpp"

#include <execinfo.h>
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
#include <string>
#include <thread>
#include <vector>

#include "bellows/kernels/tile_kernels.hpp"
#include "gemm_tasks.hpp"
#include "loss_test_gemm.hpp"
#include "separate_worlds.hpp"
#include "spawned_processes.hpp"
#include "tiled_gemm.hpp"
#include "watchdog.hpp"

namespace {

namespace fs = std::filesystem;
namespace br = bellows::runtime;
using bellows::test::expect_every_task_once_from;
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

constexpr int kRanks = 3;
constexpr int kIterations = 10;
constexpr int kEarliestKill = 2;  // the victim dies before an iteration in [kEarliestKill, kLatestKill]
constexpr int kLatestKill = 5;
constexpr auto kRecoverTimeout = std::chrono::seconds(10);
constexpr double kLauncherLimitSeconds = 60.0;  // below the ctest timeout
constexpr int kLeaver = 2;  // the rank a shrink removes in during-shrink and after-shrink
constexpr int kJoiner = kRanks;  // the process index (and rank) an expand adds in after-expand

/// in-membership-shrink: set on the victim once the hand-off's barrier passed; the next
/// MPI_Ibarrier it posts is Membership::shrink's, the one that confirms the survivors'
/// communicator (MPI_Ibarrier below).
std::atomic<bool> die_at_next_barrier{false};
/// in-confirming-barrier's victim: the barrier over the job's `kConfirmingSize` ranks that
/// confirms the survivors' communicator, which it posts and dies in `kConfirmingPauseUs` after.
std::atomic<bool> die_in_confirming_barrier{false};
/// before-confirming-barrier's victim: the same barrier, which it dies as it would post (its
/// word to every rank sent).
std::atomic<bool> die_before_confirming_barrier{false};
constexpr int kConfirmingSize = 3;
constexpr int kConfirmingPauseUs = 2000;
/// during-expand-onto and the modes like it: the step of the runtime's setup on the grown
/// communicator after whose posting the victim waits `posting_kill_pause_us` and dies, set once
/// the grown communicator is confirmed (the wrappers of MPI's profiling interface below): the
/// first mapping broadcast (an MPI_Ibcast of MPI_INT64_T; the same-host probe's broadcasts
/// bytes), the duplicate (MPI_Comm_idup), the same-host probe's first MPI_Ibcast (of MPI_BYTE),
/// or the nodes' gather (an MPI_Iallgather of MPI_CHAR; the probe's gathers bytes).
enum class SetupStep { none, mapping_broadcast, duplicate, probe_broadcast, node_gather };
std::atomic<SetupStep> die_after_posting{SetupStep::none};
std::atomic<int> posting_kill_pause_us{0};

/// The victim's end in the wrappers: after the pause, once it posted `step`.
void die_if_armed_for(SetupStep step) {
  if (die_after_posting.load() != step) return;
  bellows::test::die_after_pause(posting_kill_pause_us.load());
}

bellows::test::Checks checks{"boundary_loss_tests"};
void expect(bool ok, const std::string& what) { checks.expect(ok, what); }

/// C as a run without failure computes it.
std::vector<double> reference_c() { return bellows::test::serial_gemm_c(kGemmN, kGemmTile, kGemmSeed); }

// ------------------------------------------------------------------------------------ member

/// In place of MPI_ERRORS_ARE_FATAL: prints the MPI error and this rank's stack, which names
/// the call that failed, then aborts as the fatal handler would.
void abort_with_backtrace(MPI_Comm* comm, int* code, ...) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(*code, text, &length);
  std::fprintf(stderr, "boundary_loss_tests: pid %d: fatal MPI error: %s\nstack:\n", static_cast<int>(::getpid()), text);
  std::fflush(stderr);
  void* frames[64];
  ::backtrace_symbols_fd(frames, ::backtrace(frames, 64), STDERR_FILENO);
  MPI_Abort(*comm, *code);
}

MPI_Errhandler fatal_with_backtrace() {
  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_create_errhandler(abort_with_backtrace, &handler);
  return handler;
}

int run_member(const fs::path& dir, int index) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(45), "boundary loss member", index);
  const MPI_Errhandler fatal = fatal_with_backtrace();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, fatal);
  const int victim = read_int(dir / "victim");
  const int kill_at = read_int(dir / "kill_at");
  const int pause_us = read_int(dir / "pause_us");
  const bool with_request = fs::exists(dir / "with-request");
  const bool during_shrink = fs::exists(dir / "during-shrink");
  const bool expand_moves = fs::exists(dir / "expand-moves");
  // during-expand: the victim dies in the expand's join; during-expand-onto: in its attach. The
  // two end alike.
  const bool during_expand_join = fs::exists(dir / "during-expand");
  const bool with_teams = fs::exists(dir / "during-expand-probe-teams");
  const SetupStep onto_step = fs::exists(dir / "during-expand-onto")                    ? SetupStep::mapping_broadcast
                              : fs::exists(dir / "during-expand-dup")                   ? SetupStep::duplicate
                              : fs::exists(dir / "during-expand-probe") || with_teams   ? SetupStep::probe_broadcast
                              : fs::exists(dir / "during-expand-nodes")                 ? SetupStep::node_gather
                                                                                        : SetupStep::none;
  const bool during_expand_onto = onto_step != SetupStep::none;
  const bool during_expand = during_expand_join || during_expand_onto;
  const bool after_expand = fs::exists(dir / "after-expand") || expand_moves || during_expand;  // the same expand
  // shrink-done: the same shrink as after-shrink, the victim dying once it returned.
  const bool shrink_done = fs::exists(dir / "shrink-done");
  const bool after_shrink = fs::exists(dir / "after-shrink") || shrink_done;
  const bool in_membership_shrink = fs::exists(dir / "in-membership-shrink");
  const bool in_confirming_barrier = fs::exists(dir / "in-confirming-barrier");
  const bool before_confirming_barrier = fs::exists(dir / "before-confirming-barrier");
  // The two lose the victim between the hand-off's barrier and the survivors' communicator
  // held on every rank, and end alike.
  const bool two_leavers = fs::exists(dir / "two-leavers-after-hand-off");
  const bool after_hand_off =
      fs::exists(dir / "after-hand-off") || in_membership_shrink || in_confirming_barrier || before_confirming_barrier ||
      two_leavers;
  const std::vector<int> leavers = two_leavers ? std::vector<int>{1, kLeaver} : std::vector<int>{kLeaver};
  const bool victim_leaves = std::count(leavers.begin(), leavers.end(), victim) > 0;
  // A rank that stays, lost once every rank that stays passed the survivors' checkpoint
  // barrier (the shrink's point of no return): the shrink stands, and the others recover it
  // from that checkpoint.
  const bool lost_past_no_return = (in_confirming_barrier || before_confirming_barrier) && !victim_leaves;
  const bool joiner = index == kJoiner;  // after-expand: joins by the expand
  std::vector<int> payload;
  // The joiner connects once the expand is carried out (the first rank says so).
  auto membership = bellows::testing::join_member_job(dir, index, kRanks, payload, joiner ? dir / "expand" : fs::path());
  const int old_rank = membership.rank();
  write_file(dir / ("pid." + std::to_string(index)), std::to_string(::getpid()));
  write_file(dir / ("rank." + std::to_string(index)), std::to_string(old_rank));  // the join's order
  const int joined_at = joiner ? payload.at(0) : -1;
  if (during_expand_join && joiner && victim == kJoiner) {
    bellows::test::die_after_pause(pause_us);  // joined (accept and merge done), before its setup and its confirmation
  }
  int loop_iteration = 0;
  // during-expand, rank 0 or 1 lost: the joiner is sent away before it joins the job's work
  // (by the ElasticJob constructor in the join, by ElasticJob::attach in the attach).
  const auto sent_away = [&](const br::ExpandGivenUp& e) {
    std::printf("boundary_loss_tests: rank %d not joining: %s\n", old_rank, e.what());
    const std::string phase = during_expand_onto ? "while the runtime moved onto the communicator of the expand"
                                                 : "while the new ranks of the expand joined";
    const std::string expected = "expand to " + std::to_string(kRanks + 1) + " ranks given up: ranks {" +
                                 std::to_string(victim) + "} were lost " + phase;
    expect(during_expand && std::string(e.what()).rfind(expected, 0) == 0 &&
               std::string(e.what()).find("rank " + std::to_string(kJoiner) + ", which it was adding, leaves") !=
                   std::string::npos,
           std::string("sent away with \"") + e.what() + "\"; expected \"" + expected + " (...) rank " +
               std::to_string(kJoiner) + ", which it was adding, leaves\"");
    const nlohmann::json result{
        {"old_rank", old_rank}, {"sent_away", e.what()}, {"result", checks.failures == 0 ? "PASS" : "FAIL"}};
    write_file(dir / ("result." + std::to_string(old_rank)), result.dump());
    watchdog.disarm();
    MPI_Finalize();
    return checks.failures == 0 ? 0 : 1;
  };
  posting_kill_pause_us = pause_us;
  std::unique_ptr<br::ElasticJob> owned_job;
  try {
    owned_job = std::make_unique<br::ElasticJob>(
      std::move(membership),
      br::ElasticJob::Grow([&](br::Membership& m, int count, int join_iteration, std::uint64_t) -> const br::GrowReport& {
        if (!after_expand) throw std::logic_error("this test expands only with after-expand");
        if (m.rank() == 0) write_file(dir / "expand", "1");
        const std::array<int, 1> join{join_iteration};
        const br::GrowReport& grown = m.grow_by_accept(count, read_file(dir / "port"), join);
        if (during_expand_join && m.rank() == victim && loop_iteration == kill_at) {
          bellows::test::die_after_pause(pause_us);  // the accept and merge done, before the confirmation
        }
        return grown;
      }),
      joined_at);
  } catch (const br::ExpandGivenUp& e) {
    return sent_away(e);
  }
  br::ElasticJob& job = *owned_job;
  MPI_Comm_set_errhandler(job.communicator(), fatal);
  int refused = 0;
  std::string refusal, recovery_refusal;
  double refused_seconds = 0.0;  // how long the refused resize took here, from its start
  job.on_resize_refused([&](const br::ResizeEvent& e) {
    ++refused;
    refusal = e.reason;
    refused_seconds = e.seconds;
  });
  if (during_expand_onto && old_rank == victim && !joiner) {
    job.on_expand_confirmed([&](const br::ResizeEvent&) {
      if (loop_iteration == kill_at) die_after_posting = onto_step;  // in Runtime::expand_onto
    });
  }
  // In its Runtime constructor or join_expansion.
  if (during_expand_onto && joiner && victim == kJoiner) die_after_posting = onto_step;
  if (during_shrink && old_rank == victim) {
    job.on_resize_start([&](const br::ResizeEvent&) {
      if (loop_iteration != kill_at) return;
      bellows::test::die_after_pause(pause_us);  // as the shrink is carried out
    });
  }

  if (after_hand_off && old_rank == victim) {
    job.on_tiles_handed_off([&](const br::ResizeEvent&) {
      if (loop_iteration != kill_at) return;
      if (in_membership_shrink) {
        die_at_next_barrier = true;  // inside Membership::shrink, its confirming barrier
        return;
      }
      if (in_confirming_barrier) {
        die_in_confirming_barrier = true;  // once it posted the confirming barrier
        return;
      }
      if (before_confirming_barrier) {
        die_before_confirming_barrier = true;  // as it would post the confirming barrier
        return;
      }
      bellows::test::die_after_pause(pause_us);  // the hand-off's barrier passed on every rank
    });
  }

  std::atomic<bool> kill_in_next_task{false};
  bellows::test::TiledGemm gemm(kGemmN, kGemmTile, kRanks, old_rank, kGemmSeed);
  auto owned_runtime =
      std::make_unique<br::Runtime>(job.communicator(), bellows::test::loss_test_options(old_rank, with_teams ? 1 : 0));
  br::Runtime& runtime = *owned_runtime;
  try {
    job.attach(runtime);
  } catch (const br::ExpandGivenUp& e) {
    owned_runtime.reset();
    owned_job.reset();
    return sent_away(e);
  }
  bellows::test::add_gemm(runtime, gemm, kill_in_next_task, pause_us);

  nlohmann::json result{{"old_rank", old_rank}};
  int recoveries = 0, resized = 0;
  bool left = false;
  long rolled_back_to = -1, iterations_redone = -1;
  br::RecoveryReport last_recovery;
  std::vector<int> lost;
  std::map<long, std::uint64_t> tasks_run;  // runtime iteration -> tasks run here, the last run of each
  // The iteration before the resize and the first after it: its seconds, and what its
  // checkpoint added on this rank (posting, and waiting: at its end, or before its tasks).
  std::map<long, std::array<double, 2>> resize_iterations;
  for (int it = joiner ? joined_at : 0; it < kIterations;) {
    loop_iteration = it;
    if ((during_shrink || after_shrink || after_hand_off) && old_rank == 0 && it == kill_at && recoveries == 0) {
      job.request_shrink(leavers, "the test's shrink", 0);
    }
    if (after_expand && old_rank == 0 && it == kill_at && recoveries == 0) {
      job.request_expand(1, "the test's expand", 0);
    }
    if (old_rank == victim && it == kill_at && !with_request && !during_shrink && !after_expand && !after_shrink &&
        !after_hand_off) {
      bellows::test::die_after_pause(pause_us);  // where this rank would agree on the next request
    }
    if (old_rank == victim && it == kill_at && with_request) {
      // The agreement's first step as apply_pending() takes it (MPI_MIN over {the rank if it
      // has a request, else the size; minus the resizes so far}): this rank, the only one
      // with a request, is named the requester; then it dies before it broadcasts the request.
      std::array<int, 2> values{old_rank, 0};
      MPI_Request request = MPI_REQUEST_NULL;
      MPI_Iallreduce(MPI_IN_PLACE, values.data(), 2, MPI_INT, MPI_MIN, job.communicator(), &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
      bellows::test::die_after_pause(pause_us);
    }
    br::ElasticJob::Outcome outcome = br::ElasticJob::Outcome::none;
    try {
      outcome = job.apply_pending(it);
    } catch (const br::RecoveryError& e) {
      if (!after_hand_off) throw;
      recovery_refusal = e.what();  // none expected: reported by the checks below
      break;
    }
    if (outcome == br::ElasticJob::Outcome::left) {  // after-shrink: the leaver; a leaver not lost
      left = true;
      break;
    }
    resized += outcome == br::ElasticJob::Outcome::resized ? 1 : 0;
    if (expand_moves && old_rank == victim && it == kill_at) {
      bellows::test::die_after_pause(pause_us);  // the expand carried out, before the first iteration after it
    }
    if (shrink_done && old_rank == victim && it == kill_at && recoveries == 0) {
      bellows::test::die_after_pause(pause_us);  // the shrink carried out (the leaver gone), before the first iteration after it
    }
    // In the first iteration after the resize (the joiner's first), once its checkpoint completed.
    kill_in_next_task = (after_expand || after_shrink) && !during_expand && !shrink_done && old_rank == victim && it == kill_at && recoveries == 0;
    const br::IterationReport report = runtime.run_iteration();
    if (report.completed()) {
      // A rank that kept its state while other teams replayed the iteration ran it before.
      if (report.ran_here()) tasks_run[report.iteration] = report.local.tasks_executed;
      if (report.iteration == kill_at || report.iteration == kill_at + 1) {
        resize_iterations[report.iteration] = {report.seconds, report.local.checkpoint.post_seconds +
                                                                   report.local.checkpoint.wait_seconds};
      }
      ++it;
      continue;
    }
    br::RecoveryReport recovery;
    try {
      recovery = job.recover(report, kRecoverTimeout);
    } catch (const br::RecoveryError& e) {
      if (!expand_moves) throw;
      recovery_refusal = e.what();
      break;
    }
    ++recoveries;
    last_recovery = recovery;
    lost = recovery.lost;
    rolled_back_to = recovery.iteration;
    iterations_redone = report.iteration - recovery.iteration;
    // The runtime counts its iterations from 1; the loop resumes after the checkpoint's.
    it -= report.iteration - 1 - static_cast<int>(recovery.iteration);
  }
  if (left) {
    // Left as asked (after-shrink: before the loss; two leavers: the other one lost on its way
    // out): nothing to recover, nothing to verify.
    expect(resized == 0 && recoveries == 0, "the leaver resized " + std::to_string(resized) + " times and recovered " +
                                                std::to_string(recoveries) + " times before it left");
    result["left"] = true;
    if (lost_past_no_return) {
      // Its confirming barrier failed or passed: either way it left on the ranks that stay's word.
      const std::vector<int>& lost_then = job.membership().shrinks().back().lost_while_confirming;
      result["lost_while_confirming"] = lost_then;
      expect(!before_confirming_barrier || std::count(lost_then.begin(), lost_then.end(), victim) == 1,
             "the leaver's shrink names ranks " + rank_set(lost_then) + " lost while it was confirmed, expected rank " +
                 std::to_string(victim) + " among them (its barrier failed, the words told it the shrink stands)");
    }
    result["result"] = checks.failures == 0 ? "PASS" : "FAIL";
    write_file(dir / ("result." + std::to_string(old_rank)), result.dump());
    owned_runtime.reset();
    watchdog.disarm();
    MPI_Finalize();
    return checks.failures == 0 ? 0 : 1;
  }
  if (expand_moves) {
    // Refused on every survivor, alike: nothing to verify.
    const std::string expected = "recover: ranks {" + std::to_string(victim) +
                                 "} were lost at the start of the first iteration after the expand (its tile "
                                 "moves), before its checkpoint: no copy of the tiles as they are exists";
    expect(recoveries == 0 && recovery_refusal.rfind(expected, 0) == 0,
           std::to_string(recoveries) + " recoveries, refused with \"" + recovery_refusal + "\"; expected none, refused: \"" +
               expected + " (...)\"");
    expect(refused == 0, std::to_string(refused) + " resizes refused, the last with \"" + refusal + "\"; expected none");
    expect(resized == (joiner ? 0 : 1), "carried out " + std::to_string(resized) + " resizes, expected " +
                                            (joiner ? "none (it joined through the expand)" : "one"));
    result["refused"] = recovery_refusal;
    result["result"] = checks.failures == 0 ? "PASS" : "FAIL";
    write_file(dir / ("result." + std::to_string(old_rank)), result.dump());
    owned_runtime.reset();
    watchdog.disarm();
    MPI_Finalize();
    return checks.failures == 0 ? 0 : 1;
  }
  const bool no_victim = victim < 0;  // after-expand or after-shrink: the resize alone
  // A leaver lost after the hand-off: the shrink is finished without it, nothing recovered; nor
  // is anything when only the joiner was lost during the expand.
  const bool no_recovery = no_victim || (after_hand_off && victim_leaves) || (during_expand && victim == kJoiner);
  expect(recovery_refusal.empty(), "apply_pending threw RecoveryError \"" + recovery_refusal + "\"");
  expect(recoveries == (no_recovery ? 0 : 1),
         "recovered " + std::to_string(recoveries) + " times, expected " + (no_recovery ? "never" : "once"));
  expect(no_recovery ? lost.empty() : lost == std::vector<int>{victim},
         "lost ranks " + rank_set(lost) + ", expected " + (no_recovery ? "{}" : "{" + std::to_string(victim) + "}"));
  if (lost_past_no_return) {
    // The shrink stands: the leaver left, and rank 0 rolls back to the checkpoint the ranks that
    // stay completed inside the shrink (the boundary of the shrink, one iteration redone).
    expect(refused == 0, std::to_string(refused) + " resizes refused, the last with \"" + refusal + "\"; expected none");
    expect(resized == 1, "carried out " + std::to_string(resized) + " resizes, expected the shrink");
    expect(rolled_back_to == kill_at, "rolled back to the checkpoint of iteration " + std::to_string(rolled_back_to) +
                                          ", expected " + std::to_string(kill_at) + " (the one the shrink completed)");
    expect(iterations_redone == 1, std::to_string(iterations_redone) + " iterations redone, expected 1");
    expect(job.size() == kRanks - 2, "the job has " + std::to_string(job.size()) + " ranks, expected " +
                                         std::to_string(kRanks - 2) + ": shrunk, then the victim lost");
    if (job.rank() == 0) {
      nlohmann::json shrink;
      for (const auto& record : job.telemetry()) {
        if (record.contains("remove")) shrink = record;
      }
      const nlohmann::json lost_then = shrink.value("lost_after_hand_off", nlohmann::json::array());
      expect(std::count(lost_then.begin(), lost_then.end(), victim) == 1,
             "the shrink's record is " + shrink.dump() + ", expected it to name rank " + std::to_string(victim) +
                 " lost after the hand-off");
      result["shrink"] = shrink;
    }
    const int first_counted = kill_at + 1;
    const std::vector<unsigned long long> all =
        expect_every_task_once_from(first_counted, kIterations, tasks_run, job.communicator(), checks);
    result["rolled_back_to"] = rolled_back_to;
    result["iterations_redone"] = iterations_redone;
    result["tasks_per_iteration_from_the_resize"] = all;
  } else if (after_hand_off && !victim_leaves) {
    // Given up alike on rank 0 and the leaver, then one recovery from the checkpoint before the
    // shrink: the leaver stays, and the job ends on the two of them.
    const std::string given_up =
        "shrink without ranks {" + std::to_string(kLeaver) + "}: ranks {" + std::to_string(victim) +
        "} were lost after the hand-off of the leavers' tiles of the shrink (its barrier passed), before every rank "
        "confirmed the survivors' communicator and their first checkpoint under it: the shrink is given up (its hand-off undone), and the job recovers from "
        "the checkpoint before it (the test's shrink)";
    expect(refused == 1 && refusal == given_up, std::to_string(refused) + " resizes refused, the last with \"" +
                                                    refusal + "\"; expected one: \"" + given_up + "\"");
    expect(resized == 0, "carried out " + std::to_string(resized) + " resizes, expected none (the shrink given up)");
    expect(job.size() == kRanks - 1, "the job has " + std::to_string(job.size()) + " ranks, expected " +
                                         std::to_string(kRanks - 1) + ": the shrink given up, the victim lost");
    // The checkpoint before the shrink: taken at the boundary before the iteration that ran
    // last before it (iteration kill_at, counting from 1), which is redone.
    expect(rolled_back_to == kill_at - 1, "rolled back to the checkpoint of iteration " + std::to_string(rolled_back_to) +
                                              ", expected " + std::to_string(kill_at - 1) +
                                              " (the last complete one before the shrink)");
    // Every task of every iteration from the one rolled back to ran once over the two ranks left.
    const int first_counted = kill_at;
    const std::vector<unsigned long long> all =
        expect_every_task_once_from(first_counted, kIterations, tasks_run, job.communicator(), checks);
    result["refusal"] = refusal;
    result["rolled_back_to"] = rolled_back_to;
    result["iterations_redone"] = iterations_redone;
    result["tasks_per_iteration_from_the_roll_back"] = all;
  } else if (after_hand_off) {
    expect(refused == 0, std::to_string(refused) + " resizes refused, the last with \"" + refusal + "\"; expected none");
    expect(resized == 1, "carried out " + std::to_string(resized) + " resizes, expected the shrink");
    const int expected_size = kRanks - static_cast<int>(leavers.size());
    expect(job.size() == expected_size, "the job has " + std::to_string(job.size()) + " ranks, expected " +
                                            std::to_string(expected_size) + ": shrunk, a leaver lost on its way out");
    if (job.rank() == 0) {
      const auto& shrink = job.telemetry().back();
      // A leaver lost inside the confirming barrier may die after rank 0 passed it and had every
      // word: rank 0 then saw no loss (the shrink stands alike), and its record names none.
      const bool may_have_seen_none = in_confirming_barrier && !shrink.contains("lost_after_hand_off");
      expect(may_have_seen_none ||
                 shrink.value("lost_after_hand_off", nlohmann::json::array()) == nlohmann::json::array({victim}),
             "the shrink's record names " + shrink.value("lost_after_hand_off", nlohmann::json()).dump() +
                 " lost after the hand-off, expected [" + std::to_string(victim) + "]");
      result["shrink"] = shrink;
    }
    // Every task of every iteration from the shrink on ran once over the ranks left.
    const std::vector<unsigned long long> all =
        expect_every_task_once_from(kill_at + 1, kIterations, tasks_run, job.communicator(), checks);
    result["tasks_per_iteration_from_the_resize"] = all;
  } else if (during_shrink) {
    const std::string given_up = "shrink without ranks {" + std::to_string(kLeaver) + "} given up: ranks {" +
                                 std::to_string(victim) + "} were lost during the hand-off of the tiles";
    expect(refused == 1 && refusal.rfind(given_up, 0) == 0,
           std::to_string(refused) + " resizes refused, the last with \"" + refusal + "\"; expected one: \"" +
               given_up + " (...)\"");
    expect(job.size() == kRanks - 1, "the job has " + std::to_string(job.size()) + " ranks, expected " +
                                          std::to_string(kRanks - 1) + ": the shrink given up, the victim lost");
    result["refusal"] = refusal;
  } else if (during_expand) {
    const bool joiner_lost = victim == kJoiner;
    const std::string phase = during_expand_onto
                                  ? "while the runtime moved onto the communicator of the expand"
                                  : "while the new ranks of the expand joined (the accept and merge, their setup), "
                                    "before every member confirmed the grown communicator";
    const std::string given_up =
        "expand by 1 given up: ranks {" + std::to_string(victim) + "} were lost " + phase + ": " +
        (joiner_lost ? "only ranks the expand was adding were lost: the expand is given up, and the ranks from before "
                       "it carry on on their communicator, nothing rolled back"
                     : "the expand is given up (no tile changed owner), and the job recovers from the checkpoint "
                       "before it") +
        " (the test's expand)";
    expect(refused == 1 && refusal == given_up, std::to_string(refused) + " resizes refused, the last with \"" + refusal +
                                                    "\"; expected one: \"" + given_up + "\"");
    expect(resized == 0, "carried out " + std::to_string(resized) + " resizes, expected none (the expand given up)");
    if (!joiner_lost) {
      // The loss is found in the iteration after the boundary, whose checkpoint (overlapped, as
      // outside a resize) may not have completed: at most one more iteration is redone.
      expect(rolled_back_to == kill_at || rolled_back_to == kill_at - 1,
             "rolled back to the checkpoint of iteration " + std::to_string(rolled_back_to) + ", expected " +
                 std::to_string(kill_at) + " (the boundary of the expand) or the one before it");
      expect(iterations_redone == kill_at + 1 - rolled_back_to,
             std::to_string(iterations_redone) + " iterations redone, expected " +
                 std::to_string(kill_at + 1 - rolled_back_to));
    }
    const int expected_size = joiner_lost ? kRanks : kRanks - 1;
    expect(job.size() == expected_size, "the job has " + std::to_string(job.size()) + " ranks, expected " +
                                            std::to_string(expected_size));
    if (old_rank == 0) {  // the rank that keeps the telemetry, when it is not the victim
      const auto& expand = job.telemetry().back();
      expect(expand.value("lost", nlohmann::json::array()) == nlohmann::json::array({victim}) &&
                 expand.value("to_ranks", 0) == kRanks,
             "the expand's record is " + expand.dump() + ", expected it given up, naming [" + std::to_string(victim) +
                 "] lost, to_ranks " + std::to_string(kRanks));
      result["expand"] = expand;
    }
    // Every task of every iteration from the expand on ran once over the ranks.
    const std::vector<unsigned long long> all =
        expect_every_task_once_from(kill_at + 1, kIterations, tasks_run, job.communicator(), checks);
    result["tasks_per_iteration_from_the_resize"] = all;
    result["refusal"] = refusal;
    result["given_up_after_seconds"] = refused_seconds;
    result["rolled_back_to"] = rolled_back_to;
    if (with_teams) {
      // Only the lost rank's team and its buddy's roll back; a rank that keeps its state replays
      // from its log the iterations redone, the one before the expand among them.
      const auto& rolled_back = last_recovery.ranks_rolled_back;
      const bool kept_state = !std::binary_search(rolled_back.begin(), rolled_back.end(), old_rank);
      expect(rolled_back.size() < static_cast<std::size_t>(kRanks),
             "ranks " + rank_set(rolled_back) + " rolled back, expected only the teams of the lost rank and its buddy (" +
                 last_recovery.rolled_back_globally_because + ")");
      expect(!kept_state || last_recovery.iterations_redone == 0 || last_recovery.log_bytes_for_replay > 0,
             "rank " + std::to_string(old_rank) + " kept its state with " +
                 std::to_string(last_recovery.iterations_redone) + " iterations redone, but its log holds nothing for "
                 "them (the entries from before the expand dropped)");
      result["ranks_rolled_back"] = rolled_back;
      result["log_bytes_for_replay"] = last_recovery.log_bytes_for_replay;
      result["iterations_replayed"] = last_recovery.iterations_redone;
    }
  } else if (after_expand || after_shrink) {
    expect(refused == 0, std::to_string(refused) + " resizes refused, the last with \"" + refusal + "\"; expected none");
    expect(resized == (joiner ? 0 : 1), "carried out " + std::to_string(resized) + " resizes, expected " +
                                            (joiner ? "none (it joined through the expand)" : "one"));
    if (!no_victim) {
      expect(rolled_back_to == kill_at, "rolled back to the checkpoint of iteration " + std::to_string(rolled_back_to) +
                                            ", expected " + std::to_string(kill_at) + " (the one the resize ended with)");
      expect(iterations_redone == 1, std::to_string(iterations_redone) + " iterations redone, expected 1");
      result["rolled_back_to"] = rolled_back_to;
      result["iterations_redone"] = iterations_redone;
    }
    const int expected_size = (after_expand ? kRanks + 1 : kRanks - 1) - (no_victim ? 0 : 1);
    expect(job.size() == expected_size, "the job has " + std::to_string(job.size()) + " ranks, expected " +
                                            std::to_string(expected_size) + (no_victim ? ": resized" : ": resized, then the victim lost"));
    // Every task of every iteration from the resize on ran once over the ranks (the
    // interrupted one counted from its run again).
    const int first_counted = kill_at + 1;
    const std::vector<unsigned long long> all =
        expect_every_task_once_from(first_counted, kIterations, tasks_run, job.communicator(), checks);
    result["tasks_per_iteration_from_the_resize"] = all;
    if (no_victim) {
      // The first checkpoint under the new buddies completed before the tasks of the first
      // iteration after the resize.
      expect(runtime.last_checkpoint().has_value(), "no complete checkpoint at the end");
      result["iteration_seconds_before_and_after_resize"] = {resize_iterations[kill_at][0],
                                                             resize_iterations[kill_at + 1][0]};
      result["checkpoint_seconds_before_and_after_resize"] = {resize_iterations[kill_at][1],
                                                              resize_iterations[kill_at + 1][1]};
      if (job.rank() == 0) result["resize"] = job.telemetry().back();  // its seconds, on rank 0
    }
  } else {
    expect(refused == 0, std::to_string(refused) + " resize requests refused: the only request died with the victim");
  }
  const std::vector<double> c = gemm.c.gather_to_root(job.communicator());
  if (job.rank() == 0) {
    const std::vector<double> expected = reference_c();
    const bool same = c.size() == expected.size() && std::memcmp(c.data(), expected.data(), c.size() * sizeof(double)) == 0;
    expect(same, "C differs from a serial run");
    result["verified"] = same;
  }
  result["recoveries"] = recoveries;
  result["lost"] = lost;
  result["result"] = checks.failures == 0 ? "PASS" : "FAIL";
  write_file(dir / ("result." + std::to_string(old_rank)), result.dump());
  owned_runtime.reset();
  watchdog.disarm();
  MPI_Finalize();
  return checks.failures == 0 ? 0 : 1;
}

// ------------------------------------------------------------------------------------ launcher

int run_launcher(const std::string& mpiexec, const std::string& self, int victim, const std::string& mode) {
  const bool with_request = mode == "with-request";
  const bool during_shrink = mode == "during-shrink";
  const bool after_hand_off =
      mode == "after-hand-off" || mode == "in-membership-shrink" || mode == "in-confirming-barrier" ||
      mode == "before-confirming-barrier" || mode == "two-leavers-after-hand-off";
  const bool expand_moves = mode == "expand-moves";
  const bool during_expand = mode == "during-expand" || mode == "during-expand-onto" || mode == "during-expand-dup" ||
                             mode == "during-expand-probe" || mode == "during-expand-nodes" ||
                             mode == "during-expand-probe-teams";
  const bool after_expand = mode == "after-expand" || expand_moves || during_expand;
  const bool after_shrink = mode == "after-shrink" || mode == "shrink-done";
  const int processes = after_expand ? kRanks + 1 : kRanks;
  // A shrink's victim is a rank that stays or (during it) the leaver, never the first rank,
  // which asks for it; after it, a rank that stayed.
  const int lowest = during_shrink || after_hand_off ? 1
                     : during_expand                 ? 0
                     : ((after_expand && !expand_moves) || after_shrink) ? -1
                                                                          : 0;  // -1: none
  const int highest = after_shrink ? kLeaver - 1 : processes - 1;
  if (victim < lowest || victim > highest) {
    std::fprintf(stderr, "boundary_loss_tests: the victim must be a rank from %d to %d%s, got %d\n", lowest, highest,
                 mode.empty() ? "" : (" with " + mode).c_str(), victim);
    return 2;
  }
  char pattern[] = "/tmp/bellows-boundary-loss-XXXXXX";
  const fs::path dir = ::mkdtemp(pattern);
  const unsigned seed = bellows::testing::test_seed();
  std::mt19937 random(seed);
  const int kill_at = std::uniform_int_distribution<int>(kEarliestKill, kLatestKill)(random);
  const int pause_us = std::uniform_int_distribution<int>(0, kMostPauseMicroseconds)(random);
  write_file(dir / "victim", std::to_string(victim));
  write_file(dir / "kill_at", std::to_string(kill_at));
  write_file(dir / "pause_us", std::to_string(pause_us));
  if (!mode.empty()) write_file(dir / mode, "1");
  const auto start = Clock::now();
  const SurvivorResults read =
      bellows::test::run_members(mpiexec, self, dir, processes, victim, kLauncherLimitSeconds);
  const bool all_refused = expand_moves;  // every survivor refused: nothing to verify
  return bellows::test::report_launcher("boundary_loss",
                                       {{"victim", victim},
                                        {"with_request", with_request},
                                        {"during_shrink", during_shrink},
                                        {"after_hand_off", after_hand_off},
                                        {"in_membership_shrink", mode == "in-membership-shrink"},
                                        {"after_expand", after_expand},
                                        {"expand_moves", expand_moves},
                                        {"during_expand", during_expand},
                                        {"mode", mode},
                                        {"after_shrink", after_shrink},
                                        {"seed", seed},
                                        {"killed_before_iteration", kill_at},
                                        {"pause_us", pause_us}},
                                       read, !all_refused, checks.failures, dir, start);
}

}  // namespace

// MPI's profiling interface: in-membership-shrink's victim dies as it would post its next
// barrier, before-confirming-barrier's as it would post the one over every rank that confirms
// the survivors' communicator, in-confirming-barrier's 2 ms after it posted that one. Every
// other call goes straight to MPI.
extern "C" int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  if (die_at_next_barrier.load()) ::raise(SIGKILL);
  int size = 0;
  if (die_before_confirming_barrier.load() && MPI_Comm_size(comm, &size) == MPI_SUCCESS && size == kConfirmingSize) {
    ::raise(SIGKILL);
  }
  const int posted = PMPI_Ibarrier(comm, request);
  if (die_in_confirming_barrier.load() && MPI_Comm_size(comm, &size) == MPI_SUCCESS && size == kConfirmingSize) {
    // Its first round went out as it posted; the next never will.
    std::this_thread::sleep_for(std::chrono::microseconds(kConfirmingPauseUs));
    ::raise(SIGKILL);
  }
  return posted;
}

// during-expand-onto's victim and the like die right after they posted the step of the runtime's
// setup their mode names.
extern "C" int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                          MPI_Request* request) {
  const int posted = PMPI_Ibcast(buffer, count, datatype, root, comm, request);
  if (datatype == MPI_INT64_T) die_if_armed_for(SetupStep::mapping_broadcast);
  if (datatype == MPI_BYTE) die_if_armed_for(SetupStep::probe_broadcast);
  return posted;
}

extern "C" int MPI_Comm_idup(MPI_Comm comm, MPI_Comm* newcomm, MPI_Request* request) {
  const int posted = PMPI_Comm_idup(comm, newcomm, request);
  die_if_armed_for(SetupStep::duplicate);
  return posted;
}

extern "C" int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                              MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const int posted = PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
  if (sendtype == MPI_CHAR) die_if_armed_for(SetupStep::node_gather);
  return posted;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--member") == 0) return run_member(argv[2], std::atoi(argv[3]));
  const std::string mode = argc == 5 ? argv[4] : "";
  if ((argc != 4 && argc != 5) ||
      (argc == 5 && mode != "with-request" && mode != "during-shrink" && mode != "after-hand-off" &&
       mode != "in-membership-shrink" && mode != "in-confirming-barrier" && mode != "before-confirming-barrier" &&
       mode != "two-leavers-after-hand-off" &&
       mode != "after-expand" &&
       mode != "after-shrink" && mode != "shrink-done" && mode != "expand-moves" && mode != "during-expand" &&
       mode != "during-expand-onto" && mode != "during-expand-dup" && mode != "during-expand-probe" &&
       mode != "during-expand-nodes" && mode != "during-expand-probe-teams")) {
    std::fprintf(stderr, "usage: boundary_loss_tests MPIEXEC SELF VICTIM "
                         "[with-request|during-shrink|after-hand-off|in-membership-shrink|in-confirming-barrier|"
                         "before-confirming-barrier|two-leavers-after-hand-off|"
                         "after-expand|after-shrink|shrink-done|expand-moves|during-expand|during-expand-onto|during-expand-dup|"
                         "during-expand-probe|during-expand-nodes|during-expand-probe-teams] | "
                         "--member DIR INDEX\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2], std::atoi(argv[3]), mode);
}
