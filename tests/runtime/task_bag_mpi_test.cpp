// TaskBag (task_bag.hpp) under mpiexec -n 1..4: with Dtree, stealing and static blocks, every
// index runs exactly once (a count per index summed over the ranks, the digests' sum, the
// tasks' count), every rank sees the same report, consecutive runs reuse the tree and weigh
// it by measured speed, a slow rank gets less of a Dtree's work, a throwing body and bad
// options are reported with their text; the bag's messages round-trip and bad ones are refused.

#include <gtest/gtest.h>

#include <functional>
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bag_sources.hpp"
#include "bellows/runtime/task_bag.hpp"

namespace br = bellows::runtime;

namespace {

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

int size_of(MPI_Comm comm) {
  int s = 0;
  MPI_Comm_size(comm, &s);
  return s;
}

// Runs `count` tasks and checks, over all ranks, that each index ran exactly once.
// `also` runs after each task's body on its rank.
br::BagReport run_counted(br::TaskBag& bag, std::int64_t count, double modeled_seconds = 0.0,
                          const std::function<void()>& also = {}) {
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(count));
  br::BagTasks tasks;
  tasks.count = count;
  tasks.body = [&](std::int64_t i) {
    runs[static_cast<std::size_t>(i)].fetch_add(1);
    if (also) also();
    return mix(static_cast<std::uint64_t>(i));
  };
  if (modeled_seconds > 0.0) tasks.modeled_seconds = [=](std::int64_t) { return modeled_seconds; };
  const auto report = bag.run(MPI_COMM_WORLD, tasks);

  std::vector<int> mine(runs.size()), all(runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i) mine[i] = runs[i].load();
  MPI_Allreduce(mine.data(), all.data(), static_cast<int>(all.size()), MPI_INT, MPI_SUM,
                MPI_COMM_WORLD);
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < all.size(); ++i) wrong += all[i] != 1;
  EXPECT_EQ(wrong, 0) << "indices not run exactly once, of " << count;

  std::uint64_t expected = 0;
  for (std::int64_t i = 0; i < count; ++i) expected += mix(static_cast<std::uint64_t>(i));
  EXPECT_EQ(report.tasks, count);
  EXPECT_EQ(report.digest, expected);
  EXPECT_EQ(report.ranks.size(), static_cast<std::size_t>(size_of(MPI_COMM_WORLD)));
  std::uint64_t summed = 0;
  for (const auto& r : report.ranks) summed += r.tasks;
  EXPECT_EQ(summed, static_cast<std::uint64_t>(count));
  // Every rank holds the same report.
  double seconds = report.seconds, most = 0.0;
  MPI_Allreduce(&seconds, &most, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(most, report.seconds);
  return report;
}

br::BagOptions options_for(br::BagDistribution distribution, int workers = 1) {
  br::BagOptions o;
  o.distribution = distribution;
  o.workers = workers;
  o.dtree.fan_out = 2;  // 4 ranks make a tree of height 2
  o.timeout_seconds = 60;
  return o;
}

class TaskBagEachDistribution : public ::testing::TestWithParam<br::BagDistribution> {};

}  // namespace

TEST_P(TaskBagEachDistribution, EveryIndexRunsExactlyOnce) {
  for (const int workers : {1, 3}) {
    br::TaskBag bag(options_for(GetParam(), workers));
    for (const std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7},
                                     std::int64_t{20000}}) {
      SCOPED_TRACE("workers " + std::to_string(workers) + ", tasks " + std::to_string(count));
      (void)run_counted(bag, count);
    }
  }
}

TEST_P(TaskBagEachDistribution, ModeledTimeIsChargedAndSpreadOverTheRanks) {
  br::TaskBag bag(options_for(GetParam()));
  const int ranks = size_of(MPI_COMM_WORLD);
  // 1,600 tasks of 1 ms: 1.6 s of modeled work in all, 0.4 s a rank on 4, long enough that a
  // rank the 2 cores of a test host leave unscheduled for a while still asks for work before
  // the rest have taken it all (with 400 tasks a rank of 4 once got none under Dtree).
  constexpr std::int64_t kTasks = 1600;
  const auto report = run_counted(bag, kTasks, 1e-3);
  EXPECT_GE(report.seconds, 1e-3 * static_cast<double>(kTasks) / ranks * 0.95);
  // Every rank takes part (the makespan itself is the benchmark's: 2 cores run every rank of
  // every test here).
  for (const auto& r : report.ranks) {
    EXPECT_GT(r.tasks, 0u) << "rank " << r.rank;
    EXPECT_GE(r.busy_seconds, 1e-3 * static_cast<double>(r.tasks) * 0.95) << "rank " << r.rank;
  }
}

