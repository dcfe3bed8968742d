#pragma once
// The runtime's inter-rank control messages: encode/decode, pure functions.
//
// Every message starts with a fixed header: magic, protocol version, message type.
// Tile payloads follow the handshake of PaRSEC (John & Milthorpe,
// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
// CCGrid 2024, section III-B): the producer sends an activation, the consumer
// allocates a buffer, posts a receive and sends a fetch, and the producer sends the
// tile on the tag the consumer chose. The one exception is a small tile (at most
// RuntimeOptions::eager_tile_bytes): its bytes travel in the activation itself, and the
// consumer answers nothing (PaRSEC's short-limit payload, comm_short_limit).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "bellows/runtime/task.hpp"

namespace bellows::runtime::wire {

inline constexpr std::uint16_t kMagic = 0xBE11;
inline constexpr std::uint8_t kVersion = 7;

enum class MessageType : std::uint8_t {
  activate = 1,          ///< a tile (or a control token) is ready for these consumers
  fetch = 2,             ///< send me the tile behind handle, on tag
  collection_fetch = 3,  ///< send me collection tile (c, m, n), on tag
  steal_request = 4,     ///< a starving rank asks for tasks (John & Milthorpe, section IV)
  steal_reply = 5,       ///< tasks given to a thief, described by key and input handles
  progress = 6,          ///< tasks completed on a rank, to the first rank (stealing on)
  iteration_done = 7,    ///< from the first rank: every task of the iteration has run
  fetched = 8,           ///< the consumer read the tile behind handle itself (same host)
  collection_tile_at = 9,  ///< where collection tile (c, m, n) lies, for a same-host read
  steal_invitation = 10,   ///< a rank that drifts behind the plan asks another to steal from it
  already_held = 11,       ///< the consumer holds the tile behind handle already: drop it
};

/// One consumer of an activation: a task slot, or a collection tile (write-back).
struct Target {
  bool to_collection = false;
  TaskKey consumer{};
  std::uint8_t slot = 0;
  TileIndex tile{};

  friend bool operator==(const Target&, const Target&) = default;
};

/// What produced the tile of an activation, and its version: the task, its output slot and
/// the iteration it ran in. With message logging between teams it names the message, so that
/// a receiver recognises a copy it already holds (team_replay.hpp, ReceivedVersions): a team
/// that rolled back sends its outputs of the iterations it re-runs again.
struct Producer {
  TaskKey task{};
  std::uint8_t slot = 0;
  std::uint32_t version = 0;  ///< the iteration, counted from 1

