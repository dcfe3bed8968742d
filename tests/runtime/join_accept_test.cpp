// Grow by accept at the MPI level: a job of 2 ranks (one mpiexec) opens a port, and processes
// started apart from it (each by an mpiexec of its own, as nodes' daemons start ranks) join
// with join_by_connect while the job calls grow_by_accept. Grows of 1, 3 and 4 processes in a
// row (2 -> 3 -> 6 -> 10 ranks) exercise a join tree with no round, one with a partner
// missing in a round, and a full one.
//
// Checks after each grow, on every rank: the size, an allreduce of the ranks, that the job's
// ranks kept their numbers (their pids, gathered in rank order), that the k-th process to
// connect got rank old size + k (its report's spawn_ordinal), and that every new process got
// rank 0's payload. Rank 0 prints one JSON line with each grow's timings and
// "join_accept: PASS" when every check held on every rank and every joining process's mpiexec
// exited 0.
//
//   join_accept_tests MPIEXEC SELF        (under mpiexec -n 2)
//   join_accept_tests --join PORT         (started by rank 0 through MPIEXEC -n 1)

#include "bellows/runtime/membership.hpp"

#include <mpi.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "separate_worlds.hpp"
#include "watchdog.hpp"

namespace {

using bellows::runtime::GrowReport;
using bellows::runtime::grow_by_accept;
using bellows::runtime::join_by_connect;

constexpr int kGrows[] = {1, 3, 4};
constexpr int kPayloadBase = 7000;

/// The payload of grow g: what a joining process must find.
std::vector<int> payload_of(int grow) { return {kPayloadBase + grow, grow, -grow}; }

int failures = 0;
void expect(bool ok, const std::string& what, int rank) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "join_accept: rank %d: FAILED: %s\n", rank, what.c_str());
  }
}

/// Checks every member makes after a grow to `size`; `pids_before` (rank 0) lists the
/// pids of the ranks before the grow, in rank order.
void check_grown(MPI_Comm job, int size, const std::vector<int>& pids_before,
                 std::vector<int>& pids_after) {
  int rank = -1, actual = -1;
  MPI_Comm_rank(job, &rank);
  MPI_Comm_size(job, &actual);
  expect(actual == size, "size " + std::to_string(actual) + ", expected " + std::to_string(size), rank);
  int sum = 0;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, job);
  expect(sum == size * (size - 1) / 2, "allreduce of the ranks gave " + std::to_string(sum), rank);
  const int pid = static_cast<int>(::getpid());
  pids_after.assign(static_cast<std::size_t>(actual), 0);
  MPI_Allgather(&pid, 1, MPI_INT, pids_after.data(), 1, MPI_INT, job);
  for (std::size_t r = 0; r < pids_before.size(); ++r) {
    expect(pids_after[r] == pids_before[r], "rank " + std::to_string(r) + " changed process", rank);
  }
}

/// A joining process: joins the grow it was started for, then every later one as a member.
int run_joiner(const std::string& port) {
  MPI_Init(nullptr, nullptr);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(90), "joining process");
  std::vector<int> payload;
  GrowReport report;
  MPI_Comm job = join_by_connect(port, payload, &report);
  int rank = -1;
  MPI_Comm_rank(job, &rank);
  const int grow = payload.size() > 1 ? payload[1] : -1;
  expect(payload == payload_of(grow), "payload not the job's", rank);
  expect(rank == report.old_size + report.spawn_ordinal,
         "rank " + std::to_string(rank) + ", joined as " + std::to_string(report.spawn_ordinal) +
             " after " + std::to_string(report.old_size),
         rank);
  int size = report.new_size;
  std::vector<int> pids, none;
  check_grown(job, size, none, pids);
  for (int g = grow + 1; g < static_cast<int>(std::size(kGrows)); ++g) {
    size += kGrows[g];
    std::vector<int> before = pids;
    const std::vector<int> p = payload_of(g);
    MPI_Barrier(job);  // with the job's ranks, which wait for the new processes to connect
    MPI_Comm grown = grow_by_accept(job, kGrows[g], "", p);
    MPI_Comm_disconnect(&job);
    job = grown;
    check_grown(job, size, before, pids);
  }
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, job);
  MPI_Comm_disconnect(&job);
  watchdog.disarm();
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}

