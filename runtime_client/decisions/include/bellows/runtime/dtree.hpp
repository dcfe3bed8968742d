#pragma once
// Dtree: distributing a bag of independent tasks (a task class without dependencies) down a
// shallow tree of ranks, each parent handing its children contiguous index ranges that
// shrink as its pool drains.
//
// After Pamnany, Misra, Vasimuddin, Liu, Chow & Aluru, "Dtree: Dynamic Task Scheduling at
// Petascale", ISC 2015 (LNCS 9137), and the public implementation of that paper (gasp,
// src/dtree.c): a tree of height 2 or 3 whose parents are ranks of the job; a child's share
// is its subtree's summed speed over its parent's subtree; a parent hands a child
// `first` x (its pool) x share the first time the child asks, and afterwards
// `rest` x (what it still holds) x share, at least what the child asks for, so the chunks
// shrink geometrically as the pool drains and the last ones are small enough to even out
// the finish; work is a contiguous range of task indices pulled down the tree, with no
// stealing between siblings. (The text of the paper at hand is its abstract; the rules above
// are those of its public code.)
//
// What Bellows adds: elasticity. A rank that joins gets a place in the tree and a share; a
// rank that leaves hands its unstarted ranges back to its parent (DtreeGrantor::give_back),
// and a leaf of its subtree takes its place, so no rank ever serves more than the fan-out.
//
// Nothing here sends a message, reads a clock or takes a lock: a rank's runtime calls these
// with values and carries the choices out; the simulator can call the same functions.
// Thread safety: the free functions are safe from any thread; an instance of DtreeShape or
// DtreeGrantor belongs to one thread.

#include <cstdint>
#include <span>
#include <vector>

namespace bellows::runtime {

/// The parameters of a Dtree. validate() refuses a value out of range with a text naming it.
struct DtreeOptions {
  /// Children per parent at most (a parent serves at most this many requesters besides
  /// itself). Dtree's code takes it from the user; 16 keeps a tree of height 3 up to 4,369
  /// ranks.
  int fan_out = 16;
  /// The longest root-to-leaf path, in edges: 1 is a star, Dtree's trees are 2 or 3.
  int max_height = 3;
  /// The fraction of its pool a parent splits among its children at their first ask.
  double first = 0.4;
  /// The fraction of what a parent still holds that it splits among its children later.
  double rest = 0.4;

  /// Throws std::invalid_argument ("dtree: first must be in (0, 1], got 1.5") when fan_out
  /// or max_height is below 1, or first or rest is not in (0, 1].
  void validate() const;
};

/// A contiguous range of task indices [begin, end).
struct IndexRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;

  [[nodiscard]] std::int64_t size() const noexcept { return end > begin ? end - begin : 0; }
  [[nodiscard]] bool empty() const noexcept { return end <= begin; }
  friend bool operator==(const IndexRange&, const IndexRange&) = default;
};

/// What a leave changed (DtreeShape::leave).
struct DtreeLeave {
  /// The leaver's parent: where its unstarted ranges go back (DtreeGrantor::give_back).
  int returns_to = -1;
  /// The leaf of the leaver's subtree that took the leaver's place (its parent and its
  /// other children), or -1 when the leaver was a leaf. It keeps what it held, which becomes
  /// its pool as a parent.
  int promoted = -1;
};

/// The tree: each rank's parent and children. Every rank that builds it from the same
/// (ranks, options) and applies the same joins and leaves in the same order holds the same
/// tree. Ranks are the caller's numbers (the job's rank numbers); rank 0 is the root and
/// never leaves.
///
/// The shape at start. Rank 0 is the root; the other ranks are split as evenly as possible
/// into min(fan_out, ranks - 1) contiguous blocks, the first rank of each block its child
/// and the rest of the block that child's subtree, split the same way. So every subtree is a
/// contiguous range of ranks (ranks numbered node by node keep a parent's leaves near it),
/// siblings' subtrees differ by at most one rank, and the height is the least that fan_out
/// allows. (Dtree's code instead fills each parent up to fan_out, which gives fewer, busier
/// parents; an even split spreads the serving.)
class DtreeShape {
 public:
  /// Throws std::invalid_argument when ranks < 1, the options are invalid, or ranks do not
  /// fit a tree of the fan-out and height ("dtree: 100 ranks do not fit a tree of fan-out 2
  /// and height at most 3 (at most 15 ranks)").
  DtreeShape(int ranks, const DtreeOptions& options);

