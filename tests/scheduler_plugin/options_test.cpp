// bellows::spank: --elastic and --elastic-policy as spank_bellows.so checks them, without
// Slurm. Every message is asserted exactly; policy diagnostics are compared with what
// `bellows policy check` prints for the same file.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "bellows/spank/options.hpp"
#include "run_command.hpp"

namespace fs = std::filesystem;
using bellows::spank::EnvVar;
using bellows::spank::OptionValues;
using bellows::spank::parse_elastic;
using bellows::spank::PolicyFileAccess;
using bellows::spank::SubmittedPolicy;
using bellows::spank::validate;

namespace {

const fs::path kExamples = BELLOWS_POLICY_EXAMPLES_DIR;
const fs::path kBad = BELLOWS_POLICY_BAD_DIR;
const std::string kBellows = BELLOWS_CLI;

std::string elastic_error(const std::string& value) {
  const auto result = parse_elastic(value);
  EXPECT_FALSE(result.range.has_value()) << value;
  return result.error;
}

OptionValues elastic(std::string value) { return {std::move(value), std::nullopt}; }
OptionValues policy(std::string file) { return {std::nullopt, std::move(file)}; }

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

EnvVar content_of(const fs::path& path) {
  return {"BELLOWS_ELASTIC_POLICY_BASE64", bellows::spank::encode_base64(file_bytes(path))};
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    out.push_back(text.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// A fresh directory per test, removed at the end.
class SpankOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("bellows_spank_" + std::string(info->name()) + "_" +
                                        std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }

  fs::path dir_;
};

}  // namespace

TEST(SpankElastic, GoodRanges) {
  for (const auto& [text, min, max] : std::vector<std::tuple<std::string, int, int>>{
           {"2:4", 2, 4}, {"1:1", 1, 1}, {"3:3", 3, 3}, {"1:1024", 1, 1024}, {"08:16", 8, 16}}) {
    const auto result = parse_elastic(text);
    ASSERT_TRUE(result.range.has_value()) << text << ": " << result.error;
    EXPECT_EQ(result.range->min, min) << text;
    EXPECT_EQ(result.range->max, max) << text;
    EXPECT_EQ(result.error, "") << text;
  }
}

TEST(SpankElastic, ExactMessages) {
  EXPECT_EQ(elastic_error("5:2"), "--elastic=5:2: MIN (5) is greater than MAX (2)");
  EXPECT_EQ(elastic_error("4"), "--elastic=4: expected MIN:MAX, e.g. --elastic=2:8");
  EXPECT_EQ(elastic_error(""), "--elastic=: expected MIN:MAX, e.g. --elastic=2:8");
  EXPECT_EQ(elastic_error("1:2:3"), "--elastic=1:2:3: expected MIN:MAX, e.g. --elastic=2:8");
  EXPECT_EQ(elastic_error(":4"), "--elastic=:4: MIN is missing");
  EXPECT_EQ(elastic_error("2:"), "--elastic=2:: MAX is missing");
  EXPECT_EQ(elastic_error("x:4"), "--elastic=x:4: MIN 'x' is not a whole number");
  EXPECT_EQ(elastic_error("2:four"), "--elastic=2:four: MAX 'four' is not a whole number");
  EXPECT_EQ(elastic_error("2.5:4"), "--elastic=2.5:4: MIN '2.5' is not a whole number");
  EXPECT_EQ(elastic_error("+2:4"), "--elastic=+2:4: MIN '+2' is not a whole number");
  EXPECT_EQ(elastic_error(" 2:4"), "--elastic= 2:4: MIN ' 2' is not a whole number");
  EXPECT_EQ(elastic_error("0:4"), "--elastic=0:4: MIN must be at least 1, got 0");
  EXPECT_EQ(elastic_error("-1:4"), "--elastic=-1:4: MIN must be at least 1, got -1");
  EXPECT_EQ(elastic_error("2:0"), "--elastic=2:0: MAX must be at least 1, got 0");
  EXPECT_EQ(elastic_error("1:99999999999"), "--elastic=1:99999999999: MAX '99999999999' is too large");
}

TEST_F(SpankOptions, NothingGivenExportsNothing) {
  const auto v = validate(OptionValues{}, dir_);
  EXPECT_TRUE(v.ok());
  EXPECT_TRUE(v.environment.empty());
}

TEST_F(SpankOptions, ElasticAloneExportsTheRange) {
  const auto v = validate(elastic("2:4"), dir_);
  ASSERT_TRUE(v.ok()) << v.errors.front();
  EXPECT_EQ(v.environment,
            (std::vector<EnvVar>{{"BELLOWS_ELASTIC_MIN", "2"}, {"BELLOWS_ELASTIC_MAX", "4"}}));
}

TEST_F(SpankOptions, BadElasticIsTheOnlyError) {
  const auto v = validate(elastic("5:2"), dir_);
  EXPECT_EQ(v.errors, std::vector<std::string>{"--elastic=5:2: MIN (5) is greater than MAX (2)"});
  EXPECT_TRUE(v.environment.empty());
}

TEST_F(SpankOptions, PolicyAloneExportsItsNodeRangeAndAbsolutePath) {
  const auto v = validate(policy((kExamples / "cluster-friendly.yaml").string()), dir_);
  ASSERT_TRUE(v.ok()) << v.errors.front();
  EXPECT_EQ(v.environment, (std::vector<EnvVar>{
                               {"BELLOWS_ELASTIC_MIN", "2"},
                               {"BELLOWS_ELASTIC_MAX", "8"},
                               {"BELLOWS_ELASTIC_POLICY", (kExamples / "cluster-friendly.yaml").string()},
                               content_of(kExamples / "cluster-friendly.yaml")}));
}

TEST_F(SpankOptions, RelativePolicyIsReadFromTheSubmissionDirectory) {
  fs::create_directories(dir_ / "sub");
  write("sub/p.yaml", "nodes: {min: 1, max: 3, step: 1}\n");
  const auto v = validate(policy("sub/../sub/./p.yaml"), dir_);
  ASSERT_TRUE(v.ok()) << v.errors.front();
  ASSERT_EQ(v.environment.size(), 4u);
  EXPECT_EQ(v.environment[0], (EnvVar{"BELLOWS_ELASTIC_MIN", "1"}));
  EXPECT_EQ(v.environment[1], (EnvVar{"BELLOWS_ELASTIC_MAX", "3"}));
  EXPECT_EQ(v.environment[2], (EnvVar{"BELLOWS_ELASTIC_POLICY", (dir_ / "sub/p.yaml").string()}));
  EXPECT_EQ(v.environment[3], (EnvVar{"BELLOWS_ELASTIC_POLICY_BASE64",
                                      "bm9kZXM6IHttaW46IDEsIG1heDogMywgc3RlcDogMX0K"}));
}

TEST_F(SpankOptions, ElasticReplacesThePolicyNodeRange) {
  // throughput.yaml: nodes 2..16, step 2; --elastic=3:6 keeps the step (6 - 3 >= 2).
  const auto v = validate({"3:6", (kExamples / "throughput.yaml").string()}, dir_);
  ASSERT_TRUE(v.ok()) << v.errors.front();
  EXPECT_EQ(v.environment, (std::vector<EnvVar>{
                               {"BELLOWS_ELASTIC_MIN", "3"},
                               {"BELLOWS_ELASTIC_MAX", "6"},
                               {"BELLOWS_ELASTIC_POLICY", (kExamples / "throughput.yaml").string()},
                               content_of(kExamples / "throughput.yaml")}));
}

TEST_F(SpankOptions, CombinationThatBreaksARuleIsRefused) {
  const std::string file = (kExamples / "throughput.yaml").string();
  const auto v = validate({"2:3", file}, dir_);
  EXPECT_EQ(v.errors, std::vector<std::string>{
                          "--elastic=2:3 with --elastic-policy=" + file +
                          ": nodes.step (2) is larger than nodes.max - nodes.min (1)"});
  EXPECT_TRUE(v.environment.empty());
}

TEST_F(SpankOptions, PolicyDiagnosticsAreThoseOfBellowsPolicyCheck) {
  for (const auto& entry : fs::directory_iterator(kBad)) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string file = entry.path().string();
    const auto check = bellows::testing::run_command({kBellows, "policy", "check", file});
    ASSERT_EQ(check.exit_code, 2) << file;
    const auto v = validate(policy(file), dir_);
    EXPECT_EQ(v.errors, lines(check.err)) << file;
    EXPECT_TRUE(v.environment.empty()) << file;
  }
}

