// The communication thread's core: its life over an iteration (start, the barrier that
// starts it, join), the requests workers hand it, control messages sent, received and
// handled, tile transfers by MPI and by same-host reads, the global count that ends an
// iteration, and its loop and sleep budget. Work stealing is comm_engine_steal.cpp's, what
// happens when a peer dies comm_engine_loss.cpp's.

#include "comm_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <sys/prctl.h>
#include <sys/resource.h>

#include "bellows/runtime/message_logging.hpp"
#include "comm_numbers.hpp"
#include "engine.hpp"
#include "peer_watch.hpp"
#include "sleeping_wait.hpp"

namespace bellows::runtime {
namespace {

constexpr int kControlTag = 1;
constexpr int kFirstDataTag = 100;
constexpr int kLastDataTag = 32000;  // MPI guarantees tags up to at least 32767
constexpr int kTransferPollUs = 20;
constexpr int kFetchExpectedPollUs = 50;
// With doorbells from every peer, polling only backs up what the doorbells announce:
// MPI's own progress for sends it could not deliver at once, and collective rounds.
constexpr int kDoorbellBackupPollUs = 100;
// With doorbells from every peer and nothing in flight, anything that needs this rank
// rings it; the idle thread only checks in now and then.
constexpr int kDoorbellIdleSleepUs = 2000;
// How often the communication thread tests the receives that notice a dead peer.
constexpr auto kWatchPollInterval = std::chrono::microseconds(500);

/// Hands the CPU time the calling thread used to `record` when the thread's loop ends.
class ThreadCpuTime {
 public:
  explicit ThreadCpuTime(std::function<void(double)> record) : record_(std::move(record)) {}
  ~ThreadCpuTime() {
    rusage usage{};
    getrusage(RUSAGE_THREAD, &usage);
    record_(static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
            static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6);
  }
  ThreadCpuTime(const ThreadCpuTime&) = delete;
  ThreadCpuTime& operator=(const ThreadCpuTime&) = delete;

 private:
  std::function<void(double)> record_;
};

}  // namespace

CommEngine::CommEngine(Engine& engine, MPI_Comm comm, int max_sleep_us, bool same_host_transport,
                       PeerWatch* setup_watch)
    : engine_(engine),
      comm_(comm),
      rank_(rank_in(comm)),
      max_sleep_us_(std::max(1, max_sleep_us)),
      eager_tile_bytes_(engine.options().eager_tile_bytes),
      poll_after_progress_(std::chrono::microseconds(engine.options().comm_poll_us)),
      mailboxes_(engine.options().same_host_mailboxes),
      workers_read_mail_(engine.options().same_host_mailboxes && engine.options().workers_read_mail),
      worker_poll_(std::chrono::microseconds(engine.options().worker_poll_us)),
      same_host_(comm, same_host_transport, setup_watch),
      size_(size_of(comm)),
      steal_policy_(engine.options().steal, rank_, size_) {
  stats_.rank = rank_;
  if (engine.options().message_log.enabled) {
    steal_policy_.confine_to(steal_partners(engine.message_log().rank_team(), rank_,
                                            engine.options().message_log.steal_across_teams));
  }
}

CommEngine::~CommEngine() {
  if (thread_.joinable()) thread_.join();
  if (copier_.joinable()) {
    {
      std::lock_guard lock(copy_mutex_);
      copier_stop_ = true;
    }
    copy_cv_.notify_one();
    copier_.join();
  }
}

void CommEngine::reset_iteration_state() {
  steal_outstanding_.store(false, std::memory_order_release);
  requests_in_flight_ = 0;
  final_reply_seen_ = false;
  partial_replies_expected_ = 0;
  partial_replies_seen_ = 0;
  tasks_this_request_ = 0;
  invited_by_ = -1;
  invited_at_ = {};
  steal_policy_.start_iteration();
  abandoned_ = false;
  mpi_failure_.clear();
  next_ask_ns_.store(steal_policy_.next_ask_at().count(), std::memory_order_release);
  asking_pays_.store(true, std::memory_order_release);
  global_done_ = false;
  retired_ = false;
  completed_everywhere_ = 0;
  retired_ranks_.assign(static_cast<std::size_t>(size_), false);
}

void CommEngine::start(PeerWatch& watch) {
  watch_ = &watch;
  reset_iteration_state();
  {
    std::lock_guard lock(copy_mutex_);
    copier_stop_ = false;
  }
  {
    std::lock_guard lock(mail_mutex_);
    mail_open_ = true;
  }
  copier_ = std::thread([this] { copy_loop(); });
  thread_ = std::thread([this] {
    try {
      run();
    } catch (const std::exception& e) {
      fail(e.what());
    }
  });
}

bool CommEngine::barrier_without_spinning(PeerWatch& watch) {
  MPI_Request barrier = MPI_REQUEST_NULL;
  if (!succeeded(MPI_Ibarrier(comm_, &barrier), "MPI_Ibarrier")) return false;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) same_host_.ring(r);
  }
  // Peers ring as they enter; without doorbells SameHost::wait is a plain sleep. A peer that
  // died may leave the barrier pending for good: the watch ends the wait.
  bool lost = false;
  const int rc = wait_sleeping(barrier, [&] {
    same_host_.wait(std::chrono::microseconds(kTransferPollUs));
    if (watch.poll() || !watch.lost().empty()) {
      lost = true;
      // A collective's request may not be freed or cancelled: left as it is, never tested.
      abandoned_requests_.push_back(barrier);
      barrier = MPI_REQUEST_NULL;
    }
  });
  if (lost) return false;
  return succeeded(rc, "MPI_Ibarrier (the barrier that starts an iteration)");
}

