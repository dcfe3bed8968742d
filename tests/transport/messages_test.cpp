// The controller <-> daemon messages: round trips of every message, each refusal with its
// exact text, and random and mutated input that must always give a clean error.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "bellows/protocol/messages.hpp"

namespace bellows::protocol {
namespace {

using Bytes = std::vector<std::uint8_t>;

std::vector<Message> one_of_each() {
  return {
      Hello{"node-a", 4242, kProtocolVersion},
      NodeMetrics{"node-b", {17, 0.125, 96, 0.75, 12, 5, 41.5}},
      AllocationRequest{AllocationDirective::release, 3, 7, ""},
      AllocationRequest{AllocationDirective::cancel, 0, 2, "grow-more"},
      JobControlRequest{JobControlAction::signal, 19, 2, "bellowsd.tool.1 (a tool of local0)"},
      JobControlRequest{JobControlAction::terminate, 0, kAllRanks, "local-7:0 on local0"},
      AllocationComplete{"local0.1", 3, AllocationOutcome::committed, "committed"},
      SignalRank{2, 4711, 15, "asked by bellowsd.tool.1 on local0"},
      FenceContribution{4, {"local-1"}, {kWildcardRank}, {2}, {"local-1"}, {0}, 1, std::string("a\0b", 3)},
      FenceContribution{5, {"local-1", "local-1"}, {0, 1}, {2, 2}, {}, {}, 0, ""},
      FenceRelease{4, CollectiveStatus::ok, "", {std::string("a\0b", 3), "cd"}},
      FenceRelease{5, CollectiveStatus::participant_lost, "rank 1 of local-1 on local1 is lost", {}},
      ModexRequest{6, "local-1", 1},
      ModexReply{6, CollectiveStatus::ok, "", "blob"},
      ModexReply{7, CollectiveStatus::not_found, "no node of job local-1 hosts rank 5", ""},
      RankExited{9, 31337, 0, 11},
      RankConnected{"local-9", 2},
      ResizeAck{{5, ResizeOutcome::committed, 7, {4, 5, 6}, ""}},
      ResizeAck{{8, ResizeOutcome::left, 4, {5, 6}, ""}},
      ResizeAck{{9, ResizeOutcome::refused, 6, {}, "rank 0 cannot leave"}},
      ResizeAck{{10, ResizeOutcome::cancelled, 6, {}, "slurm said no"}},
      ResizeDecided{6, ResizeKind::expand, 2, {"n7", "n8"}, {}},
      ResizeDecided{7, ResizeKind::shrink, 1, {}, {"n2"}},
      Abort{7, "slurm denied the expansion: Requested node configuration is not available"},
      Stop{"job finished", 2000},
      StartRank{3, {"/usr/bin/mpiexec", "-n", "1", "./gemm", "--verify"}, {"BELLOWS_JOIN=port", "A="}, "local-9", 1,
                {"n1", "n2"}, {0, 1}},
      Ack{AckCode::failed, "no such node"},
      OperatorResize{-2, "maintenance on local4"},
      StatusRequest{},
      StatusReply{R"({"job":"local-1","nodes":["local0","local1"]})"},
  };
}

void set_u16(Bytes& b, std::size_t at, std::uint16_t v) { std::memcpy(b.data() + at, &v, 2); }
void set_u32(Bytes& b, std::size_t at, std::uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void set_u64(Bytes& b, std::size_t at, std::uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

TEST(Messages, EveryMessageRoundTripsAsEachKind) {
  std::uint64_t id = 1;
  for (const auto& message : one_of_each()) {
    for (Kind kind : {Kind::notification, Kind::request, Kind::reply}) {
      const Envelope sent{kind, kind == Kind::notification ? 0 : id++, message};
      const Bytes bytes = encode(sent);
      const DecodeResult got = decode(bytes);
      ASSERT_TRUE(got.ok()) << to_string(type_of(message)) << ": " << got.text;
      EXPECT_EQ(got.envelope, sent) << to_string(type_of(message));
      EXPECT_EQ(got.peer_version, kProtocolVersion);
    }
  }
}

TEST(Messages, HeaderLayoutIsFixed) {
  const Bytes bytes = encode(Envelope{Kind::request, 0x0102030405060708ull, Abort{9, ""}});
  ASSERT_EQ(bytes.size(), kHeaderBytes + 12);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "BLWS");
  EXPECT_EQ(bytes[4], kProtocolVersion);
  EXPECT_EQ(bytes[5], 0);
  EXPECT_EQ(bytes[6], 18);   // abort
  EXPECT_EQ(bytes[8], 1);    // request
  EXPECT_EQ(bytes[12], 12);  // body length
  EXPECT_EQ(bytes[16], 0x08);
  EXPECT_EQ(bytes[23], 0x01);
  EXPECT_EQ(bytes[24], 9);
}

// NodeMetrics is the node's name, then the Metrics fields as visit_fields() lists them: the
// layout it had when it spelled them out, then (protocol version 5) the task graph's profile,
// then (version 7) the reporting rank and its pid; version 14 put the message log's size after
// the task graph's profile.
TEST(Messages, NodeMetricsBodyIsTheNameThenTheMetricsFields) {
  const Bytes bytes =
      encode(NodeMetrics{"n7", {11, 0.5, 22, 0.25, 33, 3, 7.5, 2.0, 0.5, 4, 1, 589824, 12}, 5, 4321});
  Bytes body;
  auto put = [&body](const auto& value) {
    std::uint8_t raw[sizeof value];
    std::memcpy(raw, &value, sizeof value);
    body.insert(body.end(), raw, raw + sizeof value);
  };
  put(std::uint32_t{2});
  body.push_back('n');
  body.push_back('7');
  put(std::uint64_t{11});  // iteration
  put(0.5);                // iteration_seconds
  put(std::uint64_t{22});  // ready_tasks
  put(0.25);               // busy_fraction
  put(std::uint64_t{33});  // steals_sent
  put(std::uint64_t{3});   // steals_failed
  put(7.5);                // job_gflops
  put(2.0);                // graph_work_seconds
  put(0.5);                // graph_critical_path_seconds
  put(std::uint64_t{4});   // lanes_per_rank
  put(std::uint64_t{1});       // message_log_on
  put(std::uint64_t{589824});  // message_log_bytes_held
  put(std::uint64_t{12});      // message_log_entries_held
  put(std::uint32_t{5});   // rank
  put(std::int32_t{4321}); // pid
  EXPECT_EQ(Bytes(bytes.begin() + kHeaderBytes, bytes.end()), body);
}

TEST(Messages, JobViewRoundTripsAndRefusesWhatCannotBe) {
  JobView view{"local-7", {"local0", "local1"}, {0, kNoRank}, {4242, 0}, 2, 1, 3, "grow.toml",
               5, ResizeKind::expand, "granted", 1, {"local2"}};
  const DecodeResult r = decode(encode(view));
  ASSERT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(std::get<JobView>(r.envelope.message), view);

  auto refused = [](JobView v) { return decode(encode(v)).text; };
  JobView bad = view;
  bad.node_pids.pop_back();
  EXPECT_EQ(refused(bad), "bad field job_view.node_pids: 1 entries for 2 nodes");
  bad = view;
  bad.node_ranks.push_back(3);
  EXPECT_EQ(refused(bad), "bad field job_view.node_ranks: 3 entries for 2 nodes");
  bad = view;
  bad.node_pmix_ranks = {0};
  EXPECT_EQ(refused(bad), "bad field job_view.node_pmix_ranks: 1 entries for 2 nodes");
  bad.node_pmix_ranks = {0, 1};
  EXPECT_EQ(refused(bad),
            "bad field job_view.node_pmix_ranks[0]: rank 0 of node local0 is not at that node in pmix_rank_nodes");
  bad.node_pmix_ranks = {kNoRank, kNoRank};  // no number given yet (a job taken over)
  EXPECT_TRUE(decode(encode(bad)).ok());
  bad.node_pmix_ranks = {0, 1};
  bad.pmix_rank_nodes = {"local0", ""};
  EXPECT_EQ(refused(bad), "bad field job_view.pmix_rank_nodes[1]: empty");
  bad.pmix_rank_nodes = {"local0", "local2"};
  EXPECT_EQ(refused(bad),
            "bad field job_view.node_pmix_ranks[1]: rank 1 of node local1 is not at that node in pmix_rank_nodes");
  // A rank that left (2, on local2) keeps its number and node; a node without a rank yet.
  bad.node_pmix_ranks = {0, kNoRank};
  bad.pmix_rank_nodes = {"local0", "local1", "local2"};
  EXPECT_TRUE(decode(encode(bad)).ok());
  bad.node_pmix_ranks = {0, 1};
  const DecodeResult grown = decode(encode(bad));
  ASSERT_TRUE(grown.ok()) << grown.text;
  EXPECT_EQ(std::get<JobView>(grown.envelope.message), bad);
  bad = view;
  bad.min_nodes = 4;
  EXPECT_EQ(refused(bad), "bad field job_view.min_nodes: 4 exceeds max_nodes 3");
  bad = view;
  bad.nodes.clear();
  EXPECT_EQ(refused(bad), "bad field job_view.nodes: empty");
  bad = view;
  bad.resize_state.clear();
  EXPECT_EQ(refused(bad), "bad field job_view.resize_state: empty for resize 5");
  bad = view;
  bad.resize_id = 0;
  EXPECT_EQ(refused(bad), "bad field job_view.resize_state: granted without a resize (resize_id 0)");
  bad = view;
  bad.node_pids[1] = -3;
  EXPECT_EQ(refused(bad), "bad field job_view.node_pids[1]: -3 is not a pid");
}

// ResizeAck is the ResizeReport fields as visit_fields() lists them (protocol version 6: one
// list of ranks where there were the ranks that joined and those that drained).
TEST(Messages, ResizeAckBodyIsTheReportFields) {
  const Bytes bytes = encode(ResizeAck{{9, ResizeOutcome::left, 3, {5, 6}, "ok"}});
  Bytes body;
  auto put = [&body](const auto& value) {
    std::uint8_t raw[sizeof value];
    std::memcpy(raw, &value, sizeof value);
    body.insert(body.end(), raw, raw + sizeof value);
  };
  put(std::uint64_t{9});  // resize_id
  body.push_back(3);      // outcome: left
  put(std::uint32_t{3});  // job_size
  put(std::uint32_t{2});  // ranks
  put(std::uint32_t{5});
  put(std::uint32_t{6});
  put(std::uint32_t{2});  // text
  body.push_back('o');
  body.push_back('k');
  EXPECT_EQ(Bytes(bytes.begin() + kHeaderBytes, bytes.end()), body);
  EXPECT_EQ(bytes[6], 5);  // resize_ack
}

// Each field is visited once, with its transport name and its PMIx key
// ("bellows.metrics." + name), and can be written through the visitor.
TEST(Metrics, VisitFieldsNamesEachFieldWithItsKey) {
  Metrics m;
  std::vector<std::string> names;
  visit_fields(m, [&names](const char* name, const char* key, auto& value) {
    names.emplace_back(name);
    EXPECT_EQ(std::string(key), std::string("bellows.metrics.") + name);
    value = static_cast<std::remove_reference_t<decltype(value)>>(names.size());
  });
  EXPECT_EQ(names, (std::vector<std::string>{"iteration", "iteration_seconds", "ready_tasks",
                                             "busy_fraction", "steals_sent", "steals_failed",
                                             "job_gflops", "graph_work_seconds",
                                             "graph_critical_path_seconds", "lanes_per_rank",
                                             "message_log_on", "message_log_bytes_held",
                                             "message_log_entries_held"}));
  EXPECT_EQ(names.size(), kMetricsFields);
  EXPECT_EQ(m, (Metrics{1, 2.0, 3, 4.0, 5, 6, 7.0, 8.0, 9.0, 10, 11, 12, 13}));
}

TEST(Metrics, CheckNamesTheFirstImpossibleField) {
  EXPECT_EQ(check(Metrics{}), "");
  EXPECT_EQ(check(Metrics{.iteration_seconds = -1.0}),
            "iteration_seconds: -1.000000 is not a finite time >= 0");
  EXPECT_EQ(check(Metrics{.busy_fraction = 1.5}), "busy_fraction: 1.500000 is not in [0, 1]");
  EXPECT_EQ(check(Metrics{.job_gflops = std::numeric_limits<double>::infinity()}),
            "job_gflops: inf is not a finite rate >= 0");
  EXPECT_EQ(check(Metrics{.graph_work_seconds = -2.0}),
            "graph_work_seconds: -2.000000 is not a finite time >= 0");
  EXPECT_EQ(check(Metrics{.graph_work_seconds = 1.0, .graph_critical_path_seconds = 3.0}),
            "graph_critical_path_seconds: 3.000000 is not a finite time between 0 and "
            "graph_work_seconds 1.000000");
  EXPECT_EQ(check(Metrics{.steals_sent = 2, .steals_failed = 3}),
            "steals_failed: 3 exceeds steals_sent 2");
  EXPECT_EQ(check(Metrics{.message_log_on = 2}), "message_log_on: 2 is not 0 or 1");
  EXPECT_EQ(check(Metrics{.message_log_bytes_held = 4096, .message_log_entries_held = 1}),
            "message_log_bytes_held: 4096 bytes in 1 entries held with message_log_on 0");
  EXPECT_EQ(check(Metrics{.message_log_on = 1, .message_log_bytes_held = 4096}),
            "message_log_bytes_held: 4096 bytes held in 0 entries");
  EXPECT_EQ(check(Metrics{.message_log_on = 1}), "");  // on, with nothing held
  EXPECT_EQ(check(Metrics{.message_log_on = 1, .message_log_bytes_held = 4096,
                          .message_log_entries_held = 1}),
            "");
}

TEST(Messages, NamesOfTypesAndErrors) {
  EXPECT_EQ(to_string(MessageType::resize_decided), "resize_decided");
  EXPECT_EQ(to_string(static_cast<MessageType>(99)), "unknown");
  EXPECT_EQ(to_string(DecodeError::unsupported_version), "unsupported_version");
  EXPECT_TRUE(RankExited({1, 2, 0, 9}).crashed());
  EXPECT_TRUE(RankExited({1, 2, 3, 0}).crashed());
  EXPECT_FALSE(RankExited({1, 2, 0, 0}).crashed());
}

struct Refusal {
  DecodeError error;
  std::string text;
};

Refusal refusal(const Bytes& bytes) {
  const DecodeResult r = decode(bytes);
  return {r.error, r.text};
}

#define EXPECT_REFUSED(bytes, code, message)     \
  do {                                            \
    const Refusal r_ = refusal(bytes);            \
    EXPECT_EQ(r_.error, DecodeError::code);       \
    EXPECT_EQ(r_.text, message);                  \
  } while (0)

TEST(Messages, RefusesWrongMagic) {
  Bytes b = encode(Abort{1, ""});
  b[0] = 'X';
  EXPECT_REFUSED(b, wrong_magic, "wrong magic 0x584c5753, expected 0x424c5753 (\"BLWS\")");
}

TEST(Messages, RefusesAnotherVersionNamingBoth) {
  Bytes b = encode(Abort{1, ""});
  const std::uint16_t other = kProtocolVersion + 1;
  set_u16(b, 4, other);
  const DecodeResult r = decode(b);
  const std::string refused_text = "protocol version " + std::to_string(other) +
                              " refused: this side speaks version " + std::to_string(kProtocolVersion);
  EXPECT_EQ(r.error, DecodeError::unsupported_version);
  EXPECT_EQ(r.text, refused_text);
  EXPECT_EQ(r.peer_version, other);
  // Only the magic and the version are needed to refuse a version.
  const Bytes six(b.begin(), b.begin() + 6);
  EXPECT_REFUSED(six, unsupported_version, refused_text);
}

// A daemon of version 13 reports its node's metrics without the message log's size: its
// message is refused whole, naming both versions, rather than read with fields missing.
TEST(Messages, RefusesTheMetricsOfAVersion13DaemonNamingBoth) {
  Bytes b = encode(NodeMetrics{"n7", {11, 0.5, 22, 0.25, 33, 3, 7.5, 2.0, 0.5, 4}, 5, 4321});
  constexpr std::size_t message_log_fields_bytes = 3 * sizeof(std::uint64_t);
  const std::size_t rank_and_pid_at = b.size() - sizeof(std::uint32_t) - sizeof(std::int32_t);
  b.erase(b.begin() + static_cast<std::ptrdiff_t>(rank_and_pid_at - message_log_fields_bytes),
          b.begin() + static_cast<std::ptrdiff_t>(rank_and_pid_at));
  set_u32(b, 12, static_cast<std::uint32_t>(b.size() - kHeaderBytes));
  set_u16(b, 4, 13);
  EXPECT_EQ(kProtocolVersion, 14);
  EXPECT_REFUSED(b, unsupported_version, "protocol version 13 refused: this side speaks version 14");
}

TEST(Messages, RefusesUnknownType) {
  Bytes b = encode(Abort{1, ""});
  set_u16(b, 6, 99);
  EXPECT_REFUSED(b, unknown_type,
                 "unknown message type 99 (protocol version " + std::to_string(kProtocolVersion) + ")");
}

TEST(Messages, RefusesTruncatedInput) {
  EXPECT_REFUSED(Bytes{}, truncated, "truncated message: 0 bytes, the header needs 24");
  const Bytes full = encode(Hello{"node-a", 12, kProtocolVersion});
  EXPECT_REFUSED(Bytes(full.begin(), full.begin() + 10), truncated,
                 "truncated message: 10 bytes, the header needs 24");
  EXPECT_REFUSED(Bytes(full.begin(), full.end() - 1), truncated,
                 "truncated message: the header says 16 body bytes, 15 follow");
  // A body length that agrees with a body cut inside a field.
  Bytes cut(full.begin(), full.end() - 3);
  set_u32(cut, 12, 13);
  EXPECT_REFUSED(cut, truncated, "truncated hello: field daemon_pid needs 4 bytes, 3 left");
  // A string longer than what follows.
  Bytes long_string = full;
  set_u32(long_string, kHeaderBytes, 200);
  EXPECT_REFUSED(long_string, truncated, "truncated hello: field node_name needs 200 bytes, 12 left");
}

TEST(Messages, RefusesATruncatedResizeAckNamingTheReportsField) {
  const Bytes full = encode(ResizeAck{{9, ResizeOutcome::committed, 3, {5, 6}, ""}});
  Bytes cut(full.begin(), full.end() - 6);  // inside ranks[1]
  set_u32(cut, 12, static_cast<std::uint32_t>(cut.size() - kHeaderBytes));
  EXPECT_REFUSED(cut, truncated, "truncated resize_ack: field ranks holds 2 entries, only 6 bytes left");
  cut.resize(kHeaderBytes + 10);  // inside job_size
  set_u32(cut, 12, 10);
  EXPECT_REFUSED(cut, truncated, "truncated resize_ack: field job_size needs 4 bytes, 1 left");
}

TEST(Messages, RefusesBadLength) {
  Bytes b = encode(Abort{1, ""});
  b.push_back(0);
  EXPECT_REFUSED(b, bad_length, "bad length: the header says 12 body bytes, 13 follow");
  set_u32(b, 12, kMaxBodyBytes + 1);
  EXPECT_REFUSED(b, bad_length, "bad length: a body of 1048577 bytes exceeds the limit of 1048576");
}

TEST(Messages, RefusesBadFields) {
  auto body_of = [](const Message& m) { return encode(m); };
  EXPECT_REFUSED(body_of(Hello{"", 1, kProtocolVersion}), bad_field,
                 "bad field hello.node_name: empty");
  EXPECT_REFUSED(body_of(Hello{"a", -4, kProtocolVersion}), bad_field,
                 "bad field hello.daemon_pid: -4 is not a pid");
  EXPECT_REFUSED(body_of(Hello{"a", 4, 2}), bad_field,
                 "bad field hello.protocol_version: 2 differs from the header's version " +
                     std::to_string(kProtocolVersion));
  EXPECT_REFUSED(body_of(NodeMetrics{"a", {1, 0.5, 1, 1.5, 0, 0}}), bad_field,
                 "bad field node_metrics.busy_fraction: 1.500000 is not in [0, 1]");
  EXPECT_REFUSED(body_of(NodeMetrics{"a", {1, std::numeric_limits<double>::quiet_NaN(), 1, 0.5, 0, 0}}),
                 bad_field, "bad field node_metrics.iteration_seconds: nan is not a finite time >= 0");
  EXPECT_REFUSED(body_of(NodeMetrics{"a", {1, 0.5, 1, 0.5, 2, 3}}), bad_field,
                 "bad field node_metrics.steals_failed: 3 exceeds steals_sent 2");
  EXPECT_REFUSED(body_of(NodeMetrics{"a", {.message_log_bytes_held = 64, .message_log_entries_held = 1}}),
                 bad_field,
                 "bad field node_metrics.message_log_bytes_held: 64 bytes in 1 entries held with "
                 "message_log_on 0");
  EXPECT_REFUSED(body_of(AllocationRequest{static_cast<AllocationDirective>(5), 1, 0, ""}), bad_field,
                 "bad field allocation_request.directive: 5 is neither extend (1), release (2) nor cancel (3)");
  EXPECT_REFUSED(body_of(AllocationRequest{AllocationDirective::cancel, 0, 0, ""}), bad_field,
                 "bad field allocation_request.request_id: empty for a cancel");
  EXPECT_REFUSED(body_of(AllocationRequest{AllocationDirective::cancel, 2, 0, "r1"}), bad_field,
                 "bad field allocation_request.node_count: 2 for a cancel (0)");
  EXPECT_REFUSED(body_of(JobControlRequest{static_cast<JobControlAction>(4), 0, 0, "t"}), bad_field,
                 "bad field job_control_request.action: 4 is neither signal (1) nor terminate (2)");
  EXPECT_REFUSED(body_of(JobControlRequest{JobControlAction::signal, 0, 0, "t"}), bad_field,
                 "bad field job_control_request.signal: 0 is not a signal");
  EXPECT_REFUSED(body_of(JobControlRequest{JobControlAction::terminate, 9, 0, "t"}), bad_field,
                 "bad field job_control_request.signal: 9 for a terminate (0)");
  EXPECT_REFUSED(body_of(JobControlRequest{JobControlAction::signal, 15, 0, ""}), bad_field,
                 "bad field job_control_request.requester: empty");
  EXPECT_REFUSED(body_of(AllocationComplete{"", 1, AllocationOutcome::aborted, ""}), bad_field,
                 "bad field allocation_complete.request_id: empty");
  EXPECT_REFUSED(body_of(AllocationComplete{"r", 0, AllocationOutcome::aborted, ""}), bad_field,
                 "bad field allocation_complete.resize_id: 0");
  EXPECT_REFUSED(body_of(AllocationComplete{"r", 1, static_cast<AllocationOutcome>(9), ""}), bad_field,
                 "bad field allocation_complete.outcome: 9 is neither committed (1), aborted (2) nor cancelled (3)");
  EXPECT_REFUSED(body_of(SignalRank{1, 0, 15, ""}), bad_field, "bad field signal_rank.pid: 0 is not a pid");
  EXPECT_REFUSED(body_of(SignalRank{1, 7, 65, ""}), bad_field, "bad field signal_rank.signal: 65 is not a signal");
  EXPECT_REFUSED(body_of(FenceContribution{0, {"j"}, {0}, {1}, {}, {}, 0, ""}), bad_field,
                 "bad field fence_contribution.contribution_id: 0");
  EXPECT_REFUSED(body_of(FenceContribution{1, {}, {}, {}, {}, {}, 0, ""}), bad_field,
                 "bad field fence_contribution.participant_nspaces: empty");
  EXPECT_REFUSED(body_of(FenceContribution{1, {"j"}, {0, 1}, {2}, {}, {}, 0, ""}), bad_field,
                 "bad field fence_contribution.participant_ranks: 2 entries for 1 participants");
  EXPECT_REFUSED(body_of(FenceContribution{1, {"j"}, {0}, {}, {}, {}, 0, ""}), bad_field,
                 "bad field fence_contribution.nspace_sizes: 0 entries for 1 participants");
  EXPECT_REFUSED(body_of(FenceContribution{1, {""}, {0}, {1}, {}, {}, 0, ""}), bad_field,
                 "bad field fence_contribution.participant_nspaces[0]: empty");
  EXPECT_REFUSED(body_of(FenceContribution{1, {"j"}, {0}, {0}, {}, {}, 0, ""}), bad_field,
                 "bad field fence_contribution.nspace_sizes[0]: 0");
  EXPECT_REFUSED(body_of(FenceContribution{1, {"j", "j"}, {0, 3}, {3, 3}, {}, {}, 0, ""}), bad_field,
                 "bad field fence_contribution.participant_ranks[1]: 3 is not a rank of j (size 3)");
  EXPECT_REFUSED(body_of(FenceContribution{1, {"j"}, {0}, {1}, {"j"}, {}, 0, ""}), bad_field,
                 "bad field fence_contribution.local_ranks: 0 entries for 1 local namespaces");
  EXPECT_REFUSED(body_of(FenceContribution{1, {"j"}, {0}, {1}, {"j"}, {kWildcardRank}, 0, ""}), bad_field,
                 "bad field fence_contribution.local_ranks[0]: the wildcard is no rank");
  EXPECT_REFUSED(body_of(FenceContribution{1, {"j"}, {0}, {1}, {}, {}, 2, ""}), bad_field,
                 "bad field fence_contribution.collect_data: 2 is neither 0 nor 1");
  EXPECT_REFUSED(body_of(FenceContribution{1, {"j"}, {0}, {1}, {}, {}, 0, "xy"}), bad_field,
                 "bad field fence_contribution.data: 2 bytes without collect_data");
  EXPECT_REFUSED(body_of(FenceRelease{0, CollectiveStatus::ok, "", {}}), bad_field,
                 "bad field fence_release.contribution_id: 0");
  EXPECT_REFUSED(body_of(FenceRelease{1, static_cast<CollectiveStatus>(5), "", {}}), bad_field,
                 "bad field fence_release.status: 5 is none of ok (0), participant_lost (1), unreachable (2), "
                 "not_found (3), refused (4)");
  EXPECT_REFUSED(body_of(FenceRelease{1, CollectiveStatus::unreachable, "", {"x"}}), bad_field,
                 "bad field fence_release.data: 1 blobs for a failed fence");
  EXPECT_REFUSED(body_of(ModexRequest{0, "j", 0}), bad_field, "bad field modex_request.request_id: 0");
  EXPECT_REFUSED(body_of(ModexRequest{1, "", 0}), bad_field, "bad field modex_request.nspace: empty");
  EXPECT_REFUSED(body_of(ModexRequest{1, "j", kWildcardRank}), bad_field,
                 "bad field modex_request.rank: the wildcard names no one rank");
  EXPECT_REFUSED(body_of(ModexReply{0, CollectiveStatus::ok, "", ""}), bad_field,
                 "bad field modex_reply.request_id: 0");
  EXPECT_REFUSED(body_of(ModexReply{1, CollectiveStatus::not_found, "", "x"}), bad_field,
                 "bad field modex_reply.data: 1 bytes for a failed request");
  EXPECT_REFUSED(body_of(AllocationRequest{AllocationDirective::extend, 0, 0, ""}), bad_field,
                 "bad field allocation_request.node_count: 0");
  EXPECT_REFUSED(body_of(RankExited{1, 0, 0, 0}), bad_field, "bad field rank_exited.pid: 0 is not a pid");
  EXPECT_REFUSED(body_of(RankConnected{"", 1}), bad_field, "bad field rank_connected.nspace: empty");
  EXPECT_REFUSED(body_of(RankExited{1, 5, 0, 99}), bad_field,
                 "bad field rank_exited.signal: 99 is not a signal");
  EXPECT_REFUSED(body_of(ResizeDecided{1, static_cast<ResizeKind>(7), 1, {}, {}}), bad_field,
                 "bad field resize_decided.kind: 7 is neither expand (1) nor shrink (2)");
  EXPECT_REFUSED(body_of(ResizeDecided{1, ResizeKind::expand, 0, {}, {}}), bad_field,
                 "bad field resize_decided.count: 0");
  EXPECT_REFUSED(body_of(ResizeDecided{1, ResizeKind::expand, 1, {"n"}, {"m"}}), bad_field,
                 "bad field resize_decided.leaving_nodes: an expand names no leaving nodes");
  EXPECT_REFUSED(body_of(ResizeDecided{1, ResizeKind::shrink, 1, {"n"}, {"m"}}), bad_field,
                 "bad field resize_decided.new_nodes: a shrink names no new nodes");
  EXPECT_REFUSED(body_of(ResizeAck{{1, static_cast<ResizeOutcome>(6), 2, {}, ""}}), bad_field,
                 "bad field resize_ack.outcome: 6 is none of committed (1), refused (2), left (3), "
                 "cancelled (4), recovered (5)");
  EXPECT_REFUSED(body_of(ResizeAck{{1, static_cast<ResizeOutcome>(0), 2, {}, ""}}), bad_field,
                 "bad field resize_ack.outcome: 0 is none of committed (1), refused (2), left (3), "
                 "cancelled (4), recovered (5)");
  EXPECT_REFUSED(body_of(ResizeAck{{1, ResizeOutcome::left, 2, {}, ""}}), bad_field,
                 "bad field resize_ack.ranks: empty although the outcome is left");
  EXPECT_REFUSED(body_of(StartRank{1, {}, {}, "j", 0, {"n1"}, {0}}), bad_field,
                 "bad field start_rank.command: empty");
  EXPECT_REFUSED(body_of(StartRank{1, {"a"}, {"=x"}, "j", 0, {"n1"}, {0}}), bad_field,
                 "bad field start_rank.environment: =x is not NAME=VALUE");
  EXPECT_REFUSED(body_of(StartRank{1, {"a"}, {}, "", 0, {"n1"}, {0}}), bad_field,
                 "bad field start_rank.nspace: empty");
  EXPECT_REFUSED(body_of(StartRank{1, {"a"}, {}, "j", 0, {"n1", "n2"}, {0}}), bad_field,
                 "bad field start_rank.map_ranks: 1 for 2 map_nodes");
  EXPECT_REFUSED(body_of(StartRank{1, {"a"}, {}, "j", 0, {"n1", ""}, {0, 1}}), bad_field,
                 "bad field start_rank.map_nodes[1]: empty");
  EXPECT_REFUSED(body_of(StartRank{1, {"a"}, {}, "j", 0, {"n1", "n2"}, {3, 3}}), bad_field,
                 "bad field start_rank.map_ranks[1]: 3 after 3 (ascending, no repeats)");
  EXPECT_REFUSED(body_of(StartRank{1, {"a"}, {}, "j", 2, {"n1", "n2"}, {0, 1}}), bad_field,
                 "bad field start_rank.rank: 2 is not in the job map");
  EXPECT_REFUSED(body_of(StartRank{1, {"a"}, {}, "j", 2, {"n1", "n2", "n1"}, {0, 1, 2}, true, {1, 1}}), bad_field,
                 "bad field start_rank.departed_ranks[1]: 1 after 1 (ascending, no repeats)");
  EXPECT_REFUSED(body_of(StartRank{1, {"a"}, {}, "j", 2, {"n1", "n2", "n1"}, {0, 1, 2}, true, {2}}), bad_field,
                 "bad field start_rank.departed_ranks[0]: 2 is the rank to start");
  EXPECT_REFUSED(body_of(StartRank{1, {"a"}, {}, "j", 2, {"n1", "n2", "n1"}, {0, 1, 2}, true, {1, 3}}), bad_field,
                 "bad field start_rank.departed_ranks[1]: 3 is not in the job map");
  EXPECT_REFUSED(body_of(OperatorResize{0, "why"}), bad_field,
                 "bad field operator_resize.delta: 0 (neither grow nor shrink)");
  EXPECT_REFUSED(body_of(Ack{static_cast<AckCode>(-1), ""}), bad_field,
                 "bad field ack.code: -1 is not an ack code (0-4)");
}

TEST(Messages, RanksLostRoundTripsAndRefusesWhatCannotBe) {
  const RanksLost lost{5, {1, 4}, {"n1", "n4"}, "the daemon of n4 went away"};
  const DecodeResult r = decode(encode(lost));
  ASSERT_EQ(r.error, DecodeError::ok) << r.text;
  EXPECT_EQ(std::get<RanksLost>(r.envelope.message), lost);
  EXPECT_EQ(to_string(MessageType::ranks_lost), "ranks_lost");
  EXPECT_REFUSED(encode(RanksLost{0, {1}, {"n1"}, ""}), bad_field, "bad field ranks_lost.failure_id: 0");
  EXPECT_REFUSED(encode(RanksLost{2, {1}, {}, ""}), bad_field, "bad field ranks_lost.lost_nodes: empty");
  EXPECT_REFUSED(encode(RanksLost{2, {1}, {"n1", ""}, ""}), bad_field,
                 "bad field ranks_lost.lost_nodes[1]: empty");
  EXPECT_REFUSED(encode(RanksLost{2, {4, 1}, {"n1"}, ""}), bad_field,
                 "bad field ranks_lost.lost_ranks[1]: 1 does not follow 4 (ascending, no repeats)");
}

TEST(Messages, RanksLostCarriesHowTheRanksWereLost) {
  const RanksLost killed{3, {2}, {"n2"}, "rank 2 (pid 4711) killed by signal 9", LossCause::rank_died, 0, 9};
  const DecodeResult r = decode(encode(killed));
  ASSERT_EQ(r.error, DecodeError::ok) << r.text;
  EXPECT_EQ(std::get<RanksLost>(r.envelope.message), killed);
  const RanksLost down{4, {1}, {"n1"}, "the daemon of n1 went away", LossCause::node_lost, -1, 0};
  EXPECT_EQ(std::get<RanksLost>(decode(encode(down)).envelope.message), down);
  EXPECT_REFUSED(encode(RanksLost{2, {1}, {"n1"}, "", static_cast<LossCause>(3), -1, 0}), bad_field,
                 "bad field ranks_lost.cause: 3 is neither rank_died (1) nor node_lost (2)");
  EXPECT_REFUSED(encode(RanksLost{2, {1}, {"n1"}, "", LossCause::rank_died, 0, 65}), bad_field,
                 "bad field ranks_lost.signal: 65 is not a signal");
  EXPECT_REFUSED(encode(RanksLost{2, {1}, {"n1"}, "", LossCause::rank_died, -2, 0}), bad_field,
                 "bad field ranks_lost.exit_code: -2 is below -1 (unknown)");
  EXPECT_REFUSED(encode(RanksLost{2, {1}, {"n1"}, "", LossCause::rank_died, 3, 9}), bad_field,
                 "bad field ranks_lost.exit_code: 3 although killed by a signal");
  EXPECT_REFUSED(encode(RanksLost{2, {1}, {"n1"}, "", LossCause::node_lost, 0, 0}), bad_field,
                 "bad field ranks_lost.exit_code: a lost node's ranks have no exit status (-1, signal 0)");
}

TEST(Messages, RefusesBadHeaderFieldsAndTrailingBytes) {
  Bytes b = encode(Abort{1, ""});
  set_u32(b, 8, 3);
  EXPECT_REFUSED(b, bad_field,
                 "bad field header.flags: 3 is none of notification (0), request (1), reply (2)");
  b = encode(Abort{1, ""});
  set_u64(b, 16, 5);
  EXPECT_REFUSED(b, bad_field, "bad field header.correlation_id: 5 for a notification (must be 0)");
  b = encode(Envelope{Kind::reply, 0, Abort{1, ""}});
  EXPECT_REFUSED(b, bad_field, "bad field header.correlation_id: 0 for a request or reply (must be > 0)");
  b = encode(Abort{1, ""});
  b.push_back(1);
  b.push_back(2);
  set_u32(b, 12, 14);
  EXPECT_REFUSED(b, bad_field, "bad field abort: 2 bytes follow the last field");
}

TEST(Messages, RefusesOversizedStringsAndListsBeforeAllocating) {
  Bytes b = encode(Stop{"x", 1});
  set_u32(b, kHeaderBytes, kMaxStringBytes + 1);
  EXPECT_REFUSED(b, bad_field, "bad field stop.reason: length 65537 exceeds 65536");
  b = encode(ResizeDecided{1, ResizeKind::expand, 1, {"a"}, {}});
  set_u32(b, kHeaderBytes + 8 + 1 + 4, 0xffffffffu);
  EXPECT_REFUSED(b, truncated,
                 "truncated resize_decided: field new_nodes holds 4294967295 entries, only 9 bytes left");
  // The name of a list element is indexed.
  b = encode(ResizeDecided{1, ResizeKind::expand, 2, {"a", "bc"}, {}});
  set_u32(b, kHeaderBytes + 8 + 1 + 4 + 4 + 4 + 1, 7);
  EXPECT_REFUSED(b, truncated, "truncated resize_decided: field new_nodes[1] needs 7 bytes, 6 left");
}

// Random bytes, bytes with a valid header and a random body, and valid messages with bytes
// flipped, cut or inserted: decode never crashes and either succeeds or names an error.
TEST(Messages, FuzzedInputAlwaysGivesACleanResult) {
  std::mt19937_64 rng(20261101);
  auto byte = [&] { return static_cast<std::uint8_t>(rng() & 0xffu); };
  const auto seeds = one_of_each();
  std::size_t accepted = 0, refused = 0;
  for (int round = 0; round < 200000; ++round) {
    Bytes b;
    switch (round % 4) {
      case 0: {
        b.resize(rng() % 96);
        for (auto& x : b) x = byte();
        break;
      }
      case 1: {
        b = encode(seeds[rng() % seeds.size()]);
        b.resize(kHeaderBytes + rng() % 64);
        for (std::size_t i = kHeaderBytes; i < b.size(); ++i) b[i] = byte();
        set_u32(b, 12, static_cast<std::uint32_t>(b.size() - kHeaderBytes));
        break;
      }
      case 2: {
        b = encode(seeds[rng() % seeds.size()]);
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        break;
      }
      default: {
        b = encode(seeds[rng() % seeds.size()]);
        if (rng() % 2) {
          b.resize(rng() % b.size());
        } else {
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(rng() % b.size()), byte());
        }
        break;
      }
    }
    const DecodeResult r = decode(b);
    if (r.ok()) {
      ++accepted;
      EXPECT_TRUE(r.text.empty());
      // What was accepted encodes back to the same bytes.
      EXPECT_EQ(encode(r.envelope), b);
    } else {
      ++refused;
      ASSERT_FALSE(r.text.empty()) << "error " << to_string(r.error) << " without a text";
    }
  }
  EXPECT_EQ(accepted + refused, 200000u);
  EXPECT_GT(refused, 100000u);
}

}  // namespace
}  // namespace bellows::protocol
