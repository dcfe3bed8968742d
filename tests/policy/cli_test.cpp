// The `bellows` command: `policy check` output and exit codes, `policy keys`, and
// docs/policies.md against the generated key reference.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bellows/policy/schema.hpp"
#include "run_command.hpp"

namespace fs = std::filesystem;
using bellows::testing::run_command;

namespace {

const std::string kBellows = BELLOWS_CLI;
const std::string kBad = BELLOWS_POLICY_BAD_DIR;
const std::string kExamples = BELLOWS_POLICY_EXAMPLES_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// NAME.expected names the file by its base name; the command names it as given.
std::string expected_for(const std::string& stem) {
  std::istringstream in(read_text(kBad + "/" + stem + ".expected"));
  std::string out;
  for (std::string line; std::getline(in, line);) out += kBad + "/" + line + "\n";
  return out;
}

}  // namespace

TEST(BellowsCli, CheckGoodFiles) {
  const auto r = run_command({kBellows, "policy", "check", kExamples + "/throughput.yaml",
                              kExamples + "/conservative.yaml"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, kExamples + "/throughput.yaml: ok\n" + kExamples + "/conservative.yaml: ok\n");
  EXPECT_EQ(r.err, "");
}

TEST(BellowsCli, CheckReportsEveryErrorOfEveryFile) {
  const auto r = run_command({kBellows, "policy", "check", kBad + "/many_errors.yaml",
                              kExamples + "/cluster-friendly.yaml",
                              kBad + "/duplicate_keys.yaml", kBad + "/empty.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, kExamples + "/cluster-friendly.yaml: ok\n");
  EXPECT_EQ(r.err, expected_for("many_errors") + expected_for("duplicate_keys") +
                       expected_for("empty"));
}

TEST(BellowsCli, CheckEveryBadFile) {
  for (const auto& entry : fs::directory_iterator(kBad)) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string stem = entry.path().stem().string();
    const auto r = run_command({kBellows, "policy", "check", entry.path().string()});
    EXPECT_EQ(r.exit_code, 2) << stem;
    EXPECT_EQ(r.out, "") << stem;
    EXPECT_EQ(r.err, expected_for(stem)) << stem;
  }
}

TEST(BellowsCli, CheckAMissingFile) {
  const auto r = run_command({kBellows, "policy", "check", "/nonexistent/p.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "/nonexistent/p.yaml: cannot read the policy file: No such file or directory\n");
}

TEST(BellowsCli, UsageErrorsExitTwo) {
  auto r = run_command({kBellows, "policy", "check"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("FILE is required"), std::string::npos) << r.err;
  r = run_command({kBellows, "policy", "check", "--bogus", "x.yaml"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "The following argument was not expected: --bogus\n"
                   "Run with --help for more information.\n");
  r = run_command({kBellows});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "bellows: a command is required; commands: policy, run, status, resize, plot, wait, events, doctor, sim\n"
                   "Run with --help for more information.\n");
  r = run_command({kBellows, "frob"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "bellows: unknown command 'frob'; commands: policy, run, status, resize, plot, wait, events, doctor, sim\n"
                   "Run with --help for more information.\n");
  r = run_command({kBellows, "policy", "frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "bellows policy: unknown command 'frobnicate'; commands: check, keys\n"
                   "Run with --help for more information.\n");
  EXPECT_EQ(r.out, "");
  r = run_command({kBellows, "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("policy"), std::string::npos) << r.out;
}

TEST(BellowsCli, KeysPrintsTheSchema) {
  auto r = run_command({kBellows, "policy", "keys"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, bellows::policy::keys_as_text());
  EXPECT_NE(r.out.find("\nnodes.min                                 integer, at least 1                          1            Fewest nodes"),
            std::string::npos)
      << r.out;
  r = run_command({kBellows, "policy", "keys", "--markdown"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, bellows::policy::keys_as_markdown());
}

// docs/policies.md carries the output of `bellows policy keys --markdown` between two
// markers; scripts/update-policy-docs.sh rewrites it.
TEST(BellowsCli, DocsKeyReferenceIsTheGeneratedOne) {
  const std::string doc = read_text(BELLOWS_POLICY_DOC);
  const std::string begin = "<!-- BEGIN bellows policy keys --markdown -->\n";
  const std::string end = "<!-- END bellows policy keys --markdown -->\n";
  const auto from = doc.find(begin);
  const auto to = doc.find(end);
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  ASSERT_LT(from, to);
  const auto r = run_command({kBellows, "policy", "keys", "--markdown"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(doc.substr(from + begin.size(), to - from - begin.size()), r.out)
      << "docs/policies.md is out of date: run scripts/update-policy-docs.sh";
}
