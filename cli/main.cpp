// `bellows`: the command line of the elastic job manager.

#include <cstdio>
#include <exception>

#include "commands.hpp"

int main(int argc, char** argv) {
  using namespace bellows::cli;
  CLI::App app{"bellows: elastic jobs for HPC clusters", "bellows"};
  app.require_subcommand(1);
  Outcome outcome;
  add_policy_command(app, outcome);

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
  return outcome.status;
}
