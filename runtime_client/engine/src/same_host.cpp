#include "same_host.hpp"

#include "sleeping_wait.hpp"
#include "watched_setup.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <linux/futex.h>
#include <random>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <thread>
#include <unistd.h>

namespace bellows::runtime {
namespace {

constexpr std::size_t kCacheLine = 64;  // one doorbell per line: no false sharing
constexpr std::size_t kHeaderBytes = kCacheLine;

long futex(void* word, int op, std::uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

std::uint64_t random_token() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

/// What a rank tells the others about itself.
struct Card {
  std::int64_t pid = 0;
  std::uint64_t probe_address = 0;
  std::uint64_t probe_value = 0;
  std::int32_t joined = 0;  ///< mapped the doorbell segment and found rank 0's token
  std::int32_t wanted = 0;  ///< the same-host transport is enabled on this rank
  char host[64] = {};       ///< the rank's host name (uname): ranks of one node share it
};

struct Announcement {
  char name[56] = {};
  std::uint64_t token = 0;
};

}  // namespace

std::string host_name() {
  utsname name{};
  if (::uname(&name) != 0) return {};
  return std::string(name.nodename, ::strnlen(name.nodename, sizeof name.nodename));
}

/// The probe's buffers, on the heap: when a member is lost its collectives are left to MPI,
/// which may still write into them, and they are kept until the process exits.
struct SameHost::ProbeBuffers {
  Announcement announcement;
  volatile std::uint64_t probe = 0;  ///< a peer reads it and must find `mine.probe_value`
  Card mine;
  std::vector<Card> cards;
  std::vector<std::uint8_t> can_read_row;
  std::vector<std::uint8_t> matrix;
  MPI_Request request = MPI_REQUEST_NULL;
};

void SameHost::complete(int posted, PeerWatch* watch, std::unique_ptr<ProbeBuffers>& buffers, const char* call) {
  if (watch == nullptr) {
    wait_asleep(buffers->request);
    return;
  }
  std::vector<int> lost = completed_watched(posted, buffers->request, *watch, call);
  if (lost.empty()) return;
  // Given up: nothing of the probe is left behind, and its buffers stay while MPI may write.
  if (buffers->request != MPI_REQUEST_NULL) keep_until_exit(std::move(buffers));
  if (segment_ != nullptr) ::munmap(segment_, segment_bytes_);
  segment_ = nullptr;
  if (created_segment_[0] != '\0') ::shm_unlink(created_segment_);
  throw MembersLost(std::move(lost), std::string("the same-host probe's ") + call);
}

SameHost::SameHost(MPI_Comm comm, bool enabled, PeerWatch* watch) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  doorbell_peer_.assign(static_cast<std::size_t>(size_), 0);
  read_peer_.assign(static_cast<std::size_t>(size_), 0);
  pids_.assign(static_cast<std::size_t>(size_), 0);
  // Three collectives, each waited for asleep (ranks arrive at different times, e.g.
  // new ranks after an expand, and MPICH's blocking collectives spin), under `watch` when
  // given: the segment's name, every rank's card (which also tells rank 0 that all have
  // tried to open the segment), and who can read whom.
  //
  // The doorbell segment: created by rank 0, opened by every rank that sees the same
  // /dev/shm (its host), unlinked as soon as all have tried, so nothing is left behind.
  segment_bytes_ = kHeaderBytes + kCacheLine * static_cast<std::size_t>(size_);
  const bool with_mailboxes = size_ > 1 && size_ <= kMaxMailboxRanks;
  if (with_mailboxes) {
    segment_bytes_ += static_cast<std::size_t>(size_) * static_cast<std::size_t>(size_) *
                      (MailboxRing::kHeaderBytes + kMailboxBytes);
  }
  auto buffers = std::make_unique<ProbeBuffers>();
  Announcement& announcement = buffers->announcement;
  bool created = false;
  if (rank_ == 0 && enabled) {
    announcement.token = random_token();
    std::snprintf(announcement.name, sizeof announcement.name, "/bellows-%ld-%016llx",
                  static_cast<long>(::getpid()),
                  static_cast<unsigned long long>(announcement.token));
    const int fd = ::shm_open(announcement.name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(segment_bytes_)) == 0) {
      created = true;
      std::memcpy(created_segment_, announcement.name, sizeof created_segment_);
      void* p = ::mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        segment_ = p;
        std::memcpy(segment_, &announcement.token, sizeof announcement.token);
      }
    } else if (fd >= 0) {
      ::shm_unlink(announcement.name);
    }
    if (fd >= 0) ::close(fd);
    if (!created) announcement.name[0] = '\0';
  }
  int posted = MPI_Ibcast(&announcement, sizeof announcement, MPI_BYTE, 0, comm, &buffers->request);
  complete(posted, watch, buffers, "MPI_Ibcast");
  if (rank_ != 0 && enabled && announcement.name[0] != '\0') {
    const int fd = ::shm_open(announcement.name, O_RDWR, 0);
    struct stat info {};
    if (fd >= 0 && ::fstat(fd, &info) == 0 &&
        static_cast<std::size_t>(info.st_size) == segment_bytes_) {
      void* p = ::mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        std::uint64_t token = 0;
        std::memcpy(&token, p, sizeof token);
        if (token == announcement.token) {
          segment_ = p;
        } else {
          ::munmap(p, segment_bytes_);
        }
      }
    }
    if (fd >= 0) ::close(fd);
  }

  // Who joined, and whether each pair can read the other's memory: a peer reads this
  // rank's probe word, which holds a random value, and must find that value.
  buffers->probe = random_token();
  Card& mine = buffers->mine;
  mine.pid = static_cast<std::int64_t>(::getpid());
  mine.probe_address = reinterpret_cast<std::uintptr_t>(&buffers->probe);
  mine.probe_value = buffers->probe;
  mine.joined = segment_ != nullptr ? 1 : 0;
  mine.wanted = enabled ? 1 : 0;
  const std::string host = host_name();  // truncated to fit a Card
  std::memcpy(mine.host, host.data(), std::min(host.size(), sizeof mine.host - 1));
  std::vector<Card>& cards = buffers->cards;
  cards.resize(static_cast<std::size_t>(size_));
  posted = MPI_Iallgather(&mine, sizeof(Card), MPI_BYTE, cards.data(), sizeof(Card), MPI_BYTE, comm,
                          &buffers->request);
  complete(posted, watch, buffers, "MPI_Iallgather");
  if (created) ::shm_unlink(announcement.name);  // every rank has tried to open it
  created_segment_[0] = '\0';
  const bool everyone = std::all_of(cards.begin(), cards.end(),
                                    [](const Card& card) { return card.wanted != 0; });
  if (!everyone) {
    if (segment_ != nullptr) ::munmap(segment_, segment_bytes_);
    segment_ = nullptr;
    return;
  }
  if (segment_ != nullptr) {
    doorbells_ = static_cast<std::byte*>(segment_) + kHeaderBytes;
    // The segment is zero-filled: every mailbox starts empty.
    if (with_mailboxes) mailboxes_ = doorbells_ + kCacheLine * static_cast<std::size_t>(size_);
  }
  std::vector<std::uint8_t>& can_read_row = buffers->can_read_row;
  can_read_row.assign(static_cast<std::size_t>(size_), 0);
  for (int r = 0; r < size_; ++r) {
    const auto& card = cards[static_cast<std::size_t>(r)];
    pids_[static_cast<std::size_t>(r)] = static_cast<long>(card.pid);
    if (r == rank_ || !mine.joined || !card.joined) continue;
    // Ranks of different nodes share nothing but the network, even when the kernel would
    // let them (nodes emulated by namespaces of one machine): tiles go through MPI.
    if (std::strncmp(card.host, mine.host, sizeof mine.host) != 0) continue;
    doorbell_peer_[static_cast<std::size_t>(r)] = 1;
    // Only ranks that share this host's /dev/shm are probed: a pid means nothing elsewhere.
    std::uint64_t value = 0;
    iovec local{&value, sizeof value};
    iovec remote{reinterpret_cast<void*>(card.probe_address), sizeof value};
    const auto n = ::process_vm_readv(static_cast<pid_t>(card.pid), &local, 1, &remote, 1, 0);
    can_read_row[static_cast<std::size_t>(r)] =
        (n == static_cast<ssize_t>(sizeof value) && value == card.probe_value) ? 1 : 0;
  }
  std::vector<std::uint8_t>& matrix = buffers->matrix;
  matrix.resize(static_cast<std::size_t>(size_) * size_);
  posted = MPI_Iallgather(can_read_row.data(), size_, MPI_BYTE, matrix.data(), size_, MPI_BYTE, comm,
                          &buffers->request);
  complete(posted, watch, buffers, "MPI_Iallgather");
  all_doorbells_ = mine.joined != 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const auto me_reads_r = matrix[static_cast<std::size_t>(rank_) * size_ + r];
    const auto r_reads_me = matrix[static_cast<std::size_t>(r) * size_ + rank_];
    read_peer_[static_cast<std::size_t>(r)] = (me_reads_r && r_reads_me) ? 1 : 0;
    all_doorbells_ = all_doorbells_ && doorbell_peer_[static_cast<std::size_t>(r)] != 0;
  }
}

