// The daemon's answers to PMIx_Query_info (bellows/daemon/queries.hpp), from a job view, with
// the statuses the standard gives them; and the PMIx results they become. No PMIx server:
// PMIx's info and data-array macros need none.

#include <bellows/daemon/queries.hpp>

#include <gtest/gtest.h>

#include <pmix.h>

#include <string>
#include <vector>

namespace bellows::daemon {
namespace {

namespace pr = bellows::protocol;

/// Job local-7 on three nodes; the ranks of local0 and local2 reported, local1's did not yet; an
/// expand onto local3 is granted.
pr::JobView three_nodes() {
  return pr::JobView{"local-7", {"local0", "local1", "local2"}, {0, pr::kNoRank, 1},
                     {1100, 0, 1300}, 3, 2, 4, "grow.toml", 5, pr::ResizeKind::expand,
                     "granted", 1, {"local3"}};
}

QueryResults ask(std::vector<Query> queries, const std::optional<pr::JobView>& view = three_nodes(),
                 const std::string& node = "local2") {
  return answer_queries(queries, view, node);
}

TEST(Queries, EveryKeyOfTheJobIsAnsweredFromAnyNode) {
  const QueryResults r = ask({{{PMIX_QUERY_NAMESPACES, PMIX_JOB_SIZE, PMIX_QUERY_PROC_TABLE,
                                PMIX_QUERY_LOCAL_PROC_TABLE, PMIX_QUERY_NAMESPACE_INFO,
                                PMIX_QUERY_ALLOC_STATUS, PMIX_QUERY_NUM_PSETS, kQueryResize,
                                kQueryNodeRange, kQueryPolicy},
                               "local-7",
                               std::nullopt}});
  EXPECT_EQ(r.status, PMIX_SUCCESS);
  EXPECT_TRUE(r.unsupported.empty());
  const std::vector<ProcEntry> all{{"local-7", 0, "local0", 1100}, {"local-7", 1, "local2", 1300}};
  const std::vector<QueryAnswer> expected{
      {PMIX_QUERY_NAMESPACES, std::string("local-7")},
      {PMIX_JOB_SIZE, std::uint32_t{3}},
      {PMIX_QUERY_PROC_TABLE, all},
      {PMIX_QUERY_LOCAL_PROC_TABLE, std::vector<ProcEntry>{all[1]}},
      {PMIX_QUERY_NAMESPACE_INFO,
       std::vector<NamespaceEntry>{{"local-7", 3, 3, "local0,local1,local2"}}},
      {PMIX_QUERY_ALLOC_STATUS,
       std::string("job local-7 holds 3 node(s) of 2:4 (local0,local1,local2); resize 5 expand "
                   "granted 1 local3")},
      {PMIX_QUERY_NUM_PSETS, std::size_t{0}},
      {kQueryResize, std::string("5 expand granted 1 local3")},
      {kQueryNodeRange, std::string("2:4")},
      {kQueryPolicy, std::string("grow.toml")}};
  EXPECT_EQ(r.answers, expected);
}

TEST(Queries, AnUnknownKeyMakesTheCallNotSupportedAndIsNamed) {
  const QueryResults r = ask({{{PMIX_JOB_SIZE}, {}, {}}, {{"pmix.qry.mem", PMIX_QUERY_NAMESPACES}, {}, {}}});
  EXPECT_EQ(r.status, PMIX_ERR_NOT_SUPPORTED);
  EXPECT_EQ(r.unsupported, std::vector<std::string>{"pmix.qry.mem"});
  EXPECT_EQ(r.answers.size(), 2u);  // the rest is answered; PMIx 4.2.2 drops it on the way
}

TEST(Queries, NothingAnsweredIsNotFoundAndSomeIsPartial) {
  // Before the controller described the job only the keys that need no job are answered.
  EXPECT_EQ(ask({{{PMIX_QUERY_NAMESPACES, PMIX_JOB_SIZE}, {}, {}}}, std::nullopt).status,
            PMIX_ERR_NOT_FOUND);
  const QueryResults partial =
      ask({{{PMIX_QUERY_NUM_PSETS, PMIX_QUERY_NAMESPACES}, {}, {}}}, std::nullopt);
  EXPECT_EQ(partial.status, PMIX_QUERY_PARTIAL_SUCCESS);
  EXPECT_EQ(partial.answers, (std::vector<QueryAnswer>{{PMIX_QUERY_NUM_PSETS, std::size_t{0}}}));
  // A namespace that is not the job's, and no process set: nothing to say.
  EXPECT_EQ(ask({{{PMIX_JOB_SIZE, PMIX_QUERY_PROC_TABLE}, "local-8", {}}}).status, PMIX_ERR_NOT_FOUND);
  EXPECT_EQ(ask({{{PMIX_QUERY_PSET_NAMES}, {}, {}}}).status, PMIX_ERR_NOT_FOUND);
  // A node whose rank did not report yet has no process table entry.
  EXPECT_EQ(ask({{{PMIX_QUERY_LOCAL_PROC_TABLE}, {}, {}}}, three_nodes(), "local1").status,
            PMIX_ERR_NOT_FOUND);
  // No policy: that key alone goes unanswered.
  pr::JobView no_policy = three_nodes();
  no_policy.policy.clear();
  const QueryResults r = ask({{{kQueryPolicy, kQueryNodeRange}, {}, {}}}, no_policy);
  EXPECT_EQ(r.status, PMIX_QUERY_PARTIAL_SUCCESS);
  EXPECT_EQ(r.answers, (std::vector<QueryAnswer>{{kQueryNodeRange, std::string("2:4")}}));
}

// The daemons define a process set of the job's ranks at each change (JOB.ranks.COUNT.HASH):
// the queries name it from the view's job map, the same from any node, ranks with a gap included.
TEST(Queries, TheProcessSetOfTheJobsRanksIsCountedAndNamed) {
  pr::JobView view = three_nodes();
  view.node_pmix_ranks = {0, 4, 1};
  view.pmix_rank_nodes = {"local0", "local2", "local5", "local6", "local1"};
  EXPECT_EQ(job_ranks(view), (std::vector<std::uint32_t>{0, 1, 4}));
  const QueryResults r = ask({{{PMIX_QUERY_NUM_PSETS, PMIX_QUERY_PSET_NAMES}, {}, {}}}, view, "local0");
  EXPECT_EQ(r.status, PMIX_SUCCESS);
  EXPECT_EQ(r.answers, (std::vector<QueryAnswer>{{PMIX_QUERY_NUM_PSETS, std::size_t{1}},
                                                 {PMIX_QUERY_PSET_NAMES, std::string("local-7.ranks.3.442a0750")}}));
  EXPECT_EQ(ask({{{PMIX_QUERY_PSET_NAMES}, {}, {}}}, view, "local1").answers,
            (std::vector<QueryAnswer>{{PMIX_QUERY_PSET_NAMES, std::string("local-7.ranks.3.442a0750")}}));
  EXPECT_EQ(job_ranks_set_name("local-7", {0, 1, 4}), "local-7.ranks.3.442a0750");
  EXPECT_EQ(job_ranks_set_name("local-7", {0, 1}), "local-7.ranks.2.4bb53254");
}

TEST(Queries, AllocationStatusOfAResizeByItsId) {
  EXPECT_EQ(ask({{{PMIX_QUERY_ALLOC_STATUS}, {}, "5"}}).answers,
            (std::vector<QueryAnswer>{{PMIX_QUERY_ALLOC_STATUS, std::string("5 expand granted 1 local3")}}));
  EXPECT_EQ(ask({{{PMIX_QUERY_ALLOC_STATUS}, {}, "4"}}).status, PMIX_ERR_NOT_FOUND);
  pr::JobView settled = three_nodes();
  settled.resize_id = 0;
  settled.resize_state.clear();
  settled.resize_count = 0;
  settled.resize_nodes.clear();
  EXPECT_EQ(ask({{{PMIX_QUERY_ALLOC_STATUS, kQueryResize}, {}, {}}}, settled).answers,
            (std::vector<QueryAnswer>{
                {PMIX_QUERY_ALLOC_STATUS,
                 std::string("job local-7 holds 3 node(s) of 2:4 (local0,local1,local2); no resize in flight")},
                {kQueryResize, std::string("none")}}));
}

TEST(Queries, SupportedKeysListsEveryAnsweredKey) {
  const QueryResults r = ask({{{PMIX_QUERY_SUPPORTED_KEYS}, {}, {}}}, std::nullopt);
  ASSERT_EQ(r.status, PMIX_SUCCESS);
  std::string expected;
  for (const auto& k : kAnsweredQueryKeys) {
    if (!expected.empty()) expected += ',';
    expected += k.key;
  }
  EXPECT_EQ(r.answers, (std::vector<QueryAnswer>{{PMIX_QUERY_SUPPORTED_KEYS, expected}}));
}

TEST(Queries, QueriesAreReadFromPmixWithTheirQualifiers) {
  pmix_query_t* q = nullptr;
  PMIX_QUERY_CREATE(q, 2);
  pmix_status_t rc_ignored = PMIX_SUCCESS;
  PMIX_ARGV_APPEND(rc_ignored, q[0].keys, PMIX_JOB_SIZE);
  PMIX_ARGV_APPEND(rc_ignored, q[0].keys, PMIX_QUERY_PROC_TABLE);
  PMIX_QUERY_QUALIFIERS_CREATE(&q[0], 2);
  PMIX_INFO_LOAD(&q[0].qualifiers[0], PMIX_NSPACE, "local-7", PMIX_STRING);
  const bool yes = true;
  PMIX_INFO_LOAD(&q[0].qualifiers[1], PMIX_QUERY_REFRESH_CACHE, &yes, PMIX_BOOL);
  PMIX_ARGV_APPEND(rc_ignored, q[1].keys, PMIX_QUERY_ALLOC_STATUS);
  PMIX_QUERY_QUALIFIERS_CREATE(&q[1], 1);
  PMIX_INFO_LOAD(&q[1].qualifiers[0], PMIX_ALLOC_ID, "5", PMIX_STRING);
  const std::vector<Query> read = read_queries(q, 2);
  PMIX_QUERY_FREE(q, 2);
  EXPECT_EQ(rc_ignored, PMIX_SUCCESS);
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].keys, (std::vector<std::string>{PMIX_JOB_SIZE, PMIX_QUERY_PROC_TABLE}));
  EXPECT_EQ(read[0].nspace, "local-7");
  EXPECT_EQ(read[0].alloc_id, std::nullopt);
  EXPECT_EQ(read[1].keys, std::vector<std::string>{PMIX_QUERY_ALLOC_STATUS});
  EXPECT_EQ(read[1].alloc_id, "5");
}

