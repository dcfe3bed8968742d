#include "bellows/runtime/tile.hpp"

#include "tile_pool.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bellows::runtime {

Tile::Tile(int rows, int cols) : rows_(rows), cols_(cols) {
  if (rows < 0 || cols < 0) {
    throw std::invalid_argument("tile shape " + std::to_string(rows) + "x" + std::to_string(cols) +
                                " is negative");
  }
  data_ = tile_pool::acquire(elements());
}

Tile::~Tile() { tile_pool::release(data_, elements()); }

std::shared_ptr<const void> Tile::derived_form(int slot) const {
  if (slot < 0 || slot >= kDerivedForms) {
    throw std::out_of_range("derived form slot " + std::to_string(slot) + " is not in 0.." +
                            std::to_string(kDerivedForms - 1));
  }
  if (!has_derived_forms_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(derived_forms_mutex_);
  return derived_forms_[slot];
}

std::shared_ptr<const void> Tile::keep_derived_form(int slot, std::shared_ptr<const void> form) const {
  if (slot < 0 || slot >= kDerivedForms) {
    throw std::out_of_range("derived form slot " + std::to_string(slot) + " is not in 0.." +
                            std::to_string(kDerivedForms - 1));
  }
  std::lock_guard lock(derived_forms_mutex_);
  if (!derived_forms_[slot]) {
    derived_forms_[slot] = std::move(form);
    has_derived_forms_.store(true, std::memory_order_release);
  }
  return derived_forms_[slot];
}

void Tile::drop_derived_forms_slow() noexcept {
  std::lock_guard lock(derived_forms_mutex_);
  for (auto& form : derived_forms_) form.reset();
  has_derived_forms_.store(false, std::memory_order_relaxed);
}

std::shared_ptr<Tile> Tile::clone() const {
  auto copy = std::make_shared<Tile>(rows_, cols_);
  std::copy_n(data_, elements(), copy->data());
  copy->set_residency(residency());
  return copy;
}

}  // namespace bellows::runtime
