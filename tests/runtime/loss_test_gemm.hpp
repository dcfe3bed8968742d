#pragma once
// The GEMM pieces the tests of a rank lost around a resize, TeamLB's plan, a replay or the job's
// end share (boundary_loss_test.cpp, teams_after_resize_test.cpp, teams_plan_loss_test.cpp,
// job_end_loss_test.cpp, replay_loss_test.cpp, shrink_confirming_loss_test.cpp,
// shrink_confirmation_test.cpp): a member's checks, its job joined from worlds of their own, the
// ranks as a set in messages, C as a run without failure computes it, every task run once over
// the ranks, GEMM tasks whose first task run once armed kills the process, and the survivors'
// results as their launcher reads them.

#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bellows/kernels/tile_kernels.hpp"
#include "bellows/runtime/elastic_job.hpp"
#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"
#include "separate_worlds.hpp"
#include "spawned_processes.hpp"
#include "tiled_gemm.hpp"

namespace bellows::test {

/// The job of these tests: C = A * B of kGemmN x kGemmN in tiles of kGemmTile (3 x 3 tiles:
/// kGemmTasks GEMM tasks per iteration) from kGemmSeed; a victim waits 0 to
/// kMostPauseMicroseconds before it dies.
inline constexpr int kGemmN = 288;
inline constexpr int kGemmTile = 96;
inline constexpr int kGemmTasks = 27;
inline constexpr unsigned kGemmSeed = 5;
inline constexpr int kMostPauseMicroseconds = 3000;

/// A process's checks: each one that fails is counted in `failures` and printed as
/// "PROGRAM: FAILED: WHAT".
struct Checks {
  const char* program;
  int failures = 0;

  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failures;
    std::fprintf(stderr, "%s: FAILED: %s\n", program, what.c_str());
  }
};

/// A victim's end: waits `pause_us` microseconds, then SIGKILLs this process.
inline void die_after_pause(int pause_us) {
  std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  ::raise(SIGKILL);
}

/// "{1, 3}".
inline std::string rank_set(const std::vector<int>& ranks) {
  std::string out = "{";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "}";
}

/// C of the n x n GEMM of `seed` in tiles of `tile`, as a run without failure computes it: the
/// same tile kernel in the same order, on this process alone.
inline std::vector<double> serial_gemm_c(int n, int tile, unsigned seed) {
  TiledGemm serial(n, tile, 1, 0, seed);
  const int tiles = n / tile;
  for (int j = 0; j < tiles; ++j) {
    for (int i = 0; i < tiles; ++i) {
      auto result = std::make_shared<runtime::Tile>(tile, tile);
      for (int k = 0; k < tiles; ++k) {
        kernels::gemm_nn(*serial.a.tile(i, k), *serial.b.tile(k, j), k == 0 ? 0.0 : 1.0, *result);
      }
      serial.c.set_tile(i, j, std::move(result));
    }
  }
  return serial.c.gather_to_root(MPI_COMM_SELF);
}

/// Every GEMM task (kGemmN / kGemmTile cubed) of every iteration from `first_counted` to
/// `last_counted` ran once over the job's ranks: each rank's count of the last run of each
/// iteration (`tasks_run`), summed on `comm`, each sum that differs failed in `checks`. Returns
/// the sums, one per iteration from `first_counted` on.
inline std::vector<unsigned long long> expect_every_task_once_from(int first_counted, int last_counted,
                                                                   const std::map<long, std::uint64_t>& tasks_run,
                                                                   MPI_Comm comm, Checks& checks) {
  std::vector<unsigned long long> mine, all(static_cast<std::size_t>(last_counted - first_counted + 1), 0);
  for (int i = first_counted; i <= last_counted; ++i) {
    const auto ran = tasks_run.find(i);
    mine.push_back(ran != tasks_run.end() ? ran->second : 0);
  }
  MPI_Allreduce(mine.data(), all.data(), static_cast<int>(all.size()), MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
  const unsigned long long tiles = kGemmN / kGemmTile, tasks_per_iteration = tiles * tiles * tiles;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const int iteration = first_counted + static_cast<int>(i);
    checks.expect(all[i] == tasks_per_iteration, "iteration " + std::to_string(iteration) + " ran " +
                                                     std::to_string(all[i]) + " tasks over the ranks, expected " +
                                                     std::to_string(tasks_per_iteration));
  }
  return all;
}

/// Member INDEX's run in DIR (`run_member`) between MPI_Init_thread (MPI_THREAD_SERIALIZED)
/// and MPI_Finalize. Returns its exit status.
inline int run_member_under_mpi(int (*run_member)(const std::filesystem::path&, int), const std::filesystem::path& dir,
                                int index) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  const int status = run_member(dir, index);
  MPI_Finalize();
  return status;
}

