#pragma once
// Tiled Cholesky factorisation A = L * L^T (lower, right-looking) as a parameterized
// task graph of four classes:
//   POTRF(k)       A(k,k) <- chol(A(k,k))
//   TRSM(m,k)      A(m,k) <- A(m,k) * L(k,k)^-T                   m > k
//   SYRK(m,k)      A(m,m) <- A(m,m) - A(m,k) * A(m,k)^T           m > k
//   GEMM(m,n,k)    A(m,n) <- A(m,n) - A(m,k) * A(n,k)^T           m > n > k
// Every task runs on the owner of the tile it updates. Input tiles come from
// collection A (left unchanged), and the factor is written back to collection L.

#include <memory>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/task.hpp"

namespace bellows::examples {

struct CholeskyClassIds {
  runtime::TaskClassId potrf = 0;
  runtime::TaskClassId trsm = 1;
  runtime::TaskClassId syrk = 2;
  runtime::TaskClassId gemm = 3;
};

/// The four task classes, in id order, ready for Runtime::add_task_class.
std::vector<std::unique_ptr<runtime::TaskClass>> make_cholesky_tasks(
    const runtime::TiledMatrix& a, const runtime::TiledMatrix& l, CholeskyClassIds ids = {});

}  // namespace bellows::examples
