#include "bellows/kernels/packed_gemm.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace bellows::kernels::packed {
namespace {

// The micro-kernel's block of C: kPanelRows x kPanelCols doubles (2 x 8 AVX-512 registers).
constexpr int kPanelRows = 16;
constexpr int kPanelCols = 8;
// Cache blocking around the micro-kernel: steps of k in chunks of kStepK (A's two panels and
// B's panel of one call: 16 x 256 and 8 x 256 doubles, 32 and 16 KiB), and A's rows in blocks
// of kBlockRows, over which every panel of B passes. A tile of up to 512 rows is one block:
// smaller blocks (64, 128 rows) measured no faster in the jobs (bench/tile_gemm.cpp and the
// examples, within the host's noise), nor shorter chunks of k (64, 128: slower).
constexpr int kStepK = 256;
constexpr int kBlockRows = 4096;

// The packed forms, both made of panels kPanelCols doubles wide (one AVX-512 register): panel
// p, step s, lane l at p * depth * kPanelCols + s * kPanelCols + l, zero beyond the tile's edge.
// Which slot of Tile::derived_form holds which form:
enum Form : int {
  // Panels of kPanelCols rows, step s = column s of the tile. The same form serves the tile as
  // A (m x k: a block of kPanelRows rows is two consecutive panels, so the panel count is even)
  // and as B^T (B n x k: a panel of B^T is one panel): a Cholesky panel tile, read both ways by
  // the updates of its row and its column, is packed once.
  kRowPanels = 0,
  // Panels of kPanelCols columns, step s = row s of the tile: the tile as B (k x n).
  kColumnPanels = 1,
};
static_assert(kPanelRows == 2 * kPanelCols, "a block of A rows is two panels");

std::atomic<std::uint64_t> built{0};

/// A tile packed for the micro-kernel: `panels` panels of `depth` steps. Its storage is itself a
/// tile's buffer, recycled through the tile pool: packing a tile takes no fresh pages once the
/// job runs.
struct PackedOperand {
  int panels;
  int depth;
  Tile storage;
  PackedOperand(int panel_count, int steps)
      : panels(panel_count), depth(steps), storage(steps * kPanelCols, panel_count) {}
  [[nodiscard]] double* values() noexcept { return storage.data(); }
  [[nodiscard]] const double* panel(int p) const noexcept {
    return storage.data() + static_cast<std::size_t>(p) * depth * kPanelCols;
  }
};

std::shared_ptr<const PackedOperand> pack(const Tile& tile, Form form) {
  const int rows = tile.rows(), cols = tile.cols();
  const double* src = tile.data();
  std::shared_ptr<PackedOperand> out;
  if (form == kRowPanels) {
    const int blocks = (rows + kPanelRows - 1) / kPanelRows;
    out = std::make_shared<PackedOperand>(2 * blocks, cols);
    double* dst = out->values();
    for (int p = 0; p < out->panels; ++p) {
      const int first = p * kPanelCols, take = std::clamp(rows - first, 0, kPanelCols);
      if (take == kPanelCols) {
        for (int s = 0; s < cols; ++s, dst += kPanelCols) {
          std::memcpy(dst, src + static_cast<std::size_t>(s) * rows + first, sizeof(double) * kPanelCols);
        }
        continue;
      }
      for (int s = 0; s < cols; ++s, dst += kPanelCols) {
        const double* column = src + static_cast<std::size_t>(s) * rows + first;
        for (int l = 0; l < take; ++l) dst[l] = column[l];
        for (int l = take; l < kPanelCols; ++l) dst[l] = 0.0;
      }
    }
  } else {
    out = std::make_shared<PackedOperand>((cols + kPanelCols - 1) / kPanelCols, rows);
    for (int p = 0; p < out->panels; ++p) {
      double* dst = out->values() + static_cast<std::size_t>(p) * rows * kPanelCols;
      const int first = p * kPanelCols, take = std::min(kPanelCols, cols - first);
      for (int l = 0; l < kPanelCols; ++l) {
        if (l >= take) {
          for (int s = 0; s < rows; ++s) dst[static_cast<std::size_t>(s) * kPanelCols + l] = 0.0;
          continue;
        }
        const double* column = src + static_cast<std::size_t>(first + l) * rows;
        for (int s = 0; s < rows; ++s) dst[static_cast<std::size_t>(s) * kPanelCols + l] = column[s];
      }
    }
  }
  built.fetch_add(1, std::memory_order_relaxed);
  return out;
}

/// The tile's packed form, built and kept with it by the first reader.
std::shared_ptr<const PackedOperand> packed(const Tile& tile, Form form) {
  if (auto kept = tile.derived_form(form)) return std::static_pointer_cast<const PackedOperand>(kept);
  return std::static_pointer_cast<const PackedOperand>(tile.keep_derived_form(form, pack(tile, form)));
}

/// How the micro-kernel writes its block into C: C = scale * C + sign * product, where scale
/// is 0 (C not read), 1 or another value, and sign is alpha (the products are summed first).
struct Update {
  double alpha;
  double beta;
};

/// The product of `steps` steps of A's two panels `a_upper` and `a_lower` (kPanelRows rows) and
/// panel `b` (kPanelCols wide) into the kPanelRows x kPanelCols block of C at `c` (leading
/// dimension ldc), as `update` says.
__attribute__((target("avx512f,fma"))) void micro_kernel(int steps, const double* __restrict a_upper,
                                                          const double* __restrict a_lower,
                                                          const double* __restrict b, double* __restrict c,
                                                          int ldc, Update update) {
  // C's block is read and written once, after the steps: fetch its lines while they run.
  for (int j = 0; j < kPanelCols; ++j) {
    _mm_prefetch(reinterpret_cast<const char*>(c + static_cast<std::size_t>(j) * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + static_cast<std::size_t>(j) * ldc + 8), _MM_HINT_T0);
  }
  __m512d sum[kPanelCols][2];
  for (int j = 0; j < kPanelCols; ++j) sum[j][0] = sum[j][1] = _mm512_setzero_pd();
  for (int s = 0; s < steps; ++s) {
    const __m512d a0 = _mm512_load_pd(a_upper), a1 = _mm512_load_pd(a_lower);
    _mm_prefetch(reinterpret_cast<const char*>(a_upper + 8 * kPanelCols), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(a_lower + 8 * kPanelCols), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < kPanelCols; ++j) {
      const __m512d bj = _mm512_set1_pd(b[j]);
      sum[j][0] = _mm512_fmadd_pd(a0, bj, sum[j][0]);
      sum[j][1] = _mm512_fmadd_pd(a1, bj, sum[j][1]);
    }
    a_upper += kPanelCols;
    a_lower += kPanelCols;
    b += kPanelCols;
  }
  const __m512d alpha = _mm512_set1_pd(update.alpha);
  for (int j = 0; j < kPanelCols; ++j) {
    double* column = c + static_cast<std::size_t>(j) * ldc;
    __m512d lo = _mm512_mul_pd(alpha, sum[j][0]), hi = _mm512_mul_pd(alpha, sum[j][1]);
    if (update.beta == 1.0) {
      lo = _mm512_add_pd(_mm512_loadu_pd(column), lo);
      hi = _mm512_add_pd(_mm512_loadu_pd(column + 8), hi);
    } else if (update.beta != 0.0) {
      const __m512d beta = _mm512_set1_pd(update.beta);
      lo = _mm512_fmadd_pd(beta, _mm512_loadu_pd(column), lo);
      hi = _mm512_fmadd_pd(beta, _mm512_loadu_pd(column + 8), hi);
    }
    _mm512_storeu_pd(column, lo);
    _mm512_storeu_pd(column + 8, hi);
  }
}

/// The same for a block cut by C's edge (rows x cols of it), or, with `lower_only`, a block
/// that crosses the diagonal of C: only the elements with i >= j (C's own indices i0 + i,
/// j0 + j) are written.
__attribute__((target("avx512f,fma"))) void edge_kernel(int steps, const double* a_upper, const double* a_lower,
                                                         const double* b, double* c,
                                                         int ldc, Update update, int rows, int cols,
                                                         bool lower_only, int i0, int j0) {
  alignas(64) double block[kPanelRows * kPanelCols];
  micro_kernel(steps, a_upper, a_lower, b, block, kPanelRows, Update{update.alpha, 0.0});
  for (int j = 0; j < cols; ++j) {
    for (int i = 0; i < rows; ++i) {
      if (lower_only && i0 + i < j0 + j) continue;
      double& x = c[static_cast<std::size_t>(j) * ldc + i];
      const double product = block[j * kPanelRows + i];
      x = update.beta == 0.0 ? product : update.beta == 1.0 ? x + product : update.beta * x + product;
    }
  }
}

/// C = alpha * A * B + beta * C over packed panels; with `lower_only`, only C's lower triangle.
void multiply(const PackedOperand& a, const PackedOperand& b, double alpha, double beta, Tile& c,
              bool lower_only) {
  const int m = c.rows(), n = c.cols(), k = a.depth, ldc = c.rows();
  double* cv = c.data();
  for (int k0 = 0; k0 < k; k0 += kStepK) {
    const int steps = std::min(kStepK, k - k0);
    const Update update{alpha, k0 == 0 ? beta : 1.0};
    for (int i_block = 0; i_block < m; i_block += kBlockRows) {
      const int i_end = std::min(m, i_block + kBlockRows);
      // A panel of B stays near while A's block passes. (B's row panels may end in a panel of
      // zeros past C's last column: a block of rows is two panels.)
      for (int jp = 0; jp * kPanelCols < n; ++jp) {
        const int j0 = jp * kPanelCols, cols = std::min(kPanelCols, n - j0);
        const double* bp = b.panel(jp) + static_cast<std::size_t>(k0) * kPanelCols;
        for (int i0 = i_block; i0 < i_end; i0 += kPanelRows) {
          if (lower_only && i0 + kPanelRows - 1 < j0) continue;  // wholly above the diagonal
          const int rows = std::min(kPanelRows, m - i0);
          const int upper = 2 * (i0 / kPanelRows);
          const double* a_upper = a.panel(upper) + static_cast<std::size_t>(k0) * kPanelCols;
          const double* a_lower = a.panel(upper + 1) + static_cast<std::size_t>(k0) * kPanelCols;
          double* cp = cv + static_cast<std::size_t>(j0) * ldc + i0;
          const bool crosses = lower_only && i0 < j0 + cols - 1;
          if (rows == kPanelRows && cols == kPanelCols && !crosses) {
            micro_kernel(steps, a_upper, a_lower, bp, cp, ldc, update);
          } else {
            edge_kernel(steps, a_upper, a_lower, bp, cp, ldc, update, rows, cols, crosses, i0, j0);
          }
        }
      }
    }
  }
}

bool cpu_has_kernel() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

bool chosen() {
  const char* text = std::getenv("BELLOWS_TILE_GEMM");
  const std::string choice = text ? text : "packed";
  if (choice != "packed" && choice != "openblas") {
    throw std::invalid_argument("BELLOWS_TILE_GEMM must be packed or openblas, got '" + choice + "'");
  }
  return choice == "packed" && cpu_has_kernel();
}

}  // namespace

