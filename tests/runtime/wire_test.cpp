// Control messages: encode/decode round trips and every refusal of decode.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "wire.hpp"

namespace wire = bellows::runtime::wire;
using bellows::runtime::TaskKey;
using bellows::runtime::TileIndex;

namespace {

constexpr std::size_t kHeaderBytes = 4;
// handle, address, rows, cols, flags (a carried tile, a producer), target count
constexpr std::size_t kActivateFixedBytes = kHeaderBytes + 8 + 8 + 4 + 4 + 1 + 4;
constexpr std::size_t kActivateFlagOffset = kActivateFixedBytes - 5;
constexpr std::size_t kTargetBytes = 15;
constexpr std::size_t kFetchBytes = kHeaderBytes + 8 + 4;
constexpr std::size_t kCollectionFetchBytes = kHeaderBytes + 2 + 4 + 4 + 4;

wire::Target task_target(std::uint16_t cls, int a, int b, int c, std::uint8_t slot) {
  wire::Target t;
  t.consumer = TaskKey{cls, {a, b, c}};
  t.slot = slot;
  return t;
}

wire::Target collection_target(std::uint16_t coll, int m, int n) {
  wire::Target t;
  t.to_collection = true;
  t.tile = TileIndex{coll, m, n};
  return t;
}

std::optional<wire::Message> round_trip(const wire::Message& in) {
  const auto bytes = wire::encode(in);
  std::string error;
  auto out = wire::decode(bytes, error);
  EXPECT_TRUE(out.has_value()) << error;
  EXPECT_TRUE(error.empty()) << error;
  return out;
}

std::string decode_error(const std::vector<std::byte>& bytes) {
  std::string error;
  const auto out = wire::decode(bytes, error);
  EXPECT_FALSE(out.has_value()) << "decode accepted " << bytes.size() << " bytes";
  return error;
}

std::vector<std::byte> header(std::uint16_t magic, std::uint8_t version, std::uint8_t type) {
  std::vector<std::byte> b(4);
  std::memcpy(b.data(), &magic, 2);
  b[2] = std::byte{version};
  b[3] = std::byte{type};
  return b;
}

template <typename T>
void append(std::vector<std::byte>& b, T value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  b.insert(b.end(), p, p + sizeof(T));
}

}  // namespace

TEST(Wire, ActivateWithTaskTargetsRoundTrips) {
  wire::Activate a;
  a.handle = 0x0123456789abcdefULL;
  a.rows = 64;
  a.cols = 44;
  a.targets = {task_target(0, 1, 2, 3, 2), task_target(3, -7, 0, 2147483647, 255),
               task_target(65534, 0, 0, 0, 0)};
  const auto bytes = wire::encode(a);
  EXPECT_EQ(bytes.size(), kActivateFixedBytes + 3 * kTargetBytes);
  const auto out = round_trip(a);
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::Activate>(*out));
  const auto& b = std::get<wire::Activate>(*out);
  EXPECT_EQ(b, a);
  EXPECT_EQ(b.handle, 0x0123456789abcdefULL);
  ASSERT_EQ(b.targets.size(), 3U);
  EXPECT_EQ(b.targets[1].consumer.index[0], -7);
  EXPECT_EQ(b.targets[1].consumer.index[2], 2147483647);
  EXPECT_EQ(b.targets[1].slot, 255);
  EXPECT_FALSE(b.targets[2].to_collection);
  EXPECT_EQ(b.targets[2].consumer.task_class, 65534);
}

TEST(Wire, ActivateWithCollectionTargetsRoundTrips) {
  wire::Activate a;
  a.handle = 9;
  a.rows = 30;
  a.cols = 64;
  a.targets = {collection_target(1, 4, 0), task_target(2, 4, 1, 0, 1),
               collection_target(65534, 123456, 7)};
  const auto out = round_trip(a);
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::Activate>(*out));
  const auto& b = std::get<wire::Activate>(*out);
  EXPECT_EQ(b, a);
  ASSERT_EQ(b.targets.size(), 3U);
  EXPECT_TRUE(b.targets[0].to_collection);
  EXPECT_EQ(b.targets[0].tile, (TileIndex{1, 4, 0}));
  EXPECT_FALSE(b.targets[1].to_collection);
  EXPECT_TRUE(b.targets[2].to_collection);
  EXPECT_EQ(b.targets[2].tile, (TileIndex{65534, 123456, 7}));
}

