#include "bellows/runtime/elastic_job.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>

#include "bellows/runtime/loss_notices.hpp"
#include "bellows/runtime/rebuild.hpp"
#include "bellows/runtime/resize_loss.hpp"
#include "peer_watch.hpp"
#include "rank_set_text.hpp"
#include "sleeping_wait.hpp"
#include "trace.hpp"

namespace bellows::runtime {
namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double seconds_since(std::int64_t start_ns) { return static_cast<double>(steady_ns() - start_ns) * 1e-9; }

/// A steady-clock stamp of this host as seconds since the Unix epoch (to line it up with
/// the controller's event log).
double unix_seconds_of(std::int64_t stamp_steady_ns) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  return static_cast<double>(now_ns - (steady_ns() - stamp_steady_ns)) * 1e-9;
}

void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw MpiError(call, rc);
}

/// Completes `request` without spinning: ranks reach an iteration boundary at different
/// times, and those that wait must leave the cores to those still working.
void wait_without_spinning(MPI_Request& request, const char* call) {
  check(wait_sleeping(request, [] { std::this_thread::sleep_for(std::chrono::microseconds(100)); }),
        call);
}

/// How long a collective of the agreement still pending when the watch found a peer lost is
/// given to complete after all (every rank then takes its result), and how long after the first
/// peer found lost a failed one waits for others. One that failed with no peer found waits for
/// a verdict, up to kLossVerdictLimit (peer_watch.hpp): the control plane's word may come late.
constexpr auto kAgreementLossGrace = std::chrono::milliseconds(100);

/// The buffers of the agreement's collectives. An agreement given up after a loss leaves its
/// collectives to MPI (a nonblocking collective's request can be neither cancelled nor freed),
/// which may still write into them: they are then kept until the process exits.
struct AgreementBuffers {
  std::array<int, 2> values{};
  std::int64_t length = 0;
  std::vector<std::int64_t> words;
  MPI_Request request = MPI_REQUEST_NULL;
};

/// The buffers of after_iteration()'s collectives after an expand (time_first_tasks), kept
/// alike when a loss leaves them to MPI.
struct FirstTaskBuffers {
  std::array<std::int64_t, 3> resize{};  // the resize's number, who asked, when
  std::int64_t mine = 0;                 // this rank's first task (steady clock, ns)
  std::vector<std::int64_t> all;         // every rank's, on rank 0
  MPI_Request request = MPI_REQUEST_NULL;
};

/// The buffers of a shrink's numbers (bytes handed off and tasks the leavers ran, summed; the
/// slowest hand-off), kept alike when a loss leaves their collectives to MPI.
struct ShrinkNumbers {
  std::array<unsigned long long, 2> sums{};
  double slowest = 0.0;
  MPI_Request request = MPI_REQUEST_NULL;
};

/// How long the survivors of a loss after a shrink's hand-off take to agree on it and rebuild.
constexpr auto kLateShrinkLossTimeout = std::chrono::seconds(30);

template <typename Buffers>
void keep_until_exit(std::unique_ptr<Buffers> buffers) {
  static std::vector<std::unique_ptr<Buffers>> kept;
  kept.push_back(std::move(buffers));
}

/// Completes `request`, a collective of the agreement that `call` posted with result `posted`,
/// without spinning while `watch` (armed) watches every peer. True when it completed: its
/// result stands on every rank that got it, and a peer lost meanwhile is left to the next
/// iteration's watch. False when it failed, or was still pending kAgreementLossGrace after
/// the watch found a peer lost: the agreement is given up (the request, if pending, is left
/// to MPI). A failure with no peer found lost within kLossVerdictLimit (peer_watch.hpp) throws
/// MpiError naming `call`.
bool completed_watched(int posted, MPI_Request& request, PeerWatch& watch, const char* call) {
  const WatchedCompletion outcome = complete_watched(posted, request, watch, kAgreementLossGrace);
  if (!outcome.completed && outcome.lost.empty()) throw MpiError(call, outcome.failed_code);
  return outcome.completed;
}

/// Every member of the grown communicator of an expand confirms it, the ranks from before it
/// and those it adds alike: one MPI_Ibarrier, watched as the agreement's collectives are. Returns
/// the ranks of `grown` lost before every member confirmed (empty: confirmed). A rank lost
/// after it entered the barrier may let some members complete it and not others; the members
/// meet such a loss in the first iteration after the expand instead.
std::vector<int> confirm_grown(MPI_Comm grown, int rank, int size) {
  const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
  const ErrorsReturned errors_returned(grown);
  PeerWatch watch(grown, rank, size);
  watch.arm();
  // A barrier's request writes nothing: a pending one given up is left to MPI alone.
  MPI_Request request = MPI_REQUEST_NULL;
  const int posted = MPI_Ibarrier(grown, &request);
  if (completed_watched(posted, request, watch, "MPI_Ibarrier")) return {};
  return watch.lost();
}

// A request travels as int64 words: add, posted_steady_ns, resize_id, remove count, the
// ranks, reason length, then the reason's bytes packed eight to a word.
std::vector<std::int64_t> pack(int add, const std::vector<int>& remove, const std::string& reason,
                               std::int64_t posted, std::uint64_t resize_id) {
  std::vector<std::int64_t> words{add, posted, static_cast<std::int64_t>(resize_id),
                                  static_cast<std::int64_t>(remove.size())};
  for (const int r : remove) words.push_back(r);
  words.push_back(static_cast<std::int64_t>(reason.size()));
  const std::size_t first = words.size();
  words.resize(first + (reason.size() + 7) / 8, 0);
  if (!reason.empty()) std::memcpy(words.data() + first, reason.data(), reason.size());
  return words;
}