INSTANTIATE_TEST_SUITE_P(TaskBag, TaskBagEachDistribution,
                         ::testing::Values(br::BagDistribution::dtree, br::BagDistribution::steal,
                                           br::BagDistribution::static_blocks),
                         [](const auto& param_info) { return std::string(br::to_string(param_info.param)); });

TEST(TaskBagDtree, TheTreeHasTheFanOutAndItsParentsInTheReport) {
  br::TaskBag bag(options_for(br::BagDistribution::dtree));
  // Tasks of 0.1 ms, so that every rank asks before the root has run them all.
  const auto report = run_counted(bag, 2000, 1e-4);
  const int ranks = size_of(MPI_COMM_WORLD);
  EXPECT_EQ(report.tree_height, ranks == 1 ? 0 : ranks <= 3 ? 1 : 2);
  EXPECT_EQ(report.ranks[0].parent, -1);
  for (int r = 1; r < ranks; ++r) EXPECT_GE(report.ranks[static_cast<std::size_t>(r)].parent, 0);
  std::uint64_t asked = 0, served = 0;
  for (const auto& r : report.ranks) {
    asked += r.requests_sent;
    served += r.requests_served;
  }
  EXPECT_LE(served, asked);
  if (ranks > 1) {
    EXPECT_GT(served, 0u);
  }
}

TEST(TaskBagDtree, ASlowRankGetsLessOnceItsSpeedIsMeasured) {
  const int ranks = size_of(MPI_COMM_WORLD);
  if (ranks < 2) GTEST_SKIP() << "needs 2 ranks";
  auto o = options_for(br::BagDistribution::dtree);
  if (rank_of(MPI_COMM_WORLD) == 1) o.slowdown = 4.0;
  br::TaskBag bag(o);
  // 0.8 s of modeled work: enough for every rank to ask before the others ran it all, even on
  // a loaded machine.
  const auto first = run_counted(bag, 800, 1e-3);
  EXPECT_EQ(first.ranks[1].speed, 0.0) << "nothing measured before the first run";
  const auto second = run_counted(bag, 800, 1e-3);
  EXPECT_GT(second.ranks[1].speed, 0.0);
  EXPECT_LT(second.ranks[1].speed, second.ranks[0].speed / 2);
  EXPECT_LT(second.ranks[1].tasks, second.ranks[0].tasks / 2);
}

// A shrink ordered during a long run (TaskBag::request_leave, from a body): the last rank, a
// leaf of the tree, leaves once it has run 20 tasks: the ranges its workers run finish, it
// gives the grant it holds unstarted back to its parent and runs nothing more, and every index
// still runs exactly once. A rank with
// children (rank 1 of 4, parent of rank 2) asked the same runs to the end: its request is taken
// between runs. The request is cleared when the run ends.
TEST(TaskBagDtree, ALeafLeavesDuringTheRunAndItsWorkRunsOnce) {
  const int ranks = size_of(MPI_COMM_WORLD);
  const int rank = rank_of(MPI_COMM_WORLD);
  if (ranks < 2) GTEST_SKIP() << "two ranks at least";
  br::TaskBag bag(options_for(br::BagDistribution::dtree, 2));
  const int leaver = ranks - 1;       // fan-out 2: a leaf at 2, 3 and 4 ranks
  const int parent_asked = ranks == 4 ? 1 : -1;  // 4 ranks: 0 -> {1, 3}, 1 -> {2}
  std::atomic<int> ran{0};
  const auto leave_after_20 = [&] {
    if ((rank == leaver || rank == parent_asked) && ran.fetch_add(1) + 1 == 20) bag.request_leave();
  };
  // A first run measures the speeds: a measured rank asks while its last range runs, so that
  // the leaver holds a grant it has not started when it leaves.
  (void)run_counted(bag, 400, 5e-4);
  // 2000 tasks of 0.5 ms: 0.25 s on 4 ranks of 2 workers, far longer than 20 tasks.
  const auto report = run_counted(bag, 2000, 5e-4, leave_after_20);
  const auto& left = report.ranks[static_cast<std::size_t>(leaver)];
  EXPECT_TRUE(left.left_run);
  EXPECT_GE(left.tasks, 20u);
  EXPECT_LT(left.tasks, 2000u / static_cast<unsigned>(ranks)) << "it went on running";
  // The grant it held unstarted went back (run by the others: every index once, above).
  EXPECT_GT(left.tasks_returned, 0u);
  for (int r = 0; r < ranks; ++r) {
    if (r != leaver) {
      EXPECT_FALSE(report.ranks[static_cast<std::size_t>(r)].left_run) << "rank " << r;
    }
  }
  if (parent_asked >= 0) {
    EXPECT_GT(report.ranks[static_cast<std::size_t>(parent_asked)].tasks, 20u);
  }
  // The next run: nobody asked, nobody leaves.
  const auto next = run_counted(bag, 500, 1e-4);
  for (const auto& r : next.ranks) EXPECT_FALSE(r.left_run) << "rank " << r.rank;
}