void CommEngine::join() {
  thread_.join();
  {
    std::lock_guard lock(copy_mutex_);
    copier_stop_ = true;
  }
  copy_cv_.notify_one();
  copier_.join();
}

void CommEngine::notify() {
  {
    std::lock_guard lock(outbox_mutex_);
    wake_ = true;
  }
  wake_self();
}

void CommEngine::wake_self() {
  if (same_host_.any_doorbell()) {
    same_host_.ring(rank_);
  } else {
    wake_cv_.notify_one();
  }
}

void CommEngine::notify_starving() {
  if (steal_outstanding_.load(std::memory_order_acquire)) return;
  // The thread decides again at its next pass whether asking pays; until then it would not ask.
  if (!asking_pays_.load(std::memory_order_acquire)) return;
  // While the thief backs off, the thread wakes by itself when the backoff ends.
  const auto next_ask = next_ask_ns_.load(std::memory_order_acquire);
  if (next_ask != 0 && steal_time(std::chrono::steady_clock::now()).count() < next_ask) return;
  notify();
}

bool CommEngine::carry_small_tile(const Tile& tile, wire::Activate& a) const {
  if (tile.elements() == 0) return true;  // a control token: rows stays 0
  if (tile.bytes() > eager_tile_bytes_) return false;
  a.rows = tile.rows();
  a.cols = tile.cols();
  const auto* bytes = reinterpret_cast<const std::byte*>(tile.data());
  a.tile_bytes.assign(bytes, bytes + tile.bytes());
  return true;
}

void CommEngine::send_activation(int dest, TilePtr tile, std::vector<wire::Target> targets,
                                 std::optional<wire::Producer> producer) {
  if (mailboxes_ && same_host_.has_mailbox(dest)) {
    wire::Activate a;
    if (!tile || carry_small_tile(*tile, a)) {
      a.targets = std::move(targets);
      a.producer = producer;
      const auto bytes = wire::encode(a);
      if (bytes.size() <= same_host_.largest_mail() && same_host_.post(dest, bytes)) {
        same_host_.ring_for_mail(dest);
        mailbox_messages_sent_.fetch_add(1, std::memory_order_relaxed);
        mailbox_bytes_sent_.fetch_add(a.tile_bytes.size(), std::memory_order_relaxed);
        return;
      }
      targets = std::move(a.targets);  // no room now: the communication thread sends it
    }
  }
  {
    std::lock_guard lock(outbox_mutex_);
    outbox_.push_back(Command{Command::Kind::activate, dest, std::move(tile), std::move(targets), {}, 0, producer});
  }
  wake_self();
}

void CommEngine::fetch_collection_tile(const TileIndex& index, int owner, int rows, int cols) {
  {
    std::lock_guard lock(outbox_mutex_);
    outbox_.push_back(Command{Command::Kind::collection_fetch, owner,
                              std::make_shared<Tile>(rows, cols), {}, index});
  }
  wake_self();
}

