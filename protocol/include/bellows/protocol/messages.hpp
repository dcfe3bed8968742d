#pragma once
// The messages between the job's controller (the `bellows run` process, one per job) and
// bellowsd (one per node of the job), defined once for both sides.
//
// Wire format (all integers little-endian):
//
//   offset  size  field
//   0       4     magic "BLWS"                   } frozen in every protocol version, so that
//   4       2     protocol version               } any version can name any other one
//   6       2     message type (MessageType)
//   8       4     flags: 1 request, 2 reply, 0 one-way notification
//   12      4     body length in bytes (at most kMaxBodyBytes)
//   16      8     correlation id: a request's id, repeated in its reply (0 otherwise)
//   24      ...   body: the message's fields in declaration order
//
// Body fields: u8/u16/u32/u64/i32 as fixed-size integers, bool as one byte 0 or 1, double as
// IEEE-754 binary64, string as u32 length + bytes (at most kMaxStringBytes), list as u32
// count + elements. No field is optional and nothing follows the last field.
//
// Versioning rule: a change to any message (a field added, removed, reordered or given a new
// meaning, a type added) raises kProtocolVersion by one. Peers must speak the same version;
// decode() refuses any other one and names both.
//
// Thread safety: everything here is a pure function or a value type.

#include "bellows/protocol/metrics.hpp"
#include "bellows/protocol/resize_report.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace bellows::protocol {

/// The four bytes that open every message.
inline constexpr std::uint8_t kMagic[4] = {'B', 'L', 'W', 'S'};
/// The protocol version this build speaks.
inline constexpr std::uint16_t kProtocolVersion = 14;
/// Size of the fixed header.
inline constexpr std::size_t kHeaderBytes = 24;
/// Largest body accepted (the largest real messages, a ResizeDecided or a StatusReply, take a
/// few KiB).
inline constexpr std::uint32_t kMaxBodyBytes = 1u << 20;
/// Largest string field accepted.
inline constexpr std::uint32_t kMaxStringBytes = 1u << 16;

/// Message types. 1-15 flow from a daemon to the controller, 16-31 from the controller to a
/// daemon, 32-39 either way, 40 and up between an operator's `bellows` command and the
/// controller. A number once used is not given to another message: 17 (commit, which no
/// rank needed) and 19 (launch_ranks, which nothing sent) stay free.
enum class MessageType : std::uint16_t {
  hello = 1,
  node_metrics = 2,
  allocation_request = 3,
  rank_exited = 4,
  resize_ack = 5,
  job_control_request = 6,
  fence_contribution = 7,
  rank_connected = 8,
  resize_decided = 16,
  abort = 18,
  stop = 20,
  start_rank = 21,
  job_view = 22,
  ranks_lost = 23,
  allocation_complete = 24,
  signal_rank = 25,
  fence_release = 26,
  ack = 32,
  modex_request = 33,
  modex_reply = 34,
  operator_resize = 40,
  status_request = 41,
  status_reply = 42,
};

/// The lowercase name of a message type ("resize_decided"), or "unknown".
std::string_view to_string(MessageType type);

/// What a message is on the wire: a one-way notification, a request that expects exactly
/// one reply with the same correlation id, or that reply.
enum class Kind : std::uint8_t { notification = 0, request = 1, reply = 2 };

// ---------------------------------------------------------------- daemon -> controller

/// A daemon registers with the controller of its job (sent first, as a request).
struct Hello {
  static constexpr MessageType kType = MessageType::hello;
  std::string node_name;                            ///< not empty
  std::int32_t daemon_pid = 0;                      ///< > 0
  std::uint16_t protocol_version = kProtocolVersion;  ///< equal to the header's version
  bool operator==(const Hello&) const = default;
};

/// RankExited::rank of a process that had no rank in the job yet (a rank that the daemon
/// started and that ended, or could not start, before it joined), and NodeMetrics::rank and
/// JobView::node_ranks of a node whose rank the daemon does not know.
inline constexpr std::uint32_t kNoRank = 0xffffffffu;
/// JobControlRequest::target_rank for every rank of the job (PMIx's PMIX_RANK_WILDCARD).
inline constexpr std::uint32_t kAllRanks = 0xfffffffeu;

