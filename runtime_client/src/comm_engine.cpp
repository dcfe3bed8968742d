#include "comm_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "engine.hpp"

namespace bellows::runtime {
namespace {

constexpr int kControlTag = 1;
constexpr int kFirstDataTag = 100;
constexpr int kLastDataTag = 32000;  // MPI guarantees tags up to at least 32767
constexpr int kTransferPollUs = 20;
constexpr int kFetchExpectedPollUs = 50;

int element_count(const Tile& t) { return static_cast<int>(t.elements()); }

}  // namespace

CommEngine::CommEngine(Engine& engine, MPI_Comm comm, int max_sleep_us)
    : engine_(engine), comm_(comm), max_sleep_us_(std::max(1, max_sleep_us)) {
  MPI_Comm_rank(comm_, &rank_);
  stats_.rank = rank_;
}

CommEngine::~CommEngine() {
  if (thread_.joinable()) thread_.join();
}

void CommEngine::start() {
  thread_ = std::thread([this] {
    try {
      run();
    } catch (const std::exception& e) {
      fail(e.what());
    }
  });
}

void CommEngine::join() { thread_.join(); }

void CommEngine::notify() {
  {
    std::lock_guard lock(outbox_mutex_);
    wake_ = true;
  }
  wake_cv_.notify_one();
}

void CommEngine::send_activation(int dest, TilePtr tile, std::vector<wire::Target> targets) {
  {
    std::lock_guard lock(outbox_mutex_);
    outbox_.push_back(Command{Command::Kind::activate, dest, std::move(tile), std::move(targets), {}});
  }
  wake_cv_.notify_one();
}

void CommEngine::fetch_collection_tile(const TileIndex& index, int owner, int rows, int cols) {
  {
    std::lock_guard lock(outbox_mutex_);
    outbox_.push_back(Command{Command::Kind::collection_fetch, owner,
                              std::make_shared<Tile>(rows, cols), {}, index});
  }
  wake_cv_.notify_one();
}

RankStats CommEngine::take_stats() {
  RankStats out = stats_;
  stats_ = RankStats{};
  stats_.rank = rank_;
  return out;
}

void CommEngine::fail(const std::string& what) {
  std::fprintf(stderr, "bellows: rank %d: communication thread: %s\n", rank_, what.c_str());
  std::fflush(stderr);
  MPI_Abort(comm_, 3);
  std::abort();
}

int CommEngine::next_tag() {
  const int tag = kFirstDataTag + tag_cursor_;
  tag_cursor_ = (tag_cursor_ + 1) % (kLastDataTag - kFirstDataTag);
  return tag;
}

void CommEngine::post(MPI_Request request, Operation&& op) {
  requests_.push_back(request);
  operations_.push_back(std::move(op));
}

void CommEngine::send_control(int dest, const wire::Message& message) {
  Operation op{Operation::Kind::control_send, wire::encode(message), nullptr, {}, {}};
  MPI_Request request;
  MPI_Isend(op.buffer.data(), static_cast<int>(op.buffer.size()), MPI_BYTE, dest, kControlTag,
            comm_, &request);
  ++stats_.messages_sent;
  post(request, std::move(op));
}

bool CommEngine::drain_outbox() {
  std::vector<Command> commands;
  {
    std::lock_guard lock(outbox_mutex_);
    commands.swap(outbox_);
  }
  for (auto& c : commands) {
    if (c.kind == Command::Kind::activate) {
      wire::Activate a;
      a.targets = std::move(c.targets);
      // A tile without elements travels as a control token (rows == 0): nothing to fetch.
      if (c.tile && c.tile->elements() > 0) {
        a.handle = next_handle_++;
        a.rows = c.tile->rows();
        a.cols = c.tile->cols();
        published_.emplace(a.handle, std::move(c.tile));
      }
      send_control(c.peer, a);
    } else {
      const int tag = next_tag();
      MPI_Request request;
      MPI_Irecv(c.tile->data(), element_count(*c.tile), MPI_DOUBLE, c.peer, tag, comm_, &request);
      post(request, Operation{Operation::Kind::collection_recv, {}, std::move(c.tile), {}, c.index});
      send_control(c.peer, wire::CollectionFetch{c.index, tag});
    }
  }
  return !commands.empty();
}

bool CommEngine::receive_control() {
  bool received = false;
  for (;;) {
    int flag = 0;
    MPI_Message matched;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, kControlTag, comm_, &flag, &matched, &status);
    if (!flag) break;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<std::byte> bytes(static_cast<std::size_t>(count));
    MPI_Mrecv(bytes.data(), count, MPI_BYTE, &matched, MPI_STATUS_IGNORE);
    ++stats_.messages_received;
    std::string error;
    auto message = wire::decode(bytes, error);
    if (!message) {
      fail("malformed control message from rank " + std::to_string(status.MPI_SOURCE) + ": " + error);
    }
    handle(status.MPI_SOURCE, std::move(*message));
    received = true;
  }
  return received;
}

