#pragma once
// The subcommands of `bellows`. Each adds itself to the application with an add_*
// function defined in its own file; main.cpp calls them all.

#include <CLI/CLI.hpp>

namespace bellows::cli {

/// Exit statuses shared by every subcommand.
enum ExitStatus : int {
  exit_ok = 0,
  /// The command could not do its work (an unexpected error).
  exit_failed = 1,
  /// Bad input: a bad option, or a policy file with errors.
  exit_bad_input = 2,
};

/// Where a subcommand leaves its exit status; CLI11 callbacks return nothing.
struct Outcome {
  int status = exit_ok;
};

/// `bellows policy check FILE...` and `bellows policy keys [--markdown]`.
void add_policy_command(CLI::App& app, Outcome& outcome);

/// `bellows run [--backend local] [--nodes MIN:MAX] [--policy FILE] -- PROGRAM ARGS...` and
/// `bellows run --attach JOB`.
void add_run_command(CLI::App& app, Outcome& outcome);

/// `bellows doctor [--json]`: can the Slurm cluster run elastic jobs, and what to fix.
void add_doctor_command(CLI::App& app, Outcome& outcome);

/// `bellows sim job|join|bag ARGS...`: the simulator's programs (docs/sim.md).
void add_sim_command(CLI::App& app, Outcome& outcome);

/// `bellows status [JOB]`, `bellows resize +K|-K [--job JOB]`, `bellows events [JOB]`,
/// `bellows plot [JOB] [--out PNG]`, `bellows wait [JOB]`.
void add_job_commands(CLI::App& app, Outcome& outcome);

}  // namespace bellows::cli