void unpack(const std::vector<std::int64_t>& words, int& add, std::vector<int>& remove,
            std::string& reason, std::int64_t& posted, std::uint64_t& resize_id) {
  std::size_t at = 0;
  add = static_cast<int>(words.at(at++));
  posted = words.at(at++);
  resize_id = static_cast<std::uint64_t>(words.at(at++));
  const auto count = static_cast<std::size_t>(words.at(at++));
  remove.clear();
  for (std::size_t i = 0; i < count; ++i) remove.push_back(static_cast<int>(words.at(at++)));
  const auto length = static_cast<std::size_t>(words.at(at++));
  if (words.size() < at + (length + 7) / 8) throw std::logic_error("resize request truncated");
  reason.assign(reinterpret_cast<const char*>(words.data() + at), length);
}

/// The fields every resize line of the trace starts with.
nlohmann::ordered_json common_fields(const ResizeEvent& event, int rank, const char* role) {
  return {{"event", "resize"},
          {"resize", event.id},
          {"kind", event.kind == ResizeEvent::Kind::expand ? "expand" : "shrink"},
          {"rank", rank},
          {"role", role},
          {"from_ranks", event.from_ranks},
          {"to_ranks", event.to_ranks},
          {"requested_by", event.requested_by},
          {"reason", event.reason}};
}

/// Seconds from `from` to `to` (steady clock, ns), to the microsecond, as the samples.
double seconds_between_ns(std::int64_t from, std::int64_t to) {
  return std::round(static_cast<double>(to - from) * 1e-3) * 1e-6;
}

}  // namespace

ElasticJob::ElasticJob(Membership membership, SpawnSpecFor spawn_spec, int joined_at_iteration)
    : ElasticJob(std::move(membership),
                 Grow([spawn_spec = std::move(spawn_spec)](Membership& m, int count, int iteration,
                                                            std::uint64_t /*resize_id*/) -> const GrowReport& {
                   return m.grow(count, m.rank() == 0 ? spawn_spec(iteration) : SpawnSpec{});
                 }),
                 joined_at_iteration) {}

ElasticJob::ElasticJob(Membership membership, Grow grow, int joined_at_iteration)
    : membership_(std::move(membership)),
      grow_(std::move(grow)),
      joined_at_iteration_(joined_at_iteration) {
  // An expand keeps the job's communicator from before it until every member confirmed the
  // grown one (expand(), confirm_join()), so that a loss before that gives the expand up.
  membership_.keep_previous_until_confirmed();
  if (joined_at_iteration_ > 0 && !membership_.grows().empty()) {
    joined_after_size_ = membership_.grows().back().old_size;
    first_new_rank_ = joined_after_size_;
    joined_steady_ns_ = steady_ns();
    confirm_join();
  }
}

void ElasticJob::confirm_join() {
  const std::vector<int> lost = confirm_grown(communicator(), rank(), size());
  if (!lost.empty()) leave_given_up_expand(lost, ResizePhase::join);
}

void ElasticJob::leave_given_up_expand(const std::vector<int>& lost, ResizePhase phase) {
  const int old_size = joined_after_size_;
  ResizeLossFacts facts{ResizeKind::expand, phase, true, false};
  facts.only_new_lost = std::all_of(lost.begin(), lost.end(), [old_size](int r) { return r >= old_size; });
  const std::string why = "expand to " + std::to_string(size()) + " ranks given up: ranks " + rank_set_text(lost) +
                          " were lost " + on_loss_during_resize(facts).reason +
                          "; rank " + std::to_string(rank()) + ", which it was adding, leaves";
  membership_.give_up_grow();
  throw ExpandGivenUp(why);
}

bool ElasticJob::tracing() const { return runtime_ != nullptr && !runtime_->options().trace_path.empty(); }

void ElasticJob::write_trace(TraceLine& line, int iteration, std::int64_t base_ns,
                             std::int64_t first_task_ns) const {
  auto& f = line.fields;
  f["iteration"] = iteration;
  f["t"] = seconds_between_ns(base_ns, line.end_ns);
  f["t_request"] = seconds_between_ns(base_ns, line.request_ns);
  f["t_start"] = seconds_between_ns(base_ns, line.start_ns);
  f["seconds"] = seconds_between_ns(line.start_ns, line.end_ns);
  if (first_task_ns != 0) {
    f["t_first_task"] = seconds_between_ns(base_ns, first_task_ns);
    if (f.value("role", "") == "new") {
      f["request_to_first_task_seconds"] = seconds_between_ns(line.request_ns, first_task_ns);
    }
  }
  Trace::append(runtime_->options().trace_path, rank() >= 0 ? rank() : f.value("rank", -1),
                f.dump() + "\n");
}

void ElasticJob::attach(Runtime& runtime) {
  runtime_ = &runtime;
  if (joined_after_size_ == 0) return;
  // A member lost before every member held the mapping state gives the expand up (as the
  // members' expand() does): this rank leaves.
  if (const std::vector<int> lost = runtime.join_expansion(joined_after_size_); !lost.empty()) {
    leave_given_up_expand(lost, ResizePhase::attach);
  }
}

void ElasticJob::request_expand(int count, std::string reason, std::uint64_t resize_id) {
  if (count < 1) {
    throw std::invalid_argument("request_expand: the count must be at least 1, got " + std::to_string(count));
  }
  std::lock_guard lock(mutex_);
  pending_.push_back(Request{count, {}, std::move(reason), steady_ns(), resize_id});
}

void ElasticJob::request_shrink(std::vector<int> ranks, std::string reason, std::uint64_t resize_id) {
  std::lock_guard lock(mutex_);
  pending_.push_back(Request{0, std::move(ranks), std::move(reason), steady_ns(), resize_id});
}

