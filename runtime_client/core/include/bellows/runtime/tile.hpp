#pragma once
// A tile: the unit of data that flows between tasks and across ranks.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

namespace bellows::runtime {

/// A dense column-major block of doubles whose leading dimension equals rows().
/// The contents are left uninitialised on construction (tiles are filled by a
/// kernel, a received message or a copy). Buffers are 64-byte aligned and recycled
/// through a process-wide pool, so that a steady stream of tiles causes no page faults. Not internally synchronised: the
/// runtime hands a writable tile to exactly one task at a time.
///
/// A tile may also carry read-only forms derived from its contents (derived_form): a kernel's
/// packed copy of the tile as an operand, built by the first task that reads the tile that way
/// and reused by every later reader of the same contents. Any access that may change the
/// contents (the non-const data() and at()) drops them first.
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
  /// The contents, to be written: drops the derived forms.
  [[nodiscard]] double* data() noexcept {
    drop_derived_forms();
    return data_;
  }
  [[nodiscard]] const double* data() const noexcept { return data_; }
  /// Element (i, j), column-major, to be written: drops the derived forms.
  [[nodiscard]] double& at(int i, int j) noexcept {
    drop_derived_forms();
    return data_[static_cast<std::size_t>(j) * rows_ + i];
  }
  [[nodiscard]] double at(int i, int j) const noexcept {
    return data_[static_cast<std::size_t>(j) * rows_ + i];
  }
  /// How many derived forms a tile can carry at once (slots 0 .. kDerivedForms - 1); which
  /// slot holds which form is the convention of the kernels that build them.
  static constexpr int kDerivedForms = 4;
  /// The form kept in `slot` for the present contents, or null. Safe from any thread that may
  /// read the tile.
  [[nodiscard]] std::shared_ptr<const void> derived_form(int slot) const;
  /// Keeps `form` in `slot` for the present contents, unless another reader kept one there
  /// first; returns the form kept. Safe from any thread that may read the tile.
  std::shared_ptr<const void> keep_derived_form(int slot, std::shared_ptr<const void> form) const;

  /// A deep copy (with the same residency; without derived forms).
  [[nodiscard]] std::shared_ptr<Tile> clone() const;

  /// Where a valid copy of the contents is: a set of kOnHost and on_device(g) bits, one per
  /// GPU of the rank. A new tile is on the host; a scratch tile (contents undefined) is valid
  /// everywhere. For the
  /// emulated device's data-movement model (RuntimeOptions::emulated_link_gbps) this is
  /// bookkeeping only: the data itself always lives in host memory. With the CUDA device a
  /// tile without kOnHost has its only valid copy in GPU memory (DeviceTileCache). Safe from
  /// any thread.
  static constexpr std::uint8_t kOnHost = 1;
  static constexpr std::uint8_t kOnDevice = 2;  ///< the rank's first GPU: on_device(0)
  /// A rank drives at most this many GPUs (RuntimeOptions::gpus), one residency bit each.
  static constexpr std::size_t kMaxDevices = 7;
  /// The bit of the rank's GPU `gpu` (0 .. kMaxDevices - 1).
  [[nodiscard]] static constexpr std::uint8_t on_device(std::size_t gpu) noexcept {
    return static_cast<std::uint8_t>(kOnDevice << gpu);
  }
  /// Valid everywhere: a scratch tile, whose contents are undefined.
  static constexpr std::uint8_t kEverywhere = 0xFF;
  [[nodiscard]] std::uint8_t residency() const noexcept {
    return residency_.load(std::memory_order_acquire);
  }
  void set_residency(std::uint8_t where) noexcept {
    residency_.store(where, std::memory_order_release);
  }
  /// Adds `where` to the places that hold a valid copy (a read that copied it there).
  void add_residency(std::uint8_t where) noexcept {
    residency_.fetch_or(where, std::memory_order_acq_rel);
  }

 private:
  void drop_derived_forms() noexcept {
    if (has_derived_forms_.load(std::memory_order_relaxed)) drop_derived_forms_slow();
  }
  void drop_derived_forms_slow() noexcept;

  int rows_;
  int cols_;
  double* data_;
  std::atomic<std::uint8_t> residency_{kOnHost};  // from the tile buffer pool (tile_pool.hpp), returned there on destruction
  mutable std::atomic<bool> has_derived_forms_{false};
  mutable std::mutex derived_forms_mutex_;
  mutable std::shared_ptr<const void> derived_forms_[kDerivedForms];
};

using TilePtr = std::shared_ptr<Tile>;

}  // namespace bellows::runtime
