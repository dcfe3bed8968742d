#pragma once
// A tile: the unit of data that flows between tasks and across ranks.

#include <cstddef>
#include <memory>

namespace bellows::runtime {

/// A dense column-major block of doubles whose leading dimension equals rows().
/// The contents are left uninitialised on construction (tiles are filled by a
/// kernel, a received message or a copy). Buffers are 64-byte aligned and recycled
/// through a process-wide pool, so that a steady stream of tiles causes no page faults. Not internally synchronised: the
/// runtime hands a writable tile to exactly one task at a time.
class Tile {
 public:
  Tile(int rows, int cols);
  ~Tile();
  Tile(const Tile&) = delete;
  Tile& operator=(const Tile&) = delete;

  [[nodiscard]] int rows() const noexcept { return rows_; }
  [[nodiscard]] int cols() const noexcept { return cols_; }
  [[nodiscard]] std::size_t elements() const noexcept {
    return static_cast<std::size_t>(rows_) * static_cast<std::size_t>(cols_);
  }
  [[nodiscard]] std::size_t bytes() const noexcept { return elements() * sizeof(double); }
  [[nodiscard]] double* data() noexcept { return data_; }
  [[nodiscard]] const double* data() const noexcept { return data_; }
  /// Element (i, j), column-major.
  [[nodiscard]] double& at(int i, int j) noexcept {
    return data_[static_cast<std::size_t>(j) * rows_ + i];
  }
  [[nodiscard]] double at(int i, int j) const noexcept {
    return data_[static_cast<std::size_t>(j) * rows_ + i];
  }
  /// A deep copy.
  [[nodiscard]] std::shared_ptr<Tile> clone() const;

 private:
  int rows_;
  int cols_;
  double* data_;  // from the tile buffer pool (tile_pool.hpp), returned there on destruction
};

using TilePtr = std::shared_ptr<Tile>;

}  // namespace bellows::runtime
