#pragma once
// The answers bellowsd gives to PMIx_Query_info (the server module's `query` upcall): which
// keys it answers, and what, from the job as the controller last described it
// (protocol::JobView) and the daemon's own node. Answers are the job's from any node: the view
// holds every node, rank and pid of the job.
//
// Like PRRTE's server (src/prted/pmix/pmix_server_queries.c), the results are one flat array,
// an entry per answered key named by the key; the call's status says how complete it is:
//   - a key not in kAnsweredQueryKeys anywhere in the call: PMIX_ERR_NOT_SUPPORTED;
//   - no key answered (no view yet, a namespace qualifier naming another job, no such
//     resize, no process reported yet): PMIX_ERR_NOT_FOUND;
//   - some keys answered, not all: PMIX_QUERY_PARTIAL_SUCCESS;
//   - every key answered: PMIX_SUCCESS.
// PMIx 4.2.2 hands a tool the results only with PMIX_SUCCESS (docs/daemon.md).
//
// Thread safety: pure functions and value types; to_info() allocates with PMIx's macros and
// needs no PMIx server.

#include <bellows/daemon/payload.hpp>
#include <bellows/protocol/messages.hpp>

#include <pmix_common.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace bellows::daemon {

/// Bellows' own query keys (PMIX_STRING answers, docs/daemon.md).
/// The resize in flight: "none", or "ID KIND STATE COUNT NODES" ("3 expand granted 1 local2";
/// NODES comma-separated, "-" when none yet).
inline constexpr const char* kQueryResize = "bellows.query.resize";
/// The job's node range, as `bellows run --nodes` takes it: "MIN:MAX".
inline constexpr const char* kQueryNodeRange = "bellows.query.node_range";
/// The job's policy file as `bellows status` names it; not answered for a job without one.
inline constexpr const char* kQueryPolicy = "bellows.query.policy";

/// A key the daemon answers, the name of its constant and the PMIx type of its answer
/// ("PMIX_STRING"); docs/daemon.md lists them in a table checked against this one.
struct AnsweredQueryKey {
  std::string_view key;
  std::string_view constant;
  std::string_view type;
};

/// Every key the daemon answers; any other key makes the call PMIX_ERR_NOT_SUPPORTED.
inline constexpr AnsweredQueryKey kAnsweredQueryKeys[] = {
    {PMIX_QUERY_SUPPORTED_KEYS, "PMIX_QUERY_SUPPORTED_KEYS", "PMIX_STRING"},
    {PMIX_QUERY_NAMESPACES, "PMIX_QUERY_NAMESPACES", "PMIX_STRING"},
    {PMIX_QUERY_NAMESPACE_INFO, "PMIX_QUERY_NAMESPACE_INFO", "PMIX_DATA_ARRAY"},
    {PMIX_JOB_SIZE, "PMIX_JOB_SIZE", "PMIX_UINT32"},
    {PMIX_QUERY_PROC_TABLE, "PMIX_QUERY_PROC_TABLE", "PMIX_DATA_ARRAY"},
    {PMIX_QUERY_LOCAL_PROC_TABLE, "PMIX_QUERY_LOCAL_PROC_TABLE", "PMIX_DATA_ARRAY"},
    {PMIX_QUERY_ALLOC_STATUS, "PMIX_QUERY_ALLOC_STATUS", "PMIX_STRING"},
    {PMIX_QUERY_NUM_PSETS, "PMIX_QUERY_NUM_PSETS", "PMIX_SIZE"},
    {PMIX_QUERY_PSET_NAMES, "PMIX_QUERY_PSET_NAMES", "PMIX_STRING"},
    {kQueryResize, "kQueryResize", "PMIX_STRING"},
    {kQueryNodeRange, "kQueryNodeRange", "PMIX_STRING"},
    {kQueryPolicy, "kQueryPolicy", "PMIX_STRING"},
};

/// One pmix_query_t as values: its keys and the qualifiers the daemon reads.
struct Query {
  std::vector<std::string> keys;
  std::optional<std::string> nspace;    ///< PMIX_NSPACE: none means the job's namespace
  std::optional<std::string> alloc_id;  ///< PMIX_ALLOC_ID (PMIX_QUERY_ALLOC_STATUS)
};

/// A process of the job (an entry of a process table).
struct ProcEntry {
  std::string nspace;
  std::uint32_t rank = 0;
  std::string node;
  std::int32_t pid = 0;  ///< 0: not reported yet
  friend bool operator==(const ProcEntry&, const ProcEntry&) = default;
};

/// A namespace's entry of PMIX_QUERY_NAMESPACE_INFO.
struct NamespaceEntry {
  std::string nspace;
  std::uint32_t job_size = 0;
  std::uint32_t num_nodes = 0;
  std::string node_list;  ///< comma-separated
  friend bool operator==(const NamespaceEntry&, const NamespaceEntry&) = default;
};

using AnswerValue = std::variant<std::string, std::uint32_t, std::size_t, std::vector<ProcEntry>,
                                 std::vector<NamespaceEntry>>;

/// The answer to one key.
struct QueryAnswer {
  std::string key;
  AnswerValue value;
  friend bool operator==(const QueryAnswer&, const QueryAnswer&) = default;
};

struct QueryResults {
  pmix_status_t status = PMIX_SUCCESS;
  std::vector<QueryAnswer> answers;
  /// The keys asked that the daemon does not answer, in the order asked.
  std::vector<std::string> unsupported;
};

/// The queries of a pmix_query_t array as values.
std::vector<Query> read_queries(const pmix_query_t* queries, std::size_t nqueries);

/// Answers queries from view (none: no controller told this daemon of its job yet) on node.
QueryResults answer_queries(const std::vector<Query>& queries,
                            const std::optional<protocol::JobView>& view, const std::string& node);

/// The answers as PMIx results: one entry per answer, keyed by its key; a process table as a
/// PMIX_DATA_ARRAY of PMIX_PROC_INFO, namespace info as a PMIX_DATA_ARRAY of PMIX_INFO, one
/// PMIX_JOB_INFO_ARRAY (PMIX_NSPACE, PMIX_JOB_SIZE, PMIX_NUM_NODES, PMIX_NODE_LIST) per
/// namespace.
InfoArray to_info(const std::vector<QueryAnswer>& answers);

/// The value of kQueryResize for view.
std::string describe_resize(const protocol::JobView& view);

/// The job's ranks now as view says (each node's PMIx rank in the job map, ascending); none
/// for a view without a job map.
std::vector<std::uint32_t> job_ranks(const protocol::JobView& view);

/// The name of the process set the daemons define for the job's ranks `ranks` (ascending),
/// the same on every node: JOB.ranks.COUNT.HASH, HASH the 8 hex digits of FNV-1a over the
/// ranks' bytes (docs/daemon.md, "The job's namespace").
std::string job_ranks_set_name(const std::string& job, const std::vector<std::uint32_t>& ranks);

}  // namespace bellows::daemon
