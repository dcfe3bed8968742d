// --elastic and --elastic-policy: parsing, validation, the job's environment.

#include "bellows/spank/options.hpp"

#include <array>
#include <charconv>
#include <fstream>
#include <sstream>
#include <system_error>

namespace bellows::spank {
namespace {

std::string quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('\'');
  out.append(text);
  out.push_back('\'');
  return out;
}

// A whole number written with digits only (an optional leading '-' is read so that the
// message can say "at least 1" rather than "not a whole number").
enum class Count { ok, not_a_number, too_large };

Count parse_count(std::string_view text, int& out) {
  if (text.empty()) return Count::not_a_number;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (end != text.data() + text.size()) return Count::not_a_number;
  if (ec == std::errc::result_out_of_range) return Count::too_large;
  return ec == std::errc{} ? Count::ok : Count::not_a_number;
}

constexpr std::string_view kBase64Alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The file's bytes, or std::nullopt when it cannot be read.
std::optional<std::string> read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(bytes).str();
}

}  // namespace

std::string encode_base64(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const auto group = (std::uint32_t{static_cast<unsigned char>(bytes[i])} << 16) |
                       (std::uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8) |
                       std::uint32_t{static_cast<unsigned char>(bytes[i + 2])};
    for (int shift = 18; shift >= 0; shift -= 6) out.push_back(kBase64Alphabet[(group >> shift) & 63u]);
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    std::uint32_t group = std::uint32_t{static_cast<unsigned char>(bytes[i])} << 16;
    if (rest == 2) group |= std::uint32_t{static_cast<unsigned char>(bytes[i + 1])} << 8;
    out.push_back(kBase64Alphabet[(group >> 18) & 63u]);
    out.push_back(kBase64Alphabet[(group >> 12) & 63u]);
    out.push_back(rest == 2 ? kBase64Alphabet[(group >> 6) & 63u] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> decode_base64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    std::uint32_t group = 0;
    int padding = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=') {
        // Only the last one or two characters of the last group may be padding.
        if (!last || k < 2) return std::nullopt;
        ++padding;
        group <<= 6;
        continue;
      }
      if (padding > 0) return std::nullopt;
      const auto at = kBase64Alphabet.find(c);
      if (at == std::string_view::npos) return std::nullopt;
      group = (group << 6) | static_cast<std::uint32_t>(at);
    }
    out.push_back(static_cast<char>((group >> 16) & 0xffu));
    if (padding < 2) out.push_back(static_cast<char>((group >> 8) & 0xffu));
    if (padding < 1) out.push_back(static_cast<char>(group & 0xffu));
  }
  return out;
}

std::optional<SubmittedPolicy> submitted_policy(
    const std::function<std::optional<std::string>(std::string_view)>& lookup) {
  const std::optional<std::string> path = lookup(env_policy);
  const std::optional<std::string> content = lookup(env_policy_content);
  if (!path || !content) return std::nullopt;
  SubmittedPolicy out{*path, {}, {}};
  if (auto decoded = decode_base64(*content)) {
    out.content = std::move(*decoded);
  } else {
    out.problem = std::string(env_policy_content) + " is not base64";
  }
  return out;
}

std::optional<NoKillVariable> no_kill_variable(std::string_view program) {
  const auto slash = program.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? program : program.substr(slash + 1);
  if (name == "sbatch") return NoKillVariable{"SBATCH_NO_KILL"};
  if (name == "salloc") return NoKillVariable{"SALLOC_NO_KILL"};
  if (name == "srun") return NoKillVariable{"SLURM_NO_KILL"};
  return std::nullopt;
}

bool elastic_on_command_line(const std::vector<std::string>& arguments) {
  for (std::size_t i = 1; i < arguments.size(); ++i) {
    const std::string_view argument = arguments[i];
    for (const OptionSpec& spec : {elastic_option, elastic_policy_option}) {
      const std::string option = "--" + std::string(spec.name);
      if (argument == option || argument.starts_with(option + "=")) return true;
    }
  }
  return false;
}

