#include "bellows/controller/fence_book.hpp"

#include <algorithm>

namespace bellows::controller {
namespace {

using protocol::CollectiveStatus;
using protocol::kWildcardRank;

std::string member_text(const std::string& nspace, std::uint32_t rank) {
  return nspace + ":" + (rank == kWildcardRank ? std::string("*") : std::to_string(rank));
}

std::string ranks_text(const std::set<std::uint32_t>& ranks) {
  std::string text;
  for (const std::uint32_t rank : ranks) {
    if (!text.empty()) text += ',';
    text += std::to_string(rank);
  }
  return text.empty() ? "none" : text;
}

}  // namespace

FenceBook::FenceBook(std::string job_nspace) : job_nspace_(std::move(job_nspace)) {}

std::vector<FenceReleaseFor> FenceBook::contribute(const std::string& node,
                                                   const protocol::FenceContribution& contribution) {
  lost_nodes_.erase(node);  // a node that contributes is there
  Key key;
  std::map<std::string, std::uint32_t> sizes;
  for (std::size_t i = 0; i < contribution.participant_nspaces.size(); ++i) {
    key.emplace_back(contribution.participant_nspaces[i], contribution.participant_ranks[i]);
    sizes[contribution.participant_nspaces[i]] = contribution.nspace_sizes[i];
  }
  std::ranges::sort(key);
  key.erase(std::unique(key.begin(), key.end()), key.end());
  std::string participants;
  for (const auto& [nspace, rank] : key) {
    if (!participants.empty()) participants += ',';
    participants += member_text(nspace, rank);
  }

  const auto refuse = [&](const std::string& why) {
    return std::vector<FenceReleaseFor>{
        {node, protocol::FenceRelease{contribution.contribution_id, CollectiveStatus::refused,
                                      "fence over " + participants + ": contribution " +
                                          std::to_string(contribution.contribution_id) + " of " + node + " refused: " + why,
                                      {}}}};
  };

  for (const auto& [nspace, rank] : key) {
    if (nspace == job_nspace_ && departed_.contains(rank))
      return refuse("participant " + member_text(nspace, rank) + " left the job (its ranks now: " +
                    ranks_text(job_ranks_) + ")");
  }

  auto& queue = fences_[key];
  // The first fence of this set the node has not contributed to yet is the one it joins.
  auto fence = std::ranges::find_if(queue, [&node](const Fence& f) {
    return std::ranges::none_of(f.contributions, [&node](const Contribution& c) { return c.node == node; });
  });
  if (fence == queue.end()) {
    Fence created;
    created.serial = next_serial_++;
    created.participants = participants;
    created.sizes = sizes;
    created.collect = contribution.collect_data != 0;
    for (const auto& [nspace, rank] : key) {
      for (const std::uint32_t r : ranks_of(nspace, rank, sizes[nspace])) created.missing.insert({nspace, r});
    }
    queue.push_back(std::move(created));
    fence = std::prev(queue.end());
  } else {
    if (fence->sizes != sizes) {
      auto refusal = refuse("its namespace sizes differ from the fence's first contribution");
      drop_empty_keys();
      return refusal;
    }
    if (fence->collect != (contribution.collect_data != 0)) {
      auto refusal = refuse(std::string("it ") + (fence->collect ? "does not ask" : "asks") +
                            " for collected data, the fence's first contribution " +
                            (fence->collect ? "does" : "does not"));
      drop_empty_keys();
      return refusal;
    }
  }

  std::size_t hosted = 0;
  for (std::size_t i = 0; i < contribution.local_ranks.size(); ++i) {
    const Member member{contribution.local_nspaces[i], contribution.local_ranks[i]};
    hosts_[member] = node;
    hosted += fence->missing.erase(member);
  }
  if (hosted == 0) {
    const bool created_now = fence->contributions.empty();
    auto refusal = refuse("it hosts no participant the fence waits for");
    if (created_now) queue.erase(fence);
    drop_empty_keys();
    return refusal;
  }
  fence->contributions.push_back({node, contribution.contribution_id, contribution.data});

  std::vector<FenceReleaseFor> releases;
  if (fence->missing.empty()) {
    releases = finish(*fence, CollectiveStatus::ok, "");
    queue.erase(fence);
  } else if (std::string why = doomed(*fence, {}); !why.empty()) {
    releases = finish(*fence, CollectiveStatus::participant_lost, why);
    queue.erase(fence);
  }
  drop_empty_keys();
  return releases;
}

std::vector<FenceReleaseFor> FenceBook::lost(const std::vector<std::uint32_t>& lost_ranks,
                                             const std::vector<std::string>& lost_nodes, const std::string& reason) {
  for (const std::string& node : lost_nodes) lost_nodes_[node] = reason;
  const std::set<std::uint32_t> ranks(lost_ranks.begin(), lost_ranks.end());
  std::vector<FenceReleaseFor> releases;
  for (auto& [key, queue] : fences_) {
    for (auto it = queue.begin(); it != queue.end();) {
      const std::string why = doomed(*it, ranks);
      if (why.empty()) {
        ++it;
        continue;
      }
      for (auto& release : finish(*it, CollectiveStatus::participant_lost, why)) {
        if (!lost_nodes_.contains(release.node)) releases.push_back(std::move(release));
      }
      it = queue.erase(it);
    }
  }
  drop_empty_keys();
  return releases;
}

std::vector<FenceReleaseFor> FenceBook::job_changed(const std::vector<std::uint32_t>& ranks,
                                                   const std::vector<std::uint32_t>& departed) {
  job_ranks_known_ = true;
  job_ranks_ = std::set<std::uint32_t>(ranks.begin(), ranks.end());
  departed_.insert(departed.begin(), departed.end());
  std::vector<FenceReleaseFor> releases;
  for (auto& [key, queue] : fences_) {
    for (auto it = queue.begin(); it != queue.end();) {
      const auto gone = std::ranges::find_if(it->missing, [this](const Member& m) {
        return m.nspace == job_nspace_ && departed_.contains(m.rank);
      });
      if (gone == it->missing.end()) {
        ++it;
        continue;
      }
      const std::string why = "fence over " + it->participants + ": participant " +
                              member_text(gone->nspace, gone->rank) + " left the job";
      for (auto& release : finish(*it, CollectiveStatus::participant_lost, why)) releases.push_back(std::move(release));
      it = queue.erase(it);
    }
  }
  drop_empty_keys();
  return releases;
}

std::vector<std::uint32_t> FenceBook::ranks_of(const std::string& nspace, std::uint32_t rank,
                                               std::uint32_t size) const {
  if (rank != kWildcardRank) return {rank};
  if (nspace == job_nspace_ && job_ranks_known_) return {job_ranks_.begin(), job_ranks_.end()};
  std::vector<std::uint32_t> all;
  for (std::uint32_t r = 0; r < size; ++r) all.push_back(r);
  return all;
}

std::string FenceBook::doomed(const Fence& fence, const std::set<std::uint32_t>& lost_ranks) const {
  for (const Member& member : fence.missing) {
    const std::string who = member_text(member.nspace, member.rank);
    if (member.nspace == job_nspace_ && lost_ranks.contains(member.rank))
      return "fence over " + fence.participants + ": participant " + who + " is lost";
    const auto host = hosts_.find(member);
    if (host != hosts_.end()) {
      if (const auto loss = lost_nodes_.find(host->second); loss != lost_nodes_.end())
        return "fence over " + fence.participants + ": participant " + who + " on lost node " + host->second +
               " (" + loss->second + ")";
      continue;
    }
    // Nobody placed it yet: a lost node that has not contributed may have been its host.
    for (const auto& [node, why] : lost_nodes_) {
      const bool contributed = std::ranges::any_of(fence.contributions,
                                                   [&node](const Contribution& c) { return c.node == node; });
      if (!contributed)
        return "fence over " + fence.participants + ": participant " + who + " may have been on lost node " +
               node + " (" + why + ")";
    }
  }
  return {};
}

std::vector<FenceReleaseFor> FenceBook::finish(const Fence& fence, CollectiveStatus status,
                                               const std::string& text) const {
  std::vector<std::string> data;
  if (status == CollectiveStatus::ok && fence.collect) {
    for (const Contribution& c : fence.contributions) data.push_back(c.data);
  }
  std::vector<FenceReleaseFor> releases;
  for (const Contribution& c : fence.contributions)
    releases.push_back({c.node, protocol::FenceRelease{c.id, status, text, data}});
  return releases;
}

void FenceBook::drop_empty_keys() {
  std::erase_if(fences_, [](const auto& entry) { return entry.second.empty(); });
}

std::size_t FenceBook::pending() const {
  std::size_t count = 0;
  for (const auto& [key, queue] : fences_) count += queue.size();
  return count;
}

std::vector<std::string> FenceBook::waiting_for(std::size_t index) const {
  std::vector<const Fence*> ordered;
  for (const auto& [key, queue] : fences_) {
    for (const Fence& f : queue) ordered.push_back(&f);
  }
  std::ranges::sort(ordered, [](const Fence* a, const Fence* b) { return a->serial < b->serial; });
  std::vector<std::string> waiting;
  if (index >= ordered.size()) return waiting;
  for (const Member& m : ordered[index]->missing) waiting.push_back(member_text(m.nspace, m.rank));
  return waiting;
}

}  // namespace bellows::controller
