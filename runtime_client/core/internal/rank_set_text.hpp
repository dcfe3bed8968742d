#pragma once
// How the runtime's messages write a set of ranks: "{1, 3}".

#include <span>
#include <string>

namespace bellows::runtime {

inline std::string rank_set_text(std::span<const int> ranks) {
  std::string text = "{";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text + "}";
}

}  // namespace bellows::runtime
