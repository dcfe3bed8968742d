// Reading a policy from YAML: the walk over the document, driven by the schema.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "bellows/policy/load.hpp"
#include "bellows/policy/schema.hpp"
#include "text.hpp"

namespace bellows::policy {

std::string format(const Diagnostic& d) {
  if (d.line <= 0) return d.file + ": " + d.message;
  return d.file + ":" + std::to_string(d.line) + ":" + std::to_string(d.column) + ": " + d.message;
}

namespace {

using detail::in_quotes;

struct Position {
  int line = 1;
  int column = 1;
};

Position position_of(const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0 || mark.column < 0) return {};
  return {mark.line + 1, mark.column + 1};
}

// What a node holds, for "got ..." in messages.
std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Scalar: return in_quotes(node.Scalar());
    default: return "nothing";
  }
}

std::string expected_text(const KeyInfo& key) {
  switch (key.type) {
    case KeyType::integer: return "an integer";
    case KeyType::number: return "a number";
    case KeyType::fraction: return "a number between 0 and 1";
    case KeyType::duration: return "a duration such as 500ms, 5s, 2m or 1h";
    case KeyType::boolean: return "true or false";
    case KeyType::choice: {
      std::string out;
      for (std::size_t i = 0; i < key.choices.size(); ++i) {
        if (i > 0) out += i + 1 == key.choices.size() ? " or " : ", ";
        out += key.choices[i];
      }
      return out;
    }
    case KeyType::section: return "a map";
  }
  return "a value";
}

std::vector<std::string_view> children_of(std::string_view section) {
  std::vector<std::string_view> names;
  for (const KeyInfo& key : schema()) {
    if (key_section(key.path) == section) names.push_back(key_name(key.path));
  }
  return names;
}

