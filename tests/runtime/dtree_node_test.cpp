// DtreeNode (dtree_node.hpp): one rank's pull rules, and a whole tree of nodes driven in one
// thread with messages delivered in a random order, every index run exactly once.

#include "bellows/runtime/dtree_node.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
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

br::DtreeOptions options(int fan_out) {
  br::DtreeOptions o;
  o.fan_out = fan_out;
  return o;
}

// A tree of DtreeNodes exchanging messages through one queue, delivered in a random order;
// each rank's single worker takes work whenever it has none. Counts how often each index ran.
struct PullTree {
  struct Message {
    enum Kind { request, grant, left } kind;
    int from;
    int to;
    br::IndexRange range;
    std::vector<br::IndexRange> unstarted;
  };

  PullTree(int ranks, std::int64_t tasks, int fan_out, const std::vector<double>& speeds = {})
      : shape(ranks, options(fan_out)), runs(static_cast<std::size_t>(tasks), 0) {
    for (int r = 0; r < ranks; ++r) {
      nodes.emplace_back(shape, r, speeds, br::IndexRange{0, tasks}, options(fan_out), 2, 1);
    }
  }

  void carry_out(int from, const br::DtreeSteps& steps) {
    for (const auto& g : steps.grants) queue.push_back({Message::grant, from, g.to, g.range, {}});
    if (steps.ask_parent) {
      queue.push_back({Message::request, from, nodes[static_cast<std::size_t>(from)].parent(), {}, {}});
      ++requests;
    }
  }

  // One step of rank r's worker: takes work and runs it, or asks.
  bool work(int r) {
    auto& node = nodes[static_cast<std::size_t>(r)];
    if (gone[r] || node.dry()) return false;
    br::DtreeSteps steps;
    const auto range = node.take_own(steps);
    carry_out(r, steps);
    for (auto i = range.begin; i < range.end; ++i) ++runs[static_cast<std::size_t>(i)];
    ++ran_by[r];
    return !range.empty();
  }

  void deliver(Message m) {
    auto& node = nodes[static_cast<std::size_t>(m.to)];
    if (m.kind == Message::request) carry_out(m.to, node.on_request(m.from));
    if (m.kind == Message::grant) carry_out(m.to, node.on_grant(m.range));
    if (m.kind == Message::left) carry_out(m.to, node.on_child_left(m.from, m.unstarted));
  }

  void run(unsigned seed, int leaver = -1, int leave_after_steps = 0) {
    std::mt19937 random(seed);
    int steps = 0;
    while (true) {
      ++steps;
      if (leaver >= 0 && steps >= leave_after_steps && !gone[leaver] &&
          !nodes[static_cast<std::size_t>(leaver)].asking()) {
        auto& node = nodes[static_cast<std::size_t>(leaver)];
        ASSERT_TRUE(node.children().empty()) << "only a leaf leaves in this test";
        // A leaf with a request out waits for its answer first, as the runtime's bag does.
        queue.push_back({Message::left, leaver, node.parent(), {}, node.leave()});
        gone[leaver] = true;
      }
      bool progress = false;
      for (int r = 0; r < shape.size(); ++r) progress = work(r) || progress;
      if (!queue.empty()) {
        std::uniform_int_distribution<std::size_t> pick(0, queue.size() - 1);
        const auto at = queue.begin() + static_cast<std::ptrdiff_t>(pick(random));
        const Message m = *at;
        queue.erase(at);
        if (!gone[m.to]) deliver(m);
        progress = true;
      }
      if (!progress) break;
      ASSERT_LT(steps, 1'000'000) << "the pull does not end";
    }
  }

  br::DtreeShape shape;
  std::vector<br::DtreeNode> nodes;
  std::deque<Message> queue;
  std::vector<int> runs;
  std::map<int, int> ran_by;
  std::map<int, bool> gone;
  int requests = 0;
};

}  // namespace

