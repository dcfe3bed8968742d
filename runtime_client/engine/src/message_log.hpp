#pragma once
// The sender's log of team-based message logging (Meneses, Kale and Bronevetsky, section III;
// the decisions in message_logging.hpp, docs/teams.md): every tile this rank sends to a rank of
// another team stays here, the tile itself (a reference: a task that later writes the buffer
// copies it first, copy on write), until a complete checkpoint releases its iteration. Tiles
// sent within the team are only counted. Thread-safe: workers record the tiles their tasks
// send, the communication thread the collection tiles it serves and the tasks it gives away.
// Each operation reads the steady clock twice (on entry, and under the lock as it ends) and adds
// the difference to MessageLogStats::seconds: the log's own cost, apart from wall-clock ratios.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/task.hpp"
#include "bellows/runtime/tile.hpp"

namespace bellows::runtime {

/// One tile sent to another team: what produced it (the task's key and output slot, or a
/// collection tile), its version (the iteration), the receiver and the tile.
struct LoggedMessage {
  long iteration = 0;
  bool from_collection = false;
  TaskKey producer{};    ///< unless from_collection
  int slot = 0;          ///< the producer's output slot, unless from_collection
  TileIndex tile_index{};  ///< from_collection: the collection tile served
  int destination = -1;
  TilePtr tile;
};

/// A task of this rank given to a thief of another team, in `iteration`.
struct LoggedDeterminant {
  long iteration = 0;
  TaskKey task{};
  int ran_on = -1;
};

class MessageLog {
 public:
  /// Teams of the communicator attached (per rank), this rank's number in it; forgets every
  /// entry (a resize drops the checkpoints the entries were kept for).
  void attach(std::vector<int> rank_team, int rank);
  /// Whether logging is on with teams that log anything at all.
  [[nodiscard]] bool active() const noexcept { return active_; }
  [[nodiscard]] const std::vector<int>& rank_team() const noexcept { return rank_team_; }
  /// A tile produced by `producer`'s output `slot` in `iteration`, sent to `destination`.
  void task_tile_sent(long iteration, const TaskKey& producer, int slot, int destination,
                      const TilePtr& tile);
  /// Collection tile `index` served to `destination` in `iteration`.
  void collection_tile_sent(long iteration, const TileIndex& index, int destination,
                            const TilePtr& tile);
  /// Tasks given to thief `thief` in `iteration`: logged when it is of another team.
  void tasks_given(long iteration, std::span<const TaskKey> tasks, int thief);
  /// The checkpoint at the boundary after `checkpoint_iteration` is complete everywhere:
  /// drops the entries it makes needless (released_by_checkpoint()).
  void release_through(long checkpoint_iteration);
  /// The entries held, in the order they were logged.
  [[nodiscard]] std::vector<LoggedMessage> messages() const;
  [[nodiscard]] std::vector<LoggedDeterminant> determinants() const;
  /// At an iteration's end: what was logged since the last call, and the log as it is now.
  [[nodiscard]] MessageLogStats take_iteration_stats();
  /// Adds work done for the log outside it (the engine keeping the collection tiles as an
  /// iteration starts) to this iteration's MessageLogStats::seconds.
  void add_seconds(double seconds);

  using Clock = std::chrono::steady_clock;

 private:
  void record(LoggedMessage&& message, Clock::time_point started);
  /// Under mutex_: adds the time since `started` to stats_.seconds.
  void charge_since(Clock::time_point started);

  mutable std::mutex mutex_;
  bool active_ = false;
  std::vector<int> rank_team_;
  int rank_ = 0;
  std::vector<LoggedMessage> messages_;          // guarded by mutex_
  std::vector<LoggedDeterminant> determinants_;  // guarded by mutex_
  std::uint64_t bytes_held_ = 0;                 // guarded by mutex_
  MessageLogStats stats_;                        // guarded by mutex_
};

}  // namespace bellows::runtime
