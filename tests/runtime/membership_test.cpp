// Grow and shrink of a real job: `mpiexec -n 1 membership_tests` starts rank 0, which
// spawns copies of this program (with --membership-child) as the job grows.
//
// Scenario, followed by every process from the step at which it joined:
//   1 rank -> grow by 3 (4 ranks) -> ranks 1 and 3 leave (2) -> grow by 2 (4) -> rank 2,
//   spawned by the second grow, leaves (3) -> everyone finalizes.
// After each step the members check size, an allreduce of their ranks, and (at rank 0)
// that every process kept its place: the pids, in rank order, are the expected ones.
// Leavers call MPI_Finalize and exit; rank 0 times how long until each is gone, and at
// the end, after its own MPI_Finalize, checks that no spawned process is left.
// Rank 0 prints one JSON line with the timings and "result":"PASS" or "FAIL". A failed
// check prints "FAILED:" on the process's stderr, and every process leaves its verdict
// (verdict.hpp): that is how a process that already left reports (hydra does not pass the
// exit code of a spawned process on to mpiexec's).
// Every process runs under a watchdog; an exception calls MPI_Abort.

#include "bellows/runtime/membership.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "spawned_processes.hpp"
#include "verdict.hpp"
#include "watchdog.hpp"

namespace {

using bellows::runtime::Membership;
using bellows::runtime::SpawnSpec;
using Clock = std::chrono::steady_clock;

constexpr const char* kChildFlag = "--membership-child";
constexpr const char* kEnvName = "BELLOWS_MEMBERSHIP_SPAWNED";
constexpr double kExitLimitSeconds = 10.0;

struct Step {
  int grow = 0;              ///< processes to spawn, or 0 for a shrink
  std::vector<int> leaving;  ///< ranks that leave
  int size_after = 0;
  std::string host;  ///< the spawn's "host" info key, when not empty
};

const std::vector<Step>& scenario() {
  static const std::vector<Step> steps = {
      {3, {}, 4, ""},
      {0, {1, 3}, 2, ""},
      {2, {}, 4, "localhost"},
      {0, {2}, 3, ""},
  };
  return steps;
}

/// What one process knows and checks.
struct Process {
  bool ok = true;  ///< this process's own checks so far
  int pid = static_cast<int>(::getpid());
  void expect(bool condition, const std::string& what) {
    if (condition) return;
    ok = false;
    std::fprintf(stderr, "membership_tests: pid %d: FAILED: %s\n", pid, what.c_str());
    std::fflush(stderr);
  }
};

/// Rank 0's bookkeeping: the pids in rank order and the timings to report.
struct Root {
  std::vector<int> pids;     ///< expected pid of each rank
  std::vector<int> spawned;  ///< every spawned pid
  nlohmann::json steps = nlohmann::json::array();
};

bool all_ranks(bool ok, MPI_Comm comm) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm);
  return all != 0;
}

double max_over_ranks(double value, MPI_Comm comm) {
  double all = 0.0;
  MPI_Allreduce(&value, &all, 1, MPI_DOUBLE, MPI_MAX, comm);
  return all;
}

/// Checks the job after step `index`. Collective over the new job communicator.
/// `rank_before` is this process's rank before the step (-1 if it just joined).
void check_after(const Membership& m, std::size_t index, int rank_before, Process& me, Root* root) {
  const Step& step = scenario()[index];
  const MPI_Comm comm = m.communicator();
  const int n = m.size();
  me.expect(n == step.size_after, "step " + std::to_string(index) + ": size " + std::to_string(n) +
                                      ", expected " + std::to_string(step.size_after));
  int sum = 0;
  int rank = m.rank();
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm);
  me.expect(sum == n * (n - 1) / 2,
            "step " + std::to_string(index) + ": sum of ranks " + std::to_string(sum));
  const int ordinal = rank_before < 0 ? m.grows().back().spawn_ordinal : -1;
  if (step.grow > 0 && rank_before >= 0) {
    me.expect(rank == rank_before,
              "grow changed rank " + std::to_string(rank_before) + " to " + std::to_string(rank));
  }
  if (rank_before < 0) {
    me.expect(rank == m.grows().back().old_size + ordinal,
              "spawned process " + std::to_string(ordinal) + " got rank " + std::to_string(rank));
    const char* env = std::getenv(kEnvName);
    me.expect(env != nullptr && std::string(env) == "1",
              std::string("spawned process lacks ") + kEnvName + "=1");
  }

  std::array<int, 3> mine{rank_before, me.pid, ordinal};
  std::vector<int> all(root ? static_cast<std::size_t>(3 * n) : 0);
  MPI_Gather(mine.data(), 3, MPI_INT, all.data(), 3, MPI_INT, 0, comm);
  if (root) {
    std::vector<int> expected = root->pids;
    if (step.grow == 0) {
      for (auto it = step.leaving.rbegin(); it != step.leaving.rend(); ++it) {
        expected.erase(expected.begin() + *it);
      }
    }
    const int kept = static_cast<int>(expected.size());
    std::vector<int> pids;
    for (int r = 0; r < n; ++r) {
      const int before = all[static_cast<std::size_t>(3 * r)];
      const int pid = all[static_cast<std::size_t>(3 * r + 1)];
      const int got_ordinal = all[static_cast<std::size_t>(3 * r + 2)];
      pids.push_back(pid);
      if (r < kept) {
        me.expect(pid == expected[static_cast<std::size_t>(r)] && before >= 0,
                  "rank " + std::to_string(r) + " is pid " + std::to_string(pid) + ", expected " +
                      std::to_string(expected[static_cast<std::size_t>(r)]));
      } else {
        me.expect(
            before == -1 && got_ordinal == r - kept &&
                std::find(root->spawned.begin(), root->spawned.end(), pid) == root->spawned.end(),
            "rank " + std::to_string(r) + " is not spawned process " + std::to_string(r - kept));
        root->spawned.push_back(pid);
      }
    }
    root->pids = pids;
  }
  // Every rank's checks so far, leavers-to-be included: their exit codes do not reach
  // mpiexec (hydra reports only the first processes' codes).
  const bool everyone = all_ranks(me.ok, comm);
  if (root) me.expect(everyone, "a rank failed a check by step " + std::to_string(index));
}

