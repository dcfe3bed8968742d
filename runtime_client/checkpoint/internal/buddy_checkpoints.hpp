#pragma once
// Buddy checkpoints: the mechanism that carries out the decisions of buddies.hpp,
// recovery_plan.hpp (kept_copies, superseded_copies) and checkpoint_interval.hpp.
//
// At an iteration boundary every rank keeps its own copy of the tiles it owns in the
// registered collections and sends a copy to its buddy, a rank on another node, which keeps
// it in memory (the double in-memory checkpoint of Zheng, Shi & Kale, Cluster 2004). The own
// copy shares the tiles: a task that writes a collection tile always writes a new tile
// (ReadyTask::make_writable_slots_exclusive: the collection holds a reference), so what the
// copy holds stays as it was at the boundary, and the sends read it while the next
// iteration's tasks run. A tile that is still the one the previous complete checkpoint
// kept, and went to the same buddy, is sent as an empty message: the buddy keeps its copy
// of it (GEMM's A and B, Cholesky's A are never written). The sends and the receives are posted at the boundary, progress
// with the communication thread's MPI calls during the iteration, and are completed at its
// end; the end-of-iteration reductions that follow tell every rank that every copy is
// complete, and older copies are freed as superseded_copies() says.
//
// A checkpoint is addressed by rank and iteration: the copy of rank r's tiles at the
// boundary after iteration k, held by r itself and by its buddy. restore() installs any
// rank's copy from any holder of it, so that a roll-back of some ranks only (one team) is
// a call with fewer sources.
//
// Not thread-safe: every method is called by the application's thread between iterations
// (take() before the communication thread starts, complete_transfers() after it stopped),
// so that MPI_THREAD_SERIALIZED holds. Every collective method is called by every rank of
// the communicator in the same order, and every rank makes the same decisions from values
// the end-of-iteration reductions made equal.

#include <functional>
#include <mpi.h>

#include <optional>
#include <span>
#include <string>
#include <memory>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/options.hpp"
#include "bellows/runtime/recovery_plan.hpp"
#include "bellows/runtime/shrink_plan.hpp"
#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/tile.hpp"

namespace bellows::runtime {

class BuddyCheckpoints {
 public:
  /// `node` is the node this rank runs on (RuntimeOptions::checkpoint.node resolved).
  BuddyCheckpoints(CheckpointOptions options, std::string node);
  ~BuddyCheckpoints();
  BuddyCheckpoints(const BuddyCheckpoints&) = delete;
  BuddyCheckpoints& operator=(const BuddyCheckpoints&) = delete;

  [[nodiscard]] bool enabled() const noexcept { return options_.enabled; }

  /// Collective over `comm` (the runtime's communicator, which it uses with a tag of its
  /// own), between iterations: learns every rank's node. At construction and after every
  /// resize; the next boundary takes a checkpoint (checkpoint_due after a resize).
  void attach(MPI_Comm comm);
  /// The same with every rank's node given (`nodes`, per rank of `comm`), so not collective:
  /// after a recovery, whose survivors' nodes are known from before the loss and where a
  /// collective could wait on a rank lost meanwhile. Throws std::invalid_argument when
  /// `nodes` does not have one name per rank.
  void attach(MPI_Comm comm, std::vector<std::string> nodes);

