#include "bellows/runtime/survivors.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bellows::runtime {

std::vector<int> survivors_without(int size, std::span<const int> dead) {
  if (size < 1) {
    throw std::invalid_argument("survivors: a communicator of " + std::to_string(size) +
                                " ranks has no survivors to number");
  }
  std::vector<bool> is_dead(static_cast<std::size_t>(size), false);
  for (const int rank : dead) {
    if (rank < 0 || rank >= size) {
      throw std::invalid_argument("survivors: dead rank " + std::to_string(rank) +
                                  " is out of range [0, " + std::to_string(size) + ")");
    }
    if (is_dead[static_cast<std::size_t>(rank)]) {
      throw std::invalid_argument("survivors: dead rank " + std::to_string(rank) +
                                  " is listed twice");
    }
    is_dead[static_cast<std::size_t>(rank)] = true;
  }
  std::vector<int> survivors;
  for (int rank = 0; rank < size; ++rank) {
    if (!is_dead[static_cast<std::size_t>(rank)]) survivors.push_back(rank);
  }
  if (survivors.empty()) {
    throw std::invalid_argument("survivors: all " + std::to_string(size) +
                                " ranks are listed as dead; nobody is left to carry on");
  }
  return survivors;
}

int survivor_rank(std::span<const int> survivors, int old_rank) {
  const auto it = std::lower_bound(survivors.begin(), survivors.end(), old_rank);
  if (it == survivors.end() || *it != old_rank) return -1;
  return static_cast<int>(it - survivors.begin());
}

ShrinkPlan plan_survivors_without_data(int size, std::span<const int> dead) {
  const std::vector<int> survivors = survivors_without(size, dead);
  ShrinkPlan plan;
  plan.backup.assign(static_cast<std::size_t>(size), -1);
  plan.new_rank.assign(static_cast<std::size_t>(size), -1);
  for (std::size_t i = 0; i < survivors.size(); ++i) {
    const auto old_rank = static_cast<std::size_t>(survivors[i]);
    plan.backup[old_rank] = survivors[i];
    plan.new_rank[old_rank] = static_cast<int>(i);
  }
  return plan;
}

}  // namespace bellows::runtime
