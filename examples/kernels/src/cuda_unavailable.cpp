// Built when CUDA is not available: the CUDA kernels throw.

#include <stdexcept>

#include "bellows/kernels/tile_kernels.hpp"

namespace bellows::kernels {
namespace {
[[noreturn]] void unavailable() {
  throw std::runtime_error("CUDA kernels are not built in (nvcc was not found at configure time)");
}
}  // namespace

bool cuda_available() noexcept { return false; }
void cuda_gemm_nn(const CudaTaskContext&, int, int, double, int) { unavailable(); }
void cuda_gemm_nt_minus(const CudaTaskContext&, int, int, int) { unavailable(); }
void cuda_syrk_lower_minus(const CudaTaskContext&, int, int) { unavailable(); }
void cuda_trsm_right_lower_trans(const CudaTaskContext&, int, int) { unavailable(); }
void cuda_potrf_lower(const CudaTaskContext&, int) { unavailable(); }

}  // namespace bellows::kernels
