// Fuzz target of the runtime's inter-rank messages (runtime_client/wire/internal/wire.hpp).
//
// Properties checked on every input b:
//   - decode never crashes or reads outside b (the sanitizers of the build see that);
//   - it returns a message and leaves the error text empty, or returns nothing and names
//     what is wrong in the error text;
//   - an accepted message m encodes to bytes e that decode to m again, and e encodes back
//     to itself: decode(encode(decode(b))) == decode(b) and encode(decode(e)) == e.
//
// The codec is not canonical, so e == b does not hold for every accepted b: a collection
// target of an Activate has no slot, and the slot byte of its 15 bytes is padding that the
// encoder writes as 0 and the decoder ignores. The target checks that e differs from b in
// those padding bytes only (the producer after the targets and a tile carried after it
// re-encode byte for byte).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "fuzz_target.hpp"
#include "wire.hpp"

namespace wire = bellows::runtime::wire;
namespace fuzz = bellows::fuzz;
using bellows::runtime::TaskKey;
using bellows::runtime::TileIndex;

namespace {

// The layout that the checks below and length_fields() need (wire.cpp has the rest).
constexpr std::size_t kHeaderBytes = 4;                       // magic u16, version, type
constexpr std::size_t kTypeOffset = 3;
constexpr std::size_t kActivateCountOffset = kHeaderBytes + 8 + 8 + 4 + 4 + 1;  // after the flags
constexpr std::size_t kActivateTargetsOffset = kActivateCountOffset + 4;
constexpr std::size_t kTargetBytes = 2 + 3 * 4 + 1;           // class, three indices, slot
constexpr std::size_t kTargetSlotOffset = kTargetBytes - 1;   // padding in a collection target
constexpr std::uint16_t kCollectionMarker = 0xFFFF;
constexpr std::size_t kStealReplyCountOffset = kHeaderBytes + 4 + 1 + 2 + 1;
constexpr std::size_t kStolenTaskBytes = 2 + 3 * 4 + 1;       // key, input count
constexpr std::size_t kStolenInputBytes = 1 + 8 + 8 + 4 + 4;

// Valid messages, at least one of each type (a type added to wire::Message needs its
// samples() overload, or seeds() does not compile).
std::vector<wire::Activate> samples(std::type_identity<wire::Activate>) {
  wire::Activate tile;
  tile.handle = 0x0123456789abcdefULL;
  tile.rows = 64;
  tile.cols = 44;
  tile.targets.push_back(wire::Target{false, TaskKey{3, {-7, 0, 2147483647}}, 2, {}});
  tile.targets.push_back(wire::Target{true, {}, 0, TileIndex{65535, 4, 0}});
  tile.targets.push_back(wire::Target{false, TaskKey{65534, {1, 2, 3}}, 255, {}});
  wire::Activate same_host = tile;
  same_host.address = 0x7ffe00001000;
  same_host.targets.resize(1);
  wire::Activate carried;  // a 2 x 3 tile in the activation itself
  carried.rows = 2;
  carried.cols = 3;
  carried.targets = {tile.targets[0], tile.targets[1]};
  for (int i = 0; i < 2 * 3 * 8; ++i) carried.tile_bytes.push_back(static_cast<std::byte>(0xA0 + i));
  // With message logging between teams each names its producer and version (after the
  // targets, before a carried tile): a receiver drops a copy it already holds.
  wire::Activate named = tile;
  named.producer = wire::Producer{TaskKey{4, {0, -3, 2147483647}}, 1, 7};
  wire::Activate carried_named = carried;
  carried_named.producer = wire::Producer{TaskKey{0, {1, 1, 0}}, 0, 4294967295U};
  wire::Activate token;  // a control token, named
  token.targets = {tile.targets[2]};
  token.producer = wire::Producer{TaskKey{65534, {5, 6, 7}}, 255, 1};
  return {wire::Activate{}, tile, same_host, carried, named, carried_named, token};
}
std::vector<wire::Fetch> samples(std::type_identity<wire::Fetch>) {
  return {wire::Fetch{std::numeric_limits<std::uint64_t>::max(), 31999}};
}
std::vector<wire::CollectionFetch> samples(std::type_identity<wire::CollectionFetch>) {
  return {wire::CollectionFetch{TileIndex{2, 17, 3}, 100},
          wire::CollectionFetch{TileIndex{1, 2, 3}, wire::kWhereIsTag}};
}
std::vector<wire::StealRequest> samples(std::type_identity<wire::StealRequest>) {
  return {wire::StealRequest{3, 77, 5, 2, 1, 1234567890123ULL, 4.5e-6, 1.25e-12}};
}
std::vector<wire::StealReply> samples(std::type_identity<wire::StealReply>) {
  wire::StealReply partial;
  partial.request_id = 9;
  partial.final = false;
  partial.hops = 1;
  partial.tasks.push_back(
      {TaskKey{2, {1, 2, 3}},
       {{0, 11, 0, 64, 32}, {1, 0, 0, 0, 0}, {2, 12, 0x7f0012345678, 64, 64}}});
  partial.tasks.push_back({TaskKey{0, {7, -1, 0}}, {}});
  wire::StealReply empty_final;
  empty_final.request_id = 4;
  empty_final.partial_replies = 3;
  empty_final.hops = 2;
  return {partial, empty_final};
}
std::vector<wire::Progress> samples(std::type_identity<wire::Progress>) {
  return {wire::Progress{123456789, false}, wire::Progress{7, true}};
}
std::vector<wire::IterationDone> samples(std::type_identity<wire::IterationDone>) {
  return {wire::IterationDone{}};
}
std::vector<wire::Fetched> samples(std::type_identity<wire::Fetched>) {
  return {wire::Fetched{42}};
}
std::vector<wire::CollectionTileAt> samples(std::type_identity<wire::CollectionTileAt>) {
  return {wire::CollectionTileAt{TileIndex{1, 2, 3}, 9, 0x7f0000000040, 32, 16}};
}
std::vector<wire::StealInvitation> samples(std::type_identity<wire::StealInvitation>) {
  return {wire::StealInvitation{17}};
}
std::vector<wire::AlreadyHeld> samples(std::type_identity<wire::AlreadyHeld>) {
  return {wire::AlreadyHeld{1}, wire::AlreadyHeld{std::numeric_limits<std::uint64_t>::max()}};
}

std::vector<wire::Message> one_of_each() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    std::vector<wire::Message> all;
    const auto append = [&all](auto messages) {
      for (auto& m : messages) all.emplace_back(std::move(m));
    };
    (append(samples(std::type_identity<std::variant_alternative_t<I, wire::Message>>{})), ...);
    return all;
  }(std::make_index_sequence<std::variant_size_v<wire::Message>>{});
}

