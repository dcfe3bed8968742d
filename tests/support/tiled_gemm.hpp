#pragma once
// The GEMM that the elastic runtime tests resize: C = A * B of order n in tiles of `tile`,
// laid out on the block-cyclic grid of the job's initial ranks, A and B filled from `seed`
// and seed + 1, so that every rank (and every rank added later) builds the same problem.

#include <memory>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"

namespace bellows::test {

struct TiledGemm {
  TiledGemm(int n, int tile, int initial_ranks, int rank, unsigned seed)
      : grid(runtime::BlockCyclic2D::square_for(initial_ranks)),
        a(0, n, n, tile, grid, rank),
        b(1, n, n, tile, grid, rank),
        c(2, n, n, tile, grid, rank) {
    examples::fill_random(a, seed);
    examples::fill_random(b, seed + 1);
  }

  /// Registers the three matrices with `runtime`: A, B and C, collections 0, 1 and 2.
  void add_collections(runtime::Runtime& runtime) {
    runtime.add_collection(a);
    runtime.add_collection(b);
    runtime.add_collection(c);
  }

  /// Registers the three matrices and the GEMM task class with `runtime`.
  void attach(runtime::Runtime& runtime) {
    add_collections(runtime);
    runtime.add_task_class(std::make_unique<examples::GemmTasks>(0, a, b, c));
  }

  runtime::BlockCyclic2D grid;
  runtime::TiledMatrix a, b, c;
};

}  // namespace bellows::test
