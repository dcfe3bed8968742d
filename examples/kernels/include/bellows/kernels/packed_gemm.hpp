#pragma once
// Tile products over operands packed once per tile.
//
// OpenBLAS packs both operands of every DGEMM call into its micro-kernel's panel layout
// before it multiplies (Goto and van de Geijn, "Anatomy of High-Performance Matrix
// Multiplication", TOMS 2008). A whole-matrix DPOTRF amortises that packing over large
// calls; a tile runtime calls DGEMM on tile-sized operands that arrive cold from memory, and
// the packing then takes some 15 % of the cycles (docs/benchmarks.md). Here a tile is packed
// into the layout the micro-kernel reads once, the first time a task reads it that way, and the
// packed form is kept with the tile (Tile::derived_form) for every later task that reads the
// same contents (in Cholesky a panel tile feeds every update of its row and column), as BLIS
// keeps packed blocks across the loops around its micro-kernel (Van Zee and van de Geijn,
// "BLIS: A Framework for Rapidly Instantiating BLAS Functionality", TOMS 2015).
//
// The micro-kernel (16 x 8 doubles of C in 16 AVX-512 registers, one rank-1 update per step of
// k) runs where the CPU has AVX-512F and FMA; elsewhere, or with BELLOWS_TILE_GEMM=openblas in
// the environment, the kernels call OpenBLAS as before. Results are deterministic: the same
// operands give the same bits, whichever task packed them.

#include <cstdint>

#include "bellows/runtime/tile.hpp"

namespace bellows::kernels::packed {

using runtime::Tile;

/// The micro-kernel runs here: the CPU has AVX-512F and FMA and BELLOWS_TILE_GEMM does not say
/// openblas. Throws std::invalid_argument naming the variable when it holds anything else than
/// "packed" or "openblas".
[[nodiscard]] bool available();

/// The largest tile order the kernels hand to the micro-kernel: above it OpenBLAS's own packing
/// is amortised over a large call and its kernel is the faster (bench/tile_gemm.cpp:
/// docs/benchmarks.md).
inline constexpr int kLargestPackedOrder = 512;

/// available() and no dimension of the product above kLargestPackedOrder.
[[nodiscard]] bool suits(int m, int n, int k);

/// C = alpha * A * op(B) + beta * C, op(B) = B^T when `b_transposed` (B is n x k), else B
/// (k x n). With beta 0, C is not read. Requires available().
void gemm(const Tile& a, const Tile& b, bool b_transposed, double alpha, double beta, Tile& c);

/// The lower triangle of C = C - A * A^T (the strictly upper triangle left as it is).
/// Requires available().
void syrk_lower_minus(const Tile& a, Tile& c);

/// available(), A's rows a multiple of 16, its columns (L's order) a multiple of 8, neither
/// above kLargestPackedOrder.
[[nodiscard]] bool suits_trsm(int m, int n);

/// A = A * L^-T, L lower triangular (non-unit), blocked by 8 columns: each block is updated by
/// the micro-kernel from the columns solved before it, read from their packed form as it
/// fills, then solved against its 8 x 8 diagonal block. The packed form of the result, built on
/// the way while its columns are in cache, is kept with A for the products that read it next
/// (in Cholesky every update of A's row and column). Requires suits_trsm(A's rows, A's columns).
void trsm_right_lower_trans(const Tile& l, Tile& a);

/// Packed forms built so far in this process (each tile and way of reading it once per
/// contents): for benchmarks that check the forms are reused.
[[nodiscard]] std::uint64_t forms_built() noexcept;

}  // namespace bellows::kernels::packed