TEST(TaskBag, AThrowingBodyIsReportedOnItsRank) {
  // Only one rank: the others would wait for it until their timeout.
  if (size_of(MPI_COMM_WORLD) != 1) GTEST_SKIP() << "one rank";
  br::TaskBag bag(options_for(br::BagDistribution::dtree, 2));
  br::BagTasks tasks;
  tasks.count = 100;
  tasks.body = [](std::int64_t i) -> std::uint64_t {
    if (i == 42) throw std::runtime_error("task 42 failed");
    return 0;
  };
  try {
    (void)bag.run(MPI_COMM_WORLD, tasks);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "task 42 failed");
  }
}

TEST(TaskBag, BadOptionsAndTasksAreRefusedNamingTheValue) {
  const auto refusal = [](br::BagOptions o) -> std::string {
    try {
      br::TaskBag bag(o);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  };
  br::BagOptions o;
  o.workers = 0;
  EXPECT_EQ(refusal(o), "task bag: workers must be at least 1, got 0");
  o = {};
  o.min_ask = -1;
  EXPECT_EQ(refusal(o), "task bag: min_ask must not be negative, got -1");
  o = {};
  o.slowdown = 0;
  EXPECT_EQ(refusal(o), "task bag: slowdown must be positive, got 0");
  o = {};
  o.dtree.first = 1.5;
  EXPECT_EQ(refusal(o), "dtree: first must be in (0, 1], got 1.5");
  o = {};
  o.recovery_timeout_seconds = 0;
  EXPECT_EQ(refusal(o), "task bag: recovery_timeout_seconds must be positive, got 0");
  br::TaskBag bag(br::BagOptions{});
  br::BagTasks tasks;
  tasks.count = -1;
  tasks.body = [](std::int64_t) { return std::uint64_t{0}; };
  EXPECT_THROW((void)bag.run(MPI_COMM_WORLD, tasks), std::invalid_argument);
  tasks.count = 1;
  tasks.body = nullptr;
  EXPECT_THROW((void)bag.run(MPI_COMM_WORLD, tasks), std::invalid_argument);
  br::BagDistribution d{};
  EXPECT_TRUE(br::parse_bag_distribution("static", d));
  EXPECT_EQ(d, br::BagDistribution::static_blocks);
  EXPECT_FALSE(br::parse_bag_distribution("random", d));
}

TEST(TaskBagMessages, RoundTripAndRefusals) {
  namespace bag = br::bag;
  const bag::Message grant{bag::MessageKind::grant, 3, {10, 25}, 0};
  const bag::Message back = bag::decode(bag::encode(grant), 3);
  EXPECT_EQ(back.kind, bag::MessageKind::grant);
  EXPECT_EQ(back.peer, 3);
  EXPECT_EQ(back.range, (br::IndexRange{10, 25}));
  const auto refusal = [](bag::WireMessage wire) -> std::string {
    try {
      (void)bag::decode(wire, 5);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(refusal({0, 0, 0, 0}), "task bag: rank 5 sent a message of unknown kind 0");
  EXPECT_EQ(refusal({9, 0, 0, 0}), "task bag: rank 5 sent a message of unknown kind 9");
  EXPECT_EQ(refusal({2, 9, 4, 0}), "task bag: rank 5 sent the range [9, 4), which ends before it begins");
}
