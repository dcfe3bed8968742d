#include "bellows/runtime/recovery_plan.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

namespace bellows::runtime {
namespace {

std::string rank_text(int rank) { return "rank " + std::to_string(rank); }

std::string count_text(long count, std::string_view one, std::string_view many) {
  return std::to_string(count) + " " + std::string(count == 1 ? one : many);
}

void check_request(const RecoveryRequest& q) {
  const auto size = static_cast<int>(q.hosts.size());
  const std::string ranks = " (" + count_text(size, "rank", "ranks") + ")";
  if (q.buddies.size() != q.hosts.size()) {
    throw std::invalid_argument("plan_recovery: " + count_text(size, "host", "hosts") + " but " +
                                count_text(static_cast<long>(q.buddies.size()), "buddy", "buddies"));
  }
  for (int r = 0; r < size; ++r) {
    const int buddy = q.buddies[static_cast<std::size_t>(r)];
    if (buddy < -1 || buddy >= size || buddy == r) {
      throw std::invalid_argument("plan_recovery: " + rank_text(r) + "'s buddy " +
                                  std::to_string(buddy) + " is not another rank of the job" + ranks);
    }
  }
  if (q.lost.empty()) throw std::invalid_argument("plan_recovery: no rank is lost");
  std::vector<char> seen(q.hosts.size(), 0);
  for (const int r : q.lost) {
    if (r < 0 || r >= size) {
      throw std::invalid_argument("plan_recovery: lost rank " + std::to_string(r) +
                                  " is not a rank of the job" + ranks);
    }
    if (seen[static_cast<std::size_t>(r)]++ != 0) {
      throw std::invalid_argument("plan_recovery: lost rank " + std::to_string(r) + " is named twice");
    }
  }
  if (q.replacement_nodes < 0) {
    throw std::invalid_argument("plan_recovery: the replacement nodes must be at least 0, got " +
                                std::to_string(q.replacement_nodes));
  }
  if (q.on_node_loss == NodeLossAction::shrink && q.replacement_nodes > 0) {
    throw std::invalid_argument("plan_recovery: " +
                                count_text(q.replacement_nodes, "replacement node", "replacement nodes") +
                                " under on_node_loss shrink");
  }
  if (q.minimum_nodes < 1) {
    throw std::invalid_argument("plan_recovery: the minimum of nodes must be at least 1, got " +
                                std::to_string(q.minimum_nodes));
  }
  if (!q.rank_team.empty() && q.rank_team.size() != q.hosts.size()) {
    throw std::invalid_argument("plan_recovery: " + count_text(static_cast<long>(q.rank_team.size()), "team", "teams") +
                                " named for " + count_text(size, "rank", "ranks") + " (rank_team)");
  }
  for (std::size_t r = 0; r < q.rank_team.size(); ++r) {
    if (q.rank_team[r] < 0) {
      throw std::invalid_argument("plan_recovery: " + rank_text(static_cast<int>(r)) + "'s team " +
                                  std::to_string(q.rank_team[r]) + " is negative (rank_team)");
    }
  }
  for (std::size_t c = 0; c < q.collections.size(); ++c) {
    const TileHolders& coll = q.collections[c];
    for (const int holder : coll.holders) {
      if (holder < -1 || holder >= size) {
        throw std::invalid_argument("plan_recovery: collection " + std::to_string(c) +
                                    " names rank " + std::to_string(holder) +
                                    " as a tile's holder" + ranks);
      }
    }
  }
}

// Why the lost ranks' checkpoints cannot all be restored; empty when they can.
std::string missing_copies(const RecoveryRequest& q, const std::vector<char>& lost) {
  std::string out;
  for (std::size_t r = 0; r < lost.size(); ++r) {
    if (lost[r] == 0) continue;
    const int buddy = q.buddies[r];
    std::string problem;
    if (buddy < 0) {
      problem = rank_text(static_cast<int>(r)) +
                " has no buddy on another node: no copy of its checkpoint is left";
    } else if (lost[static_cast<std::size_t>(buddy)] != 0) {
      problem = rank_text(static_cast<int>(r)) + " and its buddy " + rank_text(buddy) +
                " are both lost: no copy of " + rank_text(static_cast<int>(r)) +
                "'s checkpoint is left";
    }
    if (problem.empty()) continue;
    if (!out.empty()) out += "; ";
    out += problem;
  }
  return out;
}

// The teams whose ranks roll back (section III of Meneses, Kale & Bronevetsky): every team
// that lost a rank, and the team of the buddy of each lost rank that no replacement takes
// over (`replaced`), since that buddy takes its tiles. Ascending; {0} for one team.
std::vector<int> teams_rolling_back(const RecoveryRequest& q, const std::vector<char>& lost,
                                    std::span<const int> replaced) {
  if (q.rank_team.empty()) return {0};
  std::set<int> teams;
  for (std::size_t r = 0; r < lost.size(); ++r) {
    if (lost[r] == 0) continue;
    teams.insert(q.rank_team[r]);
    // A replacement rank starts at the checkpoint and adds no team; a buddy re-runs the work.
    if (std::find(replaced.begin(), replaced.end(), static_cast<int>(r)) == replaced.end()) {
      teams.insert(q.rank_team[static_cast<std::size_t>(q.buddies[r])]);
    }
  }
  return {teams.begin(), teams.end()};
}

}  // namespace

std::string_view to_string(NodeLossAction action) noexcept {
  return action == NodeLossAction::replace ? "replace" : "shrink";
}

bool parse_node_loss_action(std::string_view text, NodeLossAction& out) noexcept {
  if (text == "shrink") {
    out = NodeLossAction::shrink;
    return true;
  }
  if (text == "replace") {
    out = NodeLossAction::replace;
    return true;
  }
  return false;
}

RecoveryDecision plan_recovery(const RecoveryRequest& q) {
  check_request(q);
  const auto size = static_cast<int>(q.hosts.size());
  std::vector<char> lost(q.hosts.size(), 0);
  for (const int r : q.lost) lost[static_cast<std::size_t>(r)] = 1;
  const auto lost_count = static_cast<int>(q.lost.size());
  const int survivors = size - lost_count;

  RecoveryDecision decision;
  if (survivors == 0) {
    decision.refusal = "every rank of the job is lost (" + std::to_string(size) + " of " +
                       std::to_string(size) + "): none is left to recover onto";
    return decision;
  }
  if (auto missing = missing_copies(q, lost); !missing.empty()) {
    decision.refusal = std::move(missing);
    return decision;
  }
  const int replacements =
      q.on_node_loss == NodeLossAction::replace ? std::min(q.replacement_nodes, lost_count) : 0;
  std::set<std::string_view> surviving_nodes;
  for (std::size_t r = 0; r < lost.size(); ++r) {
    if (lost[r] == 0) surviving_nodes.insert(q.hosts[r]);
  }
  const int nodes_after = static_cast<int>(surviving_nodes.size()) + replacements;
  if (nodes_after < q.minimum_nodes) {
    decision.refusal = "the job would run on " + count_text(nodes_after, "node", "nodes") +
                       " after losing " + count_text(lost_count, "rank", "ranks");
    if (q.on_node_loss == NodeLossAction::replace) {
      decision.refusal += " with " + count_text(replacements, "replacement node", "replacement nodes");
    }
    decision.refusal += ", fewer than nodes.min (" + std::to_string(q.minimum_nodes) + ")";
    return decision;
  }

  RecoveryPlan plan;
  plan.survivors = survivors;
  plan.nodes_after = nodes_after;
  plan.ranks.backup.resize(q.hosts.size());
  plan.ranks.new_rank.assign(q.hosts.size(), -1);
  for (int r = 0, next = 0; r < size; ++r) {
    const auto s = static_cast<std::size_t>(r);
    plan.ranks.backup[s] = lost[s] != 0 ? q.buddies[s] : r;
    if (lost[s] == 0) plan.ranks.new_rank[s] = next++;
  }
  // The new number of whoever holds an old rank's tiles after the restore.
  std::vector<int> heir(q.hosts.size(), -1);
  for (int r = 0; r < size; ++r) {
    const auto s = static_cast<std::size_t>(r);
    if (lost[s] == 0) {
      heir[s] = plan.ranks.new_rank[s];
      continue;
    }
    const int buddy = plan.ranks.new_rank[static_cast<std::size_t>(q.buddies[s])];
    if (static_cast<int>(plan.replaced.size()) < replacements) {
      heir[s] = survivors + static_cast<int>(plan.replaced.size());
      plan.replaced.push_back(r);
    } else {
      heir[s] = buddy;
    }
    plan.restores.push_back({r, buddy, heir[s]});
  }
  plan.teams_rolling_back = teams_rolling_back(q, lost, plan.replaced);
  for (int r = 0; r < size; ++r) {
    const auto s = static_cast<std::size_t>(r);
    const int team = q.rank_team.empty() ? 0 : q.rank_team[s];
    if (std::binary_search(plan.teams_rolling_back.begin(), plan.teams_rolling_back.end(), team)) {
      plan.roll_back.push_back({r, plan.ranks.backup[s]});
    }
  }
  if (!q.collections.empty()) {
    std::vector<TileHolders> after;
    for (const TileHolders& coll : q.collections) {
      TileHolders moved{coll.tile_rows, coll.tile_cols, {}};
      moved.holders.reserve(coll.holders.size());
      for (const int holder : coll.holders) {
        moved.holders.push_back(holder < 0 ? -1 : heir[static_cast<std::size_t>(holder)]);
      }
      after.push_back(std::move(moved));
    }
    std::vector<int> ranks_after(static_cast<std::size_t>(survivors + replacements));
    for (std::size_t r = 0; r < ranks_after.size(); ++r) ranks_after[r] = static_cast<int>(r);
    plan.layout = regrid(after, ranks_after);
  }
  decision.plan = std::move(plan);
  return decision;
}

CheckpointChoice choose_checkpoint(std::span<const CheckpointCopy> copies,
                                   std::span<const CheckpointSource> roll_back) {
  if (roll_back.empty()) throw std::invalid_argument("choose_checkpoint: no rank rolls back");
  CheckpointChoice choice;
  std::vector<std::set<long>> complete(roll_back.size());
  std::string missing;
  for (std::size_t i = 0; i < roll_back.size(); ++i) {
    const CheckpointSource& source = roll_back[i];
    std::string in_progress;
    for (const CheckpointCopy& copy : copies) {
      if (copy.owner != source.owner || copy.holder != source.holder) continue;
      if (copy.complete()) {
        complete[i].insert(copy.iteration);
      } else {
        if (!in_progress.empty()) in_progress += ", ";
        in_progress += "iteration " + std::to_string(copy.iteration) + ": " +
                       std::to_string(copy.tiles_held) + " of " +
                       std::to_string(copy.tiles_expected) + " tiles";
      }
    }
    if (!complete[i].empty()) continue;
    if (!missing.empty()) missing += "; ";
    missing += "no complete checkpoint of " + rank_text(source.owner) + " at " + rank_text(source.holder);
    if (!in_progress.empty()) missing += " (" + in_progress + ")";
  }
  if (!missing.empty()) {
    choice.refusal = std::move(missing);
    return choice;
  }
  std::set<long> common = complete.front();
  for (std::size_t i = 1; i < complete.size(); ++i) {
    std::set<long> both;
    std::set_intersection(common.begin(), common.end(), complete[i].begin(), complete[i].end(),
                          std::inserter(both, both.end()));
    common = std::move(both);
  }
  if (common.empty()) {
    choice.refusal = "no iteration has a complete checkpoint of every rank that rolls back:";
    for (std::size_t i = 0; i < roll_back.size(); ++i) {
      choice.refusal += i == 0 ? " " : "; ";
      choice.refusal += rank_text(roll_back[i].owner);
      choice.refusal += " at ";
      choice.refusal += rank_text(roll_back[i].holder);
      choice.refusal += " has";
      for (const long iteration : complete[i]) {
        choice.refusal += ' ';
        choice.refusal += std::to_string(iteration);
      }
    }
    return choice;
  }
  choice.iteration = *common.rbegin();
  return choice;
}

std::vector<CheckpointSource> kept_copies(std::span<const int> buddies) {
  std::vector<CheckpointSource> kept;
  for (std::size_t r = 0; r < buddies.size(); ++r) {
    kept.push_back({static_cast<int>(r), static_cast<int>(r)});
    if (buddies[r] >= 0) kept.push_back({static_cast<int>(r), buddies[r]});
  }
  return kept;
}

std::vector<CheckpointCopy> superseded_copies(std::span<const CheckpointCopy> copies,
                                              std::span<const CheckpointSource> kept) {
  std::vector<CheckpointCopy> out;
  if (kept.empty()) return out;
  const CheckpointChoice committed = choose_checkpoint(copies, kept);
  if (!committed.iteration) return out;
  for (const CheckpointCopy& copy : copies) {
    if (copy.iteration < *committed.iteration) out.push_back(copy);
  }
  return out;
}

}  // namespace bellows::runtime
