// Ranks lost around the confirmation of a shrink under ElasticJob, past its point of no return,
// with three or more ranks that stay, run to the job's end: a GEMM (as boundary_loss_test.cpp
// runs it: each member the only process of its own mpiexec, joined by grow_by_accept, each on a
// node of its own for the checkpoints' buddies, stealing on, a checkpoint at every boundary),
// whose first rank asks before iteration SHRINK_AT (2 to 5, from BELLOWS_TEST_SEED) that the
// highest rank leave. The victims die inside Membership::shrink (MPI's profiling interface
// catches the barriers they post):
//
// `by-word` (4 ranks, rank 3 leaves): rank 1, a rank that stays, dies inside the barrier over the
// survivors that ends their first checkpoint under the survivors' buddies (the shrink's point of
// no return, Runtime::attach_shrunk_checkpointed), so that rank 2 passes it and rank 0 does not.
// In MPICH's dissemination barrier over 3 ranks rank 2 needs rank 1's first round and rank 0's
// second, rank 0 needs rank 1's second. So rank 1 waits (no MPI call, hence no progress) until
// ranks 0 and 2 posted theirs, posts its own (its first round goes out as it posts), waits
// until rank 2 passed the barrier, then 2 ms, and SIGKILLs itself: its second round never goes
// out. Rank 0 then learns from rank 2's word that the shrink stands and stays on the survivors'
// communicator with the checkpoint complete (Runtime::confirm_shrunk_checkpoint; the shrink's
// ShrinkReport::confirmed_by_word on rank 0 alone); the leaver, whose confirming barrier fails,
// learns it from the words too and leaves. Ranks 0 and 2 find rank 1 lost at the first
// iteration after the shrink and roll back to the checkpoint the shrink completed (one
// iteration redone, nothing refused), the shrink's record on rank 0 naming rank 1 lost after the
// hand-off.
//
// `two-lost A B` (5 ranks, rank 4 leaves): two ranks die together at the barrier over every
// rank that confirms the survivors' communicator, every rank that stays having passed the
// survivors' checkpoint barrier: A as it would post it (its word sent, if it stays), B 2 ms after
// it posted it. A rank that stays and the leaver (A 1, B 4), or two ranks that stay (A 1, B 3:
// their buddies differ). The shrink stands on every rank alive; the ranks that stay among the
// victims are found lost at the first iteration after it and recovered from the checkpoint the
// shrink completed, both named lost (the recovery, or the shrink's record for the leaver); or,
// when a lost rank's copy was held by the other (`two-lost 1 2`: rank 2 is rank 1's buddy under
// the survivors), every survivor is refused alike, the ranks and the phase named. Which of the
// two each survivor expects follows from the survivors' buddies it reads after the shrink; the
// launcher's last argument (`recovered` or `refused`) says which the case must meet.
//
// `none` (5 ranks): the shrink alone; each survivor's result gives its buddies after it.
//
// Every survivor checks: the shrink carried out, not refused; recovered once, from the
// shrink's checkpoint, one iteration redone (or refused as said); every task of every iteration
// from the shrink on ran once over the ranks; C bit-identical to a serial run. The launcher
// passes when the victims' mpiexecs report the kill, every survivor's exits 0 with a PASS
// result, nothing it started is left, and the survivors' refusals (if any) are the same text; it
// prints one JSON line (the ranks on which the shrink stood on another rank's word among it)
// and "shrink_confirming_loss: PASS".
//
//   shrink_confirming_loss_tests MPIEXEC SELF by-word | two-lost A B recovered|refused | none
//                                                                  (the launcher; no MPI)
//   shrink_confirming_loss_tests --member DIR INDEX                (under MPIEXEC -n 1)

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
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
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
using bellows::testing::read_file;
using bellows::testing::read_int;
using bellows::testing::write_file;
using Clock = std::chrono::steady_clock;

constexpr int kIterations = 10;
constexpr int kEarliestShrink = 2;  // the shrink comes before an iteration in [kEarliestShrink, kLatestShrink]
constexpr int kLatestShrink = 5;
constexpr auto kRecoverTimeout = std::chrono::seconds(10);
constexpr double kLauncherLimitSeconds = 75.0;  // below the ctest timeout
constexpr auto kDeathPause = std::chrono::microseconds(2000);
/// The longest by-word's victim waits for the others' barrier (a test failure past it).
constexpr auto kHandshakeLimit = std::chrono::seconds(10);

