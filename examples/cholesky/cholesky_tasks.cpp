#include "cholesky_tasks.hpp"

#include <stdexcept>

#include "bellows/kernels/tile_kernels.hpp"

namespace bellows::examples {
namespace {

using runtime::Access;
using runtime::InputSource;
using runtime::Successor;
using runtime::TaskKey;
using runtime::Tile;

// Priorities (larger runs first) follow the critical path of the factorisation: step
// k's panel (POTRF, TRSM) and the look-ahead updates of column k+1 come first; the rest
// of the trailing update of step k yields to the panels of the next two steps.
std::int64_t schedule_time_to_priority(std::int64_t time) { return -time; }

class CholeskyClass : public runtime::TaskClass {
 public:
  CholeskyClass(runtime::TaskClassId id, const runtime::TiledMatrix& a,
                const runtime::TiledMatrix& l, CholeskyClassIds ids)
      : TaskClass(id), a_(a), l_(l), ids_(ids), nt_(a.tile_rows()) {}

 protected:
  [[nodiscard]] TaskKey potrf(int k) const { return TaskKey{ids_.potrf, {k, 0, 0}}; }
  [[nodiscard]] TaskKey trsm(int m, int k) const { return TaskKey{ids_.trsm, {m, k, 0}}; }
  [[nodiscard]] TaskKey syrk(int m, int k) const { return TaskKey{ids_.syrk, {m, k, 0}}; }
  [[nodiscard]] TaskKey gemm(int m, int n, int k) const { return TaskKey{ids_.gemm, {m, n, k}}; }
  [[nodiscard]] double order(int m) const { return a_.rows_of_tile(m); }

