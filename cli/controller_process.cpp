#include "controller_process.hpp"

#include <bellows/controller/local_daemon_launcher.hpp>
#include <bellows/controller/slurm_daemon_launcher.hpp>

#include <cstdio>
#include <cstdlib>

#include "companion_programs.hpp"

namespace bellows::cli {

std::filesystem::path find_bellowsd() {
  const std::filesystem::path found = find_companion_program("bellowsd", "daemon", "BELLOWS_BELLOWSD");
  return found.empty() ? std::filesystem::path("bellowsd") : found;
}

std::filesystem::path find_srun() {
  if (const char* path = std::getenv("BELLOWS_SRUN"); path != nullptr && *path != '\0') return path;
  return "srun";
}

std::unique_ptr<controller::NodeLauncher> local_daemon_launcher(const std::filesystem::path& job_dir, bool verbose,
                                                                const std::optional<policy::Policy>& policy) {
  controller::LocalDaemonLauncher::Options launch{find_bellowsd(), job_dir, verbose};
  if (policy) launch.heartbeat_timeout = policy->recovery.heartbeat_timeout;
  return std::make_unique<controller::LocalDaemonLauncher>(launch);
}

std::unique_ptr<controller::NodeLauncher> slurm_daemon_launcher(
    const std::string& job, const std::filesystem::path& job_dir, bool verbose,
    const std::optional<policy::Policy>& policy, std::function<std::string(const std::string& node)> slurm_job_of) {
  controller::SlurmDaemonLauncher::Options launch;
  launch.srun = find_srun();
  launch.job = job;
  launch.bellowsd = find_bellowsd();
  launch.job_dir = job_dir;
  launch.verbose = verbose;
  if (policy) launch.heartbeat_timeout = policy->recovery.heartbeat_timeout;
  launch.slurm_job_of = std::move(slurm_job_of);
  return std::make_unique<controller::SlurmDaemonLauncher>(launch);
}

std::string progress_line(const controller::ControllerService& service) {
  const auto s = service.status();
  char rate[64] = "-";
  if (const double gflops = s.value("gflops", 0.0); gflops > 0.0)
    std::snprintf(rate, sizeof rate, "%.1f GFLOP/s", gflops);
  // One resize as "#ID KIND COUNT STATE", built by appending (GCC 12 at -O3 warns falsely,
  // -Wrestrict, on "#" + a temporary string).
  const auto describe = [](const nlohmann::json& resize) {
    std::string text = "#";
    text += std::to_string(resize["id"].get<int>());
    text += ' ';
    text += resize["kind"].get<std::string>();
    text += ' ';
    text += std::to_string(resize["count"].get<int>());
    text += ' ';
    text += resize["state"].get<std::string>();
    return text;
  };
  std::string last = "none";
  if (!s["active_resize"].is_null()) {
    last = describe(s["active_resize"]);
  } else if (!s["finished_resizes"].empty()) {
    last = describe(s["finished_resizes"].back());
  }
  return "bellows: job " + s["job"].get<std::string>() + " | nodes " + std::to_string(s["nodes"].size()) +
         " | iteration " + std::to_string(s["iteration"].get<std::uint64_t>()) + " | " + rate + " | last resize " +
         last;
}

}  // namespace bellows::cli
