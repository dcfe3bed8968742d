// rebuild_without at the MPI level, with a rank killed as a node's loss kills it: four ranks,
// each the only process of its own mpiexec, joined the way a Bellows job is (grow_by_accept /
// join_by_connect on a port passed through a file), exchange messages with every other rank in
// rounds; once all are in traffic, the launcher SIGKILLs one rank and then tells the others
// which rank died (in a file: the agreement the control plane makes in a real job). The
// survivors abandon their pending requests, call rebuild_without, and check on the rebuilt
// communicator: its size (3), each survivor's rank (its old order: the first survivor is 0),
// an allreduce, an allgather of the old ranks, and 4096 doubles from every other survivor,
// each value checked. Then they free it, finalize and exit 0. With `disagree`, the last rank
// names one more dead rank than the others (rank 1): every survivor must get a RebuildError
// that says so, keep its old communicator, and still finalize and exit 0. With `late`, the
// first survivor has not noticed the death yet (it names no dead rank) while the others name
// the victim: agree_on_lost must settle every survivor on {victim} in 2 rounds (the first
// survivor's receive from the victim fails) before rebuild_without and the same checks. With
// `late_stopped` the same, but the victim is SIGSTOPped, not killed (alive and silent, as a
// node cut from the network): the first survivor's receive from it never fails, so it must
// take the others' word (their sets name the victim) to agree in 2 rounds; the launcher kills
// the stopped victim once every survivor has checked the rebuilt communicator (a stopped peer
// hangs MPI_Finalize).
//
// The launcher passes when the killed rank's mpiexec reports the kill, every survivor's mpiexec
// exits 0 with a PASS result within its deadline, and no process it started is left; it prints
// a JSON line with each survivor's times and "rebuild_without: PASS". A process group per
// mpiexec lets it kill everything it started when something hangs.
//
//   rebuild_without_tests MPIEXEC SELF VICTIM [disagree|late|late_stopped]  (the launcher; no MPI)
//   rebuild_without_tests --member DIR INDEX COUNT            (under MPIEXEC -n 1)

#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/rebuild.hpp"

#include <mpi.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "separate_worlds.hpp"
#include "spawned_processes.hpp"
#include "watchdog.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using bellows::testing::LaunchedMembers;
using bellows::testing::read_file;
using bellows::testing::read_int;
using bellows::testing::wall_seconds;
using bellows::testing::write_file;

constexpr int kRanks = 4;
constexpr int kTrafficTag = 1;
constexpr int kRoundsBeforeKill = 20;
constexpr int kPayloadDoubles = 4096;
constexpr auto kRebuildTimeout = std::chrono::seconds(10);
constexpr double kLauncherLimitSeconds = 60.0;  // below the ctest timeout

// ------------------------------------------------------------------------------------ member

int failures = 0;
std::string first_failure;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    if (failures++ == 0) first_failure = what;
    std::fprintf(stderr, "rebuild_without_tests: FAILED: %s\n", what.c_str());
  }
}

/// The value survivor `from` sends survivor `to` at index i.
double payload_value(int from, int to, int i) { return from * 1e6 + to * 1e4 + i * 0.5; }

