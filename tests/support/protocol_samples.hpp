#pragma once
// Valid controller <-> daemon messages (bellows/protocol/messages.hpp), at least one of every
// type, for tests that need every message on the wire: the fuzz target of the codec seeds
// its corpus from them.
//
// To extend: a message type added to protocol::Message needs its samples() overload here, or
// one_of_each() does not compile; a field added to a message gets a value in its samples
// (ResizeAck's are set by name, so a new field only needs a line).

#include <cstddef>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "bellows/protocol/messages.hpp"

namespace bellows::protocol::sample {

inline std::vector<Hello> samples(std::type_identity<Hello>) {
  return {Hello{"node-a", 4242, kProtocolVersion}};
}
inline std::vector<NodeMetrics> samples(std::type_identity<NodeMetrics>) {
  Metrics first_rank;
  first_rank.iteration = 17;
  first_rank.iteration_seconds = 0.125;
  first_rank.ready_tasks = 96;
  first_rank.busy_fraction = 0.75;
  first_rank.steals_sent = 12;
  first_rank.steals_failed = 5;
  first_rank.job_gflops = 41.5;
  first_rank.graph_work_seconds = 3.5;
  first_rank.graph_critical_path_seconds = 1.25;
  first_rank.lanes_per_rank = 4;
  first_rank.message_log_on = 1;
  first_rank.message_log_bytes_held = 589824;
  first_rank.message_log_entries_held = 12;
  Metrics log_on_empty;
  log_on_empty.message_log_on = 1;
  return {NodeMetrics{"node-b", Metrics{}}, NodeMetrics{"node-c", first_rank, 0, 31337},
          NodeMetrics{"node-d", log_on_empty, 3, 4243}};
}
inline std::vector<AllocationRequest> samples(std::type_identity<AllocationRequest>) {
  return {AllocationRequest{AllocationDirective::extend, 2, 0, "local0.1"},
          AllocationRequest{AllocationDirective::release, 3, 7, "grow-more"},
          AllocationRequest{AllocationDirective::cancel, 0, 2, "grow-more"}};
}
inline std::vector<RankExited> samples(std::type_identity<RankExited>) {
  return {RankExited{9, 31337, 0, 11}, RankExited{kNoRank, 77, -1, 0}};
}
inline std::vector<ResizeAck> samples(std::type_identity<ResizeAck>) {
  std::vector<ResizeAck> acks(4);
  acks[0].report.resize_id = 5;
  acks[0].report.outcome = ResizeOutcome::committed;
  acks[0].report.job_size = 7;
  acks[0].report.ranks = {4, 5, 6};
  acks[1].report.resize_id = 8;
  acks[1].report.outcome = ResizeOutcome::left;
  acks[1].report.job_size = 4;
  acks[1].report.ranks = {5, 6};
  acks[2].report.resize_id = 9;
  acks[2].report.outcome = ResizeOutcome::refused;
  acks[2].report.job_size = 6;
  acks[2].report.text = "rank 0 cannot leave";
  acks[3].report.resize_id = 10;
  acks[3].report.outcome = ResizeOutcome::cancelled;
  acks[3].report.job_size = 6;
  return acks;
}
inline std::vector<ResizeDecided> samples(std::type_identity<ResizeDecided>) {
  return {ResizeDecided{6, ResizeKind::expand, 2, {"n7", "n8"}, {}},
          ResizeDecided{7, ResizeKind::shrink, 1, {}, {"n2"}}};
}
inline std::vector<Abort> samples(std::type_identity<Abort>) {
  return {Abort{7, "slurm denied the expansion: Requested node configuration is not available"}};
}
inline std::vector<Stop> samples(std::type_identity<Stop>) { return {Stop{"job finished", 2000}}; }
inline std::vector<StartRank> samples(std::type_identity<StartRank>) {
  return {StartRank{3, {"/usr/bin/mpiexec", "-n", "1", "./gemm", "--verify"},
                    {"BELLOWS_JOIN=port", "A="}, "local-7", 2, {"n1", "n2", "n3"}, {0, 1, 2}, true},
          StartRank{0, {"/usr/bin/mpiexec", "-n", "1", "./gemm"}, {}, "1234", 0, {"n1"}, {0}, false},
          StartRank{5, {"./app"}, {}, "local-8", 4, {"n1", "n2", "n3", "n4", "n3"}, {0, 1, 2, 3, 4}, true, {2, 3}}};
}
inline std::vector<JobView> samples(std::type_identity<JobView>) {
  return {JobView{"local-1", {"n1"}, {kNoRank}, {0}, 1, 1, 1, "", 0, ResizeKind::expand, "", 0, {}},
          JobView{"job-42", {"n1", "n2", "n3"}, {0, 2, 1}, {100, 200, 300}, 3, 2, 5, "policy.toml", 9,
                  ResizeKind::shrink, "reconfiguring", 1, {"n3"}, {0, 2, kNoRank}, {"n1", "n3", "n2"}}};
}
inline std::vector<RanksLost> samples(std::type_identity<RanksLost>) {
  return {RanksLost{3, {2}, {"n2"}, "rank 2 (pid 4711) killed by signal 9", LossCause::rank_died, 0, 9},
          RanksLost{5, {1}, {"n1"}, "rank 1 (pid 4712) exit status 3", LossCause::rank_died, 3, 0},
          RanksLost{7, {}, {"n4", "n5"}, "the daemon of n4 went away", LossCause::node_lost, -1, 0}};
}
inline std::vector<Ack> samples(std::type_identity<Ack>) {
  return {Ack{AckCode::ok, ""}, Ack{AckCode::failed, "no such node"}};
}
inline std::vector<OperatorResize> samples(std::type_identity<OperatorResize>) {
  return {OperatorResize{2, ""}, OperatorResize{-2, "maintenance on local4"}};
}
inline std::vector<StatusRequest> samples(std::type_identity<StatusRequest>) {
  return {StatusRequest{}};
}
inline std::vector<StatusReply> samples(std::type_identity<StatusReply>) {
  return {StatusReply{R"({"job":"local-1","nodes":["local0","local1"]})"}};
}
inline std::vector<JobControlRequest> samples(std::type_identity<JobControlRequest>) {
  return {JobControlRequest{JobControlAction::signal, 19, 2, "bellowsd.tool.1 (a tool of local0)"},
          JobControlRequest{JobControlAction::terminate, 0, kAllRanks, "local-7:0 on local0"}};
}
inline std::vector<AllocationComplete> samples(std::type_identity<AllocationComplete>) {
  return {AllocationComplete{"local0.1", 3, AllocationOutcome::committed, "committed: local2"},
          AllocationComplete{"grow-more", 4, AllocationOutcome::cancelled, "called off"}};
}
inline std::vector<SignalRank> samples(std::type_identity<SignalRank>) {
  return {SignalRank{2, 4711, 15, "PMIx_Job_control from bellowsd.tool.1 on local0"}};
}
inline std::vector<FenceContribution> samples(std::type_identity<FenceContribution>) {
  return {FenceContribution{1, {"job-42"}, {kWildcardRank}, {3}, {"job-42"}, {1}, 1, "blob of rank 1"},
          FenceContribution{7, {"job-42", "job-42"}, {0, 2}, {3, 3}, {"job-42"}, {2}, 0, ""}};
}
inline std::vector<FenceRelease> samples(std::type_identity<FenceRelease>) {
  return {FenceRelease{1, CollectiveStatus::ok, "", {"blob of rank 0", "blob of rank 1"}},
          FenceRelease{7, CollectiveStatus::participant_lost, "rank 2 of job-42 on local2 is lost", {}}};
}
inline std::vector<ModexRequest> samples(std::type_identity<ModexRequest>) {
  return {ModexRequest{3, "job-42", 2}};
}
inline std::vector<ModexReply> samples(std::type_identity<ModexReply>) {
  return {ModexReply{3, CollectiveStatus::ok, "", "blob of rank 2"},
          ModexReply{4, CollectiveStatus::not_found, "no node of job job-42 hosts rank 9", ""}};
}

inline std::vector<RankConnected> samples(std::type_identity<RankConnected>) {
  return {RankConnected{"job-42", 0}, RankConnected{"local-7", 3}};
}

/// Every sample above, in the order of the Message variant's alternatives: at least one
/// valid message of each type.
inline std::vector<Message> one_of_each() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    std::vector<Message> all;
    const auto append = [&all](auto messages) {
      for (auto& m : messages) all.emplace_back(std::move(m));
    };
    (append(samples(std::type_identity<std::variant_alternative_t<I, Message>>{})), ...);
    return all;
  }(std::make_index_sequence<std::variant_size_v<Message>>{});
}

}  // namespace bellows::protocol::sample
