// --elastic and --elastic-policy: parsing, validation, the job's environment.

#include "bellows/spank/options.hpp"

#include <charconv>
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

}  // namespace

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

Validation validate(const OptionValues& values, const std::filesystem::path& base_dir) {
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
  if (values.elastic_policy) {
    const std::string& written = *values.elastic_policy;
    if (written.empty()) {
      out.errors.push_back("--" + std::string(elastic_policy_option.name) +
                           "=: expected the name of a policy file");
    } else {
      std::error_code ec;
      policy_path = std::filesystem::path(written).is_absolute()
                        ? std::filesystem::path(written)
                        : std::filesystem::absolute(base_dir / written, ec);
      if (ec) policy_path = base_dir / written;
      policy_path = policy_path.lexically_normal();
      policy::LoadResult result = policy::load_policy_file(policy_path.string());
      if (result.ok()) {
        loaded = std::move(result.policy);
      } else {
        for (policy::Diagnostic& d : result.diagnostics) {
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
  if (loaded) out.environment.push_back({std::string(env_policy), policy_path.string()});
  return out;
}

}  // namespace bellows::spank
