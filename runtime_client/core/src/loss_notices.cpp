#include "bellows/runtime/loss_notices.hpp"

#include <algorithm>
#include <stdexcept>

namespace bellows::runtime {

void LossNotices::tell(std::uint64_t failure_id, std::vector<int> ranks) {
  for (const int r : ranks) {
    if (r < 0) {
      throw std::invalid_argument("loss notice of failure " + std::to_string(failure_id) + ": rank " +
                                  std::to_string(r) + " is negative");
    }
  }
  std::sort(ranks.begin(), ranks.end());
  std::lock_guard lock(mutex_);
  if (failure_id != 0 && failure_id <= settled_through_) return;
  if (!unexplained_rebuilds_.empty() && !ranks.empty()) {
    const std::vector<int>& left_out = unexplained_rebuilds_.front();
    if (std::includes(left_out.begin(), left_out.end(), ranks.begin(), ranks.end())) {
      // The loss the oldest rebuild already handled, told late: its numbers are from before.
      unexplained_rebuilds_.erase(unexplained_rebuilds_.begin());
      settled_through_ = std::max(settled_through_, failure_id);
      return;
    }
  }
  notices_.push_back(Notice{failure_id, std::move(ranks)});
}

void LossNotices::tell_nodes(const std::vector<std::string>& nodes) {
  std::lock_guard lock(mutex_);
  for (const std::string& node : nodes) {
    if (node.empty()) continue;
    const auto at = std::lower_bound(nodes_lost_.begin(), nodes_lost_.end(), node);
    if (at == nodes_lost_.end() || *at != node) nodes_lost_.insert(at, node);
  }
}

std::vector<std::string> LossNotices::nodes_lost() const {
  std::lock_guard lock(mutex_);
  return nodes_lost_;
}

std::vector<int> LossNotices::ranks_lost(int size) const {
  std::vector<int> ranks;
  {
    std::lock_guard lock(mutex_);
    for (const Notice& n : notices_) {
      for (const int r : n.ranks) {
        if (r < size) ranks.push_back(r);
      }
    }
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::string LossNotices::which_failure(int rank) const {
  std::lock_guard lock(mutex_);
  for (const Notice& n : notices_) {
    if (std::find(n.ranks.begin(), n.ranks.end(), rank) != n.ranks.end()) {
      return "failure " + std::to_string(n.failure_id);
    }
  }
  return {};
}

bool LossNotices::drop_and_renumber(const std::vector<int>& gone) {
  bool named = false;
  for (Notice& n : notices_) {
    std::vector<int> renumbered;
    for (const int r : n.ranks) {
      if (std::binary_search(gone.begin(), gone.end(), r)) {
        named = true;
        continue;
      }
      const auto below = std::lower_bound(gone.begin(), gone.end(), r) - gone.begin();
      renumbered.push_back(r - static_cast<int>(below));
    }
    n.ranks = std::move(renumbered);
    if (n.ranks.empty()) settled_through_ = std::max(settled_through_, n.failure_id);
  }
  std::erase_if(notices_, [](const Notice& n) { return n.ranks.empty(); });
  return named;
}

void LossNotices::renumber_without(const std::vector<int>& left_out) {
  std::vector<int> gone = left_out;
  std::sort(gone.begin(), gone.end());
  std::lock_guard lock(mutex_);
  const bool explained = drop_and_renumber(gone);
  if (!explained && !gone.empty()) unexplained_rebuilds_.push_back(std::move(gone));
}

void LossNotices::renumber_at_shrink(const std::vector<int>& leaving) {
  std::vector<int> gone = leaving;
  for (const int r : gone) {
    if (r < 0) {
      throw std::invalid_argument("loss notices at a shrink: leaving rank " + std::to_string(r) + " is negative");
    }
  }
  std::sort(gone.begin(), gone.end());
  gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
  std::lock_guard lock(mutex_);
  (void)drop_and_renumber(gone);
}

void LossNotices::settle_through(std::uint64_t failure_id) {
  std::lock_guard lock(mutex_);
  settled_through_ = std::max(settled_through_, failure_id);
  std::erase_if(notices_, [&](const Notice& n) { return n.failure_id <= settled_through_; });
}

std::uint64_t LossNotices::settled_through() const {
  std::lock_guard lock(mutex_);
  return settled_through_;
}

void LossNotices::clear() {
  std::lock_guard lock(mutex_);
  notices_.clear();
  settled_through_ = 0;
  unexplained_rebuilds_.clear();
  nodes_lost_.clear();
}

LossNotices& loss_notices() {
  static LossNotices notices;
  return notices;
}

}  // namespace bellows::runtime
