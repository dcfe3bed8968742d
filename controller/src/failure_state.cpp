#include "bellows/controller/failure_state.hpp"

#include <array>

namespace bellows::controller {

namespace {

using S = ResizeState;
using E = ResizeEvent;
using A = ResizeAction;

constexpr ResizeTransition row(S from, E event, S to, A action) {
  return ResizeTransition{ResizeKind::failure, from, event, to, action};
}

// The failure lifecycle. Every row is one allowed transition; anything else is refused.
constexpr std::array kFailureTransitions{
    row(S::none, E::rank_died, S::detected, A::drop_lost),
    row(S::none, E::node_lost, S::detected, A::drop_lost),
    row(S::detected, E::survivors_told, S::agreed, A::none),
    row(S::detected, E::recovery_deadline, S::given_up, A::none),
    row(S::detected, E::job_ended, S::given_up, A::none),
    row(S::agreed, E::job_recovered, S::recovered, A::none),
    row(S::agreed, E::recovery_deadline, S::given_up, A::none),
    row(S::agreed, E::job_ended, S::given_up, A::none),
};

}  // namespace

std::span<const ResizeTransition> failure_transitions() noexcept { return kFailureTransitions; }

std::optional<ResizeTransition> find_failure_transition(ResizeState from, ResizeEvent event) noexcept {
  for (const ResizeTransition& t : kFailureTransitions) {
    if (t.from == from && t.event == event) return t;
  }
  return std::nullopt;
}

std::string failure_transitions_markdown() {
  // Every row is of kind failure: the column would say nothing.
  return transitions_markdown(kFailureTransitions, KindColumn::left_out);
}

}  // namespace bellows::controller