/// How a victim dies, armed on it once the shrink's tiles were handed off.
enum class Death {
  none,
  in_survivors_barrier,       ///< by-word: inside the survivors' checkpoint barrier
  before_confirming_barrier,  ///< as it would post the barrier over every rank that confirms the shrink
  in_confirming_barrier,      ///< 2 ms after it posted that barrier
};

// What the wrappers of MPI's profiling interface below read; set on the application's thread
// between iterations, when the communication thread does not run.
std::atomic<Death> armed_death{Death::none};
/// by-word: a rank that stays and is no victim notes when it posted the survivors' barrier
/// (DIR/posted.RANK) and when it passed it (DIR/passed.RANK).
std::atomic<bool> witness_armed{false};
std::atomic<MPI_Request> witnessed_barrier{MPI_REQUEST_NULL};
std::atomic<int> survivors_size{0};   // the survivors' communicator: the job's size less the leaver
std::atomic<int> confirming_size{0};  // the job's communicator, over which the shrink is confirmed
fs::path member_dir;
int member_rank = -1;

bt::Checks checks{"shrink_confirming_loss_tests"};
void expect(bool ok, const std::string& what) { checks.expect(ok, what); }

/// Waits, without any MPI call, until `path` exists; false after kHandshakeLimit.
bool wait_for_file(const fs::path& path) {
  const auto limit = Clock::now() + kHandshakeLimit;
  while (!fs::exists(path)) {
    if (Clock::now() > limit) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

/// "1 3" -> {1, 3}.
std::vector<int> read_ranks(const fs::path& path) {
  std::istringstream in(read_file(path));
  std::vector<int> ranks;
  for (int r = 0; in >> r;) ranks.push_back(r);
  return ranks;
}

// ------------------------------------------------------------------------------------ member

int run_member(const fs::path& dir, int index) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(60), "shrink confirming loss member", index);
  const std::string mode = read_file(dir / "mode");
  const int ranks = read_int(dir / "ranks");
  const int shrink_at = read_int(dir / "shrink_at");
  const std::vector<int> victims = read_ranks(dir / "victims");
  const int leaver = ranks - 1;
  std::vector<int> payload;
  auto membership = bellows::testing::join_member_job(dir, index, ranks, payload);
  const int old_rank = membership.rank();
  write_file(dir / ("pid." + std::to_string(index)), std::to_string(::getpid()));
  write_file(dir / ("rank." + std::to_string(index)), std::to_string(old_rank));
  member_dir = dir;
  member_rank = old_rank;
  survivors_size = ranks - 1;
  confirming_size = ranks;
  const auto victim_at = std::find(victims.begin(), victims.end(), old_rank);
  const bool victim = victim_at != victims.end();
  Death death = Death::none;
  if (victim) {
    death = mode == "by-word"                ? Death::in_survivors_barrier
            : victim_at == victims.begin() ? Death::before_confirming_barrier
                                             : Death::in_confirming_barrier;
  }
  const bool witness = mode == "by-word" && !victim && old_rank != leaver;
  std::vector<int> staying_victims;
  for (const int r : victims) {
    if (r != leaver) staying_victims.push_back(r);
  }
  std::sort(staying_victims.begin(), staying_victims.end());

  br::ElasticJob job(std::move(membership),
                     br::ElasticJob::Grow([](br::Membership&, int, int, std::uint64_t) -> const br::GrowReport& {
                       throw std::logic_error("this test does not expand");
                     }));
  int refused = 0;
  std::string refusal;
  job.on_resize_refused([&](const br::ResizeEvent& e) {
    ++refused;
    refusal = e.reason;
  });
  int loop_iteration = 0;
  job.on_tiles_handed_off([&](const br::ResizeEvent&) {
    if (loop_iteration != shrink_at) return;
    armed_death = death;  // the wrappers below end this rank at its barrier
    witness_armed = witness;
  });

  const std::atomic<bool> never{false};
  bt::TiledGemm gemm(bt::kGemmN, bt::kGemmTile, ranks, old_rank, bt::kGemmSeed);
  auto owned_runtime = std::make_unique<br::Runtime>(job.communicator(), bt::loss_test_options(old_rank, 0));
  br::Runtime& runtime = *owned_runtime;
  // The member's end, whichever way it comes: its runtime gone before MPI, its result written
  // for the launcher.
  const auto end_member = [&](const nlohmann::json& result) {
    owned_runtime.reset();
    watchdog.disarm();
    const int status = bt::write_member_result(dir, old_rank, result, checks.failures);
    MPI_Finalize();
    return status;
  };
  job.attach(runtime);
  bt::add_gemm(runtime, gemm, never, 0);

  nlohmann::json result{{"old_rank", old_rank}};
  int recoveries = 0, resized = 0;
  bool left = false, requested = false;
  long rolled_back_to = -1, iterations_redone = -1;
  std::vector<int> lost, buddies_after_shrink;
  std::string recovery_refusal;
  std::map<long, std::uint64_t> tasks_run;  // runtime iteration -> tasks run here, the last run of each
  for (int it = 0; it < kIterations;) {
    loop_iteration = it;
    if (old_rank == 0 && it == shrink_at && !requested) {
      job.request_shrink({leaver}, "the test's shrink", 0);
      requested = true;
    }
    const br::ElasticJob::Outcome outcome = job.apply_pending(it);
    if (outcome == br::ElasticJob::Outcome::left) {
      left = true;
      break;
    }
    if (outcome == br::ElasticJob::Outcome::resized) {
      ++resized;
      buddies_after_shrink = runtime.checkpoint_buddies();
      const br::ShrinkReport& shrunk = job.membership().shrinks().back();
      result["confirmed_by_word"] = shrunk.confirmed_by_word;
      result["lost_while_confirming"] = shrunk.lost_while_confirming;
    }
    const br::IterationReport report = runtime.run_iteration();
    if (report.completed()) {
      if (report.ran_here()) tasks_run[report.iteration] = report.local.tasks_executed;
      ++it;
      continue;
    }
    br::RecoveryReport recovery;
    try {
      recovery = job.recover(report, kRecoverTimeout);
    } catch (const br::RecoveryError& e) {
      recovery_refusal = e.what();
      break;
    }
    ++recoveries;
    lost = recovery.lost;
    rolled_back_to = recovery.iteration;
    iterations_redone = report.iteration - recovery.iteration;
    // The runtime counts its iterations from 1; the loop resumes after the checkpoint's.
    it -= report.iteration - 1 - static_cast<int>(recovery.iteration);
  }
  result["buddies_after_shrink"] = buddies_after_shrink;
  if (left) {
    // The shrink stood on the words of the ranks that stay (its confirming barrier failed) or
    // on that barrier: either way the leaver leaves.
    expect(refused == 0 && recoveries == 0, "the leaver saw " + std::to_string(refused) + " refusals and " +
                                                std::to_string(recoveries) + " recoveries before it left");
    result["left"] = true;
    result["lost_while_confirming"] = job.membership().shrinks().back().lost_while_confirming;
    return end_member(result);
  }

  // Whether a copy of every lost rank's tiles is left: each lost rank's buddy under the
  // survivors is alive.
  bool copies_left = true;
  for (const int r : staying_victims) {
    const int buddy = r < static_cast<int>(buddies_after_shrink.size()) ? buddies_after_shrink[static_cast<std::size_t>(r)] : -1;
    if (buddy < 0 || std::count(staying_victims.begin(), staying_victims.end(), buddy) > 0) copies_left = false;
  }
  result["copies_left"] = copies_left;
  expect(refused == 0, std::to_string(refused) + " resizes refused, the last with \"" + refusal + "\"; expected none");
  expect(resized == 1, "carried out " + std::to_string(resized) + " resizes, expected the shrink");
  if (!copies_left) {
    // Refused alike on every survivor (the launcher compares the texts): the lost ranks and the
    // phase named.
    const std::string expected = "recover: ranks " + bt::rank_set(staying_victims) +
                                 " were lost at the start of the first iteration after the shrink, its leavers gone";
    expect(recoveries == 0 && recovery_refusal.rfind(expected, 0) == 0,
           std::to_string(recoveries) + " recoveries, refused with \"" + recovery_refusal + "\"; expected none, refused: \"" +
               expected + " (...)\"");
    result["refusal"] = recovery_refusal;
    return end_member(result);
  }
  expect(recovery_refusal.empty(), "recover threw RecoveryError \"" + recovery_refusal + "\"");
  const bool recovery_expected = !staying_victims.empty();
  expect(recoveries == (recovery_expected ? 1 : 0),
         "recovered " + std::to_string(recoveries) + " times, expected " + (recovery_expected ? "once" : "never"));
  expect(lost == staying_victims, "lost ranks " + bt::rank_set(lost) + ", expected " + bt::rank_set(staying_victims));
  if (recovery_expected) {
    // The checkpoint the ranks that stay completed inside the shrink: its boundary, one
    // iteration redone.
    expect(rolled_back_to == shrink_at, "rolled back to the checkpoint of iteration " + std::to_string(rolled_back_to) +
                                            ", expected " + std::to_string(shrink_at) + " (the one the shrink completed)");
    expect(iterations_redone == 1, std::to_string(iterations_redone) + " iterations redone, expected 1");
  }
  const int expected_size = ranks - 1 - static_cast<int>(staying_victims.size());
  expect(job.size() == expected_size,
         "the job has " + std::to_string(job.size()) + " ranks, expected " + std::to_string(expected_size));
  if (mode == "by-word") {
    // Rank 2 passed the survivors' barrier, rank 0 did not and learned from rank 2's word.
    expect(result.value("confirmed_by_word", false) == (old_rank == 0),
           "rank " + std::to_string(old_rank) + (result.value("confirmed_by_word", false) ? " learned" : " did not learn") +
               " from the words that the shrink stands; expected rank 0 alone to");
  }
  if (job.rank() == 0) {
    nlohmann::json shrink;
    for (const auto& record : job.telemetry()) {
      if (record.contains("remove")) shrink = record;
    }
    // Every victim is named lost after the hand-off, by the shrink (the leaver, and a rank that
    // stays found there) or by the recovery.
    const nlohmann::json lost_then = shrink.value("lost_after_hand_off", nlohmann::json::array());
    for (const int r : victims) {
      const bool named = std::count(lost_then.begin(), lost_then.end(), r) > 0 ||
                         std::count(lost.begin(), lost.end(), r) > 0;
      expect(named, "rank " + std::to_string(r) + " is named lost neither by the shrink's record " + shrink.dump() +
                        " nor by the recovery (" + bt::rank_set(lost) + ")");
    }
    result["shrink"] = shrink;
  }
  const std::vector<unsigned long long> all =
      bt::expect_every_task_once_from(shrink_at + 1, kIterations, tasks_run, job.communicator(), checks);
  result["tasks_per_iteration_from_the_shrink"] = all;
  const std::vector<double> c = gemm.c.gather_to_root(job.communicator());
  if (job.rank() == 0) {
    const std::vector<double> expected = bt::serial_gemm_c(bt::kGemmN, bt::kGemmTile, bt::kGemmSeed);
    const bool same = c.size() == expected.size() && std::memcmp(c.data(), expected.data(), c.size() * sizeof(double)) == 0;
    expect(same, "C differs from a serial run");
    result["verified"] = same;
  }
  result["lost"] = lost;
  result["rolled_back_to"] = rolled_back_to;
  result["iterations_redone"] = iterations_redone;
  return end_member(result);
}

