// `bellows`: the command line of the elastic job manager.

#include <cstdio>
#include <exception>
#include <string>

#include "commands.hpp"

namespace {

// The names of the subcommands of `app`, ", "-separated.
std::string subcommand_names(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!names.empty()) names += ", ";
    names += sub->get_name();
  }
  return names;
}

// Follows the chosen subcommands down; a level that has subcommands but got none (or an
// unknown word) is an error. Returns the message, or an empty string.
std::string missing_subcommand(CLI::App& app) {
  if (app.get_subcommands([](const CLI::App*) { return true; }).empty()) return {};
  const auto chosen = app.get_subcommands();
  if (!chosen.empty()) return missing_subcommand(*chosen.front());
  const std::string path = app.get_parent() == nullptr
                               ? app.get_name()
                               : app.get_parent()->get_name() + " " + app.get_name();
  const auto extras = app.remaining();
  if (!extras.empty()) {
    return path + ": unknown command '" + extras.front() + "'; commands: " + subcommand_names(app);
  }
  return path + ": a command is required; commands: " + subcommand_names(app);
}

void allow_unknown_subcommand_names(CLI::App& app) {
  const auto subs = app.get_subcommands([](const CLI::App*) { return true; });
  if (subs.empty()) return;
  app.allow_extras();
  for (CLI::App* sub : subs) allow_unknown_subcommand_names(*sub);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace bellows::cli;
  CLI::App app{"bellows: elastic jobs for HPC clusters", "bellows"};
  Outcome outcome;
  add_policy_command(app, outcome);
  add_run_command(app, outcome);
  add_job_commands(app, outcome);
  add_doctor_command(app, outcome);
  add_sim_command(app, outcome);
  allow_unknown_subcommand_names(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and the usage hint
    return exit_bad_input;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bellows: %s\n", e.what());
    return exit_failed;
  }
  if (const std::string missing = missing_subcommand(app); !missing.empty()) {
    std::fprintf(stderr, "%s\nRun with --help for more information.\n", missing.c_str());
    return exit_bad_input;
  }
  return outcome.status;
}