TEST(Wire, ControlActivationWithoutTargetsRoundTrips) {
  wire::Activate a;  // rows == 0: a control token
  const auto bytes = wire::encode(a);
  EXPECT_EQ(bytes.size(), kActivateFixedBytes);
  const auto out = round_trip(a);
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::Activate>(*out));
  EXPECT_EQ(std::get<wire::Activate>(*out), a);
  EXPECT_TRUE(std::get<wire::Activate>(*out).targets.empty());
}

TEST(Wire, FetchRoundTrips) {
  const wire::Fetch f{std::numeric_limits<std::uint64_t>::max(), 31999};
  const auto bytes = wire::encode(f);
  EXPECT_EQ(bytes.size(), kFetchBytes);
  const auto out = round_trip(f);
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::Fetch>(*out));
  EXPECT_EQ(std::get<wire::Fetch>(*out), f);
}

TEST(Wire, CollectionFetchRoundTrips) {
  const wire::CollectionFetch c{TileIndex{2, 17, 3}, 100};
  const auto bytes = wire::encode(c);
  EXPECT_EQ(bytes.size(), kCollectionFetchBytes);
  const auto out = round_trip(c);
  ASSERT_TRUE(out.has_value());
  ASSERT_TRUE(std::holds_alternative<wire::CollectionFetch>(*out));
  EXPECT_EQ(std::get<wire::CollectionFetch>(*out), c);
  EXPECT_EQ(std::get<wire::CollectionFetch>(*out).tile.m, 17);
}

TEST(Wire, HeaderCarriesMagicVersionAndType) {
  const auto bytes = wire::encode(wire::Fetch{1, 2});
  std::uint16_t magic = 0;
  std::memcpy(&magic, bytes.data(), 2);
  EXPECT_EQ(magic, wire::kMagic);
  EXPECT_EQ(static_cast<int>(bytes[2]), wire::kVersion);
  EXPECT_EQ(static_cast<int>(bytes[3]), static_cast<int>(wire::MessageType::fetch));
  EXPECT_EQ(static_cast<int>(wire::encode(wire::Activate{})[3]),
            static_cast<int>(wire::MessageType::activate));
  EXPECT_EQ(static_cast<int>(wire::encode(wire::CollectionFetch{})[3]),
            static_cast<int>(wire::MessageType::collection_fetch));
}

TEST(Wire, RefusesShortHeader) {
  EXPECT_EQ(decode_error({}), "message of 0 bytes is shorter than the header");
  auto bytes = wire::encode(wire::Fetch{1, 2});
  bytes.resize(3);
  EXPECT_EQ(decode_error(bytes), "message of 3 bytes is shorter than the header");
}

TEST(Wire, RefusesBadMagic) {
  auto bytes = header(0x1234, wire::kVersion, 2);
  append(bytes, std::uint64_t{1});
  append(bytes, std::int32_t{2});
  EXPECT_EQ(decode_error(bytes), "bad magic 0x1234");
  auto swapped = wire::encode(wire::Fetch{1, 2});
  std::swap(swapped[0], swapped[1]);
  EXPECT_EQ(decode_error(swapped), "bad magic 0x11be");
}

TEST(Wire, RefusesOtherProtocolVersion) {
  auto bytes = wire::encode(wire::Fetch{1, 2});
  bytes[2] = std::byte{6};  // before activations named their producers
  const auto error = decode_error(bytes);
  EXPECT_NE(error.find("version"), std::string::npos) << error;
  EXPECT_EQ(error, "unsupported protocol version 6 (this build speaks 7)");
  bytes[2] = std::byte{0};
  EXPECT_EQ(decode_error(bytes), "unsupported protocol version 0 (this build speaks 7)");
}