  /// Every rank's node over a communicator, gathered by one MPI_Iallgather that the caller
  /// completes (watched, as an expand's attach does) before reading nodes(). A gather given up
  /// while pending must outlive its request: MPI may still write into it.
  struct NodeGather {
    std::vector<char> mine;
    std::vector<char> all;
    MPI_Request request = MPI_REQUEST_NULL;
    /// The names, per rank, once the request completed (empty when checkpoints are off).
    [[nodiscard]] std::vector<std::string> nodes() const;
  };
  /// Posts the gather attach(comm) waits for (collective over `comm`; nothing posted, and no
  /// request, when checkpoints are off).
  [[nodiscard]] std::unique_ptr<NodeGather> post_node_gather(MPI_Comm comm) const;
  /// The teams of message logging, per rank of the communicator attached (empty: one team):
  /// from the next take() on, a rank's buddy is of its own team where the team has a rank on
  /// another node (choose_buddies), so that a recovery's restore stays inside the team that
  /// rolls back (recovery_plan.hpp). Kept across attach(); the caller sets them again when
  /// the teams change.
  void set_teams(std::vector<int> rank_team) { rank_team_ = std::move(rank_team); }
  /// At a recovery that rolls back only some teams and redoes iterations (docs/teams.md, "A
  /// loss during the replay"), collective over `comm`, the survivors' communicator, with
  /// `nodes` per rank of it: attaches to it as attach(comm, nodes) does, but keeps the
  /// checkpoint at the boundary after `iteration` (the one the teams rolled back to),
  /// re-homed for the survivors. `ranks` is the recovery's renumbering, and the collections
  /// are mapped onto the survivors already (each lost rank's tiles on its backup). This
  /// rank's copy holds the tiles it owns now, from its own copy and the copies it holds of the
  /// lost ranks whose tiles it took (its tiles themselves may be at a later iteration); the
  /// buddies are chosen over the survivors, and each copy goes to its new buddy unless that
  /// buddy holds it already (rehome_checkpoint()). Posts the sends and receives, which
  /// complete_transfers() completes; confirmed_complete() then marks the checkpoint complete.
  /// The next boundary takes a checkpoint, as after attach(). Returns the bytes this rank
  /// posted. Throws std::logic_error when this rank holds no complete copy it needs.
  std::uint64_t rehome(MPI_Comm comm, std::vector<std::string> nodes, long iteration, const ShrinkPlan& ranks,
                       std::span<TiledMatrix* const> collections);
  /// Local, after an abandoned iteration (abandon_in_flight() called): drops every checkpoint
  /// taken after the boundary after `iteration`, and the copies held of them.
  void drop_newer_than(long iteration);
  /// Before the communicator goes away (a resize): waits for transfers in flight and drops
  /// every copy, which would match neither the new ranks nor their tiles.
  void detach();

  /// Whether the boundary after `completed` iterations takes a checkpoint (the same answer
  /// on every rank).
  [[nodiscard]] bool due(long completed) const;
  /// At the boundary after `completed` iterations, collective: chooses the buddies from
  /// every rank's node and tile count, keeps the own copy of the tiles this rank owns in
  /// `collections`, posts the send of that copy to the buddy and the receives of the
  /// wards' copies.
  void take(long completed, std::span<TiledMatrix* const> collections);
  /// At the end of an iteration, with the communication thread stopped: waits for the
  /// transfers take() posted at its start. Returns the seconds this rank's checkpoint added
  /// to the iteration (posting and waiting), 0 without one; -1 when a transfer failed or
  /// `peer_lost` (asked between tests) said a peer died: then call abandon_in_flight().
  double complete_transfers(const std::function<bool()>& peer_lost);
  /// After an iteration abandoned because a peer died: cancels the receives of the
  /// checkpoint taken at its start and frees its sends (their tiles, the own copy's, are
  /// kept until the process exits). The wards' copies that did not all arrive are dropped;
  /// the others stay, reported complete by copies(), so that choose_checkpoint() can still
  /// pick that checkpoint when every copy a roll-back needs arrived.
  void abandon_in_flight();
  /// After the end-of-iteration reductions: `iteration_seconds` and `checkpoint_seconds`
  /// are the largest over the ranks. Marks the checkpoint taken at the iteration's start
  /// complete (every rank completed its transfers before the reductions), frees what
  /// superseded_copies() names, and sets the interval (checkpoint_interval()).
  void iteration_ended(double iteration_seconds, double checkpoint_seconds);
  /// Outside the end-of-iteration reductions (at the end of a recovery, of the state restored;
  /// before the first iteration's tasks after a resize), once every rank completed the
  /// transfers of the checkpoint take() posted (the caller confirms that with a collective):
  /// marks it complete. Its cost does not set the interval (it is not overlapped with an
  /// iteration's tasks, and it is not the same on every rank); the interval stays 1 until
  /// the next checkpoint's cost is known.
  void confirmed_complete();

