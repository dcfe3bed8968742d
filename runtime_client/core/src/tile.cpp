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

std::shared_ptr<Tile> Tile::clone() const {
  auto copy = std::make_shared<Tile>(rows_, cols_);
  std::copy_n(data_, elements(), copy->data());
  copy->set_residency(residency());
  return copy;
}

}  // namespace bellows::runtime
