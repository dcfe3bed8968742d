#include "bellows/runtime/block_cyclic.hpp"

#include <cmath>

namespace bellows::runtime {

BlockCyclic2D BlockCyclic2D::square_for(int ranks) {
  int p = static_cast<int>(std::sqrt(static_cast<double>(ranks)));
  while (p > 1 && ranks % p != 0) --p;
  return BlockCyclic2D{p < 1 ? 1 : p, ranks / (p < 1 ? 1 : p)};
}

}  // namespace bellows::runtime
