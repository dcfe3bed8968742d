// SlurmResourceManager against the real Slurm cluster of the slurm_cluster fixture (4 nodes,
// SLURM_CONF set by CTest). Each test submits its own jobs with sbatch, checks the backend's
// answers and what Slurm itself says (squeue, sinfo), and cancels its jobs at the end.

#include "bellows/controller/slurm_resource_manager.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace bellows::controller {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Nodes = std::vector<std::string>;

constexpr int kNodes = 4;

/// Runs a shell command; its standard output, without the trailing newline.
std::string sh(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return {};
  std::string out;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe.get()) != nullptr) out += buf.data();
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

/// `srun ARGS` as this machine's shell can run it against the cluster: on a cluster of separate
/// hosts srun listens on its host's address, so it runs on the cluster's head
/// (BELLOWS_LOCAL_SLURM exec DIR --, set by CTest).
std::string srun(const std::string& args) {
  const char* local_slurm = std::getenv("BELLOWS_LOCAL_SLURM");
  const char* conf = std::getenv("SLURM_CONF");
  std::string prefix;
  if (local_slurm != nullptr && *local_slurm != '\0' && conf != nullptr)
    prefix = std::string(local_slurm) + " exec " + std::filesystem::path(conf).parent_path().parent_path().string() + " -- ";
  return prefix + "srun " + args;
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool wait_until(const std::function<bool()>& ready, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!ready()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

/// Job ids squeue lists (pending, running or completing).
std::set<std::string> squeue_jobs() {
  auto ids = words(sh("squeue -h -o %i"));
  return {ids.begin(), ids.end()};
}

std::string node_state(const std::string& node) {
  return sh("sinfo -h -N -n " + node + " -o %T");
}

std::string job_state(const std::string& job) {
  return sh("squeue -h -j " + job + " -o %T 2>/dev/null");
}

class SlurmResourceManagerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { rm_ = new SlurmResourceManager(); }
  static void TearDownTestSuite() {
    delete rm_;
    rm_ = nullptr;
  }

  void SetUp() override {
    ASSERT_FALSE(sh("printenv SLURM_CONF").empty()) << "SLURM_CONF is not set";
    // Slurm 22.05's select/linear loses count of nodes that went through an expansion: some
    // show idle yet are refused (Resources) to later jobs (docs/slurm.md). A reconfigure
    // rebuilds its books from the job table, so each test starts from a cluster that can
    // place a job on every idle node.
    sh("scontrol reconfigure");
    ASSERT_TRUE(wait_until([] { return sh("sinfo -h -o '%D %T'") == std::to_string(kNodes) + " idle"; },
                           20s))
        << "the cluster's nodes are not all idle: " << sh("sinfo -N -h -o '%N %T'");
  }

  void TearDown() override {
    for (const std::string& job : jobs_) sh("scancel " + job);
    // A later test starts on an idle cluster.
    wait_until([] { return sh("sinfo -h -o '%D %T'") == std::to_string(kNodes) + " idle"; }, 20s);
  }

  /// sbatch -N nodes OPTIONS --wrap 'sleep 300'; waits until it runs unless `wait` is false.
  std::string submit(int nodes, bool wait = true, const std::string& options = "") {
    const std::string job = sh("sbatch --parsable -N" + std::to_string(nodes) + " " + options +
                               " -J rm-test -o /dev/null --wrap 'sleep 300'");
    EXPECT_FALSE(job.empty()) << "sbatch failed";
    jobs_.push_back(job);
    if (wait) {
      EXPECT_TRUE(wait_until([&] { return job_state(job) == "RUNNING"; }, 20s))
          << "job " << job << " is " << job_state(job);
    }
    return job;
  }

  /// Calls progress() until the answer arrives or the timeout passes.
  static std::optional<ExpandAnswer> expand(const ExpandRequest& request,
                                            std::chrono::milliseconds wait = 20s) {
    std::optional<ExpandAnswer> answer;
    rm_->request_expand(request, [&](ExpandAnswer a) { answer = std::move(a); });
    wait_until(
        [&] {
          rm_->progress();
          return answer.has_value();
        },
        wait);
    return answer;
  }

  static std::optional<RmStatus> release(const std::string& job, const Nodes& nodes) {
    std::optional<RmStatus> answer;
    rm_->release_nodes(job, nodes, [&](RmStatus s) { answer = std::move(s); });
    wait_until(
        [&] {
          rm_->progress();
          return answer.has_value();
        },
        20s);
    return answer;
  }

  static Nodes nodes_of(const std::string& job) {
    auto r = rm_->nodes_of(job);
    EXPECT_TRUE(r.status.ok()) << r.status.text;
    return r.value;
  }

  static SlurmResourceManager* rm_;
  std::vector<std::string> jobs_;
};

SlurmResourceManager* SlurmResourceManagerTest::rm_ = nullptr;

TEST_F(SlurmResourceManagerTest, ExpandsByTwoUnderTheSameJobIdThenReleases) {
  const std::string job = submit(1);
  const Nodes first = nodes_of(job);
  ASSERT_EQ(first.size(), 1u);
  const std::string batch_host = first[0];

  const auto answer = expand({.job = job, .count = 2, .min_count = 2, .timeout = 10s});
  ASSERT_TRUE(answer.has_value()) << "no answer to the expansion";
  ASSERT_TRUE(answer->status.ok()) << to_string(answer->status.code) << ": " << answer->status.text;
  std::cout << "expand: " << answer->status.text << "\n";
  ASSERT_EQ(answer->nodes.size(), 2u);
  EXPECT_NE(answer->nodes[0], answer->nodes[1]);
  for (const std::string& n : answer->nodes) EXPECT_NE(n, batch_host);
  EXPECT_NE(answer->status.text.find("merged in"), std::string::npos) << answer->status.text;

  const Nodes three = nodes_of(job);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0], batch_host);
  EXPECT_EQ((Nodes{three[1], three[2]}), answer->nodes);
  // The same job id, now on 3 nodes; no helper job left.
  EXPECT_EQ(sh("squeue -h -j " + job + " -o '%T %D'"), "RUNNING 3");
  EXPECT_EQ(squeue_jobs(), std::set<std::string>{job});

  const auto released = release(job, answer->nodes);
  ASSERT_TRUE(released.has_value());
  ASSERT_TRUE(released->ok()) << to_string(released->code) << ": " << released->text;
  std::cout << "release: " << released->text << "\n";
  const auto freed = Clock::now();
  EXPECT_TRUE(wait_until(
      [&] {
        return std::all_of(answer->nodes.begin(), answer->nodes.end(),
                           [](const std::string& n) { return node_state(n) == "idle"; });
      },
      10s))  // how fast is bench/slurm_roundtrip.py's to say; here only that they do
      << sh("sinfo -N -h -o '%N %T'");
  std::cout << "released nodes idle in sinfo "
            << std::chrono::duration<double>(Clock::now() - freed).count() << " s after the answer\n";
  EXPECT_EQ(nodes_of(job), (Nodes{batch_host}));
  EXPECT_EQ(job_state(job), "RUNNING");

  // Slurm can give every node to the next job once this one ends (its books stayed right).
  sh("scancel " + job);
  ASSERT_TRUE(wait_until([] { return sh("sinfo -h -o '%D %T'") == std::to_string(kNodes) + " idle"; },
                         20s));
  const std::string whole = submit(kNodes);
  EXPECT_EQ(job_state(whole), "RUNNING") << "a job on all " << kNodes << " nodes does not start";
}

