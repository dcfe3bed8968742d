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
  if (facts.replay_under_way) {
    return global("the loss came during the replay of an earlier team roll-back (its ranks were at different "
                  "iterations, and no log was kept from its checkpoint for a replay of a replay)");
  }
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

std::vector<RehomedCopy> rehome_checkpoint(std::span<const int> old_buddies, const ShrinkPlan& ranks,
                                          std::span<const int> new_buddies) {
  const auto old_size = static_cast<int>(ranks.new_rank.size());
  if (ranks.backup.size() != ranks.new_rank.size() || old_buddies.size() != ranks.new_rank.size()) {
    throw std::invalid_argument("rehome_checkpoint: " + std::to_string(old_buddies.size()) + " old buddies and a " +
                                "renumbering of " + std::to_string(ranks.new_rank.size()) + " ranks (" +
                                std::to_string(ranks.backup.size()) + " backups)");
  }
  std::vector<int> old_of;  // per survivor: its old number
  for (int r = 0; r < old_size; ++r) {
    if (!ranks.leaves(r)) old_of.push_back(r);
  }
  const auto survivors = static_cast<int>(old_of.size());
  if (new_buddies.size() != old_of.size()) {
    throw std::invalid_argument("rehome_checkpoint: " + std::to_string(new_buddies.size()) + " new buddies for " +
                                std::to_string(survivors) + " survivors");
  }
  std::vector<RehomedCopy> out(old_of.size());
  for (int s = 0; s < survivors; ++s) {
    const int buddy = new_buddies[static_cast<std::size_t>(s)];
    if (buddy < -1 || buddy >= survivors || buddy == s) {
      throw std::invalid_argument("rehome_checkpoint: survivor " + std::to_string(s) + "'s new buddy " +
                                  std::to_string(buddy) + " is not another of the " + std::to_string(survivors) +
                                  " survivors");
    }
    out[static_cast<std::size_t>(s)].owner = s;
    out[static_cast<std::size_t>(s)].buddy = buddy;
  }
  for (int r = 0; r < old_size; ++r) {
    const int old_buddy = old_buddies[static_cast<std::size_t>(r)];
    if (old_buddy < -1 || old_buddy >= old_size) {
      throw std::invalid_argument("rehome_checkpoint: rank " + std::to_string(r) + "'s buddy " +
                                  std::to_string(old_buddy) + " is not a rank of the " + std::to_string(old_size));
    }
    const int heir = ranks.backup[static_cast<std::size_t>(r)];
    const int renumbered = heir < 0 || heir >= old_size ? -1 : ranks.new_rank[static_cast<std::size_t>(heir)];
    if (renumbered < 0) {
      throw std::invalid_argument("rehome_checkpoint: rank " + std::to_string(r) + " is lost and its tiles went to rank " +
                                  std::to_string(heir) + ", which is not a survivor");
    }
    out[static_cast<std::size_t>(renumbered)].made_of.push_back(r);
  }
  for (RehomedCopy& copy : out) {
    if (copy.buddy < 0) continue;
    const int survivor = old_of[static_cast<std::size_t>(copy.owner)];
    const int old_buddy = old_buddies[static_cast<std::size_t>(survivor)];
    const bool held_already = copy.made_of.size() == 1 && old_buddy >= 0 && !ranks.leaves(old_buddy) &&
                              ranks.new_rank[static_cast<std::size_t>(old_buddy)] == copy.buddy;
    copy.sent = !held_already;
  }
  return out;
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
