// A rank that stays, lost inside the barrier that ends a shrink's survivors' checkpoint (its point
// of no return), so that some ranks that stay pass that barrier and others do not: the words of
// Membership::shrink (shrink_words.hpp) must bring every rank alive to the same outcome.
//
// Four members, each the only process of its own mpiexec, joined by grow_by_accept; rank 3 is
// asked to leave, ranks 0, 1 and 2 stay. Membership::shrink(leaving, ShrinkLossWatch) runs with a
// watch of the test's own (a zero-byte receive from every peer on the job's communicator, which
// fails once the peer died) and, as `before_confirming`, an MPI_Ibarrier over the survivors'
// communicator standing for the survivors' first checkpoint (ElasticJob's runtime ends it so).
// Rank 1 posts it (its first round goes out), waits 2 ms without progress and SIGKILLs itself:
// in MPICH's dissemination barrier over 3 ranks rank 2 (which needs rank 1's first round and rank
// 0's second) passes it, rank 0 (which needs rank 1's second) does not. Rank 2 passed the point
// of no return, so the shrink must stand on every rank alive: rank 0 learns so from rank 2's word
// (`confirmed_by_word` runs on it and on no other rank), the leaver, whose confirming barrier fails
// (rank 0 does not post it, rank 1 is dead), learns it from the words too and leaves, and ranks 0
// and 2, on the survivors' communicator, agree that rank 1 is lost and rebuild it without rank 1
// (size 2), as the next iteration's recovery would. Every rank alive names rank 1 lost
// (ShrinkReport::lost_while_confirming), and exits 0.
//
//   shrink_confirmation_tests MPIEXEC SELF          (the launcher; no MPI)
//   shrink_confirmation_tests --member DIR INDEX    (under MPIEXEC -n 1)

#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/rebuild.hpp"

#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "loss_test_gemm.hpp"
#include "separate_worlds.hpp"
#include "watchdog.hpp"

