// The launcher of recovery_tests (recovery_test.cpp says what the test does): it starts the
// job's members (4, or `ranks=N`), each under an mpiexec of its own, kills (or stops) the
// victims at moments drawn from the seed, reaps every process it started, and passes when the
// victims' mpiexecs report the kill and every survivor wrote a PASS result (or every one was
// refused, saying why).

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "recovery_test.hpp"
#include "separate_worlds.hpp"
#include "spawned_processes.hpp"

namespace bellows::testing::recovery {
namespace {

constexpr int kFewestBeforeKill = 4;  // iterations rank 0 has completed when the victim is killed:
constexpr int kMostBeforeKill = 12;   // a random count in [kFewestBeforeKill, kMostBeforeKill]
constexpr double kLauncherLimitSeconds = 90.0;  // below the ctest timeout
// With a second victim: shorter, so that the members' own limits end them first.
constexpr double kSecondLossLauncherLimitSeconds = 50.0;

}  // namespace

int run_launcher(const std::string& mpiexec, const std::string& self, const std::string& victims_text,
                 bool no_checkpoint, Job job, SecondVictim second, bool stopped, int deaf_rank, int team_size,
                 bool replay_to_kept, int ranks) {
  const std::vector<int> victims = parse_victims(victims_text);
  const bool second_loss = second.rank >= 0;
  const bool valid = std::all_of(victims.begin(), victims.end(), [&](int v) { return v < ranks; }) &&
                     static_cast<int>(victims.size()) < ranks && (!no_checkpoint || !victims.empty()) &&
                     (!second_loss || (second.rank < ranks && victims.size() == 1 && second.rank != victims[0] &&
                                       second.delay_ms >= 0)) &&
                     (!stopped || !victims.empty()) &&
                     (deaf_rank < 0 || (deaf_rank < ranks && !victims.empty() &&
                                        !std::binary_search(victims.begin(), victims.end(), deaf_rank)));
  if (!valid) {
    std::fprintf(stderr, "recovery_tests: victims '%s' are not ranks of %d (or -1 with checkpoints), or the "
                         "second victim %d@%d is not another rank after one victim, or the deaf rank %d is "
                         "not a survivor\n",
                 victims_text.c_str(), ranks, second.rank, second.delay_ms, deaf_rank);
    return 2;
  }
  char pattern[] = "/tmp/bellows-recovery-XXXXXX";
  const fs::path dir = ::mkdtemp(pattern);
  if (no_checkpoint) write_file(dir / "no-checkpoint", "1");
  if (job == Job::cholesky) write_file(dir / "cholesky", "1");
  if (job == Job::bspgemm) write_file(dir / "bspgemm", "1");
  if (stopped) write_file(dir / "stopped", "1");
  if (deaf_rank >= 0) write_file(dir / "deaf", std::to_string(deaf_rank));
  if (team_size > 0) write_file(dir / "teams", std::to_string(team_size));
  if (replay_to_kept) write_file(dir / "replay-to-kept", "1");
  const unsigned kill_seed = bellows::testing::test_seed();
  std::mt19937 kill_random(kill_seed);
  const int drawn_kill_after = std::uniform_int_distribution<int>(kFewestBeforeKill, kMostBeforeKill)(kill_random);
  // With teams the checkpoints are taken after iterations 0, K, 2K, ... (K =
  // kTeamsCheckpointEvery), and the one after c is complete everywhere once iteration c + 1
  // ends. The victim then dies once rank 0 has completed c + 1 iterations, in iteration
  // c + 2 (rank 0 starts it only once the kill is done): the roll-back redoes iteration
  // c + 1, and the replay has work to do (a kill right after a checkpoint would redo none).
  const int kill_after = team_size > 0 ? drawn_kill_after - (drawn_kill_after - 1) % kTeamsCheckpointEvery
                                       : drawn_kill_after;
  const double kill_fraction = std::uniform_real_distribution<double>(0.0, 1.0)(kill_random);
  write_file(dir / "kill_after", std::to_string(kill_after));
  // Drawn after the first kill's, so that a seed gives the first kill it gave before.
  const double second_fraction = std::uniform_real_distribution<double>(0.0, 1.0)(kill_random);
  if (second_loss) write_file(dir / "second", std::to_string(second.rank));
  if (second.after_recovery) write_file(dir / "after", "1");
  const double limit_seconds = second_loss ? kSecondLossLauncherLimitSeconds : kLauncherLimitSeconds;
  const auto start = Clock::now();
  LaunchedMembers members(
      mpiexec, ranks, dir,
      [&](int i) {
        return std::vector<std::string>{self, "--member", dir.string(), std::to_string(i), std::to_string(ranks),
                                        victims_text};
      },
      limit_seconds);
  const auto limit = members.limit();
  auto path_of = [&](const char* what, int rank) { return dir / (std::string(what) + "." + std::to_string(rank)); };

  std::vector<int> victim_pids;
  Clock::duration iteration_time{};  // rank 0's last iteration before the kill
  if (!victims.empty()) {
    // Once rank 0 has completed kill_after iterations, wait kill_fraction of the last
    // iteration's time: the victim dies within the next iteration, or in the gap before it.
    // With teams, of the shortest iteration's time instead: the last one took the checkpoint
    // after c, and the iterations after it are quicker, so that a wait as long as it could
    // carry the kill past c + 3 and into the next checkpoint's interval.
    bool due = false;
    int seen = -1;
    Clock::time_point seen_at{}, previous_at{};
    Clock::duration shortest_iteration = Clock::duration::max();
    while (!due && Clock::now() < limit) {
      const int progress = fs::exists(dir / "progress") ? std::atoi(read_file(dir / "progress").c_str()) : -1;
      if (progress != seen) {
        previous_at = seen_at;
        seen_at = Clock::now();
        if (seen >= 1 && progress == seen + 1) shortest_iteration = std::min(shortest_iteration, seen_at - previous_at);
        seen = progress;
      }
      due = progress >= kill_after;
      if (!due) {
        if (members.reap()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    expect(due, "rank 0 did not reach iteration " + std::to_string(kill_after));
    if (due && previous_at != Clock::time_point{}) {
      iteration_time = seen_at - previous_at;
      const Clock::duration wait_over =
          team_size > 0 && shortest_iteration != Clock::duration::max() ? shortest_iteration : iteration_time;
      std::this_thread::sleep_for(std::chrono::duration_cast<Clock::duration>(wait_over * kill_fraction));
    }
    if (due && deaf_rank >= 0) {
      // The victims die in a barrier they posted (deaf_watch.hpp): each stops in its next one.
      write_file(dir / "stop_in_barrier", "1");
      const auto stop_limit = Clock::now() + std::chrono::seconds(20);
      const auto all_stopped = [&] {
        return std::all_of(victims.begin(), victims.end(), [&](int v) { return fs::exists(path_of("in_barrier", v)); });
      };
      while (!all_stopped() && Clock::now() < stop_limit) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      due = all_stopped();
      expect(due, "victims " + victims_text + " did not reach a barrier within 20 s");
    }
    if (due) {
      for (const int victim : victims) victim_pids.push_back(read_int(path_of("pid", victim)));
      char text[64];
      std::snprintf(text, sizeof text, "%.6f\n", wall_seconds());
      // Two victims die at once, as two nodes that fail together: each is stopped before any
      // is killed. A stopped rank fails no MPI call and answers none, so the survivors cannot
      // finish agreeing on the first death while the second victim still runs, however long
      // this process is descheduled between two kills: the agreement waits for the second
      // victim until its kill fails the receive, and names both (docs/teams.md, "Two ranks of
      // one team"). Deaths some time apart are the `second=` and `after=` cases.
      if (!stopped && victim_pids.size() > 1) {
        for (std::size_t v = 0; v < victims.size(); ++v) {
          expect(::kill(victim_pids[v], SIGSTOP) == 0,
                 "SIGSTOP before the kill of rank " + std::to_string(victims[v]) + " failed");
        }
      }
      for (std::size_t v = 0; v < victims.size(); ++v) {
        const int signal = stopped ? SIGSTOP : SIGKILL;
        expect(::kill(victim_pids[v], signal) == 0, std::string(stopped ? "SIGSTOP" : "kill -9") + " of rank " +
                                                        std::to_string(victims[v]) + " failed");
      }
      write_file(dir / "killed", text);  // for the survivors' times only: MPI tells them nothing
      if (stopped || deaf_rank >= 0) write_file(dir / "told_lost", "1 " + victims_text);  // the control plane's word
    }
  }
  if (stopped && !victim_pids.empty()) {
    // The stopped victims stay until every survivor has verified the result: then they die,
    // as a node cut off is ended in the end.
    bool finishing = false;
    while (!finishing && Clock::now() < limit) {
      finishing = true;
      for (int r = 0; r < ranks; ++r) {
        const bool victim = std::find(victims.begin(), victims.end(), r) != victims.end();
        if (!victim && !fs::exists(path_of("finishing", r))) finishing = false;
      }
      if (!finishing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    expect(finishing, "the survivors did not all finish with ranks " + victims_text + " stopped");
    for (std::size_t v = 0; v < victims.size(); ++v) {
      expect(::kill(victim_pids[v], SIGKILL) == 0, "kill -9 of stopped rank " + std::to_string(victims[v]) + " failed");
    }
  }
  int second_pid = -1;
  if (second_loss && !victim_pids.empty()) {
    // Once a survivor has started recovering (it writes recovering.<rank> when its iteration
    // reported the loss), and after the delay, the second victim dies; with `after`, once a
    // survivor has recovered, a random fraction of an iteration later.
    const char* mark = second.after_recovery ? "recovered" : "recovering";
    bool recovering = false;
    while (!recovering && Clock::now() < limit) {
      for (int r = 0; r < ranks && !recovering; ++r) recovering = fs::exists(path_of(mark, r));
      if (!recovering) {
        if (members.reap()) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    expect(recovering, second.after_recovery ? "no survivor recovered" : "no survivor started recovering");
    if (recovering) {
      std::this_thread::sleep_for(std::chrono::milliseconds(second.delay_ms));
      if (second.after_recovery) {
        std::this_thread::sleep_for(std::chrono::duration_cast<Clock::duration>(iteration_time * second_fraction));
      }
      second_pid = read_int(path_of("pid", second.rank));
      expect(::kill(second_pid, SIGKILL) == 0, "kill -9 of rank " + std::to_string(second.rank) + " failed");
      victim_pids.push_back(second_pid);
    }
  }
  std::vector<int> all_victims = victims;
  if (second_loss) all_victims.push_back(second.rank);
  members.reap_until_limit();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const std::string& wrong : members.end("pid")) expect(false, wrong);

  nlohmann::json survivors = nlohmann::json::array();
  bool verified = false;
  int refusals = 0;
  for (int r = 0; r < ranks; ++r) {
    if (std::find(all_victims.begin(), all_victims.end(), r) != all_victims.end()) continue;
    if (!fs::exists(path_of("result", r))) {
      expect(false, "survivor " + std::to_string(r) + " wrote no result");
      continue;
    }
    const auto result = nlohmann::json::parse(read_file(path_of("result", r)));
    expect(result.value("result", "") == "PASS",
           "survivor " + std::to_string(r) + ": " + result.value("result", "(none)"));
    verified = verified || result.value("verified", false);
    refusals += result.contains("refused") ? 1 : 0;
    survivors.push_back(result);
  }
  expect(verified, "no survivor verified the result");
  const int survivor_count = ranks - static_cast<int>(all_victims.size());
  // Every survivor recovered (and one verified the result), or every one was refused.
  expect(refusals == 0 || refusals == survivor_count,
         std::to_string(refusals) + " of " + std::to_string(survivor_count) + " survivors were refused");
  expect(!second.after_recovery || refusals == 0,
         "a loss in the first iteration after the recovery was refused on " + std::to_string(refusals) + " survivors");
  const int clean_exits = members.exited_zero_count();
  const int killed_exits = static_cast<int>(members.size()) - clean_exits;
  const int expected_killed = static_cast<int>(all_victims.size());
  expect(clean_exits == ranks - expected_killed && killed_exits == expected_killed,
         std::to_string(clean_exits) + " mpiexecs exited 0 and " + std::to_string(killed_exits) +
             " did not; expected " + std::to_string(ranks - expected_killed) + " and " +
             std::to_string(expected_killed));
  if (failures != 0) members.print_outputs();
  fs::remove_all(dir);
  std::printf("%s\n", nlohmann::json{{"victims", all_victims},
                                     {"outcome", refusals > 0 ? "refused"
                                                 : !second_loss  ? "recovered"
                                                                 : "folded in"},
                                     {"victim_pids", victim_pids},
                                     {"kill_seed", kill_seed},
                                     {"killed_after_iterations", kill_after},
                                     {"kill_fraction_of_an_iteration", kill_fraction},
                                     {"second_kill_fraction_of_an_iteration",
                                      second.after_recovery ? second_fraction : -1.0},
                                     {"seconds", seconds},
                                     {"survivors", survivors}}
                          .dump()
                          .c_str());
  std::printf("recovery: %s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}

}  // namespace bellows::testing::recovery
