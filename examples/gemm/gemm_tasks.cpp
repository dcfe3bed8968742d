#include "gemm_tasks.hpp"

#include <stdexcept>

#include "bellows/kernels/tile_kernels.hpp"

namespace bellows::examples {

using runtime::Access;
using runtime::InputSource;
using runtime::Successor;
using runtime::TaskKey;

GemmTasks::GemmTasks(runtime::TaskClassId id, const runtime::TiledMatrix& a,
                     const runtime::TiledMatrix& b, const runtime::TiledMatrix& c)
    : TaskClass(id), a_(a), b_(b), c_(c), kt_(a.tile_cols()) {
  if (a.tile_size() != b.tile_size() || a.tile_size() != c.tile_size() || a.cols() != b.rows() ||
      a.rows() != c.rows() || b.cols() != c.cols()) {
    throw std::invalid_argument("GEMM: matrix shapes or tile sizes do not match");
  }
}

void GemmTasks::for_each_task(const std::function<void(const TaskKey&)>& fn) const {
  for (int i = 0; i < c_.tile_rows(); ++i) {
    for (int j = 0; j < c_.tile_cols(); ++j) {
      for (int k = 0; k < kt_; ++k) fn(key(i, j, k));
    }
  }
}

int GemmTasks::owner(const TaskKey& key) const { return c_.owner(key.index[0], key.index[1]); }

void GemmTasks::inputs(const TaskKey& key, std::vector<InputSource>& out) const {
  const auto [i, j, k] = key.index;
  out.push_back(InputSource::from_collection(a_.index(i, k), Access::read));
  out.push_back(InputSource::from_collection(b_.index(k, j), Access::read));
  if (k == 0) {
    out.push_back(InputSource::scratch_tile(c_.rows_of_tile(i), c_.cols_of_tile(j)));
  } else {
    out.push_back(InputSource::from_task(this->key(i, j, k - 1), kSlotC, Access::read_write));
  }
}

void GemmTasks::successors(const TaskKey& key, int slot, std::vector<Successor>& out) const {
  if (slot != kSlotC) return;
  const auto [i, j, k] = key.index;
  if (k + 1 < kt_) {
    out.push_back(Successor::to_task(this->key(i, j, k + 1), kSlotC));
  } else {
    out.push_back(Successor::to_collection(c_.index(i, j)));
  }
}

double GemmTasks::flops(const TaskKey& key) const {
  const auto [i, j, k] = key.index;
  return 2.0 * c_.rows_of_tile(i) * c_.cols_of_tile(j) * a_.cols_of_tile(k);
}

std::int64_t GemmTasks::priority(const TaskKey& key) const { return key.index[2]; }

void GemmTasks::execute_cpu(const TaskKey& key, std::span<runtime::Tile* const> tiles) const {
  kernels::gemm_nn(*tiles[kSlotA], *tiles[kSlotB], key.index[2] == 0 ? 0.0 : 1.0, *tiles[kSlotC]);
}

bool GemmTasks::has_cuda_body() const { return kernels::cuda_available(); }

void GemmTasks::execute_cuda(const TaskKey& key, const runtime::CudaTaskContext& ctx) const {
  kernels::cuda_gemm_nn(ctx, kSlotA, kSlotB, key.index[2] == 0 ? 0.0 : 1.0, kSlotC);
}

}  // namespace bellows::examples
