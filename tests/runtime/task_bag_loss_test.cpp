// A bag of tasks that loses a rank mid-run and carries on (TaskBag, task_bag.hpp): four ranks,
// each the only process of its own mpiexec (MPICH ch3 kills no survivor then), joined the way a
// Bellows job is (grow_by_accept / join_by_connect), run kRuns bags of kTasks tasks each, with
// the distribution the test names (the re-run after a loss is Dtree's whatever it is) and two
// workers per rank; each task takes its modeled
// time (0.1 to 1.1 ms from its index) on the emulated clock. The launcher SIGKILLs the victim at
// a moment the test does not choose: once rank 0 has started a random run of the first two,
// after a random fraction of kExpectedRunSeconds, which may fall in that run, in the gap after
// it (the next run then notices the loss at its start), or in the next run. BELLOWS_TEST_SEED fixes both; the seed is
// printed with the result. Nothing tells the survivors.
//
// Each rank writes, after each run, how often it ran each index and the run's report. The
// launcher then checks, for every run: the survivors' reports are alike (lost ranks, tasks,
// digest), the digest is that of every index run once (a failure-free run's) and the task
// count is kTasks; every index ran exactly once over the ranks that finished the run (the
// victim's part of a run it died in is not counted: its results died with it); a run that
// lost the victim names exactly it and ended on the three others, and its kept and re-run
// counts add up to kTasks; exactly one run lost a rank. One outcome is refused instead: the
// victim died inside a run's closing gather, after its part reached some survivors and not
// others, so that the first went on to the next run while the others recovered this one; every
// survivor must then be refused alike (TaskBag::run throws, naming the runs), after the runs
// before it checked as above. Every survivor's mpiexec exits 0, the victim's is killed, and no
// process is left.
//
// With `deaf=R` the verdict on who died comes late: the victim stops in the first
// MPI_Ibarrier it posts once the run the kill is timed from started (deaf_watch.hpp), and is
// SIGKILLed there, so that the survivors' barrier fails; survivor R's watch hears nothing from
// MPI, and R learns who died only from the control plane's word, told 1 s after the kill (the
// others 100 ms apart, as a controller's would reach them). With victim 1, R = 3 is the survivor
// whose barrier fails rather than waits: in MPICH's dissemination barrier over 4 ranks it waits
// for the victim's second round, which never comes. R must wait for that word (the
// verdict, wait_for_loss_verdict) rather than end on its failed barrier, and recover with the
// others; the checks are the same, with no refusal allowed.
//
//   task_bag_loss_tests MPIEXEC SELF DISTRIBUTION VICTIM [deaf=R]  (the launcher; no MPI)
//   task_bag_loss_tests --member DIR INDEX DISTRIBUTION      (under MPIEXEC -n 1)

#include "bellows/runtime/loss_notices.hpp"
#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/rebuild.hpp"
#include "bellows/runtime/task_bag.hpp"

#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "control_plane_word.hpp"
#include "deaf_watch.hpp"
#include "separate_worlds.hpp"
#include "spawned_processes.hpp"
#include "watchdog.hpp"

namespace {

namespace fs = std::filesystem;
namespace br = bellows::runtime;
using Clock = std::chrono::steady_clock;
using bellows::testing::read_file;
using bellows::testing::read_int;
using bellows::testing::LaunchedMembers;
using bellows::testing::recovery::tell_when_told;
using bellows::testing::write_file;

constexpr int kRanks = 4;
constexpr int kRuns = 4;
constexpr std::int64_t kTasks = 3000;
// The kill comes up to this long after the run starts; a run takes 0.22-0.3 s here (3000 tasks
// of 0.6 ms on average over 8 workers), so two runs and their gaps outlast it.
constexpr double kExpectedRunSeconds = 0.5;
constexpr double kLauncherLimitSeconds = 90.0;
// `deaf=R`: how long after the kill survivor R hears the control plane's word (each other
// survivor 100 ms times its rank after it).
constexpr auto kDeafTellDelay = std::chrono::milliseconds(1000);

int failures = 0;
std::string first_failure;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    if (failures++ == 0) first_failure = what;
    std::fprintf(stderr, "task_bag_loss_tests: FAILED: %s\n", what.c_str());
  }
}

