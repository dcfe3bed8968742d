#pragma once
// The options spank_bellows.so adds to sbatch, salloc and srun, without Slurm: parsing,
// validation and the environment an elastic job gets.
//
//   --elastic=MIN:MAX        the job may grow and shrink between MIN and MAX nodes
//   --elastic-policy=FILE    its resize policy (YAML, checked as `bellows policy check FILE`)
//
// With both, MIN:MAX replaces the policy's nodes.min and nodes.max and keeps its nodes.step
// (as documented in docs/policies.md); the result must still be a consistent policy.

#include <cstddef>
#include <filesystem>
#include <functional>
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
/// The policy file's content as checked at submission, in base64 (RFC 4648, with padding):
/// what the job uses, so that nothing on a node reads the file (it may exist only on the
/// submit host). Set only with --elastic-policy.
inline constexpr std::string_view env_policy_content = "BELLOWS_ELASTIC_POLICY_BASE64";
/// The most bytes of policy a job carries: its base64 (4/3 of it) stays well under Linux's
/// limit of 128 KiB for one environment string.
inline constexpr std::size_t max_policy_bytes = 48 * 1024;

/// `bytes` in base64 (RFC 4648 alphabet, '=' padding, no line breaks).
[[nodiscard]] std::string encode_base64(std::string_view bytes);
/// The bytes of base64 `text` (as encode_base64 writes it); std::nullopt when it is not
/// such text (a character outside the alphabet, a length that is not a multiple of 4,
/// misplaced padding).
[[nodiscard]] std::optional<std::string> decode_base64(std::string_view text);

/// The policy as it was checked at submission, which travels with the job in its
/// environment (env_policy and env_policy_content, decoded).
struct SubmittedPolicy {
  std::string path;     ///< absolute
  std::string content;  ///< the file's bytes then
  /// Set when the content could not be decoded (then `content` is empty), e.g.
  /// "BELLOWS_ELASTIC_POLICY_BASE64 is not base64".
  std::string problem;
};

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
  /// What to export, in the order MIN, MAX, POLICY, POLICY_BASE64; empty when there are
  /// errors or when no option was given.
  std::vector<EnvVar> environment;
  /// Every problem, one line each: first those of --elastic, then the policy file's
  /// diagnostics exactly as `bellows policy check FILE` prints them ("FILE:LINE:COL:
  /// message", FILE as the user wrote it), then the rules the combination breaks.
  std::vector<std::string> errors;

  [[nodiscard]] bool ok() const noexcept { return errors.empty(); }
};

/// Whether validate() may read the policy file.
enum class PolicyFileAccess {
  /// At submission (sbatch, salloc, srun): read FILE, unless `submitted` holds it.
  read,
  /// In the job (slurmstepd on a node): never; the policy is the content that travelled
  /// with the job, and its absence is an error. A node need not see the submit host's files.
  submitted_only,
};

/// Checks the options and computes the job's environment.
///   --elastic alone: MIN and MAX from it.
///   --elastic-policy alone: MIN and MAX are the policy's nodes.min and nodes.max.
///   both: MIN:MAX replaces the policy's node range (policy::apply_node_range); a break of a
///   rule between keys is reported as "--elastic=MIN:MAX with --elastic-policy=FILE: ...".
/// A relative FILE is read from `base_dir` (the directory the job was submitted from) and
/// exported as an absolute path, with its content (env_policy_content). When `submitted`
/// names the same absolute path, its content is checked instead of the file (a srun inside
/// the job, or slurmstepd, checks what the submission checked). A policy of more than
/// max_policy_bytes is refused. Never throws for bad input; thread-safe (no shared state).
[[nodiscard]] Validation validate(const OptionValues& values, const std::filesystem::path& base_dir,
                                  const std::optional<SubmittedPolicy>& submitted = std::nullopt,
                                  PolicyFileAccess access = PolicyFileAccess::read);

/// The policy that travelled with a job, from its environment's env_policy and
/// env_policy_content (`lookup` returns a variable's value, std::nullopt when unset).
/// std::nullopt when either is unset; a content that is not base64 sets `problem`.
[[nodiscard]] std::optional<SubmittedPolicy> submitted_policy(
    const std::function<std::optional<std::string>(std::string_view)>& lookup);

/// Slurm's no-kill setting (`--no-kill`) for the job an elastic submission creates. With it,
/// slurmctld takes a node that goes DOWN out of a job of more than one node and the job runs
/// on there (kill_running_job_by_node_name in Slurm 22.05's job_mgr.c: the node is excised and
/// the job's steps there are killed); without it the whole job ends NODE_FAIL. An elastic job
/// recovers from a lost node, so it runs with no-kill. Slurm reads the setting only when the
/// job is submitted (no job update changes it), and a submitting command reads its options
/// in this order: #SBATCH directives, its environment, its command line. So the plugin sets
/// the command's own variable (value "set", as --no-kill means) before the environment is
/// read: at plugin start for an --elastic option on the command line, and when an #SBATCH
/// directive gives it. A variable already set is left alone, and --no-kill=off on the
/// command line, read last, still wins (an #SBATCH --no-kill=off line does not: the
/// environment is read after the script).
struct NoKillVariable {
  std::string_view name;                    ///< SBATCH_NO_KILL, SALLOC_NO_KILL or SLURM_NO_KILL
  static constexpr std::string_view value = "set";
};

/// The variable through which `program` (argv[0], a path or a name) reads --no-kill from its
/// environment: sbatch SBATCH_NO_KILL, salloc SALLOC_NO_KILL, srun SLURM_NO_KILL;
/// std::nullopt for any other program.
[[nodiscard]] std::optional<NoKillVariable> no_kill_variable(std::string_view program);

/// True when a command line (argv[0] first) gives --elastic or --elastic-policy, alone or
/// with "=VALUE". Long options only, as the plugin registers them; an argument after the
/// script that is spelled so counts too (the job then merely runs with no-kill).
[[nodiscard]] bool elastic_on_command_line(const std::vector<std::string>& arguments);

}  // namespace bellows::spank
