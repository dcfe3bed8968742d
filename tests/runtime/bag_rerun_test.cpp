// What a bag runs again after ranks were lost (bag_rerun.hpp): the complement of what the
// survivors finished, refusals of inconsistent input, and a Dtree pulling a pool of several
// ranges (the re-run's) with every index exactly once.

#include "bellows/runtime/bag_rerun.hpp"
#include "bellows/runtime/dtree_node.hpp"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace br = bellows::runtime;

namespace {

std::string error_of(const auto& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<br::IndexRange> ranges(std::initializer_list<br::IndexRange> list) { return list; }

}  // namespace

TEST(BagFinishedRanges, MergesRangesThatTouchInAnyOrder) {
  br::BagFinishedRanges finished;
  finished.add({10, 20});
  finished.add({30, 40});
  finished.add({0, 5});
  finished.add({20, 30});
  finished.add({7, 7});  // empty: nothing
  EXPECT_EQ(finished.tasks(), 35);
  const std::vector<br::IndexRange> got(finished.ranges().begin(), finished.ranges().end());
  EXPECT_EQ(got, ranges({{0, 5}, {10, 40}}));
}

TEST(BagFinishedRanges, RefusesAnIndexFinishedTwice) {
  br::BagFinishedRanges finished;
  finished.add({10, 20});
  EXPECT_EQ(error_of([&] { finished.add({19, 25}); }),
            "bag finished ranges: [19, 25) overlaps a range already finished on this rank");
  EXPECT_EQ(error_of([&] { finished.add({5, 11}); }),
            "bag finished ranges: [5, 11) overlaps a range already finished on this rank");
  EXPECT_EQ(error_of([&] { finished.add({9, 3}); }), "bag finished ranges: [9, 3) ends before it begins");
  EXPECT_EQ(finished.tasks(), 10);
}

TEST(BagRerun, NothingFinishedRunsTheWholeBagAgain) {
  const auto bag = ranges({{0, 100}});
  const br::BagRerun rerun = br::plan_bag_rerun(bag, {});
  EXPECT_EQ(rerun.ranges, bag);
  EXPECT_EQ(rerun.tasks, 100);
  EXPECT_EQ(rerun.kept, 0);
}

TEST(BagRerun, TheComplementOfWhatSurvivorsFinished) {
  const auto bag = ranges({{0, 100}});
  const std::vector<br::BagFinished> finished{{2, {40, 60}}, {0, {0, 10}}, {1, {10, 25}}, {2, {99, 100}}};
  const br::BagRerun rerun = br::plan_bag_rerun(bag, finished);
  EXPECT_EQ(rerun.ranges, ranges({{25, 40}, {60, 99}}));
  EXPECT_EQ(rerun.tasks, 54);
  EXPECT_EQ(rerun.kept, 46);
}

TEST(BagRerun, EverythingFinishedLeavesNothing) {
  const auto bag = ranges({{0, 10}, {20, 30}});
  const std::vector<br::BagFinished> finished{{0, {0, 10}}, {1, {20, 25}}, {0, {25, 30}}};
  const br::BagRerun rerun = br::plan_bag_rerun(bag, finished);
  EXPECT_TRUE(rerun.ranges.empty());
  EXPECT_EQ(rerun.tasks, 0);
  EXPECT_EQ(rerun.kept, 20);
}

TEST(BagRerun, ABagOfSeveralRangesASecondLoss) {
  // A re-run lost a rank too: its pool was the complement of the first loss.
  const auto bag = ranges({{25, 40}, {60, 99}});
  const std::vector<br::BagFinished> finished{{0, {30, 40}}, {1, {60, 70}}, {1, {90, 99}}};
  const br::BagRerun rerun = br::plan_bag_rerun(bag, finished);
  EXPECT_EQ(rerun.ranges, ranges({{25, 30}, {70, 90}}));
  EXPECT_EQ(rerun.tasks, 25);
  EXPECT_EQ(rerun.kept, 29);
}

TEST(BagRerun, RandomFinishedSetsCoverEveryIndexExactlyOnce) {
  std::mt19937 random(20261128);
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t n = std::uniform_int_distribution<std::int64_t>(0, 500)(random);
    std::vector<br::BagFinished> finished;
    std::vector<int> covered(static_cast<std::size_t>(n), 0);
    for (std::int64_t at = 0; at < n;) {
      const std::int64_t len = std::uniform_int_distribution<std::int64_t>(1, 30)(random);
      const br::IndexRange r{at, std::min(n, at + len)};
      if (random() % 2 == 0) {
        finished.push_back({static_cast<int>(random() % 4), r});
        for (auto i = r.begin; i < r.end; ++i) covered[static_cast<std::size_t>(i)] += 1;
      }
      at = r.end;
    }
    std::shuffle(finished.begin(), finished.end(), random);
    const br::BagRerun rerun = br::plan_bag_rerun(ranges({{0, n}}), finished);
    for (const auto& r : rerun.ranges) {
      for (auto i = r.begin; i < r.end; ++i) covered[static_cast<std::size_t>(i)] += 1;
    }
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(covered[static_cast<std::size_t>(i)], 1) << "index " << i;
    EXPECT_EQ(rerun.tasks + rerun.kept, n);
  }
}