TEST_F(SpankOptions, RelativeBadPolicyIsNamedAsWritten) {
  write("bad.yaml", "nodes:\n  min: 4\n  max: 2\n  stepp: 1\n");
  const auto v = validate(policy("bad.yaml"), dir_);
  EXPECT_EQ(v.errors, (std::vector<std::string>{
                          "bad.yaml:2:8: nodes.min (4) is larger than nodes.max (2)",
                          "bad.yaml:4:3: unknown key 'stepp' in 'nodes'; did you mean 'step'?"}));
  // The same as `bellows policy check bad.yaml` run in that directory.
  const auto check = bellows::testing::run_command(
      {"/bin/sh", "-c", "cd '" + dir_.string() + "' && exec '" + kBellows + "' policy check bad.yaml"});
  EXPECT_EQ(v.errors, lines(check.err));
}

TEST_F(SpankOptions, MissingOrEmptyPolicyFile) {
  auto v = validate(policy("missing.yaml"), dir_);
  EXPECT_EQ(v.errors, std::vector<std::string>{
                          "missing.yaml: cannot read the policy file: No such file or directory"});
  v = validate(policy(""), dir_);
  EXPECT_EQ(v.errors, std::vector<std::string>{"--elastic-policy=: expected the name of a policy file"});
}

