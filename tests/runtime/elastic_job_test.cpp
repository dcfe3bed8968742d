// The runtime's resize API on a running GEMM: `mpiexec -n 1 elastic_job_tests` starts
// rank 0, which grows the job to 3 ranks; then, between iterations, requests posted by
// different ranks (one from a second thread) are carried out by ElasticJob:
//   before iteration 1: rank 0 posted an expand for the controller's resize 77 and
//                       cancelled it (ElasticJob::cancel): nothing pending, no callback,
//                       Outcome::none;
//   before iteration 2: rank 1 asked (from another thread) for 2 more ranks, as resize 41:
//                       3 -> 5, every rank's events carry resize id 41; a cancel that comes
//                       after it was carried out is refused;
//   before iteration 3: rank 0 asked that rank 1 leave twice (refused, the job goes on),
//                       rank 4 asked that ranks 3 and 4 leave (queued behind it);
//   before iteration 4: ranks 3 and 4 (both added by the expand) leave: 5 -> 3.
// Checked on every rank: the callbacks seen (kind, sizes, requester, reason, left), the
// outcome of each apply_pending(); over the job: every GEMM task ran exactly once per
// iteration (counting the leavers), C bit-identical after every iteration. Rank 0
// prints one JSON line with "result":"PASS" or "FAIL"; every process runs under a
// watchdog.

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/elastic_job.hpp"
#include "elastic_test_main.hpp"
#include "tiled_gemm.hpp"

namespace br = bellows::runtime;
namespace bt = bellows::test;