TEST_F(SlurmResourceManagerTest, ReleasesANodeFromTheMiddleOfTheJob) {
  const std::string job = submit(1);
  const std::string batch_host = nodes_of(job).at(0);
  const auto grant = expand({.job = job, .count = 2, .min_count = 2, .timeout = 10s});
  ASSERT_TRUE(grant.has_value() && grant->status.ok())
      << (grant ? grant->status.text : std::string("no answer"));
  // The first granted node (not the job's last): Slurm is told the nodes that stay.
  auto released = release(job, {grant->nodes[0]});
  ASSERT_TRUE(released.has_value());
  ASSERT_TRUE(released->ok()) << released->text;
  EXPECT_NE(released->text.find("NodeList="), std::string::npos) << released->text;
  EXPECT_EQ(nodes_of(job), (Nodes{batch_host, grant->nodes[1]}));
  released = release(job, {grant->nodes[1]});
  ASSERT_TRUE(released.has_value());
  ASSERT_TRUE(released->ok()) << released->text;
  EXPECT_EQ(nodes_of(job), (Nodes{batch_host}));
}

TEST_F(SlurmResourceManagerTest, RefusesTheBatchHostAndNodesNotTheJobs) {
  const std::string job = submit(1);
  const std::string other = submit(1);
  const std::string batch_host = nodes_of(job).at(0);
  const std::string others_node = nodes_of(other).at(0);

  auto answer = release(job, {batch_host});
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code, RmCode::bad_request) << answer->text;
  EXPECT_NE(answer->text.find(batch_host + " is the batch host of job " + job), std::string::npos)
      << answer->text;

  answer = release(job, {others_node});
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code, RmCode::not_owner) << answer->text;
  EXPECT_NE(answer->text.find(others_node), std::string::npos) << answer->text;

  answer = release(job, {"n99"});
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code, RmCode::unknown_node) << answer->text;

  answer = release("999999", {others_node});
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code, RmCode::unknown_job) << answer->text;

  // Nothing changed hands.
  EXPECT_EQ(nodes_of(job), (Nodes{batch_host}));
  EXPECT_EQ(nodes_of(other), (Nodes{others_node}));
}

