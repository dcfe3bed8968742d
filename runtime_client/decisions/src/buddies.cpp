#include "bellows/runtime/buddies.hpp"

#include <stdexcept>
#include <string>

#include "bellows/runtime/shrink_plan.hpp"

namespace bellows::runtime {

std::vector<int> choose_buddies(std::span<const std::string> hosts, std::span<const long> held) {
  return choose_buddies(hosts, held, {});
}

std::vector<int> choose_buddies(std::span<const std::string> hosts, std::span<const long> held,
                                std::span<const int> rank_team) {
  if (!rank_team.empty() && rank_team.size() != hosts.size()) {
    throw std::invalid_argument("choose_buddies: " + std::to_string(rank_team.size()) + " teams named for " +
                                std::to_string(hosts.size()) + " ranks");
  }
  if (hosts.size() != held.size()) {
    throw std::invalid_argument("choose_buddies: " + std::to_string(hosts.size()) + " hosts for " +
                                std::to_string(held.size()) + " ranks' tile counts");
  }
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    if (hosts[r].empty()) {
      throw std::invalid_argument("choose_buddies: rank " + std::to_string(r) + " has no host name");
    }
    if (held[r] < 0) {
      throw std::invalid_argument("choose_buddies: rank " + std::to_string(r) + " holds " +
                                  std::to_string(held[r]) + " tiles");
    }
  }
  // What each rank's memory holds: its own tiles, then the copies it takes on.
  std::vector<long> load(held.begin(), held.end());
  std::vector<int> buddies(hosts.size(), -1);
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    const auto other_node = [&](int candidate) { return hosts[static_cast<std::size_t>(candidate)] != hosts[r]; };
    int buddy = -1;
    if (!rank_team.empty()) {
      buddy = choose_backup(load, static_cast<int>(r), [&](int candidate) {
        return other_node(candidate) && rank_team[static_cast<std::size_t>(candidate)] == rank_team[r];
      });
    }
    if (buddy < 0) buddy = choose_backup(load, static_cast<int>(r), other_node);
    buddies[r] = buddy;
    if (buddy >= 0) load[static_cast<std::size_t>(buddy)] += held[r];
  }
  return buddies;
}

std::vector<int> wards_of(std::span<const int> buddies, int rank) {
  std::vector<int> wards;
  for (std::size_t r = 0; r < buddies.size(); ++r) {
    if (buddies[r] == rank) wards.push_back(static_cast<int>(r));
  }
  return wards;
}

}  // namespace bellows::runtime