ElasticRangeResult parse_elastic(std::string_view value) {
  const std::string prefix = "--" + std::string(elastic_option.name) + "=" + std::string(value) + ": ";
  const auto colon = value.find(':');
  if (colon == std::string_view::npos || value.find(':', colon + 1) != std::string_view::npos) {
    return {std::nullopt, prefix + "expected MIN:MAX, e.g. --elastic=2:8"};
  }
  const std::string_view min_text = value.substr(0, colon);
  const std::string_view max_text = value.substr(colon + 1);
  if (min_text.empty()) return {std::nullopt, prefix + "MIN is missing"};
  if (max_text.empty()) return {std::nullopt, prefix + "MAX is missing"};
  policy::NodeRange range;
  struct Part {
    std::string label;
    std::string_view text;
    int* out;
  };
  for (const Part& part : {Part{"MIN", min_text, &range.min}, Part{"MAX", max_text, &range.max}}) {
    switch (parse_count(part.text, *part.out)) {
      case Count::ok:
        break;
      case Count::not_a_number:
        return {std::nullopt, prefix + part.label + " " + quoted(part.text) + " is not a whole number"};
      case Count::too_large:
        return {std::nullopt, prefix + part.label + " " + quoted(part.text) + " is too large"};
    }
    if (*part.out < 1) {
      return {std::nullopt, prefix + part.label + " must be at least 1, got " + std::to_string(*part.out)};
    }
  }
  if (range.min > range.max) {
    return {std::nullopt, prefix + "MIN (" + std::to_string(range.min) + ") is greater than MAX (" +
                              std::to_string(range.max) + ")"};
  }
  return {range, {}};
}

Validation validate(const OptionValues& values, const std::filesystem::path& base_dir,
                    const std::optional<SubmittedPolicy>& submitted, PolicyFileAccess access) {
  Validation out;
  if (!values.any()) return out;

  std::optional<policy::NodeRange> range;
  if (values.elastic) {
    ElasticRangeResult parsed = parse_elastic(*values.elastic);
    if (parsed.range) {
      range = parsed.range;
    } else {
      out.errors.push_back(std::move(parsed.error));
    }
  }

  std::optional<policy::Policy> loaded;
  std::filesystem::path policy_path;
  std::string policy_content;
  if (values.elastic_policy) {
    const std::string& written = *values.elastic_policy;
    const std::string option = "--" + std::string(elastic_policy_option.name) + "=" + written;
    if (written.empty()) {
      out.errors.push_back(option + ": expected the name of a policy file");
    } else {
      std::error_code ec;
      policy_path = std::filesystem::path(written).is_absolute()
                        ? std::filesystem::path(written)
                        : std::filesystem::absolute(base_dir / written, ec);
      if (ec) policy_path = base_dir / written;
      policy_path = policy_path.lexically_normal();
      std::optional<policy::LoadResult> result;
      std::string refusal;  // why the policy's content is not there to check
      if (submitted && submitted->path == policy_path.string()) {
        if (!submitted->problem.empty()) {
          refusal = "the policy that came with the job cannot be read: " + submitted->problem;
        } else {
          policy_content = submitted->content;
        }
      } else if (access == PolicyFileAccess::submitted_only) {
        refusal = "the policy's content did not come with the job (" +
                  std::string(env_policy_content) +
                  (submitted ? " holds " + submitted->path + ")" : " is not in its environment)") +
                  "; the plugin reads no policy file on a node: submit with sbatch, salloc or "
                  "srun where spank_bellows.so is loaded";
      } else if (auto bytes = read_file(policy_path)) {
        policy_content = std::move(*bytes);
      } else {
        result = policy::load_policy_file(policy_path.string());  // says why it cannot be read
      }
      if (refusal.empty() && !result && policy_content.size() > max_policy_bytes) {
        refusal = "the policy has " + std::to_string(policy_content.size()) + " bytes, more than the " +
                  std::to_string(max_policy_bytes) + " a job carries";
      }
      if (!refusal.empty()) {
        out.errors.push_back(option + ": " + refusal);
      } else if (!result) {
        result = policy::parse_policy(policy_content, policy_path.string());
      }
      if (result && result->ok()) {
        loaded = std::move(result->policy);
      } else if (result) {
        for (policy::Diagnostic& d : result->diagnostics) {
          d.file = written;  // as the user wrote it, as `bellows policy check` would print it
          out.errors.push_back(policy::format(d));
        }
      }
    }
  }
  if (!out.errors.empty()) return out;

  if (loaded && range) {
    const std::vector<policy::Inconsistency> problems = policy::apply_node_range(*loaded, *range);
    for (const policy::Inconsistency& problem : problems) {
      out.errors.push_back("--" + std::string(elastic_option.name) + "=" + *values.elastic + " with --" +
                           std::string(elastic_policy_option.name) + "=" + *values.elastic_policy +
                           ": " + problem.message);
    }
    if (!out.errors.empty()) return out;
  }
  const policy::NodeRange final_range =
      range ? *range : policy::NodeRange{loaded->nodes.min, loaded->nodes.max};
  out.environment.push_back({std::string(env_min), std::to_string(final_range.min)});
  out.environment.push_back({std::string(env_max), std::to_string(final_range.max)});
  if (loaded) {
    out.environment.push_back({std::string(env_policy), policy_path.string()});
    out.environment.push_back({std::string(env_policy_content), encode_base64(policy_content)});
  }
  return out;
}

}  // namespace bellows::spank
