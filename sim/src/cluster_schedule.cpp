// First come, first served with EASY backfilling (cluster_schedule.hpp).

#include "bellows/sim/cluster_schedule.hpp"

#include <algorithm>
#include <limits>

namespace bellows::sim {

std::vector<int> easy_backfill(int free_nodes, double now, std::span<const QueuedJob> queue,
                               std::span<const RunningJobEstimate> running) {
  std::vector<int> start;
  std::size_t head = 0;
  std::vector<RunningJobEstimate> ends(running.begin(), running.end());
  for (; head < queue.size() && queue[head].nodes <= free_nodes; ++head) {
    start.push_back(static_cast<int>(head));
    free_nodes -= queue[head].nodes;
    ends.push_back({queue[head].nodes, now + queue[head].estimate});
  }
  if (head == queue.size()) return start;

  // The first job that does not fit: its reservation.
  std::sort(ends.begin(), ends.end(), [](const RunningJobEstimate& a, const RunningJobEstimate& b) {
    return a.expected_end < b.expected_end;
  });
  const int needed = queue[head].nodes;
  double shadow = std::numeric_limits<double>::infinity();
  int extra = 0;
  int available = free_nodes;
  for (const RunningJobEstimate& job : ends) {
    available += job.nodes;
    if (available >= needed) {
      shadow = std::max(now, job.expected_end);
      extra = available - needed;
      break;
    }
  }
  for (std::size_t i = head + 1; i < queue.size() && free_nodes > 0; ++i) {
    const QueuedJob& job = queue[i];
    if (job.nodes > free_nodes) continue;
    const bool ends_in_time = now + job.estimate <= shadow;
    if (!ends_in_time && job.nodes > extra) continue;
    start.push_back(static_cast<int>(i));
    free_nodes -= job.nodes;
    if (!ends_in_time) extra -= job.nodes;
  }
  return start;
}

}  // namespace bellows::sim
