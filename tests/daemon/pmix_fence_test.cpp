// bellowsd's fence_nb and direct_modex upcalls (CollectiveRelay) against a real PMIx client
// (pmix_fence_client, C, the PMIx client API only), with the test playing the controller: it
// receives the node's contributions and modex requests and answers them.
//
// One PMIx server per process: ctest runs each test in a process of its own.

#include <bellows/daemon/launcher.hpp>
#include <bellows/daemon/pmix_fence.hpp>
#include <bellows/daemon/pmix_server.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <pmix_server.h>

#include "child_process.hpp"
#include "log_check.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace d = bellows::daemon;
namespace protocol = bellows::protocol;
using bellows::testing::ChildProcess;
using namespace std::chrono_literals;

/// What the relay sent "the controller", in order.
class Outbox {
 public:
  void push(protocol::Message message) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(std::move(message));
    }
    cv_.notify_all();
  }
  std::optional<protocol::Message> pop(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, limit, [&] { return !items_.empty(); })) return std::nullopt;
    auto message = std::move(items_.front());
    items_.pop_front();
    return message;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<protocol::Message> items_;
};

class PmixFenceTest : public bellows::testing::LoggedTest {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("bellows-fence-test-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
    d::PmixServer::Options o;
    o.tmpdir = dir_ / "pmix";
    o.node_name = "n1";
    server_.emplace(o);
    d::CollectiveRelay::Senders senders;
    senders.contribute = [this](const protocol::FenceContribution& c) { outbox_.push(c); };
    senders.ask = [this](const protocol::ModexRequest& r) { outbox_.push(r); };
    senders.answer = [this](const protocol::ModexReply& r) { answers_.push(r); };
    relay_.emplace(std::move(senders));
  }
  void TearDown() override {
    relay_.reset();
    server_.reset();
    fs::remove_all(dir_);
  }

  /// Registers namespace "job" of `size` ranks on nodes n1..nSIZE, rank i on n(i+1), and starts
  /// its rank 0 (the one of this node) as pmix_fence_client with `args`.
  std::unique_ptr<ChildProcess> start_rank_zero_of(std::uint32_t size, std::vector<std::string> args) {
    std::string nodes;
    std::string ranks;
    for (std::uint32_t i = 0; i < size; ++i) {
      if (i > 0) {
        nodes += ',';
        ranks += ';';
      }
      nodes += 'n';
      nodes += std::to_string(i + 1);
      ranks += std::to_string(i);
    }
    char* node_map = nullptr;
    char* proc_map = nullptr;
    EXPECT_EQ(PMIx_generate_regex(nodes.c_str(), &node_map), PMIX_SUCCESS);
    EXPECT_EQ(PMIx_generate_ppn(ranks.c_str(), &proc_map), PMIX_SUCCESS);
    const std::uint32_t one = 1;
    const std::uint32_t zero = 0;
    d::InfoArray info(7);
    info.load(0, PMIX_UNIV_SIZE, &size, PMIX_UINT32);
    info.load(1, PMIX_JOB_SIZE, &size, PMIX_UINT32);
    info.load(2, PMIX_LOCAL_SIZE, &one, PMIX_UINT32);
    info.load(3, PMIX_LOCAL_PEERS, "0", PMIX_STRING);
    info.load(4, PMIX_NODE_MAP, node_map, PMIX_REGEX);
    info.load(5, PMIX_PROC_MAP, proc_map, PMIX_REGEX);
    info.load(6, PMIX_APPNUM, &zero, PMIX_UINT32);
    std::free(node_map);
    std::free(proc_map);
    pmix_nspace_t nspace;
    PMIX_LOAD_NSPACE(nspace, "job");
    const pmix_status_t registered =
        PMIx_server_register_nspace(nspace, 1, info.data(), info.size(), nullptr, nullptr);
    EXPECT_TRUE(registered == PMIX_SUCCESS || registered == PMIX_OPERATION_SUCCEEDED) << registered;
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, "job", 0);
    const pmix_status_t client = PMIx_server_register_client(&proc, ::geteuid(), ::getegid(), nullptr, nullptr, nullptr);
    EXPECT_TRUE(client == PMIX_SUCCESS || client == PMIX_OPERATION_SUCCEEDED) << client;
    char** env = nullptr;
    EXPECT_EQ(PMIx_server_setup_fork(&proc, &env), PMIX_SUCCESS);
    std::vector<std::string> extra;
    for (char** e = env; e != nullptr && *e != nullptr; ++e) extra.emplace_back(*e);
    PMIX_ARGV_FREE(env);
    args.insert(args.begin(), BELLOWS_FENCE_CLIENT_PATH);
    return std::make_unique<ChildProcess>(args, extra);
  }

  template <class M>
  M next(std::chrono::milliseconds limit = 20s) {
    auto message = outbox_.pop(limit);
    if (!message) throw std::runtime_error("nothing reached the controller within the limit");
    if (!std::holds_alternative<M>(*message))
      throw std::runtime_error(std::string("the controller got a ") +
                               std::string(protocol::to_string(protocol::type_of(*message))));
    return std::get<M>(*message);
  }

  nlohmann::json result(std::uint32_t rank) {
    const fs::path path = dir_ / "out" / ("rank-" + std::to_string(rank) + ".json");
    for (int i = 0; i < 200 && !fs::exists(path); ++i) std::this_thread::sleep_for(50ms);
    std::ifstream in(path);
    if (!in) return nlohmann::json{{"missing", path.string()}};
    return nlohmann::json::parse(in);
  }

  fs::path dir_;
  Outbox outbox_;
  Outbox answers_;
  std::optional<d::PmixServer> server_;
  std::optional<d::CollectiveRelay> relay_;
};

