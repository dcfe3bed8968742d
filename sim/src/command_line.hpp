#pragma once
// What the simulator's programs share on their command line (CLI11): an error names the
// program and exits 2; --help prints the help and exits 0.

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace bellows::sim {

/// Prints "PROGRAM: error: MESSAGE" on stderr; returns the exit code of bad arguments, 2.
inline int fail(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: error: %s\n", program, message.c_str());
  return 2;
}

/// Parses the command line; the program's exit code when it should end here (after --help,
/// or a bad argument), nullopt when it goes on.
inline std::optional<int> parse_command_line(CLI::App& cli, int argc, char** argv, const char* program) {
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << cli.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    return fail(program, e.what());
  }
  return std::nullopt;
}

}  // namespace bellows::sim
