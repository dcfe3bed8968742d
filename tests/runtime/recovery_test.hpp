// What the two halves of recovery_tests share (recovery_test.cpp: the members and main;
// recovery_launcher.cpp: the launcher that starts, kills and reaps them).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "control_plane_word.hpp"

namespace bellows::testing::recovery {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// The job's ranks unless the launcher is told otherwise (`ranks=N`).
constexpr int kDefaultRanks = 4;
/// With teams (`[JOB-]teams=T`): iterations between checkpoints.
constexpr int kTeamsCheckpointEvery = 3;

/// The job the members run: C = A * B, A = L * L^T, or C = A * B with only some tiles of A
/// and B nonzero (the bspgemm example's task graph).
enum class Job { gemm, cholesky, bspgemm };

/// Failed checks of this process: the first one's text is its result.
inline int failures = 0;
inline std::string first_failure;
inline void expect(bool ok, const std::string& what) {
  if (!ok) {
    if (failures++ == 0) first_failure = what;
    std::fprintf(stderr, "recovery_tests: FAILED: %s\n", what.c_str());
  }
}

/// Rank `rank`'s buddy when every rank is on a node of its own with as many tiles as the others
/// (the GEMM job; Cholesky's lower tiles and bspgemm's nonzero ones are uneven):
/// choose_buddies() gives each the next rank of its team, in a ring inside each team of
/// `team_size` consecutive ranks, and the next rank of the job with one team or teams of 1.
inline int ring_buddy_of(int rank, int ranks, int team_size) {
  if (team_size <= 1 || team_size >= ranks) return (rank + 1) % ranks;
  const int first = rank / team_size * team_size;
  return first + (rank - first + 1) % team_size;
}

/// What recover() must say of `victims` (sorted) that include a rank and its ring buddy: "rank V
/// and its buddy rank B are both lost: no copy of rank V's checkpoint is left", joined by "; ";
/// empty when no victim's buddy is a victim.
inline std::string buddies_lost_together_text(const std::vector<int>& victims, int ranks, int team_size) {
  std::string text;
  for (const int v : victims) {
    const int buddy = ring_buddy_of(v, ranks, team_size);
    if (!std::binary_search(victims.begin(), victims.end(), buddy)) continue;
    text += (text.empty() ? "" : "; ") + std::string("rank ") + std::to_string(v) + " and its buddy rank " +
            std::to_string(buddy) + " are both lost: no copy of rank " + std::to_string(v) + "'s checkpoint is left";
  }
  return text;
}

/// A rank killed while the survivors recover from the first loss: `second=R@MS` kills rank R
/// MS milliseconds after the first survivor has started recovering.
struct SecondVictim {
  int rank = -1;
  int delay_ms = 0;
  /// `after=R`: rank R dies instead at a random point of the first iteration after the
  /// first survivor recovered (a random fraction of an iteration's time after it wrote
  /// recovered.<rank>), when a checkpoint under the new buddies must already be complete.
  bool after_recovery = false;
};

/// A member of the job (`--member DIR INDEX COUNT VICTIMS`, under MPIEXEC -n 1).
int run_member(const fs::path& dir, int index, int count, const std::vector<int>& victims);

/// The launcher: starts `ranks` members, kills the victims when due, reaps every process and
/// checks the survivors' results; prints "recovery: PASS" or "recovery: FAIL".
/// `deaf_rank`: the survivor whose watch hears nothing from MPI (-1: none).
int run_launcher(const std::string& mpiexec, const std::string& self, const std::string& victims_text,
                 bool no_checkpoint, Job job, SecondVictim second, bool stopped, int deaf_rank, int team_size,
                 bool replay_to_kept, int ranks);

}  // namespace bellows::testing::recovery