bool available() {
  static const bool use = chosen();
  return use;
}

bool suits(int m, int n, int k) {
  return available() && std::max({m, n, k}) <= kLargestPackedOrder;
}

void gemm(const Tile& a, const Tile& b, bool b_transposed, double alpha, double beta, Tile& c) {
  const auto left = packed(a, kRowPanels);
  const auto right = packed(b, b_transposed ? kRowPanels : kColumnPanels);
  multiply(*left, *right, alpha, beta, c, false);
}

void syrk_lower_minus(const Tile& a, Tile& c) {
  const auto both = packed(a, kRowPanels);
  multiply(*both, *both, -1.0, 1.0, c, true);
}

bool suits_trsm(int m, int n) {
  return available() && m % kPanelRows == 0 && n % kPanelCols == 0 && std::max(m, n) <= kLargestPackedOrder;
}

namespace {

/// Columns [j0, j0 + kPanelCols) of X (m rows, leading dimension m) after the update by the
/// columns before them: X_J = X_J L_JJ^-T, column by column, with `inverse` the reciprocals
/// of L's diagonal.
__attribute__((target("avx512f,fma"))) void solve_block(double* x, int m, const Tile& l, int j0,
                                                          const double* inverse) {
  for (int c = j0; c < j0 + kPanelCols; ++c) {
    double* column = x + static_cast<std::size_t>(c) * m;
    for (int i = 0; i < m; i += 8) {
      __m512d v = _mm512_loadu_pd(column + i);
      for (int q = j0; q < c; ++q) {
        v = _mm512_fnmadd_pd(_mm512_loadu_pd(x + static_cast<std::size_t>(q) * m + i),
                             _mm512_set1_pd(l.at(c, q)), v);
      }
      _mm512_storeu_pd(column + i, _mm512_mul_pd(v, _mm512_set1_pd(inverse[c])));
    }
  }
}

}  // namespace

