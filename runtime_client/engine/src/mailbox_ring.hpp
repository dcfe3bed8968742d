#pragma once
// A ring of byte records in memory two processes share: what one rank's workers write for a
// rank of the same host (the mailbox of the pair, same_host.hpp). One writer process and one
// reader process; inside the writer, callers serialise their writes themselves.
//
// Layout at `base` (kHeaderBytes, then the data): the write position (head) on one cache line,
// the read position (tail) on the next, both counting bytes from the start for ever; then
// `capacity` bytes of records, each a 64-bit length followed by the bytes, padded to 8. A record
// may wrap around the end. The writer publishes a record by storing head with release order; the
// reader frees it by storing tail with release order, so neither side ever sees a record half
// written or overwritten.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace bellows::runtime {

class MailboxRing {
 public:
  /// Bytes in front of the records: head and tail, a cache line each.
  static constexpr std::size_t kHeaderBytes = 128;
  /// Bytes a record of `message_bytes` takes in the ring.
  [[nodiscard]] static constexpr std::size_t record_bytes(std::size_t message_bytes) noexcept {
    return 8 + (message_bytes + 7) / 8 * 8;
  }

  /// Over `base` (kHeaderBytes + capacity bytes, zeroed once before either side uses it,
  /// 64-byte aligned). `capacity` must be a power of two and a multiple of 8.
  MailboxRing(std::byte* base, std::size_t capacity) noexcept;

  /// Writer: appends `message` and returns true, or returns false when the ring has no room
  /// for it now (nothing written). Not thread-safe among writers.
  bool write(std::span<const std::byte> message) noexcept;
  /// Reader: appends every record written so far to `out` (one vector each) and frees them.
  /// Returns how many it took. Throws std::runtime_error, naming the position, when a record's
  /// length runs past what was written (the ring was overwritten).
  std::size_t read_all(std::vector<std::vector<std::byte>>& out);
  /// Reader: frees every record written so far without reading it.
  void drop_all() noexcept;
  /// Reader: nothing written is left unread (an acquire load of the write position).
  [[nodiscard]] bool empty() const noexcept;
  /// The largest message that fits into the empty ring.
  [[nodiscard]] std::size_t largest_message() const noexcept { return capacity_ - 8; }

 private:
  void copy_in(std::uint64_t position, const void* from, std::size_t bytes) noexcept;
  void copy_out(std::uint64_t position, void* to, std::size_t bytes) const noexcept;

  std::uint64_t* head_;
  std::uint64_t* tail_;
  std::byte* data_;
  std::size_t capacity_;
};

}  // namespace bellows::runtime