/// Rounds of messages with every other rank until `dead_file` appears; errors from requests
/// involving the dead are expected after the kill. Pending requests are abandoned at the end.
void traffic_until_dead(MPI_Comm job, const fs::path& dir, int rank, int size) {
  const fs::path dead_file = dir / "dead";
  bool announced = false;
  for (int round = 0;; ++round) {
    std::vector<int> out(static_cast<std::size_t>(size), round * 100 + rank);
    std::vector<int> in(static_cast<std::size_t>(size), -1);
    std::vector<MPI_Request> requests;
    std::vector<int> sources;  // per request: the peer of a receive, -1 for a send
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      requests.emplace_back(MPI_REQUEST_NULL);
      MPI_Irecv(&in[static_cast<std::size_t>(peer)], 1, MPI_INT, peer, kTrafficTag, job,
                &requests.back());
      sources.push_back(peer);
      requests.emplace_back(MPI_REQUEST_NULL);
      MPI_Isend(&out[static_cast<std::size_t>(peer)], 1, MPI_INT, peer, kTrafficTag, job,
                &requests.back());
      sources.push_back(-1);
    }
    std::size_t open = requests.size();
    bool dead_known = false;
    while (open > 0 && !dead_known) {
      for (std::size_t i = 0; i < requests.size(); ++i) {
        if (requests[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        const int rc = MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          requests[i] = MPI_REQUEST_NULL;  // failed: MPI freed it
          --open;
        } else if (done) {
          --open;
          const int peer = sources[i];
          if (peer >= 0) {
            expect(in[static_cast<std::size_t>(peer)] == round * 100 + peer,
                   "round " + std::to_string(round) + ": from rank " + std::to_string(peer) +
                       " got " + std::to_string(in[static_cast<std::size_t>(peer)]));
          }
        }
      }
      dead_known = fs::exists(dead_file);
      if (open > 0 && !dead_known) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (dead_known) {
      for (MPI_Request& request : requests) {
        if (request == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&request);
        int done = 0;
        const auto until = Clock::now() + std::chrono::milliseconds(200);
        while (request != MPI_REQUEST_NULL && !done && Clock::now() < until) {
          if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        }
        if (request != MPI_REQUEST_NULL && !done) MPI_Request_free(&request);
      }
      return;
    }
    if (round + 1 == kRoundsBeforeKill && !announced) {
      write_file(dir / ("traffic." + std::to_string(rank)), std::to_string(::getpid()));
      announced = true;
    }
  }
}

/// Checks on the rebuilt communicator: size, ranks in old order, an allreduce, payloads.
void check_rebuilt(MPI_Comm rebuilt, int old_rank, int victim) {
  int rank = -1, size = 0;
  MPI_Comm_rank(rebuilt, &rank);
  MPI_Comm_size(rebuilt, &size);
  expect(size == kRanks - 1, "rebuilt size " + std::to_string(size));
  const int expected_rank = old_rank < victim ? old_rank : old_rank - 1;
  expect(rank == expected_rank, "old rank " + std::to_string(old_rank) + " became " +
                                    std::to_string(rank) + ", expected " +
                                    std::to_string(expected_rank));
  int sum = -1;
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, rebuilt);
  expect(sum == size * (size - 1) / 2, "allreduce of the ranks gave " + std::to_string(sum));
  std::vector<int> old_ranks(static_cast<std::size_t>(size), -1);
  MPI_Allgather(&old_rank, 1, MPI_INT, old_ranks.data(), 1, MPI_INT, rebuilt);
  for (int r = 0; r < size; ++r) {
    const int expected = r < victim ? r : r + 1;
    expect(old_ranks[static_cast<std::size_t>(r)] == expected,
           "rank " + std::to_string(r) + " was old rank " +
               std::to_string(old_ranks[static_cast<std::size_t>(r)]) + ", expected " +
               std::to_string(expected));
  }
  std::vector<std::vector<double>> out(static_cast<std::size_t>(size)), in(out.size());
  std::vector<MPI_Request> requests;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    auto& o = out[static_cast<std::size_t>(peer)];
    auto& i = in[static_cast<std::size_t>(peer)];
    o.resize(kPayloadDoubles);
    i.assign(kPayloadDoubles, -1.0);
    for (int k = 0; k < kPayloadDoubles; ++k) o[static_cast<std::size_t>(k)] = payload_value(rank, peer, k);
    requests.emplace_back();
    MPI_Irecv(i.data(), kPayloadDoubles, MPI_DOUBLE, peer, 2, rebuilt, &requests.back());
    requests.emplace_back();
    MPI_Isend(o.data(), kPayloadDoubles, MPI_DOUBLE, peer, 2, rebuilt, &requests.back());
  }
  MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    int wrong = 0;
    for (int k = 0; k < kPayloadDoubles; ++k) {
      if (in[static_cast<std::size_t>(peer)][static_cast<std::size_t>(k)] != payload_value(peer, rank, k)) ++wrong;
    }
    expect(wrong == 0, std::to_string(wrong) + " wrong values from rank " + std::to_string(peer));
  }
}

