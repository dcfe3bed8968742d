// The local node pool: names, allocation order, partial grants, and every release error
// naming the node and the job; the pool shared through its state file by several processes,
// the queue of waiting jobs, and the nodes of a killed job given back.

#include "bellows/controller/local_node_pool.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace bellows::controller {
namespace {

using Nodes = std::vector<std::string>;

TEST(LocalNodePool, NamesNodesByIndex) {
  LocalNodePool pool(3);
  EXPECT_EQ(pool.size(), 3u);
  EXPECT_EQ(pool.names(), (Nodes{"local0", "local1", "local2"}));
  EXPECT_EQ(pool.idle_nodes(), pool.names());
  EXPECT_TRUE(pool.contains("local2"));
  EXPECT_FALSE(pool.contains("local3"));
  EXPECT_FALSE(pool.contains("local"));
  EXPECT_FALSE(pool.contains("local01"));
  EXPECT_FALSE(pool.contains("local-1"));
  EXPECT_FALSE(pool.contains("local1x"));
  EXPECT_FALSE(pool.contains("remote1"));
  EXPECT_EQ(LocalNodePool(12, "n").names().back(), "n11");
}

TEST(LocalNodePool, RefusesAnEmptyPoolOrPrefix) {
  try {
    LocalNodePool pool(0);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "local node pool: needs at least 1 node, got 0");
  }
  try {
    LocalNodePool pool(2, "");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "local node pool: the node name prefix is empty");
  }
}

TEST(LocalNodePool, AllocatesTheLowestIdleNodes) {
  LocalNodePool pool(4);
  auto a = pool.allocate("7", 2);
  EXPECT_EQ(a.status.code, RmCode::ok);
  EXPECT_EQ(a.status.text, "granted 2 of 2 nodes requested");
  EXPECT_EQ(a.nodes, (Nodes{"local0", "local1"}));
  EXPECT_EQ(pool.release("7", {"local0"}).code, RmCode::ok);
  auto b = pool.allocate("8", 2);
  EXPECT_EQ(b.nodes, (Nodes{"local0", "local2"}));
  EXPECT_EQ(pool.owner_of("local1"), "7");
  EXPECT_EQ(pool.owner_of("local3"), std::nullopt);
  EXPECT_EQ(pool.owner_of("local9"), std::nullopt);
  EXPECT_EQ(pool.nodes_of("8"), (Nodes{"local0", "local2"}));
  EXPECT_EQ(pool.idle_nodes(), (Nodes{"local3"}));
}

TEST(LocalNodePool, GrantsPartiallyDownToMinCountElseDenies) {
  LocalNodePool pool(4);
  (void)pool.allocate("7", 2);
  auto partial = pool.allocate("8", 3, 1);
  EXPECT_EQ(partial.status.code, RmCode::ok);
  EXPECT_EQ(partial.status.text, "granted 2 of 3 nodes requested");
  EXPECT_EQ(partial.nodes, (Nodes{"local2", "local3"}));
  auto denied = pool.allocate("9", 1);
  EXPECT_EQ(denied.status.code, RmCode::denied);
  EXPECT_EQ(denied.status.text, "allocation for job 9: 1 node requested, 0 idle in local0..local3");
  EXPECT_TRUE(denied.nodes.empty());
  EXPECT_EQ(pool.release("8", {"local3"}).code, RmCode::ok);
  auto all_or_nothing = pool.allocate("9", 2);
  EXPECT_EQ(all_or_nothing.status.text, "allocation for job 9: 2 nodes requested, 1 idle in local0..local3");
  EXPECT_EQ(pool.idle_nodes(), (Nodes{"local3"}));  // a denial takes nothing
}

TEST(LocalNodePool, RefusesMalformedAllocations) {
  LocalNodePool pool(2);
  EXPECT_EQ(pool.allocate("", 1).status.text, "allocation without a job id");
  EXPECT_EQ(pool.allocate("7", 0).status.text, "allocation for job 7: count must be at least 1, got 0");
  EXPECT_EQ(pool.allocate("7", 2, 3).status.text, "allocation for job 7: min_count must be in [1, 2], got 3");
  EXPECT_EQ(pool.allocate("7", 2, 0).status.code, RmCode::bad_request);
  EXPECT_EQ(pool.idle_nodes().size(), 2u);
}

TEST(LocalNodePool, ReleaseErrorsNameTheNodeAndChangeNothing) {
  LocalNodePool pool(4);
  (void)pool.allocate("5", 1);  // local0
  (void)pool.allocate("7", 2);  // local1, local2
  const auto expect = [&](const Nodes& nodes, RmCode code, const std::string& text) {
    const RmStatus s = pool.release("7", nodes);
    EXPECT_EQ(s.code, code) << text;
    EXPECT_EQ(s.text, text);
  };
  expect({"local1", "local0"}, RmCode::not_owner, "release of local0 by job 7: node is allocated to job 5");
  expect({"local1", "local3"}, RmCode::not_owner, "release of local3 by job 7: node is idle");
  expect({"local1", "local9"}, RmCode::unknown_node, "release of local9 by job 7: no such node in local0..local3");
  expect({"local1", "local1"}, RmCode::bad_request, "release of local1 by job 7: node listed twice");
  expect({}, RmCode::bad_request, "release by job 7: no nodes listed");
  EXPECT_EQ(pool.release("", {"local1"}).text, "release without a job id");
  // All or nothing: local1 is still job 7's after every failed release above.
  EXPECT_EQ(pool.nodes_of("7"), (Nodes{"local1", "local2"}));
  expect({"local2", "local1"}, RmCode::ok, "released 2 nodes of job 7");
  EXPECT_TRUE(pool.nodes_of("7").empty());
}