TEST(Wire, RefusesUnknownType) {
  EXPECT_EQ(decode_error(header(wire::kMagic, wire::kVersion, 0)), "unknown message type 0");
  EXPECT_EQ(decode_error(header(wire::kMagic, wire::kVersion, 12)), "unknown message type 12");
  auto bytes = wire::encode(wire::Fetch{1, 2});
  bytes[3] = std::byte{200};
  EXPECT_EQ(decode_error(bytes), "unknown message type 200");
}

TEST(Wire, RefusesTruncatedActivate) {
  wire::Activate a;
  a.handle = 5;
  a.rows = a.cols = 8;
  a.targets = {task_target(1, 2, 3, 4, 0)};
  const auto full = wire::encode(a);
  for (std::size_t size = kHeaderBytes; size < kActivateFixedBytes; ++size) {
    const std::vector<std::byte> cut(full.begin(), full.begin() + static_cast<long>(size));
    EXPECT_EQ(decode_error(cut), "truncated activate message") << size << " bytes";
  }
}

TEST(Wire, RefusesActivateWhoseTargetCountDoesNotMatch) {
  wire::Activate a;
  a.handle = 5;
  a.rows = a.cols = 8;
  a.targets = {task_target(1, 2, 3, 4, 0), collection_target(0, 1, 1)};
  auto bytes = wire::encode(a);
  bytes.pop_back();  // one byte short of the second target
  EXPECT_EQ(decode_error(bytes), "activate announces 2 targets but carries 29 bytes of them");
  bytes = wire::encode(a);
  bytes.push_back(std::byte{0});
  EXPECT_EQ(decode_error(bytes), "activate announces 2 targets but carries 31 bytes of them");
  bytes = wire::encode(a);
  const std::uint32_t three = 3;
  std::memcpy(bytes.data() + kActivateFixedBytes - 4, &three, 4);
  EXPECT_EQ(decode_error(bytes), "activate announces 3 targets but carries 30 bytes of them");
  // A huge announced count must not be trusted (no allocation of 4 billion targets).
  const std::uint32_t huge = 0xFFFFFFFFU;
  std::memcpy(bytes.data() + kActivateFixedBytes - 4, &huge, 4);
  EXPECT_EQ(decode_error(bytes),
            "activate announces 4294967295 targets but carries 30 bytes of them");
}

// Found by the fuzz target (tests/fuzz/wire_fuzz_target.cpp): the 4-byte collection id of a
// collection target was cut down to a CollectionId, so 0xfe00ffff named collection 0xffff.
TEST(Wire, RefusesActivateTargetWithACollectionIdOutOfRange) {
  wire::Activate a;
  a.rows = a.cols = 8;
  a.targets = {task_target(1, 2, 3, 4, 0), collection_target(65535, 1, 1)};
  EXPECT_EQ(round_trip(a), wire::Message{a});
  auto bytes = wire::encode(a);
  // The collection id follows the second target's marker.
  const std::size_t id_at = kActivateFixedBytes + kTargetBytes + 2;
  const std::int32_t past_the_last = 65536;
  std::memcpy(bytes.data() + id_at, &past_the_last, 4);
  EXPECT_EQ(decode_error(bytes),
            "activate target 1 names collection 65536, not a collection id (0 to 65535)");
  const std::int32_t fuzzed = static_cast<std::int32_t>(0xfe00ffffU);
  std::memcpy(bytes.data() + id_at, &fuzzed, 4);
  EXPECT_EQ(decode_error(bytes),
            "activate target 1 names collection -33488897, not a collection id (0 to 65535)");
}

TEST(Wire, RefusesActivateWithNegativeShape) {
  wire::Activate a;
  a.rows = -1;
  a.cols = 4;
  EXPECT_EQ(decode_error(wire::encode(a)), "activate with negative tile shape");
  a.rows = 4;
  a.cols = -4;
  EXPECT_EQ(decode_error(wire::encode(a)), "activate with negative tile shape");
}

TEST(Wire, RefusesTruncatedOrOverlongFetch) {
  const auto full = wire::encode(wire::Fetch{77, 123});
  for (std::size_t size = kHeaderBytes; size < kFetchBytes; ++size) {
    const std::vector<std::byte> cut(full.begin(), full.begin() + static_cast<long>(size));
    EXPECT_EQ(decode_error(cut), "truncated fetch message") << size << " bytes";
  }
  auto longer = full;
  longer.push_back(std::byte{1});
  EXPECT_EQ(decode_error(longer), "fetch message has trailing bytes");
}

