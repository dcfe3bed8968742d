// A resize called off (its deadline passes) at every state it can wait in, with the job
// answering the way a real job does: told of the resize, it carried it out before the
// call-off reached it, or it had not and drops it. Afterwards the controller's node list and
// the job's own membership agree, the resize is final, and the resource manager holds
// exactly the job's nodes, but for leaving ranks that never exit (their node stays with the
// job, listed as unreleased). Nothing is lost, nothing is kept by mistake.

#include "controller_fixture.hpp"

#include <algorithm>
#include <ostream>

namespace bellows::controller::testing {
namespace {

using S = ResizeState;
using Nodes = std::vector<std::string>;

/// Where the resize stands when it is called off, and whether the job had carried it out.
struct AbortCase {
  ResizeKind kind;
  ResizeState state;
  bool job_carried_it_out;  ///< only meaningful once the job was told (reconfiguring)
};

void PrintTo(const AbortCase& c, std::ostream* os) {
  *os << to_string(c.kind) << " called off in " << to_string(c.state)
      << (c.job_carried_it_out ? ", the job had carried it out" : "");
}

std::string case_name(const AbortCase& c) {
  return std::string(to_string(c.kind)) + "_" + std::string(to_string(c.state)) +
         (c.job_carried_it_out ? "_job_carried_it_out" : "");
}

class AbortAgreement : public ControllerTest, public ::testing::WithParamInterface<AbortCase> {
 protected:
  /// The job's membership as the job itself sees it (one rank per node).
  Nodes job_nodes{"node0", "node1"};

  /// What a job that was told of the resize (reconfiguring) and then asked to drop it
  /// answers: the commit it had already sent, or that it dropped it.
  void job_answers(const AbortCase& c) {
    if (c.state != S::reconfiguring) return;  // earlier it was not told; later it answered
    const auto& calls = job.calls();
    EXPECT_EQ(calls.back(), "cancel 1");
    if (c.job_carried_it_out) {
      if (c.kind == ResizeKind::expand) {
        job_nodes = {"node0", "node1", "node2", "node3"};
        job.committed(1, 4);
      } else {
        job_nodes = {"node0"};
        job.committed(1, 1);
        job.left(1);
      }
    } else {
      job.cancelled(1);
    }
  }
};

TEST_P(AbortAgreement, ControllerAndJobAgreeOnTheMembership) {
  const AbortCase c = GetParam();
  // Reach the state; the job has not answered anything yet.
  if (c.kind == ResizeKind::expand) {
    switch (c.state) {
      case S::requested:
        rm.script_expand(ExpandScript::never());
        ASSERT_TRUE(expand(2).accepted);
        break;
      case S::granted:
        expand_to_granted();
        break;
      default:
        expand_to_reconfiguring();
        break;
    }
  } else {
    ASSERT_TRUE(shrink(1).accepted);
    if (c.state == S::draining || c.state == S::releasing) {
      job_nodes = {"node0"};
      job.committed(1, 1);
      advance(10ms);
      if (c.state == S::releasing) {
        rm.script_release(ReleaseScript::pool(500ms));
        job.left(1);
        advance(10ms);
      }
    }
  }
  if (HasFatalFailure()) return;
  ASSERT_EQ(state(), c.state);

  // Called off; the job answers whatever reached it, in the order it reached it.
  ASSERT_TRUE(ctl->deliver(1, ResizeEvent::resize_deadline, "called off by the test").accepted);
  job_answers(c);
  for (int i = 0; i < 100 && ctl->active(); ++i) advance(100ms);

  ASSERT_FALSE(ctl->active()) << "still " << to_string(state());
  EXPECT_EQ(ctl->nodes(), job_nodes);
  // Leaving ranks that had not exited by the deadline (draining): their node stays the job's.
  const Nodes unreleased = c.state == S::draining ? Nodes{"node1"} : Nodes{};
  EXPECT_EQ(ctl->unreleased_nodes(), unreleased);
  Nodes held = job_nodes;
  held.insert(held.end(), unreleased.begin(), unreleased.end());
  EXPECT_EQ(rm.pool().nodes_of("42"), held);
  const bool grown_or_shrunk = job_nodes.size() != 2;
  EXPECT_EQ(state(), grown_or_shrunk ? S::committed : S::aborted);
  for (const EventRecord& r : records()) EXPECT_FALSE(r.refused) << r.detail;
}

INSTANTIATE_TEST_SUITE_P(
    EveryState, AbortAgreement,
    ::testing::Values(AbortCase{ResizeKind::expand, S::requested, false},
                      AbortCase{ResizeKind::expand, S::granted, false},
                      AbortCase{ResizeKind::expand, S::reconfiguring, false},
                      AbortCase{ResizeKind::expand, S::reconfiguring, true},
                      AbortCase{ResizeKind::shrink, S::reconfiguring, false},
                      AbortCase{ResizeKind::shrink, S::reconfiguring, true},
                      AbortCase{ResizeKind::shrink, S::draining, true},
                      AbortCase{ResizeKind::shrink, S::releasing, true}),
    [](const ::testing::TestParamInfo<AbortCase>& c) { return case_name(c.param); });

}  // namespace
}  // namespace bellows::controller::testing
