#pragma once
// A clock that moves only when told to, for deterministic tests without sleeps.

#include "bellows/controller/clock.hpp"

#include <chrono>

namespace bellows::controller::testing {

/// Starts at steady time 1000 s and wall time 2024-05-01T12:00:00.000Z; advance() moves both.
class FakeClock final : public Clock {
 public:
  [[nodiscard]] time_point now() const override { return steady_; }
  [[nodiscard]] std::chrono::system_clock::time_point wall_now() const override { return wall_; }
  void advance(std::chrono::milliseconds by) {
    steady_ += by;
    wall_ += by;
  }

 private:
  time_point steady_{std::chrono::seconds(1000)};
  std::chrono::system_clock::time_point wall_{std::chrono::seconds(1714564800)};
};

}  // namespace bellows::controller::testing
