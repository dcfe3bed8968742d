// Argument checks of grow and shrink (membership.hpp): every rank throws the same
// std::invalid_argument before anything changes, and the communicator stays usable.
// Runs on 1 rank; the tests named *TwoRanks need 2 ranks of one MPI_COMM_WORLD.

#include <gtest/gtest.h>
#include <mpi.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/membership.hpp"
#include "mpi_test_support.hpp"

namespace {

using bellows::runtime::Membership;
using bellows::runtime::SpawnSpec;
using bellows::testing::MpiTest;

/// The message of the std::invalid_argument that f throws, or "" if it throws none.
template <class F>
std::string invalid_argument_from(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

class MembershipValidation : public MpiTest {};

TEST_F(MembershipValidation, LeavingListsAreChecked) {
  using bellows::runtime::validate_leaving;
  EXPECT_EQ(invalid_argument_from([] { validate_leaving(4, std::vector<int>{0}); }),
            "shrink: rank 0 may not leave the job");
  EXPECT_EQ(invalid_argument_from([] {
              validate_leaving(4, std::vector<int>{2, 1, 2});
            }),
            "shrink: leaving rank 2 is listed twice");
  EXPECT_EQ(invalid_argument_from([] { validate_leaving(4, std::vector<int>{4}); }),
            "shrink: leaving rank 4 is out of range [1, 4)");
  EXPECT_EQ(invalid_argument_from([] { validate_leaving(4, std::vector<int>{-1}); }),
            "shrink: leaving rank -1 is out of range [1, 4)");
  EXPECT_EQ(invalid_argument_from([] { validate_leaving(4, std::vector<int>{1, 3}); }), "");
  EXPECT_EQ(invalid_argument_from([] { validate_leaving(4, std::vector<int>{}); }), "");
}

TEST_F(MembershipValidation, ShrinkRefusesBadListsAndLeavesTheJobAlone) {
  if (size() != 1) GTEST_SKIP() << "one rank";
  Membership m(MPI_COMM_WORLD);
  const MPI_Comm before = m.communicator();
  EXPECT_EQ(invalid_argument_from([&] { m.shrink(std::vector<int>{0}); }),
            "shrink: rank 0 may not leave the job");
  EXPECT_EQ(invalid_argument_from([&] { m.shrink(std::vector<int>{1}); }),
            "shrink: leaving rank 1 is out of range [1, 1)");
  EXPECT_EQ(invalid_argument_from([&] {
              m.shrink(std::vector<int>{1, 1});
            }),
            "shrink: leaving rank 1 is out of range [1, 1)");
  EXPECT_TRUE(m.is_member());
  EXPECT_EQ(m.communicator(), before);
  EXPECT_EQ(m.size(), 1);
  // The free function too, on a communicator the caller keeps.
  EXPECT_EQ(invalid_argument_from(
                [] { (void)bellows::runtime::shrink(MPI_COMM_WORLD, std::vector<int>{0}); }),
            "shrink: rank 0 may not leave the job");
  int sum = 0, one = 1;
  EXPECT_EQ(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, m.communicator()), MPI_SUCCESS);
  EXPECT_EQ(sum, 1);
}

TEST_F(MembershipValidation, EmptyShrinkKeepsEveryone) {
  Membership m(MPI_COMM_WORLD);
  const auto& report = m.shrink(std::vector<int>{});
  EXPECT_FALSE(report.left);
  EXPECT_TRUE(m.is_member());
  EXPECT_EQ(m.size(), size());
  EXPECT_EQ(m.rank(), rank());
}

TEST_F(MembershipValidation, GrowRefusesBadRequests) {
  Membership m(MPI_COMM_WORLD);
  SpawnSpec spec;
  spec.command = "/bin/true";
  EXPECT_EQ(invalid_argument_from([&] { m.grow(-1, spec); }),
            "grow: count must not be negative, got -1");
  spec.command = "/nonexistent/bellows-child";
  EXPECT_EQ(invalid_argument_from([&] { m.grow(1, spec); }),
            "spawn spec: command '/nonexistent/bellows-child' is not an executable file");
  spec.command = "";
  EXPECT_EQ(invalid_argument_from([&] { m.grow(1, spec); }), "spawn spec: empty command");
  spec.command = "true";  // found in PATH
  spec.env = {{"A=B", "1"}};
  EXPECT_EQ(invalid_argument_from([&] { m.grow(1, spec); }),
            "spawn spec: bad environment variable 'A=B' (empty, or holds '=' or a newline)");
  spec.env.clear();
  spec.args = {"two\nlines"};
  EXPECT_EQ(invalid_argument_from([&] { m.grow(1, spec); }),
            "spawn spec: argument 'two\nlines' contains a newline");
  spec.args.clear();
  spec.host = "no-such-host.invalid";
  EXPECT_NE(invalid_argument_from([&] {
              m.grow(1, spec);
            }).find("spawn spec: host 'no-such-host.invalid' does not resolve"),
            std::string::npos);
  EXPECT_TRUE(m.is_member());
  EXPECT_EQ(m.size(), size());
  EXPECT_TRUE(m.grows().empty());
}

TEST_F(MembershipValidation, GrowByZeroKeepsEveryone) {
  Membership m(MPI_COMM_WORLD);
  const auto& report = m.grow(0, SpawnSpec{});
  EXPECT_EQ(report.old_size, size());
  EXPECT_EQ(report.new_size, size());
  EXPECT_TRUE(report.spawn_seconds.empty());
  EXPECT_EQ(m.size(), size());
  EXPECT_EQ(m.rank(), rank());
}

TEST_F(MembershipValidation, LeaverSharingItsWorldTwoRanks) {
  if (size() != 2) GTEST_SKIP() << "two ranks of one MPI_COMM_WORLD";
  Membership m(MPI_COMM_WORLD);
  EXPECT_EQ(invalid_argument_from([&] { m.shrink(std::vector<int>{1}); }),
            "shrink: rank 1 cannot leave: it shares its MPI_COMM_WORLD (one mpiexec or one "
            "MPI_Comm_spawn call) with ranks that stay, and its MPI_Finalize would wait for "
            "them");
  EXPECT_TRUE(m.is_member());
  EXPECT_EQ(m.size(), 2);
}

TEST_F(MembershipValidation, DifferentListsTwoRanks) {
  if (size() != 2) GTEST_SKIP() << "two ranks of one MPI_COMM_WORLD";
  Membership m(MPI_COMM_WORLD);
  const std::vector<int> mine = rank() == 0 ? std::vector<int>{} : std::vector<int>{1};
  EXPECT_EQ(invalid_argument_from([&] { m.shrink(mine); }),
            "shrink: the ranks passed different lists of leaving ranks");
  EXPECT_TRUE(m.is_member());
  EXPECT_TRUE(bellows::testing::all_ranks(true, m.communicator()));
}

}  // namespace
