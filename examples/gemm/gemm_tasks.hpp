#pragma once
// Tiled GEMM, C = A * B, as a parameterized task graph.
//
// Task GEMM(i, j, k) computes C(i,j) += A(i,k) * B(k,j) (beta = 0 at k = 0); the C tile
// flows along k and is written back to collection C after the last k. GEMM(i, j, k) runs
// on the owner of C(i, j).

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/task.hpp"

namespace bellows::examples {

class GemmTasks final : public runtime::TaskClass {
 public:
  /// a: m x k, b: k x n, c: m x n, all with the same tile size.
  GemmTasks(runtime::TaskClassId id, const runtime::TiledMatrix& a, const runtime::TiledMatrix& b,
            const runtime::TiledMatrix& c);

  [[nodiscard]] std::string_view name() const override { return "GEMM"; }
  void for_each_task(const std::function<void(const runtime::TaskKey&)>& fn) const override;
  [[nodiscard]] int owner(const runtime::TaskKey& key) const override;
  void inputs(const runtime::TaskKey& key, std::vector<runtime::InputSource>& out) const override;
  void successors(const runtime::TaskKey& key, int slot,
                  std::vector<runtime::Successor>& out) const override;
  [[nodiscard]] double flops(const runtime::TaskKey& key) const override;
  [[nodiscard]] std::int64_t priority(const runtime::TaskKey& key) const override;
  void execute_cpu(const runtime::TaskKey& key,
                   std::span<runtime::Tile* const> tiles) const override;
  [[nodiscard]] bool has_cuda_body() const override;
  void execute_cuda(const runtime::TaskKey& key, const runtime::CudaTaskContext& ctx) const override;

  static constexpr int kSlotA = 0;
  static constexpr int kSlotB = 1;
  static constexpr int kSlotC = 2;

 private:
  const runtime::TiledMatrix& a_;
  const runtime::TiledMatrix& b_;
  const runtime::TiledMatrix& c_;
  int kt_;
};

}  // namespace bellows::examples