std::uint64_t digest_of(std::int64_t index) {
  std::uint64_t z = static_cast<std::uint64_t>(index) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double modeled_seconds_of(std::int64_t index) { return 1e-4 + 1e-3 * static_cast<double>(digest_of(index) % 1000) / 1000.0; }

std::uint64_t expected_digest() {
  std::uint64_t sum = 0;
  for (std::int64_t i = 0; i < kTasks; ++i) sum += digest_of(i);
  return sum;
}

// ------------------------------------------------------------------------------------ member

int run_member(const fs::path& dir, int index, const std::string& distribution) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(75), "task bag loss member", index);
  MPI_Comm job = bellows::testing::join_member_worlds(dir, index, kRanks);
  int rank = -1;
  MPI_Comm_rank(job, &rank);
  const int first_rank = rank;
  write_file(dir / ("pid." + std::to_string(rank)), std::to_string(::getpid()));
  write_file(dir / ("rank_of_member." + std::to_string(index)), std::to_string(rank));
  namespace deaf = bellows::testing::recovery;
  const int deaf_rank = fs::exists(dir / "deaf") ? read_int(dir / "deaf") : -1;
  const int victim = fs::exists(dir / "victim") ? read_int(dir / "victim") : -1;
  if (rank == deaf_rank) deaf::make_watch_deaf();
  std::jthread victim_stopper;  // `deaf=R`: the victim dies in a barrier it posted
  std::jthread teller;
  if (deaf_rank >= 0 && rank == victim) {
    victim_stopper = std::jthread([dir, rank](std::stop_token stop) {
      while (!stop.stop_requested() && !fs::exists(dir / "stop_in_barrier")) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!stop.stop_requested()) deaf::stop_in_next_barrier(dir / ("in_barrier." + std::to_string(rank)));
    });
  } else if (deaf_rank >= 0) {
    teller = tell_when_told(dir, rank == deaf_rank ? kDeafTellDelay : std::chrono::milliseconds(100 * rank));
  }

  br::BagOptions options;
  expect(br::parse_bag_distribution(distribution, options.distribution), "distribution " + distribution);
  options.workers = 2;
  options.timeout_seconds = 60.0;
  options.recovery_timeout_seconds = 10.0;
  br::TaskBag bag(options);
  std::unique_ptr<std::atomic<int>[]> counts(new std::atomic<int>[kTasks]);
  br::BagTasks tasks;
  tasks.count = kTasks;
  tasks.body = [&](std::int64_t i) {
    counts[static_cast<std::size_t>(i)].fetch_add(1);
    return digest_of(i);
  };
  tasks.modeled_seconds = modeled_seconds_of;
  nlohmann::json result{{"rank", first_rank}, {"runs", nlohmann::json::array()}};
  try {
    for (int run = 0; run < kRuns; ++run) {
      for (std::int64_t i = 0; i < kTasks; ++i) counts[static_cast<std::size_t>(i)].store(0);
      if (rank == 0) write_file(dir / "started", std::to_string(run));
      const br::BagReport report = bag.run(job, tasks);
      std::string ran(static_cast<std::size_t>(kTasks), '0');
      for (std::int64_t i = 0; i < kTasks; ++i) {
        ran[static_cast<std::size_t>(i)] = static_cast<char>('0' + std::min(9, counts[static_cast<std::size_t>(i)].load()));
      }
      write_file(dir / ("ran." + std::to_string(first_rank) + "." + std::to_string(run)), ran);
      result["runs"].push_back(report);
      if (report.survivors != MPI_COMM_NULL) {
        MPI_Comm_free(&job);  // holds the dead: freed, never disconnected
        job = report.survivors;
        MPI_Comm_rank(job, &rank);
      }
    }
    result["result"] = failures == 0 ? "PASS" : "FAIL: " + first_failure;
  } catch (const std::exception& e) {
    // The one refusal allowed: the victim died as a run ended, after some survivors had its end.
    const bool refused = std::strstr(e.what(), "not recovering the same run") != nullptr;
    result["result"] = std::string(refused ? "REFUSED: " : "FAIL: ") + e.what();
    if (!refused) failures++;
  }
  if (first_rank == deaf_rank) {
    result["deaf_watch_receives"] = deaf::deaf_watch_receives();
  }
  write_file(dir / ("result." + std::to_string(first_rank)), result.dump());
  MPI_Finalize();
  watchdog.disarm();
  return failures == 0 ? 0 : 1;
}