std::string join(const std::vector<std::string_view>& names) {
  std::string out;
  for (const auto& name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

std::string unknown_key_message(std::string_view name, std::string_view section) {
  std::string out = "unknown key " + in_quotes(name);
  if (!section.empty()) out += " in " + in_quotes(section);
  const auto siblings = children_of(section);
  std::string_view best;
  std::size_t best_distance = std::string_view::npos;
  for (const auto& sibling : siblings) {
    const std::size_t d = detail::edit_distance(name, sibling);
    if (d < best_distance) {
      best_distance = d;
      best = sibling;
    }
  }
  // Close enough to be a typo: at most 2 edits, and fewer than half the name.
  if (!best.empty() && best_distance <= 2 && 2 * best_distance < std::max(name.size(), best.size())) {
    return out + "; did you mean " + in_quotes(best) + "?";
  }
  // A shortened or lengthened name: "hysteresis" for "hysteresis_ticks", "maximum" for "max".
  std::string_view longest;
  std::size_t longest_shared = 0;
  for (const auto& sibling : siblings) {
    const auto shorter = std::min(name.size(), sibling.size());
    if (shorter >= 3 && shorter > longest_shared &&
        name.substr(0, shorter) == sibling.substr(0, shorter)) {
      longest = sibling;
      longest_shared = shorter;
    }
  }
  if (!longest.empty()) return out + "; did you mean " + in_quotes(longest) + "?";
  // The right name in the wrong section.
  for (const KeyInfo& key : schema()) {
    if (key_name(key.path) == name && key_section(key.path) != section) {
      const auto home = key_section(key.path);
      return out + "; did you mean " + in_quotes(name) +
             (home.empty() ? std::string(" at the top level") : " in " + in_quotes(home)) + "?";
    }
  }
  return out + "; allowed: " + join(siblings);
}

class Walker {
 public:
  Walker(std::string_view file, Policy& policy) : file_(file), policy_(policy) {}

  void add(const YAML::Mark& mark, std::string message) {
    const Position at = position_of(mark);
    diagnostics_.push_back({file_, at.line, at.column, std::move(message)});
  }

  // Walks the keys of a map that belongs to `section` ("" for the top level).
  void walk(const YAML::Node& map, std::string_view section) {
    std::map<std::string, Position, std::less<>> seen;
    // By value: yaml-cpp's iterator hands out its pairs through a temporary proxy.
    for (const auto& entry : map) {
      const YAML::Node key_node = entry.first;
      const YAML::Node value = entry.second;
      if (!key_node.IsScalar()) {
        add(key_node.Mark(), "expected a key name, got " + describe_node(key_node));
        continue;
      }
      const std::string& name = key_node.Scalar();
      const std::string path = section.empty() ? name : std::string(section) + "." + name;
      if (const auto first = seen.find(name); first != seen.end()) {
        add(key_node.Mark(), "duplicate key " + in_quotes(path) + " (first at line " +
                                 std::to_string(first->second.line) + ", column " +
                                 std::to_string(first->second.column) + ")");
        failed_.insert(path);
        continue;
      }
      seen.emplace(name, position_of(key_node.Mark()));

      const KeyInfo* key = find_key(path);
      if (key == nullptr || key_section(key->path) != section) {
        add(key_node.Mark(), unknown_key_message(name, section));
        continue;
      }
      // A key without a value has no useful position of its own: point at the key.
      const YAML::Mark at = value.IsNull() ? key_node.Mark() : value.Mark();
      written_.emplace(path, at);
      if (key->type == KeyType::section) {
        if (value.IsMap()) {
          walk(value, path);
        } else {
          add(at, path + ": expected a map (keys: " + join(children_of(path)) + "), got " +
                      describe_node(value));
          failed_.insert(path);
        }
        continue;
      }
      if (!value.IsScalar()) {
        add(at, path + ": expected " + expected_text(*key) + ", got " + describe_node(value));
        failed_.insert(path);
        continue;
      }
      KeyValue parsed;
      if (auto wrong = parse_value(*key, value.Scalar(), parsed); !wrong.empty()) {
        add(at, path + ": " + wrong);
        failed_.insert(path);
        continue;
      }
      key->store(policy_, parsed);
    }
  }

  // The rules between keys, for those whose keys all parsed; each points at the first of
  // its keys that is written in the file.
  void check_rules() {
    for (auto& problem : check_consistency(policy_)) {
      const bool involves_failed = std::any_of(
          problem.keys.begin(), problem.keys.end(),
          [this](const std::string& k) { return failed_.count(k) > 0; });
      if (involves_failed) continue;
      YAML::Mark at = YAML::Mark::null_mark();
      for (const auto& k : problem.keys) {
        if (const auto w = written_.find(k); w != written_.end()) {
          at = w->second;
          break;
        }
      }
      // Say where a value the file does not write comes from.
      for (const auto& k : problem.keys) {
        const KeyInfo* key = find_key(k);
        if (written_.count(k) == 0 && key != nullptr) {
          problem.message += "; " + k + " is not written, its default is " +
                             std::string(key->default_value);
        }
      }
      add(at, std::move(problem.message));
    }
  }

  std::vector<Diagnostic> take() {
    std::stable_sort(diagnostics_.begin(), diagnostics_.end(),
                     [](const Diagnostic& a, const Diagnostic& b) {
                       return std::tie(a.line, a.column) < std::tie(b.line, b.column);
                     });
    return std::move(diagnostics_);
  }

 private:
  std::string file_;
  Policy& policy_;
  std::vector<Diagnostic> diagnostics_;
  std::map<std::string, YAML::Mark, std::less<>> written_;
  std::set<std::string, std::less<>> failed_;
};

}  // namespace

LoadResult parse_policy(std::string_view text, std::string_view name) {
  LoadResult result;
  Policy policy;
  Walker walker(name, policy);
  try {
    const std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
    if (documents.empty() || documents.front().IsNull()) {
      walker.add(YAML::Mark::null_mark(), "empty policy file: expected a map of policy keys");
    } else if (!documents.front().IsMap()) {
      walker.add(documents.front().Mark(),
                 "expected a map of policy keys at the top level, got " +
                     describe_node(documents.front()));
    } else {
      walker.walk(documents.front(), "");
      walker.check_rules();
    }
    if (documents.size() > 1) {
      walker.add(documents[1].Mark(), "a policy file holds one YAML document; a second one starts here");
    }
  } catch (const YAML::Exception& e) {
    walker.add(e.mark, "YAML syntax error: " + e.msg);
  }
  result.diagnostics = walker.take();
  if (result.diagnostics.empty()) result.policy = std::move(policy);
  return result;
}

LoadResult load_policy_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return {std::nullopt, {{path, 0, 0, "cannot read the policy file: it is a directory"}}};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    return {std::nullopt,
            {{path, 0, 0, std::string("cannot read the policy file: ") + std::strerror(error)}}};
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_policy(text.str(), path);
}

}  // namespace bellows::policy
