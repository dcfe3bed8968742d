#pragma once
// The communication thread of a rank: the only thread that calls MPI during an
// iteration. It carries activations, serves fetches (the handshake of John & Milthorpe,
// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
// CCGrid 2024, section III-B) and detects the end of the iteration.
//
// It never spins a core while idle: it sleeps on a condition variable, woken at once
// by local work (an activation to send, a tile to fetch); it polls MPI every few
// microseconds while transfers are in flight or a published tile awaits its fetch,
// and otherwise every max_sleep_us for unsolicited messages. Only for
// RuntimeOptions::comm_poll_us after a pass that did something does it poll without
// sleeping (yielding between passes). A tile of at most RuntimeOptions::eager_tile_bytes
// travels in its activation (wire::Activate::tile_bytes) and needs neither fetch nor answer.
// Such an activation (or a control token) for a rank of the same host does not pass through
// this thread at all: the worker that completed the task writes it into the peer's mailbox
// and rings the peer (RuntimeOptions::same_host_mailboxes, same_host.hpp); this thread reads
// its own mailboxes at every pass.
//
// With work stealing on (John & Milthorpe, section IV) it is also the rank's stealing thread:
// it sends the rank's single outstanding steal request when the rank starves, serves
// the requests of other ranks from the device queue (one thread per rank, so requests
// are served one at a time), and forwards what it cannot satisfy. What to do (when to
// ask, whom, how much to give, where to forward) is StealPolicy's choice
// (steal_policy.hpp); this thread carries it out. The end of an iteration then needs a
// global count: every rank reports its completed tasks to the first rank, which
// announces when all tasks of the iteration have run. A rank whose own tasks have all run,
// with no request out, when no request could pay (StealPolicy::asking_pays) or it never
// starves (thresholds of 0), retires: it says so on its last report (the first rank, to
// itself) and enters the barrier at once, without waiting for that announcement, which the
// first rank then does not send it. Every rank has sent its last report before it enters the
// barrier, but MPI orders no message against a collective: the first rank leaves the
// iteration only once it has counted them all.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mpi.h>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bellows/runtime/options.hpp"
#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/steal_policy.hpp"
#include "bellows/runtime/task.hpp"
#include "same_host.hpp"
#include "wire.hpp"

namespace bellows::runtime {

class Engine;
class PeerWatch;

class CommEngine {
 public:
  /// Collective over comm (probes what ranks on the same host can share), under
  /// `setup_watch` when given: a member lost then throws MembersLost (same_host.hpp).
  CommEngine(Engine& engine, MPI_Comm comm, int max_sleep_us, bool same_host_transport,
             PeerWatch* setup_watch = nullptr);
  ~CommEngine();
  CommEngine(const CommEngine&) = delete;
  CommEngine& operator=(const CommEngine&) = delete;

  /// Starts the thread for one iteration. `watch` (armed) notices dead peers; the thread
  /// tests it every half millisecond and abandons the iteration when a peer is lost or an
  /// MPI call fails.
  void start(PeerWatch& watch);
  /// Waits until the iteration is over on every rank (all local tasks ran, every tile
  /// this rank published was fetched, every transfer completed, and an MPI_Ibarrier
  /// among all ranks completed), or abandoned (abandoned()), then joins the thread.
  void join();
  /// After join(): the thread stopped because a peer was lost or an MPI call failed.
  [[nodiscard]] bool abandoned() const noexcept { return abandoned_; }
  /// The first MPI call that failed in this iteration and its error; empty: none.
  [[nodiscard]] const std::string& mpi_failure() const noexcept { return mpi_failure_; }
  /// After an abandoned iteration, with the thread joined: cancels the receives still
  /// posted, frees the sends (their buffers are kept until the process exits, since MPI
  /// may still read them) and drops the iteration's messages, published tiles and reads.
  void abandon();

  // Thread-safe requests from workers.

  /// Tells `dest` that `tile` (nullptr: a control token) is ready for `targets`: through
  /// `dest`'s mailbox on the calling thread when it can (see the top of this file), else
  /// through the communication thread. `producer`: what made the tile and when, which the
  /// receiver checks against what it holds (Engine::first_receipt) and drops a copy of.
  void send_activation(int dest, TilePtr tile, std::vector<wire::Target> targets,
                       std::optional<wire::Producer> producer = std::nullopt);
  /// Fetches collection tile `index` of shape rows x cols from its owner.
  void fetch_collection_tile(const TileIndex& index, int owner, int rows, int cols);
  /// A barrier over the communicator that sleeps instead of spinning in MPI (MPICH ch3's
  /// blocking calls poll without pause, and ranks sharing cores then leave a barrier
  /// milliseconds apart). Collective; only while the thread is not running. False when a
  /// peer was lost (`watch`) or the barrier failed (mpi_failure()): it is left pending.
  [[nodiscard]] bool barrier_without_spinning(PeerWatch& watch);
  /// Wakes the thread (e.g. the last local task completed).
  void notify();