int run_member(const fs::path& dir, int index, int count) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(45), "rebuild_without member", index);
  MPI_Comm job = bellows::testing::join_member_worlds(dir, index, count);
  MPI_Comm_set_errhandler(job, MPI_ERRORS_RETURN);
  int rank = -1, size = 0;
  MPI_Comm_rank(job, &rank);
  MPI_Comm_size(job, &size);
  expect(size == count, "joined size " + std::to_string(size));
  traffic_until_dead(job, dir, rank, size);

  const std::string dead_text = read_file(dir / "dead");
  int victim = -1;
  double kill_time = 0.0;
  std::istringstream(dead_text) >> victim >> kill_time;
  nlohmann::json result{{"old_rank", rank}};
  if (fs::exists(dir / "disagree")) {
    // Victim 2 of 4: the last rank also names rank 1 as dead; the first survivor is 0 for all.
    const std::vector<int> dead = rank == count - 1 ? std::vector<int>{victim, 1} : std::vector<int>{victim};
    std::string error = "(no error)";
    try {
      MPI_Comm rebuilt = bellows::runtime::rebuild_without(job, dead, Clock::now() + kRebuildTimeout);
      MPI_Comm_free(&rebuilt);
    } catch (const bellows::runtime::RebuildError& e) {
      error = e.what();
    }
    const std::string expected =
        rank == 0 ? "rebuild_without: old rank 3 named dead ranks {1, 2}, old rank 0 {2}"
        : rank == count - 1
            ? "rebuild_without: the first survivor (old rank 0) found that a survivor named another dead set than {1, 2}"
            : "rebuild_without: the first survivor (old rank 0) found that a survivor named another dead set than {2}";
    expect(error == expected, "error \"" + error + "\", expected \"" + expected + "\"");
    MPI_Comm_free(&job);
    MPI_Finalize();
    watchdog.disarm();
    result["result"] = failures == 0 ? "PASS" : "FAIL: " + first_failure;
    write_file(dir / ("result." + std::to_string(rank)), result.dump());
    return failures == 0 ? 0 : 1;
  }
  try {
    bellows::runtime::RebuildReport report;
    std::vector<int> dead{victim};
    if (fs::exists(dir / "late")) {
      const int first_survivor = victim == 0 ? 1 : 0;
      const std::vector<int> seen = rank == first_survivor ? std::vector<int>{} : std::vector<int>{victim};
      int rounds = 0;
      dead = bellows::runtime::agree_on_lost(job, seen, Clock::now() + kRebuildTimeout, &rounds);
      expect(dead == std::vector<int>{victim}, "agree_on_lost gave " + std::to_string(dead.size()) +
                                                   " ranks, expected only " + std::to_string(victim));
      expect(rounds == 2, "agree_on_lost took " + std::to_string(rounds) + " rounds, expected 2");
      result["agree_rounds"] = rounds;
    }
    MPI_Comm rebuilt = bellows::runtime::rebuild_without(job, dead, Clock::now() + kRebuildTimeout, &report);
    const double rebuilt_at = wall_seconds();
    expect(report.new_size == count - 1 && report.old_size == count,
           "report: " + std::to_string(report.old_size) + " -> " + std::to_string(report.new_size));
    MPI_Comm_set_errhandler(rebuilt, MPI_ERRORS_RETURN);
    const auto t = Clock::now();
    check_rebuilt(rebuilt, rank, victim);
    MPI_Comm_free(&rebuilt);
    result["new_rank"] = report.new_rank;
    result["check_in_seconds"] = report.check_in_seconds;
    result["create_seconds"] = report.create_seconds;
    result["rebuild_seconds"] = report.total_seconds;
    result["kill_to_rebuilt_seconds"] = rebuilt_at - kill_time;
    result["checks_seconds"] = std::chrono::duration<double>(Clock::now() - t).count();
  } catch (const std::exception& e) {
    expect(false, std::string("rebuild_without threw: ") + e.what());
  }
  write_file(dir / ("finishing." + std::to_string(rank)), "1");  // a stopped victim may go now
  const auto t = Clock::now();
  MPI_Finalize();
  result["finalize_seconds"] = std::chrono::duration<double>(Clock::now() - t).count();
  watchdog.disarm();
  result["result"] = failures == 0 ? "PASS" : "FAIL: " + first_failure;
  write_file(dir / ("result." + std::to_string(rank)), result.dump());
  return failures == 0 ? 0 : 1;
}

// ------------------------------------------------------------------------------------ launcher

