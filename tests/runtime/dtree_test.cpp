// Dtree: the tree's shape (and its joins and leaves), the shares, the grants, and a pull loop
// in which every index of the bag is run exactly once.
#include "bellows/runtime/dtree.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace bellows::runtime {
namespace {

template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

DtreeOptions options(int fan_out, int max_height = 3) {
  DtreeOptions o;
  o.fan_out = fan_out;
  o.max_height = max_height;
  return o;
}

// The invariants every tree keeps: the root has no parent, every other member exactly one
// whose children list it, all members hang from the root, children are ascending, no rank
// has more than fan_out children, and no path is longer than max_height.
void expect_tree(const DtreeShape& shape, const DtreeOptions& o, int slots) {
  ASSERT_TRUE(shape.member(0));
  EXPECT_EQ(shape.parent(0), -1);
  int members = 0;
  int edges = 0;
  for (int r = 0; r < slots; ++r) {
    if (!shape.member(r)) {
      EXPECT_TRUE(shape.children(r).empty()) << r;
      continue;
    }
    ++members;
    const auto kids = shape.children(r);
    EXPECT_LE(static_cast<int>(kids.size()), o.fan_out) << "rank " << r;
    EXPECT_TRUE(std::is_sorted(kids.begin(), kids.end())) << "rank " << r;
    for (const int c : kids) {
      EXPECT_TRUE(shape.member(c)) << c;
      EXPECT_EQ(shape.parent(c), r) << c;
      ++edges;
    }
    if (r != 0) {
      const int p = shape.parent(r);
      ASSERT_TRUE(shape.member(p)) << "rank " << r;
      const auto siblings = shape.children(p);
      EXPECT_EQ(std::count(siblings.begin(), siblings.end(), r), 1) << "rank " << r;
    }
    EXPECT_LE(shape.depth(r), o.max_height) << "rank " << r;
  }
  EXPECT_EQ(members, shape.size());
  EXPECT_EQ(edges, members - 1);
  EXPECT_EQ(static_cast<int>(shape.subtree(0).size()), members);
  EXPECT_LE(shape.height(), o.max_height);
}

// The least height a tree of `ranks` ranks and this fan-out can have.
int least_height(int ranks, int fan_out) {
  int h = 0;
  std::int64_t fits = 1;
  std::int64_t level = 1;
  while (fits < ranks) {
    level *= fan_out;
    fits += level;
    ++h;
  }
  return h;
}

struct ShapeCase {
  int ranks;
  int fan_out;
  int max_height;
};

class DtreeShapeSizes : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(DtreeShapeSizes, KeepsTheInvariantsAtTheLeastHeightAndIsDeterministic) {
  const auto [ranks, fan_out, max_height] = GetParam();
  const auto o = options(fan_out, max_height);
  const DtreeShape shape(ranks, o);
  EXPECT_EQ(shape.size(), ranks);
  expect_tree(shape, o, ranks);
  EXPECT_EQ(shape.height(), least_height(ranks, fan_out));
  const DtreeShape again(ranks, o);
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(again.parent(r), shape.parent(r));
    EXPECT_TRUE(std::ranges::equal(again.children(r), shape.children(r)));
  }
  // Every subtree is a contiguous block of ranks, and siblings' blocks differ by at most one.
  for (int r = 0; r < ranks; ++r) {
    const auto sub = shape.subtree(r);
    EXPECT_EQ(sub.back() - sub.front() + 1, static_cast<int>(sub.size())) << "rank " << r;
    std::vector<std::size_t> sizes;
    for (const int c : shape.children(r)) sizes.push_back(shape.subtree(c).size());
    if (!sizes.empty()) {
      const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
      EXPECT_LE(*hi - *lo, 1U) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtree, DtreeShapeSizes,
                         ::testing::Values(ShapeCase{1, 16, 3}, ShapeCase{2, 16, 3},
                                           ShapeCase{16, 16, 3}, ShapeCase{17, 16, 3},
                                           ShapeCase{18, 16, 3}, ShapeCase{100, 16, 3},
                                           ShapeCase{1024, 16, 3}, ShapeCase{100, 10, 2},
                                           ShapeCase{1024, 32, 2}, ShapeCase{85, 4, 3},
                                           ShapeCase{4, 1, 3}));

TEST(DtreeShape, OneRankIsARootAlone) {
  const DtreeShape shape(1, DtreeOptions{});
  EXPECT_EQ(shape.parent(0), -1);
  EXPECT_TRUE(shape.children(0).empty());
  EXPECT_EQ(shape.height(), 0);
  EXPECT_FALSE(shape.member(1));
  EXPECT_EQ(shape.parent(1), -1);
  EXPECT_EQ(shape.depth(1), -1);
}

TEST(DtreeShape, FanOutPlusOneRanksIsAStarAndOneMoreMakesAParent) {
  const DtreeShape star(17, options(16));
  EXPECT_EQ(star.children(0).size(), 16U);
  EXPECT_EQ(star.height(), 1);
  const DtreeShape two(18, options(16));
  EXPECT_EQ(two.children(0).size(), 16U);
  EXPECT_EQ(two.children(0)[0], 1);
  EXPECT_EQ(two.children(0)[1], 3);
  EXPECT_EQ(std::vector<int>(two.children(1).begin(), two.children(1).end()), std::vector<int>{2});
  EXPECT_EQ(two.height(), 2);
}

TEST(DtreeShape, ParentsAreSpreadOverTheRanks) {
  // 99 ranks below the root in 16 blocks: three of 7, thirteen of 6.
  const DtreeShape shape(100, options(16));
  const auto top = shape.children(0);
  EXPECT_EQ(std::vector<int>(top.begin(), top.begin() + 5), (std::vector<int>{1, 8, 15, 22, 28}));
  EXPECT_EQ(shape.children(1).size(), 6U);
  EXPECT_EQ(shape.children(22).size(), 5U);
  EXPECT_EQ(shape.parent(7), 1);
  EXPECT_EQ(shape.depth(7), 2);
}

TEST(DtreeShape, RefusesRanksThatDoNotFitAndBadCounts) {
  EXPECT_EQ(refusal([] { DtreeShape(100, options(2)); }),
            "dtree: 100 ranks do not fit a tree of fan-out 2 and height at most 3 (at most 15 "
            "ranks)");
  EXPECT_EQ(refusal([] { DtreeShape(0, DtreeOptions{}); }),
            "dtree: a tree needs at least 1 rank, got 0");
  EXPECT_EQ(refusal([] { DtreeShape(5000, options(1000000, 3)); }), "(no error)");
}

TEST(DtreeOptions, BadParametersAreRefusedNamingTheValue) {
  const auto with = [](const std::function<void(DtreeOptions&)>& change) {
    DtreeOptions o;
    change(o);
    return refusal([&] { o.validate(); });
  };
  EXPECT_EQ(with([](DtreeOptions&) {}), "(no error)");
  EXPECT_EQ(with([](DtreeOptions& o) { o.first = 1.5; }),
            "dtree: first must be in (0, 1], got 1.5");
  EXPECT_EQ(with([](DtreeOptions& o) { o.first = 0.0; }), "dtree: first must be in (0, 1], got 0");
  EXPECT_EQ(with([](DtreeOptions& o) { o.rest = -0.25; }),
            "dtree: rest must be in (0, 1], got -0.25");
  EXPECT_EQ(with([](DtreeOptions& o) { o.rest = std::numeric_limits<double>::quiet_NaN(); }),
            "dtree: rest must be in (0, 1], got nan");
  EXPECT_EQ(with([](DtreeOptions& o) { o.fan_out = 0; }),
            "dtree: fan_out must be at least 1, got 0");
  EXPECT_EQ(with([](DtreeOptions& o) { o.max_height = 0; }),
            "dtree: max_height must be at least 1, got 0");
  DtreeOptions bad;
  bad.first = 2.0;
  EXPECT_EQ(refusal([&] { DtreeShape(4, bad); }), "dtree: first must be in (0, 1], got 2");
  EXPECT_EQ(refusal([&] {
              DtreeGrantor({0, 10}, {}, bad);
            }),
            "dtree: first must be in (0, 1], got 2");
}

// ---------------------------------------------------------------- joins and leaves

TEST(DtreeShape, AJoinerGoesToTheShallowestParentWithTheFewestChildren) {
  const auto o = options(16);
  DtreeShape shape(100, o);
  // The root is full; of its children, 22 is the first with five children (not six).
  EXPECT_EQ(shape.join(100), 22);
  EXPECT_EQ(shape.join(101), 28);
  EXPECT_EQ(shape.parent(101), 28);
  EXPECT_EQ(shape.size(), 102);
  expect_tree(shape, o, 102);

  DtreeShape small(2, options(16));
  EXPECT_EQ(small.join(2), 0);
  EXPECT_EQ(small.join(7), 0);  // any number not in the tree
  EXPECT_TRUE(small.member(7));
  EXPECT_FALSE(small.member(5));
}

TEST(DtreeShape, AJoinIntoAFullTreeOrOfAMemberIsRefused) {
  DtreeShape shape(3, options(2, 1));
  EXPECT_EQ(refusal([&] { shape.join(3); }),
            "dtree: rank 3 cannot join: 3 ranks fill a tree of fan-out 2 and height at most 1");
  EXPECT_EQ(refusal([&] { shape.join(1); }), "dtree: rank 1 cannot join: already in the tree");
  EXPECT_EQ(refusal([&] { shape.join(-2); }), "dtree: rank -2 cannot join: negative");
  EXPECT_EQ(shape.size(), 3);
}

TEST(DtreeShape, ALeafLeavesAndItsRangeGoesToItsParent) {
  DtreeShape shape(100, options(16));
  const auto left = shape.leave(7);
  EXPECT_EQ(left.returns_to, 1);
  EXPECT_EQ(left.promoted, -1);
  EXPECT_FALSE(shape.member(7));
  EXPECT_EQ(shape.children(1).size(), 5U);
  expect_tree(shape, options(16), 100);
}

TEST(DtreeShape, AParentLeavesAndItsDeepestLastLeafTakesItsPlace) {
  DtreeShape shape(100, options(16));
  const auto left = shape.leave(1);
  EXPECT_EQ(left.returns_to, 0);
  EXPECT_EQ(left.promoted, 7);
  EXPECT_EQ(shape.parent(7), 0);
  EXPECT_EQ(std::vector<int>(shape.children(7).begin(), shape.children(7).end()),
            (std::vector<int>{2, 3, 4, 5, 6}));
  EXPECT_EQ(shape.children(0).size(), 16U);
  EXPECT_EQ(shape.children(0)[0], 7);
  expect_tree(shape, options(16), 100);
  EXPECT_EQ(shape.size(), 99);

  // Three levels: the leaf comes from the bottom of the leaver's subtree.
  DtreeShape deep(1024, options(16));
  const int top = deep.children(0)[0];
  const auto sub = deep.subtree(top);
  const auto out = deep.leave(top);
  EXPECT_EQ(out.returns_to, 0);
  EXPECT_EQ(out.promoted, sub.back());
  EXPECT_EQ(deep.depth(out.promoted), 1);
  expect_tree(deep, options(16), 1024);
}

TEST(DtreeShape, TheRootAndStrangersCannotLeave) {
  DtreeShape shape(4, DtreeOptions{});
  EXPECT_EQ(refusal([&] { shape.leave(0); }), "dtree: rank 0 cannot leave: it is the root");
  EXPECT_EQ(refusal([&] { shape.leave(9); }), "dtree: rank 9 cannot leave: not in the tree");
  shape.leave(3);
  EXPECT_EQ(refusal([&] { shape.leave(3); }), "dtree: rank 3 cannot leave: not in the tree");
  EXPECT_EQ(shape.join(3), 0);  // a number that left may come back
}

TEST(DtreeShape, JoinsAndLeavesInAnyOrderKeepTheInvariants) {
  const auto o = options(4, 3);
  DtreeShape shape(40, o);
  std::uint32_t seed = 12345;
  const auto draw = [&](int n) {
    seed = seed * 1664525U + 1013904223U;
    return static_cast<int>((seed >> 8) % static_cast<std::uint32_t>(n));
  };
  int next = 40;
  for (int step = 0; step < 400; ++step) {
    if (draw(2) == 0 && shape.size() < 85) {
      shape.join(next++);
    } else if (shape.size() > 1) {
      std::vector<int> members = shape.subtree(0);
      const int r =
          members[static_cast<std::size_t>(1 + draw(static_cast<int>(members.size()) - 1))];
      const auto out = shape.leave(r);
      EXPECT_TRUE(shape.member(out.returns_to));
    }
    expect_tree(shape, o, next);
    if (HasFailure()) return;
  }
}

// ---------------------------------------------------------------- shares

TEST(DtreeShares, EqualSpeedsGiveSubtreeSizes) {
  const DtreeShape shape(100, options(16));
  const std::vector<double> speeds(100, 3.0);
  const auto shares = dtree_shares(shape, 0, speeds);
  EXPECT_DOUBLE_EQ(shares.own, 0.01);
  ASSERT_EQ(shares.children.size(), 16U);
  EXPECT_EQ(shares.children[0].rank, 1);
  EXPECT_DOUBLE_EQ(shares.children[0].share, 0.07);
  EXPECT_DOUBLE_EQ(shares.children[15].share, 0.06);
  double sum = shares.own;
  for (const auto& c : shares.children) sum += c.share;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  const auto at_one = dtree_shares(shape, 1, speeds);
  EXPECT_DOUBLE_EQ(at_one.own, 1.0 / 7.0);
  EXPECT_DOUBLE_EQ(at_one.children[0].share, 1.0 / 7.0);
}

TEST(DtreeShares, UnequalSpeedsWeighTheSubtrees) {
  // Five ranks, fan-out 2: 0 -> {1 -> {2}, 3 -> {4}}.
  const DtreeShape shape(5, options(2));
  const std::vector<double> speeds{1.0, 1.0, 2.0, 3.0, 3.0};
  const auto shares = dtree_shares(shape, 0, speeds);
  EXPECT_DOUBLE_EQ(shares.own, 0.1);
  EXPECT_EQ(shares.children, (std::vector<DtreeChildShare>{{1, 0.3}, {3, 0.6}}));
  const auto at_three = dtree_shares(shape, 3, speeds);
  EXPECT_DOUBLE_EQ(at_three.own, 0.5);
  EXPECT_EQ(at_three.children, (std::vector<DtreeChildShare>{{4, 0.5}}));
  const auto leaf = dtree_shares(shape, 4, speeds);
  EXPECT_DOUBLE_EQ(leaf.own, 1.0);
  EXPECT_TRUE(leaf.children.empty());
}

TEST(DtreeShares, AnUnmeasuredRankCountsAsTheMeanOrOne) {
  const DtreeShape shape(3, options(2));
  // Rank 1 not measured yet: the mean of 2 and 4.
  const auto mean = dtree_shares(shape, 0, std::vector<double>{2.0, 0.0, 4.0});
  EXPECT_DOUBLE_EQ(mean.own, 2.0 / 9.0);
  EXPECT_EQ(mean.children, (std::vector<DtreeChildShare>{{1, 3.0 / 9.0}, {2, 4.0 / 9.0}}));
  // Rank 2 past the end of the speeds: not measured either.
  const auto past = dtree_shares(shape, 0, std::vector<double>{2.0, 4.0});
  EXPECT_DOUBLE_EQ(past.children[1].share, 3.0 / 9.0);
  // None measured: all count as 1.
  const auto none = dtree_shares(shape, 0, std::vector<double>{});
  EXPECT_DOUBLE_EQ(none.own, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(none.children[0].share, 1.0 / 3.0);
}

TEST(DtreeShares, BadSpeedsAndStrangersAreRefused) {
  const DtreeShape shape(3, options(2));
  EXPECT_EQ(refusal([&] {
              (void)dtree_shares(shape, 0, std::vector<double>{1.0, 1.0, -1.0});
            }),
            "dtree shares: the speed of rank 2 must be finite and not negative, got -1");
  EXPECT_EQ(refusal([&] { (void)dtree_shares(shape, 5, std::vector<double>{}); }),
            "dtree shares: rank 5 is not in the tree");
}

// ---------------------------------------------------------------- grants

std::vector<DtreeChildShare> quarters() { return {{1, 0.25}, {2, 0.25}, {3, 0.25}, {4, 0.25}}; }

TEST(DtreeGrantor, FirstGrantsSplitTheStartingPoolWhateverTheOrder) {
  DtreeGrantor g({0, 10000}, quarters());
  EXPECT_EQ(g.grant(3, 1), (IndexRange{0, 1000}));
  EXPECT_EQ(g.grant(1, 1), (IndexRange{1000, 2000}));
  EXPECT_EQ(g.grant(4, 1), (IndexRange{2000, 3000}));
  EXPECT_EQ(g.grant(2, 1), (IndexRange{3000, 4000}));
  EXPECT_EQ(g.remaining(), 6000);
  // Later grants: rest x remaining x share.
  EXPECT_EQ(g.grant(2, 1), (IndexRange{4000, 4600}));
  EXPECT_EQ(g.remaining(), 5400);
}

TEST(DtreeGrantor, LaterGrantsShrinkGeometricallyAsThePoolDrains) {
  DtreeGrantor g({0, 1000000}, quarters());
  for (int c = 1; c <= 4; ++c) (void)g.grant(c, 1);
  std::vector<std::int64_t> sizes;
  std::int64_t next = 400000;
  for (int i = 0; i < 40; ++i) {
    const auto r = g.grant(1 + i % 4, 1);
    EXPECT_EQ(r.begin, next);  // cut from the front, ascending
    next = r.end;
    sizes.push_back(r.size());
  }
  for (std::size_t i = 1; i < sizes.size(); ++i) {
    // Each grant is rest x share = 0.1 of what remained: the next is 0.9 of the previous.
    EXPECT_NEAR(static_cast<double>(sizes[i]), 0.9 * static_cast<double>(sizes[i - 1]), 1.0)
        << "grant " << i;
  }
  EXPECT_EQ(sizes.front(), 60000);
}

TEST(DtreeGrantor, TheMinimumAskIsHonouredAndTheRemainderBoundsIt) {
  DtreeGrantor g({0, 100}, quarters());
  EXPECT_EQ(g.grant(1, 30).size(), 30);  // first grant would be 10
  EXPECT_EQ(g.grant(2, 0).size(), 10);
  EXPECT_EQ(g.remaining(), 60);
  EXPECT_EQ(g.grant(1, 0).size(), 6);  // 0.4 x 60 x 0.25
  EXPECT_EQ(g.grant(1, 50), (IndexRange{46, 96}));
  EXPECT_EQ(g.grant(1, 0).size(), 1);  // 0.4 x 4 x 0.25 rounds to 0: one still goes
  EXPECT_EQ(g.grant(1, 1000), (IndexRange{97, 100}));
  EXPECT_EQ(g.remaining(), 0);
  EXPECT_TRUE(g.grant(3, 5).empty());
  EXPECT_TRUE(g.take_own(5).empty());
}

TEST(DtreeGrantor, ALeafTakesEverythingForItself) {
  DtreeGrantor leaf({10, 50}, {});
  EXPECT_TRUE(leaf.leaf());
  EXPECT_EQ(leaf.take_own(leaf.remaining()), (IndexRange{10, 50}));
  EXPECT_EQ(leaf.remaining(), 0);
}

TEST(DtreeGrantor, ARangeGivenBackIsMergedAndGoesOutFirst) {
  DtreeGrantor g({0, 100}, quarters());
  const auto a = g.grant(1, 1);  // [0, 10)
  const auto b = g.grant(2, 1);  // [10, 20)
  EXPECT_EQ(g.remaining(), 80);
  g.give_back({a.begin + 4, a.end});  // child 1 ran four and left
  EXPECT_EQ(g.remaining(), 86);
  EXPECT_EQ(g.pool().size(), 2U);
  g.give_back(b);  // touches both neighbours: one range again
  ASSERT_EQ(g.pool().size(), 1U);
  EXPECT_EQ(g.pool()[0], (IndexRange{4, 100}));
  EXPECT_EQ(g.take_own(3), (IndexRange{4, 7}));
  EXPECT_EQ(refusal([&] {
              g.give_back({50, 60});
            }),
            "dtree grantor: the range given back [50, 60) overlaps the pool");
  EXPECT_EQ(refusal([&] {
              g.refill({5, 8});
            }),
            "dtree grantor: the refill [5, 8) overlaps the pool");
  g.refill({200, 210});
  EXPECT_EQ(g.pool().size(), 2U);
  EXPECT_EQ(g.remaining(), 93 + 10);
}

TEST(DtreeGrantor, AGrantNeverSpansAGap) {
  DtreeGrantor g({0, 10}, {{1, 1.0}});
  g.refill({20, 100});
  EXPECT_EQ(g.grant(1, 50), (IndexRange{0, 10}));
  EXPECT_EQ(g.grant(1, 50), (IndexRange{20, 70}));
}

TEST(DtreeGrantor, AnEmptyStartTakesItsFirstRefillAsTheStartingPool) {
  DtreeGrantor g({}, quarters());
  EXPECT_TRUE(g.grant(1, 1).empty());
  g.refill({1000, 2000});
  EXPECT_EQ(g.grant(2, 1), (IndexRange{1000, 1100}));  // 0.4 x 1000 x 0.25
}

TEST(DtreeGrantor, AJoinerGetsWhatASiblingWouldGetNow) {
  DtreeGrantor g({0, 1000}, {{1, 0.5}, {2, 0.5}});
  (void)g.grant(1, 1);  // 200
  g.set_children({{1, 1.0 / 3}, {2, 1.0 / 3}, {5, 1.0 / 3}});
  EXPECT_EQ(g.grant(5, 1).size(), 106);  // 0.4 x 800 / 3, not a first grant
  EXPECT_EQ(g.grant(2, 1).size(), 133);  // rank 2 still gets its first: 0.4 x 1000 / 3
  EXPECT_EQ(refusal([&] { (void)g.grant(9, 1); }),
            "dtree grantor: rank 9 is not a child of this parent");
  EXPECT_EQ(refusal([&] { (void)g.grant(1, -1); }),
            "dtree grantor: rank 1 asks for a negative count, -1");
  EXPECT_EQ(refusal([&] { (void)g.take_own(-3); }),
            "dtree grantor: the parent takes a negative count, -3");
  EXPECT_EQ(refusal([&] {
              g.set_children({{1, 0.5}, {1, 0.5}});
            }),
            "dtree grantor: rank 1 is listed twice");
  EXPECT_EQ(refusal([&] {
              g.set_children({{1, -0.5}});
            }),
            "dtree grantor: the share of rank 1 must be finite and not negative, got -0.5");
}

// ---------------------------------------------------------------- a pull loop

// Ranks pull work down the tree in rounds: a rank with nothing to run takes from its own
// pool (a leaf all of it, a parent `ask` indices, keeping the rest for its children) and,
// when that is empty, asks its parent, which first asks its own parent when its pool is
// empty. Each round a rank runs `speed` indices. Joins and leaves happen at given rounds; a
// leaver hands what it had not started back to its parent.
class PullLoop {
 public:
  PullLoop(int ranks, const DtreeOptions& o, std::int64_t total)
      : options_(o), shape_(ranks, o), runs_(static_cast<std::size_t>(total), 0) {
    for (int r = 0; r < ranks; ++r) {
      grantors_.emplace(r, DtreeGrantor(r == 0 ? IndexRange{0, total} : IndexRange{},
                                        dtree_shares(shape_, r, speeds()).children, o));
      running_.emplace(r, IndexRange{});
    }
  }

  void join(int rank) {
    shape_.join(rank);
    add(rank);
    reshare();
  }

  void leave(int rank) {
    const auto out = shape_.leave(rank);
    auto& to = grantors_.at(out.returns_to);
    to.give_back(running_.at(rank));
    const std::vector<IndexRange> pool(grantors_.at(rank).pool().begin(),
                                       grantors_.at(rank).pool().end());
    for (const auto& r : pool) to.give_back(r);
    grantors_.erase(rank);
    running_.erase(rank);
    reshare();
  }

  // One round; false when no rank ran anything.
  bool round() {
    bool ran = false;
    for (auto& [rank, range] : running_) {
      if (range.empty()) range = own(rank);
      const std::int64_t n = std::min(range.size(), speed(rank));
      for (std::int64_t i = range.begin; i < range.begin + n; ++i) {
        ++runs_[static_cast<std::size_t>(i)];
      }
      range.begin += n;
      ran = ran || n > 0;
    }
    return ran;
  }

  [[nodiscard]] const std::vector<int>& runs() const { return runs_; }
  [[nodiscard]] const DtreeShape& shape() const { return shape_; }
  [[nodiscard]] int grants() const { return grants_; }

 private:
  static constexpr std::int64_t ask = 3;

  static std::int64_t speed(int rank) { return 1 + rank % 3; }

  void add(int rank) {
    grantors_.emplace(rank, DtreeGrantor({}, {}, options_));
    running_.emplace(rank, IndexRange{});
  }

  // Ranks below 64 measured at their speed; higher numbers not yet (they count as the mean).
  static std::vector<double> speeds() {
    std::vector<double> out;
    for (int r = 0; r < 64; ++r) out.push_back(static_cast<double>(speed(r)));
    return out;
  }

  void reshare() {
    const auto s = speeds();
    for (auto& [rank, g] : grantors_) g.set_children(dtree_shares(shape_, rank, s).children);
  }

  IndexRange own(int rank) {
    auto& g = grantors_.at(rank);
    if (g.remaining() == 0) g.refill(pull(rank));
    return g.take_own(g.leaf() ? g.remaining() : ask);
  }

  // What `child` gets from its parent, which pulls from its own parent when empty.
  IndexRange pull(int child) {
    const int p = shape_.parent(child);
    if (p < 0) return {};
    auto& g = grantors_.at(p);
    if (g.remaining() == 0) g.refill(pull(p));
    const auto got = g.grant(child, ask);
    if (!got.empty()) ++grants_;
    return got;
  }

  DtreeOptions options_;
  DtreeShape shape_;
  std::map<int, DtreeGrantor> grantors_;
  std::map<int, IndexRange> running_;
  std::vector<int> runs_;
  int grants_ = 0;
};

void expect_each_once(const std::vector<int>& runs) {
  int wrong = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i] != 1 && ++wrong <= 5)
      ADD_FAILURE() << "index " << i << " ran " << runs[i] << " times";
  }
  EXPECT_EQ(wrong, 0);
}

