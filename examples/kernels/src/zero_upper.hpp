#pragma once
#include <cuda_runtime.h>

namespace bellows::kernels {
/// Sets the strictly upper triangle of a rows x cols column-major device tile to zero.
void launch_zero_upper(double* tile, int rows, int cols, cudaStream_t stream);
}  // namespace bellows::kernels
