#pragma once
// How each process of a spawning test (one launched by `mpiexec -n 1` that grows and shrinks
// by MPI_Comm_spawn) tells the test whether its own checks held. hydra drops the exit codes of
// spawned processes, and a rank that left the job cannot take part in rank 0's final verdict,
// so each process writes its own into BELLOWS_TEST_VERDICT_DIR, which the test's wrapper
// (tests/support/with_verdicts.sh) reads once mpiexec returned:
//
//   PID.started   written as the process starts: the test's name and the process's role
//   PID.verdict   written as it ends: "PASS", or "FAIL: exit code N"
//
// A process that started and left no verdict (crashed, killed, aborted) fails the test too.
// Without BELLOWS_TEST_VERDICT_DIR (a run by hand) nothing is written.

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace bellows::testing {

class ProcessVerdict {
 public:
  /// Records that this process started, as `role` of test `name` ("leaver_exit_tests child").
  explicit ProcessVerdict(const std::string& role) {
    if (const char* dir = std::getenv("BELLOWS_TEST_VERDICT_DIR"); dir != nullptr && *dir != '\0') {
      base_ = std::string(dir) + "/" + std::to_string(::getpid());
      std::ofstream(base_ + ".started") << role << '\n';
    }
  }

  /// Records how the process ends: 0 passes, anything else fails. Returns `code`.
  int record(int code) const {
    if (base_.empty()) return code;
    // Written whole under a temporary name, then renamed: the wrapper never reads half a verdict.
    {
      std::ofstream out(base_ + ".verdict.tmp");
      out << (code == 0 ? std::string("PASS") : "FAIL: exit code " + std::to_string(code)) << '\n';
    }
    std::rename((base_ + ".verdict.tmp").c_str(), (base_ + ".verdict").c_str());
    return code;
  }

 private:
  std::string base_;
};

}  // namespace bellows::testing
