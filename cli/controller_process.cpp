#include "controller_process.hpp"

#include <cstdio>

#include "companion_programs.hpp"

namespace bellows::cli {

std::filesystem::path find_bellowsd() {
  const std::filesystem::path found = find_companion_program("bellowsd", "daemon", "BELLOWS_BELLOWSD");
  return found.empty() ? std::filesystem::path("bellowsd") : found;
}

std::string progress_line(const controller::ControllerService& service) {
  const auto s = service.status();
  char rate[64] = "-";
  if (const double gflops = s.value("gflops", 0.0); gflops > 0.0)
    std::snprintf(rate, sizeof rate, "%.1f GFLOP/s", gflops);
  std::string last = "none";
  if (!s["active_resize"].is_null()) {
    const auto& a = s["active_resize"];
    last = "#" + std::to_string(a["id"].get<int>()) + " " + a["kind"].get<std::string>() + " " +
           std::to_string(a["count"].get<int>()) + " " + a["state"].get<std::string>();
  } else if (!s["finished_resizes"].empty()) {
    const auto& f = s["finished_resizes"].back();
    last = "#" + std::to_string(f["id"].get<int>()) + " " + f["kind"].get<std::string>() + " " +
           std::to_string(f["count"].get<int>()) + " " + f["state"].get<std::string>();
  }
  return "bellows: job " + s["job"].get<std::string>() + " | nodes " + std::to_string(s["nodes"].size()) +
         " | iteration " + std::to_string(s["iteration"].get<std::uint64_t>()) + " | " + rate + " | last resize " +
         last;
}

}  // namespace bellows::cli
