#include "bellows/controller/resize_state.hpp"

#include <cstddef>

namespace bellows::controller {

namespace {

using K = ResizeKind;
using S = ResizeState;
using E = ResizeEvent;
using A = ResizeAction;

// The resize lifecycle. Every row is one allowed transition; anything else is refused.
constexpr std::array kTransitions{
    // ---- expand: ask the resource manager, start daemons, add ranks, wait for the commit
    ResizeTransition{K::expand, S::none, E::request, S::requested, A::ask_rm},
    ResizeTransition{K::expand, S::requested, E::rm_granted, S::granted, A::start_daemons},
    ResizeTransition{K::expand, S::requested, E::rm_denied, S::aborted, A::none},
    ResizeTransition{K::expand, S::requested, E::rm_timeout, S::aborted, A::cancel_rm_request},
    ResizeTransition{K::expand, S::requested, E::resize_deadline, S::aborted, A::cancel_rm_request},
    ResizeTransition{K::expand, S::requested, E::cancel_requested, S::aborted, A::cancel_rm_request},
    ResizeTransition{K::expand, S::granted, E::daemons_ready, S::reconfiguring, A::add_ranks},
    ResizeTransition{K::expand, S::granted, E::daemon_start_timeout, S::aborting, A::withdraw_and_release},
    ResizeTransition{K::expand, S::granted, E::rank_died, S::aborting, A::withdraw_and_release},
    ResizeTransition{K::expand, S::granted, E::resize_deadline, S::aborting, A::withdraw_and_release},
    ResizeTransition{K::expand, S::granted, E::cancel_requested, S::aborting, A::withdraw_and_release},
    ResizeTransition{K::expand, S::reconfiguring, E::ranks_committed, S::committed, A::adopt_nodes},
    ResizeTransition{K::expand, S::reconfiguring, E::rank_died, S::cancelling, A::cancel_in_job},
    ResizeTransition{K::expand, S::reconfiguring, E::resize_deadline, S::cancelling, A::cancel_in_job},
    ResizeTransition{K::expand, S::reconfiguring, E::cancel_requested, S::cancelling, A::cancel_in_job},
    ResizeTransition{K::expand, S::reconfiguring, E::job_refused, S::aborting, A::withdraw_and_release},
    // called off after the job was told: the job's answer decides
    ResizeTransition{K::expand, S::cancelling, E::job_cancelled, S::aborting, A::withdraw_and_release},
    ResizeTransition{K::expand, S::cancelling, E::job_refused, S::aborting, A::withdraw_and_release},
    ResizeTransition{K::expand, S::cancelling, E::cancel_timeout, S::aborting, A::withdraw_and_release},
    ResizeTransition{K::expand, S::cancelling, E::ranks_committed, S::committed, A::adopt_nodes},
    ResizeTransition{K::expand, S::cancelling, E::rank_died, S::cancelling, A::none},
    ResizeTransition{K::expand, S::cancelling, E::resize_deadline, S::cancelling, A::none},
    ResizeTransition{K::expand, S::aborting, E::release_done, S::aborted, A::none},
    ResizeTransition{K::expand, S::aborting, E::release_failed, S::aborted, A::note_unreleased},
    ResizeTransition{K::expand, S::aborting, E::resize_deadline, S::aborting, A::none},
    // the job's end: the nodes go back with the job, and the resource manager's backend
    // cancels a helper request still open
    ResizeTransition{K::expand, S::requested, E::job_ended, S::aborted, A::none},
    ResizeTransition{K::expand, S::granted, E::job_ended, S::aborted, A::none},
    ResizeTransition{K::expand, S::reconfiguring, E::job_ended, S::aborted, A::none},
    ResizeTransition{K::expand, S::cancelling, E::job_ended, S::aborted, A::none},
    ResizeTransition{K::expand, S::aborting, E::job_ended, S::aborted, A::none},
    // ---- shrink: tell the job who leaves, wait until they exited, only then give nodes back
    ResizeTransition{K::shrink, S::none, E::request, S::reconfiguring, A::remove_ranks},
    ResizeTransition{K::shrink, S::reconfiguring, E::ranks_committed, S::draining, A::none},
    ResizeTransition{K::shrink, S::reconfiguring, E::rank_died, S::cancelling, A::cancel_in_job},
    ResizeTransition{K::shrink, S::reconfiguring, E::resize_deadline, S::cancelling, A::cancel_in_job},
    ResizeTransition{K::shrink, S::reconfiguring, E::cancel_requested, S::cancelling, A::cancel_in_job},
    ResizeTransition{K::shrink, S::reconfiguring, E::job_refused, S::aborted, A::none},
    // called off after the job was told: the leaving ranks stay only if the job says so
    ResizeTransition{K::shrink, S::cancelling, E::job_cancelled, S::aborted, A::none},
    ResizeTransition{K::shrink, S::cancelling, E::job_refused, S::aborted, A::none},
    ResizeTransition{K::shrink, S::cancelling, E::cancel_timeout, S::aborted, A::none},
    ResizeTransition{K::shrink, S::cancelling, E::ranks_committed, S::draining, A::none},
    ResizeTransition{K::shrink, S::cancelling, E::rank_died, S::cancelling, A::none},
    ResizeTransition{K::shrink, S::cancelling, E::resize_deadline, S::cancelling, A::none},
    // the job runs without the leaving ranks: only their exit is awaited; the nodes go back
    // once they exited, or stay the job's (unreleased) when they do not exit in time
    ResizeTransition{K::shrink, S::draining, E::drain_done, S::releasing, A::release_nodes},
    ResizeTransition{K::shrink, S::draining, E::rank_died, S::releasing, A::release_nodes},
    ResizeTransition{K::shrink, S::draining, E::resize_deadline, S::committed, A::note_unreleased},
    ResizeTransition{K::shrink, S::releasing, E::release_done, S::committed, A::none},
    ResizeTransition{K::shrink, S::releasing, E::release_failed, S::committed, A::note_unreleased},
    ResizeTransition{K::shrink, S::releasing, E::resize_deadline, S::releasing, A::none},
    // the job's end: before the job took the new membership nothing changed; after it, the
    // job ran without the leaving ranks and their nodes go back with the job
    ResizeTransition{K::shrink, S::reconfiguring, E::job_ended, S::aborted, A::none},
    ResizeTransition{K::shrink, S::cancelling, E::job_ended, S::aborted, A::none},
    ResizeTransition{K::shrink, S::draining, E::job_ended, S::committed, A::none},
    ResizeTransition{K::shrink, S::releasing, E::job_ended, S::committed, A::none},
};

constexpr std::array<std::string_view, 3> kKindNames{"expand", "shrink", "failure"};
constexpr std::array<std::string_view, 14> kStateNames{
    "none", "requested", "granted", "reconfiguring", "releasing", "aborting", "committed", "aborted", "draining",
    "cancelling", "detected", "agreed", "recovered", "given_up"};
constexpr std::array<std::string_view, 25> kEventNames{
    "request",         "rm_granted",  "rm_denied",     "rm_timeout",    "daemons_ready",  "daemon_start_timeout",
    "ranks_committed", "rank_died",   "drain_done",    "release_done",  "release_failed", "resize_deadline",
    "job_refused",     "job_ended",   "job_cancelled", "cancel_timeout", "node_lost",     "survivors_told",
    "job_recovered",   "recovery_deadline", "cancel_requested", "job_control",
    "attached",        "controller_lost", "message_log"};
constexpr std::array<std::string_view, 12> kActionNames{
    "none",         "ask_rm",        "cancel_rm_request", "start_daemons",   "add_ranks",  "withdraw_and_release",
    "remove_ranks", "cancel_in_job", "release_nodes",     "note_unreleased", "adopt_nodes", "drop_lost"};
constexpr std::array<std::string_view, 12> kActionHelp{
    "nothing",
    "ask the resource manager for the nodes",
    "withdraw the request from the resource manager",
    "start a daemon on every granted node",
    "tell the job to add ranks on the new nodes",
    "stop what the resize started on its nodes, give the nodes back",
    "tell the job which ranks leave",
    "ask the job to drop the resize unless it has carried it out already",
    "give the drained nodes back to the resource manager",
    "record the nodes the resource manager did not take back",
    "count the new nodes as the job's",
    "drop the lost nodes from the job, give them back, tell the surviving nodes' daemons who is lost",
};

template <typename Enum, std::size_t N>
std::string_view name_of(const std::array<std::string_view, N>& names, Enum value) noexcept {
  const auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : std::string_view("?");
}

template <typename Enum, std::size_t N>
std::optional<Enum> parse_name(const std::array<std::string_view, N>& names,
                               std::string_view text) noexcept {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == text) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

}  // namespace

std::span<const ResizeTransition> resize_transitions() noexcept { return kTransitions; }

std::optional<ResizeTransition> find_transition(ResizeKind kind, ResizeState from,
                                                ResizeEvent event) noexcept {
  for (const ResizeTransition& t : kTransitions) {
    if (t.kind == kind && t.from == from && t.event == event) return t;
  }
  return std::nullopt;
}

std::string_view to_string(ResizeKind kind) noexcept { return name_of(kKindNames, kind); }
std::string_view to_string(ResizeState state) noexcept { return name_of(kStateNames, state); }
std::string_view to_string(ResizeEvent event) noexcept { return name_of(kEventNames, event); }
std::string_view to_string(ResizeAction action) noexcept { return name_of(kActionNames, action); }
std::string_view describe(ResizeAction action) noexcept { return name_of(kActionHelp, action); }

std::optional<ResizeKind> parse_resize_kind(std::string_view text) noexcept {
  return parse_name<ResizeKind>(kKindNames, text);
}
std::optional<ResizeState> parse_resize_state(std::string_view text) noexcept {
  return parse_name<ResizeState>(kStateNames, text);
}
std::optional<ResizeEvent> parse_resize_event(std::string_view text) noexcept {
  return parse_name<ResizeEvent>(kEventNames, text);
}

std::string transitions_markdown(std::span<const ResizeTransition> rows, KindColumn kind_column) {
  const bool with_kind = kind_column == KindColumn::shown;
  std::string out = with_kind ? "| kind | state | event | next state | action |\n|---|---|---|---|---|\n"
                              : "| state | event | next state | action |\n|---|---|---|---|\n";
  for (const ResizeTransition& t : rows) {
    out += "| ";
    if (with_kind) {
      out += to_string(t.kind);
      out += " | ";
    }
    out += to_string(t.from);
    out += " | ";
    out += to_string(t.event);
    out += " | ";
    out += to_string(t.to);
    out += " | ";
    if (t.action == ResizeAction::none) {
      out += "-";
    } else {
      out += "`";
      out += to_string(t.action);
      out += "`: ";
      out += describe(t.action);
    }
    out += " |\n";
  }
  return out;
}

std::string transitions_markdown() { return transitions_markdown(kTransitions, KindColumn::shown); }

}  // namespace bellows::controller