  const runtime::TiledMatrix& a_;
  const runtime::TiledMatrix& l_;
  CholeskyClassIds ids_;
  int nt_;
};

class Potrf final : public CholeskyClass {
 public:
  using CholeskyClass::CholeskyClass;
  [[nodiscard]] std::string_view name() const override { return "POTRF"; }
  void for_each_task(const std::function<void(const TaskKey&)>& fn) const override {
    for (int k = 0; k < nt_; ++k) fn(potrf(k));
  }
  [[nodiscard]] int owner(const TaskKey& key) const override {
    return a_.owner(key.index[0], key.index[0]);
  }
  void inputs(const TaskKey& key, std::vector<InputSource>& out) const override {
    const int k = key.index[0];
    out.push_back(k == 0 ? InputSource::from_collection(a_.index(0, 0), Access::read_write)
                         : InputSource::from_task(syrk(k, k - 1), 0, Access::read_write));
  }
  void successors(const TaskKey& key, int slot, std::vector<Successor>& out) const override {
    if (slot != 0) return;
    const int k = key.index[0];
    for (int m = k + 1; m < nt_; ++m) out.push_back(Successor::to_task(trsm(m, k), 1));
    out.push_back(Successor::to_collection(l_.index(k, k)));
  }
  [[nodiscard]] double flops(const TaskKey& key) const override {
    const double n = order(key.index[0]);
    return n * n * n / 3.0;
  }
  [[nodiscard]] std::int64_t priority(const TaskKey& key) const override {
    return schedule_time_to_priority(3 * key.index[0]);
  }
  void execute_cpu(const TaskKey&, std::span<Tile* const> tiles) const override {
    kernels::potrf_lower(*tiles[0]);
  }
  [[nodiscard]] bool has_cuda_body() const override { return kernels::cuda_available(); }
  void execute_cuda(const TaskKey&, const runtime::CudaTaskContext& ctx) const override {
    kernels::cuda_potrf_lower(ctx, 0);
  }
};

class Trsm final : public CholeskyClass {
 public:
  using CholeskyClass::CholeskyClass;
  [[nodiscard]] std::string_view name() const override { return "TRSM"; }
  void for_each_task(const std::function<void(const TaskKey&)>& fn) const override {
    for (int k = 0; k < nt_; ++k) {
      for (int m = k + 1; m < nt_; ++m) fn(trsm(m, k));
    }
  }
  [[nodiscard]] int owner(const TaskKey& key) const override {
    return a_.owner(key.index[0], key.index[1]);
  }
  void inputs(const TaskKey& key, std::vector<InputSource>& out) const override {
    const int m = key.index[0], k = key.index[1];
    out.push_back(k == 0 ? InputSource::from_collection(a_.index(m, 0), Access::read_write)
                         : InputSource::from_task(gemm(m, k, k - 1), 0, Access::read_write));
    out.push_back(InputSource::from_task(potrf(k), 0, Access::read));
  }
  void successors(const TaskKey& key, int slot, std::vector<Successor>& out) const override {
    if (slot != 0) return;
    const int m = key.index[0], k = key.index[1];
    out.push_back(Successor::to_task(syrk(m, k), 1));
    for (int n = k + 1; n < m; ++n) out.push_back(Successor::to_task(gemm(m, n, k), 1));
    for (int p = m + 1; p < nt_; ++p) out.push_back(Successor::to_task(gemm(p, m, k), 2));
    out.push_back(Successor::to_collection(l_.index(m, k)));
  }
  [[nodiscard]] double flops(const TaskKey& key) const override {
    const double n = order(key.index[1]);
    return order(key.index[0]) * n * n;
  }
  [[nodiscard]] std::int64_t priority(const TaskKey& key) const override {
    return schedule_time_to_priority(3 * key.index[1] + 1);
  }
  void execute_cpu(const TaskKey&, std::span<Tile* const> tiles) const override {
    kernels::trsm_right_lower_trans(*tiles[1], *tiles[0]);
  }
  [[nodiscard]] bool has_cuda_body() const override { return kernels::cuda_available(); }
  void execute_cuda(const TaskKey&, const runtime::CudaTaskContext& ctx) const override {
    kernels::cuda_trsm_right_lower_trans(ctx, 1, 0);
  }
};

class Syrk final : public CholeskyClass {
 public:
  using CholeskyClass::CholeskyClass;
  [[nodiscard]] std::string_view name() const override { return "SYRK"; }
  void for_each_task(const std::function<void(const TaskKey&)>& fn) const override {
    for (int k = 0; k < nt_; ++k) {
      for (int m = k + 1; m < nt_; ++m) fn(syrk(m, k));
    }
  }
  [[nodiscard]] int owner(const TaskKey& key) const override {
    return a_.owner(key.index[0], key.index[0]);
  }
  void inputs(const TaskKey& key, std::vector<InputSource>& out) const override {
    const int m = key.index[0], k = key.index[1];
    out.push_back(k == 0 ? InputSource::from_collection(a_.index(m, m), Access::read_write)
                         : InputSource::from_task(syrk(m, k - 1), 0, Access::read_write));
    out.push_back(InputSource::from_task(trsm(m, k), 0, Access::read));
  }
  void successors(const TaskKey& key, int slot, std::vector<Successor>& out) const override {
    if (slot != 0) return;
    const int m = key.index[0], k = key.index[1];
    out.push_back(k + 1 < m ? Successor::to_task(syrk(m, k + 1), 0)
                            : Successor::to_task(potrf(m), 0));
  }
  [[nodiscard]] double flops(const TaskKey& key) const override {
    const double n = order(key.index[0]);
    return n * (n + 1) * order(key.index[1]);
  }
  [[nodiscard]] std::int64_t priority(const TaskKey& key) const override {
    const int m = key.index[0], k = key.index[1];
    return schedule_time_to_priority(3 * k + (m == k + 1 ? 2 : 6));
  }
  void execute_cpu(const TaskKey&, std::span<Tile* const> tiles) const override {
    kernels::syrk_lower_minus(*tiles[1], *tiles[0]);
  }
  [[nodiscard]] bool has_cuda_body() const override { return kernels::cuda_available(); }
  void execute_cuda(const TaskKey&, const runtime::CudaTaskContext& ctx) const override {
    kernels::cuda_syrk_lower_minus(ctx, 1, 0);
  }
};

class Gemm final : public CholeskyClass {
 public:
  using CholeskyClass::CholeskyClass;
  [[nodiscard]] std::string_view name() const override { return "GEMM"; }
  void for_each_task(const std::function<void(const TaskKey&)>& fn) const override {
    for (int k = 0; k < nt_; ++k) {
      for (int m = k + 2; m < nt_; ++m) {
        for (int n = k + 1; n < m; ++n) fn(gemm(m, n, k));
      }
    }
  }
  [[nodiscard]] int owner(const TaskKey& key) const override {
    return a_.owner(key.index[0], key.index[1]);
  }
  void inputs(const TaskKey& key, std::vector<InputSource>& out) const override {
    const int m = key.index[0], n = key.index[1], k = key.index[2];
    out.push_back(k == 0 ? InputSource::from_collection(a_.index(m, n), Access::read_write)
                         : InputSource::from_task(gemm(m, n, k - 1), 0, Access::read_write));
    out.push_back(InputSource::from_task(trsm(m, k), 0, Access::read));
    out.push_back(InputSource::from_task(trsm(n, k), 0, Access::read));
  }
  void successors(const TaskKey& key, int slot, std::vector<Successor>& out) const override {
    if (slot != 0) return;
    const int m = key.index[0], n = key.index[1], k = key.index[2];
    out.push_back(k + 1 < n ? Successor::to_task(gemm(m, n, k + 1), 0)
                            : Successor::to_task(trsm(m, n), 0));
  }
  [[nodiscard]] double flops(const TaskKey& key) const override {
    return 2.0 * order(key.index[0]) * order(key.index[1]) * order(key.index[2]);
  }
  [[nodiscard]] std::int64_t priority(const TaskKey& key) const override {
    const int n = key.index[1], k = key.index[2];
    return schedule_time_to_priority(3 * k + (n == k + 1 ? 2 : 6));
  }
  void execute_cpu(const TaskKey&, std::span<Tile* const> tiles) const override {
    kernels::gemm_nt_minus(*tiles[1], *tiles[2], *tiles[0]);
  }
  [[nodiscard]] bool has_cuda_body() const override { return kernels::cuda_available(); }
  void execute_cuda(const TaskKey&, const runtime::CudaTaskContext& ctx) const override {
    kernels::cuda_gemm_nt_minus(ctx, 1, 2, 0);
  }
};

}  // namespace

std::vector<std::unique_ptr<runtime::TaskClass>> make_cholesky_tasks(const runtime::TiledMatrix& a,
                                                                     const runtime::TiledMatrix& l,
                                                                     CholeskyClassIds ids) {
  if (a.rows() != a.cols() || l.rows() != a.rows() || l.tile_size() != a.tile_size()) {
    throw std::invalid_argument("Cholesky: A must be square and L shaped like A");
  }
  std::vector<std::unique_ptr<runtime::TaskClass>> classes(4);
  classes.at(ids.potrf) = std::make_unique<Potrf>(ids.potrf, a, l, ids);
  classes.at(ids.trsm) = std::make_unique<Trsm>(ids.trsm, a, l, ids);
  classes.at(ids.syrk) = std::make_unique<Syrk>(ids.syrk, a, l, ids);
  classes.at(ids.gemm) = std::make_unique<Gemm>(ids.gemm, a, l, ids);
  return classes;
}

}  // namespace bellows::examples