TEST_F(SlurmResourceManagerTest, AnswersTimeoutWhenNoNodeIsIdleAndCancelsTheHelper) {
  const std::string job = submit(1);
  const std::string busy = submit(kNodes - 1);
  auto idle = rm_->idle_nodes();
  ASSERT_TRUE(idle.status.ok()) << idle.status.text;
  EXPECT_TRUE(idle.value.empty());

  const auto began = Clock::now();
  const auto answer = expand({.job = job, .count = 1, .min_count = 1, .timeout = 1s});
  const double took = std::chrono::duration<double>(Clock::now() - began).count();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code, RmCode::timeout) << answer->status.text;
  EXPECT_TRUE(answer->nodes.empty());
  EXPECT_GE(took, 1.0);
  EXPECT_LT(took, 3.0);
  std::cout << "timeout after " << took << " s: " << answer->status.text << "\n";
  const std::string marker = "no idle node: helper job ";
  const auto at = answer->status.text.find(marker);
  ASSERT_NE(at, std::string::npos) << answer->status.text;
  const std::string helper = words(answer->status.text.substr(at + marker.size())).at(0);
  EXPECT_NE(answer->status.text.find("pending (Resources)"), std::string::npos);
  EXPECT_EQ(squeue_jobs(), (std::set<std::string>{job, busy}))
      << "helper job " << helper << " left";
  EXPECT_EQ(nodes_of(job).size(), 1u);

  // Jobs queued behind the busy nodes, oldest first; helper jobs are not listed.
  const std::string waiting = submit(2, /*wait=*/false);
  const std::string later = submit(1, /*wait=*/false);
  auto pending = rm_->pending_jobs();
  ASSERT_TRUE(pending.status.ok()) << pending.status.text;
  ASSERT_EQ(pending.value.size(), 2u);
  EXPECT_EQ(pending.value[0].id, waiting);
  EXPECT_EQ(pending.value[0].nodes, 2u);
  EXPECT_EQ(pending.value[1].id, later);
  EXPECT_EQ(pending.value[1].nodes, 1u);
}

