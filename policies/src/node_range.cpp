// MIN:MAX node ranges (`--elastic=MIN:MAX`).

#include <charconv>

#include "bellows/policy/load.hpp"
#include "text.hpp"

namespace bellows::policy {
namespace {

// Parses a whole number >= 0 that fits an int; false otherwise.
bool parse_count(std::string_view text, int& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && end == text.data() + text.size();
}

}  // namespace

NodeRangeResult parse_node_range(std::string_view text) {
  const std::string prefix = "node range " + detail::in_quotes(text) + ": ";
  const auto colon = text.find(':');
  if (colon == std::string_view::npos || text.find(':', colon + 1) != std::string_view::npos) {
    return {std::nullopt, prefix + "expected MIN:MAX, e.g. 2:8"};
  }
  const std::string_view min_text = text.substr(0, colon);
  const std::string_view max_text = text.substr(colon + 1);
  if (min_text.empty()) return {std::nullopt, prefix + "MIN is missing"};
  if (max_text.empty()) return {std::nullopt, prefix + "MAX is missing"};
  NodeRange range;
  if (!parse_count(min_text, range.min)) {
    return {std::nullopt, prefix + "MIN " + detail::in_quotes(min_text) + " is not a whole number"};
  }
  if (!parse_count(max_text, range.max)) {
    return {std::nullopt, prefix + "MAX " + detail::in_quotes(max_text) + " is not a whole number"};
  }
  if (range.min < 1) {
    return {std::nullopt, prefix + "MIN must be at least 1, got " + std::to_string(range.min)};
  }
  if (range.min > range.max) {
    return {std::nullopt, prefix + "MIN (" + std::to_string(range.min) +
                              ") is larger than MAX (" + std::to_string(range.max) + ")"};
  }
  return {range, {}};
}

std::vector<Inconsistency> apply_node_range(Policy& policy, NodeRange range) {
  Policy changed = policy;
  changed.nodes.min = range.min;
  changed.nodes.max = range.max;
  auto problems = check_consistency(changed);
  if (problems.empty()) policy = changed;
  return problems;
}

}  // namespace bellows::policy