namespace {

constexpr const char* kChildFlag = "--elastic-job-child";
constexpr int kN = 288;
constexpr int kTile = 48;
constexpr int kInitialRanks = 3;
constexpr int kIterations = 5;
constexpr int kTasks = (kN / kTile) * (kN / kTile) * (kN / kTile);

std::string describe(const char* what, const br::ResizeEvent& e) {
  std::ostringstream text;
  text << what << " #" << e.id;
  if (e.resize_id != 0) text << " resize " << e.resize_id;
  if (e.kind == br::ResizeEvent::Kind::expand) {
    text << " expand +" << e.add;
  } else {
    text << " shrink";
  }
  for (const int r : e.remove) text << ' ' << r;
  text << ' ' << e.from_ranks << "->" << e.to_ranks << " by rank " << e.requested_by << " before "
       << e.before_iteration << ": " << e.reason << (e.left ? " (left)" : "");
  return text.str();
}

const char* name(br::ElasticJob::Outcome o) {
  switch (o) {
    case br::ElasticJob::Outcome::none: return "none";
    case br::ElasticJob::Outcome::resized: return "resized";
    case br::ElasticJob::Outcome::refused: return "refused";
    case br::ElasticJob::Outcome::left: return "left";
  }
  return "?";
}

/// Runs iterations first..kIterations-1 of the scenario on any rank and returns 0 when
/// everything this rank checked held (rank 0 also checks the job-wide counts).
int run(br::ElasticJob& job, int first_iteration) {
  std::vector<std::string> seen;  // callbacks and outcomes, in order
  job.on_resize_start([&](const br::ResizeEvent& e) { seen.push_back(describe("start", e)); });
  job.on_resize_commit([&](const br::ResizeEvent& e) { seen.push_back(describe("commit", e)); });
  job.on_resize_refused([&](const br::ResizeEvent& e) { seen.push_back(describe("refused", e)); });

  auto gemm = std::make_unique<bt::TiledGemm>(kN, kTile, kInitialRanks, job.rank(), 5);
  br::RuntimeOptions options;
  options.steal.enabled = true;
  options.steal.chunk = 2;
  br::Runtime runtime(job.communicator(), options);
  job.attach(runtime);
  gemm->attach(runtime);

  std::vector<double> first_c;
  bool exact = true;
  long long counted = 0;  // tasks of all iterations, over all ranks (rank 0)
  bool cancels_ok = true;
  for (int it = first_iteration; it < kIterations; ++it) {
    const int rank_before = job.rank();
    if (it == 1 && rank_before == 0) {
      job.request_expand(1, "called off", 77);
      cancels_ok = cancels_ok && job.pending_requests() == 1 && job.cancel(77) &&
                   job.pending_requests() == 0 && !job.cancel(77) && !job.cancel(0);
    }
    if (it == 2 && rank_before == 1) {
      std::thread poster([&job] { job.request_expand(2, "more ranks, please", 41); });
      poster.join();
    }
    if (it == 3 && rank_before == 1) cancels_ok = cancels_ok && !job.cancel(41);  // carried out
    if (it == 3 && rank_before == 0) job.request_shrink({1, 1}, "rank 1 twice");
    if (it == 3 && rank_before == 4) job.request_shrink({3, 4}, "the added ones");
    const auto before = runtime.stats().tasks_executed;
    auto outcome = job.apply_pending(it);
    seen.push_back("iteration " + std::to_string(it) + ": " + name(outcome));
    if (it == 3 && outcome == br::ElasticJob::Outcome::refused) {
      outcome = br::ElasticJob::Outcome::none;  // rank 4's request waits for the next boundary
    }
    // The leavers' tasks of earlier iterations were counted when they ran.
    if (outcome == br::ElasticJob::Outcome::left) break;
    (void)before;
    const auto executed_before = runtime.stats().tasks_executed;
    job.after_iteration(runtime.run_iteration());
    long long mine = static_cast<long long>(runtime.stats().tasks_executed - executed_before), all = 0;
    MPI_Reduce(&mine, &all, 1, MPI_LONG_LONG, MPI_SUM, 0, job.communicator());
    counted += all;
    const auto c = gemm->c.gather_to_root(job.communicator());
    if (job.rank() == 0) {
      if (first_c.empty()) first_c = c;
      exact = exact && c.size() == first_c.size() &&
              std::memcmp(c.data(), first_c.data(), c.size() * sizeof(double)) == 0;
      if (all != kTasks) {
        std::fprintf(stderr, "elastic_job_tests: iteration %d ran %lld tasks, expected %d\n", it, all, kTasks);
        exact = false;
      }
    }
  }

  // What every rank must have seen, by the rank number it started with.
  const std::string expand = "#1 resize 41 expand +2 3->5 by rank 1 before 2: more ranks, please";
  const std::string refused = "refused #2 shrink 1 1 5->5 by rank 0 before 3: shrink refused: "
                              "shrink: leaving rank 1 is listed twice";
  const std::string shrink = "#2 shrink 3 4 5->3 by rank 4 before 4: the added ones";
  std::vector<std::string> expected;
  if (first_iteration == 0) {
    expected = {"iteration 0: none", "iteration 1: none", "start " + expand, "commit " + expand,
                "iteration 2: resized", refused, "iteration 3: refused"};
  } else {
    expected = {"iteration 2: none", refused, "iteration 3: refused"};
  }
  expected.push_back("start " + shrink);
  const bool leaves = job.membership().rank() < 0;
  expected.push_back("commit " + shrink + (leaves ? " (left)" : ""));
  expected.push_back(leaves ? "iteration 4: left" : "iteration 4: resized");
  int failed = seen == expected && cancels_ok ? 0 : 1;
  if (!cancels_ok) std::fprintf(stderr, "elastic_job_tests: ElasticJob::cancel answered wrong\n");
  if (failed) {
    std::fprintf(stderr, "elastic_job_tests: pid %d saw:\n", static_cast<int>(::getpid()));
    for (const auto& s : seen) std::fprintf(stderr, "  %s\n", s.c_str());
    std::fprintf(stderr, "expected:\n");
    for (const auto& s : expected) std::fprintf(stderr, "  %s\n", s.c_str());
  }
  if (leaves) return failed;

  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, job.communicator());
  if (job.rank() == 0) {
    const bool counts = counted == static_cast<long long>(kTasks) * kIterations;
    const auto& t = job.telemetry();
    // New ranks keep what they stole in their first iteration (how much depends on timing,
    // possibly nothing); all of it goes back to the fixed mapping (the backups) when the new
    // ranks leave, with whatever they stole and kept later.
    const bool pinned = t.size() == 2 && t[0].contains("tasks_pinned_to_new_ranks") &&
                        t[1].contains("pinned_tasks_returned_to_backups") &&
                        t[1].value("pinned_tasks_returned_to_backups", 0) >=
                            t[0].value("tasks_pinned_to_new_ranks", 0);
    const bool pass = any_failed == 0 && exact && counts && job.size() == kInitialRanks && pinned;
    nlohmann::json j{{"ranks", job.size()},
                     {"tasks_counted", counted},
                     {"tasks_expected", kTasks * kIterations},
                     {"bit_identical", exact},
                     {"resizes", job.telemetry()},
                     {"result", pass ? "PASS" : "FAIL"}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    failed = pass ? 0 : 1;
  }
  MPI_Bcast(&failed, 1, MPI_INT, 0, job.communicator());
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  return bt::run_elastic_job_test(argc, argv, "elastic_job_tests", kChildFlag, kInitialRanks, run);
}
