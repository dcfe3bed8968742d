// `bellows policy`: check policy files, print the policy keys.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bellows/policy/load.hpp"
#include "bellows/policy/schema.hpp"
#include "commands.hpp"

namespace bellows::cli {

namespace {

struct PolicyOptions {
  std::vector<std::string> files;
  bool markdown = false;
};

// Every error of every file on stderr; "FILE: ok" on stdout for the good ones.
int check_files(const std::vector<std::string>& files) {
  int status = exit_ok;
  for (const std::string& file : files) {
    const policy::LoadResult result = policy::load_policy_file(file);
    if (result.ok()) {
      std::printf("%s: ok\n", file.c_str());
      continue;
    }
    status = exit_bad_input;
    for (const policy::Diagnostic& d : result.diagnostics) {
      std::fprintf(stderr, "%s\n", policy::format(d).c_str());
    }
  }
  std::fflush(stdout);
  return status;
}

}  // namespace

void add_policy_command(CLI::App& app, Outcome& outcome) {
  auto options = std::make_shared<PolicyOptions>();
  CLI::App* policy = app.add_subcommand("policy", "Check resize-policy files, list their keys");

  CLI::App* check = policy->add_subcommand(
      "check", "Check policy files: every error as FILE:LINE:COL: message on stderr; "
               "exit status 2 when any file has one");
  check->add_option("FILE", options->files, "Policy files (YAML)")->required();
  check->callback([options, &outcome] { outcome.status = check_files(options->files); });

  CLI::App* keys = policy->add_subcommand("keys", "Print every policy key: type, default, help");
  keys->add_flag("--markdown", options->markdown, "Print a Markdown table (docs/policies.md)");
  keys->callback([options] {
    const std::string text =
        options->markdown ? policy::keys_as_markdown() : policy::keys_as_text();
    std::fputs(text.c_str(), stdout);
  });
}

}  // namespace bellows::cli