void CommEngine::handle(int source, wire::Message&& message) {
  if (auto* a = std::get_if<wire::Activate>(&message)) {
    if (a->rows == 0) {
      for (const auto& t : a->targets) {
        if (t.to_collection) fail("control activation from rank " + std::to_string(source) +
                                  " targets a collection tile");
        engine_.deliver(t.consumer, t.slot, nullptr);
      }
      return;
    }
    auto tile = std::make_shared<Tile>(a->rows, a->cols);
    const int tag = next_tag();
    MPI_Request request;
    MPI_Irecv(tile->data(), element_count(*tile), MPI_DOUBLE, source, tag, comm_, &request);
    post(request, Operation{Operation::Kind::activation_recv, {}, std::move(tile),
                            std::move(a->targets), {}});
    send_control(source, wire::Fetch{a->handle, tag});
  } else if (auto* f = std::get_if<wire::Fetch>(&message)) {
    auto it = published_.find(f->handle);
    if (it == published_.end()) {
      fail("rank " + std::to_string(source) + " fetched unknown tile handle " +
           std::to_string(f->handle));
    }
    TilePtr tile = std::move(it->second);
    published_.erase(it);
    MPI_Request request;
    MPI_Isend(tile->data(), element_count(*tile), MPI_DOUBLE, source, f->tag, comm_, &request);
    post(request, Operation{Operation::Kind::data_send, {}, std::move(tile), {}, {}});
  } else {
    const auto& c = std::get<wire::CollectionFetch>(message);
    const auto& coll = engine_.collection(c.tile.collection);
    TilePtr tile = coll.tile(c.tile.m, c.tile.n);  // throws when not local
    MPI_Request request;
    MPI_Isend(tile->data(), element_count(*tile), MPI_DOUBLE, source, c.tag, comm_, &request);
    post(request, Operation{Operation::Kind::data_send, {}, std::move(tile), {}, {}});
  }
}

bool CommEngine::complete_operations() {
  if (requests_.empty()) return false;
  thread_local std::vector<int> indices;
  indices.resize(requests_.size());
  int done = 0;
  MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &done, indices.data(),
               MPI_STATUSES_IGNORE);
  if (done == MPI_UNDEFINED || done == 0) return false;
  for (int d = 0; d < done; ++d) {
    auto& op = operations_[static_cast<std::size_t>(indices[static_cast<std::size_t>(d)])];
    switch (op.kind) {
      case Operation::Kind::control_send: break;
      case Operation::Kind::data_send: stats_.bytes_sent += op.tile->bytes(); break;
      case Operation::Kind::activation_recv: {
        stats_.bytes_received += op.tile->bytes();
        for (std::size_t i = 0; i < op.targets.size(); ++i) {
          const auto& t = op.targets[i];
          TilePtr tile = (i + 1 == op.targets.size()) ? std::move(op.tile) : op.tile;
          if (t.to_collection) {
            engine_.write_back(t.tile, std::move(tile));
          } else {
            engine_.deliver(t.consumer, t.slot, std::move(tile));
          }
        }
        break;
      }
      case Operation::Kind::collection_recv:
        stats_.bytes_received += op.tile->bytes();
        engine_.collection_tile_arrived(op.index, std::move(op.tile));
        break;
    }
  }
  // Compact: drop completed entries (their requests are MPI_REQUEST_NULL now).
  std::size_t kept = 0;
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] != MPI_REQUEST_NULL) {
      if (kept != i) {
        requests_[kept] = requests_[i];
        operations_[kept] = std::move(operations_[i]);
      }
      ++kept;
    }
  }
  requests_.resize(kept);
  operations_.resize(kept);
  return true;
}

void CommEngine::run() {
  // Short sleeps must be short: the default 50 us timer slack would dominate them.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  struct CpuTimeRecorder {
    RankStats& stats;
    ~CpuTimeRecorder() {
      rusage usage{};
      getrusage(RUSAGE_THREAD, &usage);
      stats.comm_cpu_seconds += static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                                static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
    }
  } recorder{stats_};
  MPI_Request barrier = MPI_REQUEST_NULL;
  bool barrier_posted = false;
  bool barrier_done = false;
  for (;;) {
    bool progressed = drain_outbox();
    progressed = receive_control() || progressed;
    progressed = complete_operations() || progressed;

    const bool work_done = engine_.local_work_done();
    bool outbox_empty = false;
    {
      std::lock_guard lock(outbox_mutex_);
      outbox_empty = outbox_.empty();
    }
    const bool quiet = outbox_empty && requests_.empty();
    if (!barrier_posted && work_done && quiet && published_.empty()) {
      MPI_Ibarrier(comm_, &barrier);
      barrier_posted = true;
      progressed = true;
    }
    if (barrier_posted && !barrier_done) {
      int flag = 0;
      MPI_Test(&barrier, &flag, MPI_STATUS_IGNORE);
      barrier_done = flag != 0;
    }
    if (barrier_done && quiet) break;


    if (progressed) continue;
    // Poll often only while something is expected soon: transfers in flight need the
    // progress engine on both sides, and a published tile is about to be fetched.
    // Otherwise sleep long; local work wakes the thread at once through the outbox.
    const int sleep_us = !requests_.empty()    ? kTransferPollUs
                         : !published_.empty() ? kFetchExpectedPollUs
                                               : max_sleep_us_;
    std::unique_lock lock(outbox_mutex_);
    wake_cv_.wait_for(lock, std::chrono::microseconds(sleep_us),
                      [&] { return wake_ || !outbox_.empty(); });
    wake_ = false;
  }
}

}  // namespace bellows::runtime
