#pragma once
// One rank's part in a Dtree pull (dtree.hpp): its pool, the children waiting for a grant,
// whether its own parent has run dry, and when it is done. Events in (a child asks, the parent
// answers, a child leaves, the rank's workers want work), the messages to send out.
//
// The rules are those of Dtree's public code (gasp, src/dtree.c) as dtree.hpp states them: a
// rank whose pool is empty asks its parent once (one request out at a time) and queues the
// children that ask meanwhile; an empty answer means nothing more will ever come, and is passed
// on to every child that asks; the root runs dry when its pool does. A parent takes for its own
// workers what a child of its own share would get now (`rest` x what it holds x its share, at
// least the minimum ask); a leaf splits what it holds among its workers.
//
// Nothing here sends a message, reads a clock or takes a lock: the runtime's bag
// (task_bag.hpp) carries the steps out over MPI, and a test can drive a whole tree in one
// thread. An instance belongs to one thread.

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "bellows/runtime/dtree.hpp"

namespace bellows::runtime {

/// A grant to send to a child: a range, or an empty range meaning "nothing more, ever".
struct DtreeGrantMessage {
  int to = -1;
  IndexRange range;
  friend bool operator==(const DtreeGrantMessage&, const DtreeGrantMessage&) = default;
};

/// What an event asks the caller to send.
struct DtreeSteps {
  std::vector<DtreeGrantMessage> grants;
  /// Ask the parent for work (never set while a request is out, or on the root).
  bool ask_parent = false;
};

class DtreeNode {
 public:
  /// Rank `rank` of `shape`, with the shares dtree_shares gives from `speeds` (tasks per
  /// second per rank; 0: not measured). The root starts with `tasks` in its pool, the others
  /// empty. `min_ask` is what a rank asks for at least (Dtree's code: 1.5 x its workers);
  /// `workers` how many of this rank's own workers share what a leaf holds. Throws
  /// std::invalid_argument when `rank` is not in the tree, min_ask or workers is below 1, or
  /// the options or speeds are invalid.
  DtreeNode(const DtreeShape& shape, int rank, std::span<const double> speeds, IndexRange tasks,
            const DtreeOptions& options, std::int64_t min_ask, int workers);
  /// The same with the root's pool made of several disjoint ranges (a bag's re-run after a
  /// lost rank); also throws std::invalid_argument when two of them overlap.
  [[nodiscard]] static DtreeNode over_ranges(const DtreeShape& shape, int rank,
                                             std::span<const double> speeds,
                                             std::span<const IndexRange> tasks,
                                             const DtreeOptions& options, std::int64_t min_ask,
                                             int workers);

  /// A child asks for work. Throws std::invalid_argument when `child` is not a child here,
  /// has already been told that nothing is left, or has already left.
  DtreeSteps on_request(int child);
  /// The parent answered the request out: a range, or empty when it has run dry.
  /// Throws std::logic_error when no request is out.
  DtreeSteps on_grant(IndexRange range);
  /// A child leaves: `unstarted` is what it held and had not started; it asks no more.
  DtreeSteps on_child_left(int child, std::span<const IndexRange> unstarted);
  /// Work for one of this rank's workers. Empty when the pool is: then `steps` asks the
  /// parent (unless a request is out or the parent ran dry), and the worker waits for
  /// on_grant unless dry(). A rank whose speed is measured (speeds[rank] > 0) also asks when
  /// this take empties its pool, so that the answer comes while the range runs; an unmeasured
  /// one waits until it has run out, since its grants are sized for a speed that is a guess
  /// and a slow rank holding two of them would finish last.
  [[nodiscard]] IndexRange take_own(DtreeSteps& steps);
  /// This rank leaves: what it held and had not started, for its parent (on_child_left).
  /// Its pool is empty afterwards. Call it with no request out (asking() false), so that no
  /// grant is under way to a rank that is gone. Throws std::logic_error otherwise.
  [[nodiscard]] std::vector<IndexRange> leave();

  /// Nothing more will come to this rank: its parent (or, at the root, its pool) ran dry
  /// and its pool is empty.
  [[nodiscard]] bool dry() const noexcept { return exhausted_ && grantor_.remaining() == 0; }
  /// Dry, no request out, and every child told that nothing is left (or gone): this rank
  /// will neither send nor receive another Dtree message.
  [[nodiscard]] bool finished() const noexcept;
  /// A request to the parent is out (a rank waits for its answer before it leaves).
  [[nodiscard]] bool asking() const noexcept { return asking_; }
  [[nodiscard]] int parent() const noexcept { return parent_; }
  [[nodiscard]] std::span<const int> children() const noexcept { return children_; }
  [[nodiscard]] std::int64_t min_ask() const noexcept { return min_ask_; }
  [[nodiscard]] const DtreeGrantor& grantor() const noexcept { return grantor_; }

 private:
  DtreeNode(DtreeShares shares, const DtreeShape& shape, int rank,
            std::span<const IndexRange> tasks, const DtreeOptions& options, std::int64_t min_ask,
            int workers);
  void serve_waiting(DtreeSteps& steps);
  void need_work(DtreeSteps& steps);
  void run_dry(DtreeSteps& steps);
  [[nodiscard]] bool is_child(int rank) const noexcept;

  int rank_;
  int parent_;
  std::vector<int> children_;
  std::vector<int> done_;  ///< children told that nothing is left, or gone
  std::deque<int> waiting_;
  double own_share_;
  DtreeOptions options_;
  std::int64_t min_ask_;
  int workers_;
  DtreeGrantor grantor_;
  bool exhausted_ = false;
  bool asking_ = false;
  bool ask_early_ = false;  ///< this rank's speed is measured: ask before running out
};

}  // namespace bellows::runtime
