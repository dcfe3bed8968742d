// Grow by ordinals at the MPI level: a job of 2 ranks (one mpiexec) opens a port, and processes
// started apart from it (each by an mpiexec of its own, as nodes' daemons start ranks), each told
// its ordinal and the grow's size on its command line, join with join_by_ordinal while the job
// calls grow_by_ordinals. They trade the join tree's ports through files in a directory of the
// grow; nobody meets the job's rank 0 one to one. Grows of 1, 3, 4 and 8 processes in a row
// (2 -> 3 -> 6 -> 10 -> 18 ranks: a tree with no round, one with a partner missing in a round,
// full ones), each grow's processes started last ordinal first.
//
// Checks after each grow, on every rank: the size, an allreduce of the ranks, that the job's
// ranks kept their numbers (their pids, gathered in rank order), that new process i got rank
// old size + i, that every new process got rank 0's payload, and that rank 0 removed the
// grow's directory. Then, on the 18 ranks:
//  - a grow of 2 of which only process 0 starts, called off (a file its called_off looks for
//    appears): process 0 stops waiting for its partner with GrowCalledOff and the expected text,
//    and exits 0;
//  - a grow of 2 that nobody joins, with a file timeout of 300 ms: every rank of the job throws
//    std::runtime_error naming the missing group file.
// Rank 0 prints one JSON line with each grow's timings (and the file hand-offs the new processes
// measured) and "join_ordinals: PASS" when every check held on every rank and every joining
// process's mpiexec exited 0.
//
//   join_ordinals_tests MPIEXEC SELF                  (under mpiexec -n 2)
//   join_ordinals_tests --join DIR ORDINAL COUNT      (started by rank 0 through MPIEXEC -n 1)
//   join_ordinals_tests --called-off DIR ORDINAL COUNT

#include "bellows/runtime/membership.hpp"

#include <mpi.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "separate_worlds.hpp"
#include "watchdog.hpp"

namespace {

namespace fs = std::filesystem;
using bellows::runtime::GrowReport;
using bellows::runtime::JoinExchange;

constexpr int kGrows[] = {1, 3, 4, 8};
constexpr int kPayloadBase = 7000;
constexpr const char* kCalledOffFile = "called-off";

/// The payload of grow g: what a joining process must find.
std::vector<int> payload_of(int grow) { return {kPayloadBase + grow, grow, -grow}; }

int failures = 0;
void expect(bool ok, const std::string& what, int rank) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "join_ordinals: rank %d: FAILED: %s\n", rank, what.c_str());
  }
}

