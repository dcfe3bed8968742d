#pragma once
// Where a rank's workers get the indices they run, one class per BagDistribution: the
// messages each sends and how it reacts to the messages it gets. No MPI and no threads here:
// the driver (task_bag.cpp) calls these under its lock and carries the messages out.

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "bellows/runtime/dtree_node.hpp"
#include "bellows/runtime/task_bag.hpp"

namespace bellows::runtime::bag {

enum class MessageKind : std::int64_t {
  ask = 1,        ///< Dtree: a child asks its parent for work
  grant,          ///< Dtree: the parent's answer (empty range: nothing more, ever)
  steal_request,  ///< stealing: a thief asks a victim
  steal_reply,    ///< stealing: the victim's answer (empty range: nothing to spare)
  done,           ///< stealing: tasks a rank finished since its last report, to rank 0
  finish,         ///< stealing: rank 0 to every rank: every task has run
  returned,       ///< Dtree: a leaving child gives back one unstarted range
  left,           ///< Dtree: a leaving child has given back all it held and asks no more
};

/// A message between the ranks of a bag: to (outgoing) or from (incoming) `peer`.
struct Message {
  MessageKind kind = MessageKind::ask;
  int peer = -1;
  IndexRange range;
  std::int64_t count = 0;
};

/// The fixed wire form: kind, begin, end, count.
using WireMessage = std::array<std::int64_t, 4>;
[[nodiscard]] WireMessage encode(const Message& message) noexcept;
/// Throws std::runtime_error naming the sender on an unknown kind or a reversed range.
[[nodiscard]] Message decode(const WireMessage& wire, int from);

struct SourceCounters {
  std::uint64_t requests_sent = 0;
  std::uint64_t requests_served = 0;
  std::uint64_t tasks_given = 0;
};

class WorkSource {
 public:
  virtual ~WorkSource() = default;
  /// Work for one worker, or empty (`out` may then ask someone for more).
  virtual IndexRange take(std::vector<Message>& out) = 0;
  /// Nothing more will come to this rank's workers.
  [[nodiscard]] virtual bool dry() const = 0;
  virtual void on_message(const Message& in, std::vector<Message>& out) = 0;
  /// Every worker waits or has exited; `tasks_done` is what they ran so far. `now` in
  /// seconds from any fixed start.
  virtual void on_idle(double now, std::uint64_t tasks_done, std::vector<Message>& out) = 0;
  /// This rank sends no more requests and expects no more answers.
  [[nodiscard]] virtual bool finished() const = 0;
  /// This rank may leave the run now (a Dtree leaf that holds or may still get work); false
  /// for the other distributions, whose ranks leave between runs.
  [[nodiscard]] virtual bool can_leave() const { return false; }
  /// No request of this rank is unanswered.
  [[nodiscard]] virtual bool asking() const { return false; }
  /// Leaves the run: `out` gives what this rank holds unstarted back to its parent
  /// (`returned`, then `left`). Call with every worker stopped and no request out. Returns the
  /// indices given back.
  virtual std::int64_t leave(std::vector<Message>& out) {
    (void)out;
    return 0;
  }
  [[nodiscard]] const SourceCounters& counters() const noexcept { return counters_; }

 protected:
  SourceCounters counters_;
};

/// Dtree: a DtreeNode's steps as messages.
/// The root's pool is `tasks` (the whole bag, or what a re-run after a loss runs).
[[nodiscard]] std::unique_ptr<WorkSource> dtree_source(const DtreeShape& shape, int rank,
                                                       const std::vector<double>& speeds,
                                                       std::span<const IndexRange> tasks,
                                                       const BagOptions& options,
                                                       std::int64_t min_ask);
/// Static blocks: this rank's block, handed to its workers min_ask at a time.
[[nodiscard]] std::unique_ptr<WorkSource> static_source(int rank, int size, std::int64_t tasks,
                                                        std::int64_t min_ask);
/// Random-victim stealing over static blocks; rank 0 counts finished tasks and tells every
/// rank when all have run.
[[nodiscard]] std::unique_ptr<WorkSource> steal_source(int rank, int size, std::int64_t tasks,
                                                       std::int64_t min_ask, std::uint64_t seed);

}  // namespace bellows::runtime::bag
