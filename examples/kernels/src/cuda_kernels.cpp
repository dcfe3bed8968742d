// cuBLAS / cuSOLVER tile kernels.

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "bellows/kernels/tile_kernels.hpp"
#include "bellows/runtime/cuda_libraries.hpp"
#include "zero_upper.hpp"

namespace bellows::kernels {
namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + " failed, cuBLAS status " + std::to_string(s));
  }
}

double* dev(const CudaTaskContext& ctx, int slot) { return ctx.device_tiles[static_cast<std::size_t>(slot)]; }
const Tile& host(const CudaTaskContext& ctx, int slot) { return *ctx.host_tiles[static_cast<std::size_t>(slot)]; }

const runtime::CudaMathLibraries& math() { return runtime::cuda_math_libraries(); }

}  // namespace

bool cuda_available() noexcept { return true; }

void cuda_gemm_nn(const CudaTaskContext& ctx, int a, int b, double beta, int c) {
  const double one = 1.0;
  check(math().dgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, host(ctx, c).rows(), host(ctx, c).cols(),
                    host(ctx, a).cols(), &one, dev(ctx, a), host(ctx, a).rows(), dev(ctx, b),
                    host(ctx, b).rows(), &beta, dev(ctx, c), host(ctx, c).rows()),
        "cublasDgemm");
}

void cuda_gemm_nt_minus(const CudaTaskContext& ctx, int a, int b, int c) {
  const double minus_one = -1.0, one = 1.0;
  check(math().dgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_T, host(ctx, c).rows(), host(ctx, c).cols(),
                    host(ctx, a).cols(), &minus_one, dev(ctx, a), host(ctx, a).rows(), dev(ctx, b),
                    host(ctx, b).rows(), &one, dev(ctx, c), host(ctx, c).rows()),
        "cublasDgemm");
}

void cuda_syrk_lower_minus(const CudaTaskContext& ctx, int a, int c) {
  const double minus_one = -1.0, one = 1.0;
  check(math().dsyrk(ctx.cublas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, host(ctx, c).rows(),
                    host(ctx, a).cols(), &minus_one, dev(ctx, a), host(ctx, a).rows(), &one,
                    dev(ctx, c), host(ctx, c).rows()),
        "cublasDsyrk");
}

void cuda_trsm_right_lower_trans(const CudaTaskContext& ctx, int l, int a) {
  const double one = 1.0;
  check(math().dtrsm(ctx.cublas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T,
                    CUBLAS_DIAG_NON_UNIT, host(ctx, a).rows(), host(ctx, a).cols(), &one,
                    dev(ctx, l), host(ctx, l).rows(), dev(ctx, a), host(ctx, a).rows()),
        "cublasDtrsm");
}

void cuda_potrf_lower(const CudaTaskContext& ctx, int a) {
  const int n = host(ctx, a).rows();
  int lwork = 0;
  if (math().dpotrf_buffer_size(ctx.cusolver, CUBLAS_FILL_MODE_LOWER, n, dev(ctx, a), n, &lwork) !=
      CUSOLVER_STATUS_SUCCESS) {
    throw std::runtime_error("cusolverDnDpotrf_bufferSize failed");
  }
  if (static_cast<std::size_t>(lwork) * sizeof(double) > ctx.workspace_bytes) {
    throw std::runtime_error("cusolverDnDpotrf needs " + std::to_string(lwork) +
                             " doubles of workspace, more than the device provides");
  }
  if (math().dpotrf(ctx.cusolver, CUBLAS_FILL_MODE_LOWER, n, dev(ctx, a), n, ctx.workspace, lwork,
                       ctx.device_info) != CUSOLVER_STATUS_SUCCESS) {
    throw std::runtime_error("cusolverDnDpotrf failed");
  }
  launch_zero_upper(dev(ctx, a), n, host(ctx, a).cols(), ctx.stream);
}

}  // namespace bellows::kernels