TEST_F(SlurmResourceManagerTest, CancelsAPendingExpansion) {
  const std::string job = submit(1);
  const std::string busy = submit(kNodes - 1);

  bool called = false;
  const RmRequestId id = rm_->request_expand({.job = job, .count = 1, .min_count = 1, .timeout = 30s},
                                             [&](ExpandAnswer) { called = true; });
  std::string helper;
  ASSERT_TRUE(wait_until(
      [&] {
        rm_->progress();
        const auto h = rm_->helper_job_of(id);
        if (h != 0) helper = std::to_string(h);
        return !helper.empty() && job_state(helper) == "PENDING";
      },
      10s))
      << "no pending helper job";
  EXPECT_TRUE(rm_->cancel_expand(id));
  EXPECT_FALSE(rm_->cancel_expand(id));
  // The backend's thread kills it at its next poll; slurmctld may take a while under load.
  const auto cancelled = Clock::now();
  EXPECT_TRUE(wait_until([&] { return !squeue_jobs().contains(helper); }, 10s))
      << "helper job " << helper << " still in squeue 10 s after the cancel";
  std::cout << "helper job " << helper << " left the queue "
            << std::chrono::duration<double>(Clock::now() - cancelled).count()
            << " s after the cancel\n";
  // Free the nodes: had the helper survived, it would now be granted and merged.
  sh("scancel " + busy);
  const auto until = Clock::now() + 1s;
  while (Clock::now() < until) {
    rm_->progress();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(called);
  EXPECT_EQ(nodes_of(job).size(), 1u);
  EXPECT_FALSE(rm_->cancel_expand(0));
}

TEST_F(SlurmResourceManagerTest, TwentyExpandReleaseCyclesOnOneJob) {
  const std::string job = submit(1);
  const std::string batch_host = nodes_of(job).at(0);
  double expand_total = 0;
  double release_total = 0;
  for (int cycle = 1; cycle <= 20; ++cycle) {
    const unsigned count = cycle % 2 == 1 ? 2 : 1;
    auto began = Clock::now();
    const auto grant = expand({.job = job, .count = count, .min_count = count, .timeout = 10s});
    expand_total += std::chrono::duration<double>(Clock::now() - began).count();
    ASSERT_TRUE(grant.has_value()) << "cycle " << cycle << ": no answer";
    ASSERT_TRUE(grant->status.ok()) << "cycle " << cycle << ": " << grant->status.text;
    ASSERT_EQ(grant->nodes.size(), count) << "cycle " << cycle;
    ASSERT_EQ(nodes_of(job).size(), 1 + count) << "cycle " << cycle;
    began = Clock::now();
    const auto released = release(job, grant->nodes);
    release_total += std::chrono::duration<double>(Clock::now() - began).count();
    ASSERT_TRUE(released.has_value()) << "cycle " << cycle << ": no answer";
    ASSERT_TRUE(released->ok()) << "cycle " << cycle << ": " << released->text;
    ASSERT_EQ(nodes_of(job), (Nodes{batch_host})) << "cycle " << cycle;
  }
  std::cout << "20 cycles: expand " << expand_total / 20 << " s, release " << release_total / 20
            << " s on average\n";
  EXPECT_EQ(squeue_jobs(), std::set<std::string>{job});
  EXPECT_EQ(sh("squeue -h -j " + job + " -o '%T %D'"), "RUNNING 1");
  EXPECT_TRUE(wait_until([] { return sh("sinfo -h -t idle -o %D") == std::to_string(kNodes - 1); },
                         10s))
      << sh("sinfo -N -h -o '%N %T'");
}

TEST_F(SlurmResourceManagerTest, ANodeBackInTheSecondItLeftRunsSteps) {
  // slurmd revokes the job's credentials on a node that leaves it, up to that second: the
  // grant of the same node within the second waits for the next one, so a step starts.
  const std::string job = submit(1);
  submit(kNodes - 2);  // one idle node: every expansion gets the node just released
  int held = 0;
  for (int cycle = 1; cycle <= 3; ++cycle) {
    const auto grant = expand({.job = job, .count = 1, .min_count = 1, .timeout = 10s});
    ASSERT_TRUE(grant.has_value() && grant->status.ok()) << "cycle " << cycle << ": "
                                                         << (grant ? grant->status.text : "no answer");
    held += grant->status.text.find("; held ") != std::string::npos ? 1 : 0;
    const std::string node = grant->nodes.at(0);
    EXPECT_EQ(sh(srun("--jobid=" + job + " --overlap -N1 -w " + node + " printenv SLURMD_NODENAME 2>&1")), node)
        << "cycle " << cycle << ": " << grant->status.text;
    const auto released = release(job, grant->nodes);
    ASSERT_TRUE(released.has_value() && released->ok()) << "cycle " << cycle;
  }
  std::cout << held << " of 3 grants held for the second the node left in\n";
}

TEST_F(SlurmResourceManagerTest, KeepsWithinTheJobsTimeLimit) {
  // A job with 5 minutes grows; its time limit stays what it was.
  const std::string job = submit(1, true, "-t 5");
  const auto grant = expand({.job = job, .count = 1, .min_count = 1, .timeout = 10s});
  ASSERT_TRUE(grant.has_value() && grant->status.ok()) << (grant ? grant->status.text : "no answer");
  EXPECT_EQ(sh("squeue -h -j " + job + " -o '%D %l'"), "2 5:00");
  // A job in its last minute does not.
  const std::string ending = submit(1, true, "-t 1");
  std::this_thread::sleep_for(2s);  // less than 60 s left
  const auto late = expand({.job = ending, .count = 1, .min_count = 1, .timeout = 10s});
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->status.code, RmCode::denied) << late->status.text;
  EXPECT_NE(late->status.text.find("(its time limit): too late to grow"), std::string::npos) << late->status.text;
  EXPECT_EQ(squeue_jobs(), (std::set<std::string>{job, ending}));
}