TEST(Wire, RefusesTruncatedOrOverlongCollectionFetch) {
  const auto full = wire::encode(wire::CollectionFetch{TileIndex{1, 2, 3}, 104});
  for (std::size_t size = kHeaderBytes; size < kCollectionFetchBytes; ++size) {
    const std::vector<std::byte> cut(full.begin(), full.begin() + static_cast<long>(size));
    EXPECT_EQ(decode_error(cut), "truncated collection_fetch message") << size << " bytes";
  }
  auto longer = full;
  longer.push_back(std::byte{1});
  EXPECT_EQ(decode_error(longer), "collection_fetch message has trailing bytes");
}

// ---------------------------------------------------------------- work stealing

TEST(Wire, StealRequestRoundTrips) {
  const wire::StealRequest q{3, 77, 5, 2, 1, 1234567890123ULL, 4.5e-6, 1.25e-12};
  EXPECT_EQ(round_trip(q), wire::Message{q});
}

TEST(Wire, StealReplyWithTasksRoundTrips) {
  wire::StealReply reply;
  reply.request_id = 9;
  reply.final = false;
  reply.partial_replies = 0;
  reply.tasks.push_back({TaskKey{2, {1, 2, 3}},
                         {{0, 11, 0, 64, 32}, {1, 0, 0, 0, 0}, {2, 12, 0x7f0012345678, 64, 64}}});
  reply.tasks.push_back({TaskKey{0, {7, -1, 0}}, {}});
  EXPECT_EQ(round_trip(reply), wire::Message{reply});
}

TEST(Wire, EmptyFinalStealReplyRoundTrips) {
  wire::StealReply reply;
  reply.request_id = 4;
  reply.partial_replies = 3;
  reply.hops = 2;
  EXPECT_EQ(round_trip(reply), wire::Message{reply});
}

TEST(Wire, ProgressAndIterationDoneRoundTrip) {
  EXPECT_EQ(round_trip(wire::Progress{123456789}), wire::Message{wire::Progress{123456789}});
  const wire::Progress retiring{7, true};
  EXPECT_EQ(round_trip(retiring), wire::Message{retiring});
  EXPECT_EQ(round_trip(wire::IterationDone{}), wire::Message{wire::IterationDone{}});
}

TEST(Wire, StealInvitationRoundTripsAndNamesWhatIsWrong) {
  EXPECT_EQ(round_trip(wire::StealInvitation{17}), wire::Message{wire::StealInvitation{17}});
  EXPECT_EQ(decode_error(wire::encode(wire::StealInvitation{0})),
            "steal_invitation for iteration 0 (iterations count from 1)");
  auto bytes = wire::encode(wire::StealInvitation{3});
  bytes.pop_back();
  EXPECT_NE(decode_error(bytes).find("steal_invitation"), std::string::npos) << decode_error(bytes);
  bytes = wire::encode(wire::StealInvitation{3});
  bytes.push_back(std::byte{0});
  EXPECT_EQ(decode_error(bytes), "steal_invitation message has trailing bytes");
}

TEST(Wire, RefusesBadRetiredFlagAndRetiringWithoutTasks) {
  auto bytes = wire::encode(wire::Progress{3, true});
  bytes.back() = std::byte{2};  // the retired flag follows the count
  EXPECT_EQ(decode_error(bytes), "progress with retired flag 2");
  EXPECT_EQ(decode_error(wire::encode(wire::Progress{0, true})),
            "progress retires with no completed task");
  auto truncated = wire::encode(wire::Progress{3, false});
  truncated.pop_back();
  EXPECT_EQ(decode_error(truncated), "truncated progress message");
  auto trailing = wire::encode(wire::Progress{3, false});
  trailing.push_back(std::byte{0});
  EXPECT_EQ(decode_error(trailing), "progress message has trailing bytes");
}

