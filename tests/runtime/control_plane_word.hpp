#pragma once
// The control plane's word in the tests whose members are worlds of their own (recovery_tests,
// task_bag_loss_tests): the launcher writes it to DIR/told_lost as "FAILURE_ID R1,R2" (the
// ranks it names lost), and each member hands it to its process's LossNotices from a thread of
// its own, as the PMIx handler does.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "bellows/runtime/loss_notices.hpp"
#include "separate_worlds.hpp"

namespace bellows::testing::recovery {

/// "0,2" -> {0, 2}; "-1" -> {}.
inline std::vector<int> parse_victims(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const int rank = std::atoi(item.c_str());
    if (rank >= 0) out.push_back(rank);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Waits on a thread of its own for DIR/told_lost, then `delay` more, and tells the process's
/// LossNotices the failure and the ranks the file names (parse_victims). Stops waiting when
/// the returned thread is asked to stop (at its end).
inline std::jthread tell_when_told(const std::filesystem::path& dir, std::chrono::milliseconds delay) {
  return std::jthread([dir, delay](std::stop_token stop) {
    while (!stop.stop_requested() && !std::filesystem::exists(dir / "told_lost")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (stop.stop_requested()) return;
    std::this_thread::sleep_for(delay);
    std::stringstream text(read_file(dir / "told_lost"));
    std::uint64_t failure_id = 0;
    std::string ranks;
    text >> failure_id >> ranks;
    bellows::runtime::loss_notices().tell(failure_id, parse_victims(ranks));
  });
}

}  // namespace bellows::testing::recovery
