#pragma once
// The job map a daemon registers its job's PMIx namespace with: which ranks run on which node,
// for the whole job, and what each piece of PMIx job, node and process info then says.
// PRRTE's server registers the same keys (src/prted/pmix/pmix_server_register_fns.c); what is
// registered where is written down in docs/daemon.md ("The job's namespace").
//
// No PMIx calls here: values only, so that the map is checked and planned without a server
// (namespace_info.hpp gives a plan's keys and values; the launcher turns them into
// PMIx_server_register_nspace's info).
//
// Thread safety: pure functions and value types.

#include <cstdint>
#include <string>
#include <vector>

namespace bellows::daemon {

/// One rank of the job and the node it runs on.
struct MappedRank {
  std::string node;
  std::uint32_t rank = 0;
  bool operator==(const MappedRank&) const = default;
};

/// The job's ranks 0..n-1, each with its node, in rank order. A rank that left stays in the
/// map at the node it ran on (PMIx 4.2.2 takes a namespace's ranks only as 0..n-1).
using JobMap = std::vector<MappedRank>;

/// A node of the job: its host name, its PMIx node id (the job's nodes numbered 0.. in the
/// order of their lowest rank), and the job's ranks on it, ascending.
struct MappedNode {
  std::string hostname;
  std::uint32_t node_id = 0;
  std::vector<std::uint32_t> ranks;
  bool operator==(const MappedNode&) const = default;
};

/// What one process of the job is told of itself (PMIX_PROC_INFO_ARRAY).
struct MappedProc {
  std::uint32_t rank = 0;
  std::string hostname;
  std::uint32_t node_id = 0;
  /// Its place among the job's ranks on its node now, from 0 (PMIX_LOCAL_RANK): a rank that
  /// left the node is not counted, as PRRTE counts a job's ranks. As only this job's ranks run
  /// on a node of the job, the same as PMIX_NODE_RANK.
  std::uint16_t local_rank = 0;
  /// False for a rank that left the job: it keeps its number and its node's name (a
  /// namespace's ranks are 0..n-1), and has no node id or local rank any more.
  bool in_job = true;
  bool operator==(const MappedProc&) const = default;
};

/// What a daemon registers for its job: the job-level values (PMIX_JOB_SIZE, PMIX_UNIV_SIZE,
/// PMIX_NUM_NODES), the inputs of PMIx_generate_regex (PMIX_NODE_MAP: host names in node id
/// order, comma-separated) and PMIx_generate_ppn (PMIX_PROC_MAP: each node's ranks,
/// comma-separated, the nodes separated by ';'), every node and every process, and which
/// ranks are local (this daemon's node). The sizes, the maps and the nodes count the ranks in
/// the job now; procs has every rank of the map, those that left included.
struct JobRegistration {
  std::uint32_t job_size = 0;
  /// PMIX_JOB_SIZE, PMIX_UNIV_SIZE and PMIX_MAX_PROCS as registered: job_size, or the numbers
  /// given (keep_size_for_joiners).
  std::uint32_t registered_size = 0;
  std::uint32_t num_nodes = 0;
  std::string node_list;
  std::string ppn_list;
  std::vector<MappedNode> nodes;
  std::vector<MappedProc> procs;
  /// The node of this daemon; its ranks are the local ones (PMIX_LOCAL_PEERS, PMIX_LOCAL_SIZE).
  MappedNode local;
  bool operator==(const JobRegistration&) const = default;
};

/// The registration of `map` by the daemon of `this_node`. Throws std::invalid_argument naming
/// what is wrong: an empty map, a rank out of its place (not 0..n-1 in order), an empty node
/// name, or this_node with no rank of the job.
JobRegistration plan_registration(const JobMap& map, const std::string& this_node);

/// The registration of `map` by the daemon of `this_node` when only the ranks `in_job` are in
/// the job now (a shrink or a loss took the others): the job's size, nodes, node ids and maps
/// are those of `in_job`'s ranks; the others stay in procs, not in_job. Throws as above, and
/// std::invalid_argument naming the rank when `in_job` is empty or names a rank past the map's
/// end, or when this_node has no rank in the job.
JobRegistration plan_registration(const JobMap& map, const std::vector<std::uint32_t>& in_job,
                                  const std::string& this_node);

/// `plan` for a node that started the ranks `started_past_size` when their numbers were not
/// below the job's size (a grow after a shrink: rank 4 of ranks 0, 1 and 4): while one of them
/// is still one of the node's ranks in the job, registered_size is `numbers_given` (the map's
/// size). PMIx 4.2.2 gives a client none of its own info (its local and node rank, its host)
/// when its rank is not below PMIX_JOB_SIZE, and the client fetches that info after its
/// connection, which may come after the grow's commit registered the job again
/// (docs/daemon.md, "What PMIx 4.2.2 does here").
JobRegistration keep_size_for_joiners(JobRegistration plan, const std::vector<std::uint32_t>& started_past_size,
                                      std::uint32_t numbers_given);

/// "0:local0,1:local1" (the map as logs and errors show it).
std::string to_string(const JobMap& map);

}  // namespace bellows::daemon