bool ElasticJob::cancel(std::uint64_t resize_id) {
  if (resize_id == 0) return false;
  std::lock_guard lock(mutex_);
  return std::erase_if(pending_, [resize_id](const Request& r) { return r.resize_id == resize_id; }) > 0;
}

std::size_t ElasticJob::pending_requests() const {
  std::lock_guard lock(mutex_);
  return pending_.size();
}

std::optional<ElasticJob::Request> ElasticJob::agree_on_request(int& requester) {
  const MPI_Comm comm = communicator();
  const int my_rank = rank(), job_size = size();
  std::optional<Request> mine;
  {
    std::lock_guard lock(mutex_);
    if (!pending_.empty()) mine = pending_.front();
  }
  // A peer may die at this boundary, before or during the agreement. Its collectives then
  // fail (MPI_Test: "MPIDU_Sched_progress_state(1180): Invalid communicator"), which the job
  // communicator's handler, MPI_ERRORS_ARE_FATAL, would turn into the end of this rank
  // (issue 33). So errors return here (on MPI_COMM_WORLD too, as during an iteration), every
  // peer is watched, and an agreement that a loss broke is given up: nothing is carried out,
  // the iteration that follows finds the lost peer (IterationReport::lost_ranks) and the
  // application recovers from it as from any loss.
  const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
  const ErrorsReturned errors_returned(comm);
  PeerWatch watch(comm, my_rank, job_size);
  watch.arm();
  auto buffers = std::make_unique<AgreementBuffers>();
  bool popped = false;
  const auto give_up = [&] {
    if (popped) {
      std::lock_guard lock(mutex_);
      pending_.push_front(*mine);  // carried out at a later boundary, if this rank survives
    }
    if (buffers->request != MPI_REQUEST_NULL) keep_until_exit(std::move(buffers));
    requester = job_size;
    return std::nullopt;
  };

  // The lowest rank with a request wins; and every rank learns how many resizes the job
  // made (a rank that joined late counts from its join).
  buffers->values = {mine ? my_rank : job_size, -resizes_};
  int posted = MPI_Iallreduce(MPI_IN_PLACE, buffers->values.data(), 2, MPI_INT, MPI_MIN, comm, &buffers->request);
  if (!completed_watched(posted, buffers->request, watch, "MPI_Iallreduce")) return give_up();
  resizes_ = -buffers->values[1];
  requester = buffers->values[0];
  if (requester == job_size) return std::nullopt;

  if (my_rank == requester) {
    buffers->words = pack(mine->add, mine->remove, mine->reason, mine->posted_steady_ns, mine->resize_id);
    buffers->length = static_cast<std::int64_t>(buffers->words.size());
    std::lock_guard lock(mutex_);
    pending_.pop_front();
    popped = true;
  }
  posted = MPI_Ibcast(&buffers->length, 1, MPI_INT64_T, requester, comm, &buffers->request);
  if (!completed_watched(posted, buffers->request, watch, "MPI_Ibcast")) return give_up();
  buffers->words.resize(static_cast<std::size_t>(buffers->length));
  posted = MPI_Ibcast(buffers->words.data(), static_cast<int>(buffers->length), MPI_INT64_T, requester, comm,
                      &buffers->request);
  if (!completed_watched(posted, buffers->request, watch, "MPI_Ibcast")) return give_up();
  Request agreed;
  unpack(buffers->words, agreed.add, agreed.remove, agreed.reason, agreed.posted_steady_ns, agreed.resize_id);
  return agreed;
}

ElasticJob::Outcome ElasticJob::apply_pending(int iteration) {
  if (runtime_ == nullptr) throw std::logic_error("ElasticJob::apply_pending before attach()");
  // Not before the first iteration: ranks added there would join at iteration 0, as the
  // initial members do, and would take the job's initial start for theirs (no
  // join_expansion, no skipped boundary): their collectives would not match the members'.
  if (iteration == 0) return Outcome::none;
  if (joined_after_size_ > 0 && iteration == joined_at_iteration_) return Outcome::none;  // joined through it
  int requester = -1;
  const auto request = agree_on_request(requester);
  if (!request) return Outcome::none;

  ResizeEvent event;
  event.id = resizes_ + 1;
  event.resize_id = request->resize_id;
  event.kind = request->add > 0 ? ResizeEvent::Kind::expand : ResizeEvent::Kind::shrink;
  event.from_ranks = size();
  event.add = request->add;
  event.remove = request->remove;
  event.reason = request->reason;
  event.requested_by = requester;
  event.before_iteration = iteration;

  if (event.kind == ResizeEvent::Kind::shrink) {
    std::string why;
    try {
      if (request->remove.empty()) throw std::invalid_argument("shrink: the request names no rank");
      validate_leaving(size(), request->remove);
    } catch (const std::invalid_argument& e) {
      why = e.what();
    }
    if (why.empty()) {
      // A rank that shares its MPI_COMM_WORLD with others (started by one mpiexec -n N)
      // cannot leave alone; refuse before any data moves.
      int world_size = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &world_size);
      const bool leaving = std::find(request->remove.begin(), request->remove.end(), rank()) !=
                           request->remove.end();
      int blocked = leaving && world_size > 1 ? rank() : size();
      MPI_Request r = MPI_REQUEST_NULL;
      check(MPI_Iallreduce(MPI_IN_PLACE, &blocked, 1, MPI_INT, MPI_MIN, communicator(), &r),
            "MPI_Iallreduce");
      wait_without_spinning(r, "MPI_Iallreduce");
      if (blocked < size()) {
        why = "rank " + std::to_string(blocked) +
              " cannot leave: it shares its MPI_COMM_WORLD with other ranks (started by one "
              "mpiexec -n N); only ranks started alone or spawned one per MPI_Comm_spawn can leave";
      }
    }
    if (!why.empty()) {
      event.reason = "shrink refused: " + why;
      event.to_ranks = size();
      for (const auto& callback : on_refused_) callback(event);
      return Outcome::refused;
    }
  }
  event.to_ranks = event.kind == ResizeEvent::Kind::expand
                       ? size() + request->add
                       : size() - static_cast<int>(request->remove.size());
  for (const auto& callback : on_start_) callback(event);
  const std::int64_t start = steady_ns();
  const Outcome outcome = event.kind == ResizeEvent::Kind::expand ? expand(*request, event, iteration)
                                                                  : shrink(*request, event);
  if (outcome == Outcome::refused) {  // given up: a rank was lost while it was carried out
    event.to_ranks = size();
    event.seconds = seconds_since(start);
    for (const auto& callback : on_refused_) callback(event);
    return outcome;
  }
  ++resizes_;
  event.seconds = seconds_since(start);
  event.left = outcome == Outcome::left;
  if (!event.left) event.to_ranks = size();
  if (trace_pending_) {
    // Common fields first, then what expand() or shrink() recorded.
    auto fields = common_fields(event, event.left ? trace_pending_->fields.value("rank", -1) : rank(),
                                trace_pending_->fields.value("role", "member").c_str());
    trace_pending_->fields.erase("rank");
    trace_pending_->fields.erase("role");
    fields.update(trace_pending_->fields);
    trace_pending_->fields = std::move(fields);
    trace_pending_->request_ns = request->posted_steady_ns;
    trace_pending_->start_ns = start;
    trace_pending_->end_ns = steady_ns();
    if (event.left) {
      // A leaver runs no more iterations: its times count from the start of its last one
      // (from the start of the resize if it ran none).
      write_trace(*trace_pending_, last_iteration_,
                  last_iteration_ > 0 ? last_iteration_start_ns_ : start, 0);
      trace_pending_.reset();
    }
  }
  for (const auto& callback : on_commit_) callback(event);
  return outcome;
}

