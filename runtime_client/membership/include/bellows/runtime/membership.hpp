#pragma once
// Membership of a running job: grow the job's communicator by spawning processes and
// shrink it by letting ranks leave, with MPI dynamic processes (written for and tested on
// MPICH 4.0 with the ch3:nemesis device and the hydra process manager).
//
// Rules this code is built on:
// - A process can leave a job only if no other process of its MPI_COMM_WORLD stays (its
//   MPI_Finalize would wait for them, and exiting without MPI_Finalize makes mpiexec kill
//   the job). So grow spawns one process per MPI_Comm_spawn call: each new rank is an
//   MPI world of its own and can later leave alone.
// - In MPICH ch3 a connection to a process of another MPI world is closed only when the
//   last communicator that uses it is released with MPI_Comm_disconnect. The
//   intercommunicators of MPI_Comm_spawn and the intermediate communicators of a grow
//   are therefore disconnected as soon as the merge is done, so that between calls the
//   job communicator is the only communicator of this module that ties ranks together.
//   (Tried on MPICH 4.0.2 ch3: with a spawn intercommunicator kept, or with the old
//   communicator released by MPI_Comm_free, a leaver's MPI_Finalize waits until the
//   survivors finalize, even while they are inside MPI calls.)
// - ch3 keeps one table of connections per communicator, shared by duplicates, and a
//   connection stays open while any table that lists it is alive. A communicator made
//   from a group (MPI_Comm_create, MPI_Comm_split) whose ranks are 0..n-1 of the old one
//   in order does not get a table of its own: it shares the old communicator's table,
//   the leavers' connections included (ch3u_comm.c, dup_vcrt, compares the mapping but
//   not the sizes). That is the case whenever the leavers are the highest ranks; a leaver
//   then waits in MPI_Comm_disconnect, polling a core, until the survivors release their
//   communicator at the end of the job. So shrink builds the survivors' communicator in
//   rotated order in that case (never the prefix order, so it gets a table of its own)
//   and puts it back in order from there. With its own table, the survivors'
//   disconnect of the old communicator closes every connection to the leavers (both
//   sides are inside MPI_Comm_disconnect, so both make progress) and the leavers exit
//   within milliseconds while the job goes on.
//
// Error handling: while a function of this module runs, the communicators it uses are set
// to MPI_ERRORS_RETURN (a caller's communicator gets its own handler back afterwards); a
// failed call throws MpiError naming the call and carrying MPI's error string. The
// communicators handed out carry MPI_ERRORS_ARE_FATAL, MPI's default. After an MpiError
// the job is in an unknown state (MPI has no recovery here): call MPI_Abort.
// Bad arguments throw std::invalid_argument on every rank before any communication that
// could leave ranks waiting, as long as every rank passed the same arguments.

#include <mpi.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace bellows::runtime {

/// A failed MPI call: what() reads "MPI_Comm_spawn failed: <MPI error string>".
class MpiError : public std::runtime_error {
 public:
  MpiError(std::string call, int code);
  /// The MPI function that failed, e.g. "MPI_Intercomm_merge".
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  /// The MPI error code it returned.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  std::string call_;
  int code_;
};