  // Workers that read the same-host mailboxes (RuntimeOptions::workers_read_mail); each is
  // called by a CPU worker's own thread, and does nothing with the option off.

  /// The worker is awake (true) or about to sleep or end (false): while a worker is awake,
  /// peers put mail for this rank without ringing it (SameHost::attend).
  void worker_awake(bool awake);
  /// Between two tasks: delivers what the mailboxes hold, unless another thread is reading
  /// them now (which then delivers it); returns how many messages it delivered.
  std::size_t read_mail_between_tasks();
  /// No task is ready: reads the mailboxes until `woken()`, or for RuntimeOptions::worker_poll_us,
  /// yielding the core between looks. Returns false when woken (still awake), true when it
  /// gave up (worker_awake(false) done, and what arrived until then delivered).
  bool read_mail_while_idle(const std::function<bool()>& woken);
  /// Wakes the thread because the rank starves, unless a steal request is already out or
  /// the rank backs off after an empty answer (cheap: atomic loads and a clock read).
  void notify_starving();

  RankStats take_stats();
  /// Between iterations: the ranks this rank may steal from and forward requests to from now
  /// on (StealPolicy::confine_to), e.g. after the teams changed.
  void confine_steals(std::vector<int> partners) { steal_policy_.confine_to(std::move(partners)); }

 private:
  struct Command {
    enum class Kind : std::uint8_t { activate, collection_fetch, fetched } kind;
    int peer = 0;
    TilePtr tile;
    std::vector<wire::Target> targets;
    TileIndex index{};
    std::uint64_t handle = 0;  // fetched: the peer's handle of the tile copied
    std::optional<wire::Producer> producer = std::nullopt;  // activate: named on the wire
  };
  struct Operation {
    enum class Kind : std::uint8_t { control_send, data_send, activation_recv, collection_recv };
    Kind kind;
    int peer = -1;  // control sends: rung again once MPI has delivered the message; receives: the sender
    std::vector<std::byte> buffer;
    TilePtr tile;
    std::vector<wire::Target> targets;
    TileIndex index{};
    // Receives: when the tile was asked for (the cost model's transfer time ends at arrival).
    std::chrono::steady_clock::time_point posted = std::chrono::steady_clock::now();
  };