  friend bool operator==(const Producer&, const Producer&) = default;
};

/// Bytes a Producer adds to an activation that carries it (task class, three indices, slot,
/// version); activations without one carry nothing more.
inline constexpr std::size_t kProducerBytes = sizeof(std::uint16_t) + 3 * sizeof(std::int32_t) +
                                              sizeof(std::uint8_t) + sizeof(std::uint32_t);

struct Activate {
  /// Producer-side name of the tile; unused when rows == 0 or the tile is carried (0 then).
  std::uint64_t handle = 0;
  /// Non-zero: the tile's address in the producer, which shares the consumer's host; the
  /// consumer reads it there and answers Fetched instead of Fetch.
  std::uint64_t address = 0;
  std::int32_t rows = 0;     ///< 0: no data (control dependency)
  std::int32_t cols = 0;
  std::vector<Target> targets;
  /// Non-empty: the tile itself, rows x cols doubles as the producer's memory holds them
  /// (column-major), carried in the activation; the consumer sends no fetch and answers
  /// nothing. Bytes, not doubles, so that every bit pattern compares equal to itself.
  std::vector<std::byte> tile_bytes;
  /// Present with message logging between teams (kProducerBytes more on the wire).
  std::optional<Producer> producer = std::nullopt;
  friend bool operator==(const Activate&, const Activate&) = default;
};

struct Fetch {
  std::uint64_t handle = 0;
  std::int32_t tag = 0;
  friend bool operator==(const Fetch&, const Fetch&) = default;
};

struct CollectionFetch {
  TileIndex tile{};
  std::int32_t tag = 0;  ///< kWhereIsTag: answer with CollectionTileAt (same host)
  friend bool operator==(const CollectionFetch&, const CollectionFetch&) = default;
};

/// CollectionFetch::tag asking where the tile lies instead of for its bytes.
inline constexpr std::int32_t kWhereIsTag = -1;

/// The consumer has read the tile behind handle (same host): the producer may drop it.
struct Fetched {
  std::uint64_t handle = 0;
  friend bool operator==(const Fetched&, const Fetched&) = default;
};

/// The consumer holds the tile behind handle already (a copy the replay of a team that rolled
/// back sent again, which it drops): the producer drops it too, and nothing is fetched.
struct AlreadyHeld {
  std::uint64_t handle = 0;
  friend bool operator==(const AlreadyHeld&, const AlreadyHeld&) = default;
};

/// Answer to a CollectionFetch with kWhereIsTag: read rows x cols doubles at address,
/// then send Fetched{handle}.
struct CollectionTileAt {
  TileIndex tile{};
  std::uint64_t handle = 0;
  std::uint64_t address = 0;
  std::int32_t rows = 0;
  std::int32_t cols = 0;
  friend bool operator==(const CollectionTileAt&, const CollectionTileAt&) = default;
};

/// Asks for `wanted` ready tasks on behalf of rank `thief`. A victim that cannot give
/// them all may forward the rest to another victim (hops + 1); every reply goes straight
/// to the thief.
struct StealRequest {
  std::int32_t thief = 0;
  std::uint32_t request_id = 0;  ///< chosen by the thief, unique among its requests
  std::int32_t wanted = 0;
  std::uint8_t hops = 0;             ///< times this request was forwarded so far
  std::uint16_t partial_replies = 0; ///< non-final replies already sent to the thief
  /// The thief's predicted work left when it asked, per lane, nanoseconds (CostModel).
  std::uint64_t thief_load_ns = 0;
  /// The thief's measured task time, its CostModel fit over all classes: overhead +
  /// seconds_per_flop * flops, per lane. Both 0: it has not run a task yet.
  double thief_task_overhead_seconds = 0.0;
  double thief_seconds_per_flop = 0.0;
  friend bool operator==(const StealRequest&, const StealRequest&) = default;
};

/// One input of a stolen task that the thief fetches from the victim (rows == 0: a
/// control token, nothing to fetch). Scratch slots are not listed: the thief makes them.
struct StolenInput {
  std::uint8_t slot = 0;
  std::uint64_t handle = 0;
  std::uint64_t address = 0;  ///< non-zero: read it there (same host), then Fetched
  std::int32_t rows = 0;
  std::int32_t cols = 0;
  friend bool operator==(const StolenInput&, const StolenInput&) = default;
};

struct StolenTask {
  TaskKey key{};
  std::vector<StolenInput> inputs;
  friend bool operator==(const StolenTask&, const StolenTask&) = default;
};

/// Tasks for the thief. The request is answered when the final reply has arrived and,
/// with it, the `partial_replies` non-final ones that forwarding victims sent before.
struct StealReply {
  std::uint32_t request_id = 0;
  bool final = true;
  std::uint16_t partial_replies = 0;  ///< meaningful on the final reply
  std::uint8_t hops = 0;  ///< forwards of the request this reply answers
  std::vector<StolenTask> tasks;
  friend bool operator==(const StealReply&, const StealReply&) = default;
};

struct Progress {
  std::uint64_t completed = 0;  ///< tasks completed since the rank's previous report
  /// The rank has run all its tasks of the iteration and stops asking for work: it enters
  /// the end-of-iteration barrier without waiting for IterationDone, which the first rank
  /// then does not send it. Only on a report of at least one task (before the first rank
  /// has counted it, the iteration cannot be over), and at most once per iteration.
  bool retired = false;
  friend bool operator==(const Progress&, const Progress&) = default;
};

struct IterationDone {
  friend bool operator==(const IterationDone&, const IterationDone&) = default;
};

/// From a rank whose predicted work has drifted past the iteration's plan (proactive
/// offloading, OffloadPolicy::drifted) to a rank the plan left less loaded: steal from me now,
/// before you starve. The receiver answers with a StealRequest to the sender, whose gift rule
/// decides as for any request; one for another iteration than the receiver's is ignored.
struct StealInvitation {
  std::uint32_t iteration = 0;  ///< the sender's iteration (Runtime iterations count from 1)
  friend bool operator==(const StealInvitation&, const StealInvitation&) = default;
};

using Message = std::variant<Activate, Fetch, CollectionFetch, StealRequest, StealReply, Progress,
                             IterationDone, Fetched, CollectionTileAt, StealInvitation, AlreadyHeld>;

std::vector<std::byte> encode(const Message& message);

/// Decodes one message; on failure returns nullopt and sets error to the reason.
std::optional<Message> decode(std::span<const std::byte> bytes, std::string& error);

}  // namespace bellows::runtime::wire