TEST_F(PmixFenceTest, FenceOfRanksAllHostedHereCompletesWithoutTheController) {
  d::LocalLauncher launcher(*server_, [](const d::ExitStatus&) {});
  d::LaunchSpec spec;
  spec.nspace = "local-job";
  spec.nprocs = 3;
  spec.argv = {BELLOWS_FENCE_CLIENT_PATH, "check", (dir_ / "out").string()};
  launcher.launch(spec);
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    const auto r = result(rank);
    EXPECT_EQ(r.value("fence_collect", ""), "SUCCESS") << r.dump();
    EXPECT_EQ(r.value("early_ok", 0), 3) << r.dump();
    EXPECT_EQ(r.value("fence_plain", ""), "SUCCESS") << r.dump();
    EXPECT_EQ(r.value("late_ok", 0), 3) << r.dump();
  }
  EXPECT_FALSE(outbox_.pop(100ms).has_value()) << "a fence of local ranks went to the controller";
  // PMIx 4.2.2 completes a fence whose participants are all its clients by itself: the
  // fence_nb upcall is not even called.
  EXPECT_EQ(relay_->counters().fences, 0u);
}

TEST_F(PmixFenceTest, FenceWithARankElsewhereGoesThroughTheControllerAndModexAsksIt) {
  auto client = start_rank_zero_of(2, {"check", (dir_ / "out").string()});
  // The first fence: every rank of "job", with collected data; rank 0 is this node's.
  const auto first = next<protocol::FenceContribution>();
  EXPECT_EQ(first.participant_nspaces, std::vector<std::string>{"job"});
  EXPECT_EQ(first.participant_ranks, std::vector<std::uint32_t>{protocol::kWildcardRank});
  EXPECT_EQ(first.nspace_sizes, std::vector<std::uint32_t>{2});
  EXPECT_EQ(first.local_nspaces, std::vector<std::string>{"job"});
  EXPECT_EQ(first.local_ranks, std::vector<std::uint32_t>{0});
  EXPECT_EQ(first.collect_data, 1);
  EXPECT_FALSE(first.data.empty());
  relay_->released(protocol::FenceRelease{first.contribution_id, protocol::CollectiveStatus::ok, "", {first.data}});

  // Rank 1's key is in no blob: PMIx asks the host (direct modex), the controller finds nobody.
  const auto ask = next<protocol::ModexRequest>();
  EXPECT_EQ(ask.nspace, "job");
  EXPECT_EQ(ask.rank, 1u);
  // Meanwhile this node serves its own rank's data, and nothing for a rank it does not host.
  relay_->serve(protocol::ModexRequest{77, "job", 0});
  auto served = answers_.pop(10s);
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(std::get<protocol::ModexReply>(*served).request_id, 77u);
  EXPECT_EQ(std::get<protocol::ModexReply>(*served).status, protocol::CollectiveStatus::ok);
  EXPECT_FALSE(std::get<protocol::ModexReply>(*served).data.empty());
  relay_->serve(protocol::ModexRequest{78, "job", 1});
  served = answers_.pop(10s);
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(std::get<protocol::ModexReply>(*served),
            (protocol::ModexReply{78, protocol::CollectiveStatus::not_found, "no client of this node is job:1", ""}));
  relay_->answered(protocol::ModexReply{ask.request_id, protocol::CollectiveStatus::not_found, "nobody", ""});

  // The second fence, without collected data: no blob goes.
  const auto second = next<protocol::FenceContribution>();
  EXPECT_EQ(second.collect_data, 0);
  EXPECT_TRUE(second.data.empty());
  relay_->released(protocol::FenceRelease{second.contribution_id, protocol::CollectiveStatus::ok, "", {}});
  // The late key of rank 1 goes to the controller; a rank past the job's end does not.
  const auto late = next<protocol::ModexRequest>();
  EXPECT_EQ(late.rank, 1u);
  relay_->answered(protocol::ModexReply{late.request_id, protocol::CollectiveStatus::not_found, "nobody", ""});
  const auto r = result(0);
  // The client's last fence, among ranks 0 and 1 named one by one, after it wrote its result.
  const auto last = next<protocol::FenceContribution>();
  EXPECT_EQ(last.participant_ranks, (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(last.collect_data, 0);
  relay_->released(protocol::FenceRelease{last.contribution_id, protocol::CollectiveStatus::ok, "", {}});
  EXPECT_EQ(r.value("fence_collect", ""), "SUCCESS") << r.dump();
  EXPECT_EQ(r.value("early_ok", 0), 1) << r.dump();
  EXPECT_EQ(r.value("last_early_get", ""), "NOT-FOUND") << r.dump();
  EXPECT_EQ(r.value("fence_plain", ""), "SUCCESS") << r.dump();
  EXPECT_EQ(r.value("late_ok", 0), 1) << r.dump();
  EXPECT_EQ(r.value("missing_rank_get", ""), "NOT-FOUND") << r.dump();
  const auto status = client->wait_exit(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(WEXITSTATUS(*status), 1);  // it saw only one of two ranks' keys
  EXPECT_FALSE(outbox_.pop(100ms).has_value());
  EXPECT_EQ(relay_->counters().fences_local, 0u);
  EXPECT_EQ(relay_->counters().modex_served, 1u);
}

TEST_F(PmixFenceTest, AFenceTheControllerEndsWithALostParticipantFailsTheClientsFence) {
  auto client = start_rank_zero_of(2, {"victim", (dir_ / "out").string(), "1"});
  const auto first = next<protocol::FenceContribution>();
  relay_->released(protocol::FenceRelease{first.contribution_id, protocol::CollectiveStatus::ok, "", {first.data}});
  const auto second = next<protocol::FenceContribution>();
  const std::string why = "fence over job:*: participant job:1 on lost node n2 (rank 1 was killed)";
  relay_->released(
      protocol::FenceRelease{second.contribution_id, protocol::CollectiveStatus::participant_lost, why, {}});
  const auto r = result(0);
  EXPECT_EQ(r.value("first_fence", ""), "SUCCESS") << r.dump();
  EXPECT_EQ(r.value("second_fence_code", 0), PMIX_ERR_PROC_TERM_WO_SYNC) << r.dump();
  EXPECT_EQ(client->wait_exit(10s), std::optional<int>(0));
  allow_log("fence over job:* failed (" + d::status_string(PMIX_ERR_PROC_TERM_WO_SYNC) + "): " + why);
  EXPECT_EQ(relay_->counters().fences_failed, 1u);
}

TEST_F(PmixFenceTest, APendingFenceFailsUnreachableWhenTheRelayStops) {
  auto client = start_rank_zero_of(2, {"victim", (dir_ / "out").string(), "1"});
  const auto first = next<protocol::FenceContribution>();
  relay_->released(protocol::FenceRelease{first.contribution_id, protocol::CollectiveStatus::ok, "", {first.data}});
  next<protocol::FenceContribution>();
  relay_.reset();  // the daemon stops with the second fence pending
  const auto r = result(0);
  EXPECT_EQ(r.value("second_fence_code", 0), PMIX_ERR_UNREACH) << r.dump();
  EXPECT_EQ(client->wait_exit(10s), std::optional<int>(0));
  allow_log("fence over job:* failed (" + d::status_string(PMIX_ERR_UNREACH) + "): the daemon stops");
}

// While the controller is gone (ControllerLink tells the relay once the grace has passed), the
// pending fence fails PMIX_ERR_UNREACH and so does a new one, at once, without reaching the
// controller; once it is back, fences reach it again.
TEST_F(PmixFenceTest, WhileTheControllerIsGoneFencesFailAtOnceAndOnceItIsBackTheyReachIt) {
  const std::string why = "the controller at ipc:///nowhere/controller.sock is gone";
  relay_->controller_gone(why);
  relay_->controller_back();
  // Rank 0 here, rank 1 on n2, rank 2 (the one that never enters the second fence) on n3.
  auto client = start_rank_zero_of(3, {"victim", (dir_ / "out").string(), "2"});
  const auto first = next<protocol::FenceContribution>();
  relay_->released(protocol::FenceRelease{first.contribution_id, protocol::CollectiveStatus::ok, "", {first.data}});
  next<protocol::FenceContribution>();  // the second, pending
  relay_->controller_gone(why);
  const auto r = result(0);
  EXPECT_EQ(r.value("first_fence", ""), "SUCCESS") << r.dump();
  EXPECT_EQ(r.value("second_fence_code", 0), PMIX_ERR_UNREACH) << r.dump();
  // Its last fence, over ranks 0 and 1, failed at once: the client ends and nothing more went.
  EXPECT_EQ(client->wait_exit(10s), std::optional<int>(0));
  EXPECT_FALSE(outbox_.pop(200ms).has_value());
  EXPECT_EQ(relay_->counters().fences_failed, 2u);
  allow_log("fence over job:* failed (" + d::status_string(PMIX_ERR_UNREACH) + "): " + why);
  allow_log("fence over job:0,job:1 failed (" + d::status_string(PMIX_ERR_UNREACH) + "): " + why);
}

// After a shrink (rank 1 left, its number kept): the relay told the job's ranks, a wildcard
// fence means rank 0 alone, which this node hosts, so it completes here.
TEST_F(PmixFenceTest, AWildcardFenceMeansTheJobsRanksTheRelayWasTold) {
  relay_->job_ranks("job", {0}, 2);
  auto client = start_rank_zero_of(2, {"victim", (dir_ / "out").string(), "1"});
  const auto r = result(0);
  EXPECT_EQ(r.value("first_fence", ""), "SUCCESS") << r.dump();
  EXPECT_EQ(r.value("second_fence_code", -1), PMIX_SUCCESS) << r.dump();
  EXPECT_EQ(client->wait_exit(10s), std::optional<int>(0));
  EXPECT_FALSE(outbox_.pop(100ms).has_value()) << "a fence of the node's only rank went to the controller";
  EXPECT_EQ(relay_->counters().fences_local, 2u);
}

// Ranks 0, 1 and 4 out of 5 numbers given: the wildcard's contribution gives 5 as the size and
// waits for the controller (ranks 1 and 4 are elsewhere).
TEST_F(PmixFenceTest, AWildcardFenceOverRanksWithAGapGivesTheNumbersGivenAsTheSize) {
  relay_->job_ranks("job", {0, 1, 4}, 5);
  auto client = start_rank_zero_of(2, {"victim", (dir_ / "out").string(), "1"});
  const auto first = next<protocol::FenceContribution>();
  EXPECT_EQ(first.participant_ranks, std::vector<std::uint32_t>{protocol::kWildcardRank});
  EXPECT_EQ(first.nspace_sizes, std::vector<std::uint32_t>{5});
  EXPECT_EQ(first.local_ranks, std::vector<std::uint32_t>{0});
  relay_->released(protocol::FenceRelease{first.contribution_id, protocol::CollectiveStatus::ok, "", {first.data}});
  const auto second = next<protocol::FenceContribution>();
  EXPECT_EQ(second.nspace_sizes, std::vector<std::uint32_t>{5});
  relay_->released(protocol::FenceRelease{second.contribution_id, protocol::CollectiveStatus::ok, "", {second.data}});
  const auto r = result(0);
  EXPECT_EQ(r.value("second_fence_code", -1), PMIX_SUCCESS) << r.dump();
  EXPECT_EQ(client->wait_exit(10s), std::optional<int>(0));
}

}  // namespace
