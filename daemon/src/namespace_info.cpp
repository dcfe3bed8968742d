#include <bellows/daemon/namespace_info.hpp>

#include <pmix_common.h>

#include <stdexcept>
#include <utility>

namespace bellows::daemon {

namespace {

RegisteredInfo text(std::string_view key, std::string_view constant, std::string value) {
  return {key, constant, InfoForm::kString, std::move(value), 0};
}

RegisteredInfo number(std::string_view key, std::string_view constant, InfoForm form, std::uint32_t value) {
  return {key, constant, form, "", value};
}

/// The entries of one node of the job (PMIX_NODE_INFO_ARRAY).
std::vector<RegisteredInfo> node_entries(const MappedNode& node) {
  const auto size = static_cast<std::uint32_t>(node.ranks.size());
  return {
      text(PMIX_HOSTNAME, "PMIX_HOSTNAME", node.hostname),
      number(PMIX_NODEID, "PMIX_NODEID", InfoForm::kUint32, node.node_id),
      text(PMIX_LOCAL_PEERS, "PMIX_LOCAL_PEERS", joined_ranks(node.ranks)),
      number(PMIX_LOCAL_SIZE, "PMIX_LOCAL_SIZE", InfoForm::kUint32, size),
      number(PMIX_NODE_SIZE, "PMIX_NODE_SIZE", InfoForm::kUint32, size),
      number(PMIX_LOCALLDR, "PMIX_LOCALLDR", InfoForm::kRank, node.ranks.front()),
  };
}

/// The entries of one process of the job (PMIX_PROC_INFO_ARRAY, PMIX_RANK first). A rank that
/// left keeps its numbers and host name, without a node id or local rank.
std::vector<RegisteredInfo> proc_entries(const MappedProc& proc) {
  std::vector<RegisteredInfo> entries{
      number(PMIX_RANK, "PMIX_RANK", InfoForm::kRank, proc.rank),
      number(PMIX_GLOBAL_RANK, "PMIX_GLOBAL_RANK", InfoForm::kRank, proc.rank),
      number(PMIX_APP_RANK, "PMIX_APP_RANK", InfoForm::kRank, proc.rank),
      number(PMIX_APPNUM, "PMIX_APPNUM", InfoForm::kUint32, 0),
      text(PMIX_HOSTNAME, "PMIX_HOSTNAME", proc.hostname),
  };
  if (proc.in_job) {
    entries.push_back(number(PMIX_LOCAL_RANK, "PMIX_LOCAL_RANK", InfoForm::kUint16, proc.local_rank));
    entries.push_back(number(PMIX_NODE_RANK, "PMIX_NODE_RANK", InfoForm::kUint16, proc.local_rank));
    entries.push_back(number(PMIX_NODEID, "PMIX_NODEID", InfoForm::kUint32, proc.node_id));
  }
  return entries;
}

}  // namespace

NamespaceInfo namespace_info(const std::string& nspace, const JobRegistration& plan) {
  if (plan.local.ranks.empty())
    throw std::invalid_argument("namespace " + nspace + ": no rank on this daemon's node '" +
                                plan.local.hostname + "'");
  NamespaceInfo info;
  const std::uint32_t size = plan.registered_size;
  info.job = {
      text(PMIX_JOBID, "PMIX_JOBID", nspace),
      number(PMIX_JOB_SIZE, "PMIX_JOB_SIZE", InfoForm::kUint32, size),
      number(PMIX_UNIV_SIZE, "PMIX_UNIV_SIZE", InfoForm::kUint32, size),
      number(PMIX_MAX_PROCS, "PMIX_MAX_PROCS", InfoForm::kUint32, size),
      number(PMIX_NUM_NODES, "PMIX_NUM_NODES", InfoForm::kUint32, plan.num_nodes),
      {PMIX_NODE_MAP, "PMIX_NODE_MAP", InfoForm::kNodeRegex, plan.node_list, 0},
      {PMIX_PROC_MAP, "PMIX_PROC_MAP", InfoForm::kProcRegex, plan.ppn_list, 0},
      number(PMIX_JOB_NUM_APPS, "PMIX_JOB_NUM_APPS", InfoForm::kUint32, 1),
      number(PMIX_APPNUM, "PMIX_APPNUM", InfoForm::kUint32, 0),
      text(PMIX_LOCAL_PEERS, "PMIX_LOCAL_PEERS", joined_ranks(plan.local.ranks)),
      number(PMIX_LOCAL_SIZE, "PMIX_LOCAL_SIZE", InfoForm::kUint32,
             static_cast<std::uint32_t>(plan.local.ranks.size())),
      number(PMIX_LOCALLDR, "PMIX_LOCALLDR", InfoForm::kRank, plan.local.ranks.front()),
      text(PMIX_HOSTNAME, "PMIX_HOSTNAME", plan.local.hostname),
  };
  for (const MappedNode& node : plan.nodes) {
    if (node.ranks.empty())
      throw std::invalid_argument("namespace " + nspace + ": node '" + node.hostname + "' has no rank of the job");
    info.nodes.push_back(node_entries(node));
  }
  for (const MappedProc& proc : plan.procs) info.procs.push_back(proc_entries(proc));
  return info;
}

std::string joined_ranks(const std::vector<std::uint32_t>& ranks) {
  std::string out;
  for (const std::uint32_t rank : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(rank);
  }
  return out;
}

}  // namespace bellows::daemon
