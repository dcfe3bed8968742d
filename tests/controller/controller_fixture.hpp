#pragma once
// A controller of job "42" on node0 and node1 of an 8-node fake pool, with short limits:
// the fake resource manager answers an expansion after 0.7 s and a release after 0.1 s.

#include "fake_clock.hpp"
#include "fake_job_control.hpp"
#include "fake_resource_manager.hpp"

#include "bellows/controller/event_log.hpp"
#include "bellows/controller/resize_controller.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace bellows::controller {
/// gtest prints a record as its log line.
inline void PrintTo(const EventRecord& record, std::ostream* os) { *os << to_json_line(record); }
}  // namespace bellows::controller

namespace bellows::controller::testing {

using namespace std::chrono_literals;

/// A record with the fields every line of job 42 shares.
inline EventRecord line(std::string time, ResizeId resize, std::optional<ResizeKind> kind,
                        unsigned count, ResizeEvent event, ResizeState from, ResizeState to,
                        double duration_s, std::optional<Requester> requester, std::string reason,
                        std::optional<RmAnswerRecord> rm, std::vector<std::string> nodes,
                        std::string detail, bool refused = false) {
  EventRecord r;
  r.time = std::move(time);
  r.job = "42";
  r.resize = resize;
  r.kind = kind;
  r.count = count;
  r.event = event;
  r.from = from;
  r.to = to;
  r.duration_s = duration_s;
  r.requester = requester;
  r.reason = std::move(reason);
  r.rm = std::move(rm);
  r.nodes = std::move(nodes);
  r.detail = std::move(detail);
  r.refused = refused;
  return r;
}

inline ResizeLimits test_limits() {
  ResizeLimits limits = ResizeLimits::defaults();
  set_limit(limits, "controller.rm_request_timeout", 1000ms);
  set_limit(limits, "controller.rm_answer_grace", 500ms);
  set_limit(limits, "controller.daemon_start_timeout", 2000ms);
  set_limit(limits, "controller.release_timeout", 3000ms);
  set_limit(limits, "controller.cancel_timeout", 4000ms);
  set_limit(limits, "controller.resize_deadline", 10000ms);
  return limits;
}

class ControllerTest : public ::testing::Test {
 protected:
  ControllerTest() {
    (void)rm.pool().allocate("42", 2);
    ctl = std::make_unique<ResizeController>("42", std::vector<std::string>{"node0", "node1"}, rm,
                                             job, clock, log, test_limits());
  }

  /// Moves the clock and lets the controller run.
  void advance(std::chrono::milliseconds by) {
    clock.advance(by);
    ctl->poll();
  }

  /// Every line written so far, parsed back.
  std::vector<EventRecord> records() const {
    std::istringstream in(out.str());
    return read_event_log(in);
  }

  EventRecord last_record() const {
    auto all = records();
    EXPECT_FALSE(all.empty());
    return all.empty() ? EventRecord{} : all.back();
  }

  ResizeState state() const {
    auto a = ctl->active();
    if (a) return a->state;
    return ctl->finished().empty() ? ResizeState::none : ctl->finished().back().state;
  }

  Outcome expand(unsigned count, Requester who = Requester::policy,
                 std::string why = "ready tasks above threshold") {
    ExpandOrder order;
    order.count = count;
    order.requester = who;
    order.reason = std::move(why);
    return ctl->request_expand(order);
  }

  Outcome shrink(unsigned count, Requester who = Requester::policy,
                 std::string why = "jobs waiting in the queue") {
    ShrinkOrder order;
    order.count = count;
    order.requester = who;
    order.reason = std::move(why);
    return ctl->request_shrink(order);
  }

  /// expand(2) through the grant of node2 and node3 (0.7 s).
  void expand_to_granted() {
    ASSERT_TRUE(expand(2).accepted);
    advance(700ms);
    ASSERT_EQ(state(), ResizeState::granted);
  }

  /// ... and both daemons up.
  void expand_to_reconfiguring() {
    expand_to_granted();
    job.daemon_up(1, "node2");
    job.daemon_up(1, "node3");
    advance(10ms);
    ASSERT_EQ(state(), ResizeState::reconfiguring);
  }

  FakeClock clock;
  FakeResourceManager rm{clock, 8};
  FakeJobControl job;
  std::ostringstream out;
  EventLog log{out};
  std::unique_ptr<ResizeController> ctl;
};

}  // namespace bellows::controller::testing