/// Checks every member makes after a grow to `size`; `pids_before` lists the pids of the ranks
/// before the grow, in rank order (empty on a process that just joined).
void check_grown(MPI_Comm job, int size, const std::vector<int>& pids_before, std::vector<int>& pids_after) {
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

/// The mean and largest file hand-off the new processes of the last grow measured (every
/// rank calls it; members contribute nothing).
std::pair<double, double> handoffs(MPI_Comm job, const GrowReport* joined) {
  std::array<double, 2> sum_count{0.0, 0.0};
  double largest = 0.0;
  if (joined != nullptr) {
    for (const double s : joined->handoff_seconds) {
      sum_count[0] += s;
      sum_count[1] += 1.0;
      largest = std::max(largest, s);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, sum_count.data(), 2, MPI_DOUBLE, MPI_SUM, job);
  MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_DOUBLE, MPI_MAX, job);
  return {sum_count[1] > 0 ? sum_count[0] / sum_count[1] : 0.0, largest};
}

/// Whether the job throws on every rank, naming the missing file, for a grow nobody joins.
void expect_group_timeout(MPI_Comm job, const fs::path& dir, int rank) {
  JoinExchange exchange{dir, "", nullptr, std::chrono::milliseconds(300)};
  const std::string expected = "grow: the 2 new processes were not one group within 300 ms (no " +
                               (dir / "group").string() + ")";
  try {
    MPI_Comm grown = bellows::runtime::grow_by_ordinals(job, 2, exchange, {});
    MPI_Comm_disconnect(&grown);
    expect(false, "a grow nobody joined returned", rank);
  } catch (const std::runtime_error& e) {
    expect(e.what() == expected, std::string("timeout said '") + e.what() + "', expected '" + expected + "'", rank);
  }
}

/// As a member: every grow from `from_grow` on, checked as the job's ranks check it.
void take_part_in_later_grows(MPI_Comm& job, int from_grow, int size, std::vector<int>& pids) {
  for (int g = from_grow; g < static_cast<int>(std::size(kGrows)); ++g) {
    size += kGrows[g];
    std::vector<int> before = pids;
    const std::vector<int> p = payload_of(g);
    MPI_Comm grown = bellows::runtime::grow_by_ordinals(job, kGrows[g], JoinExchange{}, p);
    MPI_Comm_disconnect(&job);
    job = grown;
    check_grown(job, size, before, pids);
    (void)handoffs(job, nullptr);
  }
}

/// A joining process: joins the grow it was started for, then every later one as a member.
int run_joiner(const fs::path& dir, int ordinal, int count) {
  MPI_Init(nullptr, nullptr);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(90), "joining process");
  std::vector<int> payload;
  GrowReport report;
  JoinExchange exchange;
  exchange.directory = dir;
  MPI_Comm job = bellows::runtime::join_by_ordinal(ordinal, count, exchange, payload, &report);
  int rank = -1;
  MPI_Comm_rank(job, &rank);
  const int grow = payload.size() > 1 ? payload[1] : -1;
  expect(payload == payload_of(grow), "payload not the job's", rank);
  expect(report.spawn_ordinal == ordinal && rank == report.old_size + ordinal,
         "rank " + std::to_string(rank) + " as new process " + std::to_string(ordinal) + " after " +
             std::to_string(report.old_size),
         rank);
  std::vector<int> pids, none;
  check_grown(job, report.new_size, none, pids);
  (void)handoffs(job, &report);
  take_part_in_later_grows(job, grow + 1, report.new_size, pids);
  expect_group_timeout(job, dir.parent_path() / "nobody", rank);
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, job);
  MPI_Comm_disconnect(&job);
  watchdog.disarm();
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}

/// A process of a grow that is called off while it waits for its partner: exits 0 when it
/// stopped with GrowCalledOff and the expected text.
int run_called_off(const fs::path& dir, int ordinal, int count) {
  MPI_Init(nullptr, nullptr);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(60), "called-off process");
  JoinExchange exchange;
  exchange.directory = dir;
  exchange.called_off = [dir] { return fs::exists(dir.parent_path() / kCalledOffFile); };
  std::vector<int> payload;
  const std::string expected = "join: new process 0 stopped waiting for " + (dir / "round-0-1").string() +
                               ": the grow was called off";
  try {
    MPI_Comm job = bellows::runtime::join_by_ordinal(ordinal, count, exchange, payload);
    MPI_Comm_disconnect(&job);
    expect(false, "a called-off process joined", -1);
  } catch (const bellows::runtime::GrowCalledOff& e) {
    expect(e.what() == expected, std::string("called off with '") + e.what() + "', expected '" + expected + "'", -1);
  }
  watchdog.disarm();
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}

