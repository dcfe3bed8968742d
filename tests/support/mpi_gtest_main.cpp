// gtest main for tests run under mpiexec: initialises MPI with the thread level
// libbellows needs, arms a watchdog around every test, prints the results of rank 0 in
// full and only the failures of the other ranks, and exits with the worst result of
// all ranks.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>

#include "watchdog.hpp"

namespace {

class WatchdogListener final : public ::testing::EmptyTestEventListener {
 public:
  WatchdogListener(std::chrono::milliseconds limit, int rank) : limit_(limit), rank_(rank) {}

  void OnTestStart(const ::testing::TestInfo& info) override {
    dog_ = std::make_unique<bellows::testing::Watchdog>(
        limit_, std::string(info.test_suite_name()) + "." + info.name(), rank_);
  }
  void OnTestEnd(const ::testing::TestInfo&) override { dog_.reset(); }

 private:
  std::chrono::milliseconds limit_;
  int rank_;
  std::unique_ptr<bellows::testing::Watchdog> dog_;
};

class RankFailurePrinter final : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
    std::fflush(stderr);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
      std::fflush(stderr);
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr, "MPI provides thread level %d, the tests need MPI_THREAD_SERIALIZED\n",
                 provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  listeners.Append(new WatchdogListener(
      bellows::testing::limit_from_env("BELLOWS_TEST_WATCHDOG_S", 60.0), rank));

  const int result = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