RankStats CommEngine::take_stats() {
  RankStats out = stats_;
  const auto by_mailbox = mailbox_messages_sent_.exchange(0);
  const auto mailbox_bytes = mailbox_bytes_sent_.exchange(0);
  out.messages_sent += by_mailbox;
  out.activations_by_mailbox += by_mailbox;
  const auto mail_received = mail_received_.exchange(0);
  const auto mail_bytes = mail_bytes_received_.exchange(0);
  out.messages_received += mail_received;
  out.bytes_received += mail_bytes;
  out.bytes_received_in_activations += mail_bytes;
  out.activations_read_by_workers += mail_read_by_workers_.exchange(0);
  out.bytes_sent += mailbox_bytes;
  out.bytes_sent_in_activations += mailbox_bytes;
  const auto copied = copied_bytes_.exchange(0);
  out.bytes_received += copied;
  out.bytes_received_same_host += copied;
  out.comm_cpu_seconds += copier_cpu_seconds_.exchange(0.0);
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

bool CommEngine::is_receive(const Operation& op) {
  return op.kind == Operation::Kind::activation_recv || op.kind == Operation::Kind::collection_recv;
}

void CommEngine::post(MPI_Request request, Operation&& op) {
  if (op.kind != Operation::Kind::control_send) ++mpi_transfers_;
  if (is_receive(op)) ++mpi_receives_;
  requests_.push_back(request);
  operations_.push_back(std::move(op));
}

void CommEngine::send_control(int dest, const wire::Message& message) {
  Operation op{Operation::Kind::control_send, dest, wire::encode(message), nullptr, {}, {}};
  MPI_Request request;
  checked(MPI_Isend(op.buffer.data(), static_cast<int>(op.buffer.size()), MPI_BYTE, dest, kControlTag,
            comm_, &request), request, "MPI_Isend");
  ++stats_.messages_sent;
  post(request, std::move(op));
  same_host_.ring(dest);
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
      a.producer = c.producer;
      // A tile without elements travels as a control token (rows == 0): nothing to fetch.
      // Small: the bytes go in the activation, and nothing stays published. Copied here,
      // while the outbox's reference keeps a local reader from writing the tile in place.
      if (c.tile && c.tile->elements() > 0 && carry_small_tile(*c.tile, a)) {
        stats_.bytes_sent += c.tile->bytes();
        stats_.bytes_sent_in_activations += c.tile->bytes();
      } else if (c.tile && c.tile->elements() > 0) {
        a.handle = next_handle_++;
        a.rows = c.tile->rows();
        a.cols = c.tile->cols();
        if (same_host_.can_read(c.peer)) a.address = reinterpret_cast<std::uintptr_t>(std::as_const(*c.tile).data());
        published_.emplace(a.handle, std::move(c.tile));
      }
      send_control(c.peer, a);
    } else if (c.kind == Command::Kind::fetched) {
      send_control(c.peer, wire::Fetched{c.handle});
    } else {
      last_tile_bytes_ = c.tile->bytes();  // the thief's idea of what one tile costs to move
      if (same_host_.can_read(c.peer)) {
        collection_reads_.emplace(c.index, std::move(c.tile));
        send_control(c.peer, wire::CollectionFetch{c.index, wire::kWhereIsTag});
        continue;
      }
      const int tag = next_tag();
      MPI_Request request;
      checked(MPI_Irecv(c.tile->data(), element_count(*c.tile), MPI_DOUBLE, c.peer, tag, comm_, &request), request, "MPI_Irecv");
      post(request, Operation{Operation::Kind::collection_recv, c.peer, {}, std::move(c.tile), {}, c.index});
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
    if (!succeeded(MPI_Improbe(MPI_ANY_SOURCE, kControlTag, comm_, &flag, &matched, &status),
                   "MPI_Improbe") ||
        !flag) {
      break;
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::vector<std::byte> bytes(static_cast<std::size_t>(count));
    if (!receive_matched(matched, bytes, status.MPI_SOURCE)) break;
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

bool CommEngine::receive_mail() {
  std::lock_guard lock(mail_mutex_);
  return read_mail_locked() != 0;
}

std::size_t CommEngine::read_mail_locked() {
  if (!mail_open_) return 0;
  std::size_t received = 0;
  for (int source = 0; source < size_; ++source) {
    if (source == rank_ || !same_host_.has_mailbox(source)) continue;
    mail_.clear();
    try {
      same_host_.collect(source, mail_);
    } catch (const std::runtime_error& e) {
      fail("the mailbox from rank " + std::to_string(source) + ": " + e.what());
    }
    for (auto& bytes : mail_) {
      std::string error;
      auto message = wire::decode(bytes, error);
      auto* activation = message ? std::get_if<wire::Activate>(&*message) : nullptr;
      if (activation == nullptr || (activation->rows != 0 && activation->tile_bytes.empty())) {
        fail("malformed message in the mailbox from rank " + std::to_string(source) + ": " +
             (!message ? error
                       : activation == nullptr ? std::string("not an activation")
                                               : std::string("an activation without its tile")));
      }
      deliver_mail(source, *activation);
      ++received;
    }
  }
  return received;
}

void CommEngine::deliver_mail(int source, wire::Activate& a) {
  mail_received_.fetch_add(1, std::memory_order_relaxed);
  if (a.rows == 0) {
    for (const auto& t : a.targets) {
      if (t.to_collection) fail("control activation from rank " + std::to_string(source) +
                                " targets a collection tile");
      engine_.deliver(t.consumer, t.slot, nullptr);
    }
    return;
  }
  // Carried in the activation (decode checked that it holds rows x cols doubles).
  auto tile = std::make_shared<Tile>(a.rows, a.cols);
  last_tile_bytes_.store(tile->bytes(), std::memory_order_relaxed);
  std::memcpy(tile->data(), a.tile_bytes.data(), tile->bytes());
  mail_bytes_received_.fetch_add(tile->bytes(), std::memory_order_relaxed);
  deliver_to_targets(a.targets, std::move(tile));
}

void CommEngine::close_mail(bool read_last) {
  std::lock_guard lock(mail_mutex_);
  if (read_last) read_mail_locked();
  mail_open_ = false;
}

void CommEngine::worker_awake(bool awake) {
  if (workers_read_mail_) same_host_.attend(awake);
}

std::size_t CommEngine::read_mail_between_tasks() {
  if (!workers_read_mail_ || !same_host_.mail_waiting()) return 0;
  std::unique_lock lock(mail_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;  // the reader that holds it delivers what waits
  const std::size_t delivered = read_mail_locked();
  mail_read_by_workers_.fetch_add(delivered, std::memory_order_relaxed);
  return delivered;
}

bool CommEngine::read_mail_while_idle(const std::function<bool()>& woken) {
  if (!workers_read_mail_ || !same_host_.any_mailbox()) {
    worker_awake(false);
    return true;
  }
  const auto until = std::chrono::steady_clock::now() + worker_poll_;
  for (;;) {
    if (woken()) return false;
    // Mail waiting may be another reader's, or closed to workers (no iteration under way).
    if (read_mail_between_tasks() != 0) continue;
    if (std::chrono::steady_clock::now() >= until) break;
    std::this_thread::yield();
  }
  same_host_.attend(false);
  // A peer that saw this worker attending did not ring: what it posted is read here, waiting
  // for a reader that holds the mailboxes (it may have collected before the post).
  if (same_host_.mail_waiting()) {
    std::lock_guard lock(mail_mutex_);
    mail_read_by_workers_.fetch_add(read_mail_locked(), std::memory_order_relaxed);
  }
  return true;
}

void CommEngine::handle(int source, wire::Message&& message) {
  if (auto* a = std::get_if<wire::Activate>(&message)) {
    if (a->producer && !engine_.first_receipt(a->producer->task, a->producer->slot, a->producer->version)) {
      // A copy of a task output this rank holds, sent again by a rank re-running its
      // iteration in a replay: dropped, and a tile published for it is given back.
      if (a->rows != 0 && a->tile_bytes.empty()) send_control(source, wire::AlreadyHeld{a->handle});
      return;
    }
    if (a->rows == 0) {
      for (const auto& t : a->targets) {
        if (t.to_collection) fail("control activation from rank " + std::to_string(source) +
                                  " targets a collection tile");
        engine_.deliver(t.consumer, t.slot, nullptr);
      }
      return;
    }
    auto tile = std::make_shared<Tile>(a->rows, a->cols);
    last_tile_bytes_ = tile->bytes();
    if (!a->tile_bytes.empty()) {
      // Carried in the activation (decode checked that it holds rows x cols doubles): no
      // fetch, no answer. No transfer time is measured: the clocks of two ranks differ.
      std::memcpy(tile->data(), a->tile_bytes.data(), tile->bytes());
      stats_.bytes_received += tile->bytes();
      stats_.bytes_received_in_activations += tile->bytes();
      deliver_to_targets(a->targets, std::move(tile));
      return;
    }
    if (a->address != 0) {
      pending_reads_.push_back(
          PendingRead{source, a->handle, a->address, std::move(tile), std::move(a->targets), {}, false});
      return;
    }
    const int tag = next_tag();
    MPI_Request request;
    checked(MPI_Irecv(tile->data(), element_count(*tile), MPI_DOUBLE, source, tag, comm_, &request), request, "MPI_Irecv");
    post(request, Operation{Operation::Kind::activation_recv, source, {}, std::move(tile),
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
    checked(MPI_Isend(std::as_const(*tile).data(), element_count(*tile), MPI_DOUBLE, source, f->tag, comm_, &request), request, "MPI_Isend");
    post(request, Operation{Operation::Kind::data_send, -1, {}, std::move(tile), {}, {}});
  } else if (auto* c = std::get_if<wire::CollectionFetch>(&message)) {
    TilePtr tile;
    try {
      tile = engine_.tile_to_serve(c->tile, source);  // throws when not local, or not logged
    } catch (const std::out_of_range& e) {
      fail("rank " + std::to_string(source) + " asked for a tile in iteration " +
           std::to_string(engine_.iteration()) + ", but " + e.what());
    }
    if (c->tag == wire::kWhereIsTag) {
      if (!same_host_.can_read(source)) {
        fail("rank " + std::to_string(source) + " asked where a tile lies but cannot read here");
      }
      wire::CollectionTileAt at{c->tile, next_handle_++,
                                reinterpret_cast<std::uintptr_t>(std::as_const(*tile).data()), tile->rows(),
                                tile->cols()};
      published_.emplace(at.handle, std::move(tile));
      send_control(source, at);
      return;
    }
    MPI_Request request;
    checked(MPI_Isend(std::as_const(*tile).data(), element_count(*tile), MPI_DOUBLE, source, c->tag, comm_, &request), request, "MPI_Isend");
    post(request, Operation{Operation::Kind::data_send, -1, {}, std::move(tile), {}, {}});
  } else if (auto* held = std::get_if<wire::AlreadyHeld>(&message)) {
    if (published_.erase(held->handle) == 0) {
      fail("rank " + std::to_string(source) + " already holds unknown tile handle " +
           std::to_string(held->handle));
    }
  } else if (auto* done = std::get_if<wire::Fetched>(&message)) {
    auto it = published_.find(done->handle);
    if (it == published_.end()) {
      fail("rank " + std::to_string(source) + " read unknown tile handle " +
           std::to_string(done->handle));
    }
    stats_.bytes_sent += it->second->bytes();
    stats_.bytes_sent_same_host += it->second->bytes();
    published_.erase(it);
  } else if (auto* at = std::get_if<wire::CollectionTileAt>(&message)) {
    auto it = collection_reads_.find(at->tile);
    if (it == collection_reads_.end()) {
      fail("rank " + std::to_string(source) + " announced collection tile (" +
           std::to_string(at->tile.collection) + "," + std::to_string(at->tile.m) + "," +
           std::to_string(at->tile.n) + ") that nobody asked for");
    }
    TilePtr tile = std::move(it->second);
    collection_reads_.erase(it);
    if (tile->rows() != at->rows || tile->cols() != at->cols) {
      fail("collection tile from rank " + std::to_string(source) + " is " +
           std::to_string(at->rows) + " x " + std::to_string(at->cols) + ", expected " +
           std::to_string(tile->rows()) + " x " + std::to_string(tile->cols()));
    }
    pending_reads_.push_back(PendingRead{source, at->handle, at->address, std::move(tile), {}, at->tile, true});
  } else if (auto* q = std::get_if<wire::StealRequest>(&message)) {
    handle_steal_request(source, *q);
  } else if (auto* reply = std::get_if<wire::StealReply>(&message)) {
    handle_steal_reply(source, std::move(*reply));
  } else if (auto* invitation = std::get_if<wire::StealInvitation>(&message)) {
    handle_steal_invitation(source, *invitation);
  } else if (auto* p = std::get_if<wire::Progress>(&message)) {
    if (rank_ != 0 || !engine_.stealing()) {
      fail("progress report from rank " + std::to_string(source) +
           " reached a rank that does not count completions");
    }
    const auto from = static_cast<std::size_t>(source);
    if (retired_ranks_.at(from)) {
      fail("progress report from rank " + std::to_string(source) + ", which had retired");
    }
    retired_ranks_[from] = p->retired;
    count_completed(p->completed);
  } else {
    if (source != 0 || !engine_.stealing() || retired_) {
      fail("iteration_done from rank " + std::to_string(source) + " was not expected" +
           (retired_ ? " by a rank that retired" : ""));
    }
    global_done_ = true;
  }
}

// ---------------------------------------------------------------- global completion count

bool CommEngine::report_progress() {
  bool sent = false;
  if (engine_.local_work_done()) {
    const auto delta = engine_.take_completed_delta();
    if (delta > 0) {
      // Only on a report of tasks: before the first rank has counted them, it cannot have
      // sent this rank IterationDone. A retired rank completes no more tasks.
      const bool retiring = retires();
      if (rank_ == 0) {
        count_completed(delta);
      } else {
        send_control(0, wire::Progress{delta, retiring});
      }
      if (retiring) {
        retired_ = true;
        asking_pays_.store(false, std::memory_order_release);  // no worker wakes it to ask
        ++stats_.steal.iterations_retired;
      }
      sent = true;
    }
  }
  if (rank_ == 0 && !global_done_ && completed_everywhere_ == engine_.total_task_count()) {
    count_completed(0);
    sent = true;
  }
  return sent;
}

void CommEngine::count_completed(std::uint64_t completed) {
  completed_everywhere_ += static_cast<std::int64_t>(completed);
  const auto total = engine_.total_task_count();
  if (completed_everywhere_ > total) {
    fail("ranks report " + std::to_string(completed_everywhere_) +
         " completed tasks but the iteration has " + std::to_string(total));
  }
  if (completed_everywhere_ == total && !global_done_) {
    global_done_ = true;
    for (int r = 1; r < size_; ++r) {
      if (!retired_ranks_[static_cast<std::size_t>(r)]) send_control(r, wire::IterationDone{});
    }
  }
}

bool CommEngine::may_enter_barrier(bool work_done, bool quiet) const {
  if (!(work_done && quiet && published_.empty())) return false;
  if (!engine_.stealing()) return true;
  // Idle ranks keep stealing until every task of the iteration has run somewhere, unless
  // they retired.
  return (global_done_ || retired_) && !steal_outstanding_;
}

void CommEngine::deliver_to_targets(std::vector<wire::Target>& targets, TilePtr tile) {
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const auto& t = targets[i];
    TilePtr copy = (i + 1 == targets.size()) ? std::move(tile) : tile;
    if (t.to_collection) {
      engine_.write_back(t.tile, std::move(copy));
    } else {
      engine_.deliver(t.consumer, t.slot, std::move(copy));
    }
  }
}

bool CommEngine::perform_pending_reads() {
  if (pending_reads_.empty()) return false;
  // Small tiles are read here, at once: handing one to the copy thread would put a thread's
  // wake-up, which costs more than the copy, on the path of every dependency it carries.
  std::size_t handed = 0;
  for (std::size_t i = 0; i < pending_reads_.size(); ++i) {
    auto& r = pending_reads_[i];
    if (r.tile->bytes() > kReadHereBytes) {
      if (handed != i) pending_reads_[handed] = std::move(r);
      ++handed;
      continue;
    }
    std::string error;
    if (!same_host_.read(r.peer, r.address, r.tile->data(), r.tile->bytes(), error) &&
        !peer_lost_after(error)) {
      fail(error);
    }
    read_done(r, last_read_here_);
    send_control(r.peer, wire::Fetched{r.handle});
  }
  pending_reads_.resize(handed);
  if (handed == 0) return true;
  copies_in_flight_.fetch_add(static_cast<int>(handed), std::memory_order_acq_rel);
  {
    std::lock_guard lock(copy_mutex_);
    for (auto& r : pending_reads_) copy_queue_.push_back(std::move(r));
  }
  pending_reads_.clear();
  copy_cv_.notify_one();
  return true;
}

void CommEngine::read_done(PendingRead& r, std::chrono::steady_clock::time_point& last_read_done) {
  copied_bytes_.fetch_add(r.tile->bytes(), std::memory_order_relaxed);
  // Charged like an MPI receive: since it was announced or since the previous copy ended.
  const auto copied = std::chrono::steady_clock::now();
  engine_.transfer_measured(
      r.peer, r.tile->bytes(),
      std::chrono::duration<double>(copied - std::max(r.announced, last_read_done)).count());
  last_read_done = copied;
  if (r.to_collection) {
    engine_.collection_tile_arrived(r.index, std::move(r.tile));
  } else {
    deliver_to_targets(r.targets, std::move(r.tile));
  }
}

void CommEngine::copy_loop() {
  const ThreadCpuTime cpu([this](double seconds) { copier_cpu_seconds_.fetch_add(seconds); });
  std::vector<PendingRead> batch;
  std::chrono::steady_clock::time_point last_copy_done{};
  for (;;) {
    {
      std::unique_lock lock(copy_mutex_);
      copy_cv_.wait(lock, [&] { return copier_stop_ || !copy_queue_.empty(); });
      if (copy_queue_.empty()) return;  // stop requested and nothing left
      batch.swap(copy_queue_);
    }
    for (auto& r : batch) {
      std::string error;
      if (!same_host_.read(r.peer, r.address, r.tile->data(), r.tile->bytes(), error)) {
        {
          std::lock_guard lock(copy_mutex_);
          if (copy_error_.empty()) copy_error_ = error;
        }
        wake_self();
        continue;  // the communication thread aborts the job with the error
      }
      read_done(r, last_copy_done);
      {
        std::lock_guard lock(outbox_mutex_);
        Command done{Command::Kind::fetched, r.peer, nullptr, {}, {}};
        done.handle = r.handle;
        outbox_.push_back(std::move(done));
      }
      copies_in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      wake_self();
    }
    batch.clear();
  }
}

bool CommEngine::complete_operations() {
  if (requests_.empty()) return false;
  thread_local std::vector<int> indices;
  indices.resize(requests_.size());
  int done = 0;
  thread_local std::vector<MPI_Status> statuses;
  statuses.resize(requests_.size());
  const int rc = MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &done,
                              indices.data(), statuses.data());
  if (rc != MPI_SUCCESS) {
    // A transfer with a dead peer (MPI_ERR_IN_STATUS names which): the iteration is abandoned
    // at the end of this pass, and what arrived with it is not delivered.
    std::string first = "MPI_Testsome";
    for (int d = 0; rc == MPI_ERR_IN_STATUS && d < done; ++d) {
      const MPI_Status& st = statuses[static_cast<std::size_t>(d)];
      if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) {
        const auto& op = operations_[static_cast<std::size_t>(indices[static_cast<std::size_t>(d)])];
        first = "MPI_Testsome (a transfer with rank " + std::to_string(op.peer) + ")";
        return !succeeded(st.MPI_ERROR, first.c_str());
      }
    }
    return !succeeded(rc, first.c_str());
  }
  if (done == MPI_UNDEFINED || done == 0) return false;
  for (int d = 0; d < done; ++d) {
    auto& op = operations_[static_cast<std::size_t>(indices[static_cast<std::size_t>(d)])];
    if (op.kind != Operation::Kind::control_send) --mpi_transfers_;
    if (is_receive(op)) {
      // Tiles asked for together arrive one after the other: each is charged the time since
      // it was asked for or since the previous one arrived, whichever is later, so that the
      // model learns what one more tile costs rather than the length of the line.
      --mpi_receives_;
      const auto now = std::chrono::steady_clock::now();
      engine_.transfer_measured(
          op.peer, op.tile->bytes(),
          std::chrono::duration<double>(now - std::max(op.posted, last_receive_done_)).count());
      last_receive_done_ = now;
    }
    switch (op.kind) {
      case Operation::Kind::control_send: same_host_.ring(op.peer); break;
      case Operation::Kind::data_send: stats_.bytes_sent += op.tile->bytes(); break;
      case Operation::Kind::activation_recv:
        stats_.bytes_received += op.tile->bytes();
        deliver_to_targets(op.targets, std::move(op.tile));
        break;
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
  const ThreadCpuTime cpu([this](double seconds) { stats_.comm_cpu_seconds += seconds; });
  MPI_Request barrier = MPI_REQUEST_NULL;
  bool barrier_posted = false;
  bool barrier_done = false;
  const bool stealing = engine_.stealing();
  const bool counts_completions = stealing && rank_ == 0;
  for (;;) {
    // A task that what arrives makes ready may be run on this thread at the end of the pass
    // (Engine::run_held_task) instead of waking a worker.
    engine_.set_handling_messages(true);
    // The same-host mailboxes first: what a worker of this host wrote is delivered before the
    // thread enters MPI (whose progress engine polls), and a pass that delivered something
    // does not sleep.
    bool progressed = receive_mail();
    progressed = drain_outbox() || progressed;
    progressed = receive_control() || progressed;
    // Tile copies wait until every control message of this pass is handled, so that a
    // steal request is not answered behind them.
    progressed = perform_pending_reads() || progressed;
    {
      std::lock_guard lock(copy_mutex_);
      // A same-host read from a peer that died fails too: that is a loss, not a bug.
      if (!copy_error_.empty() && !peer_lost_after(copy_error_)) fail(copy_error_);
    }
    progressed = complete_operations() || progressed;
    engine_.set_handling_messages(false);
    progressed = engine_.run_held_task() || progressed;
    const auto now = std::chrono::steady_clock::now();
    // A peer gone, or an MPI call that failed (a transfer with the dead, a collective over
    // them): the iteration is abandoned; the engine finds out who is lost and cleans up.
    if (now - last_watch_poll_ >= kWatchPollInterval) {
      last_watch_poll_ = now;
      watch_->poll();
    }
    if (!watch_->lost().empty() || !mpi_failure_.empty()) {
      if (barrier_posted && !barrier_done) abandoned_requests_.push_back(barrier);
      close_mail(false);
      abandoned_ = true;
      return;
    }
    if (stealing) {
      progressed = report_progress() || progressed;
      progressed = maybe_send_steal_request(now) || progressed;
      if (engine_.offloading()) progressed = maybe_invite_thieves(now) || progressed;
    }

    const bool work_done = engine_.local_work_done();
    // Before the outbox: the copy thread queues its Fetched answer, then counts the copy
    // done, so a finished count guarantees the answer is seen in the outbox.
    const bool copies_done = copies_in_flight_.load(std::memory_order_acquire) == 0;
    bool outbox_empty = false;
    {
      std::lock_guard lock(outbox_mutex_);
      outbox_empty = outbox_.empty();
    }
    const bool quiet = copies_done && outbox_empty && requests_.empty() && collection_reads_.empty();
    if (!barrier_posted && may_enter_barrier(work_done, quiet)) {
      succeeded(MPI_Ibarrier(comm_, &barrier), "MPI_Ibarrier");
      barrier_posted = true;
      progressed = true;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_) same_host_.ring(r);  // their barrier needs their progress
      }
    }
    if (barrier_posted && !barrier_done) {
      int flag = 0;
      barrier_done = succeeded(MPI_Test(&barrier, &flag, MPI_STATUS_IGNORE), "MPI_Test (barrier)") &&
                     flag != 0;
    }
    // A collection tile asked for after this rank entered the barrier is published then;
    // its reader's Fetched may trail the barrier, and must not reach the next iteration.
    // Nor may a report: every rank sent its last before it entered the barrier, and the
    // first rank, when it retired, counts them all before it leaves.
    if (barrier_done && quiet && published_.empty() && (!counts_completions || global_done_)) {
      // A write-back a peer's worker posted before that peer entered the barrier is in the
      // mailbox by now, and belongs to this iteration. What comes later is the next one's.
      close_mail(true);
      break;
    }

    if (progressed) {
      last_progress_ = now;
      continue;
    }
    // For a while after a message, poll instead of sleeping: the next one of a chain of
    // dependencies then finds the thread awake (RuntimeOptions::comm_poll_us).
    if (now - last_progress_ < poll_after_progress_) {
      std::this_thread::yield();
      continue;
    }
    // The first rank, retired, may see the barrier complete before the last reports.
    const int sleep_us = sleep_budget_us(
        now, barrier_posted && (!barrier_done || (counts_completions && !global_done_)));
    if (same_host_.any_doorbell()) {
      same_host_.wait(std::chrono::microseconds(sleep_us));
      std::lock_guard lock(outbox_mutex_);
      wake_ = false;
    } else {
      std::unique_lock lock(outbox_mutex_);
      wake_cv_.wait_for(lock, std::chrono::microseconds(sleep_us),
                        [&] { return wake_ || !outbox_.empty(); });
      wake_ = false;
    }
  }
}

int CommEngine::sleep_budget_us(std::chrono::steady_clock::time_point now, bool ending) {
  // Poll often only while something is expected soon. Tiles moving through MPI need the
  // progress engine on both sides. Without doorbells from every peer, a message can only
  // be noticed by polling, so poll faster while an answer is due (a published tile's
  // fetch, a steal reply, a thief's request to a rank with tasks to spare). With them,
  // peers ring and polling only backs the doorbells up. Local work always rings at once.
  const bool rung = same_host_.all_have_doorbells();
  int sleep_us = rung ? std::max(max_sleep_us_, kDoorbellIdleSleepUs) : max_sleep_us_;
  if (mpi_transfers_ > 0) {
    sleep_us = kTransferPollUs;
  } else if (!requests_.empty() || ending) {
    sleep_us = std::min(sleep_us, rung ? kDoorbellBackupPollUs : kTransferPollUs);
  } else if (!published_.empty() && !rung) {
    sleep_us = std::min(sleep_us, kFetchExpectedPollUs);
  }
  if (engine_.stealing() && !global_done_ && !retired_) {
    if (!rung && engine_.has_tasks_to_spare()) {
      sleep_us = std::min(sleep_us, steal_policy_.options().victim_poll_us);
    }
    if (steal_outstanding_) {
      sleep_us = std::min(sleep_us, rung ? kDoorbellBackupPollUs : kTransferPollUs);
    } else if (asking_pays_.load(std::memory_order_acquire) && engine_.roots_queued() &&
               engine_.starving()) {
      // Wake when the policy's backoff runs out. Not while asking does not pay: the rule's
      // inputs change with arrivals and completions, which wake this thread anyway.
      const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(
          steal_policy_.next_ask_at() - steal_time(now));
      sleep_us = std::clamp(static_cast<int>(wait.count()), 1, sleep_us);
    }
  }
  return sleep_us;
}

}  // namespace bellows::runtime