ElasticJob::Outcome ElasticJob::expand(const Request& request, ResizeEvent& event, int iteration) {
  const int old_size = size();
  const auto& grown = grow_(membership_, request.add, iteration, request.resize_id);
  // Until every member confirmed the grown communicator the expand can be given up: nothing
  // of the runtime moved yet (its communicator, its tiles and the buddies' copies are as they
  // were), and the communicator from before it is kept.
  if (const std::vector<int> lost = confirm_grown(communicator(), rank(), size()); !lost.empty()) {
    return give_up_expand(request, event, old_size, lost, ResizePhase::join);
  }
  for (const auto& callback : on_confirmed_) callback(event);
  // The runtime keeps its communicator and the buddies' copies from before the expand until
  // every member holds the mapping state (expand_onto's last barrier, watched), and so does
  // the membership the communicator from before: a loss until then gives the expand up too.
  const std::int64_t onto_start = steady_ns();
  if (const std::vector<int> lost = runtime_->expand_onto(communicator()); !lost.empty()) {
    return give_up_expand(request, event, old_size, lost, ResizePhase::attach);
  }
  membership_.confirm_grow();
  const double onto_seconds = seconds_since(onto_start);
  expand_request_steady_ns_ = request.posted_steady_ns;
  first_new_rank_ = old_size;
  if (tracing()) {
    // This rank's own spawns (rank r spawns the new processes r, r + old size, ...).
    nlohmann::json spawned = nlohmann::json::array(), spawn_seconds = nlohmann::json::array();
    for (std::size_t i = static_cast<std::size_t>(rank()); i < grown.spawn_seconds.size();
         i += static_cast<std::size_t>(old_size)) {
      spawned.push_back(i);
      spawn_seconds.push_back(grown.spawn_seconds[i]);
    }
    TraceLine line;
    line.fields = {{"rank", rank()},
                   {"role", "member"},
                   {"spawned", spawned},
                   {"spawn_seconds", spawn_seconds},
                   {"wait_seconds", grown.wait_seconds},
                   {"group_seconds", grown.group_seconds},
                   {"merge_seconds", grown.merge_seconds.empty() ? 0.0 : grown.merge_seconds.front()},
                   {"grow_seconds", grown.total_seconds},
                   {"expand_onto_seconds", onto_seconds},
                   {"tiles_migrated", runtime_->last_rebalance().tiles},
                   {"tasks_migrated", runtime_->last_rebalance().tasks}};
    trace_pending_ = std::move(line);
  }
  if (rank() == 0) {
    telemetry_.push_back({{"id", event.id},
                          {"before_iteration", iteration + 1},
                          {"from_ranks", old_size},
                          {"to_ranks", size()},
                          {"add", request.add},
                          {"reason", request.reason},
                          {"requested_by", event.requested_by},
                          {"requested_unix_seconds", unix_seconds_of(request.posted_steady_ns)},
                          {"grow_seconds", grown.total_seconds},
                          {"spawn_seconds", grown.spawn_seconds},
                          {"wait_seconds", grown.wait_seconds},
                          {"group_seconds", grown.group_seconds},
                          {"merge_seconds", grown.merge_seconds},
                          {"accept_seconds", grown.accept_seconds},
                          {"disconnect_seconds", grown.disconnect_seconds},
                          {"expand_onto_seconds", onto_seconds},
                          {"tiles_migrated", runtime_->last_rebalance().tiles},
                          {"tasks_migrated", runtime_->last_rebalance().tasks}});
  }
  return Outcome::resized;
}

