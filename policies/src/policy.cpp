// Policy defaults (from the schema) and the rules between keys.

#include "bellows/policy/policy.hpp"

#include <stdexcept>
#include <string>

#include "bellows/policy/schema.hpp"
#include "text.hpp"

namespace bellows::policy {

using detail::format_number;

Policy::Policy() {
  for (const KeyInfo& key : schema()) {
    if (key.store == nullptr || key.default_value.empty()) continue;
    KeyValue value;
    if (const auto wrong = parse_value(key, key.default_value, value); !wrong.empty()) {
      throw std::logic_error("policy schema: the default of " + std::string(key.path) + " " +
                             wrong);
    }
    key.store(*this, value);
  }
}

namespace {

// Expand when the measure is above `expand`, shrink when below `shrink`: both hold for a
// value between them when expand < shrink.
void check_above_below(std::vector<Inconsistency>& out, const std::optional<double>& expand,
                       const char* expand_key, const std::optional<double>& shrink,
                       const char* shrink_key) {
  if (!expand || !shrink || *expand >= *shrink) return;
  out.push_back({{expand_key, shrink_key},
                 std::string(expand_key) + " (" + format_number(*expand) +
                     ") is below " + shrink_key + " (" + format_number(*shrink) +
                     "): both would hold for a value between them"});
}

}  // namespace

std::vector<Inconsistency> check_consistency(const Policy& p) {
  std::vector<Inconsistency> out;
  if (p.nodes.min > p.nodes.max) {
    out.push_back({{"nodes.min", "nodes.max"},
                   "nodes.min (" + std::to_string(p.nodes.min) + ") is larger than nodes.max (" +
                       std::to_string(p.nodes.max) + ")"});
  } else if (p.nodes.max > p.nodes.min && p.nodes.step > p.nodes.max - p.nodes.min) {
    out.push_back({{"nodes.step", "nodes.max", "nodes.min"},
                   "nodes.step (" + std::to_string(p.nodes.step) +
                       ") is larger than nodes.max - nodes.min (" +
                       std::to_string(p.nodes.max - p.nodes.min) + ")"});
  }
  if (p.stealing.max_backoff_us < p.stealing.min_backoff_us) {
    out.push_back({{"stealing.max_backoff_us", "stealing.min_backoff_us"},
                   "stealing.max_backoff_us (" + std::to_string(p.stealing.max_backoff_us) +
                       ") is below stealing.min_backoff_us (" +
                       std::to_string(p.stealing.min_backoff_us) + ")"});
  }
  check_above_below(out, p.expand.ready_tasks_per_node_above, "expand.ready_tasks_per_node_above",
                    p.shrink.ready_tasks_per_node_below, "shrink.ready_tasks_per_node_below");
  check_above_below(out, p.expand.busy_fraction_above, "expand.busy_fraction_above",
                    p.shrink.busy_fraction_below, "shrink.busy_fraction_below");
  // Expand when the ratio is below X, shrink when above Y: both hold between them when Y < X.
  if (p.expand.steal_failure_ratio_below && p.shrink.steal_failure_ratio_above &&
      *p.shrink.steal_failure_ratio_above < *p.expand.steal_failure_ratio_below) {
    out.push_back({{"expand.steal_failure_ratio_below", "shrink.steal_failure_ratio_above"},
                   "expand.steal_failure_ratio_below (" +
                       format_number(*p.expand.steal_failure_ratio_below) +
                       ") is above shrink.steal_failure_ratio_above (" +
                       format_number(*p.shrink.steal_failure_ratio_above) +
                       "): both would hold for a value between them"});
  }
  return out;
}

}  // namespace bellows::policy
