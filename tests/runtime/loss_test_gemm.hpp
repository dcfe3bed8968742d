#pragma once
// The GEMM pieces the tests of a rank lost around a resize or TeamLB's plan share
// (boundary_loss_test.cpp, teams_after_resize_test.cpp, teams_plan_loss_test.cpp): the ranks as
// a set in messages, C as a run without failure computes it, GEMM tasks whose first task run
// once armed kills the process, and the survivors' results as their launcher reads them.

#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bellows/kernels/tile_kernels.hpp"
#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"
#include "spawned_processes.hpp"
#include "tiled_gemm.hpp"

namespace bellows::test {

/// "{1, 3}".
inline std::string rank_set(const std::vector<int>& ranks) {
  std::string out = "{";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "}";
}

/// C of the n x n GEMM of `seed` in tiles of `tile`, as a run without failure computes it: the
/// same tile kernel in the same order, on this process alone.
inline std::vector<double> serial_gemm_c(int n, int tile, unsigned seed) {
  TiledGemm serial(n, tile, 1, 0, seed);
  const int tiles = n / tile;
  for (int j = 0; j < tiles; ++j) {
    for (int i = 0; i < tiles; ++i) {
      auto result = std::make_shared<runtime::Tile>(tile, tile);
      for (int k = 0; k < tiles; ++k) {
        kernels::gemm_nn(*serial.a.tile(i, k), *serial.b.tile(k, j), k == 0 ? 0.0 : 1.0, *result);
      }
      serial.c.set_tile(i, j, std::move(result));
    }
  }
  return serial.c.gather_to_root(MPI_COMM_SELF);
}

/// The GEMM's tasks, except that once `armed` the first task this rank runs waits `pause_us`
/// and SIGKILLs the process: a loss at a point of the iteration after its start (its barrier,
/// its tile moves and the checkpoint that completes before its tasks after a resize).
class KillingGemm final : public runtime::TaskClass {
 public:
  KillingGemm(TiledGemm& gemm, const std::atomic<bool>& armed, int pause_us)
      : TaskClass(0), gemm_(0, gemm.a, gemm.b, gemm.c), armed_(armed), pause_us_(pause_us) {}

  [[nodiscard]] std::string_view name() const override { return gemm_.name(); }
  void for_each_task(const std::function<void(const runtime::TaskKey&)>& fn) const override {
    gemm_.for_each_task(fn);
  }
  [[nodiscard]] int owner(const runtime::TaskKey& key) const override { return gemm_.owner(key); }
  void inputs(const runtime::TaskKey& key, std::vector<runtime::InputSource>& out) const override {
    gemm_.inputs(key, out);
  }
  void successors(const runtime::TaskKey& key, int slot, std::vector<runtime::Successor>& out) const override {
    gemm_.successors(key, slot, out);
  }
  [[nodiscard]] double flops(const runtime::TaskKey& key) const override { return gemm_.flops(key); }
  [[nodiscard]] std::int64_t priority(const runtime::TaskKey& key) const override { return gemm_.priority(key); }
  void execute_cpu(const runtime::TaskKey& key, std::span<runtime::Tile* const> tiles) const override {
    if (armed_.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us_));
      ::raise(SIGKILL);  // in the iteration's tasks
    }
    gemm_.execute_cpu(key, tiles);
  }

 private:
  examples::GemmTasks gemm_;
  const std::atomic<bool>& armed_;
  int pause_us_;
};

/// The survivors' results, as the launcher reads them once every member ended.
struct SurvivorResults {
  nlohmann::json results = nlohmann::json::array();  ///< each survivor's, as it wrote it
  bool verified = false;                             ///< some survivor verified C
  std::vector<std::string> wrong;                    ///< what was wrong, each as a sentence
  std::string outputs;                               ///< the members' (run_members)
};

/// Reads member I's rank from DIR/rank.I: the victim's mpiexec must not have exited 0, every
/// other one must have, and that survivor must have written DIR/result.RANK, a JSON object
/// whose "result" is "PASS" ("verified": true where it checked C).
inline SurvivorResults survivor_results(const testing::LaunchedMembers& members, const std::filesystem::path& dir,
                                        int victim) {
  SurvivorResults out;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::filesystem::path rank_file = dir / ("rank." + std::to_string(i));
    if (!std::filesystem::exists(rank_file)) {
      out.wrong.push_back("member " + std::to_string(i) + " never joined the job");
      continue;
    }
    const int r = testing::read_int(rank_file);
    const bool exited_zero = members.exited_zero(i);
    if (r == victim) {
      if (exited_zero) out.wrong.emplace_back("the victim's mpiexec exited 0");
      continue;
    }
    if (!exited_zero) out.wrong.push_back("survivor " + std::to_string(r) + "'s mpiexec did not exit 0");
    const std::filesystem::path result_file = dir / ("result." + std::to_string(r));
    if (!std::filesystem::exists(result_file)) {
      out.wrong.push_back("survivor " + std::to_string(r) + " wrote no result");
      continue;
    }
    const auto result = nlohmann::json::parse(testing::read_file(result_file));
    if (result.value("result", "") != "PASS") out.wrong.push_back("survivor " + std::to_string(r) + ": " + result.dump());
    out.verified = out.verified || result.value("verified", false);
    out.results.push_back(result);
  }
  return out;
}

/// Starts the job's `processes` members, member I as `MPIEXEC -n 1 SELF --member DIR I`, waits
/// until every one ended or `limit_seconds` passed, kills what is left (LaunchedMembers::end,
/// the members' pids in DIR/pid.I) and reads the survivors' results (survivor_results).
inline SurvivorResults run_members(const std::string& mpiexec, const std::string& self,
                                   const std::filesystem::path& dir, int processes, int victim,
                                   double limit_seconds) {
  testing::LaunchedMembers members(
      mpiexec, processes, dir,
      [&](int i) { return std::vector<std::string>{self, "--member", dir.string(), std::to_string(i)}; },
      limit_seconds);
  members.reap_until_limit();
  const std::vector<std::string> left = members.end("pid");
  SurvivorResults out = survivor_results(members, dir, victim);
  out.wrong.insert(out.wrong.begin(), left.begin(), left.end());
  out.outputs = members.outputs();
  return out;
}

}  // namespace bellows::test