int run_launcher(const std::string& mpiexec, const std::string& self, int victim, bool disagree, bool late,
                 bool stopped) {
  if (victim < 0 || victim >= kRanks || (disagree && victim != 2)) {
    std::fprintf(stderr, "rebuild_without_tests: victim %d is not a rank of %d (disagree: 2)\n", victim, kRanks);
    return 2;
  }
  char pattern[] = "/tmp/bellows-rebuild-XXXXXX";
  const fs::path dir = ::mkdtemp(pattern);
  if (disagree) write_file(dir / "disagree", "1");
  if (late) write_file(dir / "late", "1");
  const auto start = Clock::now();
  LaunchedMembers members(
      mpiexec, kRanks, dir,
      [&](int i) {
        return std::vector<std::string>{self, "--member", dir.string(), std::to_string(i), std::to_string(kRanks)};
      },
      kLauncherLimitSeconds);
  const auto limit = members.limit();
  auto path_of = [&](const char* what, int rank) { return dir / (std::string(what) + "." + std::to_string(rank)); };

  // Every rank in traffic, then the kill.
  bool in_traffic = false;
  while (!in_traffic && Clock::now() < limit && failures == 0) {
    in_traffic = true;
    for (int r = 0; r < kRanks; ++r) in_traffic = in_traffic && fs::exists(path_of("traffic", r));
    if (!in_traffic) {
      if (members.reap()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  expect(in_traffic, "the ranks did not all reach traffic");
  int victim_pid = -1;
  if (in_traffic) {
    victim_pid = read_int(path_of("traffic", victim));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // mid-traffic
    const double kill_time = wall_seconds();
    expect(::kill(victim_pid, stopped ? SIGSTOP : SIGKILL) == 0,
           std::string(stopped ? "SIGSTOP" : "kill -9") + " of rank " + std::to_string(victim) + " failed");
    // The control plane's agreement, as the survivors would receive it.
    char text[64];
    std::snprintf(text, sizeof text, "%d %.6f\n", victim, kill_time);
    write_file(dir / "dead", text);
  }
  if (stopped && victim_pid > 0) {
    bool finishing = false;
    while (!finishing && Clock::now() < limit) {
      finishing = true;
      for (int r = 0; r < kRanks; ++r) finishing = finishing && (r == victim || fs::exists(path_of("finishing", r)));
      if (!finishing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    expect(finishing, "the survivors did not all finish with rank " + std::to_string(victim) + " stopped");
    expect(::kill(victim_pid, SIGKILL) == 0, "kill -9 of stopped rank " + std::to_string(victim) + " failed");
  }
  members.reap_until_limit();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const std::string& wrong : members.end("traffic")) expect(false, wrong);

  nlohmann::json survivors = nlohmann::json::array();
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim) continue;
    if (!fs::exists(path_of("result", r))) {
      expect(false, "survivor " + std::to_string(r) + " wrote no result");
      continue;
    }
    const auto result = nlohmann::json::parse(read_file(path_of("result", r)));
    expect(result.value("result", "") == "PASS",
           "survivor " + std::to_string(r) + ": " + result.value("result", "(none)"));
    survivors.push_back(result);
  }
  const int clean_exits = members.exited_zero_count();
  const int killed_exits = static_cast<int>(members.size()) - clean_exits;
  expect(clean_exits == kRanks - 1 && killed_exits == 1,
         std::to_string(clean_exits) + " mpiexecs exited 0 and " + std::to_string(killed_exits) +
             " did not; expected " + std::to_string(kRanks - 1) + " and 1");
  if (failures != 0) members.print_outputs();
  fs::remove_all(dir);
  std::printf("%s\n", nlohmann::json{{"victim", victim},
                                     {"victim_pid", victim_pid},
                                     {"seconds", seconds},
                                     {"survivors", survivors}}
                          .dump()
                          .c_str());
  std::printf("rebuild_without: %s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--member") == 0) {
    return run_member(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  }
  const bool disagree = argc == 5 && std::strcmp(argv[4], "disagree") == 0;
  const bool stopped = argc == 5 && std::strcmp(argv[4], "late_stopped") == 0;
  const bool late = (argc == 5 && std::strcmp(argv[4], "late") == 0) || stopped;
  if (argc != 4 && !disagree && !late) {
    std::fprintf(stderr, "usage: rebuild_without_tests MPIEXEC SELF VICTIM [disagree|late|late_stopped] | "
                         "--member DIR INDEX COUNT\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2], std::atoi(argv[3]), disagree, late, stopped);
}