  void run();
  void reset_iteration_state();
  void wake_self();
  /// How long the thread may sleep; `ending`: the end of the iteration is under way (the
  /// barrier, or on the first rank the last reports) and messages for it are due.
  [[nodiscard]] int sleep_budget_us(std::chrono::steady_clock::time_point now, bool ending);
  /// Same host: a tile to copy from a peer, and where it goes.
  struct PendingRead {
    int peer;
    std::uint64_t handle;
    std::uint64_t address;
    TilePtr tile;
    std::vector<wire::Target> targets;  // task slots or write-backs
    TileIndex index;                    // collection tile, when to_collection
    bool to_collection;
    // When the tile was announced: the cost model's transfer time ends when it is copied.
    std::chrono::steady_clock::time_point announced = std::chrono::steady_clock::now();
  };
  /// Carries out this pass's same-host reads: those of at most kReadHereBytes at once, on
  /// this thread, the others handed to the copy thread.
  bool perform_pending_reads();
  /// After the bytes of `r` were copied: the cost model's transfer time, the delivery.
  void read_done(PendingRead& r, std::chrono::steady_clock::time_point& last_read_done);
  /// Same-host tiles up to this size are read by the communication thread itself.
  static constexpr std::size_t kReadHereBytes = 4096;
  /// The copy thread: copies peers' tiles (process_vm_readv) so that the communication
  /// thread stays free to answer messages, e.g. steal requests, while bytes move.
  void copy_loop();
  /// Where to deliver a tile that arrived for `targets`.
  void deliver_to_targets(std::vector<wire::Target>& targets, TilePtr tile);
  bool drain_outbox();
  /// Tiles of at most eager_tile_bytes_ go in their activation: copies `tile`'s shape and
  /// bytes into `a` and returns true, or returns false for a larger one. A tile without
  /// elements is a control token (rows 0) and needs nothing.
  [[nodiscard]] bool carry_small_tile(const Tile& tile, wire::Activate& a) const;
  /// Handles what peers of this host wrote into this rank's mailboxes; true when anything.
  /// The communication thread's: waits for a worker that is reading them.
  bool receive_mail();
  /// receive_mail() with mail_mutex_ held, returning how many messages it delivered: none
  /// when the mailboxes are closed (no iteration under way on the communication thread).
  std::size_t read_mail_locked();
  /// An activation from a mailbox (its tile carried, or a control token), delivered on the
  /// calling thread.
  void deliver_mail(int source, wire::Activate& activation);
  /// Closes the mailboxes to workers until the next start(), reading them a last time first
  /// when `read_last`.
  void close_mail(bool read_last);
  // Work stealing and the global end-of-iteration count.
  bool maybe_send_steal_request(std::chrono::steady_clock::time_point now);
  /// Sends a request for tasks to `victim` and starts waiting for its answer.
  void send_steal_request(int victim, const StealPolicy::ThiefView& view,
                          std::chrono::steady_clock::time_point now);
  /// Proactive offloading: while this rank's work drifts past the iteration's plan, invites
  /// the next rank the plan left least loaded to steal from it (Engine::drift_invitee), at
  /// pace OffloadPolicy::may_invite sets.
  bool maybe_invite_thieves(std::chrono::steady_clock::time_point now);
  void handle_steal_invitation(int source, const wire::StealInvitation& invitation);
  void handle_steal_request(int source, const wire::StealRequest& request);
  void handle_steal_reply(int source, wire::StealReply&& reply);
  void finish_steal_request(std::chrono::steady_clock::time_point now);
  /// What the steal policy weighs, at `now` (the ready count only when it can matter).
  [[nodiscard]] StealPolicy::ThiefView thief_view(StealPolicy::Time now) const;
  /// The cost model's part of the view: what a request costs and could bring.
  void add_costs(StealPolicy::ThiefView& view) const;
  /// Whether this rank, its own tasks all run, retires from stealing for the rest of the
  /// iteration (see the top of this file).
  [[nodiscard]] bool retires() const;
  bool report_progress();
  void count_completed(std::uint64_t completed);
  [[nodiscard]] bool may_enter_barrier(bool work_done, bool quiet) const;
  bool receive_control();
  bool complete_operations();
  void handle(int source, wire::Message&& message);
  void send_control(int dest, const wire::Message& message);
  void post(MPI_Request request, Operation&& op);
  [[nodiscard]] static bool is_receive(const Operation& op);
  int next_tag();
  /// A tile's element count, as MPI counts its doubles.
  [[nodiscard]] static int element_count(const Tile& t) { return static_cast<int>(t.elements()); }
  /// `now` on StealPolicy's clock.
  [[nodiscard]] static StealPolicy::Time steal_time(std::chrono::steady_clock::time_point now) {
    return std::chrono::duration_cast<StealPolicy::Time>(now.time_since_epoch());
  }
  [[noreturn]] void fail(const std::string& what);
  /// After a same-host read failed with `error`: true (mpi_failure_ set) when the watch finds
  /// a peer lost within 100 ms, so that the iteration is abandoned rather than the job.
  bool peer_lost_after(const std::string& error);
  /// False, and mpi_failure_ set (the first failure only), when `code` is an error.
  bool succeeded(int code, const char* call);
  /// succeeded() for a call that starts `request`, which becomes MPI_REQUEST_NULL on error.
  void checked(int code, MPI_Request& request, const char* call);
  /// Receives the control message MPI_Improbe matched from `source` into `bytes`; false when
  /// it failed or `source` was found lost before its data came (the iteration is abandoned).
  bool receive_matched(MPI_Message& matched, std::vector<std::byte>& bytes, int source);
  /// Sends and uncancellable receives abandoned with a peer lost: their buffers, kept until
  /// the process exits.
  static std::vector<Operation>& kept_transfer_buffers();