// ------------------------------------------------------------------------------------ launcher

int run_launcher(const std::string& mpiexec, const std::string& self, const std::string& mode,
                 const std::vector<int>& victims, const std::string& expected) {
  const int ranks = mode == "by-word" ? 4 : 5;
  char pattern[] = "/tmp/bellows-shrink-confirming-XXXXXX";
  const fs::path dir = ::mkdtemp(pattern);
  const unsigned seed = bellows::testing::test_seed();
  std::mt19937 random(seed);
  const int shrink_at = std::uniform_int_distribution<int>(kEarliestShrink, kLatestShrink)(random);
  std::string victim_list;
  for (const int r : victims) victim_list += std::to_string(r) + " ";
  write_file(dir / "mode", mode);
  write_file(dir / "ranks", std::to_string(ranks));
  write_file(dir / "shrink_at", std::to_string(shrink_at));
  write_file(dir / "victims", victim_list);
  const auto start = Clock::now();
  const bt::SurvivorResults read =
      bt::run_members(mpiexec, self, dir, ranks, victims.empty() ? std::vector<int>{-1} : victims,
                                 kLauncherLimitSeconds);
  std::vector<int> confirmed_by_word;
  std::vector<std::string> refusals;
  bool refused = false, recovered = false;
  for (const auto& r : read.results) {
    if (r.value("confirmed_by_word", false)) confirmed_by_word.push_back(r.value("old_rank", -1));
    if (r.contains("refusal")) refusals.push_back(r.value("refusal", ""));
    if (!r.value("left", false)) (r.value("copies_left", true) ? recovered : refused) = true;
  }
  std::sort(confirmed_by_word.begin(), confirmed_by_word.end());
  int launcher_failures = 0;
  const auto fail = [&](const std::string& what) {
    ++launcher_failures;
    std::fprintf(stderr, "shrink_confirming_loss_tests: FAILED: %s\n", what.c_str());
  };
  if (std::adjacent_find(refusals.begin(), refusals.end(), std::not_equal_to<>()) != refusals.end()) {
    fail("the survivors were refused with different texts");
  }
  if (refused && recovered) fail("some survivors were refused and others recovered");
  if (expected == "refused" && !refused) fail("no survivor was refused; expected every one (a lost rank's buddy lost too)");
  if (expected == "recovered" && refused) fail("survivors were refused; expected them to recover");
  if (mode == "by-word" && confirmed_by_word != std::vector<int>{0}) {
    fail("the shrink stood on another rank's word on ranks " + bt::rank_set(confirmed_by_word) +
         ", expected on rank 0 alone");
  }
  return bt::report_launcher("shrink_confirming_loss",
                                       {{"mode", mode},
                                        {"victims", victims},
                                        {"seed", seed},
                                        {"shrink_before_iteration", shrink_at},
                                        {"confirmed_by_word_on", confirmed_by_word}},
                                       read, !refused, launcher_failures, dir, start);
}

}  // namespace