ElasticJob::Outcome ElasticJob::give_up_expand(const Request& request, ResizeEvent& event, int old_size,
                                               const std::vector<int>& lost, ResizePhase phase) {
  membership_.give_up_grow();  // the job's communicator from before the expand again
  // The runtime has not moved (or moved back, expand_onto): the buddies' copies from before
  // the expand are all held.
  ResizeLossFacts facts{ResizeKind::expand, phase, true, false};
  facts.only_new_lost = std::all_of(lost.begin(), lost.end(), [old_size](int r) { return r >= old_size; });
  const ResizeLossDecision decision = on_loss_during_resize(facts);
  const std::string what = "expand by " + std::to_string(request.add) + " given up: ranks " + rank_set_text(lost) +
                           " were lost " + decision.reason;
  if (decision.action != ResizeLossAction::give_up) throw RecoveryError(what);
  // A rank from before the expand lost: the job's communicator still holds it, and the next
  // iteration finds it lost (IterationReport::lost_ranks), from which the job recovers as
  // from any loss. Only new ranks lost: nothing more to do.
  event.reason = what + " (" + event.reason + ")";
  if (rank() == 0) {
    telemetry_.push_back({{"id", event.id},
                          {"before_iteration", event.before_iteration + 1},
                          {"from_ranks", old_size},
                          {"to_ranks", old_size},
                          {"add", request.add},
                          {"reason", request.reason},
                          {"requested_by", event.requested_by},
                          {"given_up", what},
                          {"lost", lost}});
  }
  return Outcome::refused;
}

ElasticJob::Outcome ElasticJob::shrink(const Request& request, ResizeEvent& event) {
  const MPI_Comm before = communicator();
  const int old_size = size();
  // Tasks pinned to the leavers go back to the fixed mapping (and so to the backups).
  std::size_t unpinned = 0;
  for (const auto& [key, owner] : runtime_->pinned()) {
    unpinned += std::count(request.remove.begin(), request.remove.end(), owner) > 0 ? 1 : 0;
  }
  // The copies from before, the tiles and mapping as they were and the runtime's communicator
  // are held until every rank holds the survivors' communicator and the survivors' first
  // checkpoint under it is complete, so that a rank that stays, lost after the hand-off's
  // barrier, gives the shrink up instead of ending the job (finish_shrink_after_loss), and
  // one lost after that is recovered from that checkpoint.
  const auto handoff = runtime_->prepare_shrink(request.remove, StateBeforeShrink::held);
  if (!handoff.lost.empty()) {
    // A rank lost during the hand-off: nothing moved, every rank stays (the leavers too), and
    // the next iteration reports the loss, which the job recovers from as from any.
    event.reason = "shrink without ranks " + rank_set_text(request.remove) + " given up: ranks " +
                   rank_set_text(handoff.lost) + " were lost during the hand-off of the tiles (" + event.reason + ")";
    return Outcome::refused;
  }
  for (const auto& callback : on_handed_off_) callback(event);
  const Rebalance rebalance = runtime_->last_rebalance();
  // The shrink's numbers, over every rank: the first collective after the hand-off's barrier.
  // It is watched as the hand-off is, so that a rank lost from the barrier on fails it on every
  // survivor (none can complete it without the lost rank's part) instead of ending them in an
  // MpiError or leaving them waiting (finish_shrink_after_loss).
  auto numbers = std::make_unique<ShrinkNumbers>();
  // What the leavers ran stays counted: a final report lists only the ranks left.
  numbers->sums = {handoff.bytes_moved, handoff.leaving ? runtime_->stats().tasks_executed : 0};
  numbers->slowest = handoff.seconds;
  std::vector<int> lost;
  {
    const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
    const ErrorsReturned errors_returned(before);
    PeerWatch watch(before, rank(), size());
    watch.arm();
    int posted = MPI_Iallreduce(MPI_IN_PLACE, numbers->sums.data(), 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, before,
                                &numbers->request);
    bool completed = completed_watched(posted, numbers->request, watch, "MPI_Iallreduce");
    if (completed) {
      posted = MPI_Iallreduce(MPI_IN_PLACE, &numbers->slowest, 1, MPI_DOUBLE, MPI_MAX, before, &numbers->request);
      completed = completed_watched(posted, numbers->request, watch, "MPI_Iallreduce");
    }
    if (!completed) lost = watch.lost();
  }
  if (!lost.empty()) {
    if (numbers->request != MPI_REQUEST_NULL) keep_until_exit(std::move(numbers));
    return finish_shrink_after_loss(request, event, handoff, lost);
  }
  const unsigned long long all_bytes = numbers->sums[0], leavers_ran = numbers->sums[1];
  const double slowest = numbers->slowest;
  const bool was_rank_zero = rank() == 0;
  const int old_rank = rank();
  // The survivors' communicator, watched as the numbers are: a rank lost before every rank
  // holds it leaves the job's communicator untouched (LostDuringShrink), and the runtime still
  // holds the state from before, which it lets go of only once every survivor holds it.
  const ShrinkReport* shrunk_here = nullptr;
  // The ranks that stay complete their first checkpoint under the survivors' buddies before the
  // barrier that confirms the survivors' communicator, while the leavers still hold the copies
  // from before: a rank that stays, lost before any rank that stays passed that checkpoint's
  // barrier, gives the shrink up as above; lost after it (in the confirming barrier, the leavers
  // gone), the shrink stands on every rank alive and the job recovers from that checkpoint.
  std::vector<int> lost_on_survivors;  // numbers of the job's communicator
  bool attached_to_survivors = false;
  {
    const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
    PeerWatch watch(before, rank(), size());  // Membership::shrink returns errors on `before`
    ShrinkLossWatch shrink_watch;
    shrink_watch.complete = [&watch](int posted, MPI_Request& collective, const char* call) {
      watch.arm();
      return completed_watched(posted, collective, watch, call);
    };
    shrink_watch.lost = [&watch, &lost_on_survivors] {
      std::vector<int> found = watch.lost();
      found.insert(found.end(), lost_on_survivors.begin(), lost_on_survivors.end());
      std::sort(found.begin(), found.end());
      found.erase(std::unique(found.begin(), found.end()), found.end());
      return found;
    };
    shrink_watch.before_confirming = [&](MPI_Comm survivors) {
      if (survivors == MPI_COMM_NULL) return true;  // a leaver: it waits in the confirming barrier
      const std::vector<int> lost_here = runtime_->attach_shrunk_checkpointed(survivors);
      // The survivors' numbers back to the job's: the ranks that stay, in order.
      std::vector<int> staying;
      for (int r = 0; r < old_size; ++r) {
        if (std::count(request.remove.begin(), request.remove.end(), r) == 0) staying.push_back(r);
      }
      for (const int r : lost_here) lost_on_survivors.push_back(staying.at(static_cast<std::size_t>(r)));
      attached_to_survivors = lost_here.empty();
      return lost_here.empty();
    };
    shrink_watch.confirmed_by_word = [&] {
      // Its own checkpoint barrier failed, another rank that stays passed it: the checkpoint is
      // complete on every rank that stays, and the runtime stays on the survivors' communicator.
      runtime_->confirm_shrunk_checkpoint();
      attached_to_survivors = true;
    };
    shrink_watch.poll = [&watch] {
      watch.arm();
      watch.poll();
    };
    shrink_watch.before_disconnect = [&](bool peers_lost) {
      watch.disarm();  // no receive left pending on the communicator let go of next
      runtime_->release_state_before_shrink(peers_lost ? OldCommunicator::free : OldCommunicator::disconnect);
    };
    try {
      shrunk_here = &membership_.shrink(request.remove, shrink_watch);
    } catch (const LostDuringShrink& e) {
      lost = e.lost_ranks();
      // The job's communicator is untouched, and its handler back: the watch's receive from a
      // rank found lost on the survivors' communicator only fails as it is disarmed.
      const ErrorsReturned errors_returned(before);
      watch.disarm();
    }
  }
  if (!lost.empty()) return finish_shrink_after_loss(request, event, handoff, lost);
  const ShrinkReport& shrunk = *shrunk_here;
  if (tracing()) {
    TraceLine line;
    line.fields = {{"rank", old_rank},
                   {"role", handoff.leaving ? "leaves" : "stays"},
                   {"remove", request.remove},
                   {"tiles_sent", handoff.tiles_sent},
                   {"tiles_received", handoff.tiles_received},
                   {"bytes_moved", handoff.bytes_moved},
                   {"drain_seconds", handoff.seconds},
                   {"shrink_seconds", shrunk.total_seconds},
                   {"tasks_run", runtime_->stats().tasks_executed},
                   {"tiles_migrated", rebalance.tiles},
                   {"tasks_migrated", rebalance.tasks}};
    trace_pending_ = std::move(line);
  }
  if (handoff.leaving) return Outcome::left;
  // A ranks-lost event still pending names the ranks from before the shrink: from here on
  // it names them as the shrunk communicator does (the leavers, gone on purpose, dropped).
  loss_notices().renumber_at_shrink(request.remove);
  if (!attached_to_survivors) runtime_->attach_shrunk(communicator());
  if (was_rank_zero) {
    nlohmann::json record = shrink_record(request, event, old_size);
    record["bytes_handed_to_backups"] = all_bytes / 2;  // sender and receiver count each byte
    record["drain_seconds"] = slowest;
    record["tasks_run_by_leaving_ranks"] = leavers_ran;
    record["pinned_tasks_returned_to_backups"] = unpinned;
    record["tiles_migrated"] = rebalance.tiles;
    record["tasks_migrated"] = rebalance.tasks;
    record["shrink_seconds"] = shrunk.total_seconds;
    // Lost around its confirmation, past its point of no return: it stands without them, and
    // a rank that stays among them is recovered at the next iteration.
    if (!shrunk.lost_while_confirming.empty()) record["lost_after_hand_off"] = shrunk.lost_while_confirming;
    telemetry_.push_back(std::move(record));
  }
  return Outcome::resized;
}