/// Owns an MPI communicator handle.
///
/// disconnect() is the normal way to let go of it: MPI_Comm_disconnect waits for pending
/// traffic and, in MPICH ch3, closes the connections to processes of other MPI worlds
/// that no other communicator uses, which a leaving process needs. The destructor only
/// calls MPI_Comm_free (local, cannot hang while unwinding after an error), and nothing
/// at all once MPI is finalized, nor for MPI_COMM_WORLD or MPI_COMM_SELF.
class Communicator {
 public:
  Communicator() noexcept = default;
  /// Takes ownership of comm (MPI_COMM_NULL gives an empty object).
  explicit Communicator(MPI_Comm comm) noexcept : comm_(comm) {}
  ~Communicator();
  Communicator(Communicator&& other) noexcept : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  [[nodiscard]] MPI_Comm get() const noexcept { return comm_; }
  [[nodiscard]] explicit operator bool() const noexcept { return comm_ != MPI_COMM_NULL; }
  /// Gives up ownership without touching the communicator.
  [[nodiscard]] MPI_Comm release() noexcept { return std::exchange(comm_, MPI_COMM_NULL); }
  /// MPI_Comm_disconnect; collective over the communicator (both groups of an
  /// intercommunicator). Leaves the object empty, also when it throws MpiError.
  void disconnect();

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

/// What to spawn when a job grows. Only rank 0 of the growing communicator reads it.
/// The path of this process's executable (/proc/self/exe), what a job that grows by
/// spawning copies of itself puts in SpawnSpec::command; empty when it cannot be read.
[[nodiscard]] std::string current_executable();

struct SpawnSpec {
  /// The executable: a path, or a name looked up in PATH.
  std::string command;
  /// Its arguments, without argv[0]; none may contain a newline.
  std::vector<std::string> args;
  /// Environment variables to add, as (name, value). MPICH's process manager (hydra)
  /// ignores every spawn info key but path, wdir, host(s) and hostfile, so they are
  /// passed by spawning /usr/bin/env NAME=VALUE... COMMAND ARGS, which execs COMMAND in
  /// the same process. Names must not be empty or contain '='.
  std::vector<std::pair<std::string, std::string>> env;
  /// The host to start the processes on (the "host" info key); empty: hydra's choice.
  /// It must resolve: hydra hangs after an ssh error on an unknown host.
  std::string host;
};

/// Timings of one grow, as seen by the calling rank. A rank spawned during the grow
/// counts from its own start (join_parent()).
struct GrowReport {
  int old_size = 0;  ///< size of the job communicator before the grow
  int new_size = 0;  ///< and after
  /// Ordinal of this process among the processes spawned by the grow (0 for the first
  /// spawned), -1 on ranks that were members before.
  int spawn_ordinal = -1;
  /// MPI_Comm_spawn of each process, by ordinal (the ranks spawn in parallel; every
  /// rank that was a member gets all of them, spawned processes none).
  std::vector<double> spawn_seconds;
  /// Members: from the end of their own spawns (a grow by accept: from the call) until the
  /// new processes were one group and ready to join (exchanging ports included). New
  /// processes: 0.
  double wait_seconds = 0.0;
  /// The spawned processes forming their own communicator (pairwise accept/connect and
  /// merge rounds), as spawned process 0 timed it; known on every rank.
  double group_seconds = 0.0;
  /// Joining the spawned group to the job: the one MPI_Comm_accept / MPI_Comm_connect
  /// and MPI_Intercomm_merge (one entry).
  std::vector<double> merge_seconds;
  /// Releasing the intermediate communicators (one entry).
  std::vector<double> disconnect_seconds;
  /// A grow by accept, on the job's rank 0: each one-to-one MPI_Comm_accept of a new process,
  /// by ordinal (with the wait for the process to connect, when it had not yet).
  std::vector<double> accept_seconds;
  /// A grow by ordinals: for each file of the exchange this process waited for, from its
  /// writing (the writer's steady clock), or from this process starting to wait if later, to
  /// this process reading it (steady clocks: comparable on one host only).
  std::vector<double> handoff_seconds;
  double total_seconds = 0.0;
};

/// Timings of one shrink, as seen by the calling rank.
struct ShrinkReport {
  int old_size = 0;
  int new_size = 0;                 ///< size of the survivors' communicator
  bool left = false;                ///< true on the ranks that left
  double check_seconds = 0.0;       ///< the one allreduce that checks the arguments agree
  double create_seconds = 0.0;      ///< building the survivors' communicator (MPI_Comm_create)
  double disconnect_seconds = 0.0;  ///< MPI_Comm_disconnect of the old communicator
  double total_seconds = 0.0;
  /// Ranks of the old communicator lost around the barrier that confirms the survivors'
  /// communicator, once a rank that stays had passed the survivors' checkpoint barrier (the
  /// shrink's point of no return): the shrink stands without them, and the old communicator
  /// was freed instead of disconnected. A rank that stays among them is lost to the survivors'
  /// communicator too, where their next iteration finds it.
  std::vector<int> lost_while_confirming;
  /// On a rank that stays: its survivors' checkpoint barrier failed, and the words of the other
  /// ranks that stay told it that one of them passed that barrier, so the shrink stands here on
  /// their word (ShrinkLossWatch::confirmed_by_word ran).
  bool confirmed_by_word = false;
};

/// How Membership::shrink() meets a rank lost while it runs (ElasticJob's shrink, after the
/// hand-off of the tiles): every step over the old communicator is watched, and none is let go
/// of before every rank holds the survivors' communicator.
struct ShrinkLossWatch {
  /// Completes `request`, posted by `call` with result `posted` (a blocking call passes its
  /// result and MPI_REQUEST_NULL): true once it completed, false when it failed or was held up
  /// by a peer found lost. May throw on a failure with no peer lost (e.g. MpiError).
  std::function<bool(int posted, MPI_Request& request, const char* call)> complete;
  /// The peers found lost so far, ranks of the old communicator.
  std::function<std::vector<int>()> lost;
  /// Optional: runs on every rank once its part of the survivors' communicator is made (put
  /// in order), before the barrier that confirms it: `survivors` is that communicator on a
  /// rank that stays, MPI_COMM_NULL on a leaver (ElasticJob's runtime completes its first
  /// checkpoint under the survivors' buddies there, ending with a barrier over them: the
  /// shrink's point of no return). True once it passed that barrier. False when it found a
  /// rank lost, which `lost` then names: the shrink stands if another rank that stays passed
  /// it (`confirmed_by_word` runs), else it throws LostDuringShrink, the job's communicator
  /// untouched. Without it, a rank that stays is past the point of no return once it holds
  /// the survivors' communicator.
  std::function<bool(MPI_Comm survivors)> before_confirming;
  /// Optional: on a rank that stays whose `before_confirming` returned false, once the shrink
  /// learned that another rank that stays passed the survivors' checkpoint barrier: the
  /// checkpoint is complete on every rank that stays, and the shrink stands.
  std::function<void()> confirmed_by_word;
  /// Optional: looks for lost peers once more (the control plane's word included) while the
  /// shrink waits for the words of the ranks that stay.
  std::function<void()> poll;
  /// Optional: runs on every rank once the shrink stands, before the old communicator is let
  /// go of (where a runtime lets go of its duplicate); `peers_lost`: a rank was lost around the
  /// confirmation, so the old communicator is freed, never disconnected.
  std::function<void(bool peers_lost)> before_disconnect;
};

/// Thrown by Membership::shrink(leaving, watch) when a rank was lost before every rank held
/// the survivors' communicator (its check, MPI_Comm_create_group, putting the survivors in
/// order, the barrier that confirms it): the job's communicator is untouched, and the what()
/// names the step and the ranks the watch found lost.
class LostDuringShrink : public std::runtime_error {
 public:
  LostDuringShrink(const std::string& what, std::vector<int> lost)
      : std::runtime_error(what), lost_(std::move(lost)) {}
  /// Ranks of the old communicator, ascending.
  [[nodiscard]] const std::vector<int>& lost_ranks() const noexcept { return lost_; }