pid_t start_process(const std::string& mpiexec, const std::vector<std::string>& tail) {
  std::vector<std::string> args{mpiexec, "-n", "1"};
  args.insert(args.end(), tail.begin(), tail.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // A process of an mpiexec of its own, as a rank a node's daemon starts.
  std::vector<char*> env = bellows::testing::environment_for_own_world();
  pid_t pid = -1;
  if (posix_spawn(&pid, mpiexec.c_str(), nullptr, nullptr, argv.data(), env.data()) != 0) return -1;
  return pid;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--join") == 0)
    return run_joiner(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  if (argc == 5 && std::strcmp(argv[1], "--called-off") == 0)
    return run_called_off(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  if (argc != 3) {
    std::fprintf(stderr, "usage: join_ordinals_tests MPIEXEC SELF | --join DIR ORDINAL COUNT\n");
    return 2;
  }
  const std::string mpiexec = argv[1], self = argv[2];
  MPI_Init(&argc, &argv);
  int rank = -1, size = 0;
  MPI_Comm job = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &job);
  MPI_Comm_rank(job, &rank);
  MPI_Comm_size(job, &size);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(100), "job", rank);
  char port[MPI_MAX_PORT_NAME] = {};
  // The grows' directories, under one of rank 0's that every rank learns.
  std::array<char, 4096> base_name{};
  if (rank == 0) {
    MPI_Open_port(MPI_INFO_NULL, port);
    std::string pattern = (fs::temp_directory_path() / "bellows-join-ordinals-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) std::strncpy(base_name.data(), pattern.c_str(), base_name.size() - 1);
  }
  MPI_Bcast(base_name.data(), static_cast<int>(base_name.size()), MPI_CHAR, 0, job);
  const fs::path base(base_name.data());
  expect(!base.empty(), "no directory for the grows", rank);
  std::vector<int> pids;
  std::vector<int> none;
  check_grown(job, size, none, pids);
  std::vector<pid_t> joiners;
  nlohmann::json grows = nlohmann::json::array();
  for (int g = 0; g < static_cast<int>(std::size(kGrows)); ++g) {
    const fs::path dir = base / ("grow-" + std::to_string(g));
    if (rank == 0) {
      // Last ordinal first: a process's place does not depend on when it comes.
      for (int i = kGrows[g] - 1; i >= 0; --i) {
        const pid_t pid = start_process(mpiexec, {self, "--join", dir.string(), std::to_string(i),
                                                  std::to_string(kGrows[g])});
        expect(pid > 0, "could not start " + mpiexec, rank);
        joiners.push_back(pid);
      }
    }
    GrowReport report;
    const std::vector<int> p = payload_of(g);
    JoinExchange exchange;
    exchange.directory = dir;
    exchange.job_port = port;
    MPI_Comm grown = bellows::runtime::grow_by_ordinals(job, kGrows[g], exchange, p, &report);
    MPI_Comm_disconnect(&job);
    job = grown;
    std::vector<int> before = pids;
    size += kGrows[g];
    check_grown(job, size, before, pids);
    const auto [handoff_mean, handoff_max] = handoffs(job, nullptr);
    if (rank == 0) expect(!fs::exists(dir), dir.string() + " is still there after its grow", rank);
    expect(report.accept_seconds.empty(), "rank 0 met new processes one to one", rank);
    grows.push_back({{"count", kGrows[g]},
                     {"to", size},
                     {"total_seconds", report.total_seconds},
                     {"wait_seconds", report.wait_seconds},
                     {"group_seconds", report.group_seconds},
                     {"merge_seconds", report.merge_seconds.empty() ? 0.0 : report.merge_seconds.front()},
                     {"handoff_mean_seconds", handoff_mean},
                     {"handoff_max_seconds", handoff_max}});
  }

  // A grow called off while its process 0 waits for its partner, which never starts.
  if (rank == 0) {
    const pid_t pid = start_process(mpiexec, {self, "--called-off", (base / "called-off-grow").string(), "0", "2"});
    expect(pid > 0, "could not start " + mpiexec, rank);
    joiners.push_back(pid);
    const auto partner_file = base / "called-off-grow" / "round-0-0";
    for (int i = 0; i < 3000 && !fs::exists(partner_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    expect(fs::exists(partner_file), partner_file.string() + " did not appear", rank);
    bellows::testing::write_file(base / kCalledOffFile, "called off\n");
  }
  // A grow nobody joins.
  expect_group_timeout(job, base / "nobody", rank);

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
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++exited_badly;
  }
  expect(exited_badly == 0, std::to_string(exited_badly) + " joining processes did not exit 0", rank);
  std::error_code ignored;
  fs::remove_all(base, ignored);
  const bool pass = all_failures == 0 && failures == 0;
  std::printf("%s\n", nlohmann::json{{"grows", grows}, {"failures", all_failures}}.dump().c_str());
  std::printf("join_ordinals: %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
