// The key reference, rendered from the schema as text and as Markdown.

#include <algorithm>
#include <string>

#include "bellows/policy/schema.hpp"

namespace bellows::policy {
namespace {

std::string shown_default(const KeyInfo& key) {
  if (key.type == KeyType::section) return "";
  return key.default_value.empty() ? "off" : std::string(key.default_value);
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

// Markdown table cells: a '|' would end the cell.
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string keys_as_text() {
  std::size_t key_width = 3;
  std::size_t type_width = 4;
  std::size_t default_width = 7;
  for (const KeyInfo& key : schema()) {
    key_width = std::max(key_width, key.path.size());
    type_width = std::max(type_width, describe_type(key).size());
    default_width = std::max(default_width, shown_default(key).size());
  }
  std::string out = pad("KEY", key_width + 2) + pad("TYPE", type_width + 2) +
                    pad("DEFAULT", default_width + 2) + "HELP\n";
  for (const KeyInfo& key : schema()) {
    out += pad(std::string(key.path), key_width + 2) + pad(describe_type(key), type_width + 2) +
           pad(shown_default(key), default_width + 2) + std::string(key.help) + "\n";
  }
  return out;
}

std::string keys_as_markdown() {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const KeyInfo& key : schema()) {
    const std::string def = shown_default(key);
    out += "| `" + std::string(key.path) + "` | " + cell(describe_type(key)) + " | " +
           (def.empty() ? std::string{} : "`" + def + "`") + " | " + cell(key.help) + " |\n";
  }
  return out;
}

}  // namespace bellows::policy
