#include "bag_sources.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bellows::runtime::bag {
namespace {

IndexRange block_of(int rank, int size, std::int64_t tasks) {
  return {tasks * rank / size, tasks * (rank + 1) / size};
}

// Takes up to `count` indices from the front of a queue of ranges.
IndexRange take_front(std::deque<IndexRange>& pool, std::int64_t count) {
  if (pool.empty()) return {};
  IndexRange& front = pool.front();
  const IndexRange out{front.begin, front.begin + std::min(count, front.size())};
  front.begin = out.end;
  if (front.empty()) pool.pop_front();
  return out;
}

class DtreeSource final : public WorkSource {
 public:
  DtreeSource(const DtreeShape& shape, int rank, const std::vector<double>& speeds,
              std::span<const IndexRange> tasks, const BagOptions& options, std::int64_t min_ask)
      : node_(DtreeNode::over_ranges(shape, rank, speeds, tasks, options.dtree, min_ask,
                                     options.workers)) {}

  IndexRange take(std::vector<Message>& out) override {
    DtreeSteps steps;
    const IndexRange range = node_.take_own(steps);
    send(steps, out);
    return range;
  }
  // A parent's workers wait until every child has been told that nothing is left (or has
  // left): a child that leaves may still give ranges back.
  [[nodiscard]] bool dry() const override { return node_.finished(); }
  void on_message(const Message& in, std::vector<Message>& out) override {
    if (in.kind == MessageKind::ask) {
      send(node_.on_request(in.peer), out);
    } else if (in.kind == MessageKind::grant && in.peer == node_.parent()) {
      send(node_.on_grant(in.range), out);
    } else if (in.kind == MessageKind::returned) {
      returned_[in.peer].push_back(in.range);
    } else if (in.kind == MessageKind::left) {
      const std::vector<IndexRange> given = std::move(returned_[in.peer]);
      returned_.erase(in.peer);
      send(node_.on_child_left(in.peer, given), out);
    } else {
      throw std::runtime_error("task bag: rank " + std::to_string(in.peer) +
                               " sent a message Dtree does not expect (kind " +
                               std::to_string(static_cast<std::int64_t>(in.kind)) + ")");
    }
  }
  void on_idle(double, std::uint64_t, std::vector<Message>&) override {}
  [[nodiscard]] bool finished() const override { return node_.finished(); }
  [[nodiscard]] bool can_leave() const override {
    return node_.parent() >= 0 && node_.children().empty() && !node_.dry();
  }
  [[nodiscard]] bool asking() const override { return node_.asking(); }
  std::int64_t leave(std::vector<Message>& out) override {
    if (node_.dry()) return 0;  // the parent has told it that nothing is left: it is done there
    std::int64_t given = 0;
    for (const IndexRange& range : node_.leave()) {
      out.push_back({MessageKind::returned, node_.parent(), range, 0});
      given += range.size();
    }
    out.push_back({MessageKind::left, node_.parent(), {}, 0});
    return given;
  }

 private:
  void send(const DtreeSteps& steps, std::vector<Message>& out) {
    for (const auto& g : steps.grants) {
      out.push_back({MessageKind::grant, g.to, g.range, 0});
      if (!g.range.empty()) {
        ++counters_.requests_served;
        counters_.tasks_given += static_cast<std::uint64_t>(g.range.size());
      }
    }
    if (steps.ask_parent) {
      out.push_back({MessageKind::ask, node_.parent(), {}, node_.min_ask()});
      ++counters_.requests_sent;
    }
  }

  DtreeNode node_;
  std::map<int, std::vector<IndexRange>> returned_;  ///< per leaving child, until its `left`
};

class StaticSource final : public WorkSource {
 public:
  StaticSource(int rank, int size, std::int64_t tasks, std::int64_t min_ask) : chunk_(min_ask) {
    const IndexRange mine = block_of(rank, size, tasks);
    if (!mine.empty()) pool_.push_back(mine);
  }
  IndexRange take(std::vector<Message>&) override { return take_front(pool_, chunk_); }
  [[nodiscard]] bool dry() const override { return pool_.empty(); }
  void on_message(const Message& in, std::vector<Message>&) override {
    throw std::runtime_error("task bag: rank " + std::to_string(in.peer) +
                             " sent a message to a static distribution");
  }
  void on_idle(double, std::uint64_t, std::vector<Message>&) override {}
  [[nodiscard]] bool finished() const override { return pool_.empty(); }

 private:
  std::int64_t chunk_;
  std::deque<IndexRange> pool_;
};

class StealSource final : public WorkSource {
 public:
  StealSource(int rank, int size, std::int64_t tasks, std::int64_t min_ask, std::uint64_t seed)
      : rank_(rank), size_(size), tasks_(tasks), chunk_(min_ask),
        random_(seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(rank)) {
    const IndexRange mine = block_of(rank, size, tasks);
    if (!mine.empty()) pool_.push_back(mine);
    finish_seen_ = tasks == 0;
  }

  IndexRange take(std::vector<Message>&) override { return take_front(pool_, chunk_); }
  [[nodiscard]] bool dry() const override { return finish_seen_ && pool_.empty(); }