 private:
  std::vector<int> lost_;
};

/// Checks a list of ranks that are to leave a communicator of `size` ranks: each in
/// [1, size), no duplicates. Throws std::invalid_argument naming the first problem.
/// Local; shrink() calls it on every rank before any communication.
void validate_leaving(int size, std::span<const int> leaving);

/// Grows `current` by `count` processes, spawned one per MPI_Comm_spawn call, and
/// returns the grown communicator: the ranks of `current` keep their numbers, spawned
/// process k gets number size(current) + k. Collective over `current`; every spawned
/// process takes part through join_parent(). The ranks spawn in parallel (rank r starts
/// processes r, r + size, ...; each on MPI_COMM_SELF, so each is an MPI world of its
/// own); the spawned processes form one communicator among themselves (pairwise rounds
/// of accept/connect and merge over ports they open), and the job then accepts that
/// group once, on a port rank 0 opened, and merges with it. Members wait without
/// spinning while the processes start and group (MPICH ch3's blocking calls would take
/// the cores they need). Every intermediate communicator is disconnected before the
/// call returns. `count` and `spec` are read at rank 0 only (rank 0 broadcasts the
/// count, what to spawn and the outcome of its checks). The caller owns the result
/// (see Communicator) and stays owner of `current`, which this call leaves as it was.
/// count 0 returns a duplicate.
/// Throws std::invalid_argument on every rank when count is negative or spec is
/// unusable (checked on rank 0's host: command not an executable file, bad env, host
/// that does not resolve), MpiError when an MPI call fails.
/// The spawned program must call MPI_Init and then join_parent(): one that exits or
/// crashes before MPI_Init leaves this call waiting forever (neither ch3 nor hydra
/// reports it), so run grows under a watchdog.
[[nodiscard]] MPI_Comm grow_by_spawn(MPI_Comm current, int count, const SpawnSpec& spec,
                                     GrowReport* report = nullptr);

/// In a process started by grow_by_spawn(): joins the grow (the group of processes
/// spawned by it, then the job) and returns the job communicator, owned by the caller.
/// Disconnects the parent intercommunicator, so MPI_Comm_get_parent returns
/// MPI_COMM_NULL afterwards. Returns nullopt, without communicating, in a process that
/// was not spawned. Call it right after MPI_Init.
[[nodiscard]] std::optional<MPI_Comm> join_parent(GrowReport* report = nullptr);

/// Most ints a grow by accept hands to the processes that join (grow_by_accept's payload).
inline constexpr std::size_t kJoinPayloadInts = 8;

/// Grows `current` by `count` processes that were started elsewhere (by their node's
/// daemon) and connect to `port` with join_by_connect(), in O(log count) rounds: rank 0
/// accepts each process one to one on `port` (in the order they connect) and hands it its
/// place and the ports of a join tree; the processes form one communicator among themselves
/// in ceil(log2 count) rounds of accept/connect and merge; the job then accepts that group
/// once and merges with it (membership_port.cpp). The ranks of `current` keep their
/// numbers; the k-th process to connect gets size(current) + k. Rank 0's `payload` (at most
/// kJoinPayloadInts ints: what a joining process must know, such as the iteration it starts
/// at) reaches every joining process. Collective over `current`, which the caller still
/// owns afterwards; returns the grown communicator (owned by the caller). count 0 returns a
/// duplicate. Throws std::invalid_argument for a negative count or a payload too long,
/// MpiError when an MPI call fails. Rank 0 waits in MPI_Comm_accept until the processes
/// connect; the other ranks wait, sleeping, until they are one group. The report's
/// wait_seconds runs from the call to the new processes being one group, group_seconds is
/// their join tree as new process 0 timed it, and merge_seconds the one join of the job.
/// Rank 0's one-to-one accepts (about 1 ms each) are the part that grows with count: processes
/// that know their place from whoever started them join with grow_by_ordinals() instead.
[[nodiscard]] MPI_Comm grow_by_accept(MPI_Comm current, int count, const std::string& port,
                                      std::span<const int> payload, GrowReport* report = nullptr);

/// In a process started to join a running job: connects to `port` (the job's, opened with
/// MPI_Open_port), takes part in the rest of the grow (grow_by_accept), and returns the job
/// communicator (owned by the caller). `payload` receives what the job's rank 0 passed. The
/// report's spawn_ordinal is this process's place among those that joined (0 for the
/// first). Throws std::runtime_error when the job speaks another version of the grow
/// protocol, MpiError when an MPI call fails.
[[nodiscard]] MPI_Comm join_by_connect(const std::string& port, std::vector<int>& payload,
                                       GrowReport* report = nullptr);

/// Where the processes of a grow by ordinals meet (grow_by_ordinals, join_by_ordinal): a
/// directory that the job's rank 0 and every new process can read and write (the job
/// directory's joins/RESIZE under `bellows run`), one per grow, and the port the job accepts
/// the new processes' group on. Files appear there by rename, so that no reader sees half of
/// one:
///   round-R-O    the leader O of a group of new processes is ready for round R of the join
///                tree: the port it accepts on, or "-" when it connects; and its steady clock
///   group        new process 0: the new processes are one group (with their tree's time)
///   accepting    the job's rank 0: the job is about to accept the group on `job_port`
struct JoinExchange {
  std::filesystem::path directory;
  /// Read by the job's rank 0 alone, which names it in `accepting`.
  std::string job_port;
  /// Asked now and then while a process waits for a file: true when the grow was called off
  /// (under `bellows run`: the job's port file names another port). May be empty.
  std::function<bool()> called_off;
  /// The longest a process waits for any one file of the exchange.
  std::chrono::milliseconds file_timeout{std::chrono::minutes(1)};
  /// Pause between two looks for a file.
  std::chrono::microseconds poll_interval{200};
};

/// Thrown by join_by_ordinal() when JoinExchange::called_off said so while the process
/// waited: the job does not wait for this process any more. Nothing is wrong.
class GrowCalledOff : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Grows `current` by `count` processes started elsewhere (by their nodes' daemons) that each
/// know their ordinal in the grow (0..count-1) and `count` from whoever started them, and call
/// join_by_ordinal(). Nobody meets the job one to one: the new processes form one
/// communicator among themselves in ceil(log2 count) rounds of accept/connect and merge,
/// trading the ports of each round through files in `exchange.directory`; rank 0 waits,
/// sleeping, for their `group` file, writes `accepting`, and the job accepts that group once on
/// `exchange.job_port` and merges with it. New process i gets rank size(current) + i; the
/// ranks of `current` keep theirs. Rank 0's `payload` (at most kJoinPayloadInts ints) reaches
/// every new process in one broadcast over the grown communicator. Rank 0 removes the
/// directory once the grow is done. Collective over `current`, which the caller still owns;
/// returns the grown communicator (owned by the caller). count 0 returns a duplicate.
/// Throws std::invalid_argument for a negative count or a payload too long, std::runtime_error
/// on every rank when no `group` file came within exchange.file_timeout (naming the file),
/// MpiError when an MPI call fails. Only rank 0 reads `exchange`.
[[nodiscard]] MPI_Comm grow_by_ordinals(MPI_Comm current, int count, const JoinExchange& exchange,
                                        std::span<const int> payload, GrowReport* report = nullptr);

/// In a process started to join a running job as new process `ordinal` of `count`: takes its
/// part in the join tree and the job's one accept (grow_by_ordinals) and returns the job
/// communicator (owned by the caller); `payload` receives rank 0's. The report's
/// spawn_ordinal is `ordinal`, group_seconds the join tree as this process timed it.
/// Throws std::invalid_argument when ordinal is not in [0, count), GrowCalledOff when
/// exchange.called_off says so while it waits, std::runtime_error naming the file when one
/// it waits for does not come within exchange.file_timeout or when the job speaks another
/// version of the protocol, MpiError when an MPI call fails.
[[nodiscard]] MPI_Comm join_by_ordinal(int ordinal, int count, const JoinExchange& exchange,
                                       std::vector<int>& payload, GrowReport* report = nullptr);

/// Removes the ranks in `leaving` from `current` and consumes `current`. Collective over
/// `current`: every rank, leavers included, calls it with the same list.
///
/// Order of events: validate_leaving() (throws std::invalid_argument on every rank);
/// one MPI_Allreduce checks that every rank passed the same list and that no leaver
/// shares its MPI_COMM_WORLD with a rank that stays (throws std::invalid_argument on
/// every rank otherwise); MPI_Comm_create builds the survivors' communicator
/// (MPI_COMM_NULL on leavers), in rotated order when the leavers are the highest ranks
/// so that it does not share `current`'s table of connections (see the rules above);
/// then every rank calls MPI_Comm_disconnect on `current`. That disconnect is what frees
/// the leavers: their connections to the survivors were used by `current` alone, so
/// each side sends ch3's close message and waits for the other's acknowledgement; after
/// it a leaver is tied to nobody and can call MPI_Finalize and exit 0 while the job goes
/// on. Last, the survivors put a rotated communicator back in order (one more
/// MPI_Comm_create over the survivors alone, and a disconnect of the rotated one).
///
/// Precondition: no other communicator that contains a leaver is alive (free or
/// disconnect, e.g., a Runtime's duplicate, before calling), else the leaver's
/// connections stay open and its MPI_Finalize waits for the survivors.
/// Returns the survivors' communicator (owned by the caller) or MPI_COMM_NULL on a
/// leaver. `current` is invalid afterwards on every rank, unless an exception was thrown
/// before the disconnect (argument errors leave it untouched).
[[nodiscard]] MPI_Comm shrink(MPI_Comm current, std::span<const int> leaving,
                              ShrinkReport* report = nullptr);

/// One process's view of the job: owns the job communicator and grows and shrinks it.
///
/// Lifecycle: member (after construction or join()) -> left (after a shrink() that
/// named this rank; communicator() is then MPI_COMM_NULL and the process should call
/// MPI_Finalize and exit). grow() and shrink() are collective over the job communicator.
/// The reports of all grows and shrinks this process took part in are kept in order.
///
/// Thread safety: none; use from one thread, like MPI itself at MPI_THREAD_SERIALIZED.
class Membership {
 public:
  /// A job of the processes of `initial` (typically MPI_COMM_WORLD of a job started
  /// with mpiexec -n 1): works on a duplicate. Collective over `initial`.
  explicit Membership(MPI_Comm initial);
  /// In a spawned process: the membership it joined (join_parent()); nullopt in a
  /// process that was not spawned.
  [[nodiscard]] static std::optional<Membership> join();

  [[nodiscard]] MPI_Comm communicator() const noexcept { return job_.get(); }
  /// Rank and size in the job communicator; -1 and 0 once left.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] bool is_member() const noexcept { return static_cast<bool>(job_); }

  /// Spawns `count` processes (spec read on rank 0) that join with join(). Collective.
  const GrowReport& grow(int count, const SpawnSpec& spec);
  /// Accepts `count` processes that connect to `port` (grow_by_accept). Collective.
  const GrowReport& grow_by_accept(int count, const std::string& port, std::span<const int> payload);
  /// In a process started to join a running job: the membership it joined through `port`
  /// (join_by_connect), with rank 0's payload.
  [[nodiscard]] static Membership join_by_connect(const std::string& port, std::vector<int>& payload);
  /// Grows by `count` processes that join with join_by_ordinal (grow_by_ordinals). Collective.
  const GrowReport& grow_by_ordinals(int count, const JoinExchange& exchange, std::span<const int> payload);
  /// In a process started as new process `ordinal` of `count` of a grow: the membership it
  /// joined (join_by_ordinal), with rank 0's payload.
  [[nodiscard]] static Membership join_by_ordinal(int ordinal, int count, const JoinExchange& exchange,
                                                  std::vector<int>& payload);
  /// Removes the ranks in `leaving`; on those ranks is_member() is false afterwards.
  /// Collective over the job communicator, leavers included.
  const ShrinkReport& shrink(std::span<const int> leaving);
  /// The same, with a rank possibly lost while it runs: its check is an MPI_Iallreduce and
  /// the survivors' communicator comes from MPI_Comm_create_group over the survivors alone,
  /// each completed through `watch`, then put in order, handed to `watch.before_confirming`,
  /// and confirmed by an MPI_Ibarrier over every rank, leavers too, before
  /// `watch.before_disconnect` and the old communicator's disconnect. Throws LostDuringShrink,
  /// the job's communicator untouched, when a rank was lost before that barrier completed here
  /// (or `before_confirming` found one) and no rank that stays had passed the survivors'
  /// checkpoint barrier; std::invalid_argument when `watch` lacks `complete` or `lost`. Every
  /// rank that stays tells every other rank, before that barrier, whether it passed the
  /// survivors' checkpoint barrier (the shrink's point of no return); a rank whose barrier
  /// failed waits for those words (confirm_or_give_up_shrink) and every rank alive ends alike:
  /// the shrink stands (ShrinkReport::lost_while_confirming names the lost) or is given up.
  /// Throws std::runtime_error when a word is still missing 10 s after the barrier failed
  /// with its rank not found lost.
  const ShrinkReport& shrink(std::span<const int> leaving, const ShrinkLossWatch& watch);

  /// From now on a grow keeps the communicator from before it until confirm_grow() or
  /// give_up_grow(), so that a member lost before every member confirmed the grown one can be
  /// given up (ElasticJob does this for its expands). Off by default: a grow lets the old
  /// communicator go at once.
  void keep_previous_until_confirmed() noexcept { keep_previous_ = true; }
  /// Whether the latest grow still holds the communicator from before it.
  [[nodiscard]] bool grow_unconfirmed() const noexcept { return static_cast<bool>(previous_); }
  /// Every member confirmed the grown communicator: the one from before the grow is let go
  /// (MPI_Comm_disconnect, which waits on nobody: its connections live on in the grown one).
  /// Nothing happens when no grow is unconfirmed. Collective over the ranks from before it.
  void confirm_grow();
  /// A member was lost before every member confirmed the grown communicator: it is freed, never
  /// disconnected (it may hold the dead), and its grow's report dropped. On a rank from before
  /// the grow the job's communicator is the one from before it again; on a rank the grow added
  /// there is none (is_member() false). Not collective.
  void give_up_grow();

  /// After a loss: the job communicator becomes `survivors`, which rebuild_without() made
  /// from it and which consumed (freed) it. Not collective.
  void adopt_survivors(Communicator survivors);

  [[nodiscard]] const std::vector<GrowReport>& grows() const noexcept { return grows_; }
  [[nodiscard]] const std::vector<ShrinkReport>& shrinks() const noexcept { return shrinks_; }

 private:
  Membership(Communicator job, GrowReport joined);
  void refresh() noexcept;
  /// The job communicator becomes `grown` (the old one is disconnected, or kept in previous_
  /// until confirm_grow() when keep_previous_ is set); records the report.
  const GrowReport& adopt_grown(Communicator grown, GrowReport report);

  Communicator job_;
  Communicator previous_;  ///< the job's communicator from before an unconfirmed grow
  bool keep_previous_ = false;
  int rank_ = -1;
  int size_ = 0;
  std::vector<GrowReport> grows_;
  std::vector<ShrinkReport> shrinks_;
};

}  // namespace bellows::runtime
