// A running task graph that shrinks and expands between iterations:
// `mpiexec -n 1 resize_tests [gemm|cholesky]` starts rank 0, which spawns copies of this
// program as the job grows. Scenario, followed by every process from the step it joined at:
//
//   grow to 4 ranks (the fixed mapping is over these 4: a 2 x 2 grid)   iteration
//   ranks 1 and 2 leave at once (their data goes to the two survivors, the least
//   loaded first)   iteration
//   grow by 2 (expand after shrink; new ranks take tiles and steal)   iteration, iteration
//   ranks 1 and 3 leave: 1 is a backup holding two ranks' data, which passes to rank 2,
//   added by the expand; 3, also added   iteration
//
// After every iteration: each task ran exactly once over the ranks of that iteration, and
// the result gathered to rank 0 is bit-identical to the first iteration's (the update
// order of every tile is fixed wherever its tasks run). Leavers finalize and exit 0; rank
// 0 checks at the end that no spawned process is left. Rank 0 prints one JSON line with
// "result":"PASS" or "FAIL"; a failed check prints "FAILED:" on the failing process's
// stderr. Every process runs under a watchdog.

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/runtime.hpp"
#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"
#include "spawned_processes.hpp"
#include "verdict.hpp"
#include "watchdog.hpp"

namespace br = bellows::runtime;
namespace be = bellows::examples;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kChildFlag = "--resize-child";
constexpr int kGridRanks = 4;
constexpr unsigned kSeed = 5;

struct Step {
  int grow = 0;              ///< ranks to add (0: a shrink)
  std::vector<int> leaving;  ///< ranks that leave
  int iterations = 0;        ///< iterations after the step
};

const std::vector<Step>& scenario() {
  static const std::vector<Step> steps = {
      {kGridRanks - 1, {}, 1}, {0, {1, 2}, 1}, {2, {}, 2}, {0, {1, 3}, 1}};
  return steps;
}

struct Check {
  bool ok = true;
  void expect(bool condition, const std::string& what) {
    if (condition) return;
    ok = false;
    std::fprintf(stderr, "resize_tests: pid %d: FAILED: %s\n", static_cast<int>(::getpid()),
                 what.c_str());
    std::fflush(stderr);
  }
};

/// The application of every rank: GEMM or Cholesky on the 2 x 2 grid of the first 4 ranks.
class App {
 public:
  App(const std::string& kind, int rank) : gemm_(kind == "gemm") {
    const auto grid = br::BlockCyclic2D::square_for(kGridRanks);
    n_ = gemm_ ? 384 : 480;
    constexpr int tile = 48;
    a_ = std::make_unique<br::TiledMatrix>(0, n_, n_, tile, grid, rank);
    if (gemm_) {
      b_ = std::make_unique<br::TiledMatrix>(1, n_, n_, tile, grid, rank);
      out_ = std::make_unique<br::TiledMatrix>(2, n_, n_, tile, grid, rank);
      be::fill_random(*a_, kSeed);
      be::fill_random(*b_, kSeed + 1);
    } else {
      out_ = std::make_unique<br::TiledMatrix>(1, n_, n_, tile, grid, rank);
      be::fill_spd(*a_, kSeed);
    }
  }
  void attach(br::Runtime& runtime) {
    runtime.add_collection(*a_);
    if (gemm_) runtime.add_collection(*b_);
    runtime.add_collection(*out_);
    if (gemm_) {
      runtime.add_task_class(std::make_unique<be::GemmTasks>(0, *a_, *b_, *out_));
      tasks_ = (n_ / 48) * (n_ / 48) * (n_ / 48);
    } else {
      tasks_ = 0;
      for (auto& cls : be::make_cholesky_tasks(*a_, *out_)) {
        cls->for_each_task([&](const br::TaskKey&) { ++tasks_; });
        runtime.add_task_class(std::move(cls));
      }
    }
  }
  /// The result on rank 0 (the lower triangle for Cholesky), empty elsewhere. Collective.
  std::vector<double> result(MPI_Comm comm) const {
    auto full = out_->gather_to_root(comm);
    if (!gemm_ && !full.empty()) {
      for (int col = 0; col < n_; ++col) {
        for (int row = 0; row < col; ++row) full[static_cast<std::size_t>(col) * n_ + row] = 0.0;
      }
    }
    return full;
  }
  [[nodiscard]] long long tasks() const { return tasks_; }