TEST_F(SlurmResourceManagerTest, PublishesTheJobDirectoryInTheJobsComment) {
  const std::string job = submit(1);
  EXPECT_EQ(rm_->published_job_dir(job).status.code, RmCode::denied);
  const RmStatus published = rm_->publish_job_dir(job, "/tmp/runs/" + job);
  ASSERT_TRUE(published.ok()) << published.text;
  EXPECT_EQ(rm_->published_job_dir(job).value, "/tmp/runs/" + job);
  EXPECT_EQ(sh("squeue -h -j " + job + " -o %k"), "bellows:/tmp/runs/" + job);

  const std::string other = submit(1);
  sh("scontrol update JobId=" + other + " Comment=mine");
  const RmStatus kept = rm_->publish_job_dir(other, "/tmp/runs/" + other);
  EXPECT_EQ(kept.code, RmCode::denied);
  EXPECT_EQ(kept.text, "job " + other + " has a comment of its own ('mine'), kept");
  EXPECT_EQ(sh("squeue -h -j " + other + " -o %k"), "mine");
  const auto none = rm_->published_job_dir(other);
  EXPECT_EQ(none.status.code, RmCode::denied);
  EXPECT_EQ(none.status.text, "Slurm job " + other +
                                  " was not started by bellows run (its comment names no job directory)");
  EXPECT_EQ(rm_->published_job_dir("999999").status.code, RmCode::unknown_job);
}

TEST_F(SlurmResourceManagerTest, RefusesMalformedRequestsAndUnknownJobs) {
  auto answer = expand({.job = "", .count = 1, .min_count = 1, .timeout = 1s});
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code, RmCode::bad_request) << answer->status.text;
  answer = expand({.job = "42", .count = 1, .min_count = 2, .timeout = 1s});
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code, RmCode::bad_request) << answer->status.text;
  answer = expand({.job = "999999", .count = 1, .min_count = 1, .timeout = 1s});
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status.code, RmCode::unknown_job) << answer->status.text;
  EXPECT_EQ(rm_->nodes_of("999999").status.code, RmCode::unknown_job);
  EXPECT_EQ(rm_->nodes_of("abc").status.code, RmCode::unknown_job);
}

// Last: it replaces the suite's backend.
TEST_F(SlurmResourceManagerTest, DestructorCancelsPendingHelperJobs) {
  const std::string job = submit(1);
  const std::string busy = submit(kNodes - 1);
  bool called = false;
  const RmRequestId id = rm_->request_expand({.job = job, .count = 1, .min_count = 1, .timeout = 60s},
                                             [&](ExpandAnswer) { called = true; });
  std::string helper;
  ASSERT_TRUE(wait_until(
      [&] {
        const auto h = rm_->helper_job_of(id);
        if (h != 0) helper = std::to_string(h);
        return !helper.empty() && job_state(helper) == "PENDING";
      },
      10s));
  delete rm_;
  rm_ = nullptr;
  EXPECT_FALSE(squeue_jobs().contains(helper)) << "helper job " << helper << " outlived the backend";
  EXPECT_FALSE(called);
  rm_ = new SlurmResourceManager();
  EXPECT_EQ(nodes_of(job).size(), 1u);
}

