#include "bellows/runtime/message_logging.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bellows::runtime {

namespace {

void check_rank(std::span<const int> rank_team, int rank, const char* what) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= rank_team.size()) {
    throw std::invalid_argument(std::string("message log: ") + what + " " + std::to_string(rank) +
                                " is not a rank of the " + std::to_string(rank_team.size()) +
                                "-rank job");
  }
}

std::vector<int> consecutive(int ranks, int team_size) {
  std::vector<int> teams(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) teams[static_cast<std::size_t>(r)] = r / team_size;
  return teams;
}

}  // namespace

std::vector<int> resolve_teams(const MessageLogOptions& options, int ranks) {
  if (ranks < 1) {
    throw std::invalid_argument("message log: a job needs at least 1 rank, got " +
                                std::to_string(ranks));
  }
  if (const auto problem = validate(options); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  if (options.rank_team.empty()) {
    const int size = options.team_size == 0 ? ranks : std::min(options.team_size, ranks);
    return consecutive(ranks, size);
  }
  if (options.rank_team.size() != static_cast<std::size_t>(ranks)) {
    // A plan for another rank count: consecutive teams of its largest team's size.
    std::vector<int> members(options.rank_team.size(), 0);
    for (const int team : options.rank_team) {
      if (static_cast<std::size_t>(team) >= members.size()) members.resize(team + 1U, 0);
      ++members[static_cast<std::size_t>(team)];
    }
    const int largest = *std::max_element(members.begin(), members.end());
    return consecutive(ranks, std::min(largest, ranks));
  }
  // Renumbered in order of first rank, so that equal groupings give equal numbers.
  std::vector<int> renumbered(options.rank_team.size());
  std::vector<int> seen;
  for (std::size_t r = 0; r < options.rank_team.size(); ++r) {
    const auto at = std::find(seen.begin(), seen.end(), options.rank_team[r]);
    renumbered[r] = static_cast<int>(at - seen.begin());
    if (at == seen.end()) seen.push_back(options.rank_team[r]);
  }
  return renumbered;
}

bool logs_message(std::span<const int> rank_team, int from, int to) {
  check_rank(rank_team, from, "sender");
  check_rank(rank_team, to, "receiver");
  return rank_team[static_cast<std::size_t>(from)] != rank_team[static_cast<std::size_t>(to)];
}

std::vector<int> steal_partners(std::span<const int> rank_team, int rank, bool steal_across_teams) {
  check_rank(rank_team, rank, "rank");
  std::vector<int> partners;
  for (std::size_t r = 0; r < rank_team.size(); ++r) {
    if (static_cast<int>(r) == rank) continue;
    if (steal_across_teams || rank_team[r] == rank_team[static_cast<std::size_t>(rank)]) {
      partners.push_back(static_cast<int>(r));
    }
  }
  return partners;
}

std::vector<int> ranks_rolling_back(std::span<const int> rank_team, std::span<const int> lost) {
  std::vector<bool> team_lost;
  for (const int rank : lost) {
    check_rank(rank_team, rank, "lost rank");
    const auto team = static_cast<std::size_t>(rank_team[static_cast<std::size_t>(rank)]);
    if (team >= team_lost.size()) team_lost.resize(team + 1, false);
    team_lost[team] = true;
  }
  std::vector<int> ranks;
  for (std::size_t r = 0; r < rank_team.size(); ++r) {
    const auto team = static_cast<std::size_t>(rank_team[r]);
    if (team < team_lost.size() && team_lost[team]) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

}  // namespace bellows::runtime