SameHost::~SameHost() {
  if (segment_ != nullptr) ::munmap(segment_, segment_bytes_);
}

bool SameHost::has_doorbell(int rank) const noexcept {
  return rank >= 0 && rank < size_ && doorbell_peer_[static_cast<std::size_t>(rank)] != 0;
}

bool SameHost::can_read(int rank) const noexcept {
  return rank >= 0 && rank < size_ && read_peer_[static_cast<std::size_t>(rank)] != 0;
}

std::atomic<std::uint32_t>* SameHost::doorbell(int rank) const noexcept {
  return reinterpret_cast<std::atomic<std::uint32_t>*>(doorbells_ +
                                                       kCacheLine * static_cast<std::size_t>(rank));
}

std::atomic<std::uint32_t>* SameHost::attendance(int rank) const noexcept {
  return doorbell(rank) + 1;
}

bool SameHost::has_mailbox(int rank) const noexcept {
  return mailboxes_ != nullptr && has_doorbell(rank);
}

std::size_t SameHost::largest_mail() const noexcept {
  return mailboxes_ != nullptr ? kMailboxBytes - 8 : 0;
}

MailboxRing SameHost::mailbox(int from, int to) const noexcept {
  const std::size_t index = static_cast<std::size_t>(from) * static_cast<std::size_t>(size_) +
                            static_cast<std::size_t>(to);
  return MailboxRing(mailboxes_ + index * (MailboxRing::kHeaderBytes + kMailboxBytes), kMailboxBytes);
}

