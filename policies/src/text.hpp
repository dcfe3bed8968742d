#pragma once
// Small text helpers shared by the policy library's sources.

#include <cstdio>
#include <string>
#include <string_view>

namespace bellows::policy::detail {

/// A number as people write it: "8", "0.95", "12.5", "0.3333".
inline std::string format_number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", value);
  return buffer;
}

/// 'text', quoted for messages.
inline std::string in_quotes(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out += text;
  out += '\'';
  return out;
}

/// Levenshtein distance between two short strings.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace bellows::policy::detail
