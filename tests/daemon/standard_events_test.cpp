// The standard PMIx events a failure and the job's end become (bellows/daemon/standard_events.hpp),
// without a PMIx server: codes, affected processes named as the process table names them,
// host names, exit codes and texts.

#include <bellows/daemon/standard_events.hpp>

#include <gtest/gtest.h>

namespace bellows::daemon {
namespace {

using protocol::LossCause;
using protocol::RanksLost;

TEST(StandardEvents, ARankKilledBySignalIsAbortedBySig) {
  const RanksLost lost{1, {2}, {"local2"}, "a rank on local2 died: rank 2 (pid 4711) killed by signal 9",
                       LossCause::rank_died, 0, 9};
  const auto events = lost_events(lost, "local-7");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], (StandardEvent{PMIX_ERR_PROC_ABORTED_BY_SIG, {ProcId{"local-7", 2}}, "local2",
                                      std::nullopt, lost.reason}));
}

TEST(StandardEvents, ARankThatExitedCarriesItsExitCode) {
  const RanksLost lost{3, {1}, {"n1"}, "rank 1 (pid 80) exit status 3", LossCause::rank_died, 3, 0};
  const auto events = lost_events(lost, "job-1");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], (StandardEvent{PMIX_EVENT_PROC_TERMINATED, {ProcId{"job-1", 1}}, "n1", 3, lost.reason}));
}

TEST(StandardEvents, ARankWhoseEndIsUnknownIsTerminatedWithoutExitCode) {
  const RanksLost lost{4, {3}, {"n3"}, "rank 3 (pid 81) its process disappeared", LossCause::rank_died, -1, 0};
  const auto events = lost_events(lost, "job-1");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].code, PMIX_EVENT_PROC_TERMINATED);
  EXPECT_EQ(events[0].exit_code, std::nullopt);
}

TEST(StandardEvents, ALostNodeIsNodeDownThenItsRankTerminated) {
  const RanksLost lost{2, {1}, {"local1"}, "the daemon of local1 went away", LossCause::node_lost, -1, 0};
  const auto events = lost_events(lost, "local-7");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], (StandardEvent{PMIX_EVENT_NODE_DOWN, {ProcId{"local-7", 1}}, "local1", std::nullopt,
                                      lost.reason}));
  EXPECT_EQ(events[1], (StandardEvent{PMIX_EVENT_PROC_TERMINATED, {ProcId{"local-7", 1}}, "local1",
                                      std::nullopt, lost.reason}));
}

TEST(StandardEvents, ALostNodeWhoseRankWasNeverReportedIsNodeDownAlone) {
  const RanksLost lost{5, {}, {"n4"}, "the daemon of n4 went away", LossCause::node_lost, -1, 0};
  const auto events = lost_events(lost, "job-1");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], (StandardEvent{PMIX_EVENT_NODE_DOWN, {}, "n4", std::nullopt, lost.reason}));
}

TEST(StandardEvents, WithoutTheJobsNamespaceNoProcessIsNamed) {
  const RanksLost lost{6, {2}, {"n2"}, "the daemon of n2 went away", LossCause::node_lost, -1, 0};
  for (const auto& event : lost_events(lost, "")) EXPECT_TRUE(event.affected.empty()) << event.code;
}

TEST(StandardEvents, TheJobsEndNamesTheWholeNamespace) {
  EXPECT_EQ(job_end_event("local-7", "the job ended"),
            (StandardEvent{PMIX_EVENT_JOB_END, {ProcId{"local-7", PMIX_RANK_WILDCARD}}, "", std::nullopt,
                           "the job ended"}));
  EXPECT_TRUE(job_end_event("", "the job ended").affected.empty());
}

TEST(StandardEvents, EveryCodeHasItsConstantAndNoneIsBellows) {
  EXPECT_EQ(standard_event_constant(PMIX_EVENT_NODE_DOWN), "PMIX_EVENT_NODE_DOWN");
  EXPECT_EQ(standard_event_constant(PMIX_ERR_PROC_ABORTED_BY_SIG), "PMIX_ERR_PROC_ABORTED_BY_SIG");
  EXPECT_EQ(standard_event_constant(-3110), "");
  // Bellows' own codes sit below PMIX_EXTERNAL_ERR_BASE - 100; the standard ones above it.
  for (const auto& event : kStandardEventCodes) EXPECT_GT(event.code, PMIX_EXTERNAL_ERR_BASE) << event.constant;
}

}  // namespace
}  // namespace bellows::daemon