// MPI's profiling interface: the victims' ends, and by-word's witnesses' notes. Every other call
// goes straight to MPI.
extern "C" int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  const Death death = armed_death.load();
  if (death == Death::none && !witness_armed.load()) return PMPI_Ibarrier(comm, request);
  int size = 0;
  PMPI_Comm_size(comm, &size);
  if (size == survivors_size.load() && witness_armed.exchange(false)) {
    // The survivors' checkpoint barrier on a rank that stays and is no victim.
    const int posted = PMPI_Ibarrier(comm, request);
    witnessed_barrier = *request;
    write_file(member_dir / ("posted." + std::to_string(member_rank)), "1");
    return posted;
  }
  if (size == survivors_size.load() && death == Death::in_survivors_barrier) {
    // Ranks 0 and 2 posted theirs (their rounds to this rank went out while it was alive); its
    // own first round goes out as it posts; rank 2 passes with it and rank 0's second round;
    // this rank's second round, which rank 0 needs, never goes out.
    bool in_time = wait_for_file(member_dir / "posted.0") && wait_for_file(member_dir / "posted.2");
    const int posted = PMPI_Ibarrier(comm, request);
    in_time = in_time && wait_for_file(member_dir / "passed.2");
    if (!in_time) write_file(member_dir / "handshake_late", "1");
    std::this_thread::sleep_for(kDeathPause);
    ::raise(SIGKILL);
    return posted;
  }
  if (size == confirming_size.load() && death == Death::before_confirming_barrier) ::raise(SIGKILL);
  const int posted = PMPI_Ibarrier(comm, request);
  if (size == confirming_size.load() && death == Death::in_confirming_barrier) {
    std::this_thread::sleep_for(kDeathPause);  // its first round went out as it posted
    ::raise(SIGKILL);
  }
  return posted;
}