TEST(LocalNodePool, ReleaseAllFreesEveryNodeOfTheJob) {
  LocalNodePool pool(4);
  (void)pool.allocate("7", 3);
  (void)pool.allocate("8", 1);
  EXPECT_EQ(pool.release_all("7"), 3u);
  EXPECT_EQ(pool.release_all("7"), 0u);
  EXPECT_EQ(pool.release_all(""), 0u);
  EXPECT_EQ(pool.idle_nodes(), (Nodes{"local0", "local1", "local2"}));
}

// ---------------------------------------------------------------- one pool per host

class SharedPool : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/bellows-pool-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    file_ = dir_ / "local-pool.json";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::filesystem::path file_;
};

TEST_F(SharedPool, TwoJobsOpeningOneFileShareOnePool) {
  LocalNodePool a(file_, 4);
  LocalNodePool b(file_, 6);  // grows the pool for everyone
  EXPECT_EQ(a.size(), 6u);
  EXPECT_EQ(a.allocate("job-a", 2).nodes, (Nodes{"local0", "local1"}));
  EXPECT_EQ(b.allocate("job-b", 2).nodes, (Nodes{"local2", "local3"}));
  // job-a grows onto what is idle, not onto job-b's nodes.
  const auto grown = a.allocate("job-a", 4, 1);
  EXPECT_EQ(grown.nodes, (Nodes{"local4", "local5"}));
  EXPECT_EQ(grown.status.text, "granted 2 of 4 nodes requested");
  EXPECT_EQ(b.owner_of("local4"), "job-a");
  EXPECT_EQ(b.release("job-b", {"local0"}).text, "release of local0 by job job-b: node is allocated to job job-a");
  EXPECT_TRUE(b.idle_nodes().empty());
  EXPECT_EQ(a.release_all("job-a"), 4u);
  EXPECT_EQ(b.idle_nodes(), (Nodes{"local0", "local1", "local4", "local5"}));
  EXPECT_EQ((std::filesystem::status(file_).permissions() & std::filesystem::perms::all),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST_F(SharedPool, WaitingJobsGetTheNodesFirstOldestFirst) {
  LocalNodePool pool(file_, 4);
  ASSERT_TRUE(pool.allocate("running", 3).status.ok());
  ASSERT_FALSE(pool.allocate("first", 2).status.ok());
  pool.wait_for("first", 2);
  pool.wait_for("second", 1);
  EXPECT_EQ(pool.waiting_jobs().size(), 2u);
  EXPECT_EQ(pool.waiting_jobs().front().id, "first");
  // One node idle: the queue holds it; a running job's expand does not take it.
  const auto expand = pool.allocate("running", 1);
  EXPECT_EQ(expand.status.code, RmCode::denied);
  EXPECT_EQ(expand.status.text,
            "allocation for job running: 1 node requested, 1 idle in local0..local3, 1 of them waited "
            "for by queued jobs");
  // The second in the queue waits behind the first.
  EXPECT_FALSE(pool.allocate("second", 1).status.ok());
  ASSERT_TRUE(pool.release("running", {"local1", "local2"}).ok());
  EXPECT_EQ(pool.allocate("first", 2).nodes, (Nodes{"local1", "local2"}));
  EXPECT_EQ(pool.waiting_jobs().size(), 1u);  // first left the queue
  EXPECT_EQ(pool.allocate("second", 1).nodes, (Nodes{"local3"}));
  EXPECT_TRUE(pool.waiting_jobs().empty());
  pool.wait_for("gives-up", 1);
  pool.stop_waiting("gives-up");
  EXPECT_TRUE(pool.waiting_jobs().empty());
  EXPECT_EQ(pool.holders_text(), "local0 running, local1 first, local2 first, local3 second");
}

TEST_F(SharedPool, AKilledJobsNodesAndWaitGoBack) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    LocalNodePool mine(file_, 4);
    const bool ok = mine.allocate("doomed", 2).status.ok();
    mine.wait_for("doomed-too", 1);
    const char c = ok ? 'y' : 'n';
    [[maybe_unused]] const auto w = ::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  LocalNodePool pool(file_, 4);
  EXPECT_EQ(pool.nodes_of("doomed"), (Nodes{"local0", "local1"}));
  EXPECT_EQ(pool.waiting_jobs().size(), 1u);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(pool.nodes_of("doomed").empty());
  EXPECT_TRUE(pool.waiting_jobs().empty());
  EXPECT_EQ(pool.idle_nodes().size(), 4u);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(SharedPool, AFileThatIsNoPoolStateIsAClearError) {
  std::ofstream(file_) << "not json";
  try {
    LocalNodePool pool(file_, 2);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("local node pool: " + file_.string() + " is not a pool state (", 0), 0u)
        << e.what();
  }
}

}  // namespace
}  // namespace bellows::controller
