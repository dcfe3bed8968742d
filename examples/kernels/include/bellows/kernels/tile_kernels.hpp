#pragma once
// Tile kernels of the examples: OpenBLAS/LAPACKE on the CPU, cuBLAS/cuSOLVER on CUDA.
// Tiles are column-major with leading dimension = rows.

#include "bellows/runtime/task.hpp"
#include "bellows/runtime/tile.hpp"

namespace bellows::kernels {

using runtime::CudaTaskContext;
using runtime::Tile;

/// C = A * B + beta * C.
void gemm_nn(const Tile& a, const Tile& b, double beta, Tile& c);
/// C = C - A * B^T.
void gemm_nt_minus(const Tile& a, const Tile& b, Tile& c);
/// C = C - A * A^T, lower triangle of C.
void syrk_lower_minus(const Tile& a, Tile& c);
/// A = A * L^-T with L lower triangular.
void trsm_right_lower_trans(const Tile& l, Tile& a);
/// A = L with A = L * L^T (lower); the strictly upper triangle is set to zero.
/// Throws std::runtime_error when A is not positive definite.
void potrf_lower(Tile& a);

/// True when the CUDA kernels are built in.
bool cuda_available() noexcept;
// CUDA versions, enqueued on ctx.stream; device tiles as in ctx.device_tiles.
void cuda_gemm_nn(const CudaTaskContext& ctx, int a, int b, double beta, int c);
void cuda_gemm_nt_minus(const CudaTaskContext& ctx, int a, int b, int c);
void cuda_syrk_lower_minus(const CudaTaskContext& ctx, int a, int c);
void cuda_trsm_right_lower_trans(const CudaTaskContext& ctx, int l, int a);
void cuda_potrf_lower(const CudaTaskContext& ctx, int a);

}  // namespace bellows::kernels