// Last too: a backend forced to the companion strategy replaces the suite's.
TEST_F(SlurmResourceManagerTest, SpansCompanionAllocationsWhenForced) {
  delete rm_;
  SlurmOptions forced;
  forced.expand_strategy = ExpandStrategy::companion;
  rm_ = new SlurmResourceManager(forced);
  EXPECT_EQ(rm_->expand_strategy().strategy, ExpandStrategy::companion);
  EXPECT_EQ(rm_->expand_strategy().reason, "forced (--expand-strategy companion)");
  const std::string job = submit(1, true, "-t 10");
  const std::string batch_host = nodes_of(job).at(0);

  const auto answer = expand({.job = job, .count = 2, .min_count = 2, .timeout = 10s});
  ASSERT_TRUE(answer.has_value() && answer->status.ok()) << (answer ? answer->status.text : "no answer");
  std::cout << "expand: " << answer->status.text << "\n";
  EXPECT_NE(answer->status.text.find("(bellows-grow-" + job + ")"), std::string::npos) << answer->status.text;
  const auto companions = rm_->companions_of(job);
  ASSERT_EQ(companions.size(), 1u);
  const std::string companion = std::to_string(companions[0]);
  // The job keeps its size; the companion beside it holds the new nodes, says whose it is,
  // and ends no later than the job.
  EXPECT_EQ(sh("squeue -h -j " + job + " -o '%T %D'"), "RUNNING 1");
  EXPECT_EQ(sh("squeue -h -j " + companion + " -o '%j|%k|%T|%D'"),
            "bellows-grow-" + job + "|bellows:companion-of:" + job + "|RUNNING|2");
  const std::string limit = sh("squeue -h -j " + companion + " -o %l");
  EXPECT_TRUE(limit == "9:00" || limit == "10:00")
      << limit << ": the companion's time limit is not the whole minutes the job has left (of 10)";
  EXPECT_EQ(nodes_of(job), (Nodes{batch_host, answer->nodes[0], answer->nodes[1]}));
  EXPECT_EQ(rm_->slurm_job_of(job, batch_host), job);
  for (const std::string& n : answer->nodes) EXPECT_EQ(rm_->slurm_job_of(job, n), companion);
  EXPECT_EQ(sh(srun("--jobid=" + companion + " --overlap -N1 -n1 -w " + answer->nodes[1] +
                    " printenv SLURM_JOB_ID")), companion) << "a step of the companion on its node";
  const auto pending = rm_->pending_jobs();
  ASSERT_TRUE(pending.status.ok());
  EXPECT_TRUE(pending.value.empty()) << "the companion counts as a pending job";
  auto published = rm_->published_job_dir(companion);
  EXPECT_EQ(published.status.text, "Slurm job " + companion + " is a companion allocation of job " + job +
                                       ": ask for job " + job);

  // In part: the companion is shrunk; then the rest: it is given back whole (COMPLETED).
  const auto part = release(job, {answer->nodes[0]});
  ASSERT_TRUE(part.has_value() && part->ok()) << (part ? part->text : "no answer");
  std::cout << "release: " << part->text << "\n";
  EXPECT_EQ(sh("squeue -h -j " + companion + " -o '%T %N'"), "RUNNING " + answer->nodes[1]);
  EXPECT_EQ(nodes_of(job), (Nodes{batch_host, answer->nodes[1]}));
  const auto rest = release(job, {answer->nodes[1]});
  ASSERT_TRUE(rest.has_value() && rest->ok()) << (rest ? rest->text : "no answer");
  std::cout << "release: " << rest->text << "\n";
  EXPECT_NE(rest->text.find("companion job " + companion + " completed"), std::string::npos) << rest->text;
  EXPECT_TRUE(rm_->companions_of(job).empty());
  EXPECT_TRUE(wait_until([&] { return !squeue_jobs().contains(companion); }, 10s));
  // slurmdbd hears of the end a moment later.
  EXPECT_TRUE(wait_until([&] { return sh("sacct -n -X -P -j " + companion + " -o State | tail -1") == "COMPLETED"; },
                         20s))
      << "sacct -j " << companion << ": " << sh("sacct -n -X -P -j " + companion + " -o State");
  EXPECT_EQ(nodes_of(job), (Nodes{batch_host}));

  // A companion still held when the backend goes is completed with it.
  const auto again = expand({.job = job, .count = 1, .min_count = 1, .timeout = 10s});
  ASSERT_TRUE(again.has_value() && again->status.ok()) << (again ? again->status.text : "no answer");
  const std::string second = std::to_string(rm_->companions_of(job).at(0));
  delete rm_;
  rm_ = nullptr;
  EXPECT_TRUE(wait_until([&] { return !squeue_jobs().contains(second); }, 10s))
      << "companion " << second << " outlived the backend";
  rm_ = new SlurmResourceManager();
  EXPECT_EQ(job_state(job), "RUNNING");
}

}  // namespace
}  // namespace bellows::controller
