// Every row of the transition table, taken the way it happens in a run (the resource
// manager's and the job's answers through the fakes, timers through the fake clock), and
// every event the table does not allow in a reachable state, refused.

#include "controller_fixture.hpp"

#include "bellows/controller/resize_state.hpp"

#include <ostream>
#include <set>
#include <tuple>

namespace bellows::controller {
/// gtest names a row by its kind, state and event.
inline void PrintTo(const ResizeTransition& t, std::ostream* os) {
  *os << to_string(t.kind) << " " << to_string(t.from) << " --" << to_string(t.event) << "--> "
      << to_string(t.to) << " / " << to_string(t.action);
}
}  // namespace bellows::controller

namespace bellows::controller::testing {
namespace {

std::string row_name(ResizeKind kind, ResizeState from, ResizeEvent event) {
  return std::string(to_string(kind)) + "_" + std::string(to_string(from)) + "_" +
         std::string(to_string(event));
}

TEST(ResizeTable, HasOneRowPerKindStateAndEvent) {
  std::set<std::tuple<ResizeKind, ResizeState, ResizeEvent>> seen;
  for (const ResizeTransition& t : resize_transitions()) {
    EXPECT_TRUE(seen.insert({t.kind, t.from, t.event}).second)
        << "two rows for " << row_name(t.kind, t.from, t.event);
    EXPECT_FALSE(is_final(t.from)) << row_name(t.kind, t.from, t.event);
  }
  EXPECT_EQ(resize_transitions().size(), 52u);
}

TEST(ResizeTable, EveryStateBetweenStartAndEndIsLeftAndEveryFinalStateReached) {
  for (ResizeKind kind : {ResizeKind::expand, ResizeKind::shrink}) {
    std::set<ResizeState> entered{ResizeState::none};
    std::set<ResizeState> left;
    for (const ResizeTransition& t : resize_transitions()) {
      if (t.kind != kind) continue;
      entered.insert(t.to);
      if (t.to != t.from) left.insert(t.from);
    }
    for (ResizeState s : entered) {
      if (!is_final(s)) {
        EXPECT_TRUE(left.count(s)) << to_string(kind) << " stays in " << to_string(s);
      }
    }
    EXPECT_TRUE(entered.count(ResizeState::committed)) << to_string(kind);
    EXPECT_TRUE(entered.count(ResizeState::aborted)) << to_string(kind);
  }
}

TEST(ResizeTable, NamesRoundTrip) {
  for (const ResizeTransition& t : resize_transitions()) {
    EXPECT_EQ(parse_resize_kind(to_string(t.kind)), t.kind);
    EXPECT_EQ(parse_resize_state(to_string(t.from)), t.from);
    EXPECT_EQ(parse_resize_state(to_string(t.to)), t.to);
    EXPECT_EQ(parse_resize_event(to_string(t.event)), t.event);
  }
  EXPECT_EQ(parse_resize_state("grnted"), std::nullopt);
  EXPECT_EQ(parse_resize_event(""), std::nullopt);
  EXPECT_EQ(to_string(ResizeEvent::daemon_start_timeout), "daemon_start_timeout");
  EXPECT_EQ(find_transition(ResizeKind::shrink, ResizeState::requested, ResizeEvent::rm_granted),
            std::nullopt);
}

// ---------------------------------------------------------------- each row

class EveryTransition : public ControllerTest,
                        public ::testing::WithParamInterface<ResizeTransition> {
 protected:
  // Scripts the fakes so that the row's event will come when triggered and no other answer
  // comes before it.
  void script_for(const ResizeTransition& t) {
    if (t.event == ResizeEvent::rm_denied) rm.script_expand(ExpandScript::deny("no idle node fits", 700ms));
    // The controller's own timer (the resource manager never answers), so that the row's
    // action has a request to withdraw; an answered timeout is in expand_test.cpp.
    if (t.event == ResizeEvent::rm_timeout) rm.script_expand(ExpandScript::never());
    if (t.from == ResizeState::aborting || t.from == ResizeState::releasing) {
      if (t.event == ResizeEvent::release_done) {
        rm.script_release(ReleaseScript::pool(100ms));
      } else if (t.event == ResizeEvent::release_failed) {
        rm.script_release(ReleaseScript::fail(RmCode::unavailable, "slurmctld not responding", 100ms));
      } else {
        rm.script_release(ReleaseScript::never());
      }
    }
  }

  void drive_to(ResizeKind kind, ResizeState from) {
    if (from == ResizeState::none) return;
    if (kind == ResizeKind::expand) {
      switch (from) {
        case ResizeState::requested:
          ASSERT_TRUE(expand(2).accepted);
          break;
        case ResizeState::granted:
          expand_to_granted();
          break;
        case ResizeState::reconfiguring:
          expand_to_reconfiguring();
          break;
        case ResizeState::aborting:
          expand_to_granted();
          advance(2000ms);  // daemon_start_timeout
          break;
        case ResizeState::cancelling:
          expand_to_reconfiguring();
          ASSERT_TRUE(ctl->deliver(0, ResizeEvent::resize_deadline, "limit passed").accepted);
          break;
        default:
          FAIL() << "no path to " << to_string(from);
      }
    } else {
      ASSERT_TRUE(shrink(1).accepted);
      if (from == ResizeState::cancelling) {
        ASSERT_TRUE(ctl->deliver(0, ResizeEvent::resize_deadline, "limit passed").accepted);
      } else if (from == ResizeState::releasing) {
        job.committed(1, 1);
        job.left(1);
        advance(10ms);
      } else if (from == ResizeState::draining) {
        job.committed(1, 1);
        advance(10ms);
      }
    }
    ASSERT_EQ(state(), from);
  }

  void trigger(ResizeKind kind, ResizeEvent event) {
    switch (event) {
      case ResizeEvent::request:
        ASSERT_TRUE((kind == ResizeKind::expand ? expand(2) : shrink(1)).accepted);
        break;
      case ResizeEvent::rm_granted:
      case ResizeEvent::rm_denied:
        advance(700ms);
        break;
      case ResizeEvent::rm_timeout:
        advance(1500ms);  // rm_request_timeout + rm_answer_grace
        break;
      case ResizeEvent::daemons_ready:
        job.daemon_up(1, "node2");
        job.daemon_up(1, "node3");
        advance(10ms);
        break;
      case ResizeEvent::daemon_start_timeout:
        advance(2000ms);
        break;
      case ResizeEvent::ranks_committed:
        job.committed(1, kind == ResizeKind::expand ? 4 : 1);
        advance(10ms);
        break;
      case ResizeEvent::rank_died:
        job.died(1, "node1", "signal 9");
        advance(10ms);
        break;
      case ResizeEvent::drain_done:
        job.left(1);
        advance(10ms);
        break;
      case ResizeEvent::release_done:
      case ResizeEvent::release_failed:
        advance(100ms);
        break;
      case ResizeEvent::resize_deadline:
        ASSERT_TRUE(ctl->deliver(0, ResizeEvent::resize_deadline, "limit passed").accepted);
        break;
      case ResizeEvent::job_refused:
        job.refused(1, "rank 0 cannot leave");
        advance(10ms);
        break;
      case ResizeEvent::job_ended:
        ASSERT_TRUE(ctl->deliver(0, ResizeEvent::job_ended, "the job ended").accepted);
        break;
      case ResizeEvent::job_cancelled:
        job.cancelled(1);
        advance(10ms);
        break;
      case ResizeEvent::cancel_timeout:
        advance(4000ms);  // cancel_timeout
        break;
      case ResizeEvent::node_lost:
      case ResizeEvent::survivors_told:
      case ResizeEvent::job_recovered:
      case ResizeEvent::recovery_deadline:
        FAIL() << "a failure's event in a resize's row";  // failure_test.cpp drives these
        break;
      case ResizeEvent::cancel_requested:
        ASSERT_TRUE(ctl->deliver(0, ResizeEvent::cancel_requested, "cancelled by its requester").accepted);
        break;
      case ResizeEvent::job_control:
        FAIL() << "job_control is no transition";
      case ResizeEvent::attached:
      case ResizeEvent::controller_lost:
        FAIL() << to_string(event) << " is no transition: a controller that takes the job over writes it";
      case ResizeEvent::message_log:
        FAIL() << "message_log is no transition: a rank's metrics write it";
    }
  }
};

TEST_P(EveryTransition, HappensAndCarriesItsAction) {
  const ResizeTransition t = GetParam();
  script_for(t);
  drive_to(t.kind, t.from);
  if (HasFatalFailure()) return;

  const auto job_calls = job.calls().size();
  const auto rm_requests = rm.expand_requests().size();
  const auto rm_cancels = rm.cancel_calls().size();
  const auto rm_releases = rm.releases().size();
  const auto lines = records().size();

  trigger(t.kind, t.event);
  if (HasFatalFailure()) return;

  EXPECT_EQ(state(), t.to);
  ASSERT_EQ(records().size(), lines + 1);
  const EventRecord r = last_record();
  EXPECT_EQ(r.resize, 1u);
  EXPECT_EQ(r.kind, t.kind);
  EXPECT_EQ(r.event, t.event);
  EXPECT_EQ(r.from, t.from);
  EXPECT_EQ(r.to, t.to);
  EXPECT_FALSE(r.refused) << r.detail;

  const bool expand = t.kind == ResizeKind::expand;
  const std::vector<std::string> nodes =
      expand ? std::vector<std::string>{"node2", "node3"} : std::vector<std::string>{"node1"};
  std::size_t new_job_calls = 0, new_requests = 0, new_cancels = 0, new_releases = 0;
  switch (t.action) {
    case ResizeAction::none:
      break;
    case ResizeAction::drop_lost:
      ADD_FAILURE() << "a failure's action in a resize's row";
      break;
    case ResizeAction::ask_rm:
      new_requests = 1;
      EXPECT_EQ(rm.expand_requests().back().job, "42");
      EXPECT_EQ(rm.expand_requests().back().count, 2u);
      EXPECT_EQ(rm.expand_requests().back().min_count, 1u);
      EXPECT_EQ(rm.expand_requests().back().timeout, 1000ms);
      break;
    case ResizeAction::cancel_rm_request:
      new_cancels = 1;
      EXPECT_EQ(rm.cancel_calls().back(), 1u);
      break;
    case ResizeAction::start_daemons:
      new_job_calls = 1;
      EXPECT_EQ(job.calls().back(), "start_daemons 1 node2,node3");
      break;
    case ResizeAction::add_ranks:
      new_job_calls = 1;
      EXPECT_EQ(job.calls().back(), "add_ranks 1 node2,node3");
      break;
    case ResizeAction::withdraw_and_release:
      new_job_calls = 1;
      new_releases = 1;
      EXPECT_EQ(job.calls().back(), "withdraw 1 node2,node3");
      EXPECT_EQ(rm.releases().back(), (ReleaseCall{"42", {"node2", "node3"}}));
      break;
    case ResizeAction::remove_ranks:
      new_job_calls = 1;
      EXPECT_EQ(job.calls().back(), "remove_ranks 1 node1");
      break;
    case ResizeAction::cancel_in_job:
      new_job_calls = 1;
      EXPECT_EQ(job.calls().back(), "cancel 1");
      break;
    case ResizeAction::release_nodes:
      new_releases = 1;
      EXPECT_EQ(rm.releases().back(), (ReleaseCall{"42", {"node1"}}));
      EXPECT_EQ(ctl->nodes(), (std::vector<std::string>{"node0"}));
      break;
    case ResizeAction::note_unreleased:
      EXPECT_EQ(ctl->unreleased_nodes(), nodes);
      break;
    case ResizeAction::adopt_nodes:
      EXPECT_EQ(ctl->nodes(), (std::vector<std::string>{"node0", "node1", "node2", "node3"}));
      break;
  }
  if (t.action != ResizeAction::note_unreleased) {
    EXPECT_TRUE(ctl->unreleased_nodes().empty());
  }
  // The job's node list after every row: an expand's nodes count once the job committed
  // them; a shrink's leaving node stops counting once the job ran without its ranks and
  // they exited or the deadline passed (releasing, or committed from draining by deadline).
  std::vector<std::string> expected{"node0", "node1"};
  if (expand && t.to == ResizeState::committed) expected = {"node0", "node1", "node2", "node3"};
  if (!expand && (t.from == ResizeState::releasing || t.to == ResizeState::releasing ||
                  (t.from == ResizeState::draining && t.event == ResizeEvent::resize_deadline))) {
    expected = {"node0"};
  }
  EXPECT_EQ(ctl->nodes(), expected);
  EXPECT_EQ(job.calls().size(), job_calls + new_job_calls);
  EXPECT_EQ(rm.expand_requests().size(), rm_requests + new_requests);
  EXPECT_EQ(rm.cancel_calls().size(), rm_cancels + new_cancels);
  EXPECT_EQ(rm.releases().size(), rm_releases + new_releases);
}

INSTANTIATE_TEST_SUITE_P(
    Table, EveryTransition, ::testing::ValuesIn(resize_transitions().begin(), resize_transitions().end()),
    [](const ::testing::TestParamInfo<ResizeTransition>& row) {
      return row_name(row.param.kind, row.param.from, row.param.event);
    });

// ---------------------------------------------------------------- events the table refuses

struct RefusedCase {
  ResizeKind kind;
  ResizeState state;
  ResizeEvent event;
};

void PrintTo(const RefusedCase& c, std::ostream* os) {
  *os << to_string(c.kind) << " in " << to_string(c.state) << " refuses " << to_string(c.event);
}

/// Every event in every state a resize can wait in, but request (a second request is refused
/// before it reaches the table: another resize is in flight) and rm_granted (it carries the
/// granted nodes and cannot be delivered from outside; a grant nobody waits for is given
/// back, expand_test.cpp).
std::vector<RefusedCase> refused_cases() {
  const std::vector<std::pair<ResizeKind, ResizeState>> reachable{
      {ResizeKind::expand, ResizeState::requested},     {ResizeKind::expand, ResizeState::granted},
      {ResizeKind::expand, ResizeState::reconfiguring}, {ResizeKind::expand, ResizeState::aborting},
      {ResizeKind::expand, ResizeState::cancelling},    {ResizeKind::shrink, ResizeState::reconfiguring},
      {ResizeKind::shrink, ResizeState::releasing},     {ResizeKind::shrink, ResizeState::draining},
      {ResizeKind::shrink, ResizeState::cancelling}};
  std::vector<RefusedCase> out;
  for (auto [kind, state] : reachable) {
    for (int e = static_cast<int>(ResizeEvent::rm_denied); e <= static_cast<int>(ResizeEvent::cancel_timeout); ++e) {
      const auto event = static_cast<ResizeEvent>(e);
      if (!find_transition(kind, state, event)) out.push_back({kind, state, event});
    }
  }
  return out;
}

class RefusedEventTest : public ControllerTest, public ::testing::WithParamInterface<RefusedCase> {};

TEST_P(RefusedEventTest, ChangesNothingAndIsLogged) {
  const RefusedCase c = GetParam();
  rm.script_release(ReleaseScript::never());
  if (c.kind == ResizeKind::expand) {
    switch (c.state) {
      case ResizeState::requested:
        ASSERT_TRUE(expand(2).accepted);
        break;
      case ResizeState::granted:
        expand_to_granted();
        break;
      case ResizeState::reconfiguring:
        expand_to_reconfiguring();
        break;
      case ResizeState::cancelling:
        expand_to_reconfiguring();
        ASSERT_TRUE(ctl->deliver(0, ResizeEvent::resize_deadline, "limit passed").accepted);
        break;
      default:
        expand_to_granted();
        advance(2000ms);
        break;
    }
  } else {
    ASSERT_TRUE(shrink(1).accepted);
    if (c.state == ResizeState::cancelling) {
      ASSERT_TRUE(ctl->deliver(0, ResizeEvent::resize_deadline, "limit passed").accepted);
    } else if (c.state == ResizeState::releasing) {
      job.committed(1, 1);
      job.left(1);
      advance(10ms);
    } else if (c.state == ResizeState::draining) {
      job.committed(1, 1);
      advance(10ms);
    }
  }
  if (HasFatalFailure()) return;
  ASSERT_EQ(state(), c.state);
  const auto job_calls = job.calls().size();
  const auto rm_releases = rm.releases().size();
  const auto nodes = ctl->nodes();

  const Outcome outcome = ctl->deliver(1, c.event, "from the test");
  EXPECT_FALSE(outcome.accepted);
  const std::string expected = std::string(to_string(c.event)) + " refused: " +
                               std::string(to_string(c.event)) + " is not allowed for an " +
                               std::string(to_string(c.kind)) + " in state " +
                               std::string(to_string(c.state)) + " (from the test)";
  EXPECT_EQ(outcome.text, expected);
  EXPECT_EQ(state(), c.state);
  EXPECT_EQ(job.calls().size(), job_calls);
  EXPECT_EQ(rm.releases().size(), rm_releases);
  EXPECT_EQ(ctl->nodes(), nodes);
  const EventRecord r = last_record();
  EXPECT_TRUE(r.refused);
  EXPECT_EQ(r.event, c.event);
  EXPECT_EQ(r.from, c.state);
  EXPECT_EQ(r.to, c.state);
  EXPECT_EQ(r.duration_s, 0.0);
  EXPECT_EQ(r.detail, expected);
}

INSTANTIATE_TEST_SUITE_P(Table, RefusedEventTest, ::testing::ValuesIn(refused_cases()),
                         [](const ::testing::TestParamInfo<RefusedCase>& c) {
                           return row_name(c.param.kind, c.param.state, c.param.event);
                         });

}  // namespace
}  // namespace bellows::controller::testing
