#include "bspgemm_tasks.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "bellows/kernels/tile_kernels.hpp"

namespace bellows::examples {

using runtime::Access;
using runtime::InputSource;
using runtime::Successor;
using runtime::TaskKey;

namespace {

// splitmix64 finaliser: the hashes below are defined by it alone, so a pattern is the
// same on every platform and standard library.
std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t hash(unsigned seed, std::uint64_t salt, std::int64_t a, std::int64_t b) noexcept {
  const std::uint64_t h = mix(static_cast<std::uint64_t>(seed) ^ mix(salt));
  return mix(mix(h + static_cast<std::uint64_t>(a)) ^ static_cast<std::uint64_t>(b));
}

/// Uniform in [0, 1), 53 bits.
double uniform(unsigned seed, std::uint64_t salt, std::int64_t a, std::int64_t b) noexcept {
  return static_cast<double>(hash(seed, salt, a, b) >> 11) * 0x1.0p-53;
}

// Salts separating the independent streams of one seed.
constexpr std::uint64_t kSaltA = 0xA11;
constexpr std::uint64_t kSaltB = 0xB22;
constexpr std::uint64_t kSaltPermutation = 0x9e3;
constexpr std::uint64_t kSaltTie = 0x7e1;
constexpr std::uint64_t kSaltThin = 0x7a1;

/// Probabilities min(1, s * w) whose mean is `density`, s found by bisection (the mean
/// is continuous and nondecreasing in s, 0 at s = 0 and 1 at s = 1 / min(w)).
std::vector<double> scaled_probabilities(const std::vector<double>& weights, double density) {
  const auto mean_at = [&](double s) {
    double sum = 0.0;
    for (double w : weights) sum += std::min(1.0, s * w);
    return sum / static_cast<double>(weights.size());
  };
  double lo = 0.0;
  double hi = 1.0 / *std::min_element(weights.begin(), weights.end());
  if (density >= 1.0) {
    lo = hi;
  } else {
    for (int it = 0; it < 200; ++it) {
      const double mid = 0.5 * (lo + hi);
      (mean_at(mid) < density ? lo : hi) = mid;
    }
  }
  const double s = density >= 1.0 ? hi : 0.5 * (lo + hi);
  std::vector<double> p(weights.size());
  for (std::size_t r = 0; r < weights.size(); ++r) p[r] = std::min(1.0, s * weights[r]);
  return p;
}

/// Zipf-like weights 1 / (1 + rank)^kSkewExponent, ranks a seeded Fisher-Yates
/// permutation of 0..count-1.
std::vector<double> skewed_weights(int count, unsigned seed, std::uint64_t salt) {
  std::vector<int> rank(static_cast<std::size_t>(count));
  std::iota(rank.begin(), rank.end(), 0);
  for (int r = count - 1; r > 0; --r) {
    const auto pick = static_cast<int>(uniform(seed, salt ^ kSaltPermutation, r, count) * (r + 1));
    std::swap(rank[static_cast<std::size_t>(r)], rank[static_cast<std::size_t>(std::min(pick, r))]);
  }
  std::vector<double> w(static_cast<std::size_t>(count));
  for (int r = 0; r < count; ++r) {
    w[static_cast<std::size_t>(r)] =
        std::pow(1.0 + rank[static_cast<std::size_t>(r)], -TilePattern::kSkewExponent);
  }
  return w;
}

}  // namespace

std::string_view to_string(SparsityPattern pattern) noexcept {
  switch (pattern) {
    case SparsityPattern::random: return "random";
    case SparsityPattern::banded: return "banded";
    case SparsityPattern::skewed: return "skewed";
  }
  return "unknown";
}

bool parse_sparsity_pattern(std::string_view text, SparsityPattern& out) noexcept {
  for (auto p : {SparsityPattern::random, SparsityPattern::banded, SparsityPattern::skewed}) {
    if (text == to_string(p)) {
      out = p;
      return true;
    }
  }
  return false;
}

TilePattern::TilePattern(int mt, int kt, int nt, SparsityPattern pattern, double density,
                         unsigned seed)
    : mt_(mt), kt_(kt), nt_(nt), pattern_(pattern), density_(density), seed_(seed) {
  if (mt <= 0 || kt <= 0 || nt <= 0) {
    throw std::invalid_argument("tile pattern " + std::to_string(mt) + "x" + std::to_string(kt) +
                                "x" + std::to_string(nt) + ": tile counts must be positive");
  }
  if (!(density > 0.0 && density <= 1.0)) {
    throw std::invalid_argument("tile pattern density must be in (0, 1], got " +
                                std::to_string(density));
  }
  a_count_ = choose(a_, mt_, kt_, /*by_row=*/true, kSaltA, a_band_);
  b_count_ = choose(b_, kt_, nt_, /*by_row=*/false, kSaltB, b_band_);

  offsets_.assign(static_cast<std::size_t>(mt_) * nt_ + 1, 0);
  std::vector<std::int32_t> a_row;
  for (int i = 0; i < mt_; ++i) {
    a_row.clear();
    for (int k = 0; k < kt_; ++k) {
      if (a_nonzero(i, k)) a_row.push_back(k);
    }
    for (int j = 0; j < nt_; ++j) {
      for (const auto k : a_row) {
        if (b_nonzero(k, j)) ks_.push_back(k);
      }
      offsets_[static_cast<std::size_t>(i) * nt_ + j + 1] = ks_.size();
    }
  }
}

std::size_t TilePattern::choose(std::vector<std::uint8_t>& mask, int rows, int cols, bool by_row,
                                std::uint64_t salt, std::int64_t& band) {
  const std::size_t total = static_cast<std::size_t>(rows) * cols;
  mask.assign(total, 0);
  const auto at = [&](int r, int c) -> std::uint8_t& {
    return mask[static_cast<std::size_t>(r) * cols + c];
  };
  std::size_t count = 0;
  switch (pattern_) {
    case SparsityPattern::random:
    case SparsityPattern::skewed: {
      // Per-line probabilities: lines are rows of A (by_row) or columns of B.
      const int lines = by_row ? rows : cols;
      const std::vector<double> p =
          pattern_ == SparsityPattern::random
              ? std::vector<double>(static_cast<std::size_t>(lines), density_)
              : scaled_probabilities(skewed_weights(lines, seed_, salt), density_);
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          const double prob = p[static_cast<std::size_t>(by_row ? r : c)];
          if (uniform(seed_, salt, r, c) < prob) {
            at(r, c) = 1;
            ++count;
          }
        }
      }
      break;
    }
    case SparsityPattern::banded: {
      struct Candidate {
        std::int64_t distance;
        std::uint64_t tie;
        int r;
        int c;
      };
      std::vector<Candidate> all;
      all.reserve(total);
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          const std::int64_t d = std::llabs((2LL * r + 1) * cols - (2LL * c + 1) * rows);
          all.push_back({d, hash(seed_, salt ^ kSaltTie, r, c), r, c});
        }
      }
      std::sort(all.begin(), all.end(), [](const Candidate& x, const Candidate& y) {
        return x.distance != y.distance ? x.distance < y.distance : x.tie < y.tie;
      });
      count = std::clamp<std::size_t>(
          static_cast<std::size_t>(std::llround(density_ * static_cast<double>(total))), 1, total);
      for (std::size_t t = 0; t < count; ++t) at(all[t].r, all[t].c) = 1;
      band = all[count - 1].distance;
      break;
    }
  }
  return count;
}

