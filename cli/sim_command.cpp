// `bellows sim job|join|bag ARGS...`: the simulator's programs (sim/, docs/sim.md) under the
// command users already have. Every argument after the command, --help included, is the
// program's; `bellows` replaces itself with the program, so its output, progress bar and exit
// status are the program's own.

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.hpp"
#include "companion_programs.hpp"

namespace bellows::cli {
namespace {

struct SimProgram {
  const char* command;
  const char* program;
  const char* description;
};

constexpr SimProgram kSimPrograms[] = {
    {"job", "bellows-sim",
     "an example's task graph (gemm, cholesky, bspgemm) on simulated ranks: stealing, makespan "
     "against the perfect-balance bound; bellows sim job --help lists its options"},
    {"join", "bellows-sim-join",
     "a grow by k nodes: one accept after the other against the join tree; "
     "bellows sim join --help lists its options"},
    {"bag", "bellows-sim-bag",
     "a bag of independent tasks under Dtree or static blocks; bellows sim bag --help lists its "
     "options"},
};

/// Replaces this process with `program` and `arguments`; returns only on failure.
int run_program(const SimProgram& sim, const std::vector<std::string>& arguments) {
  const std::filesystem::path path = find_companion_program(sim.program, "sim");
  if (path.empty()) {
    std::fprintf(stderr,
                 "bellows sim %s: %s was found neither next to bellows nor in the build tree's sim/ "
                 "folder: the simulator is built only when SimGrid 3.32 is found at configure time "
                 "(scripts/install-deps.sh installs libsimgrid-dev)\n",
                 sim.command, sim.program);
    return exit_failed;
  }
  std::vector<std::string> words{path.string()};
  words.insert(words.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(argv[0], argv.data());
  std::fprintf(stderr, "bellows sim %s: cannot run %s: %s\n", sim.command, argv[0], std::strerror(errno));
  return exit_failed;
}

}  // namespace

void add_sim_command(CLI::App& app, Outcome& outcome) {
  CLI::App* sim = app.add_subcommand(
      "sim", "simulate a Bellows job on a machine of any size with the runtime's own decisions "
             "(SimGrid; docs/sim.md)");
  for (const SimProgram& program : kSimPrograms) {
    CLI::App* command = sim->add_subcommand(program.command, program.description);
    command->prefix_command();  // every argument is the program's ...
    command->set_help_flag();   // ... --help too
    command->callback([command, &program, &outcome] {
      outcome.status = run_program(program, command->remaining());
    });
  }
}

}  // namespace bellows::cli
