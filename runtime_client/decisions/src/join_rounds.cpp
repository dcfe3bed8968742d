#include "bellows/runtime/join_rounds.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bellows::runtime {

namespace {

void check_count(int count) {
  if (count < 1)
    throw std::invalid_argument("join tree: a grow adds at least 1 process, got " + std::to_string(count));
}

}  // namespace

int join_round_count(int count) {
  check_count(count);
  int rounds = 0;
  for (int step = 1; step < count; step *= 2) ++rounds;
  return rounds;
}

std::vector<JoinRound> join_rounds(int ordinal, int count) {
  check_count(count);
  if (ordinal < 0 || ordinal >= count)
    throw std::invalid_argument("join tree: ordinal " + std::to_string(ordinal) + " is outside [0, " +
                                std::to_string(count) + ")");
  std::vector<JoinRound> rounds;
  for (int round = 0, step = 1; step < count; ++round, step *= 2) {
    JoinRound r;
    r.round = round;
    r.accepting_leader = ordinal - ordinal % (2 * step);
    r.connecting_leader = r.accepting_leader + step;
    if (r.connecting_leader >= count) continue;  // the accepting group has no partner this round
    r.accepts = ordinal < r.connecting_leader;
    const int accepting_size = step;  // complete: the connecting group starts after it
    const int connecting_size = std::min(step, count - r.connecting_leader);
    r.own_size = r.accepts ? accepting_size : connecting_size;
    r.partner_size = r.accepts ? connecting_size : accepting_size;
    rounds.push_back(r);
  }
  return rounds;
}

bool leads_accept_in_round(int ordinal, int count, int round) {
  check_count(count);
  const int step = 1 << round;
  return ordinal % (2 * step) == 0 && ordinal + step < count;
}

}  // namespace bellows::runtime
