#pragma once
// Block-sparse GEMM, C = A * B, as a parameterized task graph whose work per rank is
// uneven: the benchmark that motivates inter-rank work stealing in John & Milthorpe,
// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
// section V-C and Table I (after Herault et al., IPDPS 2021, block-sparse contraction).
//
// Only some tiles of A (m x k tiles) and B (k x n tiles) are nonzero (TilePattern).
// Task BSPGEMM(i, j, k) exists when A(i,k) and B(k,j) are both nonzero and computes
// C(i,j) += A(i,k) * B(k,j). The C tile flows along the nonzero k's of (i, j) in
// increasing order: the first starts from a scratch tile (beta = 0), the last writes
// C(i,j) back to collection C. Every task runs on the owner of C(i,j), so under the
// fixed 2D block-cyclic mapping a rank's work is the sum of the chains it owns.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/task.hpp"

namespace bellows::examples {

/// How the nonzero tiles of A and B are chosen.
enum class SparsityPattern {
  random,  ///< every tile nonzero with probability `density`, independently
  banded,  ///< the tiles nearest the diagonal, as many as `density` asks for
  skewed,  ///< Zipf-like row weights for A and column weights for B: a few heavy rows
           ///< and columns, so a few C tiles (and the ranks owning them) get most work
};

[[nodiscard]] std::string_view to_string(SparsityPattern pattern) noexcept;
/// Parses "random", "banded" or "skewed"; returns false (out untouched) on anything else.
[[nodiscard]] bool parse_sparsity_pattern(std::string_view text, SparsityPattern& out) noexcept;

/// Which tiles of A (mt x kt tiles) and B (kt x nt tiles) are nonzero, and for every
/// C tile (i, j) the increasing list of k with A(i,k) and B(k,j) both nonzero.
///
/// The pattern is a pure function of (shape, pattern, density, seed): every rank builds
/// the same one without communicating, on any platform (no std:: distributions).
///   random  A(i,k) is nonzero when u(i,k) < density, u a hash of (seed, i, k) in [0, 1).
///   banded  tiles are ranked by their distance to the diagonal of the rectangular tile
///           grid, |(2r+1) C - (2c+1) R| for an R x C grid (exact in integers), ties broken
///           by a seeded hash; the first round(density R C) tiles (at least one) are
///           nonzero. So every tile closer than band_width() is nonzero, none farther.
///   skewed  row r of A gets the weight 1 / (1 + rank(r))^kSkewExponent, rank(r) a seeded
///           permutation of the rows; probabilities p(r) = min(1, s * weight(r)) with s
///           chosen (bisection) so that the mean of p over the rows equals density; then
///           A(r,k) is nonzero when u(r,k) < p(r). B likewise with column weights.
///
/// Thread safety: immutable after construction; all methods may be called concurrently.
class TilePattern {
 public:
  /// Exponent of the skewed pattern's power law (1: Zipf).
  static constexpr double kSkewExponent = 1.0;

  /// Throws std::invalid_argument unless the tile counts are positive and
  /// 0 < density <= 1.
  TilePattern(int mt, int kt, int nt, SparsityPattern pattern, double density, unsigned seed);

  [[nodiscard]] int mt() const noexcept { return mt_; }  ///< tile rows of A and C
  [[nodiscard]] int kt() const noexcept { return kt_; }  ///< tile columns of A, rows of B
  [[nodiscard]] int nt() const noexcept { return nt_; }  ///< tile columns of B and C
  [[nodiscard]] SparsityPattern pattern() const noexcept { return pattern_; }
  [[nodiscard]] double density() const noexcept { return density_; }

  [[nodiscard]] bool a_nonzero(int i, int k) const noexcept {
    return a_[static_cast<std::size_t>(i) * kt_ + k] != 0;
  }
  [[nodiscard]] bool b_nonzero(int k, int j) const noexcept {
    return b_[static_cast<std::size_t>(k) * nt_ + j] != 0;
  }
  /// True when C(i,j) receives at least one product.
  [[nodiscard]] bool c_nonzero(int i, int j) const noexcept { return !ks(i, j).empty(); }
  /// The k's with A(i,k) and B(k,j) both nonzero, increasing.
  [[nodiscard]] std::span<const std::int32_t> ks(int i, int j) const noexcept {
    const std::size_t c = static_cast<std::size_t>(i) * nt_ + j;
    return {ks_.data() + offsets_[c], ks_.data() + offsets_[c + 1]};
  }
  /// Position of k in ks(i, j), or -1 when (i, j, k) is not a product.
  [[nodiscard]] int position(int i, int j, int k) const noexcept;

  [[nodiscard]] std::size_t a_nonzeros() const noexcept { return a_count_; }
  [[nodiscard]] std::size_t b_nonzeros() const noexcept { return b_count_; }
  [[nodiscard]] std::size_t products() const noexcept { return ks_.size(); }  ///< tasks

  /// Banded only: the largest diagonal distance (as defined above) of a nonzero tile of
  /// A, resp. B; 0 for the other patterns.
  [[nodiscard]] std::int64_t a_band_width() const noexcept { return a_band_; }
  [[nodiscard]] std::int64_t b_band_width() const noexcept { return b_band_; }