/// Metrics of one node, sent after each iteration of its rank: the rank's Metrics
/// (metrics.hpp) with the node's name, the rank's number in the job and its process id.
struct NodeMetrics {
  static constexpr MessageType kType = MessageType::node_metrics;
  std::string node_name;  ///< not empty
  Metrics metrics;        ///< checked by protocol::check(const Metrics&)
  std::uint32_t rank = kNoRank;  ///< the reporting rank (bellows.metrics.rank)
  std::int32_t pid = 0;          ///< its process id; 0 when the daemon does not know it
  bool operator==(const NodeMetrics&) const = default;
};

/// EXTEND or RELEASE, as in PMIx_Allocation_request, or the cancel of an earlier request
/// (PMIx's PMIX_ALLOC_REQ_CANCEL directive).
enum class AllocationDirective : std::uint8_t { extend = 1, release = 2, cancel = 3 };

/// An allocation request a rank or tool made (PMIx_Allocation_request), forwarded by its
/// daemon. request_id names it (PMIX_ALLOC_REQ_ID, or one the daemon gave it), unique among
/// the daemon's requests: the controller answers its outcome (AllocationComplete) under it,
/// and a cancel names the request it calls off by it.
struct AllocationRequest {
  static constexpr MessageType kType = MessageType::allocation_request;
  AllocationDirective directive = AllocationDirective::extend;
  std::uint32_t node_count = 0;       ///< > 0 for extend and release, 0 for cancel
  std::uint32_t requesting_rank = 0;
  std::string request_id;             ///< not empty for a cancel
  bool operator==(const AllocationRequest&) const = default;
};

/// What PMIx_Job_control asked of the job's ranks.
enum class JobControlAction : std::uint8_t { signal = 1, terminate = 2 };

/// A PMIx_Job_control a rank or tool sent a daemon, forwarded to the controller (a request,
/// answered with an Ack): signal (a signal to the target) or terminate (SIGTERM to a rank; the
/// whole job ends as on `bellows run`'s SIGTERM).
struct JobControlRequest {
  static constexpr MessageType kType = MessageType::job_control_request;
  JobControlAction action = JobControlAction::signal;
  std::int32_t signal = 0;             ///< 1..64 for signal, 0 for terminate
  std::uint32_t target_rank = 0;       ///< a job rank, or kAllRanks
  std::string requester;               ///< who asked, as its daemon names it; not empty
  bool operator==(const JobControlRequest&) const = default;
};

/// A rank of this node ended. A nonzero exit code or a signal means it crashed.
struct RankExited {
  static constexpr MessageType kType = MessageType::rank_exited;
  std::uint32_t rank = 0;  ///< kNoRank: it had not joined yet
  std::int32_t pid = 0;        ///< > 0
  /// Exit status when it exited, 0 when killed by a signal, -1 when the daemon could not
  /// learn it (the rank is not its child: it saw the process disappear).
  std::int32_t exit_code = 0;
  std::int32_t signal = 0;     ///< the signal that killed it, 0 when it exited
  bool crashed() const { return exit_code != 0 || signal != 0; }
  bool operator==(const RankExited&) const = default;
};

/// A process of the job connected to its node's daemon as a PMIx client (PMIx_Init): the
/// daemon's client_connected upcall. A job of PMIx-native programs takes part in a grow by it
/// (docs/daemon.md, "PMIx-native programs through a grow and a shrink").
struct RankConnected {
  static constexpr MessageType kType = MessageType::rank_connected;
  std::string nspace;      ///< the job's namespace, not empty
  std::uint32_t rank = 0;  ///< its PMIx rank in it
  bool operator==(const RankConnected&) const = default;
};

