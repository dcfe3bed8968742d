#include "bellows/runtime/shrink_plan.hpp"

#include <stdexcept>
#include <string>

namespace bellows::runtime {

int choose_backup(std::span<const long> load, int rank, const std::function<bool(int)>& eligible) {
  const int size = static_cast<int>(load.size());
  int best = -1;
  for (int step = 1; step < size; ++step) {
    const int candidate = (rank + step) % size;
    if (!eligible(candidate)) continue;
    if (best < 0 || load[static_cast<std::size_t>(candidate)] < load[static_cast<std::size_t>(best)]) {
      best = candidate;
    }
  }
  return best;
}

ShrinkPlan plan_shrink(std::span<const long> held, std::span<const int> leaving) {
  const int size = static_cast<int>(held.size());
  ShrinkPlan plan;
  plan.new_rank.assign(held.size(), 0);
  for (const int r : leaving) {
    if (r <= 0 || r >= size || plan.new_rank[static_cast<std::size_t>(r)] < 0) {
      throw std::invalid_argument("prepare_shrink: cannot remove rank " + std::to_string(r) +
                                  " from " + std::to_string(size) +
                                  " ranks (rank 0 stays; each rank once)");
    }
    plan.new_rank[static_cast<std::size_t>(r)] = -1;
  }
  std::vector<long> load(held.begin(), held.end());
  plan.backup.resize(held.size());
  for (int r = 0; r < size; ++r) plan.backup[static_cast<std::size_t>(r)] = r;
  for (int r = 1; r < size; ++r) {
    if (!plan.leaves(r)) continue;
    const int best = choose_backup(load, r, [&plan](int candidate) { return !plan.leaves(candidate); });
    plan.backup[static_cast<std::size_t>(r)] = best;
    load[static_cast<std::size_t>(best)] += load[static_cast<std::size_t>(r)];
    load[static_cast<std::size_t>(r)] = 0;
  }
  for (int r = 0, next = 0; r < size; ++r) {
    if (!plan.leaves(r)) plan.new_rank[static_cast<std::size_t>(r)] = next++;
  }
  return plan;
}

}  // namespace bellows::runtime