fuzz::Bytes to_bytes(const std::vector<std::byte>& bytes) {
  fuzz::Bytes out(bytes.size());
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// True when b and e differ nowhere but in the padding of the collection targets of an
// Activate that b holds (b was accepted, so its layout is sound).
bool differs_in_padding_only(std::span<const std::uint8_t> b, const fuzz::Bytes& e) {
  if (b.size() != e.size()) return false;
  const bool activate =
      b.size() > kTypeOffset &&
      b[kTypeOffset] == static_cast<std::uint8_t>(wire::MessageType::activate);
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (b[i] == e[i]) continue;
    if (!activate || i < kActivateTargetsOffset) return false;
    const std::size_t target = kActivateTargetsOffset +
                               (i - kActivateTargetsOffset) / kTargetBytes * kTargetBytes;
    std::uint16_t marker = 0;
    std::memcpy(&marker, b.data() + target, 2);
    if (marker != kCollectionMarker || i != target + kTargetSlotOffset) return false;
  }
  return true;
}

}  // namespace

namespace bellows::fuzz {

std::vector<Bytes> seeds() {
  std::vector<Bytes> out;
  for (const auto& message : one_of_each()) {
    const auto bytes = wire::encode(message);
    std::string error;
    if (!wire::decode(bytes, error)) {
      violated("every sample of wire_fuzz_target.cpp decodes", to_bytes(bytes), error);
    }
    out.push_back(to_bytes(bytes));
  }
  return out;
}

std::vector<LengthField> length_fields(std::span<const std::uint8_t> input) {
  if (input.size() <= kTypeOffset) return {};
  std::vector<LengthField> fields;
  const auto type = static_cast<wire::MessageType>(input[kTypeOffset]);
  const auto after = [&](std::size_t offset) {
    return input.size() > offset ? input.size() - offset : 0;
  };
  if (type == wire::MessageType::activate && input.size() >= kActivateTargetsOffset) {
    fields.push_back({kActivateCountOffset, 4, after(kActivateTargetsOffset) / kTargetBytes});
  } else if (type == wire::MessageType::steal_reply &&
             input.size() >= kStealReplyCountOffset + 4) {
    const std::size_t tasks = kStealReplyCountOffset + 4;
    fields.push_back({kStealReplyCountOffset, 4, after(tasks) / kStolenTaskBytes});
    // The input count of the first task.
    if (input.size() >= tasks + kStolenTaskBytes) {
      fields.push_back({tasks + kStolenTaskBytes - 1, 1,
                        after(tasks + kStolenTaskBytes) / kStolenInputBytes});
    }
  }
  return fields;
}

}  // namespace bellows::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  std::string error;
  const std::optional<wire::Message> message = wire::decode(std::as_bytes(input), error);
  if (!message) {
    if (error.empty()) fuzz::violated("a refusal names what is wrong", input);
    fuzz::last_outcome = fuzz::Outcome::refused;
    fuzz::last_error = std::move(error);
    return 0;
  }
  if (!error.empty()) {
    fuzz::violated("an accepted message comes without an error text", input, error);
  }
  const auto encoded = wire::encode(*message);
  std::string error_again;
  const std::optional<wire::Message> again = wire::decode(encoded, error_again);
  if (!again || !(*again == *message)) {
    fuzz::violated("an accepted message, encoded again, decodes to the same message", input,
                   "encoded again: " + fuzz::hex(to_bytes(encoded)) + " (" + error_again + ")");
  }
  if (wire::encode(*again) != encoded) {
    fuzz::violated("the encoding of an accepted message encodes back to itself", input,
                   "encoded again: " + fuzz::hex(to_bytes(encoded)));
  }
  if (!differs_in_padding_only(input, to_bytes(encoded))) {
    fuzz::violated("an accepted message encodes back to its bytes, but for padding", input,
                   "encoded again: " + fuzz::hex(to_bytes(encoded)));
  }
  fuzz::last_outcome = fuzz::Outcome::accepted;
  fuzz::last_error.clear();
  return 0;
}