  Engine& engine_;
  MPI_Comm comm_;
  PeerWatch* watch_ = nullptr;
  std::chrono::steady_clock::time_point last_watch_poll_{};
  std::atomic<bool> abandoned_{false};
  std::string mpi_failure_;  // communication thread during an iteration
  /// Collectives' requests left pending by an abandoned iteration (never tested again).
  std::vector<MPI_Request> abandoned_requests_;
  int rank_ = 0;
  int max_sleep_us_;
  /// Tiles of at most this many bytes travel in their activation (RuntimeOptions::eager_tile_bytes).
  std::size_t eager_tile_bytes_;
  /// How long the thread polls after a pass that did something (RuntimeOptions::comm_poll_us).
  std::chrono::steady_clock::duration poll_after_progress_;
  std::chrono::steady_clock::time_point last_progress_{};  // communication thread only
  /// Workers write small activations for ranks of this host into their mailboxes
  /// (RuntimeOptions::same_host_mailboxes).
  bool mailboxes_;
  // What workers sent by mailbox, added to the statistics by take_stats().
  std::atomic<std::uint64_t> mailbox_messages_sent_{0};
  std::atomic<std::uint64_t> mailbox_bytes_sent_{0};
  /// Workers read the mailboxes too (RuntimeOptions::workers_read_mail), and poll them this
  /// long before they sleep (RuntimeOptions::worker_poll_us).
  bool workers_read_mail_;
  std::chrono::steady_clock::duration worker_poll_;
  /// One reader of the mailboxes at a time: the communication thread or a worker.
  std::mutex mail_mutex_;
  std::vector<std::vector<std::byte>> mail_;  // guarded by mail_mutex_: read, not yet handled
  bool mail_open_ = false;                    // guarded by mail_mutex_: an iteration is under way
  // What arrived by mailbox, added to the statistics by take_stats().
  std::atomic<std::uint64_t> mail_received_{0};
  std::atomic<std::uint64_t> mail_bytes_received_{0};
  std::atomic<std::uint64_t> mail_read_by_workers_{0};

  std::mutex outbox_mutex_;
  std::condition_variable wake_cv_;
  std::vector<Command> outbox_;
  bool wake_ = false;

  std::thread thread_;
  // State below is touched by the communication thread only.
  std::vector<MPI_Request> requests_;
  std::vector<Operation> operations_;
  std::unordered_map<std::uint64_t, TilePtr> published_;
  std::unordered_map<TileIndex, TilePtr> collection_reads_;  // same host: awaiting CollectionTileAt
  std::vector<PendingRead> pending_reads_;
  std::chrono::steady_clock::time_point last_read_here_{};  // the latest read of a small tile
  std::thread copier_;
  std::mutex copy_mutex_;
  std::condition_variable copy_cv_;
  std::vector<PendingRead> copy_queue_;  // guarded by copy_mutex_
  bool copier_stop_ = false;             // guarded by copy_mutex_
  std::string copy_error_;               // guarded by copy_mutex_
  std::atomic<int> copies_in_flight_{0};
  std::atomic<std::uint64_t> copied_bytes_{0};
  std::atomic<double> copier_cpu_seconds_{0.0};
  int mpi_transfers_ = 0;  // tile payloads moving through MPI (need both sides to poll)
  int mpi_receives_ = 0;   // of which coming to this rank
  std::atomic<std::uint64_t> last_tile_bytes_{0};  // the latest tile announced to or asked for by this rank
  std::chrono::steady_clock::time_point last_receive_done_{};  // the latest MPI tile receive
  SameHost same_host_;
  std::uint64_t next_handle_ = 1;
  int tag_cursor_ = 0;
  RankStats stats_;

  int size_ = 1;
  StealPolicy steal_policy_;
  // Thief side: at most one request out at any time.
  // Written by the communication thread only; workers read it to stay quiet while a
  // request is out.
  std::atomic<bool> steal_outstanding_{false};
  // Requests sent and not yet finished, counted apart from steal_outstanding_ so that
  // RankStats' max_outstanding measures what was in flight (communication thread only).
  std::uint64_t requests_in_flight_ = 0;
  // When the thief's backoff ends (StealPolicy::next_ask_at, nanoseconds on the steal
  // clock; 0: no backoff), for workers to stay quiet until then.
  std::atomic<std::int64_t> next_ask_ns_{0};
  // Whether asking pays (StealPolicy::asking_pays) at the latest full look, for workers
  // and the sleep budget: while it does not, a starving rank is not woken to ask.
  std::atomic<bool> asking_pays_{true};
  std::uint32_t steal_request_id_ = 0;
  std::chrono::steady_clock::time_point steal_sent_at_{};
  bool final_reply_seen_ = false;
  std::uint16_t partial_replies_expected_ = 0;
  std::uint16_t partial_replies_seen_ = 0;
  int final_reply_hops_ = 0;
  std::uint64_t tasks_this_request_ = 0;
  // Thief side: the rank whose StealInvitation the next request answers (-1: none).
  int invited_by_ = -1;
  // Victim side: when this rank last sent a StealInvitation.
  std::chrono::steady_clock::time_point invited_at_{};
  // End of iteration with stealing: the first rank counts completions of all ranks.
  bool global_done_ = false;
  bool retired_ = false;  // this rank stopped asking and entered the barrier early
  std::int64_t completed_everywhere_ = 0;  // first rank only
  std::vector<bool> retired_ranks_;        // first rank only: who gets no IterationDone
};

}  // namespace bellows::runtime
