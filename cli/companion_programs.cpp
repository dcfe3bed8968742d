#include "companion_programs.hpp"

#include <cstdlib>
#include <system_error>

namespace bellows::cli {

namespace fs = std::filesystem;

fs::path find_companion_program(const std::string& name, const std::string& build_folder,
                                const char* override_variable) {
  if (override_variable != nullptr) {
    if (const char* path = std::getenv(override_variable); path != nullptr && *path != '\0') return path;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  for (const fs::path& candidate : {self.parent_path() / name,
                                    self.parent_path().parent_path() / build_folder / name}) {
    if (fs::exists(candidate, ec)) return candidate;
  }
  return {};
}

}  // namespace bellows::cli