 private:
  /// Fills `mask` (rows x cols, row-major) and returns the number of nonzeros.
  std::size_t choose(std::vector<std::uint8_t>& mask, int rows, int cols, bool by_row,
                     std::uint64_t salt, std::int64_t& band);

  int mt_;
  int kt_;
  int nt_;
  SparsityPattern pattern_;
  double density_;
  unsigned seed_;
  std::vector<std::uint8_t> a_;         // mt x kt, row-major
  std::vector<std::uint8_t> b_;         // kt x nt, row-major
  std::vector<std::size_t> offsets_;    // mt * nt + 1, into ks_
  std::vector<std::int32_t> ks_;
  std::size_t a_count_ = 0;
  std::size_t b_count_ = 0;
  std::int64_t a_band_ = 0;
  std::int64_t b_band_ = 0;
};

/// Inner widths of the k tile slabs for a workload of mixed fill: slab k is "thin" with
/// probability `thin_fraction` (a seeded hash of k, the same on every rank), and then only
/// its first `thin_width` columns of A(:, k) and rows of B(k, :) hold nonzeros; the other
/// slabs are full (`tile`). Tiles stay stored dense (tile x tile), so a thin slab's product
/// moves as many bytes as a full one's for a fraction of the flops: cheap to compute,
/// expensive to move. An empty result (thin_fraction 0) means every slab is full.
[[nodiscard]] std::vector<int> thin_slab_widths(int kt, int tile, double thin_fraction,
                                                int thin_width, unsigned seed);

/// Modeled cost of one iteration on devices of a given speed (the emulated device's
/// model: a task takes flops / rate seconds, `lanes` tasks at a time per rank).
struct ModeledWork {
  double work_seconds = 0.0;           ///< all tasks, one after the other
  double critical_path_seconds = 0.0;  ///< the longest C(i,j) chain
  /// max(work / (ranks * lanes), critical path): no schedule can finish sooner.
  double balanced_bound_seconds = 0.0;
  /// The most work one rank owns under the fixed mapping, divided by lanes: the
  /// makespan without any migration of work is at least this.
  double max_rank_work_seconds = 0.0;
};

class BspgemmTasks final : public runtime::TaskClass {
 public:
  /// a: m x k, b: k x n, c: m x n, same tile size, tile grids matching `pattern`; every
  /// nonzero tile of A and B must be kept by its matrix (TiledMatrix's keep filter).
  /// All four are referenced, not copied, and must outlive the task class.
  /// Throws std::invalid_argument when shapes or filters disagree.
  /// `inner_widths`: per k slab, the columns of A(:, k) and rows of B(k, :) that hold
  /// nonzeros (thin_slab_widths); empty: all of them. The CPU body multiplies only those
  /// (the entries beyond must be zero, so that the CUDA body's full product agrees).
  BspgemmTasks(runtime::TaskClassId id, const TilePattern& pattern, const runtime::TiledMatrix& a,
               const runtime::TiledMatrix& b, const runtime::TiledMatrix& c,
               std::vector<int> inner_widths = {});

  [[nodiscard]] std::string_view name() const override { return "BSPGEMM"; }
  void for_each_task(const std::function<void(const runtime::TaskKey&)>& fn) const override;
  [[nodiscard]] int owner(const runtime::TaskKey& key) const override;
  void inputs(const runtime::TaskKey& key, std::vector<runtime::InputSource>& out) const override;
  void successors(const runtime::TaskKey& key, int slot,
                  std::vector<runtime::Successor>& out) const override;
  [[nodiscard]] double flops(const runtime::TaskKey& key) const override;
  [[nodiscard]] std::int64_t priority(const runtime::TaskKey& key) const override;
  void execute_cpu(const runtime::TaskKey& key,
                   std::span<runtime::Tile* const> tiles) const override;
  [[nodiscard]] bool has_cuda_body() const override;
  void execute_cuda(const runtime::TaskKey& key, const runtime::CudaTaskContext& ctx) const override;

  /// Floating-point operations of all tasks together.
  [[nodiscard]] double total_flops() const;
  /// The model above for `ranks` ranks (owners taken from C's distribution), devices of
  /// `gflops` GFLOP/s running `lanes` tasks at once.
  [[nodiscard]] ModeledWork modeled_work(int ranks, double gflops, int lanes) const;

  static constexpr int kSlotA = 0;
  static constexpr int kSlotB = 1;
  static constexpr int kSlotC = 2;

 private:
  [[nodiscard]] int inner_width(int k) const noexcept {
    return inner_widths_.empty() ? a_.cols_of_tile(k)
                                 : std::min(inner_widths_[static_cast<std::size_t>(k)], a_.cols_of_tile(k));
  }
  [[nodiscard]] bool is_first(const runtime::TaskKey& key) const noexcept {
    return pattern_.ks(key.index[0], key.index[1]).front() == key.index[2];
  }

  const TilePattern& pattern_;
  const runtime::TiledMatrix& a_;
  const runtime::TiledMatrix& b_;
  const runtime::TiledMatrix& c_;
  std::vector<int> inner_widths_;
};

}  // namespace bellows::examples
