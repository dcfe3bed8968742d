#pragma once
// Small text functions shared by the policy library's sources.

#include <cstdio>
#include <string>
#include <string_view>

namespace bellows::policy::detail {

/// A number as people write it: "8", "0.95", "12.5", "0.3333", "12345.6".
inline std::string format_number(double value) {
  char buffer[64];
  if (value >= 1000.0 || value <= -1000.0) {
    // Four significant digits would switch to exponents here ("1.235e+04").
    std::snprintf(buffer, sizeof buffer, "%.1f", value);
    std::string text = buffer;
    if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
    return text;
  }
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
