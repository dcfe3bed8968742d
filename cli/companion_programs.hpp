#pragma once
// Where `bellows` finds the programs it runs on the user's behalf (bellowsd, the simulator's):
// next to its own executable once installed, or in their folder of the build tree.

#include <filesystem>
#include <string>

namespace bellows::cli {

/// The path of program `name`: the environment variable `override_variable` when it is set
/// and not empty; else `name` next to this executable (an installation); else
/// `BUILD_FOLDER/name` beside this executable's folder (the build tree: cli/../BUILD_FOLDER).
/// Empty when none of them exists.
[[nodiscard]] std::filesystem::path find_companion_program(const std::string& name,
                                                           const std::string& build_folder,
                                                           const char* override_variable = nullptr);

}  // namespace bellows::cli