/// Member INDEX's job of `count` members, each its own MPI world joined as join_member_worlds
/// joins them, under an ElasticJob that never grows; writes DIR/pid.INDEX and DIR/rank.INDEX for
/// the launcher (run_members, survivor_results). Collective over the members.
inline std::unique_ptr<runtime::ElasticJob> join_fixed_job(const std::filesystem::path& dir, int index, int count) {
  MPI_Comm joined = testing::join_member_worlds(dir, index, count);
  auto job = std::make_unique<runtime::ElasticJob>(
      runtime::Membership(joined),
      runtime::ElasticJob::Grow([](runtime::Membership&, int, int, std::uint64_t) -> const runtime::GrowReport& {
        throw std::logic_error("this test does not grow");
      }));
  MPI_Comm_free(&joined);
  testing::write_file(dir / ("pid." + std::to_string(index)), std::to_string(::getpid()));
  testing::write_file(dir / ("rank." + std::to_string(index)), std::to_string(job->rank()));
  return job;
}

/// The GEMM's tasks, except that once `armed` the first task this rank runs waits `pause_us`
/// and SIGKILLs the process: a loss at a point of the iteration after its start (its barrier,
/// its tile moves and the checkpoint that completes before its tasks after a resize).
class KillingGemm final : public runtime::TaskClass {
 public:
  KillingGemm(TiledGemm& gemm, const std::atomic<bool>& armed, int pause_us)
      : TaskClass(0), gemm_(0, gemm.a, gemm.b, gemm.c), armed_(armed), pause_us_(pause_us) {}

  [[nodiscard]] std::string_view name() const override { return gemm_.name(); }
  void for_each_task(const std::function<void(const runtime::TaskKey&)>& fn) const override {
    gemm_.for_each_task(fn);
  }
  [[nodiscard]] int owner(const runtime::TaskKey& key) const override { return gemm_.owner(key); }
  void inputs(const runtime::TaskKey& key, std::vector<runtime::InputSource>& out) const override {
    gemm_.inputs(key, out);
  }
  void successors(const runtime::TaskKey& key, int slot, std::vector<runtime::Successor>& out) const override {
    gemm_.successors(key, slot, out);
  }
  [[nodiscard]] double flops(const runtime::TaskKey& key) const override { return gemm_.flops(key); }
  [[nodiscard]] std::int64_t priority(const runtime::TaskKey& key) const override { return gemm_.priority(key); }
  void execute_cpu(const runtime::TaskKey& key, std::span<runtime::Tile* const> tiles) const override {
    if (armed_.load()) die_after_pause(pause_us_);  // in the iteration's tasks
    gemm_.execute_cpu(key, tiles);
  }

 private:
  examples::GemmTasks gemm_;
  const std::atomic<bool>& armed_;
  int pause_us_;
};

/// The runtime's options of these tests on rank `rank`: a short sleep of the communication
/// thread, tiles over MPI (as between nodes), stealing on, a checkpoint at every boundary on a
/// node of its own ("nodeRANK"), and messages logged between teams of `team_size` (0: none).
inline runtime::RuntimeOptions loss_test_options(int rank, int team_size) {
  runtime::RuntimeOptions options;
  options.comm_max_sleep_us = 100;
  options.same_host_transport = false;
  options.steal.enabled = true;
  options.checkpoint.enabled = true;
  options.checkpoint.every_iterations = 1;
  options.checkpoint.node = "node" + std::to_string(rank);
  options.message_log.enabled = team_size > 0;
  options.message_log.team_size = team_size;
  return options;
}

/// Registers the GEMM's collections A, B and C and its tasks (KillingGemm: `armed`, `pause_us`).
inline void add_gemm(runtime::Runtime& runtime, TiledGemm& gemm, const std::atomic<bool>& armed, int pause_us) {
  runtime.add_collection(gemm.a);
  runtime.add_collection(gemm.b);
  runtime.add_collection(gemm.c);
  runtime.add_task_class(std::make_unique<KillingGemm>(gemm, armed, pause_us));
}

/// A member's end: its `result` with "result" set to PASS (no failed check) or FAIL, written to
/// DIR/result.RANK for the launcher. Returns the member's exit status.
inline int write_member_result(const std::filesystem::path& dir, int rank, nlohmann::json result, int failures) {
  result["result"] = failures == 0 ? "PASS" : "FAIL";
  testing::write_file(dir / ("result." + std::to_string(rank)), result.dump());
  return failures == 0 ? 0 : 1;
}

/// The survivors' results, as the launcher reads them once every member ended.
struct SurvivorResults {
  nlohmann::json results = nlohmann::json::array();  ///< each survivor's, as it wrote it
  bool verified = false;                             ///< some survivor verified C
  std::vector<std::string> wrong;                    ///< what was wrong, each as a sentence
  std::string outputs;                               ///< the members' (run_members)
};

