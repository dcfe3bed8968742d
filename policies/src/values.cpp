// Scalar values of policy keys: parsing, range checks and their descriptions.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bellows/policy/schema.hpp"
#include "text.hpp"

namespace bellows::policy {
namespace detail {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace detail

namespace {

using detail::format_number;
using detail::in_quotes;

constexpr double kIntMax = std::numeric_limits<int>::max();

std::string limit_text(const KeyInfo& key, double limit) {
  if (key.type == KeyType::duration) {
    return format_duration(Duration(static_cast<Duration::rep>(limit)));
  }
  if (key.type == KeyType::integer) return std::to_string(static_cast<long long>(limit));
  return format_number(limit);
}

// An upper limit that only reflects the width of the field is not worth saying.
bool has_real_max(const KeyInfo& key) { return key.max.has_value() && *key.max != kIntMax; }

std::string range_text(const KeyInfo& key) {
  if (key.min && has_real_max(key)) {
    return limit_text(key, *key.min) + " to " + limit_text(key, *key.max);
  }
  if (key.min) return "at least " + limit_text(key, *key.min);
  if (has_real_max(key)) return "at most " + limit_text(key, *key.max);
  return {};
}

// "must be ..." for a value outside the key's range, or empty when inside.
std::string check_range(const KeyInfo& key, double value, std::string_view shown) {
  const bool below = key.min && value < *key.min;
  const bool above = key.max && value > *key.max;
  if (!below && !above) return {};
  std::string out = "must be ";
  if (key.min && has_real_max(key)) {
    out += "between " + limit_text(key, *key.min) + " and " + limit_text(key, *key.max);
  } else if (below) {
    out += "at least " + limit_text(key, *key.min);
  } else {
    out += "at most " + limit_text(key, *key.max);
  }
  out += ", got ";
  out += shown;
  return out;
}

bool all_digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "12", "1.5": digits with at most one decimal point inside.
bool plain_decimal(std::string_view text) {
  const auto dot = text.find('.');
  if (dot == std::string_view::npos) return all_digits(text);
  return all_digits(text.substr(0, dot)) && all_digits(text.substr(dot + 1));
}

std::string parse_integer(const KeyInfo& key, std::string_view text, KeyValue& out) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    // Too many digits for any field: report it against the key's own range.
    return check_range(key, text.front() == '-' ? -HUGE_VAL : HUGE_VAL, text);
  }
  if (ec != std::errc{} || end != text.data() + text.size()) {
    return "expected an integer, got " + in_quotes(text);
  }
  if (auto wrong = check_range(key, static_cast<double>(value), text); !wrong.empty()) {
    return wrong;
  }
  out.integer = value;
  return {};
}

std::string parse_number(const KeyInfo& key, std::string_view text, KeyValue& out) {
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    return (key.type == KeyType::fraction ? "expected a number between 0 and 1, got "
                                          : "expected a number, got ") +
           in_quotes(text);
  }
  if (auto wrong = check_range(key, value, text); !wrong.empty()) return wrong;
  out.number = value;
  return {};
}

}  // namespace

std::string_view to_string(KeyType type) noexcept {
  switch (type) {
    case KeyType::section: return "map";
    case KeyType::integer: return "integer";
    case KeyType::number: return "number";
    case KeyType::fraction: return "fraction";
    case KeyType::duration: return "duration";
    case KeyType::boolean: return "boolean";
    case KeyType::choice: return "choice";
  }
  return "?";
}

std::string format_duration(Duration value) {
  const auto ms = value.count();
  if (ms == 0) return "0s";
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1'000 == 0) return std::to_string(ms / 1'000) + "s";
  return std::to_string(ms) + "ms";
}

