#include <bellows/daemon/queries.hpp>

#include <pmix.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace bellows::daemon {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) {
    if (!text.empty()) text += ',';
    text += item;
  }
  return text;
}

bool answered(std::string_view key) {
  return std::ranges::any_of(kAnsweredQueryKeys,
                             [key](const AnsweredQueryKey& k) { return k.key == key; });
}

/// Whether a query's namespace qualifier names the job of view (no qualifier: it does).
bool names_the_job(const Query& query, const protocol::JobView& view) {
  return !query.nspace || *query.nspace == view.job;
}

std::vector<ProcEntry> proc_table(const protocol::JobView& view, const std::string* only_node) {
  std::vector<ProcEntry> table;
  for (std::size_t i = 0; i < view.nodes.size(); ++i) {
    if (view.node_ranks[i] == protocol::kNoRank) continue;  // its rank did not report yet
    if (only_node != nullptr && view.nodes[i] != *only_node) continue;
    table.push_back({view.job, view.node_ranks[i], view.nodes[i], view.node_pids[i]});
  }
  std::ranges::sort(table, {}, &ProcEntry::rank);
  return table;
}

std::string alloc_status(const protocol::JobView& view) {
  std::string text = "job " + view.job + " holds " + std::to_string(view.nodes.size()) +
                     " node(s) of " + std::to_string(view.min_nodes) + ":" +
                     std::to_string(view.max_nodes) + " (" + join(view.nodes) + ")";
  if (view.resize_id == 0) return text + "; no resize in flight";
  return text + "; resize " + describe_resize(view);
}

/// The answer to `key` of `query`, or none.
std::optional<AnswerValue> answer(const std::string& key, const Query& query,
                                  const std::optional<protocol::JobView>& view,
                                  const std::string& node) {
  if (key == PMIX_QUERY_SUPPORTED_KEYS) {
    std::vector<std::string> keys;
    for (const auto& k : kAnsweredQueryKeys) keys.emplace_back(k.key);
    return join(keys);
  }
  // One process set: the job's ranks now, defined by every daemon at each change.
  if (key == PMIX_QUERY_NUM_PSETS) return std::size_t{view && !job_ranks(*view).empty() ? 1u : 0u};
  if (!view) return std::nullopt;
  if (key == PMIX_QUERY_NAMESPACES) return view->job;
  if (key == PMIX_QUERY_PSET_NAMES) {
    const auto ranks = job_ranks(*view);
    if (ranks.empty()) return std::nullopt;
    return job_ranks_set_name(view->job, ranks);
  }
  if (key == kQueryNodeRange)
    return std::to_string(view->min_nodes) + ":" + std::to_string(view->max_nodes);
  if (key == kQueryPolicy) {
    if (view->policy.empty()) return std::nullopt;
    return view->policy;
  }
  if (key == kQueryResize) return describe_resize(*view);
  if (key == PMIX_QUERY_ALLOC_STATUS) {
    if (!query.alloc_id) return alloc_status(*view);
    if (view->resize_id == 0 || *query.alloc_id != std::to_string(view->resize_id))
      return std::nullopt;  // only the resize in flight is known here
    return describe_resize(*view);
  }
  if (!names_the_job(query, *view)) return std::nullopt;
  if (key == PMIX_JOB_SIZE) return view->ranks;
  if (key == PMIX_QUERY_NAMESPACE_INFO) {
    return std::vector<NamespaceEntry>{{view->job, view->ranks,
                                        static_cast<std::uint32_t>(view->nodes.size()),
                                        join(view->nodes)}};
  }
  const bool local = key == PMIX_QUERY_LOCAL_PROC_TABLE;
  if (local || key == PMIX_QUERY_PROC_TABLE) {
    auto table = proc_table(*view, local ? &node : nullptr);
    if (table.empty()) return std::nullopt;
    return table;
  }
  return std::nullopt;
}

/// Loads data (of PMIx type type) into a fresh info under key.
void load(pmix_info_t& info, const char* key, const void* data, pmix_data_type_t type) {
  PMIX_INFO_LOAD(&info, key, data, type);
}

}  // namespace

std::string describe_resize(const protocol::JobView& view) {
  if (view.resize_id == 0) return "none";
  const std::string nodes = view.resize_nodes.empty() ? "-" : join(view.resize_nodes);
  return std::to_string(view.resize_id) + " " +
         (view.resize_kind == protocol::ResizeKind::expand ? "expand" : "shrink") + " " +
         view.resize_state + " " + std::to_string(view.resize_count) + " " + nodes;
}

std::vector<std::uint32_t> job_ranks(const protocol::JobView& view) {
  std::vector<std::uint32_t> ranks;
  for (const std::uint32_t rank : view.node_pmix_ranks)
    if (rank != protocol::kNoRank) ranks.push_back(rank);
  std::ranges::sort(ranks);
  return ranks;
}