/// Reads member I's rank from DIR/rank.I: the victims' mpiexecs must not have exited 0, every
/// other one must have, and that survivor must have written DIR/result.RANK, a JSON object
/// whose "result" is "PASS" ("verified": true where it checked C).
inline SurvivorResults survivor_results(const testing::LaunchedMembers& members, const std::filesystem::path& dir,
                                        const std::vector<int>& victims) {
  SurvivorResults out;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::filesystem::path rank_file = dir / ("rank." + std::to_string(i));
    if (!std::filesystem::exists(rank_file)) {
      out.wrong.push_back("member " + std::to_string(i) + " never joined the job");
      continue;
    }
    const int r = testing::read_int(rank_file);
    const bool exited_zero = members.exited_zero(i);
    if (std::find(victims.begin(), victims.end(), r) != victims.end()) {
      if (exited_zero) out.wrong.emplace_back("the victim's mpiexec exited 0");
      continue;
    }
    if (!exited_zero) out.wrong.push_back("survivor " + std::to_string(r) + "'s mpiexec did not exit 0");
    const std::filesystem::path result_file = dir / ("result." + std::to_string(r));
    if (!std::filesystem::exists(result_file)) {
      out.wrong.push_back("survivor " + std::to_string(r) + " wrote no result");
      continue;
    }
    const auto result = nlohmann::json::parse(testing::read_file(result_file));
    if (result.value("result", "") != "PASS") out.wrong.push_back("survivor " + std::to_string(r) + ": " + result.dump());
    out.verified = out.verified || result.value("verified", false);
    out.results.push_back(result);
  }
  return out;
}

/// Starts the job's `processes` members, member I as `MPIEXEC -n 1 SELF --member DIR I`, waits
/// until every one ended or `limit_seconds` passed, kills what is left (LaunchedMembers::end,
/// the members' pids in DIR/pid.I) and reads the survivors' results (survivor_results).
inline SurvivorResults run_members(const std::string& mpiexec, const std::string& self,
                                   const std::filesystem::path& dir, int processes, const std::vector<int>& victims,
                                   double limit_seconds) {
  testing::LaunchedMembers members(
      mpiexec, processes, dir,
      [&](int i) { return std::vector<std::string>{self, "--member", dir.string(), std::to_string(i)}; },
      limit_seconds);
  members.reap_until_limit();
  const std::vector<std::string> left = members.end("pid");
  SurvivorResults out = survivor_results(members, dir, victims);
  out.wrong.insert(out.wrong.begin(), left.begin(), left.end());
  out.outputs = members.outputs();
  return out;
}

/// The same with one victim (-1: none).
inline SurvivorResults run_members(const std::string& mpiexec, const std::string& self,
                                   const std::filesystem::path& dir, int processes, int victim,
                                   double limit_seconds) {
  return run_members(mpiexec, self, dir, processes, std::vector<int>{victim}, limit_seconds);
}

/// The end of such a launcher: counts each thing `read` found wrong, and a result no
/// survivor verified where `verified_expected`, with the launcher's own `failures`, each printed
/// as "TEST_tests: FAILED: ..."; prints the members' outputs when any check failed, removes
/// DIR, prints `summary` with the seconds since `start` and the survivors' results as one JSON
/// line, then "TEST: PASS" or "TEST: FAIL". Returns the launcher's exit status.
inline int report_launcher(const std::string& test, nlohmann::json summary, const SurvivorResults& read,
                           bool verified_expected, int failures, const std::filesystem::path& dir,
                           std::chrono::steady_clock::time_point start) {
  std::vector<std::string> wrong = read.wrong;
  if (verified_expected && !read.verified) wrong.emplace_back("no survivor verified the result");
  for (const std::string& what : wrong) std::fprintf(stderr, "%s_tests: FAILED: %s\n", test.c_str(), what.c_str());
  failures += static_cast<int>(wrong.size());
  if (failures != 0) std::fputs(read.outputs.c_str(), stderr);
  std::filesystem::remove_all(dir);
  summary["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  summary["survivors"] = read.results;
  std::printf("%s\n%s: %s\n", summary.dump().c_str(), test.c_str(), failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}

/// A launcher's run of such a job: its directory (/tmp/bellows-NAME-XXXXXX) holding the
/// victim's rank (DIR/victim) and its pause before it dies (DIR/pause_us: 0 to `most_pause_us`
/// microseconds, drawn from test_seed()), for the members to read.
struct LossRun {
  LossRun(const std::string& name, int victim_rank, int most_pause_us)
      : dir(make_dir(name)), victim(victim_rank), seed(testing::test_seed()) {
    std::mt19937 random(seed);
    pause_us = std::uniform_int_distribution<int>(0, most_pause_us)(random);
    testing::write_file(dir / "victim", std::to_string(victim));
    testing::write_file(dir / "pause_us", std::to_string(pause_us));
  }

  /// Runs the job's `processes` members to their end (run_members) and reports it
  /// (report_launcher: a verified result expected; the victim, seed and pause in `summary`).
  int to_the_end(const std::string& test, const std::string& mpiexec, const std::string& self, int processes,
                 double limit_seconds, nlohmann::json summary, int failures) const {
    const SurvivorResults read = run_members(mpiexec, self, dir, processes, victim, limit_seconds);
    summary["victim"] = victim;
    summary["seed"] = seed;
    summary["pause_us"] = pause_us;
    return report_launcher(test, std::move(summary), read, true, failures, dir, start);
  }

  std::filesystem::path dir;
  int victim;
  unsigned seed;
  int pause_us = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

 private:
  static std::filesystem::path make_dir(const std::string& name) {
    std::string pattern = "/tmp/bellows-" + name + "-XXXXXX";
    return ::mkdtemp(pattern.data());
  }
};

}  // namespace bellows::test
