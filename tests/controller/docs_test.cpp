// docs/controller.md carries the transition tables and the settings table as the code
// declares them: regenerate the text between the markers from the failure message when the
// code changes.

#include "bellows/controller/failure_state.hpp"
#include "bellows/controller/resize_limits.hpp"
#include "bellows/controller/resize_state.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace bellows::controller {
namespace {

std::string section(const std::string& doc, const std::string& name) {
  const std::string begin = "<!-- " + name + ": generated from the code, begin -->\n";
  const std::string end = "<!-- " + name + ": end -->";
  const auto b = doc.find(begin);
  const auto e = doc.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) return "(markers for " + name + " missing)";
  return doc.substr(b + begin.size(), e - b - begin.size());
}

std::string read_doc() {
  std::ifstream in(std::string(BELLOWS_SOURCE_DIR) + "/docs/controller.md");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ControllerDocs, TransitionTableMatchesTheCode) {
  EXPECT_EQ(section(read_doc(), "transition table"), transitions_markdown())
      << "expected text between the markers:\n" << transitions_markdown();
}

TEST(ControllerDocs, FailureTableMatchesTheCode) {
  EXPECT_EQ(section(read_doc(), "failure table"), failure_transitions_markdown())
      << "expected text between the markers:\n" << failure_transitions_markdown();
}

TEST(ControllerDocs, SettingsTableMatchesTheCode) {
  EXPECT_EQ(section(read_doc(), "settings"), settings_markdown())
      << "expected text between the markers:\n" << settings_markdown();
}

}  // namespace
}  // namespace bellows::controller
