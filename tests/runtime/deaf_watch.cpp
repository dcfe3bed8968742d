#include "deaf_watch.hpp"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

namespace bellows::testing::recovery {
namespace {

/// The tag the runtime's peer watch receives on (runtime_client/core/src/peer_watch.cpp,
/// kPeerWatchTag); deaf_watch_receives() tells when they part.
constexpr int kPeerWatchTag = 32200;

std::atomic<bool> deaf{false};
std::atomic<long> deaf_receives{0};
std::atomic<bool> stop_in_barrier{false};
std::mutex stop_mark_mutex;
std::filesystem::path stop_mark;  // guarded by stop_mark_mutex

}  // namespace

void make_watch_deaf() { deaf.store(true); }

long deaf_watch_receives() { return deaf_receives.load(); }

void stop_in_next_barrier(const std::filesystem::path& mark) {
  {
    std::lock_guard lock(stop_mark_mutex);
    stop_mark = mark;
  }
  stop_in_barrier.store(true);
}

}  // namespace bellows::testing::recovery

extern "C" int MPI_Irecv(void* buffer, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                         MPI_Request* request) {
  using namespace bellows::testing::recovery;
  if (tag == kPeerWatchTag && source != MPI_ANY_SOURCE && deaf.load()) {
    deaf_receives.fetch_add(1);
    source = MPI_ANY_SOURCE;
  }
  return PMPI_Irecv(buffer, count, type, source, tag, comm, request);
}

extern "C" int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  using namespace bellows::testing::recovery;
  const int posted = PMPI_Ibarrier(comm, request);
  if (stop_in_barrier.load()) {
    std::filesystem::path mark;
    {
      std::lock_guard lock(stop_mark_mutex);
      mark = stop_mark;
    }
    std::ofstream(mark) << "1\n";
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // until the SIGKILL
  }
  return posted;
}
