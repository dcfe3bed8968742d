#pragma once
// SimGrid's engine as every simulation of sim/ starts it: the arguments of simgrid_arguments()
// (kept alive as long as the engine) and a platform file loaded. Internal to bellows::sim_core.

#include <simgrid/s4u.hpp>

#include <string>
#include <vector>

#include "bellows/sim/platform.hpp"

namespace bellows::sim {

/// One per process: SimGrid's engine cannot be started twice.
class SimGridEngine {
 public:
  /// Starts the engine as `program` and loads the platform XML at `platform_path`.
  SimGridEngine(const std::string& program, const std::string& platform_path)
      : args_(simgrid_arguments(program)), argv_(pointers(args_)), argc_(static_cast<int>(argv_.size())),
        engine_(&argc_, argv_.data()) {
    engine_.load_platform(platform_path);
  }
  SimGridEngine(const SimGridEngine&) = delete;
  SimGridEngine& operator=(const SimGridEngine&) = delete;

  [[nodiscard]] simgrid::s4u::Engine& get() noexcept { return engine_; }

 private:
  static std::vector<char*> pointers(std::vector<std::string>& args) {
    std::vector<char*> out;
    for (auto& a : args) out.push_back(a.data());
    return out;
  }

  std::vector<std::string> args_;
  std::vector<char*> argv_;
  int argc_;
  simgrid::s4u::Engine engine_;
};

}  // namespace bellows::sim