pid_t start_joiner(const std::string& mpiexec, const std::string& self, const std::string& port) {
  std::vector<std::string> args{mpiexec, "-n", "1", self, "--join", port};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The joining process belongs to an mpiexec of its own, as a rank a node's daemon starts.
  std::vector<char*> env = bellows::testing::environment_for_own_world();
  pid_t pid = -1;
  if (posix_spawn(&pid, mpiexec.c_str(), nullptr, nullptr, argv.data(), env.data()) != 0) return -1;
  return pid;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--join") == 0) return run_joiner(argv[2]);
  if (argc != 3) {
    std::fprintf(stderr, "usage: join_accept_tests MPIEXEC SELF | --join PORT\n");
    return 2;
  }
  const std::string mpiexec = argv[1], self = argv[2];
  MPI_Init(&argc, &argv);
  int rank = -1, size = 0;
  MPI_Comm job = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &job);
  MPI_Comm_rank(job, &rank);
  MPI_Comm_size(job, &size);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(90), "job", rank);
  char port[MPI_MAX_PORT_NAME] = {};
  if (rank == 0) MPI_Open_port(MPI_INFO_NULL, port);
  std::vector<int> pids;
  std::vector<int> none;
  check_grown(job, size, none, pids);
  std::vector<pid_t> joiners;
  nlohmann::json grows = nlohmann::json::array();
  for (int g = 0; g < static_cast<int>(std::size(kGrows)); ++g) {
    if (rank == 0) {
      for (int i = 0; i < kGrows[g]; ++i) {
        const pid_t pid = start_joiner(mpiexec, self, port);
        expect(pid > 0, "could not start " + mpiexec, rank);
        joiners.push_back(pid);
      }
    }
    // The new processes wait in MPI_Comm_connect before the job starts accepting, so that
    // rank 0's one-to-one accepts time the accepts alone, not the processes' start.
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    MPI_Barrier(job);
    GrowReport report;
    const std::vector<int> p = payload_of(g);
    MPI_Comm grown = grow_by_accept(job, kGrows[g], port, p, &report);
    MPI_Comm_disconnect(&job);
    job = grown;
    std::vector<int> before = pids;
    size += kGrows[g];
    check_grown(job, size, before, pids);
    grows.push_back({{"count", kGrows[g]},
                     {"to", size},
                     {"total_seconds", report.total_seconds},
                     {"wait_seconds", report.wait_seconds},
                     {"group_seconds", report.group_seconds},
                     {"merge_seconds", report.merge_seconds.empty() ? 0.0 : report.merge_seconds.front()},
                     {"accept_seconds", report.accept_seconds}});
    if (rank == 0) {
      expect(report.accept_seconds.size() == static_cast<std::size_t>(kGrows[g]),
             "rank 0 timed " + std::to_string(report.accept_seconds.size()) + " accepts", rank);
    }
  }
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, job);
  MPI_Comm_disconnect(&job);
  if (rank == 0) MPI_Close_port(port);
  watchdog.disarm();
  MPI_Finalize();
  if (rank != 0) return failures == 0 ? 0 : 1;
  int exited_badly = 0;
  for (const pid_t pid : joiners) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++exited_badly;
    }
  }
  expect(exited_badly == 0, std::to_string(exited_badly) + " joining processes did not exit 0", rank);
  const bool pass = all_failures == 0 && failures == 0;
  std::printf("%s\n", nlohmann::json{{"grows", grows}, {"failures", all_failures}}.dump().c_str());
  std::printf("join_accept: %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