extern "C" int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  const MPI_Request noted = witnessed_barrier.load();
  const bool watched = noted != MPI_REQUEST_NULL && *request == noted;
  const int rc = PMPI_Test(request, flag, status);
  if (watched && (rc != MPI_SUCCESS || *flag != 0)) {
    witnessed_barrier = MPI_REQUEST_NULL;
    write_file(member_dir / ((rc == MPI_SUCCESS ? "passed." : "failed.") + std::to_string(member_rank)), "1");
  }
  return rc;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--member") == 0) return run_member(argv[2], std::atoi(argv[3]));
  const std::string mode = argc >= 4 ? argv[3] : "";
  const bool by_word = argc == 4 && mode == "by-word";
  const bool none = argc == 4 && mode == "none";
  const bool two_lost = argc == 7 && mode == "two-lost" &&
                        (std::strcmp(argv[6], "recovered") == 0 || std::strcmp(argv[6], "refused") == 0);
  if (!by_word && !none && !two_lost) {
    std::fprintf(stderr, "usage: shrink_confirming_loss_tests MPIEXEC SELF by-word | two-lost A B recovered|refused | "
                         "none | --member DIR INDEX\n");
    return 2;
  }
  if (two_lost) {
    const std::vector<int> victims{std::atoi(argv[4]), std::atoi(argv[5])};
    for (const int r : victims) {
      if (r < 1 || r > 4 || victims[0] == victims[1]) {
        std::fprintf(stderr, "shrink_confirming_loss_tests: two-lost needs two different ranks from 1 to 4, got %s and %s\n",
                     argv[4], argv[5]);
        return 2;
      }
    }
    return run_launcher(argv[1], argv[2], mode, victims, argv[6]);
  }
  return run_launcher(argv[1], argv[2], mode, by_word ? std::vector<int>{1} : std::vector<int>{}, "");
}