  /// The tree whose ranks 0..parents.size()-1 have the parents `parents` (-1 for rank 0, the
  /// root): what parents() of another rank's tree gives, so that ranks that did not see its
  /// joins and leaves (a rank added later) hold the same tree. Throws std::invalid_argument
  /// naming the rank when the list is empty, rank 0 has a parent, a parent is out of range or
  /// the rank itself, the parents form a cycle, a rank gets more than fan_out children, or a
  /// path is longer than max_height ("dtree: rank 5 is 4 edges below the root, more than the
  /// height 3").
  static DtreeShape from_parents(std::span<const int> parents, const DtreeOptions& options);

  /// Each rank's parent, for ranks 0..n-1 where n - 1 is the highest member (-1 for the root
  /// and for numbers not in the tree).
  [[nodiscard]] std::vector<int> parents() const;

  /// Whether `rank` is in the tree now (joined and not left).
  [[nodiscard]] bool member(int rank) const noexcept;
  /// The ranks in the tree now.
  [[nodiscard]] int size() const noexcept { return size_; }
  /// `rank`'s parent; -1 for the root or a rank not in the tree.
  [[nodiscard]] int parent(int rank) const noexcept;
  /// `rank`'s children in ascending order (none for a leaf or a rank not in the tree).
  [[nodiscard]] std::span<const int> children(int rank) const noexcept;
  /// Edges from the root to `rank` (0 for the root); -1 for a rank not in the tree.
  [[nodiscard]] int depth(int rank) const noexcept;
  /// The longest root-to-leaf path, in edges.
  [[nodiscard]] int height() const noexcept;
  /// `rank` and every rank below it, in ascending order.
  [[nodiscard]] std::vector<int> subtree(int rank) const;

  /// Adds `rank` (a new rank of the job: any number not in the tree) and returns its parent.
  /// The rule: the shallowest rank that has fewer than fan_out children and lies above
  /// max_height; among those the one with the fewest children, then the lowest number.
  /// Nothing already in the tree moves, so the ranges the others hold and their parents'
  /// pools stay valid (recomputing the shape for the new size would re-parent ranks in the
  /// middle of a distribution), the fan-out is never exceeded, and the height grows only
  /// when every shallower place is full. Throws std::invalid_argument when `rank` is
  /// negative or already in the tree, or when the tree is full (every rank above max_height
  /// has fan_out children).
  int join(int rank);

  /// Removes `rank`. Its unstarted ranges go back to its parent (DtreeLeave::returns_to).
  /// When it had children, the deepest leaf of its subtree (ties: the highest number) takes
  /// its place: the leaver's parent and the leaver's other children become its own. No rank
  /// gains a child, so the fan-out holds, and no path gets longer, so the height holds.
  /// Throws std::invalid_argument when `rank` is the root or not in the tree.
  DtreeLeave leave(int rank);

 private:
  void attach(int child, int parent);
  void detach(int child);

  int fan_out_;
  int max_height_;
  int size_ = 0;
  std::vector<int> parent_;                 // per rank number; -1: root or not a member
  std::vector<std::vector<int>> children_;  // per rank number, ascending
  std::vector<bool> member_;
};

/// A child's share of its parent's work.
struct DtreeChildShare {
  int rank = -1;
  double share = 0.0;  ///< the child's subtree speed over the parent's subtree speed
  friend bool operator==(const DtreeChildShare&, const DtreeChildShare&) = default;
};

/// The shares at one parent: its children's and its own (all of them sum to 1).
struct DtreeShares {
  double own = 1.0;  ///< the parent's own speed over its subtree's
  std::vector<DtreeChildShare> children;
};

