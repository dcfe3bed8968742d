// The local backend: answers after its latency through progress(), cancellation, releases
// and queries.

#include "fake_clock.hpp"

#include "bellows/controller/local_resource_manager.hpp"

#include <gtest/gtest.h>

#include <optional>

namespace bellows::controller::testing {
namespace {

using namespace std::chrono_literals;
using Nodes = std::vector<std::string>;

class LocalResourceManagerTest : public ::testing::Test {
 protected:
  FakeClock clock;
  LocalNodePool pool{4};
  LocalResourceManager rm{pool, clock, 300ms};
};

TEST_F(LocalResourceManagerTest, AnswersOnlyFromProgressAfterItsLatency) {
  std::optional<ExpandAnswer> answer;
  const RmRequestId id = rm.request_expand({"7", 2, 1, 1000ms}, [&](ExpandAnswer a) { answer = a; });
  EXPECT_EQ(id, 1u);
  EXPECT_FALSE(answer);  // never from inside the call
  clock.advance(299ms);
  rm.progress();
  EXPECT_FALSE(answer);
  clock.advance(1ms);
  rm.progress();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status.code, RmCode::ok);
  EXPECT_EQ(answer->nodes, (Nodes{"local0", "local1"}));
  EXPECT_EQ(rm.nodes_of("7").value, (Nodes{"local0", "local1"}));
  EXPECT_EQ(rm.idle_nodes().value, (Nodes{"local2", "local3"}));
  EXPECT_EQ(rm.name(), "local");
  EXPECT_TRUE(rm.pending_jobs().value.empty());
  EXPECT_FALSE(rm.cancel_expand(id));  // already answered
}

TEST_F(LocalResourceManagerTest, CancelledRequestNeverAnswersAndTakesNothing) {
  bool called = false;
  const RmRequestId id = rm.request_expand({"7", 2, 2, 1000ms}, [&](ExpandAnswer) { called = true; });
  EXPECT_TRUE(rm.cancel_expand(id));
  EXPECT_FALSE(rm.cancel_expand(id));
  EXPECT_FALSE(rm.cancel_expand(0));
  clock.advance(1s);
  rm.progress();
  EXPECT_FALSE(called);
  EXPECT_EQ(rm.idle_nodes().value.size(), 4u);
}

TEST_F(LocalResourceManagerTest, DeniesWhatThePoolCannotGiveAndReleasesWithItsErrors) {
  (void)pool.allocate("5", 3);
  std::optional<ExpandAnswer> answer;
  rm.request_expand({"7", 2, 2, 1000ms}, [&](ExpandAnswer a) { answer = a; });
  std::optional<RmStatus> released;
  rm.release_nodes("7", {"local0"}, [&](RmStatus s) { released = s; });
  clock.advance(300ms);
  rm.progress();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status.code, RmCode::denied);
  EXPECT_EQ(answer->status.text, "allocation for job 7: 2 nodes requested, 1 idle in local0..local3");
  ASSERT_TRUE(released);
  EXPECT_EQ(released->code, RmCode::not_owner);
  EXPECT_EQ(released->text, "release of local0 by job 7: node is allocated to job 5");
  const auto unknown = rm.nodes_of("7");
  EXPECT_EQ(unknown.status.code, RmCode::unknown_job);
  EXPECT_EQ(unknown.status.text, "job 7 holds no node of the local pool");
}

TEST_F(LocalResourceManagerTest, CallbacksMayStartNewRequests) {
  std::optional<RmStatus> released;
  rm.request_expand({"7", 1, 1, 1000ms}, [&](ExpandAnswer a) {
    rm.release_nodes("7", a.nodes, [&](RmStatus s) { released = s; });
  });
  clock.advance(300ms);
  rm.progress();
  EXPECT_FALSE(released);  // the new request answers on a later progress()
  clock.advance(300ms);
  rm.progress();
  ASSERT_TRUE(released);
  EXPECT_EQ(released->text, "released 1 node of job 7");
}

}  // namespace
}  // namespace bellows::controller::testing
