#pragma once
// Helpers for gtest binaries that run under mpiexec (main in mpi_gtest_main.cpp).
//
// Every rank runs every test in the same order. A test body must reach each collective
// on every rank: check with EXPECT_* before a collective, never ASSERT_*, and let only
// rank 0 look at gathered data. MpiTest::TearDown (itself collective) fails the test on
// every rank when it failed on any, so all ranks report the same outcome.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bellows/runtime/stats.hpp"

namespace bellows::testing {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

/// True on every rank when `ok` holds on every rank. Collective over comm.
inline bool all_ranks(bool ok, MPI_Comm comm = MPI_COMM_WORLD) {
  int mine = ok ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm);
  return all != 0;
}

/// Sum over the ranks of comm, on every rank.
inline std::uint64_t sum_over_ranks(std::uint64_t value, MPI_Comm comm = MPI_COMM_WORLD) {
  unsigned long long mine = value, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
  return static_cast<std::uint64_t>(all);
}

inline double sum_over_ranks_d(double value, MPI_Comm comm = MPI_COMM_WORLD) {
  double all = 0.0;
  MPI_Allreduce(&value, &all, 1, MPI_DOUBLE, MPI_SUM, comm);
  return all;
}

/// Count of a class in a RankStats (0 when the class never ran there).
inline std::uint64_t class_count(const runtime::RankStats& stats, const std::string& name) {
  const auto it = stats.tasks_by_class.find(name);
  return it == stats.tasks_by_class.end() ? 0 : it->second;
}

/// Per-class task counts summed over the ranks of comm, for the given class names.
inline std::map<std::string, std::uint64_t> class_totals(const runtime::RankStats& stats,
                                                         const std::vector<std::string>& names,
                                                         MPI_Comm comm = MPI_COMM_WORLD) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& name : names) out[name] = sum_over_ranks(class_count(stats, name), comm);
  return out;
}

class MpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rank_ = world_rank();
    size_ = world_size();
  }

  void TearDown() override {
    const bool here = !HasFailure();
    const bool everywhere = all_ranks(here);
    if (here && !everywhere) ADD_FAILURE() << "failed on another rank (see that rank's output)";
  }

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace bellows::testing