TEST(Wire, RefusesStealRequestWithoutThiefOrWants) {
  EXPECT_EQ(decode_error(wire::encode(wire::StealRequest{-1, 1, 1, 0, 0})),
            "steal_request with thief -1 and wanted 1");
  EXPECT_EQ(decode_error(wire::encode(wire::StealRequest{0, 1, 0, 0, 0})),
            "steal_request with thief 0 and wanted 0");
  auto bytes = wire::encode(wire::StealRequest{0, 1, 1, 0, 0});
  bytes.pop_back();
  EXPECT_EQ(decode_error(bytes), "truncated steal_request message");
}

TEST(Wire, RefusesStealRequestWithABadThiefTaskTime) {
  EXPECT_EQ(decode_error(wire::encode(wire::StealRequest{2, 1, 1, 0, 0, 0, -1e-6, 1e-12})),
            "steal_request with thief task time -1e-06 s + 1e-12 s per flop");
  EXPECT_EQ(decode_error(wire::encode(
                wire::StealRequest{2, 1, 1, 0, 0, 0, 0.0, std::numeric_limits<double>::quiet_NaN()})),
            "steal_request with thief task time 0 s + nan s per flop");
  EXPECT_EQ(decode_error(wire::encode(
                wire::StealRequest{2, 1, 1, 0, 0, 0, std::numeric_limits<double>::infinity(), 0.0})),
            "steal_request with thief task time inf s + 0 s per flop");
}

TEST(Wire, RefusesStealReplyWithMoreTasksThanBytes) {
  wire::StealReply reply;
  reply.tasks.push_back({TaskKey{1, {1, 1, 1}}, {{0, 5, 0, 8, 8}}});
  auto bytes = wire::encode(reply);
  // The task count sits after header (4), request id (4), final (1), partial count (2),
  // hops (1).
  bytes[12] = std::byte{0xFF};
  EXPECT_EQ(decode_error(bytes), "steal_reply announces 255 tasks but carries 40 bytes of them");
}

TEST(Wire, RefusesTruncatedStealReplyAndBadFinalFlag) {
  wire::StealReply reply;
  reply.tasks.push_back({TaskKey{1, {1, 1, 1}}, {{0, 5, 0, 8, 8}}});
  auto bytes = wire::encode(reply);
  auto truncated = bytes;
  truncated.resize(truncated.size() - 3);
  EXPECT_EQ(decode_error(truncated), "truncated steal_reply message");
  auto trailing = bytes;
  trailing.push_back(std::byte{0});
  EXPECT_EQ(decode_error(trailing), "steal_reply message has trailing bytes");
  bytes[8] = std::byte{7};
  EXPECT_EQ(decode_error(bytes), "steal_reply with final flag 7");
}

// ---------------------------------------------------------------- same-host reads

TEST(Wire, SameHostActivateCarriesTheAddress) {
  wire::Activate a;
  a.handle = 5;
  a.address = 0x7ffe00001000;
  a.rows = 16;
  a.cols = 8;
  a.targets.push_back(wire::Target{false, TaskKey{1, {2, 3, 4}}, 1, {}});
  EXPECT_EQ(round_trip(a), wire::Message{a});
}

TEST(Wire, FetchedAndCollectionTileAtRoundTrip) {
  EXPECT_EQ(round_trip(wire::Fetched{42}), wire::Message{wire::Fetched{42}});
  const wire::CollectionTileAt at{TileIndex{1, 2, 3}, 9, 0x7f0000000040, 32, 16};
  EXPECT_EQ(round_trip(at), wire::Message{at});
  const wire::CollectionFetch where{TileIndex{1, 2, 3}, wire::kWhereIsTag};
  EXPECT_EQ(round_trip(where), wire::Message{where});
}

TEST(Wire, RefusesCollectionTileAtWithoutATile) {
  EXPECT_EQ(decode_error(wire::encode(wire::CollectionTileAt{TileIndex{1, 2, 3}, 9, 0, 32, 16})),
            "collection_tile_at without a tile (32 x 16 at address 0)");
  EXPECT_EQ(decode_error(wire::encode(wire::CollectionTileAt{TileIndex{1, 2, 3}, 9, 64, 0, 16})),
            "collection_tile_at without a tile (0 x 16 at address 64)");
  auto bytes = wire::encode(wire::Fetched{1});
  bytes.push_back(std::byte{0});
  EXPECT_EQ(decode_error(bytes), "fetched message has trailing bytes");
}