// ------------------------------------------------------------------------------------ launcher

int run_launcher(const std::string& mpiexec, const std::string& self, const std::string& distribution,
                 int victim, int deaf_rank) {
  if (deaf_rank == victim || deaf_rank >= kRanks) {
    std::fprintf(stderr, "task_bag_loss_tests: deaf=%d: not a survivor of %d ranks losing rank %d\n", deaf_rank,
                 kRanks, victim);
    return 2;
  }
  if (victim < 0 || victim >= kRanks ||
      (distribution != "dtree" && distribution != "steal" && distribution != "static")) {
    std::fprintf(stderr, "task_bag_loss_tests: the victim must be a rank of %d and the distribution dtree, "
                         "steal or static, got %d and '%s'\n", kRanks, victim, distribution.c_str());
    return 2;
  }
  char pattern[] = "/tmp/bellows-bag-loss-XXXXXX";
  const fs::path dir = ::mkdtemp(pattern);
  const unsigned seed = bellows::testing::test_seed();
  std::mt19937 random(seed);
  // Two runs at least follow the one the kill is timed from: a kill that comes after it
  // ended is noticed in one of them.
  const int kill_run = std::uniform_int_distribution<int>(0, kRuns - 3)(random);
  const double kill_fraction = std::uniform_real_distribution<double>(0.0, 1.0)(random);
  if (deaf_rank >= 0) {
    std::printf("task_bag_loss_tests: seed %u: rank %d killed in its first barrier after run %d started, "
                "rank %d deaf\n", seed, victim, kill_run, deaf_rank);
    write_file(dir / "deaf", std::to_string(deaf_rank));
    write_file(dir / "victim", std::to_string(victim));
  } else {
    std::printf("task_bag_loss_tests: seed %u: rank %d killed %.3f s after run %d started\n", seed, victim,
                kill_fraction * kExpectedRunSeconds, kill_run);
  }
  std::fflush(stdout);
  LaunchedMembers members(
      mpiexec, kRanks, dir,
      [&](int i) { return std::vector<std::string>{self, "--member", dir.string(), std::to_string(i), distribution}; },
      kLauncherLimitSeconds);
  auto path_of = [&](const std::string& what, int rank) { return dir / (what + "." + std::to_string(rank)); };
  bool due = false;
  while (!due && Clock::now() < members.limit()) {
    due = fs::exists(dir / "started") && read_int(dir / "started") >= kill_run;
    if (!due) {
      if (members.reap()) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  expect(due, "rank 0 did not start run " + std::to_string(kill_run));
  int victim_pid = -1;
  if (due && deaf_rank >= 0) {
    write_file(dir / "stop_in_barrier", "1");
    while (!fs::exists(path_of("in_barrier", victim)) && Clock::now() < members.limit()) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    expect(fs::exists(path_of("in_barrier", victim)), "rank " + std::to_string(victim) + " posted no barrier");
  } else if (due) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kill_fraction * kExpectedRunSeconds));
  }
  if (due) {
    victim_pid = read_int(path_of("pid", victim));
    expect(::kill(victim_pid, SIGKILL) == 0, "kill -9 of rank " + std::to_string(victim) + " failed");
    if (deaf_rank >= 0) write_file(dir / "told_lost", "1 " + std::to_string(victim));  // the control plane's word
  }
  members.reap_until_limit();
  for (const std::string& wrong : members.end("pid")) expect(false, wrong);
  for (int i = 0; i < kRanks; ++i) {
    // Members join in any order: member i is the job's rank rank_of_member.i.
    const fs::path rank_file = path_of("rank_of_member", i);
    const int rank = fs::exists(rank_file) ? read_int(rank_file) : -1;
    const bool clean = members.exited_zero(static_cast<std::size_t>(i));
    expect(rank == victim ? !clean : clean, "the mpiexec of rank " + std::to_string(rank) + " ended with status " +
                                                std::to_string(members[static_cast<std::size_t>(i)].status));
  }

  // Every survivor's reports, run by run.
  std::vector<nlohmann::json> results;
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim) continue;
    if (!fs::exists(path_of("result", r))) {
      expect(false, "survivor " + std::to_string(r) + " wrote no result");
      continue;
    }
    results.push_back(nlohmann::json::parse(read_file(path_of("result", r))));
    const std::string outcome = results.back().value("result", "(none)");
    expect(outcome == "PASS" || (deaf_rank < 0 && outcome.rfind("REFUSED: ", 0) == 0),
           "survivor " + std::to_string(r) + ": " + outcome);
    if (r == deaf_rank) {
      expect(results.back().value("deaf_watch_receives", 0L) > 0,
             "rank " + std::to_string(r) + "'s watch posted no receive on the watch's tag: deaf_watch.cpp's "
             "tag is not the bag's");
    }
  }
  // Every survivor finished every run, or every one was refused (a death as a run ended, seen
  // by some survivors only: they are not recovering the same run) after the runs before.
  int refusals = 0;
  for (const auto& result : results) refusals += result.value("result", "").rfind("REFUSED: ", 0) == 0 ? 1 : 0;
  const bool refused = refusals > 0;
  expect(refusals == 0 || refusals == static_cast<int>(results.size()),
         std::to_string(refusals) + " of " + std::to_string(results.size()) + " survivors were refused");
  const std::uint64_t digest = expected_digest();
  nlohmann::json summary = nlohmann::json::array();
  int runs_with_loss = 0;
  for (int run = 0; run < kRuns && !results.empty(); ++run) {
    bool all_ran = true;
    for (const auto& result : results) all_ran = all_ran && result["runs"].size() > static_cast<std::size_t>(run);
    expect(all_ran || refused, "a survivor did not finish run " + std::to_string(run));
    if (!all_ran) break;
    const nlohmann::json& first = results.front()["runs"][static_cast<std::size_t>(run)];
    for (const auto& result : results) {
      const auto& report = result["runs"][static_cast<std::size_t>(run)];
      expect(report["digest"] == first["digest"] && report["tasks"] == first["tasks"] &&
                 report.value("lost_ranks", nlohmann::json::array()) ==
                     first.value("lost_ranks", nlohmann::json::array()),
             "survivors' reports of run " + std::to_string(run) + " differ");
    }
    expect(first["digest"].get<std::uint64_t>() == digest,
           "run " + std::to_string(run) + "'s digest " + first["digest"].dump() + " is not " + std::to_string(digest));
    expect(first["tasks"].get<std::int64_t>() == kTasks, "run " + std::to_string(run) + " ran " +
                                                             first["tasks"].dump() + " tasks");
    const bool lost = first.contains("lost_ranks");
    runs_with_loss += lost ? 1 : 0;
    // Who finished this run: every rank that wrote its counts, less the victim when the run lost it.
    std::vector<int> per_index(static_cast<std::size_t>(kTasks), 0);
    for (int r = 0; r < kRanks; ++r) {
      const fs::path file = dir / ("ran." + std::to_string(r) + "." + std::to_string(run));
      if (!fs::exists(file)) continue;
      const std::string ran = read_file(file);
      for (std::int64_t i = 0; i < kTasks && i < static_cast<std::int64_t>(ran.size()); ++i) {
        const int c = ran[static_cast<std::size_t>(i)] - '0';
        if (r == victim && lost) continue;
        per_index[static_cast<std::size_t>(i)] += c;
      }
    }
    const bool victim_wrote = fs::exists(dir / ("ran." + std::to_string(victim) + "." + std::to_string(run)));
    int wrong = 0;
    std::int64_t first_wrong = -1;
    for (std::int64_t i = 0; i < kTasks; ++i) {
      const int c = per_index[static_cast<std::size_t>(i)];
      // A run the victim finished and then died before writing its counts: what it ran is not
      // seen here, but the digest above still counts it.
      const bool ok = c == 1 || (c == 0 && !lost && !victim_wrote);
      if (!ok && wrong++ == 0) first_wrong = i;
    }
    expect(wrong == 0, "run " + std::to_string(run) + ": " + std::to_string(wrong) +
                           " indices did not run exactly once, the first " + std::to_string(first_wrong));
    nlohmann::json line{{"run", run}, {"lost_ranks", first.value("lost_ranks", nlohmann::json::array())}};
    if (lost) {
      expect(first["lost_ranks"] == nlohmann::json::array({victim}),
             "run " + std::to_string(run) + " lost " + first["lost_ranks"].dump());
      const auto& recovery = first["recoveries"][0];
      const std::int64_t kept = recovery["kept_tasks"].get<std::int64_t>();
      const std::int64_t rerun = recovery["rerun_tasks"].get<std::int64_t>();
      expect(kept + rerun == kTasks, "run " + std::to_string(run) + ": kept " + std::to_string(kept) +
                                         " and re-ran " + std::to_string(rerun));
      expect(first["ranks"].size() == kRanks - 1, "run " + std::to_string(run) + " ended on " +
                                                        std::to_string(first["ranks"].size()) + " ranks");
      line["kept_tasks"] = kept;
      line["rerun_tasks"] = rerun;
      line["recovery_seconds"] = recovery["seconds"];
    }
    line["seconds"] = first["seconds"];
    summary.push_back(line);
  }
  expect(runs_with_loss == 1 || (refused && runs_with_loss == 0),
         std::to_string(runs_with_loss) + " runs lost a rank, not 1");
  if (failures != 0) {
    members.print_outputs();
    for (const auto& result : results) {
      nlohmann::json brief = result;
      for (auto& run : brief["runs"]) run.erase("ranks");
      std::fprintf(stderr, "--- survivor %d's reports: %s\n", result.value("rank", -1), brief.dump().c_str());
    }
  }
  fs::remove_all(dir);
  std::printf("%s\n", nlohmann::json{{"distribution", distribution},
                                     {"victim", victim},
                                     {"outcome", refused ? results.front().value("result", "") : "recovered"},
                                     {"seed", seed},
                                     {"kill_run", kill_run},
                                     {"kill_seconds_after_start", kill_fraction * kExpectedRunSeconds},
                                     {"runs", summary}}
                          .dump()
                          .c_str());
  std::printf("task bag loss: %s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--member") == 0) {
    return run_member(argv[2], std::atoi(argv[3]), argv[4]);
  }
  int deaf_rank = -1;
  if (argc == 6 && std::sscanf(argv[5], "deaf=%d", &deaf_rank) != 1) deaf_rank = -2;
  if ((argc != 5 && argc != 6) || deaf_rank < -1) {
    std::fprintf(stderr, "usage: task_bag_loss_tests MPIEXEC SELF DISTRIBUTION VICTIM [deaf=RANK] | "
                         "--member DIR INDEX DISTRIBUTION\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2], argv[3], std::atoi(argv[4]), deaf_rank);
}
