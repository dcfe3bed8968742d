#pragma once
// What both NodeLaunchers (local and Slurm) do with the processes they start: prepare a
// node's directory, start a process with its output in the node's log, and wait for it to end.

#include "bellows/controller/resource_manager.hpp"

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace bellows::controller::detail {

/// Creates `dir` and removes a stale URI file in it; unavailable when the directory cannot be
/// created.
RmStatus prepare_node_dir(const std::filesystem::path& dir, const std::filesystem::path& uri_file);

/// Starts args[0] (looked up in PATH) with `env` ("NAME=VALUE" entries), stdin from /dev/null,
/// stdout and stderr appended to `log`. Returns the pid, or 0 with *error set to the reason.
pid_t spawn_logged(std::vector<std::string> args, std::vector<std::string> env,
                   const std::filesystem::path& log, std::string* error);

/// The arguments that give a daemon the heartbeat timeout: {"--heartbeat-timeout", "2.5"}.
std::vector<std::string> heartbeat_timeout_arguments(std::chrono::milliseconds timeout);

/// This process's environment as "NAME=VALUE" entries.
std::vector<std::string> current_environment();

/// Waits up to `within` for the child to end; true once it is reaped (or is no child).
bool reaped_within(pid_t pid, std::chrono::milliseconds within);

}  // namespace bellows::controller::detail