// ---------------------------------------------------------------- tiles carried in activations

namespace {

/// An activation that carries a rows x cols tile whose bytes count up from `first`.
wire::Activate carrying(int rows, int cols, std::uint8_t first) {
  wire::Activate a;
  a.rows = rows;
  a.cols = cols;
  a.targets = {task_target(1, 2, 3, 4, 0), collection_target(0, 5, 6)};
  a.tile_bytes.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(double));
  for (std::size_t i = 0; i < a.tile_bytes.size(); ++i) {
    a.tile_bytes[i] = static_cast<std::byte>(first + i);
  }
  return a;
}

}  // namespace

TEST(Wire, ActivateCarryingItsTileRoundTripsBitForBit) {
  auto a = carrying(4, 3, 7);
  // A NaN with a payload and a negative zero: bytes, not values, travel.
  const std::uint64_t nan_bits = 0x7ff8dead0000beefULL;
  const double negative_zero = -0.0;
  std::memcpy(a.tile_bytes.data(), &nan_bits, 8);
  std::memcpy(a.tile_bytes.data() + 8, &negative_zero, 8);
  const auto bytes = wire::encode(a);
  EXPECT_EQ(bytes.size(), kActivateFixedBytes + 2 * kTargetBytes + 4 * 3 * 8);
  EXPECT_EQ(bytes[kActivateFlagOffset], std::byte{1});
  const auto out = round_trip(a);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(std::get<wire::Activate>(*out), a);
  EXPECT_EQ(std::memcmp(std::get<wire::Activate>(*out).tile_bytes.data(), &nan_bits, 8), 0);
  // Without a tile the flag is 0 and nothing follows the targets.
  wire::Activate plain = a;
  plain.tile_bytes.clear();
  plain.handle = 9;
  const auto plain_bytes = wire::encode(plain);
  EXPECT_EQ(plain_bytes.size(), kActivateFixedBytes + 2 * kTargetBytes);
  EXPECT_EQ(plain_bytes[kActivateFlagOffset], std::byte{0});
}

TEST(Wire, RefusesACarriedTileOfTheWrongSize) {
  auto bytes = wire::encode(carrying(4, 3, 0));
  bytes.pop_back();
  EXPECT_EQ(decode_error(bytes),
            "activate announces 2 targets and a tile of 96 bytes but carries 125 bytes of them");
  bytes = wire::encode(carrying(4, 3, 0));
  bytes.push_back(std::byte{0});
  EXPECT_EQ(decode_error(bytes),
            "activate announces 2 targets and a tile of 96 bytes but carries 127 bytes of them");
  // A shape far larger than the message must not be trusted (no allocation for it).
  bytes = wire::encode(carrying(4, 3, 0));
  const std::int32_t huge = std::numeric_limits<std::int32_t>::max();
  std::memcpy(bytes.data() + kActivateFlagOffset - 8, &huge, 4);
  std::memcpy(bytes.data() + kActivateFlagOffset - 4, &huge, 4);
  EXPECT_EQ(decode_error(bytes),
            "activate carries a tile of 2147483647 x 2147483647 doubles in 126 bytes");
}

TEST(Wire, RefusesACarriedTileWithAHandleAnAddressOrNoElementsAndABadFlag) {
  auto a = carrying(2, 2, 0);
  a.handle = 3;
  EXPECT_EQ(decode_error(wire::encode(a)),
            "activate carries a tile of 2 x 2 with handle 3 and address 0 (a carried tile has "
            "elements, and neither handle nor address)");
  a = carrying(2, 2, 0);
  a.address = 64;
  EXPECT_EQ(decode_error(wire::encode(a)),
            "activate carries a tile of 2 x 2 with handle 0 and address 64 (a carried tile has "
            "elements, and neither handle nor address)");
  auto bytes = wire::encode(carrying(2, 2, 0));
  const std::int32_t zero = 0;
  std::memcpy(bytes.data() + kActivateFlagOffset - 8, &zero, 4);
  EXPECT_EQ(decode_error(bytes),
            "activate carries a tile of 0 x 2 with handle 0 and address 0 (a carried tile has "
            "elements, and neither handle nor address)");
  bytes = wire::encode(carrying(2, 2, 0));
  bytes[kActivateFlagOffset] = std::byte{4};
  EXPECT_EQ(decode_error(bytes), "activate with flags 4 (known: 1, a carried tile; 2, its producer)");
}