int TilePattern::position(int i, int j, int k) const noexcept {
  const auto list = ks(i, j);
  const auto it = std::lower_bound(list.begin(), list.end(), k);
  return it != list.end() && *it == k ? static_cast<int>(it - list.begin()) : -1;
}

BspgemmTasks::BspgemmTasks(runtime::TaskClassId id, const TilePattern& pattern,
                           const runtime::TiledMatrix& a, const runtime::TiledMatrix& b,
                           const runtime::TiledMatrix& c, std::vector<int> inner_widths)
    : TaskClass(id), pattern_(pattern), a_(a), b_(b), c_(c), inner_widths_(std::move(inner_widths)) {
  if (!inner_widths_.empty() && inner_widths_.size() != static_cast<std::size_t>(pattern.kt())) {
    throw std::invalid_argument("BSPGEMM: " + std::to_string(inner_widths_.size()) +
                                " inner widths for " + std::to_string(pattern.kt()) + " k slabs");
  }
  if (a.tile_size() != b.tile_size() || a.tile_size() != c.tile_size() || a.cols() != b.rows() ||
      a.rows() != c.rows() || b.cols() != c.cols()) {
    throw std::invalid_argument("BSPGEMM: matrix shapes or tile sizes do not match");
  }
  if (pattern.mt() != c.tile_rows() || pattern.kt() != a.tile_cols() ||
      pattern.nt() != c.tile_cols()) {
    throw std::invalid_argument("BSPGEMM: the tile pattern is " + std::to_string(pattern.mt()) +
                                "x" + std::to_string(pattern.kt()) + "x" +
                                std::to_string(pattern.nt()) + " tiles, the matrices " +
                                std::to_string(c.tile_rows()) + "x" +
                                std::to_string(a.tile_cols()) + "x" +
                                std::to_string(c.tile_cols()));
  }
  const auto unkept = [](char name, int m, int n) {
    return std::invalid_argument("BSPGEMM: tile " + std::string(1, name) + "(" +
                                 std::to_string(m) + "," + std::to_string(n) +
                                 ") is nonzero in the pattern but not kept by its matrix");
  };
  for (int i = 0; i < pattern.mt(); ++i) {
    for (int k = 0; k < pattern.kt(); ++k) {
      if (pattern.a_nonzero(i, k) && !a.kept(i, k)) throw unkept('A', i, k);
    }
  }
  for (int k = 0; k < pattern.kt(); ++k) {
    for (int j = 0; j < pattern.nt(); ++j) {
      if (pattern.b_nonzero(k, j) && !b.kept(k, j)) throw unkept('B', k, j);
    }
  }
}