TEST(DtreeShapeFromParents, RebuildsTheSameTree) {
  br::DtreeShape shape(40, options(4));
  shape.join(40);
  shape.leave(40);
  shape.join(40);
  const auto parents = shape.parents();
  ASSERT_EQ(parents.size(), 41u);
  const auto copy = br::DtreeShape::from_parents(parents, options(4));
  EXPECT_EQ(copy.size(), 41);
  EXPECT_EQ(copy.height(), shape.height());
  for (int r = 0; r < 41; ++r) {
    EXPECT_EQ(copy.parent(r), shape.parent(r)) << "rank " << r;
    EXPECT_TRUE(std::ranges::equal(copy.children(r), shape.children(r))) << "rank " << r;
  }
}

TEST(DtreeShapeFromParents, BadListsAreRefusedNamingTheRank) {
  const auto refuse = [](std::vector<int> parents, int fan_out = 2) {
    return error_of([&] { (void)br::DtreeShape::from_parents(parents, options(fan_out)); });
  };
  EXPECT_EQ(refuse({}), "dtree: a list of parents needs at least rank 0");
  EXPECT_EQ(refuse({1, 0}), "dtree: rank 0 is the root and has no parent, got parent 1");
  EXPECT_EQ(refuse({-1, 5}), "dtree: the parent of rank 1 must be another rank below 2, got 5");
  EXPECT_EQ(refuse({-1, 1}), "dtree: the parent of rank 1 must be another rank below 2, got 1");
  EXPECT_EQ(refuse({-1, 2, 1}), "dtree: rank 1 is on a cycle of parents, not below the root");
  EXPECT_EQ(refuse({-1, 0, 0, 0}), "dtree: rank 0 has 3 children, more than the fan-out 2");
  EXPECT_EQ(refuse({-1, 0, 1, 1, 1}), "dtree: rank 1 has 3 children, more than the fan-out 2");
  EXPECT_EQ(refuse({-1, 0, 1, 2, 3}, 4),
            "dtree: rank 4 is 4 edges below the root, more than the height 3");
}

TEST(DtreeNode, BadArgumentsAreRefused) {
  const br::DtreeShape shape(3, options(2));
  const br::IndexRange all{0, 10};
  EXPECT_EQ(error_of([&] { br::DtreeNode(shape, 3, {}, all, options(2), 1, 1); }),
            "dtree node: rank 3 is not in the tree");
  EXPECT_EQ(error_of([&] { br::DtreeNode(shape, 0, {}, all, options(2), 0, 1); }),
            "dtree node: the minimum ask must be at least 1, got 0");
  EXPECT_EQ(error_of([&] { br::DtreeNode(shape, 0, {}, all, options(2), 1, 0); }),
            "dtree node: workers must be at least 1, got 0");
  br::DtreeNode root(shape, 0, {}, all, options(2), 1, 1);
  EXPECT_EQ(error_of([&] { root.on_request(0); }),
            "dtree node: rank 0 got a request from rank 0, which is not its child");
  EXPECT_EQ(error_of([&] { root.on_grant({0, 1}); }),
            "dtree node: rank 0 got a grant it did not ask for");
}

TEST(DtreeNode, TheRootGrantsFirstFractionsAndRunsDryOnce) {
  // 1 root with 2 equal children: shares 1/3 each, first = 0.4.
  const br::DtreeShape shape(3, options(2));
  br::DtreeNode root(shape, 0, {}, {0, 300}, options(2), 2, 1);
  auto steps = root.on_request(1);
  ASSERT_EQ(steps.grants.size(), 1u);
  EXPECT_EQ(steps.grants[0], (br::DtreeGrantMessage{1, {0, 40}}));
  EXPECT_FALSE(steps.ask_parent);
  // The root's own take: rest x 260 x 1/3 = 34.67, rounded up.
  EXPECT_EQ(root.take_own(steps), (br::IndexRange{40, 75}));
  steps = root.on_request(2);
  EXPECT_EQ(steps.grants[0], (br::DtreeGrantMessage{2, {75, 115}}));
  // Drain the pool: the root's own takes until nothing is left.
  br::DtreeSteps own;
  while (!root.take_own(own).empty()) {
  }
  EXPECT_TRUE(root.dry());
  EXPECT_FALSE(root.finished()) << "its children have not been told";
  steps = root.on_request(1);
  EXPECT_EQ(steps.grants, (std::vector<br::DtreeGrantMessage>{{1, {}}}));
  steps = root.on_request(2);
  EXPECT_EQ(steps.grants, (std::vector<br::DtreeGrantMessage>{{2, {}}}));
  EXPECT_TRUE(root.finished());
  EXPECT_EQ(error_of([&] { root.on_request(2); }),
            "dtree node: rank 0 got a request from rank 2, which was told nothing is left or left");
}