int run_out(PullLoop& loop, int max_rounds = 1000000) {
  int rounds = 0;
  while (loop.round() && ++rounds < max_rounds) {
  }
  return rounds;
}

TEST(DtreePullLoop, OneRankRunsTheWholeBag) {
  PullLoop loop(1, DtreeOptions{}, 1000);
  run_out(loop);
  expect_each_once(loop.runs());
}

TEST(DtreePullLoop, EveryIndexRunsExactlyOnceOnTwoAndThreeLevels) {
  for (const auto& [ranks, fan_out] :
       std::vector<std::pair<int, int>>{{5, 2}, {17, 16}, {100, 16}, {60, 4}}) {
    PullLoop loop(ranks, options(fan_out), 200000);
    run_out(loop);
    expect_each_once(loop.runs());
    EXPECT_GT(loop.grants(), ranks - 1) << ranks << " ranks";
  }
}

TEST(DtreePullLoop, LeaversGiveTheirRangesBackAndJoinersTakePart) {
  const auto o = options(4);
  PullLoop loop(40, o, 300000);
  for (int i = 0; i < 50; ++i) loop.round();
  loop.leave(1);   // a parent: a leaf of its subtree takes its place
  loop.leave(39);  // a leaf
  loop.join(40);
  loop.join(41);
  for (int i = 0; i < 50; ++i) loop.round();
  const int promoted_parent = loop.shape().children(0)[0];
  loop.leave(promoted_parent);
  loop.leave(40);  // a joiner leaves again
  expect_tree(loop.shape(), o, 42);
  run_out(loop);
  expect_each_once(loop.runs());
}

}  // namespace
}  // namespace bellows::runtime
