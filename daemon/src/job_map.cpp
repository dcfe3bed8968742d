#include <bellows/daemon/job_map.hpp>

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace bellows::daemon {

std::string to_string(const JobMap& map) {
  std::string text;
  for (const MappedRank& mapped : map) {
    if (!text.empty()) text += ',';
    text += std::to_string(mapped.rank) + ":" + mapped.node;
  }
  return text;
}

JobRegistration plan_registration(const JobMap& map, const std::string& this_node) {
  std::vector<std::uint32_t> every_rank;
  for (const MappedRank& mapped : map) every_rank.push_back(mapped.rank);
  return plan_registration(map, every_rank, this_node);
}

JobRegistration plan_registration(const JobMap& map, const std::vector<std::uint32_t>& in_job,
                                  const std::string& this_node) {
  if (map.empty()) throw std::invalid_argument("job map: no rank");
  for (std::size_t i = 0; i < map.size(); ++i) {
    const MappedRank& mapped = map[i];
    if (mapped.node.empty())
      throw std::invalid_argument("job map: rank " + std::to_string(mapped.rank) + " has no node");
    // PMIx 4.2.2 refuses a client of a namespace whose ranks are not 0..n-1 (its stores are
    // indexed by rank): found by testing, docs/daemon.md.
    if (mapped.rank != i)
      throw std::invalid_argument("job map: rank " + std::to_string(mapped.rank) + " where rank " +
                                  std::to_string(i) + " belongs (every rank 0..n-1 once, ascending): " +
                                  to_string(map));
  }
  if (in_job.empty()) throw std::invalid_argument("job map " + to_string(map) + ": no rank in the job");
  std::vector<bool> member(map.size(), false);
  for (const std::uint32_t rank : in_job) {
    if (rank >= map.size())
      throw std::invalid_argument("job map " + to_string(map) + ": rank " + std::to_string(rank) +
                                  " is in the job but not in the map");
    member[rank] = true;
  }
  JobRegistration plan;
  for (std::size_t i = 0; i < map.size(); ++i) {
    const MappedRank& mapped = map[i];
    if (!member[i]) {
      plan.procs.push_back({mapped.rank, mapped.node, 0, 0, false});
      continue;
    }
    auto node = std::ranges::find(plan.nodes, mapped.node, &MappedNode::hostname);
    if (node == plan.nodes.end()) {
      plan.nodes.push_back({mapped.node, static_cast<std::uint32_t>(plan.nodes.size()), {}});
      node = plan.nodes.end() - 1;
    }
    if (node->ranks.size() > std::numeric_limits<std::uint16_t>::max())
      throw std::invalid_argument("job map: more than 65536 ranks on node " + mapped.node);
    plan.procs.push_back(
        {mapped.rank, mapped.node, node->node_id, static_cast<std::uint16_t>(node->ranks.size()), true});
    node->ranks.push_back(mapped.rank);
    ++plan.job_size;
  }
  plan.registered_size = plan.job_size;
  plan.num_nodes = static_cast<std::uint32_t>(plan.nodes.size());
  bool local_found = false;
  for (const MappedNode& node : plan.nodes) {
    if (!plan.node_list.empty()) plan.node_list += ',';
    plan.node_list += node.hostname;
    if (!plan.ppn_list.empty()) plan.ppn_list += ';';
    for (std::size_t i = 0; i < node.ranks.size(); ++i) {
      if (i > 0) plan.ppn_list += ',';
      plan.ppn_list += std::to_string(node.ranks[i]);
    }
    if (node.hostname == this_node) {
      plan.local = node;
      local_found = true;
    }
  }
  if (!local_found)
    throw std::invalid_argument("job map: no rank on node " + this_node + ", this daemon's: " + to_string(map));
  return plan;
}

JobRegistration keep_size_for_joiners(JobRegistration plan, const std::vector<std::uint32_t>& started_past_size,
                                      std::uint32_t numbers_given) {
  for (const std::uint32_t rank : started_past_size) {
    // A client learns its own info only when its rank is below PMIX_JOB_SIZE (PMIx 4.2.2).
    if (std::ranges::find(plan.local.ranks, rank) != plan.local.ranks.end())
      plan.registered_size = std::max(plan.registered_size, numbers_given);
  }
  return plan;
}

}  // namespace bellows::daemon
