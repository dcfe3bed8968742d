// The mailbox of a pair of same-host ranks (mailbox_ring.hpp), over plain memory: records come
// out whole and in order, across the end of the ring, a full ring refuses without writing, and
// a record overwritten by mistake is refused with its position.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "mailbox_ring.hpp"

namespace br = bellows::runtime;

namespace {

constexpr std::size_t kCapacity = 256;

struct Memory {
  alignas(64) std::byte bytes[br::MailboxRing::kHeaderBytes + kCapacity] = {};
};

std::vector<std::byte> message_of(std::size_t size, int seed) {
  std::vector<std::byte> out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>((seed * 31 + static_cast<int>(i)) & 0xff);
  return out;
}

}  // namespace

TEST(MailboxRing, MessagesComeOutWholeAndInOrderAcrossTheEndOfTheRing) {
  Memory memory;
  br::MailboxRing writer(memory.bytes, kCapacity);
  br::MailboxRing reader(memory.bytes, kCapacity);
  std::vector<std::vector<std::byte>> out;
  // 37-byte messages take 48 bytes each: the sixth wraps around the end of the 256 bytes.
  for (int round = 0; round < 10; ++round) {
    for (int m = 0; m < 3; ++m) ASSERT_TRUE(writer.write(message_of(37, round * 3 + m)));
    out.clear();
    ASSERT_EQ(reader.read_all(out), 3U);
    for (int m = 0; m < 3; ++m) EXPECT_EQ(out[static_cast<std::size_t>(m)], message_of(37, round * 3 + m));
  }
  out.clear();
  EXPECT_EQ(reader.read_all(out), 0U) << "nothing new was written";
  ASSERT_TRUE(writer.write({}));
  ASSERT_EQ(reader.read_all(out), 1U);
  EXPECT_TRUE(out[0].empty()) << "an empty message is a message";
}

TEST(MailboxRing, AFullRingRefusesWithoutWritingAndTakesAgainOnceRead) {
  Memory memory;
  br::MailboxRing ring(memory.bytes, kCapacity);
  EXPECT_EQ(ring.largest_message(), kCapacity - 8);
  EXPECT_FALSE(ring.write(message_of(kCapacity, 0))) << "larger than the ring";
  ASSERT_TRUE(ring.write(message_of(120, 1)));  // 128 bytes
  ASSERT_TRUE(ring.write(message_of(100, 2)));  // 112 bytes: 16 left
  EXPECT_FALSE(ring.write(message_of(9, 3))) << "needs 24 bytes, 16 are free";
  ASSERT_TRUE(ring.write(message_of(8, 4)));    // exactly the 16 left
  std::vector<std::vector<std::byte>> out;
  ASSERT_EQ(ring.read_all(out), 3U);
  EXPECT_EQ(out[0], message_of(120, 1));
  EXPECT_EQ(out[1], message_of(100, 2));
  EXPECT_EQ(out[2], message_of(8, 4));
  EXPECT_TRUE(ring.write(message_of(kCapacity - 8, 5))) << "the empty ring takes its largest message";
  ring.drop_all();
  out.clear();
  EXPECT_EQ(ring.read_all(out), 0U) << "dropped messages are not read";
}

TEST(MailboxRing, AnOverwrittenLengthIsRefusedNamingWhere) {
  Memory memory;
  br::MailboxRing ring(memory.bytes, kCapacity);
  ASSERT_TRUE(ring.write(message_of(16, 1)));
  const std::uint64_t absurd = 1000;
  std::memcpy(memory.bytes + br::MailboxRing::kHeaderBytes, &absurd, sizeof absurd);
  std::vector<std::vector<std::byte>> out;
  try {
    ring.read_all(out);
    FAIL() << "an overwritten record was read";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "mailbox record at byte 0 claims 1000 bytes, but only 24 were written");
  }
}

TEST(MailboxRing, OneWriterThreadAndOneReaderThreadLoseNothing) {
  Memory memory;
  br::MailboxRing writer(memory.bytes, kCapacity);
  br::MailboxRing reader(memory.bytes, kCapacity);
  constexpr int kMessages = 20000;
  std::thread producer([&] {
    for (int m = 0; m < kMessages; ++m) {
      const auto message = message_of(1 + static_cast<std::size_t>(m % 50), m);
      while (!writer.write(message)) std::this_thread::yield();
    }
  });
  std::vector<std::vector<std::byte>> out;
  int next = 0, wrong = 0;
  while (next < kMessages) {
    out.clear();
    reader.read_all(out);
    for (const auto& message : out) {
      wrong += message != message_of(1 + static_cast<std::size_t>(next % 50), next) ? 1 : 0;
      ++next;
    }
    if (out.empty()) std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(next, kMessages);
}
