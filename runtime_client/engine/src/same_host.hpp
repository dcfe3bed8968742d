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
//    sleeps on its own doorbell instead of polling.
//  - single-copy tile reads (cross-memory attach, process_vm_readv): the consumer reads
//    the producer's tile straight from the producer's memory and then tells it so; no
//    side polls while the bytes move.
//
// Both are probed when the runtime starts (collective) and used only between ranks of one
// node (the same host name) where the probe worked in both directions; every other pair
// uses MPI alone, as ranks on different hosts of a cluster must.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mpi.h>
#include <string>
#include <vector>

#include "peer_tiles.hpp"

namespace bellows::runtime {

/// This process's host name (uname: its node's UTS namespace); ranks of one node share it.
[[nodiscard]] std::string host_name();

class SameHost {
 public:
  /// Collective over comm. With `enabled` false (or when nothing can be shared) every
  /// query answers false and ring/wait fall back to no-ops / plain sleeps.
  SameHost(MPI_Comm comm, bool enabled);
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

  /// Wakes `rank`'s communication thread (thread-safe; no-op without a doorbell).
  void ring(int rank) noexcept;
  /// Sleeps until this rank's doorbell rings or `timeout` passes; returns at once when
  /// it rang since the previous call. Called by the communication thread only.
  void wait(std::chrono::microseconds timeout) noexcept;

  /// Copies `bytes` from `address` in `rank`'s memory to `local`: with memcpy from a
  /// mapping of the peer's tile slab where the bytes lie in one (peer_tiles.hpp), else with
  /// process_vm_readv. On failure returns false with the reason in `error`.
  bool read(int rank, std::uint64_t address, void* local, std::size_t bytes,
            std::string& error) const;

 private:
  [[nodiscard]] std::atomic<std::uint32_t>* doorbell(int rank) const noexcept;

  int rank_ = 0;
  int size_ = 1;
  void* segment_ = nullptr;
  std::size_t segment_bytes_ = 0;
  std::byte* doorbells_ = nullptr;
  std::vector<std::uint8_t> doorbell_peer_;  ///< per rank: both joined the segment
  std::vector<std::uint8_t> read_peer_;      ///< per rank: reads work both ways
  std::vector<long> pids_;
  mutable PeerTiles peer_tiles_;
  bool all_doorbells_ = false;
  std::uint32_t seen_ = 0;
};

}  // namespace bellows::runtime
