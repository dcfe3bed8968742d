#include "job_dir.hpp"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace bellows::cli {

std::filesystem::path run_dir() {
  if (const char* dir = std::getenv("BELLOWS_RUN_DIR"); dir != nullptr && *dir != '\0') return dir;
  return std::filesystem::path("/tmp") / ("bellows-" + std::to_string(::geteuid()));
}

std::filesystem::path find_job_dir(const std::string& job) {
  const auto root = run_dir();
  const auto dir = root / (job.empty() ? std::string("latest") : job);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    if (job.empty() || job == "latest")
      throw std::runtime_error("no job has been started with bellows run (no " + dir.string() + ")");
    throw std::runtime_error("no job " + job + " (no directory " + dir.string() + ")");
  }
  return std::filesystem::canonical(dir, ec).empty() ? dir : std::filesystem::canonical(dir);
}

}  // namespace bellows::cli