TEST(DtreeNode, AMiddleRankAsksOnceAndServesTheChildrenThatWaited) {
  // 7 ranks, fan-out 2: 0 -> {1, 4}, 1 -> {2, 3}.
  const br::DtreeShape shape(7, options(2));
  br::DtreeNode middle(shape, 1, {}, {}, options(2), 2, 1);
  auto steps = middle.on_request(2);
  EXPECT_TRUE(steps.grants.empty());
  EXPECT_TRUE(steps.ask_parent);
  steps = middle.on_request(3);
  EXPECT_FALSE(steps.ask_parent) << "one request out at a time";
  steps = middle.on_grant({100, 200});
  ASSERT_EQ(steps.grants.size(), 2u);
  EXPECT_EQ(steps.grants[0].to, 2);
  EXPECT_EQ(steps.grants[1].to, 3);
  EXPECT_EQ(steps.grants[0].range.begin, 100);
  EXPECT_EQ(steps.grants[1].range.begin, steps.grants[0].range.end);
  // The parent runs dry: a waiting child hears it, and so does the next that asks.
  br::DtreeSteps own;
  while (!middle.take_own(own).empty()) {
  }
  EXPECT_TRUE(own.ask_parent);
  steps = middle.on_request(2);
  EXPECT_FALSE(steps.ask_parent);
  steps = middle.on_grant({});
  EXPECT_EQ(steps.grants, (std::vector<br::DtreeGrantMessage>{{2, {}}}));
  EXPECT_TRUE(middle.dry());
  steps = middle.on_request(3);
  EXPECT_EQ(steps.grants, (std::vector<br::DtreeGrantMessage>{{3, {}}}));
  EXPECT_TRUE(middle.finished());
}

TEST(DtreeNode, ALeafSplitsWhatItHoldsAmongItsWorkers) {
  const br::DtreeShape shape(2, options(2));
  br::DtreeNode leaf(shape, 1, {}, {}, options(2), 2, 3);
  br::DtreeSteps steps;
  EXPECT_TRUE(leaf.take_own(steps).empty());
  EXPECT_TRUE(steps.ask_parent);
  (void)leaf.on_grant({0, 10});
  EXPECT_EQ(leaf.take_own(steps), (br::IndexRange{0, 4}));
  EXPECT_EQ(leaf.take_own(steps), (br::IndexRange{4, 6}));
}

TEST(DtreeNode, AnUnmeasuredRankAsksOnlyOnceItHasRunOut) {
  const br::DtreeShape shape(2, options(2));
  br::DtreeNode leaf(shape, 1, {}, {}, options(2), 2, 1);
  br::DtreeSteps steps;
  EXPECT_TRUE(leaf.take_own(steps).empty());
  ASSERT_TRUE(steps.ask_parent);
  (void)leaf.on_grant({0, 10});
  br::DtreeSteps next;
  EXPECT_EQ(leaf.take_own(next), (br::IndexRange{0, 10}));
  EXPECT_FALSE(next.ask_parent);
  br::DtreeSteps again;
  EXPECT_TRUE(leaf.take_own(again).empty());
  EXPECT_TRUE(again.ask_parent);
}