void BspgemmTasks::for_each_task(const std::function<void(const TaskKey&)>& fn) const {
  for (int i = 0; i < pattern_.mt(); ++i) {
    for (int j = 0; j < pattern_.nt(); ++j) {
      for (const auto k : pattern_.ks(i, j)) fn(key(i, j, k));
    }
  }
}

int BspgemmTasks::owner(const TaskKey& key) const { return c_.owner(key.index[0], key.index[1]); }

void BspgemmTasks::inputs(const TaskKey& key, std::vector<InputSource>& out) const {
  const auto [i, j, k] = key.index;
  out.push_back(InputSource::from_collection(a_.index(i, k), Access::read));
  out.push_back(InputSource::from_collection(b_.index(k, j), Access::read));
  const int pos = pattern_.position(i, j, k);
  if (pos == 0) {
    out.push_back(InputSource::scratch_tile(c_.rows_of_tile(i), c_.cols_of_tile(j)));
  } else {
    const auto previous = pattern_.ks(i, j)[static_cast<std::size_t>(pos - 1)];
    out.push_back(InputSource::from_task(this->key(i, j, previous), kSlotC, Access::read_write));
  }
}

void BspgemmTasks::successors(const TaskKey& key, int slot, std::vector<Successor>& out) const {
  if (slot != kSlotC) return;
  const auto [i, j, k] = key.index;
  const auto list = pattern_.ks(i, j);
  const auto next = static_cast<std::size_t>(pattern_.position(i, j, k)) + 1;
  if (next < list.size()) {
    out.push_back(Successor::to_task(this->key(i, j, list[next]), kSlotC));
  } else {
    out.push_back(Successor::to_collection(c_.index(i, j)));
  }
}

double BspgemmTasks::flops(const TaskKey& key) const {
  const auto [i, j, k] = key.index;
  return 2.0 * c_.rows_of_tile(i) * c_.cols_of_tile(j) * inner_width(k);
}

std::vector<int> thin_slab_widths(int kt, int tile, double thin_fraction, int thin_width,
                                  unsigned seed) {
  if (!(thin_fraction > 0.0)) return {};
  std::vector<int> widths(static_cast<std::size_t>(kt), tile);
  for (int k = 0; k < kt; ++k) {
    if (uniform(seed, kSaltThin, k, 0) < thin_fraction) {
      widths[static_cast<std::size_t>(k)] = std::clamp(thin_width, 1, tile);
    }
  }
  return widths;
}

std::int64_t BspgemmTasks::priority(const TaskKey& key) const { return key.index[2]; }

void BspgemmTasks::execute_cpu(const TaskKey& key, std::span<runtime::Tile* const> tiles) const {
  const runtime::Tile& a = *tiles[kSlotA];
  const runtime::Tile& b = *tiles[kSlotB];
  runtime::Tile& c = *tiles[kSlotC];
  const int inner = std::min(inner_width(key.index[2]), a.cols());
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, c.rows(), c.cols(), inner, 1.0, a.data(),
              a.rows(), b.data(), b.rows(), is_first(key) ? 0.0 : 1.0, c.data(), c.rows());
}

bool BspgemmTasks::has_cuda_body() const { return kernels::cuda_available(); }

void BspgemmTasks::execute_cuda(const TaskKey& key, const runtime::CudaTaskContext& ctx) const {
  kernels::cuda_gemm_nn(ctx, kSlotA, kSlotB, is_first(key) ? 0.0 : 1.0, kSlotC);
}

double BspgemmTasks::total_flops() const {
  double total = 0.0;
  for_each_task([&](const TaskKey& key) { total += flops(key); });
  return total;
}

ModeledWork BspgemmTasks::modeled_work(int ranks, double gflops, int lanes) const {
  if (ranks <= 0 || !(gflops > 0.0) || lanes <= 0) {
    throw std::invalid_argument("modeled work needs positive ranks, rate and lanes");
  }
  const double rate = gflops * 1e9;
  std::vector<double> per_rank(static_cast<std::size_t>(ranks), 0.0);
  ModeledWork w;
  for (int i = 0; i < pattern_.mt(); ++i) {
    for (int j = 0; j < pattern_.nt(); ++j) {
      double chain = 0.0;
      for (const auto k : pattern_.ks(i, j)) chain += flops(key(i, j, k)) / rate;
      if (chain == 0.0) continue;
      const int rank = c_.owner(i, j);
      if (rank < 0 || rank >= ranks) {
        throw std::invalid_argument("C(" + std::to_string(i) + "," + std::to_string(j) +
                                    ") is owned by rank " + std::to_string(rank) + " of " +
                                    std::to_string(ranks));
      }
      per_rank[static_cast<std::size_t>(rank)] += chain;
      w.work_seconds += chain;
      w.critical_path_seconds = std::max(w.critical_path_seconds, chain);
    }
  }
  w.balanced_bound_seconds = std::max(w.work_seconds / (static_cast<double>(ranks) * lanes),
                                      w.critical_path_seconds);
  w.max_rank_work_seconds = *std::max_element(per_rank.begin(), per_rank.end()) / lanes;
  return w;
}

}  // namespace bellows::examples
