#pragma once
// The runtime's inter-rank control messages: encode/decode, pure functions.
//
// Every message starts with a fixed header: magic, protocol version, message type.
// Tile payloads never travel in control messages: they follow the handshake of
// PaRSEC (seed 001, section III-B): the producer sends an activation, the consumer
// allocates a buffer, posts a receive and sends a fetch, and the producer sends the
// tile on the tag the consumer chose.

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
inline constexpr std::uint8_t kVersion = 1;

enum class MessageType : std::uint8_t {
  activate = 1,          ///< a tile (or a control token) is ready for these consumers
  fetch = 2,             ///< send me the tile behind handle, on tag
  collection_fetch = 3,  ///< send me collection tile (c, m, n), on tag
};

/// One consumer of an activation: a task slot, or a collection tile (write-back).
struct Target {
  bool to_collection = false;
  TaskKey consumer{};
  std::uint8_t slot = 0;
  TileIndex tile{};

  friend bool operator==(const Target&, const Target&) = default;
};

struct Activate {
  std::uint64_t handle = 0;  ///< producer-side name of the tile; unused when rows == 0
  std::int32_t rows = 0;     ///< 0: no data (control dependency)
  std::int32_t cols = 0;
  std::vector<Target> targets;
  friend bool operator==(const Activate&, const Activate&) = default;
};

struct Fetch {
  std::uint64_t handle = 0;
  std::int32_t tag = 0;
  friend bool operator==(const Fetch&, const Fetch&) = default;
};

struct CollectionFetch {
  TileIndex tile{};
  std::int32_t tag = 0;
  friend bool operator==(const CollectionFetch&, const CollectionFetch&) = default;
};

using Message = std::variant<Activate, Fetch, CollectionFetch>;

std::vector<std::byte> encode(const Message& message);

/// Decodes one message; on failure returns nullopt and sets error to the reason.
std::optional<Message> decode(std::span<const std::byte> bytes, std::string& error);

}  // namespace bellows::runtime::wire
