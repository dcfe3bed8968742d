// The communication thread's part in work stealing (John & Milthorpe, section IV; the top of
// comm_engine.hpp): the thief's view and its requests, invitations sent to thieves while this
// rank drifts behind the plan, the requests served (inputs published for the thief to fetch,
// the rest forwarded) and the replies received (the stolen tasks adopted and their inputs
// fetched). Which victim, how many tasks and whom to forward to are StealPolicy's choices
// (steal_policy.hpp); which queued tasks to give is the engine's (engine_steal.cpp).

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bellows/runtime/message_logging.hpp"
#include "bellows/runtime/offload_policy.hpp"
#include "comm_engine.hpp"
#include "engine.hpp"

namespace bellows::runtime {

StealPolicy::ThiefView CommEngine::thief_view(StealPolicy::Time now) const {
  StealPolicy::ThiefView view;
  view.roots_queued = engine_.roots_queued();
  view.request_outstanding = steal_outstanding_;
  view.iteration_over = global_done_ || retired_;
  // The ready count takes the device queue's lock, which the device's workers contend for
  // (tasks of tens of microseconds at GPU speed): read it only when nothing else already
  // rules a request out. Unread it stays 0, and should_ask() says no for the other reason.
  if (view.roots_queued && !view.request_outstanding && !view.iteration_over &&
      now >= steal_policy_.next_ask_at()) {
    view.ready = engine_.ready_count();
    add_costs(view);
    // Tiles on their way here make local tasks ready about one transfer from now.
    if (mpi_receives_ > 0 || copies_in_flight_.load(std::memory_order_acquire) > 0 ||
        !pending_reads_.empty()) {
      view.expected_idle_seconds = engine_.transfer_seconds(-1, last_tile_bytes_);
    }
  }
  return view;
}

void CommEngine::add_costs(StealPolicy::ThiefView& view) const {
  view.round_trip_seconds = engine_.round_trip_seconds();
  if (const auto task = engine_.recent_task_seconds()) view.task_seconds = *task;
  if (last_tile_bytes_ > 0) view.tile_move_seconds = engine_.transfer_seconds(-1, last_tile_bytes_);
  std::tie(view.busiest_compute_share, view.mean_compute_share) = engine_.compute_shares();
}

bool CommEngine::retires() const {
  // A rank with a request out may still receive tasks.
  if (steal_outstanding_ || global_done_) return false;
  const auto& options = steal_policy_.options();
  // Thresholds of 0: not even an empty queue starves it, and it never asks.
  if (!StealPolicy::starving(options, 0)) return true;
  // Its own tasks all run, the rank idles until the iteration ends unless it steals: the
  // view's expected idle time stays unbounded.
  StealPolicy::ThiefView view;
  view.roots_queued = true;
  add_costs(view);
  return !StealPolicy::asking_pays(options, view);
}

bool CommEngine::maybe_send_steal_request(std::chrono::steady_clock::time_point now) {
  const auto at = steal_time(now);
  const auto view = thief_view(at);
  if (view.roots_queued && !view.request_outstanding && !view.iteration_over &&
      at >= steal_policy_.next_ask_at()) {  // the view was read in full
    asking_pays_.store(StealPolicy::asking_pays(steal_policy_.options(), view),
                       std::memory_order_release);
  }
  if (invited_by_ >= 0 && view.roots_queued && !view.request_outstanding && !view.iteration_over) {
    // Invited by a rank that drifts behind the plan: ask it now, idle or not; its gift rule
    // weighs this rank's own work left, sent with the request.
    const int victim = std::exchange(invited_by_, -1);
    StealPolicy::ThiefView priced = view;  // in a backoff the view was not read in full
    add_costs(priced);
    send_steal_request(victim, priced, now);
    ++stats_.steal.invitations_answered;
    return true;
  }
  if (!steal_policy_.should_ask(at, view)) return false;
  const auto victim = steal_policy_.choose_victim();
  if (!victim) return false;
  send_steal_request(*victim, view, now);
  return true;
}

void CommEngine::send_steal_request(int victim, const StealPolicy::ThiefView& view,
                                    std::chrono::steady_clock::time_point now) {
  wire::StealRequest request;
  request.thief = rank_;
  request.request_id = ++steal_request_id_;
  request.wanted = StealPolicy::tasks_to_ask(steal_policy_.options(), view);
  const Engine::ThiefCosts costs = engine_.thief_costs();
  request.thief_load_ns = static_cast<std::uint64_t>(costs.load_seconds * 1e9);
  request.thief_task_overhead_seconds = costs.task_overhead_seconds;
  request.thief_seconds_per_flop = costs.seconds_per_flop;
  send_control(victim, request);
  ++requests_in_flight_;
  steal_outstanding_.store(true, std::memory_order_release);
  final_reply_seen_ = false;
  partial_replies_expected_ = 0;
  partial_replies_seen_ = 0;
  tasks_this_request_ = 0;
  steal_sent_at_ = now;
  ++stats_.steal.requests_sent;
  stats_.steal.max_outstanding = std::max(stats_.steal.max_outstanding, requests_in_flight_);
}

bool CommEngine::maybe_invite_thieves(std::chrono::steady_clock::time_point now) {
  if (global_done_ || retired_) return false;
  const double since_last = invited_at_ == std::chrono::steady_clock::time_point{}
                                ? -1.0
                                : std::chrono::duration<double>(now - invited_at_).count();
  if (!OffloadPolicy::may_invite(since_last, engine_.round_trip_seconds())) return false;
  const auto thief = engine_.drift_invitee();
  if (!thief) return false;
  send_control(*thief, wire::StealInvitation{static_cast<std::uint32_t>(engine_.iteration())});
  invited_at_ = now;
  ++stats_.steal.invitations_sent;
  return true;
}

void CommEngine::handle_steal_invitation(int source, const wire::StealInvitation& invitation) {
  if (!engine_.stealing()) {
    fail("steal invitation from rank " + std::to_string(source) + " but stealing is off here");
  }
  // One sent in the previous iteration, or to a rank that has stopped asking, is moot.
  if (invitation.iteration != static_cast<std::uint32_t>(engine_.iteration()) || global_done_ || retired_) {
    return;
  }
  invited_by_ = source;
}

void CommEngine::handle_steal_request(int source, const wire::StealRequest& request) {
  if (!engine_.stealing()) {
    fail("steal request from rank " + std::to_string(source) + " but stealing is off here");
  }
  if (request.thief == rank_ || request.thief >= size_) {
    fail("steal request from rank " + std::to_string(source) + " names thief " +
         std::to_string(request.thief) + ", not a valid other rank");
  }
  ++stats_.steal.requests_received;
  stats_.steal.max_hops_seen = std::max<std::uint64_t>(stats_.steal.max_hops_seen, request.hops);

  std::size_t left = 0;
  std::size_t refused = 0;
  // With message logging, a thief of another team gets nothing unless stealing may cross
  // teams (MessageLogOptions::steal_across_teams); the request then ends here.
  const bool other_team = engine_.options().message_log.enabled &&
                          logs_message(engine_.message_log().rank_team(), rank_, request.thief);
  const bool may_give = !other_team || engine_.options().message_log.steal_across_teams;
  if (!may_give) {
    wire::StealReply refusal;
    refusal.request_id = request.request_id;
    refusal.hops = request.hops;
    refusal.final = true;
    refusal.partial_replies = request.partial_replies;
    send_control(request.thief, refusal);
    return;
  }
  auto tasks = global_done_ ? std::vector<std::unique_ptr<ReadyTask>>{}
                            : engine_.give_tasks(request.wanted, request.thief,
                                                 Engine::ThiefCosts{
                                                     static_cast<double>(request.thief_load_ns) * 1e-9,
                                                     request.thief_task_overhead_seconds,
                                                     request.thief_seconds_per_flop},
                                                 left, refused);
  stats_.steal.tasks_refused += refused;
  if (tasks.empty() && refused > 0) ++stats_.steal.requests_refused;
  wire::StealReply reply;
  reply.request_id = request.request_id;
  reply.hops = request.hops;
  std::vector<InputSource> specs;
  for (auto& task : tasks) {
    wire::StolenTask stolen;
    stolen.key = task->key;
    specs.clear();
    task->task_class->inputs(task->key, specs);
    for (std::size_t slot = 0; slot < task->tiles.size() && slot < specs.size(); ++slot) {
      if (specs[slot].kind == InputSource::Kind::scratch) continue;  // the thief makes it
      wire::StolenInput input;
      input.slot = static_cast<std::uint8_t>(slot);
      TilePtr& tile = task->tiles[slot];
      if (tile && tile->elements() > 0) {
        input.handle = next_handle_++;
        input.rows = tile->rows();
        input.cols = tile->cols();
        if (same_host_.can_read(request.thief)) {
          input.address = reinterpret_cast<std::uintptr_t>(std::as_const(*tile).data());
        }
        published_.emplace(input.handle, std::move(tile));
      }
      stolen.inputs.push_back(input);
    }
    reply.tasks.push_back(std::move(stolen));
  }
  const auto given = static_cast<std::int32_t>(reply.tasks.size());
  if (given > 0 && other_team) {
    std::vector<TaskKey> keys;
    for (const auto& stolen : reply.tasks) keys.push_back(stolen.key);
    engine_.message_log().tasks_given(engine_.iteration(), keys, request.thief);
  }
  if (given > 0) {
    ++stats_.steal.requests_served;
    stats_.steal.tasks_given += static_cast<std::uint64_t>(given);
    const auto kept = static_cast<std::int64_t>(left);
    stats_.steal.min_ready_after_serve = stats_.steal.min_ready_after_serve < 0
                                             ? kept
                                             : std::min(stats_.steal.min_ready_after_serve, kept);
  }
  // What this rank could not give goes on to another victim, on the thief's behalf.
  const auto next = steal_policy_.forward_to(request.thief, request.hops, given, request.wanted);
  if (next) {
    wire::StealRequest forward = request;
    forward.wanted = next->wanted;
    forward.hops = static_cast<std::uint8_t>(next->hops);
    if (given > 0) {
      reply.final = false;
      send_control(request.thief, reply);
      forward.partial_replies = static_cast<std::uint16_t>(request.partial_replies + 1);
    }
    send_control(next->victim, forward);
    ++stats_.steal.requests_forwarded;
    return;
  }
  reply.final = true;
  reply.partial_replies = request.partial_replies;
  send_control(request.thief, reply);
}

void CommEngine::handle_steal_reply(int source, wire::StealReply&& reply) {
  // The round trip ends when the answer is here; fetching the stolen inputs follows.
  const auto answered = std::chrono::steady_clock::now();
  if (!steal_outstanding_ || reply.request_id != steal_request_id_) {
    fail("steal reply " + std::to_string(reply.request_id) + " from rank " +
         std::to_string(source) + " answers no outstanding request");
  }
  for (auto& task : reply.tasks) {
    engine_.adopt_stolen(task.key);
    for (const auto& input : task.inputs) {
      if (input.rows == 0) {
        engine_.deliver(task.key, input.slot, nullptr);
        continue;
      }
      auto tile = std::make_shared<Tile>(input.rows, input.cols);
      stats_.steal.bytes_stolen += tile->bytes();
      if (input.address != 0) {
        wire::Target target;
        target.consumer = task.key;
        target.slot = input.slot;
        pending_reads_.push_back(
            PendingRead{source, input.handle, input.address, std::move(tile), {target}, {}, false});
        continue;
      }
      const int tag = next_tag();
      MPI_Request request;
      checked(MPI_Irecv(tile->data(), element_count(*tile), MPI_DOUBLE, source, tag, comm_, &request), request, "MPI_Irecv");
      wire::Target target;
      target.consumer = task.key;
      target.slot = input.slot;
      post(request, Operation{Operation::Kind::activation_recv, source, {}, std::move(tile), {target}, {}});
      send_control(source, wire::Fetch{input.handle, tag});
    }
  }
  stats_.steal.tasks_stolen += reply.tasks.size();
  tasks_this_request_ += reply.tasks.size();
  steal_policy_.reply_received(source, reply.tasks.size());
  if (reply.final) {
    if (final_reply_seen_) {
      fail("second final reply to steal request " + std::to_string(reply.request_id));
    }
    final_reply_seen_ = true;
    partial_replies_expected_ = reply.partial_replies;
    final_reply_hops_ = reply.hops;
  } else {
    ++partial_replies_seen_;
  }
  if (final_reply_seen_ && partial_replies_seen_ == partial_replies_expected_) {
    finish_steal_request(answered);
  }
}

void CommEngine::finish_steal_request(std::chrono::steady_clock::time_point now) {
  if (requests_in_flight_ > 0) --requests_in_flight_;
  steal_outstanding_.store(false, std::memory_order_release);
  const double round_trip = std::chrono::duration<double>(now - steal_sent_at_).count();
  stats_.steal.round_trip_seconds.push_back(round_trip);
  engine_.round_trip_measured(round_trip);
  stats_.steal.round_trip_forwards.push_back(final_reply_hops_);
  if (tasks_this_request_ == 0) ++stats_.steal.requests_failed;
  const auto next = steal_policy_.request_answered(
      steal_time(now), tasks_this_request_,
      std::chrono::duration_cast<StealPolicy::Time>(
          std::chrono::duration<double>(engine_.round_trip_seconds())),
      engine_.recent_task_seconds().value_or(std::numeric_limits<double>::infinity()),
      final_reply_hops_ + 1);
  next_ask_ns_.store(next.count(), std::memory_order_release);
}

}  // namespace bellows::runtime
