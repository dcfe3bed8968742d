#pragma once
// What ranks that share a host can do without MPI's help.
//
// MPICH ch3:nemesis cannot block: a rank learns of a message only by polling, and a
// tile larger than the eager limit moves by a shared-memory rendezvous that needs both
// sides to poll until the last chunk is copied. When many ranks share few cores (the
// emulated nodes of a test or benchmark), that polling eats the cores the tasks need
// and turns every wake-up into a wait for a core. Between ranks on one host Bellows
// therefore adds two things:
//
//  - a doorbell per rank: a futex word in a POSIX shared-memory segment. A sender rings
//    the receiver after handing MPI a control message; an idle communication thread
//    sleeps on its own doorbell instead of polling. Beside it, the count of the rank's
//    threads that attend its mailboxes (awake workers, RuntimeOptions::workers_read_mail):
//    while it is not zero, a message put into a mailbox rings nobody.
//  - a mailbox per ordered pair of ranks (mailbox_ring.hpp): a worker that finishes a task
//    whose consumer is on a rank of the host writes the (small) activation there itself and
//    rings that rank, so its own communication thread is neither woken nor involved, and MPI
//    is not called (jobs of at most kMaxMailboxRanks ranks);
//  - single-copy tile reads (cross-memory attach, process_vm_readv): the consumer reads
//    the producer's tile straight from the producer's memory and then tells it so; no
//    side polls while the bytes move.
//
// Both are probed when the runtime starts (collective) and used only between ranks of one
// node (the same host name) where the probe worked in both directions; every other pair
// uses MPI alone, as ranks on different hosts of a cluster must. On a communicator an expand
// made the probe is watched for lost members (watched_setup.hpp).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mpi.h>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "mailbox_ring.hpp"
#include "peer_tiles.hpp"

namespace bellows::runtime {

class PeerWatch;

/// This process's host name (uname: its node's UTS namespace); ranks of one node share it.
[[nodiscard]] std::string host_name();

class SameHost {
 public:
  /// Collective over comm. With `enabled` false (or when nothing can be shared) every
  /// query answers false and ring/wait fall back to no-ops / plain sleeps. With `watch`
  /// (armed, on comm, which returns errors) its collectives are completed under it, and a
  /// member lost throws MembersLost naming the call, nothing of the probe left behind.
  SameHost(MPI_Comm comm, bool enabled, PeerWatch* watch = nullptr);
  ~SameHost();
  SameHost(const SameHost&) = delete;
  SameHost& operator=(const SameHost&) = delete;

  /// This rank and `rank` can ring each other.
  [[nodiscard]] bool has_doorbell(int rank) const noexcept;
  /// This rank and `rank` can read each other's memory.
  [[nodiscard]] bool can_read(int rank) const noexcept;
  /// Every other rank has a doorbell with this one.
  [[nodiscard]] bool all_have_doorbells() const noexcept { return all_doorbells_; }
  [[nodiscard]] bool any_doorbell() const noexcept { return doorbells_ != nullptr; }
  [[nodiscard]] bool any_mailbox() const noexcept { return mailboxes_ != nullptr; }

  /// Wakes `rank`'s communication thread (thread-safe; no-op without a doorbell).
  void ring(int rank) noexcept;
  /// Sleeps until this rank's doorbell rings or `timeout` passes; returns at once when
  /// it rang since the previous call. Called by the communication thread only.
  void wait(std::chrono::microseconds timeout) noexcept;

  /// This rank can write into `rank`'s mailbox from it (and read the one back).
  [[nodiscard]] bool has_mailbox(int rank) const noexcept;
  /// The largest message a mailbox takes.
  [[nodiscard]] std::size_t largest_mail() const noexcept;
  /// Writes `message` into `rank`'s mailbox from this rank (thread-safe; has_mailbox(rank)
  /// required). False when the mailbox has no room now: nothing was written. Does not ring.
  bool post(int rank, std::span<const std::byte> message);
  /// Appends the messages `source` posted here since the last call to `out` and frees their
  /// room. Called by the communication thread only. Throws std::runtime_error when the
  /// mailbox was overwritten.
  std::size_t collect(int source, std::vector<std::vector<std::byte>>& out);
  /// Frees every message waiting in this rank's mailboxes unread (an abandoned iteration).
  void drop_mail() noexcept;
  /// Some peer's mailbox to this rank holds a message not collected yet (acquire loads only).
  [[nodiscard]] bool mail_waiting() const noexcept;
  /// After post(rank, ...): rings `rank` unless a thread of `rank` attends its mailboxes
  /// (attend()), which then reads the message without a wake-up (thread-safe).
  void ring_for_mail(int rank) noexcept;
  /// A thread of this rank starts (true) or stops (false) attending its mailboxes: while any
  /// attends, peers do not ring for mail (ring_for_mail). A thread that stops must look at
  /// mail_waiting() once more afterwards: a peer that saw it attending did not ring. The
  /// count and the mailboxes' positions are ordered (sequentially consistent fences on both
  /// sides), so either the peer rings or that look sees its message.
  void attend(bool attending) noexcept;

  /// Jobs larger than this have no mailboxes (the segment grows with the square of the size).
  static constexpr int kMaxMailboxRanks = 32;
  /// Bytes of records per mailbox: an activation with a tile of the default eager limit
  /// (RuntimeOptions::eager_tile_bytes, 4 KiB) takes about a quarter.
  static constexpr std::size_t kMailboxBytes = 16384;

  /// Copies `bytes` from `address` in `rank`'s memory to `local`: with memcpy from a
  /// mapping of the peer's tile slab where the bytes lie in one (peer_tiles.hpp), else with
  /// process_vm_readv. On failure returns false with the reason in `error`.
  bool read(int rank, std::uint64_t address, void* local, std::size_t bytes,
            std::string& error) const;

 private:
  struct ProbeBuffers;
  /// Completes the probe's collective that `call` posted with result `posted`: asleep, under
  /// `watch` when given (a member lost throws MembersLost, `buffers` kept for MPI).
  void complete(int posted, PeerWatch* watch, std::unique_ptr<ProbeBuffers>& buffers, const char* call);
  [[nodiscard]] std::atomic<std::uint32_t>* doorbell(int rank) const noexcept;
  /// How many threads of `rank` attend its mailboxes: the word after its doorbell.
  [[nodiscard]] std::atomic<std::uint32_t>* attendance(int rank) const noexcept;
  /// The mailbox that `from` writes and `to` reads.
  [[nodiscard]] MailboxRing mailbox(int from, int to) const noexcept;

  int rank_ = 0;
  int size_ = 1;
  void* segment_ = nullptr;
  std::size_t segment_bytes_ = 0;
  std::byte* doorbells_ = nullptr;
  std::byte* mailboxes_ = nullptr;  ///< size x size mailboxes, or null (kMaxMailboxRanks)
  std::mutex post_mutex_;           ///< one writer at a time into this rank's mailboxes
  std::vector<std::uint8_t> doorbell_peer_;  ///< per rank: both joined the segment
  std::vector<std::uint8_t> read_peer_;      ///< per rank: reads work both ways
  std::vector<long> pids_;
  mutable PeerTiles peer_tiles_;
  bool all_doorbells_ = false;
  std::uint32_t seen_ = 0;
  char created_segment_[56] = {};  ///< the segment's name on rank 0 until it is unlinked
};

}  // namespace bellows::runtime