TEST(Queries, AnswersBecomePmixResultsKeyedByTheirKey) {
  const QueryResults r = ask({{{PMIX_JOB_SIZE, PMIX_QUERY_PROC_TABLE, PMIX_QUERY_NAMESPACE_INFO,
                                PMIX_QUERY_NUM_PSETS, PMIX_QUERY_NAMESPACES},
                               {},
                               {}}});
  InfoArray info = to_info(r.answers);
  ASSERT_EQ(info.size(), 5u);
  const pmix_info_t* i = info.data();
  EXPECT_STREQ(i[0].key, PMIX_JOB_SIZE);
  ASSERT_EQ(i[0].value.type, PMIX_UINT32);
  EXPECT_EQ(i[0].value.data.uint32, 3u);

  EXPECT_STREQ(i[1].key, PMIX_QUERY_PROC_TABLE);
  ASSERT_EQ(i[1].value.type, PMIX_DATA_ARRAY);
  const pmix_data_array_t* table = i[1].value.data.darray;
  ASSERT_EQ(table->type, PMIX_PROC_INFO);
  ASSERT_EQ(table->size, 2u);
  const auto* procs = static_cast<const pmix_proc_info_t*>(table->array);
  EXPECT_STREQ(procs[1].proc.nspace, "local-7");
  EXPECT_EQ(procs[1].proc.rank, 1u);
  EXPECT_STREQ(procs[1].hostname, "local2");
  EXPECT_EQ(procs[1].pid, 1300);
  EXPECT_EQ(procs[1].state, PMIX_PROC_STATE_RUNNING);
  ASSERT_NE(procs[1].executable_name, nullptr);  // a PMIx 4.2.2 tool crashes on NULL
  EXPECT_STREQ(procs[1].executable_name, "");

  EXPECT_STREQ(i[2].key, PMIX_QUERY_NAMESPACE_INFO);
  ASSERT_EQ(i[2].value.type, PMIX_DATA_ARRAY);
  const pmix_data_array_t* jobs = i[2].value.data.darray;
  ASSERT_EQ(jobs->type, PMIX_INFO);
  ASSERT_EQ(jobs->size, 1u);
  const auto* job = static_cast<const pmix_info_t*>(jobs->array);
  EXPECT_STREQ(job[0].key, PMIX_JOB_INFO_ARRAY);
  ASSERT_EQ(job[0].value.type, PMIX_DATA_ARRAY);
  const auto* fields = static_cast<const pmix_info_t*>(job[0].value.data.darray->array);
  ASSERT_EQ(job[0].value.data.darray->size, 4u);
  EXPECT_STREQ(fields[0].key, PMIX_NSPACE);
  EXPECT_STREQ(fields[0].value.data.string, "local-7");
  EXPECT_STREQ(fields[1].key, PMIX_JOB_SIZE);
  EXPECT_EQ(fields[1].value.data.uint32, 3u);
  EXPECT_STREQ(fields[2].key, PMIX_NUM_NODES);
  EXPECT_EQ(fields[2].value.data.uint32, 3u);
  EXPECT_STREQ(fields[3].key, PMIX_NODE_LIST);
  EXPECT_STREQ(fields[3].value.data.string, "local0,local1,local2");

  EXPECT_STREQ(i[3].key, PMIX_QUERY_NUM_PSETS);
  ASSERT_EQ(i[3].value.type, PMIX_SIZE);
  EXPECT_EQ(i[3].value.data.size, 0u);
  EXPECT_STREQ(i[4].key, PMIX_QUERY_NAMESPACES);
  ASSERT_EQ(i[4].value.type, PMIX_STRING);
  EXPECT_STREQ(i[4].value.data.string, "local-7");
}

}  // namespace
}  // namespace bellows::daemon