nlohmann::json ElasticJob::shrink_record(const Request& request, const ResizeEvent& event, int old_size) const {
  return {{"id", event.id},
          {"before_iteration", event.before_iteration + 1},
          {"from_ranks", old_size},
          {"to_ranks", size()},
          {"remove", request.remove},
          {"reason", request.reason},
          {"requested_by", event.requested_by}};
}

ElasticJob::Outcome ElasticJob::finish_shrink_after_loss(const Request& request, ResizeEvent& event,
                                                         const ShrinkHandoff& handoff, const std::vector<int>& seen) {
  // Every survivor failed the shrink's numbers or Membership::shrink before its confirming
  // barrier, leavers included (the job's communicator untouched): they agree on who is lost,
  // and on_loss_during_resize decides from that alone (the same on every survivor). The
  // runtime still holds the copies from before the shrink and what the hand-off changed.
  const MPI_Comm before = communicator();
  const int old_size = size();
  const auto deadline = std::chrono::steady_clock::now() + kLateShrinkLossTimeout;
  // A rank that stays may hold the survivors' communicator and the checkpoint under it, which
  // the shrink never confirmed: back onto the job's communicator first.
  runtime_->leave_unconfirmed_survivors();
  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(before, &handler);
  MPI_Comm_set_errhandler(before, MPI_ERRORS_RETURN);  // agree_on_lost reads the dead's errors
  const auto only_leavers = [&](const std::vector<int>& ranks) {
    return std::all_of(ranks.begin(), ranks.end(), [&](int r) {
      return std::count(request.remove.begin(), request.remove.end(), r) > 0;
    });
  };
  const auto decide = [&](const std::vector<int>& ranks, bool copies_before_kept) {
    ResizeLossFacts facts{ResizeKind::shrink, ResizePhase::attach, copies_before_kept, false};
    facts.only_leavers_lost = only_leavers(ranks);
    return on_loss_during_resize(facts);
  };
  const auto described = [&](const std::vector<int>& ranks, const ResizeLossDecision& decision) {
    return "shrink without ranks " + rank_set_text(request.remove) + ": ranks " + rank_set_text(ranks) +
           " were lost " + decision.reason;
  };
  const std::vector<int> agreed = agree_on_lost(before, seen, deadline);
  ResizeLossDecision decision = decide(agreed, true);
  if (decision.action == ResizeLossAction::give_up) {
    // A rank that stays was lost: every rank, leavers too, takes its tiles back as they were
    // before the hand-off, and the next iteration finds the loss on the job's communicator,
    // which the job recovers from as from any (ElasticJob::recover: the copies from before
    // the shrink, the lost ranks' tiles from their buddies, the leavers staying).
    runtime_->give_up_hand_off();
    MPI_Comm_set_errhandler(before, handler);
    MPI_Errhandler_free(&handler);
    event.reason = described(agreed, decision) + " (" + event.reason + ")";
    return Outcome::refused;
  }
  // Only leavers were lost: the shrink is finished without them. The survivors rebuild the
  // job's communicator, as a recovery does (its numbers: the survivors in their old order);
  // a rank lost meanwhile is folded in, and decided on again without the copies from before.
  MPI_Errhandler_free(&handler);
  runtime_->release_state_before_shrink();
  std::vector<int> lost;
  Communicator survivors(rebuild_after_loss(before, agreed, deadline, lost));
  MPI_Comm old = before;
  membership_.adopt_survivors(std::move(survivors));  // lets go of `before` without freeing it
  MPI_Comm_free(&old);  // freed, never disconnected: it holds the dead
  if (lost != agreed) decision = decide(lost, false);
  const std::string what = described(lost, decision);
  if (decision.action != ResizeLossAction::finish_without_lost) throw RecoveryError(what);

  std::vector<int> leaving_now;  // the leavers still alive, numbered as the survivors are
  for (const int r : request.remove) {
    if (std::binary_search(lost.begin(), lost.end(), r)) continue;
    leaving_now.push_back(r - static_cast<int>(std::lower_bound(lost.begin(), lost.end(), r) - lost.begin()));
  }
  double shrink_seconds = 0.0;
  if (!leaving_now.empty()) {
    shrink_seconds = membership_.shrink(leaving_now).total_seconds;
    if (handoff.leaving) return Outcome::left;
    loss_notices().renumber_at_shrink(leaving_now);  // rebuild_after_loss renumbered the rest
  }
  runtime_->attach_shrunk(communicator());
  if (rank() == 0) {
    nlohmann::json record = shrink_record(request, event, old_size);
    record["lost_after_hand_off"] = lost;
    record["loss"] = what;
    record["tiles_migrated"] = runtime_->last_rebalance().tiles;
    record["tasks_migrated"] = runtime_->last_rebalance().tasks;
    record["shrink_seconds"] = shrink_seconds;
    telemetry_.push_back(std::move(record));
  }
  return Outcome::resized;
}

