#pragma once
// The options spank_bellows.so adds to sbatch, salloc and srun, without Slurm: parsing,
// validation and the environment an elastic job gets.
//
//   --elastic=MIN:MAX        the job may grow and shrink between MIN and MAX nodes
//   --elastic-policy=FILE    its resize policy (YAML, checked as `bellows policy check FILE`)
//
// With both, MIN:MAX replaces the policy's nodes.min and nodes.max and keeps its nodes.step
// (as documented in docs/policies.md); the result must still be a consistent policy.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bellows/policy/load.hpp"

namespace bellows::spank {

/// One option of the plugin, as registered with Slurm.
struct OptionSpec {
  std::string_view name;     ///< the long option, without "--"
  std::string_view arginfo;  ///< the argument's one-word description in --help
  std::string_view usage;    ///< the help text
};

inline constexpr OptionSpec elastic_option{
    "elastic", "MIN:MAX",
    "Elastic job (Bellows): it may grow to MAX nodes and shrink to MIN nodes while it runs"};
inline constexpr OptionSpec elastic_policy_option{
    "elastic-policy", "FILE",
    "Resize policy of an elastic job (Bellows), a YAML file; check it with "
    "'bellows policy check FILE'"};

/// The environment variables an elastic job gets.
inline constexpr std::string_view env_min = "BELLOWS_ELASTIC_MIN";
inline constexpr std::string_view env_max = "BELLOWS_ELASTIC_MAX";
/// The policy file as an absolute path; set only with --elastic-policy.
inline constexpr std::string_view env_policy = "BELLOWS_ELASTIC_POLICY";

/// The options' values as the user wrote them; unset when an option was not given.
struct OptionValues {
  std::optional<std::string> elastic;
  std::optional<std::string> elastic_policy;

  /// True when at least one of the options was given.
  [[nodiscard]] bool any() const noexcept { return elastic || elastic_policy; }
};

/// One variable to export into the job's environment.
struct EnvVar {
  std::string name;
  std::string value;

  friend bool operator==(const EnvVar&, const EnvVar&) = default;
};

/// A node range, or why `--elastic=VALUE` is not one.
struct ElasticRangeResult {
  std::optional<policy::NodeRange> range;
  /// Set exactly when `range` is not, e.g. "--elastic=5:2: MIN (5) is greater than MAX (2)".
  std::string error;
};

/// Parses the value of --elastic: "MIN:MAX", whole numbers with 1 <= MIN <= MAX.
[[nodiscard]] ElasticRangeResult parse_elastic(std::string_view value);

/// The outcome of validate().
struct Validation {
  /// What to export, in the order MIN, MAX, POLICY; empty when there are errors or when no
  /// option was given.
  std::vector<EnvVar> environment;
  /// Every problem, one line each: first those of --elastic, then the policy file's
  /// diagnostics exactly as `bellows policy check FILE` prints them ("FILE:LINE:COL:
  /// message", FILE as the user wrote it), then the rules the combination breaks.
  std::vector<std::string> errors;

  [[nodiscard]] bool ok() const noexcept { return errors.empty(); }
};

/// Checks the options and computes the job's environment.
///   --elastic alone: MIN and MAX from it.
///   --elastic-policy alone: MIN and MAX are the policy's nodes.min and nodes.max.
///   both: MIN:MAX replaces the policy's node range (policy::apply_node_range); a break of a
///   rule between keys is reported as "--elastic=MIN:MAX with --elastic-policy=FILE: ...".
/// A relative FILE is read from `base_dir` (the directory the job was submitted from) and
/// exported as an absolute path. Never throws for bad input; thread-safe (no shared state).
[[nodiscard]] Validation validate(const OptionValues& values, const std::filesystem::path& base_dir);

}  // namespace bellows::spank