/// Runs the scenario from step `next` on. Returns false when this process left.
/// `spec` matters on rank 0 only.
bool run_steps(Membership& m, std::size_t next, Process& me, Root* root, SpawnSpec spec) {
  for (std::size_t index = next; index < scenario().size(); ++index) {
    const Step& step = scenario()[index];
    const int rank_before = m.rank();
    nlohmann::json record;
    if (step.grow > 0) {
      spec.host = step.host;
      const auto& report = m.grow(step.grow, spec);
      int following = static_cast<int>(index) + 1;
      MPI_Bcast(&following, 1, MPI_INT, 0, m.communicator());
      record = {{"step", "grow"},
                {"count", step.grow},
                {"host", step.host},
                {"spawn_s", report.spawn_seconds},
                {"merge_s", report.merge_seconds},
                {"disconnect_s", report.disconnect_seconds},
                {"total_s", report.total_seconds}};
    } else {
      const bool leaves =
          std::find(step.leaving.begin(), step.leaving.end(), rank_before) != step.leaving.end();
      std::vector<int> leaving_pids;
      for (const int r : step.leaving) {
        if (root) leaving_pids.push_back(root->pids[static_cast<std::size_t>(r)]);
      }
      const auto& report = m.shrink(step.leaving);
      const auto shrunk = Clock::now();
      me.expect(report.left == leaves && m.is_member() == !leaves,
                "rank " + std::to_string(rank_before) + ": membership after shrink is wrong");
      if (leaves) return false;
      record = {{"step", "shrink"},
                {"leaving", step.leaving},
                {"check_s", report.check_seconds},
                {"create_s", report.create_seconds},
                {"disconnect_s", report.disconnect_seconds},
                {"total_s", report.total_seconds}};
      // Others wait in the next collective meanwhile: a leaver that needed the job's
      // help to exit would show up here as a timeout.
      if (root) {
        const double gone = bellows::testing::wait_gone(leaving_pids, shrunk, kExitLimitSeconds);
        me.expect(gone >= 0.0, "leavers still running " + std::to_string(kExitLimitSeconds) +
                                   " s after the shrink");
        record["leavers_gone_s"] = gone;
      }
      const double worst = max_over_ranks(report.total_seconds, m.communicator());
      record["total_max_over_ranks_s"] = worst;
    }
    check_after(m, index, rank_before, me, root);
    if (root) root->steps.push_back(record);
  }
  return true;
}

int run_root(Process& me, Clock::time_point start) {
  Root root;
  root.pids = {me.pid};
  SpawnSpec spec;
  spec.command = bellows::runtime::current_executable();
  spec.args = {kChildFlag};
  spec.env = {{kEnvName, "1"}};
  std::optional<Membership> m(std::in_place, MPI_COMM_WORLD);
  run_steps(*m, 0, me, &root, spec);
  const bool everyone = all_ranks(me.ok, m->communicator());
  m.reset();
  const auto finalize_start = Clock::now();
  me.expect(MPI_Finalize() == MPI_SUCCESS, "MPI_Finalize failed");
  const double finalize_s = std::chrono::duration<double>(Clock::now() - finalize_start).count();
  const double gone = bellows::testing::wait_gone(root.spawned, finalize_start, kExitLimitSeconds);
  me.expect(gone >= 0.0, "spawned processes still running after the end");
  const bool pass = me.ok && everyone;
  nlohmann::json line = {{"test", "membership"},
                         {"steps", root.steps},
                         {"spawned", root.spawned.size()},
                         {"rank0_finalize_s", finalize_s},
                         {"all_gone_after_finalize_s", gone},
                         {"wall_s", std::chrono::duration<double>(Clock::now() - start).count()},
                         {"result", pass ? "PASS" : "FAIL"}};
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
  return pass ? 0 : 1;
}

int run_child(Process& me) {
  auto joined = Membership::join();
  if (!joined) {
    std::fprintf(stderr, "membership_tests: %s given but the process was not spawned\n",
                 kChildFlag);
    MPI_Finalize();
    return 2;
  }
  Membership& m = *joined;
  int next = 0;
  MPI_Bcast(&next, 1, MPI_INT, 0, m.communicator());
  check_after(m, static_cast<std::size_t>(next - 1), -1, me, nullptr);
  if (run_steps(m, static_cast<std::size_t>(next), me, nullptr, SpawnSpec{})) {
    all_ranks(me.ok, m.communicator());
  }
  joined.reset();
  me.expect(MPI_Finalize() == MPI_SUCCESS, "MPI_Finalize failed");
  return me.ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const auto start = Clock::now();
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const bool child = argc > 1 && std::string(argv[1]) == kChildFlag;
  const bellows::testing::ProcessVerdict verdict(child ? "membership_tests child"
                                                       : "membership_tests rank 0");
  Process me;
  bellows::testing::Watchdog dog(
      bellows::testing::limit_from_env("BELLOWS_TEST_WATCHDOG_S", 60.0),
      child ? "membership child pid " + std::to_string(me.pid) : "membership scenario (rank 0)");
  try {
    return verdict.record(child ? run_child(me) : run_root(me, start));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "membership_tests: pid %d: %s; aborting the job\n", me.pid, error.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
}
