#include "bellows/protocol/resize_report.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <system_error>

namespace bellows::protocol {
namespace {

/// "committed (1), refused (2), left (3), cancelled (4)" with numbers, else
/// "committed, refused, left, cancelled".
std::string outcome_names(bool with_numbers) {
  std::string text;
  for (const auto& o : kResizeOutcomes) {
    if (!text.empty()) text += ", ";
    text += o.name;
    if (with_numbers) text += " (" + std::to_string(static_cast<unsigned>(o.outcome)) + ")";
  }
  return text;
}

/// text in single quotes, then what follows ("'x' is not a rank"). Appended piece by piece:
/// GCC 12 warns (-Wrestrict, falsely) on "'" + std::string(...).
std::string quoted(std::string_view text, std::string_view then) {
  std::string out;
  out.reserve(text.size() + then.size() + 2);
  out += '\'';
  out += text;
  out += '\'';
  out += then;
  return out;
}

}  // namespace

std::string check(const ResizeReport& r) {
  if (to_string(r.outcome).empty()) {
    return "outcome: " + std::to_string(static_cast<unsigned>(r.outcome)) + " is none of " +
           outcome_names(true);
  }
  if (r.outcome == ResizeOutcome::left && r.ranks.empty()) {
    return "ranks: empty although the outcome is left";
  }
  return {};
}

namespace pmix {

std::uint64_t payload_value(std::uint64_t value) { return value; }
std::uint64_t payload_value(std::uint32_t value) { return value; }
std::string payload_value(ResizeOutcome outcome) { return std::string(to_string(outcome)); }
std::string payload_value(const std::vector<std::uint32_t>& ranks) {
  std::string text;
  for (std::uint32_t rank : ranks) {
    if (!text.empty()) text += ',';
    text += std::to_string(rank);
  }
  return text;
}
std::string payload_value(const std::string& text) { return text; }

std::string read_payload_value(std::uint64_t carried, std::uint64_t& field) {
  field = carried;
  return {};
}

std::string read_payload_value(std::uint64_t carried, std::uint32_t& field) {
  if (carried > std::numeric_limits<std::uint32_t>::max())
    return std::to_string(carried) + " exceeds " +
           std::to_string(std::numeric_limits<std::uint32_t>::max());
  field = static_cast<std::uint32_t>(carried);
  return {};
}

std::string read_payload_value(const std::string& carried, ResizeOutcome& field) {
  const auto outcome = resize_outcome_named(carried);
  if (!outcome) return quoted(carried, " is none of " + outcome_names(false));
  field = *outcome;
  return {};
}

std::string read_payload_value(const std::string& carried, std::vector<std::uint32_t>& field) {
  std::vector<std::uint32_t> ranks;
  std::size_t at = 0;
  while (at < carried.size()) {
    const std::size_t comma = std::min(carried.find(',', at), carried.size());
    const char* first = carried.data() + at;
    const char* last = carried.data() + comma;
    std::uint32_t rank = 0;
    const auto [end, error] = std::from_chars(first, last, rank);
    if (first == last || error != std::errc() || end != last)
      return quoted(std::string_view(first, static_cast<std::size_t>(last - first)),
                    " is not a rank");
    ranks.push_back(rank);
    at = comma + 1;
  }
  // "8," ends in an empty entry that the loop above does not see.
  if (!carried.empty() && carried.back() == ',') return quoted("", " is not a rank");
  field = std::move(ranks);
  return {};
}

std::string read_payload_value(const std::string& carried, std::string& field) {
  field = carried;
  return {};
}

}  // namespace pmix
}  // namespace bellows::protocol