std::string parse_duration(std::string_view text, Duration& out) {
  const std::string malformed =
      "expected a duration such as 500ms, 5s, 2m or 1h, got " + in_quotes(text);
  const bool negative = !text.empty() && text.front() == '-';
  const std::string_view magnitude = negative ? text.substr(1) : text;
  if (plain_decimal(magnitude)) {
    return "a duration needs a unit (ms, s, m or h), got " + in_quotes(text) + "; write e.g. '" +
           std::string(magnitude) + "s'";
  }
  std::size_t unit_at = 0;
  while (unit_at < magnitude.size() &&
         ((magnitude[unit_at] >= '0' && magnitude[unit_at] <= '9') || magnitude[unit_at] == '.')) {
    ++unit_at;
  }
  const std::string_view number = magnitude.substr(0, unit_at);
  const std::string_view unit = magnitude.substr(unit_at);
  long long factor = 0;
  if (unit == "ms") factor = 1;
  else if (unit == "s") factor = 1'000;
  else if (unit == "m") factor = 60'000;
  else if (unit == "h") factor = 3'600'000;
  if (factor == 0 || !plain_decimal(number)) return malformed;
  if (negative) return "must not be negative, got " + in_quotes(text);

  const auto dot = number.find('.');
  const std::string_view whole = number.substr(0, dot);
  const std::string_view fraction =
      dot == std::string_view::npos ? std::string_view{} : number.substr(dot + 1);
  if (whole.size() > 9 || fraction.size() > 6) return "duration " + in_quotes(text) + " is too large";
  long long whole_value = 0;
  long long fraction_value = 0;
  std::from_chars(whole.data(), whole.data() + whole.size(), whole_value);
  std::from_chars(fraction.data(), fraction.data() + fraction.size(), fraction_value);
  long long scale = 1;
  for (std::size_t i = 0; i < fraction.size(); ++i) scale *= 10;
  if ((fraction_value * factor) % scale != 0) {
    return "must be a whole number of milliseconds, got " + in_quotes(text);
  }
  out = Duration(whole_value * factor + fraction_value * factor / scale);
  return {};
}

std::string parse_value(const KeyInfo& key, std::string_view text, KeyValue& out) {
  switch (key.type) {
    case KeyType::section:
      return "expected a map, got " + in_quotes(text);
    case KeyType::integer:
      return parse_integer(key, text, out);
    case KeyType::number:
    case KeyType::fraction:
      return parse_number(key, text, out);
    case KeyType::duration: {
      Duration value{};
      if (auto wrong = parse_duration(text, value); !wrong.empty()) return wrong;
      if (auto wrong = check_range(key, static_cast<double>(value.count()), in_quotes(text));
          !wrong.empty()) {
        return wrong;
      }
      out.duration = value;
      return {};
    }
    case KeyType::boolean:
      // YAML 1.2's core schema: true and false, in three spellings each.
      if (text == "true" || text == "True" || text == "TRUE") {
        out.boolean = true;
        return {};
      }
      if (text == "false" || text == "False" || text == "FALSE") {
        out.boolean = false;
        return {};
      }
      return "expected true or false, got " + in_quotes(text);
    case KeyType::choice: {
      const auto it = std::find(key.choices.begin(), key.choices.end(), text);
      if (it != key.choices.end()) {
        out.choice = static_cast<std::size_t>(it - key.choices.begin());
        return {};
      }
      std::string allowed;
      for (const auto& choice : key.choices) {
        if (!allowed.empty()) allowed += ", ";
        allowed += choice;
      }
      return "unknown value " + in_quotes(text) + "; allowed: " + allowed;
    }
  }
  return "unknown key type";
}

std::string describe_type(const KeyInfo& key) {
  switch (key.type) {
    case KeyType::section: return "map";
    case KeyType::boolean: return "true or false";
    case KeyType::choice: {
      std::string out = "one of: ";
      for (std::size_t i = 0; i < key.choices.size(); ++i) {
        if (i > 0) out += ", ";
        out += key.choices[i];
      }
      return out;
    }
    default: {
      std::string out(to_string(key.type));
      if (const auto range = range_text(key); !range.empty()) out += ", " + range;
      return out;
    }
  }
}

}  // namespace bellows::policy