/// What a rank of a daemon's node reported about a resize (resize_report.hpp): the job
/// committed it, refused it, dropped it when the controller called it off, or the node's
/// leaving ranks left.
struct ResizeAck {
  static constexpr MessageType kType = MessageType::resize_ack;
  ResizeReport report;  ///< checked by protocol::check(const ResizeReport&)
  bool operator==(const ResizeAck&) const = default;
};

// ---------------------------------------------------------------- controller -> daemon

enum class ResizeKind : std::uint8_t { expand = 1, shrink = 2 };

/// The controller decided a resize. Expand: `count` nodes, named in new_nodes, no leaving
/// nodes. Shrink: `count` nodes leave, named in leaving_nodes (the job's first rank knows
/// which ranks run on them), no new nodes.
struct ResizeDecided {
  static constexpr MessageType kType = MessageType::resize_decided;
  std::uint64_t resize_id = 0;
  ResizeKind kind = ResizeKind::expand;
  std::uint32_t count = 0;  ///< > 0
  std::vector<std::string> new_nodes;
  std::vector<std::string> leaving_nodes;
  bool operator==(const ResizeDecided&) const = default;
};

/// The resize is abandoned; the job keeps its previous size.
struct Abort {
  static constexpr MessageType kType = MessageType::abort;
  std::uint64_t resize_id = 0;
  std::string reason;
  bool operator==(const Abort&) const = default;
};

/// Stop the node's ranks (SIGTERM, then SIGKILL after grace_ms) and exit.
struct Stop {
  static constexpr MessageType kType = MessageType::stop;
  std::string reason;
  std::uint32_t grace_ms = 0;
  bool operator==(const Stop&) const = default;
};

/// Start the job's rank of this node: the daemon registers the job's PMIx namespace `nspace`
/// with the job map (which ranks run on which nodes, the new one included) and `rank` as a
/// client of its own, then runs `command` (argv; the job's launcher and program) with its own
/// environment, `environment` ("NAME=VALUE") and the variables of that PMIx client
/// (PMIx_server_setup_fork) added. The rank joins the running job by itself
/// (runtime::ElasticSession: it connects to the port the job opened). With
/// started_by_daemon false (the job's first rank, which `bellows run` starts itself) the
/// daemon registers the rank and writes those variables to JobDirectory::rank_environment_file
/// instead of starting anything.
struct StartRank {
  static constexpr MessageType kType = MessageType::start_rank;
  std::uint64_t resize_id = 0;  ///< the expand the rank is for; 0: the job's start
  std::vector<std::string> command;
  std::vector<std::string> environment;
  std::string nspace;                    ///< the job's PMIx namespace (its id), not empty
  std::uint32_t rank = 0;                ///< the rank's number in nspace, listed in the map
  std::vector<std::string> map_nodes;    ///< the job map: map_ranks[i] runs on map_nodes[i]
  std::vector<std::uint32_t> map_ranks;  ///< as many as map_nodes, ascending, no repeats
  bool started_by_daemon = true;
  /// The map's ranks that left the job (since version 13), ascending, no repeats, each in the
  /// map and none of them `rank`: the rank reads the job without them from its start.
  std::vector<std::uint32_t> departed_ranks{};
  bool operator==(const StartRank&) const = default;
};