  /// What checkpoints did since the previous call; bytes_held and the interval as now.
  [[nodiscard]] CheckpointStats take_stats();
  /// Per rank of the communicator attached: the node it runs on.
  [[nodiscard]] const std::vector<std::string>& nodes() const noexcept { return nodes_; }
  /// Local, at a recovery, with the collections already mapped so that this rank owns
  /// `owner`'s tiles (its own, or a lost ward's): the copy of `owner`'s tiles at
  /// `iteration` that this rank holds replaces them. Returns the tiles installed. Throws
  /// std::invalid_argument naming the owner and iteration when no copy that arrived is held.
  std::size_t install(int owner, long iteration, std::span<TiledMatrix* const> collections);
  /// Every copy this rank holds, its own included, in (iteration, owner) order.
  [[nodiscard]] std::vector<CheckpointCopy> copies() const;
  /// The buddies under which the latest checkpoint was taken (empty: none taken).
  [[nodiscard]] std::vector<int> buddies() const;
  /// The latest checkpoint complete at every holder.
  [[nodiscard]] std::optional<long> last_complete() const;

  /// Collective, between iterations: for every source, the copy of `owner`'s tiles at the
  /// boundary after `iteration` held by `holder` replaces `owner`'s tiles in `collections`
  /// (from its own memory when the holder is the owner, else sent by the holder). Ranks
  /// named by no source keep their tiles. Throws std::invalid_argument, on every rank
  /// alike, naming what is wrong: no complete checkpoint of that iteration, a holder that
  /// keeps no copy of that owner, an owner named twice, a rank out of range.
  void restore(long iteration, std::span<const CheckpointSource> sources,
               std::span<TiledMatrix* const> collections);

 private:
  struct CopiedTile {
    CollectionId collection = 0;
    int m = 0;
    int n = 0;
    TilePtr tile;
  };
  /// One copy of one rank's checkpoint in this rank's memory.
  struct HeldCopy {
    int owner = -1;
    long iteration = 0;
    std::vector<CopiedTile> tiles;
    std::uint64_t bytes = 0;
    /// Every tile of it is here: the own copy at once, a ward's when complete_transfers()
    /// finished. A copy that arrived is reported complete by copies() even before the
    /// checkpoint is complete everywhere, so that choose_checkpoint() sees what a failure
    /// during the end-of-iteration reductions left.
    bool arrived = false;
  };
  /// What every rank knows of one checkpoint.
  struct Checkpoint {
    long iteration = 0;
    std::vector<int> buddies;  ///< per rank, -1: none
    std::vector<long> tiles;   ///< per rank: the tiles its copy holds
    bool complete = false;
  };

  /// The tiles `rank` owns in `collections`, in the order copies are sent and kept.
  static std::vector<CopiedTile> owned_tiles(std::span<TiledMatrix* const> collections, int rank);
  [[nodiscard]] const Checkpoint* find(long iteration) const;
  [[nodiscard]] HeldCopy* held(int owner, long iteration);
  void free_superseded();

  CheckpointOptions options_;
  std::string node_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::string> nodes_;  ///< per rank
  std::vector<int> rank_team_;      ///< per rank: its team; empty: one team
  int distinct_nodes_ = 1;

  std::vector<Checkpoint> checkpoints_;  ///< taken, oldest first
  std::vector<HeldCopy> held_;
  /// What a request of the checkpoint in flight receives: a tile of `owner`'s copy, which an
  /// empty message leaves as it was in the copy of checkpoint `previous`; owner -1: a send.
  struct PendingReceive {
    int owner = -1;
    std::size_t tile = 0;
    long previous = -1;
  };
  std::vector<MPI_Request> requests_;    ///< the transfers of the checkpoint in flight
  std::vector<PendingReceive> receives_;  ///< per request
  double post_seconds_ = 0.0;            ///< of the checkpoint in flight
  bool resized_ = true;                  ///< no checkpoint since attach()
  long interval_ = 1;
  double last_cost_seconds_ = -1.0;      ///< the latest checkpoint's, largest over ranks
  CheckpointStats stats_;
};

}  // namespace bellows::runtime