/// The shares at `parent` from each rank's speed, `speeds[rank]`, in any unit proportional to
/// tasks per second (the cost model's measured rate). 0, or a rank past the end of `speeds`,
/// means not measured yet: such a rank counts as the mean of the measured members of the
/// tree, or 1 when none is measured. Throws std::invalid_argument naming the rank when a
/// speed is negative or not finite, or when `parent` is not in the tree.
[[nodiscard]] DtreeShares dtree_shares(const DtreeShape& shape, int parent,
                                       std::span<const double> speeds);

/// A parent's pool and the grants it makes from it: the sizes of Dtree, cut as contiguous
/// ranges. The pool is a set of disjoint index ranges (one at start; more when a range given
/// back does not touch the rest).
///
/// Every grant, and the parent's own take, is cut from the front of the lowest range of the
/// pool, so the indices go out in ascending order: an application that numbers its tasks from
/// the most expensive down has its large tasks in the large early grants and its cheap ones in
/// the small late grants, which is what evens out the finish (the order guided self-scheduling
/// relies on). A grant never spans a gap: when the lowest range is shorter than the size, the
/// grant is that range and the child asks again.
///
/// A leaf's grantor has no children: it only takes its own work (take_own), all of it.
class DtreeGrantor {
 public:
  /// A parent holding `pool`, with `children` each to get a first grant at its first ask.
  /// The starting pool the first grants split is `pool`, or, when that is empty (a parent
  /// below the root, whose work comes down from its own parent), the first refill.
  /// Throws std::invalid_argument when the options are invalid, a share is negative or not
  /// finite, or a child is listed twice.
  DtreeGrantor(IndexRange pool, std::vector<DtreeChildShare> children,
               const DtreeOptions& options = {});
  /// The same with a pool of several ranges (what a bag re-runs after a lost rank: the
  /// indices no survivor finished); the starting pool is their sum. Also throws
  /// std::invalid_argument when two of the ranges overlap.
  [[nodiscard]] static DtreeGrantor over_ranges(std::span<const IndexRange> pool,
                                                std::vector<DtreeChildShare> children,
                                                const DtreeOptions& options = {});

  /// The grant for `child`, asking for at least `min_ask` indices (Dtree's code asks for
  /// about 1.5 x the child's threads): at its first ask `first` x the starting pool x its
  /// share, later `rest` x remaining() x its share; never less than min_ask (nor 1), never
  /// more than the lowest range of the pool. Empty when the pool is. Throws
  /// std::invalid_argument when `child` is not a child or `min_ask` is negative.
  [[nodiscard]] IndexRange grant(int child, std::int64_t min_ask);
  /// Up to `count` indices for the parent's own work. Throws std::invalid_argument when
  /// `count` is negative.
  [[nodiscard]] IndexRange take_own(std::int64_t count);
  /// Takes back a range that was handed out and not started (a leaving child's). Throws
  /// std::invalid_argument when it overlaps the pool.
  void give_back(IndexRange range);
  /// Adds a grant from this rank's own parent to the pool. Throws std::invalid_argument when
  /// it overlaps the pool.
  void refill(IndexRange range);
  /// Replaces the children and their shares (a join, a leave, new speeds). A child already
  /// known keeps its state; a new one (a rank that joined, or one that a leave re-attached
  /// here) is past its first grant: the pool it would have split with its siblings at start
  /// is gone, so it gets what a sibling would get now.
  void set_children(std::vector<DtreeChildShare> children);

  /// Indices the pool holds.
  [[nodiscard]] std::int64_t remaining() const noexcept { return remaining_; }
  /// The pool's ranges, ascending.
  [[nodiscard]] std::span<const IndexRange> pool() const noexcept { return pool_; }
  [[nodiscard]] bool leaf() const noexcept { return children_.empty(); }

 private:
  struct Child {
    int rank = -1;
    double share = 0.0;
    bool first_pending = true;
  };

  IndexRange cut(std::int64_t count);
  void insert(IndexRange range, const char* what);
  static std::vector<Child> checked(std::vector<DtreeChildShare> children);

  DtreeOptions options_;
  std::int64_t start_size_;
  std::int64_t remaining_ = 0;
  std::vector<IndexRange> pool_;
  std::vector<Child> children_;
};

}  // namespace bellows::runtime
