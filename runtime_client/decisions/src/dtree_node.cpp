#include "bellows/runtime/dtree_node.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace bellows::runtime {
namespace {

DtreeShares checked_shares(const DtreeShape& shape, int rank, std::span<const double> speeds) {
  if (!shape.member(rank)) {
    throw std::invalid_argument("dtree node: rank " + std::to_string(rank) + " is not in the tree");
  }
  return dtree_shares(shape, rank, speeds);
}

}  // namespace

DtreeNode::DtreeNode(const DtreeShape& shape, int rank, std::span<const double> speeds,
                     IndexRange tasks, const DtreeOptions& options, std::int64_t min_ask,
                     int workers)
    : DtreeNode(checked_shares(shape, rank, speeds), shape, rank,
                std::span<const IndexRange>(&tasks, 1), options, min_ask, workers) {
  const auto at = static_cast<std::size_t>(rank);
  ask_early_ = at < speeds.size() && speeds[at] > 0.0;
}

DtreeNode DtreeNode::over_ranges(const DtreeShape& shape, int rank, std::span<const double> speeds,
                                 std::span<const IndexRange> tasks, const DtreeOptions& options,
                                 std::int64_t min_ask, int workers) {
  DtreeNode node(checked_shares(shape, rank, speeds), shape, rank, tasks, options, min_ask, workers);
  const auto at = static_cast<std::size_t>(rank);
  node.ask_early_ = at < speeds.size() && speeds[at] > 0.0;
  return node;
}

DtreeNode::DtreeNode(DtreeShares shares, const DtreeShape& shape, int rank,
                     std::span<const IndexRange> tasks, const DtreeOptions& options,
                     std::int64_t min_ask, int workers)
    : rank_(rank),
      parent_(shape.parent(rank)),
      children_(shape.children(rank).begin(), shape.children(rank).end()),
      own_share_(shares.own),
      options_(options),
      min_ask_(min_ask),
      workers_(workers),
      grantor_(DtreeGrantor::over_ranges(parent_ < 0 ? tasks : std::span<const IndexRange>{},
                                         std::move(shares.children), options)) {
  if (min_ask < 1) {
    throw std::invalid_argument("dtree node: the minimum ask must be at least 1, got " +
                                std::to_string(min_ask));
  }
  if (workers < 1) {
    throw std::invalid_argument("dtree node: workers must be at least 1, got " +
                                std::to_string(workers));
  }
}

bool DtreeNode::is_child(int rank) const noexcept {
  return std::find(children_.begin(), children_.end(), rank) != children_.end();
}

bool DtreeNode::finished() const noexcept {
  return dry() && !asking_ && waiting_.empty() && done_.size() == children_.size();
}

DtreeSteps DtreeNode::on_request(int child) {
  const bool done = std::find(done_.begin(), done_.end(), child) != done_.end();
  if (!is_child(child) || done) {
    throw std::invalid_argument("dtree node: rank " + std::to_string(rank_) +
                                " got a request from rank " + std::to_string(child) +
                                (done ? ", which was told nothing is left or left"
                                      : ", which is not its child"));
  }
  DtreeSteps steps;
  waiting_.push_back(child);
  serve_waiting(steps);
  return steps;
}

DtreeSteps DtreeNode::on_grant(IndexRange range) {
  if (!asking_) {
    throw std::logic_error("dtree node: rank " + std::to_string(rank_) +
                           " got a grant it did not ask for");
  }
  asking_ = false;
  DtreeSteps steps;
  if (range.empty()) {
    run_dry(steps);
  } else {
    grantor_.refill(range);
    serve_waiting(steps);
  }
  return steps;
}

DtreeSteps DtreeNode::on_child_left(int child, std::span<const IndexRange> unstarted) {
  if (!is_child(child) || std::find(done_.begin(), done_.end(), child) != done_.end()) {
    throw std::invalid_argument("dtree node: rank " + std::to_string(child) +
                                " cannot leave rank " + std::to_string(rank_) +
                                ": not a child that still asks");
  }
  for (const auto& range : unstarted) grantor_.give_back(range);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), child), waiting_.end());
  done_.push_back(child);
  DtreeSteps steps;
  serve_waiting(steps);
  return steps;
}

IndexRange DtreeNode::take_own(DtreeSteps& steps) {
  const std::int64_t held = grantor_.remaining();
  if (held == 0) {
    need_work(steps);
    return {};
  }
  std::int64_t count = 0;
  if (grantor_.leaf()) {
    count = (held + workers_ - 1) / workers_;
  } else {
    const double now = options_.rest * static_cast<double>(held) * own_share_;
    count = std::max(min_ask_, static_cast<std::int64_t>(std::ceil(now)));
  }
  const IndexRange range = grantor_.take_own(count);
  // A measured rank asks while this range runs, so that the answer is here when it ends.
  if (ask_early_ && grantor_.remaining() == 0) need_work(steps);
  return range;
}

std::vector<IndexRange> DtreeNode::leave() {
  if (asking_) {
    throw std::logic_error("dtree node: rank " + std::to_string(rank_) +
                           " cannot leave while its request to rank " + std::to_string(parent_) +
                           " is unanswered");
  }
  std::vector<IndexRange> out(grantor_.pool().begin(), grantor_.pool().end());
  for (const auto& range : out) (void)grantor_.take_own(range.size());
  exhausted_ = true;
  return out;
}

void DtreeNode::serve_waiting(DtreeSteps& steps) {
  while (!waiting_.empty() && grantor_.remaining() > 0) {
    const int child = waiting_.front();
    waiting_.pop_front();
    steps.grants.push_back({child, grantor_.grant(child, min_ask_)});
  }
  if (waiting_.empty()) return;
  if (exhausted_) {
    run_dry(steps);
  } else {
    need_work(steps);
  }
}

void DtreeNode::need_work(DtreeSteps& steps) {
  if (exhausted_ || asking_) return;
  if (parent_ < 0) {
    run_dry(steps);
    return;
  }
  asking_ = true;
  steps.ask_parent = true;
}

void DtreeNode::run_dry(DtreeSteps& steps) {
  exhausted_ = true;
  for (const int child : waiting_) {
    steps.grants.push_back({child, {}});
    done_.push_back(child);
  }
  waiting_.clear();
}

}  // namespace bellows::runtime