/// The job as its controller sees it, sent to every daemon of the job when it registers and
/// whenever any of it changes, so that a daemon answers PMIx queries (docs/daemon.md) for the
/// whole job, not only its node. node_ranks[i] and node_pids[i] belong to nodes[i]: the rank
/// there and its process id as its daemon last reported them (kNoRank and 0 before the first
/// report). The resize in flight, if any, is resize_id (0: none) with its kind, its state's
/// name (ResizeState, docs/controller.md), its node count and its nodes.
struct JobView {
  static constexpr MessageType kType = MessageType::job_view;
  std::string job;                         ///< the job's id, not empty
  std::vector<std::string> nodes;          ///< the job's nodes, its first node first; not empty
  std::vector<std::uint32_t> node_ranks;   ///< as many as nodes
  std::vector<std::int32_t> node_pids;     ///< as many as nodes, each >= 0
  std::uint32_t ranks = 0;                 ///< ranks in the job as last reported
  std::uint32_t min_nodes = 1;             ///< the job's node range, 1 <= min_nodes <= max_nodes
  std::uint32_t max_nodes = 1;
  std::string policy;                      ///< the policy file, "" for none
  std::uint64_t resize_id = 0;             ///< the resize in flight; 0: none
  ResizeKind resize_kind = ResizeKind::expand;
  std::string resize_state;                ///< "" when none, else not empty
  std::uint32_t resize_count = 0;
  std::vector<std::string> resize_nodes;   ///< granted (expand) or leaving (shrink) nodes
  /// The PMIx rank in the job's namespace of each node's rank (as many as nodes; kNoRank for a
  /// node without one), or empty when the job's ranks are not started by the daemons.
  std::vector<std::uint32_t> node_pmix_ranks{};
  /// The job map: the node each PMIx rank number was given on, by number (0..n-1), every
  /// number given so far (a rank that left keeps its number); empty when no number was given.
  /// Each node's rank in node_pmix_ranks (other than kNoRank) is listed here at that node.
  std::vector<std::string> pmix_rank_nodes{};
  bool operator==(const JobView&) const = default;
};

/// How the ranks of a failure were lost: their process ended without leaving the job, or
/// their node's daemon went away (the node counts as down).
enum class LossCause : std::uint8_t { rank_died = 1, node_lost = 2 };

/// A failure: ranks of the job are gone (their process ended without leaving, or their node's
/// daemon went away). Sent to the daemon of every surviving node, which tells its ranks
/// (PMIx kRanksLost). failure_id counts in the same sequence as the resize ids; the job's
/// first rank reports ResizeOutcome::recovered under it once the job runs on without them.
struct RanksLost {
  static constexpr MessageType kType = MessageType::ranks_lost;
  std::uint64_t failure_id = 0;             ///< > 0
  std::vector<std::uint32_t> lost_ranks;    ///< the job ranks lost, ascending; may be empty
                                            ///< when the lost node's rank was never reported
  std::vector<std::string> lost_nodes;      ///< the nodes they ran on; not empty
  std::string reason;                       ///< how the controller learnt of it
  LossCause cause = LossCause::rank_died;
  /// rank_died: as RankExited says it, when the process that ended was the rank's (exit
  /// status, 0 when killed by a signal, -1 when unknown) and the signal that killed it, 0 when
  /// none or unknown. node_lost: -1 and 0.
  std::int32_t exit_code = -1;
  std::int32_t signal = 0;
  bool operator==(const RanksLost&) const = default;
};

/// How the resize an allocation request started ended.
enum class AllocationOutcome : std::uint8_t { committed = 1, aborted = 2, cancelled = 3 };
/// "committed", "aborted", "cancelled" (or "unknown").
std::string_view to_string(AllocationOutcome outcome);

/// The end of the resize an accepted allocation request started, sent to the daemon that
/// forwarded the request, which tells the requester (PMIX_NOTIFY_ALLOC_COMPLETE).
struct AllocationComplete {
  static constexpr MessageType kType = MessageType::allocation_complete;
  std::string request_id;  ///< as AllocationRequest::request_id; not empty
  std::uint64_t resize_id = 0;  ///< > 0
  AllocationOutcome outcome = AllocationOutcome::committed;
  std::string text;        ///< what happened, readable
  bool operator==(const AllocationComplete&) const = default;
};

/// Send `signal` to the job's rank `rank`, whose process its daemon watches as `pid`
/// (a PMIx_Job_control the controller accepted; reason names who asked).
struct SignalRank {
  static constexpr MessageType kType = MessageType::signal_rank;
  std::uint32_t rank = 0;
  std::int32_t pid = 0;     ///< > 0
  std::int32_t signal = 0;  ///< 1..64
  std::string reason;
  bool operator==(const SignalRank&) const = default;
};

// ---------------------------------------------------------------- PMIx fences and modex