// ---------------------------------------------------------------- producers and versions

TEST(Wire, ActivateNamingItsProducerRoundTripsAndAddsNineteenBytes) {
  // The bytes that name a message (team_replay.hpp's MessageVersion): what it costs is
  // measured here, and nothing when logging between teams is off (no producer).
  EXPECT_EQ(wire::kProducerBytes, 19U);
  for (wire::Activate a : {carrying(4, 3, 7), wire::Activate{}}) {
    if (a.tile_bytes.empty()) {
      a.handle = 5;
      a.rows = 96;
      a.cols = 96;
      a.targets = {task_target(2, 3, 1, 0, 1)};
    }
    const auto without = wire::encode(a);
    a.producer = wire::Producer{TaskKey{3, {-1, 7, 2147483647}}, 2, 4000000000U};
    const auto with = wire::encode(a);
    EXPECT_EQ(with.size(), without.size() + wire::kProducerBytes);
    EXPECT_EQ(with[kActivateFlagOffset], std::byte{static_cast<unsigned char>(a.tile_bytes.empty() ? 2 : 3)});
    EXPECT_EQ(round_trip(a), wire::Message{a});
  }
  // A control token names its producer too: it can be replayed like a tile.
  wire::Activate token;
  token.targets = {task_target(1, 0, 0, 0, 3)};
  token.producer = wire::Producer{TaskKey{0, {1, 2, 3}}, 0, 1};
  EXPECT_EQ(round_trip(token), wire::Message{token});
}

TEST(Wire, RefusesAProducerOfNoTaskClassOrIterationAndATruncatedOne) {
  wire::Activate a;
  a.targets = {task_target(1, 0, 0, 0, 0)};
  a.producer = wire::Producer{TaskKey{1, {0, 0, 0}}, 0, 0};
  EXPECT_EQ(decode_error(wire::encode(a)),
            "activate names its producer as task class 1 in iteration 0 (a task class is below 65535, "
            "iterations count from 1)");
  a.producer = wire::Producer{TaskKey{0xFFFF, {0, 0, 0}}, 0, 3};
  EXPECT_EQ(decode_error(wire::encode(a)),
            "activate names its producer as task class 65535 in iteration 3 (a task class is below 65535, "
            "iterations count from 1)");
  a.producer = wire::Producer{TaskKey{1, {0, 0, 0}}, 0, 3};
  auto bytes = wire::encode(a);
  bytes.pop_back();
  EXPECT_EQ(decode_error(bytes), "activate announces 1 targets, its producer but carries 33 bytes of them");
  // The flag without the producer's bytes.
  a.producer.reset();
  bytes = wire::encode(a);
  bytes[kActivateFlagOffset] = std::byte{2};
  EXPECT_EQ(decode_error(bytes), "activate announces 1 targets, its producer but carries 15 bytes of them");
}

TEST(Wire, AlreadyHeldRoundTripsAndNamesWhatIsWrong) {
  EXPECT_EQ(round_trip(wire::AlreadyHeld{77}), wire::Message{wire::AlreadyHeld{77}});
  EXPECT_EQ(wire::encode(wire::AlreadyHeld{77}).size(), kHeaderBytes + 8);
  EXPECT_EQ(decode_error(wire::encode(wire::AlreadyHeld{0})), "already_held for handle 0 (handles count from 1)");
  auto bytes = wire::encode(wire::AlreadyHeld{1});
  bytes.push_back(std::byte{0});
  EXPECT_EQ(decode_error(bytes), "already_held message has trailing bytes");
  bytes.resize(kHeaderBytes + 3);
  EXPECT_EQ(decode_error(bytes), "truncated already_held message");
}
