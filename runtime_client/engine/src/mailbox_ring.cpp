#include "mailbox_ring.hpp"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

namespace bellows::runtime {
namespace {

std::uint64_t load(std::uint64_t* word, std::memory_order order) noexcept {
  return std::atomic_ref<std::uint64_t>(*word).load(order);
}

void store(std::uint64_t* word, std::uint64_t value, std::memory_order order) noexcept {
  std::atomic_ref<std::uint64_t>(*word).store(value, order);
}

}  // namespace

MailboxRing::MailboxRing(std::byte* base, std::size_t capacity) noexcept
    : head_(reinterpret_cast<std::uint64_t*>(base)),
      tail_(reinterpret_cast<std::uint64_t*>(base + 64)),
      data_(base + kHeaderBytes),
      capacity_(capacity) {}

void MailboxRing::copy_in(std::uint64_t position, const void* from, std::size_t bytes) noexcept {
  const std::size_t at = static_cast<std::size_t>(position & (capacity_ - 1));
  const std::size_t first = bytes < capacity_ - at ? bytes : capacity_ - at;
  std::memcpy(data_ + at, from, first);
  std::memcpy(data_, static_cast<const std::byte*>(from) + first, bytes - first);
}

void MailboxRing::copy_out(std::uint64_t position, void* to, std::size_t bytes) const noexcept {
  const std::size_t at = static_cast<std::size_t>(position & (capacity_ - 1));
  const std::size_t first = bytes < capacity_ - at ? bytes : capacity_ - at;
  std::memcpy(to, data_ + at, first);
  std::memcpy(static_cast<std::byte*>(to) + first, data_, bytes - first);
}

bool MailboxRing::write(std::span<const std::byte> message) noexcept {
  const std::size_t needed = record_bytes(message.size());
  const std::uint64_t head = load(head_, std::memory_order_relaxed);  // only this side writes it
  const std::uint64_t tail = load(tail_, std::memory_order_acquire);
  if (needed > capacity_ - static_cast<std::size_t>(head - tail)) return false;
  const std::uint64_t length = message.size();
  copy_in(head, &length, sizeof length);
  copy_in(head + 8, message.data(), message.size());
  store(head_, head + needed, std::memory_order_release);
  return true;
}

std::size_t MailboxRing::read_all(std::vector<std::vector<std::byte>>& out) {
  std::uint64_t tail = load(tail_, std::memory_order_relaxed);  // only this side writes it
  const std::uint64_t head = load(head_, std::memory_order_acquire);
  std::size_t taken = 0;
  while (tail != head) {
    std::uint64_t length = 0;
    copy_out(tail, &length, sizeof length);
    if (record_bytes(static_cast<std::size_t>(length)) > head - tail) {
      store(tail_, tail, std::memory_order_release);
      throw std::runtime_error("mailbox record at byte " + std::to_string(tail) + " claims " +
                               std::to_string(length) + " bytes, but only " +
                               std::to_string(head - tail) + " were written");
    }
    auto& message = out.emplace_back(static_cast<std::size_t>(length));
    copy_out(tail + 8, message.data(), message.size());
    tail += record_bytes(static_cast<std::size_t>(length));
    ++taken;
  }
  store(tail_, tail, std::memory_order_release);
  return taken;
}

void MailboxRing::drop_all() noexcept {
  store(tail_, load(head_, std::memory_order_acquire), std::memory_order_release);
}

bool MailboxRing::empty() const noexcept {
  return load(head_, std::memory_order_acquire) == load(tail_, std::memory_order_relaxed);
}

}  // namespace bellows::runtime