 private:
  bool gemm_;
  int n_ = 0;
  long long tasks_ = 0;
  std::unique_ptr<br::TiledMatrix> a_, b_, out_;
};

br::RuntimeOptions options() {
  br::RuntimeOptions o;
  o.steal.enabled = true;
  o.steal.chunk = 2;
  return o;
}

long long sum(long long value, MPI_Comm comm) {
  long long all = 0;
  MPI_Allreduce(&value, &all, 1, MPI_LONG_LONG, MPI_SUM, comm);
  return all;
}

struct Process {
  std::string kind;
  std::unique_ptr<br::Membership> job;
  std::unique_ptr<App> app;
  std::unique_ptr<br::Runtime> runtime;
  std::vector<double> first;        ///< rank 0: the first iteration's result
  std::vector<int> spawned;         ///< rank 0: every spawned pid
  nlohmann::json log = nlohmann::json::array();  ///< rank 0
  Check check;
};

/// Runs `count` iterations and checks them. Collective over the job.
void iterate(Process& p, int count) {
  const MPI_Comm comm = p.job->communicator();
  for (int it = 0; it < count; ++it) {
    const auto before = static_cast<long long>(p.runtime->stats().tasks_executed);
    p.runtime->run_iteration();
    const long long ran = sum(static_cast<long long>(p.runtime->stats().tasks_executed) - before, comm);
    const auto result = p.app->result(comm);
    if (p.job->rank() != 0) continue;
    p.check.expect(ran == p.app->tasks(), std::to_string(ran) + " tasks ran on " +
                                              std::to_string(p.job->size()) + " ranks, expected " +
                                              std::to_string(p.app->tasks()));
    if (p.first.empty()) {
      p.first = result;
    } else {
      p.check.expect(result.size() == p.first.size() &&
                         std::memcmp(result.data(), p.first.data(), result.size() * sizeof(double)) == 0,
                     "result on " + std::to_string(p.job->size()) + " ranks differs from the first");
    }
    p.log.push_back({{"ranks", p.job->size()}, {"tasks", ran}});
  }
}

/// After a grow, on old and new ranks alike: rank 0 remembers the spawned pids, to check
/// at the end that none is left. Collective.
void record_spawned(Process& p, int before) {
  const int mine = static_cast<int>(::getpid());
  std::vector<int> pids(static_cast<std::size_t>(p.job->size()));
  MPI_Gather(&mine, 1, MPI_INT, pids.data(), 1, MPI_INT, 0, p.job->communicator());
  if (p.job->rank() == 0) {
    p.spawned.insert(p.spawned.end(), pids.begin() + before, pids.end());
    p.log.push_back({{"grow", p.job->size() - before}, {"from", before},
                     {"seconds", p.job->grows().back().total_seconds}});
  }
}