RecoveryReport ElasticJob::recover(const IterationReport& report, std::chrono::milliseconds timeout) {
  if (runtime_ == nullptr) throw std::logic_error("ElasticJob::recover before attach()");
  if (report.completed()) throw std::logic_error("ElasticJob::recover after an iteration that lost no rank");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const MPI_Comm job = communicator();
  MPI_Comm_set_errhandler(job, MPI_ERRORS_RETURN);  // agree_on_lost reads the dead's errors
  // Survivors lost during the rebuild or during recover() are folded in: every survivor
  // agrees again on the job's communicator from before the loss (kept until the recovery
  // succeeded), and rebuilds and recovers without the larger set.
  std::vector<int> known = report.lost_ranks;
  for (;;) {
    std::vector<int> lost;
    Communicator survivors(rebuild_after_loss(job, known, deadline, lost));
    MPI_Comm_set_errhandler(survivors.get(), MPI_ERRORS_RETURN);
    try {
      RecoveryReport recovered = runtime_->recover(survivors.get(), lost);
      MPI_Comm old = job;
      membership_.adopt_survivors(std::move(survivors));  // lets go of `job` without freeing it
      MPI_Comm_free(&old);  // freed, never disconnected: it holds the dead
      replays_the_join_boundary();
      return recovered;
    } catch (const LostDuringRecovery& e) {
      static std::vector<MPI_Comm> abandoned;  // never freed: messages may still arrive on them
      abandoned.push_back(survivors.release());
      known = lost;
      known.insert(known.end(), e.lost_ranks().begin(), e.lost_ranks().end());
      std::sort(known.begin(), known.end());
    }
  }
}

RecoveryReport ElasticJob::adopt_survivors(MPI_Comm survivors, std::span<const int> lost) {
  if (survivors == MPI_COMM_NULL) {
    throw std::invalid_argument("ElasticJob::adopt_survivors: the survivors' communicator is MPI_COMM_NULL");
  }
  int survivors_size = 0;
  MPI_Comm_size(survivors, &survivors_size);
  if (survivors_size + static_cast<int>(lost.size()) != size()) {
    throw std::invalid_argument("ElasticJob::adopt_survivors: the survivors' communicator has " +
                                std::to_string(survivors_size) + " ranks, but the job's " + std::to_string(size()) +
                                " less the " + std::to_string(lost.size()) + " lost make " +
                                std::to_string(size() - static_cast<int>(lost.size())));
  }
  const MPI_Comm job = communicator();
  RecoveryReport recovered;
  if (runtime_ != nullptr) {
    recovered = runtime_->recover(survivors, lost);
  } else {
    recovered.lost.assign(lost.begin(), lost.end());
    recovered.old_rank = rank();
    recovered.old_size = size();
    MPI_Comm_rank(survivors, &recovered.new_rank);
    recovered.new_size = survivors_size;
  }
  MPI_Comm old = job;
  membership_.adopt_survivors(Communicator(survivors));  // lets go of `job` without freeing it
  if (old != MPI_COMM_WORLD) MPI_Comm_free(&old);  // freed, never disconnected: it holds the dead
  replays_the_join_boundary();
  return recovered;
}