TEST_F(SpankOptions, ErrorsOfBothOptionsAreReportedTogether) {
  const auto v = validate({"0:2", "missing.yaml"}, dir_);
  EXPECT_EQ(v.errors, (std::vector<std::string>{
                          "--elastic=0:2: MIN must be at least 1, got 0",
                          "missing.yaml: cannot read the policy file: No such file or directory"}));
}

TEST(SpankBase64, RoundTripsEveryLengthAndByte) {
  EXPECT_EQ(bellows::spank::encode_base64(""), "");
  EXPECT_EQ(bellows::spank::encode_base64("f"), "Zg==");
  EXPECT_EQ(bellows::spank::encode_base64("fo"), "Zm8=");
  EXPECT_EQ(bellows::spank::encode_base64("foo"), "Zm9v");
  EXPECT_EQ(bellows::spank::encode_base64("foobar"), "Zm9vYmFy");  // RFC 4648's examples
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  for (std::size_t n = 0; n <= all.size(); n += 37) {
    const std::string bytes = all.substr(0, n) + "\n'\"$`\\ ";
    const std::string text = bellows::spank::encode_base64(bytes);
    EXPECT_EQ(text.find_first_not_of(
                  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="),
              std::string::npos);
    EXPECT_EQ(bellows::spank::decode_base64(text), bytes) << n;
  }
}

TEST(SpankBase64, RefusesWhatIsNotBase64) {
  for (const std::string text : {"Zg=", "Zg", "Z===", "Zg==Zg==", "Zm9v!A==", "Zm=v", "Zm9v\n"}) {
    EXPECT_FALSE(bellows::spank::decode_base64(text).has_value()) << text;
  }
}

// slurmstepd, srun inside the job: the content that came with the job is what they check, and
// what they export; the file is not read (here it is gone, or says something else).
TEST_F(SpankOptions, TheSubmittedContentIsCheckedInsteadOfTheFile) {
  const fs::path file = write("p.yaml", "nodes: {min: 1, max: 3, step: 1}\n");
  const auto at_submission = validate(policy("p.yaml"), dir_);
  ASSERT_TRUE(at_submission.ok()) << at_submission.errors.front();
  const SubmittedPolicy submitted{file.string(), file_bytes(file), ""};
  fs::remove(file);
  for (const auto access : {PolicyFileAccess::read, PolicyFileAccess::submitted_only}) {
    const auto v = validate(policy("p.yaml"), dir_, submitted, access);
    ASSERT_TRUE(v.ok()) << v.errors.front();
    EXPECT_EQ(v.environment, at_submission.environment);
  }
  write("p.yaml", "nodes: {min: 9, max: 9}\n");
  EXPECT_EQ(validate(policy("p.yaml"), dir_, submitted).environment, at_submission.environment);
  // A bad content is reported as `bellows policy check` reports that file.
  const auto bad = validate(policy("p.yaml"), dir_, SubmittedPolicy{file.string(), "nodes: {min: 0}\n", ""},
                            PolicyFileAccess::submitted_only);
  EXPECT_EQ(bad.errors, std::vector<std::string>{"p.yaml:1:14: nodes.min: must be at least 1, got 0"});
}

// In the job, no file is read: a policy whose content did not come with the job, or came for
// another file, or is not base64, is refused with what is missing.
TEST_F(SpankOptions, InTheJobAPolicyWithoutItsContentIsRefused) {
  const fs::path file = write("p.yaml", "nodes: {min: 1, max: 3}\n");
  const std::string tail =
      "; the plugin reads no policy file on a node: submit with sbatch, salloc or srun where "
      "spank_bellows.so is loaded";
  auto v = validate(policy("p.yaml"), dir_, std::nullopt, PolicyFileAccess::submitted_only);
  EXPECT_EQ(v.errors, std::vector<std::string>{
                          "--elastic-policy=p.yaml: the policy's content did not come with the job "
                          "(BELLOWS_ELASTIC_POLICY_BASE64 is not in its environment)" + tail});
  EXPECT_TRUE(v.environment.empty());
  v = validate(policy("p.yaml"), dir_, SubmittedPolicy{"/elsewhere/q.yaml", "nodes: {min: 1, max: 3}\n", ""},
               PolicyFileAccess::submitted_only);
  EXPECT_EQ(v.errors, std::vector<std::string>{
                          "--elastic-policy=p.yaml: the policy's content did not come with the job "
                          "(BELLOWS_ELASTIC_POLICY_BASE64 holds /elsewhere/q.yaml)" + tail});
  const auto lookup = [&](std::string_view name) -> std::optional<std::string> {
    if (name == "BELLOWS_ELASTIC_POLICY") return file.string();
    if (name == "BELLOWS_ELASTIC_POLICY_BASE64") return std::string("bm9kZXM6*");
    return std::nullopt;
  };
  const auto garbled = bellows::spank::submitted_policy(lookup);
  ASSERT_TRUE(garbled.has_value());
  v = validate(policy("p.yaml"), dir_, garbled, PolicyFileAccess::submitted_only);
  EXPECT_EQ(v.errors, std::vector<std::string>{
                          "--elastic-policy=p.yaml: the policy that came with the job cannot be "
                          "read: BELLOWS_ELASTIC_POLICY_BASE64 is not base64"});
  // --elastic alone needs no policy, in the job too.
  v = validate(elastic("2:4"), dir_, std::nullopt, PolicyFileAccess::submitted_only);
  EXPECT_TRUE(v.ok());
}

TEST_F(SpankOptions, SubmittedPolicyFromTheEnvironment) {
  const auto none = [](std::string_view) -> std::optional<std::string> { return std::nullopt; };
  EXPECT_FALSE(bellows::spank::submitted_policy(none).has_value());
  const auto both = [](std::string_view name) -> std::optional<std::string> {
    if (name == "BELLOWS_ELASTIC_POLICY") return std::string("/home/u/p.yaml");
    if (name == "BELLOWS_ELASTIC_POLICY_BASE64") return std::string("bm9kZXM6IHttaW46IDF9Cg==");
    return std::nullopt;
  };
  const auto submitted = bellows::spank::submitted_policy(both);
  ASSERT_TRUE(submitted.has_value());
  EXPECT_EQ(submitted->path, "/home/u/p.yaml");
  EXPECT_EQ(submitted->content, "nodes: {min: 1}\n");
  EXPECT_EQ(submitted->problem, "");
}

TEST_F(SpankOptions, APolicyTooLargeToCarryIsRefused) {
  std::string text = "nodes: {min: 1, max: 3}\n";
  text += "# " + std::string(bellows::spank::max_policy_bytes, 'x') + "\n";
  write("big.yaml", text);
  const auto v = validate(policy("big.yaml"), dir_);
  EXPECT_EQ(v.errors, std::vector<std::string>{
                          "--elastic-policy=big.yaml: the policy has " + std::to_string(text.size()) +
                          " bytes, more than the 49152 a job carries"});
}

TEST(SpankOptionSpecs, NamesAndHelp) {
  EXPECT_EQ(bellows::spank::elastic_option.name, "elastic");
  EXPECT_EQ(bellows::spank::elastic_option.arginfo, "MIN:MAX");
  EXPECT_EQ(bellows::spank::elastic_policy_option.name, "elastic-policy");
  EXPECT_EQ(bellows::spank::elastic_policy_option.arginfo, "FILE");
}

// --- no-kill for elastic submissions (Slurm reads it at submission only) ---

TEST(NoKill, EachSubmittingCommandHasItsOwnVariable) {
  using bellows::spank::no_kill_variable;
  EXPECT_EQ(no_kill_variable("sbatch")->name, "SBATCH_NO_KILL");
  EXPECT_EQ(no_kill_variable("/usr/bin/sbatch")->name, "SBATCH_NO_KILL");
  EXPECT_EQ(no_kill_variable("salloc")->name, "SALLOC_NO_KILL");
  EXPECT_EQ(no_kill_variable("/usr/bin/srun")->name, "SLURM_NO_KILL");
  EXPECT_EQ(bellows::spank::NoKillVariable::value, "set");
  EXPECT_FALSE(no_kill_variable("slurmstepd"));
  EXPECT_FALSE(no_kill_variable("/usr/sbin/slurmd"));
  EXPECT_FALSE(no_kill_variable(""));
  EXPECT_FALSE(no_kill_variable("/usr/bin/sbatch-wrapper"));
}

TEST(NoKill, ElasticOnTheCommandLineInEitherForm) {
  using bellows::spank::elastic_on_command_line;
  using Args = std::vector<std::string>;
  EXPECT_TRUE(elastic_on_command_line(Args{"sbatch", "-N1", "--elastic=1:3", "job.sh"}));
  EXPECT_TRUE(elastic_on_command_line(Args{"sbatch", "--elastic", "1:3", "--wrap", "true"}));
  EXPECT_TRUE(elastic_on_command_line(Args{"salloc", "--elastic-policy=p.yaml"}));
  EXPECT_TRUE(elastic_on_command_line(Args{"srun", "--elastic-policy", "p.yaml", "hostname"}));
  EXPECT_FALSE(elastic_on_command_line(Args{"sbatch", "-N2", "job.sh"}));
  EXPECT_FALSE(elastic_on_command_line(Args{"sbatch", "--elastically=1", "--elastic-policyx"}));
  EXPECT_FALSE(elastic_on_command_line(Args{"--elastic=1:3"}));  // argv[0] is the program
  EXPECT_FALSE(elastic_on_command_line(Args{}));
}
