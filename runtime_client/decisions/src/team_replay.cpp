#include "bellows/runtime/team_replay.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "bellows/runtime/message_logging.hpp"

namespace bellows::runtime {

ReplayWindow replay_window(long checkpoint, long interrupted) {
  if (checkpoint < 0 || interrupted < 0 || checkpoint >= interrupted) {
    throw std::invalid_argument("replay_window: the checkpoint after iteration " + std::to_string(checkpoint) +
                                " is not before the interrupted iteration " + std::to_string(interrupted));
  }
  return {checkpoint, interrupted};
}

TeamRollbackChoice choose_team_rollback(const TeamRollbackFacts& facts) {
  const auto global = [](std::string reason) { return TeamRollbackChoice{false, std::move(reason)}; };
  if (!facts.logging_between_teams) return global("message logging between teams is off");
  if (facts.steal_across_teams) return global("stealing crosses teams (steal_across_teams)");
  if (facts.offloading) return global("proactive offloading pushes tasks across teams");
  if (facts.resize_under_way) return global("a resize is under way");
  if (facts.fewest_completed != facts.most_completed) {
    return global("the survivors completed " + std::to_string(facts.fewest_completed) + " to " +
                  std::to_string(facts.most_completed) + " iterations (the loss hit an iteration's end)");
  }
  const long interrupted = facts.most_completed + 1;
  if (facts.oldest_tiles_kept_at != interrupted || facts.newest_tiles_kept_at != interrupted) {
    return global("the survivors kept their tiles as iterations " + std::to_string(facts.oldest_tiles_kept_at) +
                  " to " + std::to_string(facts.newest_tiles_kept_at) + " started, not as the interrupted iteration " +
                  std::to_string(interrupted) + " started");
  }
  return TeamRollbackChoice{true, {}};
}

int replay_destination(long entry_iteration, int destination, const ReplayWindow& window,
                       std::span<const int> rolling_back, const ShrinkPlan& ranks) {
  const auto size = static_cast<int>(ranks.new_rank.size());
  if (destination < 0 || destination >= size || ranks.backup.size() != ranks.new_rank.size()) {
    throw std::invalid_argument("replay_destination: destination rank " + std::to_string(destination) +
                                " is not a rank of the job (" + std::to_string(size) + " ranks)");
  }
  if (!window.contains(entry_iteration)) return -1;
  if (std::find(rolling_back.begin(), rolling_back.end(), destination) == rolling_back.end()) return -1;
  const int heir = ranks.backup[static_cast<std::size_t>(destination)];
  const int renumbered = heir < 0 || heir >= size ? -1 : ranks.new_rank[static_cast<std::size_t>(heir)];
  if (renumbered < 0) {
    throw std::invalid_argument("replay_destination: destination rank " + std::to_string(destination) +
                                " is lost and its tiles went to rank " + std::to_string(heir) +
                                ", which is not a survivor");
  }
  return renumbered;
}

std::vector<long> tasks_rerun(std::span<const long> tasks_per_iteration, std::span<const int> rolling_back,
                              const ReplayWindow& window) {
  std::vector<long> out(tasks_per_iteration.size(), 0);
  for (const int r : rolling_back) {
    if (r < 0 || r >= static_cast<int>(out.size())) {
      throw std::invalid_argument("tasks_rerun: rank " + std::to_string(r) + " rolls back but the job has " +
                                  std::to_string(out.size()) + " ranks");
    }
    out[static_cast<std::size_t>(r)] = tasks_per_iteration[static_cast<std::size_t>(r)] * window.iterations();
  }
  return out;
}

bool ReceivedVersions::first_receipt(const MessageVersion& message) {
  if (received_.insert(message).second) return true;
  ++duplicates_;
  return false;
}

void ReceivedVersions::release_through(long checkpoint_iteration) {
  std::erase_if(received_, [&](const MessageVersion& m) {
    return released_by_checkpoint(m.version, checkpoint_iteration);
  });
}

void ReceivedVersions::forget_from(long iteration) {
  std::erase_if(received_, [&](const MessageVersion& m) { return m.version >= iteration; });
}

}  // namespace bellows::runtime