void ElasticJob::replays_the_join_boundary() {
  // A recovery rolls every survivor back to the same boundary, which may be the one this rank
  // joined through (the checkpoint that completes before the first iteration after an
  // expand): there every survivor agrees on the next request, this rank too.
  joined_at_iteration_ = -1;
}

void ElasticJob::after_iteration(const IterationReport& report) {
  last_iteration_ = report.iteration;
  last_iteration_start_ns_ = report.start_steady_ns;
  if (first_new_rank_ >= 0) time_first_tasks(report);
  if (joined_steady_ns_ != 0 && tracing()) {
    // A rank added by an expand: its own line, with the request time and the resize's
    // number from rank 0 (time_first_tasks).
    const auto& joined = membership_.grows().back();
    TraceLine line;
    ResizeEvent event;
    event.id = joined_resize_;
    event.from_ranks = joined_after_size_;
    event.to_ranks = size();
    event.requested_by = joined_requested_by_;
    line.fields = common_fields(event, rank(), "new");
    line.fields.update(nlohmann::ordered_json{
        {"spawn_ordinal", joined.spawn_ordinal},
        {"group_seconds", joined.group_seconds},
        {"merge_seconds", joined.merge_seconds.empty() ? 0.0 : joined.merge_seconds.front()},
        {"grow_seconds", joined.total_seconds},
        {"tiles_migrated", runtime_->last_rebalance().tiles},
        {"tasks_migrated", runtime_->last_rebalance().tasks}});
    line.fields.erase("reason");
    line.request_ns = joined_request_ns_;
    line.end_ns = joined_steady_ns_;
    line.start_ns = joined_steady_ns_ - static_cast<std::int64_t>(joined.total_seconds * 1e9);
    write_trace(line, report.iteration, report.start_steady_ns, report.first_task_steady_ns);
  }
  joined_steady_ns_ = 0;
  if (trace_pending_) {
    write_trace(*trace_pending_, report.iteration, report.start_steady_ns, report.first_task_steady_ns);
    trace_pending_.reset();
  }
}

void ElasticJob::time_first_tasks(const IterationReport& report) {
  const int first_new_rank = std::exchange(first_new_rank_, -1);  // once, even when a loss ends it
  // A peer lost at this boundary fails these collectives as it fails the agreement's
  // (agree_on_request): errors return, every peer is watched, and the numbers are given up;
  // the next iteration reports the loss.
  const MPI_Comm comm = communicator();
  const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
  const ErrorsReturned errors_returned(comm);
  PeerWatch watch(comm, rank(), size());
  watch.arm();
  auto buffers = std::make_unique<FirstTaskBuffers>();
  // The resize's number, who asked, and when, for the ranks it added (rank 0 knows them).
  buffers->resize = {resizes_, 0, expand_request_steady_ns_};
  if (rank() == 0 && !telemetry_.empty()) buffers->resize[1] = telemetry_.back().value("requested_by", 0);
  int posted = MPI_Ibcast(buffers->resize.data(), 3, MPI_INT64_T, 0, comm, &buffers->request);
  if (!completed_watched(posted, buffers->request, watch, "MPI_Ibcast")) {
    if (buffers->request != MPI_REQUEST_NULL) keep_until_exit(std::move(buffers));
    return;
  }
  joined_resize_ = static_cast<int>(buffers->resize[0]);
  joined_requested_by_ = static_cast<int>(buffers->resize[1]);
  joined_request_ns_ = buffers->resize[2];

  // Time from the expand request to the first task on each new rank. The ranks share
  // the host whose steady clock the request was stamped with; on other hosts the
  // numbers would mix clocks.
  buffers->mine = report.first_task_steady_ns;
  buffers->all.resize(static_cast<std::size_t>(size()));
  posted = MPI_Igather(&buffers->mine, 1, MPI_INT64_T, buffers->all.data(), 1, MPI_INT64_T, 0, comm,
                       &buffers->request);
  if (!completed_watched(posted, buffers->request, watch, "MPI_Igather")) {
    if (buffers->request != MPI_REQUEST_NULL) keep_until_exit(std::move(buffers));
    return;
  }
  const std::vector<std::int64_t>& all = buffers->all;
  if (rank() == 0 && !telemetry_.empty()) {
    nlohmann::json latencies = nlohmann::json::array();
    for (std::size_t r = static_cast<std::size_t>(first_new_rank); r < all.size(); ++r) {
      latencies.push_back(all[r] == 0 ? nlohmann::json(nullptr)
                                      : nlohmann::json(static_cast<double>(all[r] - expand_request_steady_ns_) * 1e-9));
    }
    telemetry_.back()["request_to_first_task_seconds"] = latencies;
    // What the new ranks stole in their first iteration is now theirs (Runtime::pinned()).
    std::size_t pinned_to_new = 0;
    for (const auto& [key, owner] : runtime_->pinned()) pinned_to_new += owner >= first_new_rank ? 1 : 0;
    telemetry_.back()["tasks_pinned_to_new_ranks"] = pinned_to_new;
  }
}

}  // namespace bellows::runtime
