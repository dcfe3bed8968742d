#pragma once
// The job, node and process info a daemon registers its job's namespace with
// (PMIx_server_register_nspace), as values: every key with the value it is given for a
// registration plan (bellows/daemon/job_map.hpp). The launcher turns each entry into a
// pmix_info_t; docs/daemon.md ("The job's namespace") lists the keys of each level in a table
// checked against this function.
//
// No PMIx calls here: the node and process maps are given as the inputs of PMIx_generate_regex
// and PMIx_generate_ppn, which the launcher calls.
//
// Thread safety: pure functions and value types.

#include <bellows/daemon/job_map.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::daemon {

/// How an entry's value is handed to PMIx.
enum class InfoForm {
  kString,     ///< PMIX_STRING: text
  kUint32,     ///< PMIX_UINT32: number
  kUint16,     ///< PMIX_UINT16: number (below 65536)
  kRank,       ///< PMIX_PROC_RANK: number
  kNodeRegex,  ///< PMIX_REGEX: PMIx_generate_regex of text (host names, comma-separated)
  kProcRegex,  ///< PMIX_REGEX: PMIx_generate_ppn of text (each node's ranks, nodes separated by ';')
};

/// One entry of the registration: the PMIx key ("pmix.job.size"), the name of its constant as
/// docs/daemon.md writes it ("PMIX_JOB_SIZE"), and its value (text or number, by form).
struct RegisteredInfo {
  std::string_view key;
  std::string_view constant;
  InfoForm form = InfoForm::kString;
  std::string text;
  std::uint32_t number = 0;
  bool operator==(const RegisteredInfo&) const = default;
};

/// What a namespace is registered with: the job-level entries (this node's included), then one
/// PMIX_NODE_INFO_ARRAY per node of the job (in node id order) and one PMIX_PROC_INFO_ARRAY per
/// rank of the map (in rank order, PMIX_RANK first; a rank that left without a node id, local
/// or node rank).
struct NamespaceInfo {
  std::vector<RegisteredInfo> job;
  std::vector<std::vector<RegisteredInfo>> nodes;
  std::vector<std::vector<RegisteredInfo>> procs;
  bool operator==(const NamespaceInfo&) const = default;
};

/// The info of namespace `nspace` registered by `plan` (as PRRTE's server registers a job,
/// src/prted/pmix/pmix_server_register_fns.c). The sizes are plan.registered_size. Throws
/// std::invalid_argument naming the namespace and the node when this daemon's node or a node
/// of the job has no rank (plan_registration never plans one).
NamespaceInfo namespace_info(const std::string& nspace, const JobRegistration& plan);

/// Rank numbers as PMIx lists them (PMIX_LOCAL_PEERS, a process set in the log): "0,1,4".
std::string joined_ranks(const std::vector<std::uint32_t>& ranks);

}  // namespace bellows::daemon