/// Runs the scenario from step `next` on. Returns false on a process that left.
bool run_steps(Process& p, std::size_t next) {
  br::SpawnSpec spec;
  spec.command = bellows::runtime::current_executable();
  for (std::size_t s = next; s < scenario().size(); ++s) {
    const Step& step = scenario()[s];
    if (step.grow > 0) {
      spec.args = {kChildFlag, std::to_string(s), p.kind};
      const int before = p.job->size();
      p.job->grow(step.grow, spec);
      if (p.runtime) {
        p.runtime->expand_onto(p.job->communicator());
      } else {  // the first grow: the job starts here
        p.app = std::make_unique<App>(p.kind, p.job->rank());
        p.runtime = std::make_unique<br::Runtime>(p.job->communicator(), options());
        p.app->attach(*p.runtime);
      }
      record_spawned(p, before);
    } else {
      const auto handoff = p.runtime->prepare_shrink(step.leaving);
      p.job->shrink(step.leaving);
      if (handoff.leaving) {
        p.runtime.reset();
        return false;
      }
      p.runtime->attach_shrunk(p.job->communicator());
      const long long moved = sum(static_cast<long long>(handoff.bytes_moved), p.job->communicator());
      if (p.job->rank() == 0) p.log.push_back({{"shrink", step.leaving}, {"bytes_moved", moved}});
    }
    iterate(p, step.iterations);
  }
  return true;
}

int run_root(Process& p) {
  p.job = std::make_unique<br::Membership>(MPI_COMM_WORLD);
  const bool stayed = run_steps(p, 0);
  p.check.expect(stayed, "rank 0 left");
  int ok = p.check.ok ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, p.job->communicator());
  return all_ok ? 0 : 1;
}

int run_child(Process& p, std::size_t joined_at) {
  auto joined = br::Membership::join();
  if (!joined) throw std::runtime_error("started with --resize-child but not spawned");
  p.job = std::make_unique<br::Membership>(std::move(*joined));
  const int before = p.job->size() - scenario()[joined_at].grow;
  p.app = std::make_unique<App>(p.kind, p.job->rank());
  p.runtime = std::make_unique<br::Runtime>(p.job->communicator(), options());
  if (joined_at > 0) p.runtime->join_expansion(before);
  p.app->attach(*p.runtime);
  p.check.expect(p.job->rank() >= before, "a spawned process got an existing rank");
  record_spawned(p, before);
  if (scenario()[joined_at].iterations > 0) iterate(p, scenario()[joined_at].iterations);
  if (!run_steps(p, joined_at + 1)) return p.check.ok ? 0 : 1;
  int ok = p.check.ok ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, p.job->communicator());
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const bool child = argc > 3 && std::string(argv[1]) == kChildFlag;
  const bellows::testing::ProcessVerdict verdict(child ? "resize_tests child" : "resize_tests rank 0");
  Process p;
  p.kind = child ? argv[3] : (argc > 1 ? argv[1] : "gemm");
  bellows::testing::Watchdog dog(bellows::testing::limit_from_env("BELLOWS_TEST_WATCHDOG_S", 60.0),
                                 child ? "resize child" : "resize scenario (rank 0)");
  int code = 1;
  try {
    code = child ? run_child(p, std::stoul(argv[2])) : run_root(p);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "resize_tests: pid %d: %s; aborting the job\n", static_cast<int>(::getpid()),
                 error.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  const bool root = !child;
  nlohmann::json log = p.log;
  p.runtime.reset();
  p.job.reset();
  dog.disarm();
  MPI_Finalize();
  if (root) {
    // Every spawned process must be gone (or a zombie awaiting hydra) soon after.
    if (bellows::testing::wait_gone(p.spawned, Clock::now(), 10.0) < 0.0) {
      const auto left_behind = std::count_if(p.spawned.begin(), p.spawned.end(),
                                             [](int pid) { return !bellows::testing::process_gone(pid); });
      std::fprintf(stderr, "resize_tests: FAILED: %td spawned processes still run\n", left_behind);
      code = 1;
    }
    nlohmann::json j{{"app", p.kind}, {"steps", log}, {"spawned", p.spawned.size()},
                     {"result", code == 0 ? "PASS" : "FAIL"}};
    std::printf("%s\n", j.dump().c_str());
  }
  if (code != 0) std::fprintf(stderr, "resize_tests: pid %d: FAILED\n", static_cast<int>(::getpid()));
  return verdict.record(code);
}
