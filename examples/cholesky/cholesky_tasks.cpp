#include "cholesky_tasks.hpp"

#include <algorithm>
#include <stdexcept>

#include "bellows/kernels/tile_kernels.hpp"

namespace bellows::examples {
namespace {

using runtime::Access;
using runtime::InputSource;
using runtime::Successor;
using runtime::TaskKey;
using runtime::Tile;

// Priorities (larger runs first) follow the critical path of the factorisation with a
// lookahead of kLookaheadSteps panels, as SLATE's potrf does with its lookahead option and
// DPLASMA's potrf with priorities that favour the tasks nearest the next panel. Every task has
// a schedule time, a step:
//   - the panel of column k (POTRF(k), then its TRSMs) runs at step k;
//   - an update of column n at step k (SYRK(n, k), GEMM(., n, k)) runs at step
//     min(n - 1, k + kLookaheadSteps): at step n - 1, just before the panel it feeds, once that
//     panel is within the lookahead, and otherwise at step k + kLookaheadSteps, behind the
//     panels of the next steps.
// Within a step the panel runs first, then the updates, nearer columns and then older steps
// first. So a rank that fell behind runs the next panels, and the updates that feed them,
// before the trailing update of an earlier step, and the other ranks wait less for them.
constexpr int kLookaheadSteps = 2;

enum class Stage : std::int64_t { potrf = 0, trsm = 1, update = 2 };

std::int64_t cholesky_priority(int step, Stage stage, int column, int update_step, int tiles) {
  const std::int64_t span = tiles + 1;
  const std::int64_t order =
      ((static_cast<std::int64_t>(step) * 3 + static_cast<std::int64_t>(stage)) * span + column) *
          span + update_step;
  return -order;
}

std::int64_t panel_priority(int k, Stage stage, int tiles) {
  return cholesky_priority(k, stage, k, k, tiles);
}

std::int64_t update_priority(int column, int k, int tiles) {
  return cholesky_priority(std::min(column - 1, k + kLookaheadSteps), Stage::update, column, k,
                           tiles);
}

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
    return panel_priority(key.index[0], Stage::potrf, nt_);
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
    return panel_priority(key.index[1], Stage::trsm, nt_);
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
    return update_priority(key.index[0], key.index[1], nt_);  // SYRK(m, k) updates A(m, m)
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
    return update_priority(key.index[1], key.index[2], nt_);
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