/// FenceContribution::participant_ranks and the like: every rank of the namespace (PMIx's
/// PMIX_RANK_WILDCARD).
inline constexpr std::uint32_t kWildcardRank = kAllRanks;

/// How a fence or a data request across nodes ended; the daemon answers PMIx with the code
/// named (docs/daemon.md).
enum class CollectiveStatus : std::uint8_t {
  ok = 0,                ///< PMIX_SUCCESS
  participant_lost = 1,  ///< a participant's process ended first: PMIX_ERR_PROC_TERM_WO_SYNC
  unreachable = 2,       ///< a node that had to answer was lost: PMIX_ERR_UNREACH
  not_found = 3,         ///< no node of the job hosts the rank asked for: PMIX_ERR_NOT_FOUND
  refused = 4,           ///< the contribution or request was inconsistent: PMIX_ERR_BAD_PARAM
};
/// "ok", "participant_lost", "unreachable", "not_found", "refused" (or "unknown").
std::string_view to_string(CollectiveStatus status);

/// A node's part in a PMIx fence (the server's fence_nb upcall, called once every local
/// participant entered PMIx_Fence). The participants as the clients gave them: participant i is
/// rank participant_ranks[i] (kWildcardRank: all of them) of namespace participant_nspaces[i],
/// whose size is nspace_sizes[i] (for the job's namespace the rank numbers given so far, which
/// may be more than the ranks in the job: a number that left is not given again, and the
/// controller reads the job's wildcard as its ranks now). The participants this node hosts,
/// expanded, are local_nspaces and local_ranks. The controller releases it (FenceRelease, under contribution_id) once every
/// participant's node contributed; several fences may be in flight, matched by participant set
/// and order.
struct FenceContribution {
  static constexpr MessageType kType = MessageType::fence_contribution;
  std::uint64_t contribution_id = 0;             ///< > 0, unique among this daemon's
  std::vector<std::string> participant_nspaces;  ///< not empty, no entry empty
  std::vector<std::uint32_t> participant_ranks;  ///< as many as participant_nspaces
  std::vector<std::uint32_t> nspace_sizes;       ///< as many, each > 0
  std::vector<std::string> local_nspaces;        ///< participants hosted here, expanded
  std::vector<std::uint32_t> local_ranks;        ///< as many as local_nspaces
  std::uint8_t collect_data = 0;                 ///< 1: PMIX_COLLECT_DATA was asked, else 0
  std::string data;                              ///< the blob PMIx gave; empty without collect_data
  bool operator==(const FenceContribution&) const = default;
};

/// The end of a fence, sent to every node that contributed: status ok with the contributions'
/// blobs (data, in the order the nodes contributed; none without PMIX_COLLECT_DATA), or the
/// reason it failed.
struct FenceRelease {
  static constexpr MessageType kType = MessageType::fence_release;
  std::uint64_t contribution_id = 0;  ///< as the node's FenceContribution; > 0
  CollectiveStatus status = CollectiveStatus::ok;
  std::string text;                   ///< why it failed; may be empty when ok
  std::vector<std::string> data;      ///< empty unless ok
  bool operator==(const FenceRelease&) const = default;
};

/// A request for the data a rank committed (PMIx's direct modex): from the daemon whose client
/// asked to the controller, and from the controller to the daemons that may host the rank.
/// request_id is the sender's, repeated in the ModexReply.
struct ModexRequest {
  static constexpr MessageType kType = MessageType::modex_request;
  std::uint64_t request_id = 0;  ///< > 0
  std::string nspace;            ///< not empty
  std::uint32_t rank = 0;        ///< a rank, not kWildcardRank
  bool operator==(const ModexRequest&) const = default;
};

/// The answer to a ModexRequest: the rank's blob (status ok), not_found from a daemon that does
/// not host it, or why it cannot be had.
struct ModexReply {
  static constexpr MessageType kType = MessageType::modex_reply;
  std::uint64_t request_id = 0;  ///< as the request's; > 0
  CollectiveStatus status = CollectiveStatus::ok;
  std::string text;
  std::string data;              ///< empty unless ok
  bool operator==(const ModexReply&) const = default;
};