  void on_message(const Message& in, std::vector<Message>& out) override {
    switch (in.kind) {
      case MessageKind::steal_request: {
        // The back half of the last range: the thief gets indices this rank would run last.
        IndexRange given;
        if (!pool_.empty() && pool_.back().size() >= 2) {
          IndexRange& last = pool_.back();
          given = {last.end - last.size() / 2, last.end};
          last.end = given.begin;
        } else if (pool_.size() >= 2) {
          given = pool_.back();
          pool_.pop_back();
        }
        if (!given.empty()) {
          ++counters_.requests_served;
          counters_.tasks_given += static_cast<std::uint64_t>(given.size());
        }
        out.push_back({MessageKind::steal_reply, in.peer, given, 0});
        return;
      }
      case MessageKind::steal_reply:
        asking_ = false;
        if (in.range.empty()) {
          failures_ = std::min(failures_ + 1, 5);
          retry_after_ = last_idle_ + 25e-6 * (1 << failures_);
        } else {
          failures_ = 0;
          pool_.push_back(in.range);
        }
        return;
      case MessageKind::done:
        if (rank_ != 0) break;
        finished_tasks_ += in.count;
        check_all_done(out);
        return;
      case MessageKind::finish:
        finish_seen_ = true;
        return;
      default:
        break;
    }
    throw std::runtime_error("task bag: rank " + std::to_string(in.peer) +
                             " sent a message stealing does not expect (kind " +
                             std::to_string(static_cast<std::int64_t>(in.kind)) + ")");
  }

  void on_idle(double now, std::uint64_t tasks_done, std::vector<Message>& out) override {
    last_idle_ = now;
    if (!pool_.empty()) return;
    const auto unreported = static_cast<std::int64_t>(tasks_done) - reported_;
    if (unreported > 0) {
      reported_ += unreported;
      if (rank_ == 0) {
        finished_tasks_ += unreported;
        check_all_done(out);
      } else {
        out.push_back({MessageKind::done, 0, {}, unreported});
      }
    }
    if (finish_seen_ || asking_ || size_ == 1 || now < retry_after_) return;
    std::uniform_int_distribution<int> pick(0, size_ - 2);
    int victim = pick(random_);
    if (victim >= rank_) ++victim;
    out.push_back({MessageKind::steal_request, victim, {}, chunk_});
    ++counters_.requests_sent;
    asking_ = true;
  }

  [[nodiscard]] bool finished() const override { return finish_seen_ && !asking_ && pool_.empty(); }

 private:
  void check_all_done(std::vector<Message>& out) {
    if (finish_seen_ || finished_tasks_ < tasks_) return;
    finish_seen_ = true;
    for (int r = 1; r < size_; ++r) out.push_back({MessageKind::finish, r, {}, 0});
  }

  int rank_;
  int size_;
  std::int64_t tasks_;
  std::int64_t chunk_;
  std::mt19937_64 random_;
  std::deque<IndexRange> pool_;
  bool asking_ = false;
  bool finish_seen_ = false;
  int failures_ = 0;
  double last_idle_ = 0.0;
  double retry_after_ = 0.0;
  std::int64_t reported_ = 0;
  std::int64_t finished_tasks_ = 0;  // rank 0: reported by every rank
};

}  // namespace

WireMessage encode(const Message& message) noexcept {
  return {static_cast<std::int64_t>(message.kind), message.range.begin, message.range.end,
          message.count};
}

Message decode(const WireMessage& wire, int from) {
  if (wire[0] < static_cast<std::int64_t>(MessageKind::ask) ||
      wire[0] > static_cast<std::int64_t>(MessageKind::left)) {
    throw std::runtime_error("task bag: rank " + std::to_string(from) +
                             " sent a message of unknown kind " + std::to_string(wire[0]));
  }
  if (wire[2] < wire[1]) {
    throw std::runtime_error("task bag: rank " + std::to_string(from) + " sent the range [" +
                             std::to_string(wire[1]) + ", " + std::to_string(wire[2]) +
                             "), which ends before it begins");
  }
  return {static_cast<MessageKind>(wire[0]), from, {wire[1], wire[2]}, wire[3]};
}

std::unique_ptr<WorkSource> dtree_source(const DtreeShape& shape, int rank,
                                         const std::vector<double>& speeds,
                                         std::span<const IndexRange> tasks,
                                         const BagOptions& options, std::int64_t min_ask) {
  return std::make_unique<DtreeSource>(shape, rank, speeds, tasks, options, min_ask);
}

std::unique_ptr<WorkSource> static_source(int rank, int size, std::int64_t tasks,
                                          std::int64_t min_ask) {
  return std::make_unique<StaticSource>(rank, size, tasks, min_ask);
}

std::unique_ptr<WorkSource> steal_source(int rank, int size, std::int64_t tasks,
                                         std::int64_t min_ask, std::uint64_t seed) {
  return std::make_unique<StealSource>(rank, size, tasks, min_ask, seed);
}

}  // namespace bellows::runtime::bag
