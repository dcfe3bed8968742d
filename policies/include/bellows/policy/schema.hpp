#pragma once
// The policy schema: every key declared once, with its type, default, allowed range and
// help text. The table drives parsing, validation, the defaults of Policy and the key
// reference (`bellows policy keys`, docs/policies.md).

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "bellows/policy/policy.hpp"

namespace bellows::policy {

/// What a key holds.
enum class KeyType {
  section,   ///< a map of further keys (nodes, expand, shrink, stealing)
  integer,   ///< a whole number
  number,    ///< a decimal number
  fraction,  ///< a decimal number between 0 and 1
  duration,  ///< a number with a unit: ms, s, m or h
  boolean,   ///< true or false
  choice,    ///< one of a fixed list of words
};

[[nodiscard]] std::string_view to_string(KeyType type) noexcept;

/// A parsed scalar value; the member that matches the key's type is set.
struct KeyValue {
  long long integer = 0;
  double number = 0.0;
  Duration duration{};
  bool boolean = false;
  /// Index into KeyInfo::choices.
  std::size_t choice = 0;
};

/// One key of the schema.
struct KeyInfo {
  /// Dotted path from the top of the file: "nodes.min".
  std::string_view path;
  KeyType type;
  /// The default as it would be written in YAML; empty for a trigger that is off unless
  /// written, and for sections.
  std::string_view default_value;
  /// Inclusive limits (integer, number, fraction; duration in milliseconds).
  std::optional<double> min;
  std::optional<double> max;
  /// The allowed words of a choice.
  std::span<const std::string_view> choices;
  std::string_view help;
  /// Stores a parsed value into its field of a Policy (null for sections).
  void (*store)(Policy& policy, const KeyValue& value);
};

/// Every key, sections before the keys inside them, in the order of the key reference.
/// The table is constant: reading it from several threads is safe.
[[nodiscard]] std::span<const KeyInfo> schema() noexcept;

/// The key with this dotted path, or null.
[[nodiscard]] const KeyInfo* find_key(std::string_view path) noexcept;

/// The last part of a dotted path: "min" for "nodes.min".
[[nodiscard]] std::string_view key_name(std::string_view path) noexcept;

/// The section part of a dotted path: "nodes" for "nodes.min", "" for "tick".
[[nodiscard]] std::string_view key_section(std::string_view path) noexcept;

/// The type with its allowed range, for people: "integer, at least 1",
/// "fraction (0 to 1)", "one of: any, all".
[[nodiscard]] std::string describe_type(const KeyInfo& key);

/// Parses the text of a scalar for this key and checks its range. On success returns an
/// empty string and sets `out`; otherwise returns what is wrong (without the key path),
/// e.g. "expected an integer, got 'abc'" or "must be at least 1, got 0".
[[nodiscard]] std::string parse_value(const KeyInfo& key, std::string_view text, KeyValue& out);

/// Parses "500ms", "5s", "1.5m", "1h". On success returns an empty string and sets `out`;
/// otherwise what is wrong. A bare number is refused: the unit is required.
[[nodiscard]] std::string parse_duration(std::string_view text, Duration& out);

/// The key reference as plain text: one line per key with its type, default and help.
[[nodiscard]] std::string keys_as_text();

/// The key reference as a Markdown table (the part of docs/policies.md between its
/// "generated" markers).
[[nodiscard]] std::string keys_as_markdown();

}  // namespace bellows::policy
