#include "zero_upper.hpp"

namespace bellows::kernels {
namespace {

__global__ void zero_upper_kernel(double* tile, int rows, int cols) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < rows && j < cols && i < j) tile[static_cast<long>(j) * rows + i] = 0.0;
}

}  // namespace

void launch_zero_upper(double* tile, int rows, int cols, cudaStream_t stream) {
  const dim3 block(16, 16);
  const dim3 grid((rows + 15) / 16, (cols + 15) / 16);
  zero_upper_kernel<<<grid, block, 0, stream>>>(tile, rows, cols);
}

}  // namespace bellows::kernels