void trsm_right_lower_trans(const Tile& l, Tile& a) {
  const int m = a.rows(), n = a.cols();
  const auto lower = packed(l, kRowPanels);  // row panel J of L: L_{J,<J} as B^T, steps 0..j0
  std::vector<double> inverse(static_cast<std::size_t>(n));
  for (int c = 0; c < n; ++c) inverse[c] = 1.0 / l.at(c, c);
  double* x = a.data();  // written: drops the forms kept with the right-hand side
  // X's row panels fill step by step as its columns are solved: the updates read them, and
  // the whole form is kept with X for the products that read it next.
  auto solved = std::make_shared<PackedOperand>(2 * (m / kPanelRows), n);
  for (int j0 = 0; j0 < n; j0 += kPanelCols) {
    if (j0 > 0) {
      const double* b = lower->panel(j0 / kPanelCols);
      for (int i0 = 0; i0 < m; i0 += kPanelRows) {
        const int upper = 2 * (i0 / kPanelRows);
        micro_kernel(j0, solved->panel(upper), solved->panel(upper + 1), b,
                     x + static_cast<std::size_t>(j0) * m + i0, m, Update{-1.0, 1.0});
      }
    }
    solve_block(x, m, l, j0, inverse.data());
    for (int p = 0; p < solved->panels; ++p) {
      double* dst = solved->values() + (static_cast<std::size_t>(p) * n + j0) * kPanelCols;
      for (int c = j0; c < j0 + kPanelCols; ++c, dst += kPanelCols) {
        std::memcpy(dst, x + static_cast<std::size_t>(c) * m + p * kPanelCols, sizeof(double) * kPanelCols);
      }
    }
  }
  built.fetch_add(1, std::memory_order_relaxed);
  a.keep_derived_form(kRowPanels, std::move(solved));
}

std::uint64_t forms_built() noexcept { return built.load(std::memory_order_relaxed); }

}  // namespace bellows::kernels::packed
