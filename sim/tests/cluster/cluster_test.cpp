// The cluster simulation's pieces: EASY backfilling, SWF parsing, the synthetic workload, and
// small schedules worked out by hand (docs/sim.md, "A cluster of elastic and rigid jobs").

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include <bellows/policy/load.hpp>

#include "bellows/sim/cluster.hpp"
#include "bellows/sim/cluster_schedule.hpp"
#include "bellows/sim/cluster_workload.hpp"

namespace bs = bellows::sim;

namespace {

std::string error_of(auto&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

bs::ClusterJob rigid(long long id, double submit, int nodes, double runtime, double requested) {
  bs::ClusterJob job;
  job.id = id;
  job.submit = submit;
  job.nodes = job.min_nodes = job.max_nodes = nodes;
  job.runtime = runtime;
  job.requested = requested;
  return job;
}

const nlohmann::json& job_in(const nlohmann::json& report, long long id) {
  for (const auto& job : report.at("schedule")) {
    if (job.at("id") == id) return job;
  }
  throw std::runtime_error("no job " + std::to_string(id) + " in the schedule");
}

bellows::policy::Policy policy_from(const char* text) {
  auto loaded = bellows::policy::parse_policy(text, "test.yaml");
  if (!loaded.ok()) throw std::runtime_error(bellows::policy::format(loaded.diagnostics.front()));
  return *loaded.policy;
}

// The report without what depends on the host's speed (the engine's tick times).
nlohmann::json without_timing(nlohmann::json report) {
  report.erase("engine");
  return report;
}

}  // namespace

TEST(EasyBackfill, StartsTheQueueInOrderWhileJobsFit) {
  const bs::QueuedJob queue[] = {{2, 100}, {2, 100}, {1, 100}};
  EXPECT_EQ(bs::easy_backfill(4, 0.0, queue, {}), (std::vector<int>{0, 1}));
}

TEST(EasyBackfill, BackfillsAJobThatEndsBeforeTheFirstJobsReservation) {
  // 4 nodes: 2 busy until t = 100, 2 free. The first job needs 4: its shadow time is 100, no
  // extra node. A 2-node job of 100 s ends by then; one of 150 s would delay it; then nothing fits.
  const bs::RunningJobEstimate running[] = {{2, 100.0}};
  const bs::QueuedJob fits[] = {{4, 50}, {2, 100}, {2, 10}};
  EXPECT_EQ(bs::easy_backfill(2, 0.0, fits, running), (std::vector<int>{1}));
  const bs::QueuedJob too_long[] = {{4, 50}, {2, 150}};
  EXPECT_TRUE(bs::easy_backfill(2, 0.0, too_long, running).empty());
}

TEST(EasyBackfill, LongJobsTakeOnlyTheExtraNodes) {
  // 6 nodes, 2 busy until 100: the first job needs 5 at 100, so 1 node is extra. A long 1-node
  // job takes it; the next long one finds none; a short one still ends in time.
  const bs::RunningJobEstimate running[] = {{2, 100.0}};
  const bs::QueuedJob queue[] = {{5, 50}, {1, 1000}, {1, 1000}, {1, 10}};
  EXPECT_EQ(bs::easy_backfill(4, 0.0, queue, running), (std::vector<int>{1, 3}));
}

TEST(SwfParse, ReadsJobsSkipsCommentsAndJobsThatDidNotRun) {
  const char* text =
      "; Version: 2.2\n"
      ";  a comment line\n"
      "\n"
      "1 1000 5 3600 8 -1 -1 8 7200 -1 1 1 1 1 1 1 -1 -1\n"
      "2 1010 0 -1 4 -1 -1 4 100 -1 5 1 1 1 1 1 -1 -1\n"    // no run time: cancelled
      "3 1020 0 60 -1 -1 -1 6 -1 -1 1 1 1 1 1 1 -1 -1\n"    // requested processors, no limit
      "4 1030 0 60 1024 -1 -1 1024 100 -1 1 1 1 1 1 1 -1 -1\n";  // larger than the cluster
  const auto w = bs::parse_swf(text, "t.swf", {4, 16});
  ASSERT_EQ(w.jobs.size(), 2U);
  EXPECT_EQ(w.skipped_not_run, 1);
  EXPECT_EQ(w.skipped_too_large, 1);
  EXPECT_EQ(w.jobs[0].id, 1);
  EXPECT_EQ(w.jobs[0].submit, 0.0);
  EXPECT_EQ(w.jobs[0].nodes, 2);  // 8 processors, 4 a node
  EXPECT_EQ(w.jobs[0].runtime, 3600.0);
  EXPECT_EQ(w.jobs[0].requested, 7200.0);
  EXPECT_FALSE(w.jobs[0].malleable);
  EXPECT_EQ(w.jobs[1].id, 3);
  EXPECT_EQ(w.jobs[1].submit, 20.0);
  EXPECT_EQ(w.jobs[1].nodes, 2);  // ceil(6 / 4)
  EXPECT_EQ(w.jobs[1].requested, 60.0);
}

TEST(SwfParse, ErrorsNameTheFileLineAndField) {
  const bs::SwfOptions o{1, 128};
  EXPECT_EQ(error_of([&] { (void)bs::parse_swf("; c\n1 2 3 4 5\n", "t.swf", o); }),
            "t.swf:2: expected 18 fields, found 5");
  EXPECT_EQ(error_of([&] {
              (void)bs::parse_swf("1 0 0 60 1 -1 -1 1 60 -1 1 1 1 1 1 1 -1 -1\n"
                                  "2 0 0 abc 1 -1 -1 1 60 -1 1 1 1 1 1 1 -1 -1\n",
                                  "t.swf", o);
            }),
            "t.swf:2: field 4 (run time) is not a number: 'abc'");
  EXPECT_EQ(error_of([&] { (void)bs::parse_swf("1 5x 0 60 1 -1 -1 1 60 -1 1 1 1 1 1 1 -1 -1\n", "t.swf", o); }),
            "t.swf:1: field 2 (submit time) is not a number: '5x'");
  EXPECT_EQ(error_of([&] { (void)bs::parse_swf("1 -3 0 60 1 -1 -1 1 60 -1 1 1 1 1 1 1 -1 -1\n", "t.swf", o); }),
            "t.swf:1: field 2 (submit time) is negative: '-3'");
  EXPECT_EQ(error_of([&] { (void)bs::read_swf_file("/nonexistent/trace.swf", o); }),
            "/nonexistent/trace.swf: cannot be read");
  EXPECT_EQ(error_of([&] { (void)bs::parse_swf("", "t.swf", {0, 128}); }), "cores per node must be at least 1, got 0");
}

TEST(SyntheticWorkload, IsTheSameForTheSameSeedAndAThirdMalleable) {
  bs::SyntheticOptions o;
  o.jobs = 3000;
  auto a = bs::generate_workload(o);
  auto b = bs::generate_workload(o);
  bs::make_malleable(a, {});
  bs::make_malleable(b, {});
  ASSERT_EQ(a.jobs.size(), 3000U);
  int malleable = 0;
  for (std::size_t i = 0; i < a.jobs.size(); ++i) {
    const auto& x = a.jobs[i];
    const auto& y = b.jobs[i];
    ASSERT_EQ(x.submit, y.submit);
    ASSERT_EQ(x.nodes, y.nodes);
    ASSERT_EQ(x.runtime, y.runtime);
    ASSERT_EQ(x.malleable, y.malleable);
    ASSERT_GE(x.requested, x.runtime);
    ASSERT_TRUE(x.nodes >= 1 && x.nodes <= 32 && (x.nodes & (x.nodes - 1)) == 0) << x.nodes;
    ASSERT_TRUE(x.runtime >= 60 && x.runtime <= 14400) << x.runtime;
    if (i > 0) {
      ASSERT_GE(x.submit, a.jobs[i - 1].submit);
    }
    if (x.malleable) {
      ++malleable;
      ASSERT_EQ(x.min_nodes, std::max(1, x.nodes / 2));
      ASSERT_EQ(x.max_nodes, x.nodes * 2);
      ASSERT_TRUE(x.speedup.serial_fraction >= 0.01 && x.speedup.serial_fraction <= 0.1);
    }
  }
  EXPECT_GT(malleable, 900);
  EXPECT_LT(malleable, 1100);
  o.seed = 2;
  const auto c = bs::generate_workload(o);
  int same = 0;
  for (std::size_t i = 0; i < c.jobs.size(); ++i) same += c.jobs[i].runtime == a.jobs[i].runtime ? 1 : 0;
  EXPECT_LT(same, 100);
  o.load = 0.0;
  EXPECT_EQ(error_of([&] { (void)bs::generate_workload(o); }), "--load must be in (0, 10], got 0.000000");
}

// 4 nodes, elasticity off. Job 2 (4 nodes) waits for job 1; job 3 backfills (it ends at 10 + 90
// by its limit, not after job 2's reservation at 100); job 4 (1 node for 500 s) would delay job
// 2, so it waits until job 2 ends.
TEST(ClusterSchedule, FcfsWithBackfillByHand) {
  bs::ClusterWorkload w;
  w.jobs = {rigid(1, 0, 2, 100, 100), rigid(2, 0, 4, 50, 50), rigid(3, 10, 2, 80, 90), rigid(4, 20, 1, 500, 500)};
  bs::ClusterOptions o;
  o.nodes = 4;
  o.record_schedule = true;
  const auto r = bs::simulate_cluster(w, o);
  const double expected[][3] = {{1, 0, 100}, {2, 100, 150}, {3, 10, 90}, {4, 150, 650}};
  for (const auto& e : expected) {
    const auto& job = job_in(r, static_cast<long long>(e[0]));
    EXPECT_DOUBLE_EQ(job.at("start").get<double>(), e[1]) << "job " << e[0];
    EXPECT_DOUBLE_EQ(job.at("end").get<double>(), e[2]) << "job " << e[0];
  }
  EXPECT_DOUBLE_EQ(r.at("makespan").get<double>(), 650.0);
  EXPECT_NEAR(r.at("utilisation").get<double>(), 1060.0 / 2600.0, 1e-12);
  EXPECT_DOUBLE_EQ(r.at("mean_wait").get<double>(), (0 + 100 + 0 + 130) / 4.0);
  EXPECT_DOUBLE_EQ(r.at("mean_turnaround").get<double>(), (100 + 150 + 80 + 630) / 4.0);
  EXPECT_DOUBLE_EQ(r.at("p95_wait").get<double>(), 130.0);
  EXPECT_NEAR(r.at("mean_bounded_slowdown").get<double>(), (1 + 3 + 1 + 630.0 / 500) / 4, 1e-12);
  EXPECT_EQ(r.at("resizes").at("expands"), 0);
  EXPECT_EQ(r.at("engine").at("ticks"), 0);
}

// 4 nodes; a malleable job M (2 nodes, range 1:4, linear speedup, 1000 s on 2 nodes) grows
// onto the 2 idle nodes at its first tick, gives them back when the rigid job R waits, and
// grows again once R is done. Resizes cost 1 s each, during which M makes no progress.
TEST(ClusterSchedule, MalleableJobGrowsOntoIdleNodesAndShrinksForAWaitingJob) {
  bs::ClusterWorkload w;
  bs::ClusterJob m = rigid(1, 0, 2, 1000, 2000);
  m.malleable = true;
  m.min_nodes = 1;
  m.max_nodes = 4;
  m.speedup.serial_fraction = 0.0;
  w.jobs = {m, rigid(2, 100, 2, 50, 50)};
  bs::ClusterOptions o;
  o.nodes = 4;
  o.record_schedule = true;
  o.model.expand_seconds = 1.0;
  o.model.shrink_seconds = 1.0;
  o.policy = policy_from(
      "nodes: {min: 1, max: 4, step: 2}\n"
      "expand: {idle_nodes_at_least: 2}\n"
      "shrink: {pending_jobs_at_least: 1}\n"
      "tick: 10s\nhysteresis_ticks: 1\ncooldown: 0s\n");
  const auto r = bs::simulate_cluster(w, o);
  const auto& mj = job_in(r, 1);
  const auto& rj = job_in(r, 2);
  // Work (node-seconds): 0-10 on 2 = 20, 11-100 on 4 = 356, 101-160 on 2 = 118, then 1506 on 4.
  EXPECT_DOUBLE_EQ(mj.at("start").get<double>(), 0.0);
  EXPECT_NEAR(mj.at("end").get<double>(), 161.0 + 1506.0 / 4, 1e-6);
  EXPECT_EQ(mj.at("resizes"), nlohmann::json::parse(R"([[11.0,"expand",2,4],[101.0,"shrink",4,2],[161.0,"expand",2,4]])"));
  EXPECT_DOUBLE_EQ(rj.at("start").get<double>(), 101.0);
  EXPECT_DOUBLE_EQ(rj.at("end").get<double>(), 151.0);
  EXPECT_EQ(r.at("resizes").at("expands"), 2);
  EXPECT_EQ(r.at("resizes").at("shrinks"), 1);
  EXPECT_EQ(r.at("resizes").at("reversals"), 2);
  EXPECT_EQ(r.at("rigid").at("jobs"), 1);
  EXPECT_DOUBLE_EQ(r.at("rigid").at("mean_wait").get<double>(), 1.0);

  // Elasticity off: M runs 1000 s on 2 nodes and R starts at once on the other 2.
  o.policy.reset();
  const auto off = bs::simulate_cluster(w, o);
  EXPECT_DOUBLE_EQ(job_in(off, 1).at("end").get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(job_in(off, 2).at("start").get<double>(), 100.0);
  EXPECT_EQ(job_in(off, 1).at("resizes").size(), 0U);
}

TEST(ClusterSchedule, SameSeedSameReport) {
  bs::SyntheticOptions s;
  s.jobs = 200;
  s.cluster_nodes = 64;
  auto w = bs::generate_workload(s);
  bs::make_malleable(w, {1.0 / 3.0, 1, 2, 0.01, 0.1, 64});
  bs::ClusterOptions o;
  o.nodes = 64;
  auto loaded = bellows::policy::load_policy_file(BELLOWS_POLICY_EXAMPLES "/cluster-friendly.yaml");
  ASSERT_TRUE(loaded.ok());
  o.policy = *loaded.policy;
  const auto a = bs::simulate_cluster(w, o);
  const auto b = bs::simulate_cluster(w, o);
  EXPECT_EQ(without_timing(a), without_timing(b));
  EXPECT_GT(a.at("resizes").at("expands").get<int>(), 0);
  EXPECT_GT(a.at("engine").at("ticks").get<int>(), 0);
  s.seed = 2;
  auto other = bs::generate_workload(s);
  bs::make_malleable(other, {1.0 / 3.0, 2, 2, 0.01, 0.1, 64});
  EXPECT_NE(without_timing(bs::simulate_cluster(other, o)), without_timing(a));
}

TEST(ClusterSchedule, RefusesAJobLargerThanTheCluster) {
  bs::ClusterWorkload w;
  w.jobs = {rigid(7, 0, 8, 10, 10)};
  bs::ClusterOptions o;
  o.nodes = 4;
  EXPECT_EQ(error_of([&] { (void)bs::simulate_cluster(w, o); }), "job 7 asks for 8 nodes, more than the cluster's 4");
}
