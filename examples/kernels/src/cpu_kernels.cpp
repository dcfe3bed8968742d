#include <cblas.h>
#include <lapacke.h>

#include <stdexcept>
#include <string>

#include "bellows/kernels/packed_gemm.hpp"
#include "bellows/kernels/tile_kernels.hpp"

namespace bellows::kernels {

// The products of tiles up to packed::kLargestPackedOrder run on operands packed once per
// tile where the CPU allows (packed_gemm.hpp), the others on OpenBLAS.

void gemm_nn(const Tile& a, const Tile& b, double beta, Tile& c) {
  if (packed::suits(c.rows(), c.cols(), a.cols())) return packed::gemm(a, b, false, 1.0, beta, c);
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, c.rows(), c.cols(), a.cols(), 1.0,
              a.data(), a.rows(), b.data(), b.rows(), beta, c.data(), c.rows());
}

void gemm_nt_minus(const Tile& a, const Tile& b, Tile& c) {
  if (packed::suits(c.rows(), c.cols(), a.cols())) return packed::gemm(a, b, true, -1.0, 1.0, c);
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, c.rows(), c.cols(), a.cols(), -1.0,
              a.data(), a.rows(), b.data(), b.rows(), 1.0, c.data(), c.rows());
}

void syrk_lower_minus(const Tile& a, Tile& c) {
  if (packed::suits(c.rows(), c.cols(), a.cols())) return packed::syrk_lower_minus(a, c);
  cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, c.rows(), a.cols(), -1.0, a.data(),
              a.rows(), 1.0, c.data(), c.rows());
}

void trsm_right_lower_trans(const Tile& l, Tile& a) {
  if (packed::suits_trsm(a.rows(), a.cols())) return packed::trsm_right_lower_trans(l, a);
  cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, a.rows(), a.cols(),
              1.0, l.data(), l.rows(), a.data(), a.rows());
}

void potrf_lower(Tile& a) {
  const lapack_int info = LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'L', a.rows(), a.data(), a.rows());
  if (info != 0) {
    throw std::runtime_error("dpotrf failed on a " + std::to_string(a.rows()) +
                             "-order tile: info " + std::to_string(info) +
                             (info > 0 ? " (matrix not positive definite)" : ""));
  }
  for (int j = 1; j < a.cols(); ++j) {
    for (int i = 0; i < j && i < a.rows(); ++i) a.at(i, j) = 0.0;
  }
}

}  // namespace bellows::kernels
