#pragma once
// The communication thread of a rank: the only thread that calls MPI during an
// iteration. It carries activations, serves fetches (the handshake of seed 001,
// section III-B) and detects the end of the iteration.
//
// It never spins a core while idle: it sleeps on a condition variable, woken at once
// by local work (an activation to send, a tile to fetch); it polls MPI every few
// microseconds while transfers are in flight or a published tile awaits its fetch,
// and otherwise every max_sleep_us for unsolicited messages.

#include <condition_variable>
#include <cstdint>
#include <mpi.h>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/task.hpp"
#include "wire.hpp"

namespace bellows::runtime {

class Engine;

class CommEngine {
 public:
  CommEngine(Engine& engine, MPI_Comm comm, int max_sleep_us);
  ~CommEngine();
  CommEngine(const CommEngine&) = delete;
  CommEngine& operator=(const CommEngine&) = delete;

  /// Starts the thread for one iteration.
  void start();
  /// Waits until the iteration is over on every rank (all local tasks ran, every tile
  /// this rank published was fetched, every transfer completed, and an MPI_Ibarrier
  /// among all ranks completed), then joins the thread.
  void join();

  // Thread-safe requests from workers.

  /// Tells `dest` that `tile` (nullptr: a control token) is ready for `targets`.
  void send_activation(int dest, TilePtr tile, std::vector<wire::Target> targets);
  /// Fetches collection tile `index` of shape rows x cols from its owner.
  void fetch_collection_tile(const TileIndex& index, int owner, int rows, int cols);
  /// Wakes the thread (e.g. the last local task completed).
  void notify();

  RankStats take_stats();

 private:
  struct Command {
    enum class Kind : std::uint8_t { activate, collection_fetch } kind;
    int peer = 0;
    TilePtr tile;
    std::vector<wire::Target> targets;
    TileIndex index{};
  };
  struct Operation {
    enum class Kind : std::uint8_t { control_send, data_send, activation_recv, collection_recv };
    Kind kind;
    std::vector<std::byte> buffer;
    TilePtr tile;
    std::vector<wire::Target> targets;
    TileIndex index{};
  };

  void run();
  bool drain_outbox();
  bool receive_control();
  bool complete_operations();
  void handle(int source, wire::Message&& message);
  void send_control(int dest, const wire::Message& message);
  void post(MPI_Request request, Operation&& op);
  int next_tag();
  [[noreturn]] void fail(const std::string& what);

  Engine& engine_;
  MPI_Comm comm_;
  int rank_ = 0;
  int max_sleep_us_;

  std::mutex outbox_mutex_;
  std::condition_variable wake_cv_;
  std::vector<Command> outbox_;
  bool wake_ = false;

  std::thread thread_;
  // State below is touched by the communication thread only.
  std::vector<MPI_Request> requests_;
  std::vector<Operation> operations_;
  std::unordered_map<std::uint64_t, TilePtr> published_;
  std::uint64_t next_handle_ = 1;
  int tag_cursor_ = 0;
  RankStats stats_;
};

}  // namespace bellows::runtime
