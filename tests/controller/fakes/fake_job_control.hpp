#pragma once
// A JobControl for tests: records every command as one line of text, and delivers the reports
// a test queues on the next progress(), as a real job's would arrive.

#include "bellows/controller/job_control.hpp"

#include <deque>
#include <string>
#include <vector>

namespace bellows::controller::testing {

class FakeJobControl final : public JobControl {
 public:
  /// The commands so far, e.g. "start_daemons 1 node2,node3", "cancel 2".
  [[nodiscard]] const std::vector<std::string>& calls() const noexcept { return calls_; }
  [[nodiscard]] bool has_listener() const noexcept { return static_cast<bool>(listener_); }

  /// Queues a report for the next progress().
  void report(JobReport report) { reports_.push_back(std::move(report)); }
  void daemon_up(ResizeId resize, std::string node) {
    report({JobReportKind::daemon_up, resize, std::move(node), 0, "", {}});
  }
  void committed(ResizeId resize, unsigned ranks) {
    report({JobReportKind::committed, resize, "", ranks, "", {}});
  }
  void died(ResizeId resize, std::string node, std::string text) {
    report({JobReportKind::rank_died, resize, std::move(node), 0, std::move(text), {}});
  }
  /// The ranks of leaving node `node` left (each leaving node reports).
  void left(ResizeId resize, std::string node = "node1") {
    report({JobReportKind::left, resize, std::move(node), 0, "", {}});
  }
  void refused(ResizeId resize, std::string text) {
    report({JobReportKind::refused, resize, "", 0, std::move(text), {}});
  }
  void cancelled(ResizeId resize) { report({JobReportKind::cancelled, resize, "", 0, "", {}}); }

  void set_listener(Listener listener) override { listener_ = std::move(listener); }
  void start_daemons(ResizeId resize, const std::vector<std::string>& nodes) override {
    record("start_daemons", resize, nodes);
  }
  void add_ranks(ResizeId resize, const std::vector<std::string>& nodes) override {
    record("add_ranks", resize, nodes);
  }
  void withdraw(ResizeId resize, const std::vector<std::string>& nodes) override {
    record("withdraw", resize, nodes);
  }
  void remove_ranks(ResizeId resize, const std::vector<std::string>& nodes) override {
    record("remove_ranks", resize, nodes);
  }
  void cancel(ResizeId resize, const std::string& /*why*/) override { record("cancel", resize, {}); }
  /// Recorded as "tell_lost 3 node2 ranks 2 to node0,node1"; answers tell_lost_answer.
  bool tell_lost(ResizeId failure, const std::vector<std::string>& lost_nodes,
                 const std::vector<std::uint32_t>& lost_ranks, const std::string& /*reason*/,
                 const JobReport& found_by, const std::vector<std::string>& survivors) override {
    lost_found_by.push_back(found_by);
    std::string line = "tell_lost " + std::to_string(failure);
    for (std::size_t i = 0; i < lost_nodes.size(); ++i) line += (i == 0 ? " " : ",") + lost_nodes[i];
    line += " ranks";
    for (std::size_t i = 0; i < lost_ranks.size(); ++i) {
      line += i == 0 ? ' ' : ',';
      line += std::to_string(lost_ranks[i]);
    }
    line += " to";
    for (std::size_t i = 0; i < survivors.size(); ++i) line += (i == 0 ? " " : ",") + survivors[i];
    calls_.push_back(std::move(line));
    return tell_lost_answer;
  }
  bool tell_lost_answer = true;
  /// The found_by of every tell_lost, in order.
  std::vector<JobReport> lost_found_by;
  void progress() override {
    std::deque<JobReport> now;
    now.swap(reports_);
    for (const JobReport& r : now) {
      if (listener_) listener_(r);
    }
  }

 private:
  void record(const char* what, ResizeId resize, const std::vector<std::string>& nodes) {
    std::string line = std::string(what) + " " + std::to_string(resize);
    for (std::size_t i = 0; i < nodes.size(); ++i) line += (i == 0 ? " " : ",") + nodes[i];
    calls_.push_back(std::move(line));
  }

  Listener listener_;
  std::deque<JobReport> reports_;
  std::vector<std::string> calls_;
};

}  // namespace bellows::controller::testing