// ---------------------------------------------------------------- operator <-> controller

/// An operator's order (`bellows resize +K|-K`): grow by delta nodes (> 0) or shrink by
/// -delta (< 0). Answered with an Ack saying whether the controller took it.
struct OperatorResize {
  static constexpr MessageType kType = MessageType::operator_resize;
  std::int32_t delta = 0;  ///< not 0
  std::string reason;
  bool operator==(const OperatorResize&) const = default;
};

/// Asks the controller for the job's state (`bellows status`); answered with StatusReply.
struct StatusRequest {
  static constexpr MessageType kType = MessageType::status_request;
  bool operator==(const StatusRequest&) const = default;
};

/// The job's state as one JSON object (job, backend, nodes, iteration, resizes, ...).
struct StatusReply {
  static constexpr MessageType kType = MessageType::status_reply;
  std::string json;
  bool operator==(const StatusReply&) const = default;
};

// ---------------------------------------------------------------- either way

/// Status codes carried by Ack.
enum class AckCode : std::int32_t {
  ok = 0,
  refused = 1,      ///< the message was refused (malformed, wrong version, not allowed)
  failed = 2,       ///< understood, but doing it failed (text says why)
  unsupported = 3,  ///< this side does not handle that message
  unanswered = 4,   ///< the receiver dropped the request without answering it
};

/// A reply that carries a status: the answer to most requests.
struct Ack {
  static constexpr MessageType kType = MessageType::ack;
  AckCode code = AckCode::ok;
  std::string text;
  bool operator==(const Ack&) const = default;
};

/// Any message.
using Message = std::variant<Hello, NodeMetrics, AllocationRequest, RankExited, ResizeAck,
                             ResizeDecided, Abort, Stop, StartRank, JobView, RanksLost, Ack,
                             OperatorResize, StatusRequest, StatusReply, JobControlRequest,
                             AllocationComplete, SignalRank, FenceContribution, FenceRelease,
                             ModexRequest, ModexReply, RankConnected>;

/// The type of the message held.
MessageType type_of(const Message& message);

/// A message with what the header adds to it.
struct Envelope {
  Kind kind = Kind::notification;
  std::uint64_t correlation_id = 0;  ///< nonzero for requests and replies
  Message message;
  bool operator==(const Envelope&) const = default;
};

/// The bytes of an envelope, header included. Encoding cannot fail for values that decode
/// accepts; values it would refuse (an empty node name, a busy fraction of 2) are encoded
/// as they are and refused by the receiver.
std::vector<std::uint8_t> encode(const Envelope& envelope);

/// Shorthand: a notification.
std::vector<std::uint8_t> encode(const Message& message);

/// Why decode refused its input.
enum class DecodeError : std::uint8_t {
  ok = 0,
  truncated,            ///< fewer bytes than the header or the body needs
  wrong_magic,          ///< does not start with "BLWS"
  unsupported_version,  ///< another protocol version (text names both)
  unknown_type,         ///< a message type this version does not define
  bad_length,           ///< the body is longer than the header says, or over kMaxBodyBytes
  bad_field,            ///< a field's value is invalid, or bytes follow the last field
};

/// The lowercase name of a decode error ("unsupported_version").
std::string_view to_string(DecodeError error);

/// What decode found: on success the envelope, otherwise a code and a text naming what was
/// wrong and where (e.g. "bad field resize_decided.kind: 7 is neither expand (1) nor shrink
/// (2)"). peer_version is set as soon as the first six bytes could be read.
struct DecodeResult {
  DecodeError error = DecodeError::ok;
  std::string text;
  std::optional<std::uint16_t> peer_version;
  Envelope envelope;
  bool ok() const { return error == DecodeError::ok; }
};

/// Decodes one message. Never throws and never reads past `bytes`; any input gives either
/// an envelope or an error.
DecodeResult decode(std::span<const std::uint8_t> bytes);

}  // namespace bellows::protocol