namespace {

namespace fs = std::filesystem;
namespace br = bellows::runtime;
using bellows::test::rank_set;
using bellows::testing::read_file;
using bellows::testing::write_file;
using Clock = std::chrono::steady_clock;

constexpr int kMembers = 4;
constexpr int kLeaver = 3;
constexpr int kVictim = 1;
constexpr int kWatchTag = 0x7e57;
constexpr auto kPauseBeforeDeath = std::chrono::milliseconds(2);
constexpr auto kCompletionLimit = std::chrono::seconds(10);
constexpr auto kLossGrace = std::chrono::milliseconds(100);
constexpr double kLauncherLimitSeconds = 60.0;

bellows::test::Checks checks{"shrink_confirmation_tests"};
void expect(bool ok, const std::string& what) { checks.expect(ok, what); }

/// A zero-byte receive from every peer on a tag nobody sends on: it fails once the peer died.
class DeathWatch {
 public:
  DeathWatch(MPI_Comm comm, int rank, int size) : comm_(comm), receives_(static_cast<std::size_t>(size), MPI_REQUEST_NULL) {
    for (int peer = 0; peer < size; ++peer) {
      if (peer != rank) MPI_Irecv(nullptr, 0, MPI_BYTE, peer, kWatchTag, comm_, &receives_[static_cast<std::size_t>(peer)]);
    }
  }
  void poll() {
    for (std::size_t peer = 0; peer < receives_.size(); ++peer) {
      if (receives_[peer] == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (MPI_Test(&receives_[peer], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        receives_[peer] = MPI_REQUEST_NULL;
        lost_.push_back(static_cast<int>(peer));
        std::sort(lost_.begin(), lost_.end());
      }
    }
  }
  /// Leaves the receives still pending to MPI (the communicator is let go of after this).
  void forget() { receives_.clear(); }
  [[nodiscard]] const std::vector<int>& lost() const noexcept { return lost_; }

 private:
  MPI_Comm comm_;
  std::vector<MPI_Request> receives_;
  std::vector<int> lost_;
};

/// Completes `request` while `watch` looks for the dead: true once it completed, false when it
/// failed or was still pending kLossGrace after a peer was found lost.
bool complete(MPI_Request& request, DeathWatch& watch) {
  const auto start = Clock::now();
  std::optional<Clock::time_point> lost_at;
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done != 0) return true;
    watch.poll();
    if (!watch.lost().empty() && !lost_at) lost_at = Clock::now();
    if (lost_at && Clock::now() - *lost_at > kLossGrace) return false;  // left pending to MPI
    if (Clock::now() - start > kCompletionLimit) throw std::runtime_error("a collective did not complete within 10 s");
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

int run_member(const fs::path& dir, int index) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  bellows::testing::Watchdog watchdog(std::chrono::seconds(45), "shrink confirmation member", index);
  std::vector<int> payload;
  br::Membership membership = [&] {
    if (index != 0) {
      while (!fs::exists(dir / "port")) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return br::Membership::join_by_connect(read_file(dir / "port"), payload);
    }
    char port[MPI_MAX_PORT_NAME] = {};
    MPI_Open_port(MPI_INFO_NULL, port);
    write_file(dir / "port", port);
    br::Membership first(MPI_COMM_WORLD);
    first.grow_by_accept(kMembers - 1, port, payload);
    return first;
  }();
  const int rank = membership.rank();
  write_file(dir / ("pid." + std::to_string(index)), std::to_string(::getpid()));
  write_file(dir / ("rank." + std::to_string(index)), std::to_string(rank));
  MPI_Barrier(membership.communicator());  // every member joined before the shrink

  const MPI_Comm job = membership.communicator();
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(job, MPI_ERRORS_RETURN);
  DeathWatch watch(job, rank, kMembers);
  bool passed_checkpoint_barrier = false, learned_by_word = false, peers_lost_at_disconnect = false;
  br::ShrinkLossWatch shrink_watch;
  shrink_watch.complete = [&watch](int posted, MPI_Request& request, const char*) {
    return posted == MPI_SUCCESS && complete(request, watch);
  };
  shrink_watch.lost = [&watch] { return watch.lost(); };
  shrink_watch.poll = [&watch] { watch.poll(); };
  shrink_watch.before_confirming = [&](MPI_Comm survivors) {
    if (survivors == MPI_COMM_NULL) return true;  // the leaver
    MPI_Comm_set_errhandler(survivors, MPI_ERRORS_RETURN);
    MPI_Request barrier = MPI_REQUEST_NULL;
    MPI_Ibarrier(survivors, &barrier);
    if (rank == kVictim) {
      std::this_thread::sleep_for(kPauseBeforeDeath);  // its first round went out; the next never will
      ::raise(SIGKILL);
    }
    passed_checkpoint_barrier = complete(barrier, watch);
    return passed_checkpoint_barrier;
  };
  shrink_watch.confirmed_by_word = [&] { learned_by_word = true; };
  shrink_watch.before_disconnect = [&](bool peers_lost) {
    peers_lost_at_disconnect = peers_lost;
    watch.forget();
  };
  const std::array<int, 1> leaving{kLeaver};
  nlohmann::json result{{"rank", rank}};
  try {
    const br::ShrinkReport& shrunk = membership.shrink(leaving, shrink_watch);
    result["lost_while_confirming"] = shrunk.lost_while_confirming;
    result["passed_checkpoint_barrier"] = passed_checkpoint_barrier;
    result["learned_by_word"] = learned_by_word;
    result["peers_lost"] = peers_lost_at_disconnect;
    expect(std::count(shrunk.lost_while_confirming.begin(), shrunk.lost_while_confirming.end(), kVictim) == 1,
           "rank " + std::to_string(rank) + " names ranks " + rank_set(shrunk.lost_while_confirming) +
               " lost while the shrink was confirmed, expected rank " + std::to_string(kVictim) + " among them");
    expect(peers_lost_at_disconnect, "rank " + std::to_string(rank) + " was let go of the old communicator as if nobody was lost");
    if (rank == kLeaver) {
      expect(shrunk.left, "the leaver did not leave");
    } else {
      // Rank 2 passed the survivors' barrier, rank 0 did not and learned from rank 2's word.
      expect(learned_by_word == !passed_checkpoint_barrier,
             "rank " + std::to_string(rank) + (passed_checkpoint_barrier ? " passed" : " did not pass") +
                 " the survivors' barrier and " + (learned_by_word ? "learned" : "did not learn") +
                 " from the words that the shrink stands");
      expect(membership.size() == kMembers - 1, "the survivors' communicator has " + std::to_string(membership.size()) +
                                                    " ranks, expected " + std::to_string(kMembers - 1));
      // Rank 1 is among them, dead: the survivors agree on it and rebuild without it, as the
      // next iteration's recovery would.
      MPI_Comm survivors = membership.communicator();
      MPI_Comm_set_errhandler(survivors, MPI_ERRORS_RETURN);
      const auto deadline = Clock::now() + std::chrono::seconds(20);
      std::vector<int> lost;
      const std::array<int, 1> seen{kVictim};
      MPI_Comm rebuilt = br::rebuild_after_loss(survivors, seen, deadline, lost);
      expect(lost == std::vector<int>{kVictim}, "the survivors rebuilt without ranks " + rank_set(lost) +
                                                    ", expected {" + std::to_string(kVictim) + "}");
      int size = 0, sum = 0, one = 1;
      MPI_Comm_size(rebuilt, &size);
      MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, rebuilt);
      expect(size == 2 && sum == 2, "the rebuilt communicator has " + std::to_string(size) + " ranks and " +
                                        std::to_string(sum) + " answered, expected 2 and 2");
      result["rebuilt_size"] = size;
      // A rank that passed the point of no return and one that learned it: one of each.
      std::array<int, 2> mine{passed_checkpoint_barrier ? 1 : 0, learned_by_word ? 1 : 0}, all{};
      MPI_Allreduce(mine.data(), all.data(), 2, MPI_INT, MPI_SUM, rebuilt);
      expect(all[0] == 1 && all[1] == 1, std::to_string(all[0]) + " of ranks 0 and 2 passed the survivors' barrier and " +
                                              std::to_string(all[1]) + " learned from the words that the shrink stands, "
                                              "expected one of each");
      result["survivors_passed_and_learned"] = all;
      MPI_Comm_free(&rebuilt);
    }
  } catch (const std::exception& e) {
    expect(false, std::string("rank ") + std::to_string(rank) + ": " + e.what());
  }
  result["result"] = checks.failures == 0 ? "PASS" : "FAIL";
  write_file(dir / ("result." + std::to_string(rank)), result.dump());
  watchdog.disarm();
  MPI_Finalize();
  return checks.failures == 0 ? 0 : 1;
}

int run_launcher(const std::string& mpiexec, const std::string& self) {
  char pattern[] = "/tmp/bellows-shrink-confirmation-XXXXXX";
  const fs::path dir = ::mkdtemp(pattern);
  const auto start = Clock::now();
  const bellows::test::SurvivorResults read =
      bellows::test::run_members(mpiexec, self, dir, kMembers, kVictim, kLauncherLimitSeconds);
  return bellows::test::report_launcher("shrink_confirmation", {{"victim", kVictim}, {"leaver", kLeaver}}, read, false,
                                        checks.failures, dir, start);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--member") == 0) return run_member(argv[2], std::atoi(argv[3]));
  if (argc != 3) {
    std::fprintf(stderr, "usage: shrink_confirmation_tests MPIEXEC SELF | --member DIR INDEX\n");
    return 2;
  }
  return run_launcher(argv[1], argv[2]);
}
