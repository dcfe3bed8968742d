#pragma once
// Reading a policy from YAML, with every error reported by file, line and column.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bellows/policy/policy.hpp"

namespace bellows::policy {

/// One problem found in a policy file.
struct Diagnostic {
  std::string file;
  /// 1-based; 0 when the problem is with the file as a whole (it cannot be read).
  int line = 0;
  /// 1-based; 0 together with line.
  int column = 0;
  std::string message;

  friend bool operator==(const Diagnostic&, const Diagnostic&) = default;
};

/// "FILE:LINE:COL: message", or "FILE: message" when the diagnostic has no position.
[[nodiscard]] std::string format(const Diagnostic& diagnostic);

/// A policy, or every problem that keeps the text from being one.
struct LoadResult {
  /// Set exactly when `diagnostics` is empty.
  std::optional<Policy> policy;
  /// In the order of their position in the file.
  std::vector<Diagnostic> diagnostics;

  [[nodiscard]] bool ok() const noexcept { return policy.has_value(); }
};

/// Parses a policy from YAML text; `name` is the file name the diagnostics carry.
/// Reports all problems, not only the first: YAML syntax errors (at yaml-cpp's position),
/// unknown keys (with a did-you-mean suggestion), duplicate keys, wrong types, maps where
/// a value is expected and the reverse, values out of range, unknown words of a choice,
/// malformed durations, an empty file, and the rules between keys (check_consistency).
/// Keys not written keep their schema default. Never throws for bad input.
/// Thread-safe, as are all free functions of this library: they share no state.
[[nodiscard]] LoadResult parse_policy(std::string_view text, std::string_view name);

/// Reads the file and parses it as parse_policy does, naming the file by `path`.
/// A file that cannot be read gives one diagnostic without position.
[[nodiscard]] LoadResult load_policy_file(const std::string& path);

/// MIN:MAX nodes, as given to `--elastic=MIN:MAX`.
struct NodeRange {
  int min = 1;
  int max = 1;

  friend bool operator==(const NodeRange&, const NodeRange&) = default;
};

/// A node range, or why the text is not one.
struct NodeRangeResult {
  std::optional<NodeRange> range;
  /// Empty when `range` is set, e.g. "node range '8:2': the minimum (8) is larger than
  /// the maximum (2)".
  std::string error;
};

/// Parses "MIN:MAX" (whole numbers, 1 <= MIN <= MAX).
[[nodiscard]] NodeRangeResult parse_node_range(std::string_view text);

/// Replaces the policy's nodes.min and nodes.max by the range (e.g. from
/// `--elastic=MIN:MAX`), keeping nodes.step. Returns the rules between keys that the
/// result breaks (check_consistency); the policy is changed only when there are none.
[[nodiscard]] std::vector<Inconsistency> apply_node_range(Policy& policy, NodeRange range);

}  // namespace bellows::policy