bool SameHost::post(int rank, std::span<const std::byte> message) {
  if (!has_mailbox(rank)) return false;
  std::lock_guard lock(post_mutex_);
  return mailbox(rank_, rank).write(message);
}

std::size_t SameHost::collect(int source, std::vector<std::vector<std::byte>>& out) {
  if (!has_mailbox(source)) return 0;
  return mailbox(source, rank_).read_all(out);
}

void SameHost::drop_mail() noexcept {
  for (int r = 0; r < size_; ++r) {
    if (has_mailbox(r)) mailbox(r, rank_).drop_all();
  }
}

bool SameHost::mail_waiting() const noexcept {
  if (mailboxes_ == nullptr) return false;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && has_doorbell(r) && !mailbox(r, rank_).empty()) return true;
  }
  return false;
}

void SameHost::ring_for_mail(int rank) noexcept {
  if (doorbells_ == nullptr || !has_doorbell(rank)) return;
  // Pairs with attend(false): the message's write position is stored before this load.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (attendance(rank)->load(std::memory_order_relaxed) != 0) return;
  ring(rank);
}

void SameHost::attend(bool attending) noexcept {
  if (mailboxes_ == nullptr) return;
  if (attending) {
    attendance(rank_)->fetch_add(1, std::memory_order_seq_cst);
  } else {
    attendance(rank_)->fetch_sub(1, std::memory_order_seq_cst);
  }
  // Pairs with ring_for_mail(): the count is stored before the caller's mail_waiting().
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void SameHost::ring(int rank) noexcept {
  if (doorbells_ == nullptr || (rank != rank_ && !has_doorbell(rank))) return;
  auto* word = doorbell(rank);
  word->fetch_add(1, std::memory_order_acq_rel);
  futex(word, FUTEX_WAKE, 1, nullptr);
}

void SameHost::wait(std::chrono::microseconds timeout) noexcept {
  if (doorbells_ == nullptr) {
    std::this_thread::sleep_for(timeout);
    return;
  }
  auto* word = doorbell(rank_);
  const std::uint32_t now = word->load(std::memory_order_acquire);
  if (now != seen_) {
    seen_ = now;
    return;
  }
  const auto us = timeout.count();
  const timespec relative{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  futex(word, FUTEX_WAIT, now, &relative);
  seen_ = word->load(std::memory_order_acquire);
}

bool SameHost::read(int rank, std::uint64_t address, void* local, std::size_t bytes,
                    std::string& error) const {
  if (peer_tiles_.read(static_cast<pid_t>(pids_[static_cast<std::size_t>(rank)]), address, local,
                       bytes)) {
    return true;
  }
  auto* into = static_cast<std::byte*>(local);
  std::size_t done = 0;
  while (done < bytes) {
    iovec l{into + done, bytes - done};
    iovec r{reinterpret_cast<void*>(address + done), bytes - done};
    const auto n = ::process_vm_readv(static_cast<pid_t>(pids_[static_cast<std::size_t>(rank)]),
                                      &l, 1, &r, 1, 0);
    if (n <= 0) {
      error = "reading " + std::to_string(bytes) + " bytes from rank " + std::to_string(rank) +
              " (pid " + std::to_string(pids_[static_cast<std::size_t>(rank)]) + "): " +
              (n < 0 ? std::strerror(errno) : "nothing read");
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace bellows::runtime