std::string job_ranks_set_name(const std::string& job, const std::vector<std::uint32_t>& ranks) {
  std::uint32_t hash = 2166136261u;  // FNV-1a over the ranks' bytes
  for (const std::uint32_t rank : ranks) {
    for (int shift = 0; shift < 32; shift += 8) hash = (hash ^ ((rank >> shift) & 0xffu)) * 16777619u;
  }
  char digits[9];
  std::snprintf(digits, sizeof digits, "%08x", hash);
  return job + ".ranks." + std::to_string(ranks.size()) + "." + digits;
}

std::vector<Query> read_queries(const pmix_query_t* queries, std::size_t nqueries) {
  std::vector<Query> out;
  for (std::size_t n = 0; n < nqueries; ++n) {
    Query query;
    for (char** key = queries[n].keys; key != nullptr && *key != nullptr; ++key)
      query.keys.emplace_back(*key);
    for (std::size_t q = 0; q < queries[n].nqual; ++q) {
      const pmix_info_t& qual = queries[n].qualifiers[q];
      if (qual.value.type != PMIX_STRING || qual.value.data.string == nullptr) continue;
      if (PMIX_CHECK_KEY(&qual, PMIX_NSPACE))
        query.nspace = qual.value.data.string;
      else if (PMIX_CHECK_KEY(&qual, PMIX_ALLOC_ID))
        query.alloc_id = qual.value.data.string;
    }
    out.push_back(std::move(query));
  }
  return out;
}

QueryResults answer_queries(const std::vector<Query>& queries,
                            const std::optional<protocol::JobView>& view, const std::string& node) {
  QueryResults results;
  std::size_t asked = 0;
  for (const auto& query : queries) {
    for (const auto& key : query.keys) {
      ++asked;
      if (!answered(key)) {
        results.unsupported.push_back(key);
        continue;
      }
      if (auto value = answer(key, query, view, node))
        results.answers.push_back({key, std::move(*value)});
    }
  }
  if (!results.unsupported.empty())
    results.status = PMIX_ERR_NOT_SUPPORTED;
  else if (results.answers.empty())
    results.status = PMIX_ERR_NOT_FOUND;
  else if (results.answers.size() < asked)
    results.status = PMIX_QUERY_PARTIAL_SUCCESS;
  else
    results.status = PMIX_SUCCESS;
  return results;
}

InfoArray to_info(const std::vector<QueryAnswer>& answers) {
  InfoArray info(answers.size());
  for (std::size_t i = 0; i < answers.size(); ++i) {
    const char* key = answers[i].key.c_str();
    pmix_info_t& entry = info.data()[i];
    std::visit(
        [&](const auto& value) {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, std::string>) {
            load(entry, key, value.c_str(), PMIX_STRING);
          } else if constexpr (std::is_same_v<T, std::uint32_t>) {
            load(entry, key, &value, PMIX_UINT32);
          } else if constexpr (std::is_same_v<T, std::size_t>) {
            load(entry, key, &value, PMIX_SIZE);
          } else if constexpr (std::is_same_v<T, std::vector<ProcEntry>>) {
            pmix_data_array_t* array = nullptr;
            PMIX_DATA_ARRAY_CREATE(array, value.size(), PMIX_PROC_INFO);
            auto* procs = static_cast<pmix_proc_info_t*>(array->array);
            for (std::size_t p = 0; p < value.size(); ++p) {
              PMIX_LOAD_PROCID(&procs[p].proc, value[p].nspace.c_str(), value[p].rank);
              procs[p].hostname = ::strdup(value[p].node.c_str());
              // Not known here; never NULL: a PMIx 4.2.2 tool that caches a second process
              // table compares the entries' names with strcmp and crashes on NULL.
              procs[p].executable_name = ::strdup("");
              procs[p].pid = value[p].pid;
              procs[p].exit_code = 0;
              procs[p].state = PMIX_PROC_STATE_RUNNING;
            }
            load(entry, key, array, PMIX_DATA_ARRAY);
            PMIX_DATA_ARRAY_FREE(array);
          } else {
            pmix_data_array_t* jobs = nullptr;
            PMIX_DATA_ARRAY_CREATE(jobs, value.size(), PMIX_INFO);
            auto* job_infos = static_cast<pmix_info_t*>(jobs->array);
            for (std::size_t j = 0; j < value.size(); ++j) {
              pmix_data_array_t* fields = nullptr;
              PMIX_DATA_ARRAY_CREATE(fields, 4, PMIX_INFO);
              auto* f = static_cast<pmix_info_t*>(fields->array);
              load(f[0], PMIX_NSPACE, value[j].nspace.c_str(), PMIX_STRING);
              load(f[1], PMIX_JOB_SIZE, &value[j].job_size, PMIX_UINT32);
              load(f[2], PMIX_NUM_NODES, &value[j].num_nodes, PMIX_UINT32);
              load(f[3], PMIX_NODE_LIST, value[j].node_list.c_str(), PMIX_STRING);
              load(job_infos[j], PMIX_JOB_INFO_ARRAY, fields, PMIX_DATA_ARRAY);
              PMIX_DATA_ARRAY_FREE(fields);
            }
            load(entry, key, jobs, PMIX_DATA_ARRAY);
            PMIX_DATA_ARRAY_FREE(jobs);
          }
        },
        answers[i].value);
  }
  return info;
}

}  // namespace bellows::daemon