TEST(DtreeNode, AMeasuredRankAsksAgainAsSoonAsItHasHandedOutItsLastIndex) {
  const br::DtreeShape shape(2, options(2));
  const std::vector<double> speeds{100.0, 50.0};
  br::DtreeNode leaf(shape, 1, speeds, {}, options(2), 2, 1);
  br::DtreeSteps steps;
  EXPECT_TRUE(leaf.take_own(steps).empty());
  ASSERT_TRUE(steps.ask_parent);
  (void)leaf.on_grant({0, 10});
  br::DtreeSteps next;
  EXPECT_EQ(leaf.take_own(next), (br::IndexRange{0, 10}));
  EXPECT_TRUE(next.ask_parent) << "the answer should come while the range runs";
  br::DtreeSteps again;
  EXPECT_TRUE(leaf.take_own(again).empty());
  EXPECT_FALSE(again.ask_parent) << "one request out at a time";
}

TEST(DtreeNode, ALeaverHandsItsUnstartedRangesToItsParent) {
  const br::DtreeShape shape(3, options(2));
  br::DtreeNode root(shape, 0, {}, {0, 100}, options(2), 2, 1);
  br::DtreeNode leaf(shape, 2, {}, {}, options(2), 2, 1);
  br::DtreeSteps steps;
  EXPECT_TRUE(leaf.take_own(steps).empty());
  ASSERT_TRUE(steps.ask_parent);
  EXPECT_EQ(error_of([&] { (void)leaf.leave(); }),
            "dtree node: rank 2 cannot leave while its request to rank 0 is unanswered");
  const auto granted = root.on_request(2).grants.at(0).range;
  (void)leaf.on_grant(granted);
  const auto unstarted = leaf.leave();
  EXPECT_EQ(unstarted, (std::vector<br::IndexRange>{granted}));
  EXPECT_TRUE(leaf.dry());
  const auto before = root.grantor().remaining();
  (void)root.on_child_left(2, unstarted);
  EXPECT_EQ(root.grantor().remaining(), before + granted.size());
  EXPECT_EQ(root.grantor().pool().front().begin, 0) << "the range given back goes out first";
  EXPECT_EQ(error_of([&] { root.on_child_left(2, {}); }),
            "dtree node: rank 2 cannot leave rank 0: not a child that still asks");
}

TEST(DtreePullTree, EveryIndexRunsExactlyOnceAndEveryRankFinishes) {
  for (const int ranks : {1, 2, 5, 17, 40}) {
    for (const unsigned seed : {1u, 2u, 3u}) {
      PullTree tree(ranks, 5000, 4);
      tree.run(seed);
      EXPECT_TRUE(std::ranges::all_of(tree.runs, [](int n) { return n == 1; }))
          << ranks << " ranks, seed " << seed;
      for (int r = 0; r < ranks; ++r) {
        EXPECT_TRUE(tree.nodes[static_cast<std::size_t>(r)].finished()) << "rank " << r;
      }
      EXPECT_TRUE(tree.queue.empty());
    }
  }
}

TEST(DtreePullTree, MeasuredRanksThatAskEarlyRunEveryIndexOnce) {
  for (const unsigned seed : {7u, 8u}) {
    std::vector<double> speeds(17);
    for (std::size_t r = 0; r < speeds.size(); ++r) speeds[r] = 1.0 + static_cast<double>(r % 3);
    PullTree tree(17, 5000, 4, speeds);
    tree.run(seed);
    EXPECT_TRUE(std::ranges::all_of(tree.runs, [](int n) { return n == 1; })) << "seed " << seed;
    for (int r = 0; r < 17; ++r) EXPECT_TRUE(tree.nodes[static_cast<std::size_t>(r)].finished());
  }
}

TEST(DtreePullTree, ALeafThatLeavesMidwayLosesNothing) {
  for (const unsigned seed : {4u, 5u, 6u}) {
    PullTree tree(9, 4000, 2);
    const int leaf = 8;
    ASSERT_TRUE(tree.shape.children(leaf).empty());
    tree.run(seed, leaf, 30);
    EXPECT_TRUE(std::ranges::all_of(tree.runs, [](int n) { return n == 1; })) << "seed " << seed;
    EXPECT_TRUE(tree.gone[leaf]);
  }
}
