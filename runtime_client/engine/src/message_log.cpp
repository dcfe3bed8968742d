#include "message_log.hpp"

#include <algorithm>
#include <utility>

#include "bellows/runtime/message_logging.hpp"

namespace bellows::runtime {

void MessageLog::attach(std::vector<int> rank_team, int rank) {
  std::lock_guard lock(mutex_);
  rank_team_ = std::move(rank_team);
  rank_ = rank;
  active_ = !rank_team_.empty() &&
            std::any_of(rank_team_.begin(), rank_team_.end(),
                        [&](int team) { return team != rank_team_.front(); });
  messages_.clear();
  determinants_.clear();
  bytes_held_ = 0;
}

void MessageLog::charge_since(Clock::time_point started) {
  stats_.seconds += std::chrono::duration<double>(Clock::now() - started).count();
}

void MessageLog::add_seconds(double seconds) {
  std::lock_guard lock(mutex_);
  stats_.seconds += seconds;
}

void MessageLog::record(LoggedMessage&& message, Clock::time_point started) {
  if (!message.tile) return;  // a control token carries no data
  const std::uint64_t bytes = message.tile->bytes();
  std::lock_guard lock(mutex_);
  if (!logs_message(rank_team_, rank_, message.destination)) {
    ++stats_.messages_in_team;
    stats_.bytes_in_team += bytes;
    charge_since(started);
    return;
  }
  ++stats_.messages_logged;
  stats_.bytes_logged += bytes;
  bytes_held_ += bytes;
  messages_.push_back(std::move(message));  // the tile by reference: no bytes copied
  charge_since(started);
}

void MessageLog::task_tile_sent(long iteration, const TaskKey& producer, int slot,
                                int destination, const TilePtr& tile) {
  const auto started = Clock::now();
  LoggedMessage m;
  m.iteration = iteration;
  m.producer = producer;
  m.slot = slot;
  m.destination = destination;
  m.tile = tile;
  record(std::move(m), started);
}

void MessageLog::collection_tile_sent(long iteration, const TileIndex& index, int destination,
                                      const TilePtr& tile) {
  const auto started = Clock::now();
  LoggedMessage m;
  m.iteration = iteration;
  m.from_collection = true;
  m.tile_index = index;
  m.destination = destination;
  m.tile = tile;
  record(std::move(m), started);
}

void MessageLog::tasks_given(long iteration, std::span<const TaskKey> tasks, int thief) {
  const auto started = Clock::now();
  std::lock_guard lock(mutex_);
  if (!logs_message(rank_team_, rank_, thief)) return charge_since(started);
  for (const auto& key : tasks) determinants_.push_back(LoggedDeterminant{iteration, key, thief});
  stats_.determinants_logged += tasks.size();
  charge_since(started);
}

void MessageLog::release_through(long checkpoint_iteration) {
  const auto started = Clock::now();
  std::lock_guard lock(mutex_);
  const auto released = [&](const auto& entry) {
    return released_by_checkpoint(entry.iteration, checkpoint_iteration);
  };
  for (const auto& m : messages_) {
    if (!released(m)) continue;
    ++stats_.messages_released;
    stats_.bytes_released += m.tile->bytes();
    bytes_held_ -= m.tile->bytes();
  }
  std::erase_if(messages_, released);
  std::erase_if(determinants_, released);
  charge_since(started);
}

std::vector<LoggedMessage> MessageLog::messages() const {
  std::lock_guard lock(mutex_);
  return messages_;
}

std::vector<LoggedDeterminant> MessageLog::determinants() const {
  std::lock_guard lock(mutex_);
  return determinants_;
}

MessageLogStats MessageLog::take_iteration_stats() {
  const auto started = Clock::now();
  std::lock_guard lock(mutex_);
  charge_since(started);
  MessageLogStats out = std::exchange(stats_, MessageLogStats{});
  out.entries_held = messages_.size();
  out.bytes_held = bytes_held_;
  out.peak_bytes_held = bytes_held_;
  out.bytes_held_by_iteration.push_back(static_cast<double>(bytes_held_));
  return out;
}

}  // namespace bellows::runtime