TEST(BagRerun, RefusesInconsistentInput) {
  const auto bag = ranges({{0, 100}});
  const std::vector<br::BagFinished> twice{{1, {10, 20}}, {3, {15, 16}}};
  EXPECT_EQ(error_of([&] { (void)br::plan_bag_rerun(bag, twice); }),
            "bag rerun: ranks 1 and 3 both finished index 15 ([10, 20) and [15, 16))");
  const std::vector<br::BagFinished> outside{{2, {90, 110}}};
  EXPECT_EQ(error_of([&] { (void)br::plan_bag_rerun(bag, outside); }),
            "bag rerun: rank 2 finished [90, 110), which is not inside the bag's ranges");
  const std::vector<br::BagFinished> in_gap{{0, {12, 18}}};
  EXPECT_EQ(error_of([&] { (void)br::plan_bag_rerun(ranges({{0, 10}, {20, 30}}), in_gap); }),
            "bag rerun: rank 0 finished [12, 18), which is not inside the bag's ranges");
  const std::vector<br::BagFinished> reversed{{4, {8, 3}}};
  EXPECT_EQ(error_of([&] { (void)br::plan_bag_rerun(bag, reversed); }),
            "bag rerun: rank 4 finished [8, 3), which ends before it begins");
  EXPECT_EQ(error_of([&] { (void)br::plan_bag_rerun(ranges({{10, 20}, {15, 30}}), {}); }),
            "bag rerun: the bag's range [15, 30) ends before it begins or is not after the one before it");
}

TEST(DtreeNode, ARootWithAPoolOfSeveralRangesHandsOutEachIndexOnce) {
  // Three ranks, the root's pool the re-run's ranges; a single-thread pull loop.
  const br::DtreeShape shape(3, br::DtreeOptions{});
  const std::vector<double> speeds(3, 0.0);
  const auto pool = ranges({{5, 17}, {40, 41}, {100, 160}});
  std::vector<br::DtreeNode> nodes;
  for (int r = 0; r < 3; ++r) nodes.push_back(br::DtreeNode::over_ranges(shape, r, speeds, pool, br::DtreeOptions{}, 2, 1));
  EXPECT_EQ(nodes[0].grantor().remaining(), 73);
  EXPECT_EQ(nodes[1].grantor().remaining(), 0);
  std::vector<int> runs(160, 0);
  for (int step = 0; step < 1000; ++step) {
    bool any = false;
    for (int r = 0; r < 3; ++r) {
      br::DtreeSteps steps;
      const br::IndexRange got = nodes[static_cast<std::size_t>(r)].take_own(steps);
      for (auto i = got.begin; i < got.end; ++i) ++runs[static_cast<std::size_t>(i)];
      any = any || !got.empty();
      if (steps.ask_parent) {
        const br::DtreeSteps answer = nodes[0].on_request(r);
        for (const auto& g : answer.grants) {
          (void)nodes[static_cast<std::size_t>(g.to)].on_grant(g.range);
          any = true;
        }
      }
    }
    if (!any) break;
  }
  for (int i = 0; i < 160; ++i) {
    const bool in_pool = (i >= 5 && i < 17) || i == 40 || (i >= 100 && i < 160);
    EXPECT_EQ(runs[static_cast<std::size_t>(i)], in_pool ? 1 : 0) << "index " << i;
  }
  for (const auto& node : nodes) EXPECT_TRUE(node.dry());
  EXPECT_EQ(error_of([&] {
              (void)br::DtreeNode::over_ranges(shape, 0, speeds, ranges({{0, 10}, {5, 12}}), br::DtreeOptions{}, 2, 1);
            }),
            "dtree grantor: the pool's range [5, 12) overlaps the pool");
}
