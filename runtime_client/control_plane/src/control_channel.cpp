#include <bellows/runtime/control_channel.hpp>
#include <bellows/runtime/loss_notices.hpp>

#include <bellows/protocol/pmix_events.hpp>
#include <bellows/protocol/tcp_nodelay.hpp>

#include <pmix.h>
#include <pmix_tool.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>

namespace bellows::runtime {

namespace proto = bellows::protocol::pmix;

namespace {

/// Owns a pmix_info_t array (PMIX_INFO_CREATE / PMIX_INFO_FREE).
class Info {
 public:
  explicit Info(std::size_t n) : size_(n) { PMIX_INFO_CREATE(info_, n); }
  ~Info() {
    if (info_ != nullptr) PMIX_INFO_FREE(info_, size_);
  }
  Info(const Info&) = delete;
  Info& operator=(const Info&) = delete;
  void load(std::size_t i, const char* key, const void* data, pmix_data_type_t type) {
    const pmix_status_t rc = PMIx_Info_load(&info_[i], key, data, type);
    if (rc != PMIX_SUCCESS)
      throw ControlChannelError(std::string("PMIx_Info_load(") + key + ") failed: " +
                                PMIx_Error_string(rc));
  }
  /// A value as a Bellows payload carries it (PMIX_UINT64 or PMIX_STRING).
  void load(std::size_t i, const char* key, std::uint64_t value) {
    load(i, key, &value, PMIX_UINT64);
  }
  void load(std::size_t i, const char* key, const std::string& value) {
    load(i, key, value.c_str(), PMIX_STRING);
  }
  pmix_info_t* data() const noexcept { return info_; }
  std::size_t size() const noexcept { return size_; }

 private:
  pmix_info_t* info_ = nullptr;
  std::size_t size_ = 0;
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

/// The server port of a "nspace.rank;tcp4://host:port" URI, or -1.
int uri_port(const std::string& uri) {
  const auto colon = uri.rfind(':');
  if (colon == std::string::npos) return -1;
  char* end = nullptr;
  const long port = std::strtol(uri.c_str() + colon + 1, &end, 10);
  return (end != uri.c_str() + colon + 1 && port > 0 && port < 65536) ? static_cast<int>(port) : -1;
}

using Event = std::variant<ExpandEvent, ShrinkEvent, AbortEvent, RanksLostEvent>;

/// Values of the Bellows keys of an event.
struct Fields {
  std::vector<std::pair<std::string, pmix_value_t*>> entries;

  const pmix_value_t* find(const char* key) const {
    for (const auto& [k, v] : entries)
      if (k == key) return v;
    return nullptr;
  }
  std::uint64_t number(const char* key) const {
    const pmix_value_t* v = find(key);
    if (v == nullptr) throw std::invalid_argument(std::string("no '") + key + "'");
    if (v->type != PMIX_UINT64)
      throw std::invalid_argument(std::string("'") + key + "' is not a uint64");
    return v->data.uint64;
  }
  std::string text(const char* key) const {
    const pmix_value_t* v = find(key);
    if (v == nullptr) throw std::invalid_argument(std::string("no '") + key + "'");
    if (v->type != PMIX_STRING)
      throw std::invalid_argument(std::string("'") + key + "' is not a string");
    return v->data.string != nullptr ? v->data.string : "";
  }
};

/// The event for code with info's payload; std::invalid_argument naming what is wrong.
Event decode_event(pmix_status_t code, pmix_info_t info[], size_t ninfo) {
  Fields f;
  for (size_t i = 0; i < ninfo; ++i) {
    const std::string key(info[i].key, ::strnlen(info[i].key, PMIX_MAX_KEYLEN + 1));
    if (key.starts_with("bellows.")) f.entries.emplace_back(key, &info[i].value);
  }
  const std::uint64_t version = f.number(proto::kVersion);
  if (version != proto::kProtocolVersion)
    throw std::invalid_argument("protocol version " + std::to_string(version) +
                                ", this rank speaks " + std::to_string(proto::kProtocolVersion));
  switch (code) {
    case proto::kExpandDecided:
      return ExpandEvent{f.number(proto::kResizeId), f.number(proto::kExpandCount),
                         split(f.text(proto::kExpandHosts))};
    case proto::kShrinkDecided:
      return ShrinkEvent{f.number(proto::kResizeId), split(f.text(proto::kShrinkNodes))};
    case proto::kResizeAborted:
      return AbortEvent{f.number(proto::kResizeId), f.text(proto::kAbortReason)};
    case proto::kRanksLost: {
      RanksLostEvent lost{f.number(proto::kFailureId), {}, split(f.text(proto::kLostNodes)),
                          f.text(proto::kLostReason)};
      for (const std::string& rank : split(f.text(proto::kLostRanks))) {
        char* end = nullptr;
        const unsigned long long value = std::strtoull(rank.c_str(), &end, 10);
        if (rank.empty() || *end != '\0' || value > 0xfffffffeull)
          throw std::invalid_argument(std::string("'") + proto::kLostRanks + "': '" + rank + "' is not a rank");
        lost.ranks.push_back(static_cast<std::uint32_t>(value));
      }
      return lost;
    }
    default: throw std::invalid_argument("unknown event code " + std::to_string(code));
  }
}

std::atomic<bool> g_connected{false};

}  // namespace

struct ControlChannel::State {
  std::string uri;
  std::string name;
  /// Connected with PMIx_Init as a client of the daemon that started this process (else
  /// PMIx_tool_init as a tool).
  bool client = false;
  pmix_proc_t self{};
  size_t handler_id = 0;
  bool handler_registered = false;

  mutable std::mutex mutex;  // guards the queue and the drop counters
  std::condition_variable arrived;
  std::deque<Event> queue;
  std::uint64_t dropped = 0;
  std::string last_drop_reason;

  std::function<void(const ExpandEvent&)> expand;
  std::function<void(const ShrinkEvent&)> shrink;
  std::function<void(const AbortEvent&)> abort;
  std::function<void(const RanksLostEvent&)> ranks_lost;

  // Notifications sent to the daemon and not yet acknowledged (notify_daemon()).
  std::mutex sent_mutex;
  std::condition_variable acknowledged;
  /// Each one's PMIx completion callbacks still to come, by the id it was sent with.
  std::unordered_map<std::uint64_t, int> unacknowledged;
  std::uint64_t next_notification = 1;
  /// The last wait for room ran out and the daemon has acknowledged nothing since.
  bool stalled = false;
};

namespace {

// The event handler and the completion callbacks find the channel here (PMIx passes them no
// pointer of ours; one channel exists at a time).
std::atomic<ControlChannel::State*> g_state{nullptr};

// PMIx 4.2.2 loses the bytes of a message header that it read only in part (its
// pmix_ptl_base_recv_handler reads the header into a local variable and returns when the socket
// has no more bytes, src/mca/ptl/base/ptl_base_sendrecv.c; the same in openpmix's master of
// August 2026): the connection then reads every later message at the wrong offset. On the
// loopback connection between a rank and its daemon, TCP cuts a message at an arbitrary byte
// only when the reader's receive window is full, so a rank keeps few notifications on their
// way to its daemon: at most kMaxUnacknowledged, each acknowledged by the daemon once its PMIx
// has read it. 8 notifications are under 5 KB; a receive window starts at 64 KB
// (docs/daemon.md, "What PMIx 4.2.2 does here").
constexpr std::size_t kMaxUnacknowledged = 8;
/// How long a notification waits for room before it is given up.
constexpr std::chrono::milliseconds kAcknowledgementWait{5000};

/// PMIx's completion callback of a notification sent by notify_daemon(); cbdata is its id.
void notification_done(pmix_status_t /*status*/, void* cbdata) {
  ControlChannel::State* state = g_state.load();
  if (state == nullptr) return;
  const auto id = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(cbdata));
  std::lock_guard lock(state->sent_mutex);
  const auto it = state->unacknowledged.find(id);
  if (it == state->unacknowledged.end() || --it->second > 0) return;
  state->unacknowledged.erase(it);
  state->stalled = false;
  state->acknowledged.notify_all();
}

/// Sends `info` to the daemon as event `code` (PMIX_RANGE_RM) once fewer than
/// kMaxUnacknowledged notifications are on their way; `what` names the call in errors.
void notify_daemon(ControlChannel::State& state, pmix_status_t code, const pmix_info_t* info, std::size_t ninfo,
                   const char* what) {
  std::uint64_t id = 0;
  {
    std::unique_lock lock(state.sent_mutex);
    const auto room = [&state] { return state.unacknowledged.size() < kMaxUnacknowledged; };
    if (!room() && (state.stalled || !state.acknowledged.wait_for(lock, kAcknowledgementWait, room))) {
      state.stalled = true;
      throw ControlChannelError(std::string(what) + ": not sent: the daemon acknowledged none of the last " +
                                std::to_string(kMaxUnacknowledged) + " notifications within " +
                                std::to_string(kAcknowledgementWait.count()) + " ms");
    }
    id = state.next_notification++;
    // The daemon's acknowledgement calls back once; a tool's PMIx_Notify_event also delivers
    // the event to the tool itself first and calls back for that too (PMIx 4.2.2,
    // src/event/pmix_event_notification.c: pmix_server_notify_client_of_event, then
    // pmix_notify_server_of_event). The info is copied before the call returns.
    state.unacknowledged.emplace(id, state.client ? 1 : 2);
  }
  const pmix_status_t rc = PMIx_Notify_event(code, &state.self, PMIX_RANGE_RM, info, ninfo, notification_done,
                                             reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)));
  if (rc != PMIX_SUCCESS) {
    {
      std::lock_guard lock(state.sent_mutex);
      state.unacknowledged.erase(id);  // a callback that still comes finds nothing
    }
    if (rc != PMIX_OPERATION_SUCCEEDED)
      throw ControlChannelError(std::string(what) + ": PMIx_Notify_event failed: " + PMIx_Error_string(rc));
  }
}

void event_handler(size_t /*id*/, pmix_status_t code, const pmix_proc_t* /*source*/,
                   pmix_info_t info[], size_t ninfo, pmix_info_t* /*results*/,
                   size_t /*nresults*/, pmix_event_notification_cbfunc_fn_t cbfunc,
                   void* cbdata) {
  if (ControlChannel::State* state = g_state.load()) {
    std::lock_guard lock(state->mutex);
    try {
      Event event = decode_event(code, info, ninfo);
      if (const auto* lost = std::get_if<RanksLostEvent>(&event)) {
        // Now, not at the next poll: the runtime may be waiting in an iteration for a rank
        // that is silent, which only this word ends (loss_notices.hpp).
        loss_notices().tell(lost->failure_id, std::vector<int>(lost->ranks.begin(), lost->ranks.end()));
        loss_notices().tell_nodes(lost->nodes);
      }
      state->queue.push_back(std::move(event));
      state->arrived.notify_all();
    } catch (const std::exception& e) {
      ++state->dropped;
      const std::string_view name = proto::event_name(code);
      state->last_drop_reason = std::string(name.empty() ? "event" : name) + ": " + e.what();
    }
  }
  if (cbfunc != nullptr) cbfunc(PMIX_EVENT_ACTION_COMPLETE, nullptr, 0, nullptr, nullptr, cbdata);
}

/// PMIx_Finalize for a client, PMIx_tool_finalize for a tool.
void finalize(const ControlChannel::State& state) {
  if (state.client)
    PMIx_Finalize(nullptr, 0);
  else
    PMIx_tool_finalize();
}

std::string read_uri(const std::string& uri) {
  if (!uri.starts_with("file:")) return uri;
  const std::string path = uri.substr(5);
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text) || text.empty())
    throw ControlChannelError("cannot read the daemon's URI from " + path + ": " +
                              (in ? "the file is empty" : std::strerror(errno)));
  return text;
}

/// Whether this process was started as a PMIx client of the daemon at `uri`: the variables of
/// PMIx_server_setup_fork name a namespace and that server (PMIX_SERVER_URI4 and its kin).
bool started_as_client_of(const std::string& uri) {
  const char* nspace = std::getenv("PMIX_NAMESPACE");
  const char* rank = std::getenv("PMIX_RANK");
  if (nspace == nullptr || *nspace == '\0' || rank == nullptr || *rank == '\0') return false;
  for (const char* variable : {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21",
                               "PMIX_SERVER_URI2"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && uri == value) return true;
  }
  return false;
}

}  // namespace

std::optional<ControlChannel> ControlChannel::connect_from_environment() {
  const char* uri = std::getenv(kUriVariable);
  if (uri == nullptr || *uri == '\0') return std::nullopt;
  return connect(uri);
}

ControlChannel ControlChannel::connect(const std::string& uri_or_file) {
  if (g_connected.exchange(true))
    throw ControlChannelError("a ControlChannel is already connected in this process "
                              "(PMIx allows one tool connection)");
  try {
    auto state = std::make_unique<State>();
    state->uri = read_uri(uri_or_file);
    state->client = started_as_client_of(state->uri);
    pmix_status_t rc = PMIX_SUCCESS;
    if (state->client) {
      // Started by that daemon (every rank of a job: docs/control-plane.md): its client, in the
      // job's namespace under the job-wide rank the daemon registered.
      rc = PMIx_Init(&state->self, nullptr, 0);
      if (rc != PMIX_SUCCESS)
        throw ControlChannelError("cannot connect to bellowsd at '" + state->uri +
                                  "' as its client: PMIx_Init failed: " + PMIx_Error_string(rc));
    } else {
      Info info(1);
      info.load(0, PMIX_SERVER_URI, state->uri.c_str(), PMIX_STRING);
      rc = PMIx_tool_init(&state->self, info.data(), info.size());
      if (rc != PMIX_SUCCESS)
        throw ControlChannelError("cannot attach to bellowsd at '" + state->uri +
                                  "': PMIx_tool_init failed: " + PMIx_Error_string(rc));
    }
    state->name = std::string(state->self.nspace, ::strnlen(state->self.nspace, PMIX_MAX_NSLEN + 1)) +
                  ":" + std::to_string(state->self.rank);
    const char* nodelay = std::getenv(kNodelayVariable);
    if (nodelay == nullptr || std::string_view(nodelay) != "0")
      bellows::protocol::set_nodelay_on_port(uri_port(state->uri), bellows::protocol::PortSide::peer);

    g_state.store(state.get());
    pmix_status_t codes[] = {proto::kExpandDecided, proto::kShrinkDecided, proto::kResizeAborted,
                             proto::kRanksLost};
    Info handler_info(1);
    handler_info.load(0, PMIX_EVENT_HDLR_NAME, "bellows.control", PMIX_STRING);
    rc = PMIx_Register_event_handler(codes, std::size(codes), handler_info.data(),
                                     handler_info.size(), event_handler, nullptr, nullptr);
    if (rc < 0) {
      g_state.store(nullptr);
      finalize(*state);
      throw ControlChannelError(std::string("PMIx_Register_event_handler failed: ") +
                                PMIx_Error_string(rc));
    }
    state->handler_id = static_cast<size_t>(rc);
    state->handler_registered = true;
    // The daemon watches this process from now on (it learns of a crash without waiting).
    const std::uint64_t pid = static_cast<std::uint64_t>(::getpid());
    const bool no_cache = true;
    Info attached(3);
    attached.load(0, proto::kVersion, &proto::kProtocolVersion, PMIX_UINT64);
    attached.load(1, proto::kAttachedPid, &pid, PMIX_UINT64);
    attached.load(2, PMIX_EVENT_DO_NOT_CACHE, &no_cache, PMIX_BOOL);
    rc = PMIx_Notify_event(proto::kRankAttached, &state->self, PMIX_RANGE_RM, attached.data(),
                           attached.size(), nullptr, nullptr);
    if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED) {
      g_state.store(nullptr);
      PMIx_Deregister_event_handler(state->handler_id, nullptr, nullptr);
      finalize(*state);
      throw ControlChannelError(std::string("telling bellowsd this rank attached failed: ") +
                                PMIx_Error_string(rc));
    }
    return ControlChannel(std::move(state));
  } catch (...) {
    g_connected.store(false);
    throw;
  }
}

ControlChannel::ControlChannel(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}

ControlChannel::~ControlChannel() {
  if (!state_) return;
  // The daemon watches this process: its end from now on is the program's, not a death.
  const bool no_cache = true;
  Info detached(2);
  detached.load(0, proto::kVersion, &proto::kProtocolVersion, PMIX_UINT64);
  detached.load(1, PMIX_EVENT_DO_NOT_CACHE, &no_cache, PMIX_BOOL);
  (void)PMIx_Notify_event(proto::kRankDetached, &state_->self, PMIX_RANGE_RM, detached.data(),
                          detached.size(), nullptr, nullptr);
  if (state_->handler_registered) PMIx_Deregister_event_handler(state_->handler_id, nullptr, nullptr);
  g_state.store(nullptr);
  finalize(*state_);
  g_connected.store(false);
}

ControlChannel::ControlChannel(ControlChannel&& other) noexcept = default;

ControlChannel& ControlChannel::operator=(ControlChannel&& other) noexcept {
  if (this != &other) {
    ControlChannel old(std::move(*this));
    state_ = std::move(other.state_);
  }
  return *this;
}

const std::string& ControlChannel::name() const noexcept { return state_->name; }

ResizeAnswer ControlChannel::request_resize(int delta_nodes) {
  if (delta_nodes == 0)
    throw std::invalid_argument("request_resize: delta_nodes must not be 0");
  const pmix_alloc_directive_t directive = delta_nodes > 0 ? PMIX_ALLOC_EXTEND : PMIX_ALLOC_RELEASE;
  const std::uint64_t nodes = delta_nodes > 0 ? static_cast<std::uint64_t>(delta_nodes)
                                              : static_cast<std::uint64_t>(-static_cast<long long>(delta_nodes));
  Info info(1);
  info.load(0, PMIX_ALLOC_NUM_NODES, &nodes, PMIX_UINT64);
  pmix_info_t* results = nullptr;
  size_t nresults = 0;
  const pmix_status_t rc =
      PMIx_Allocation_request(directive, info.data(), info.size(), &results, &nresults);
  ResizeAnswer answer;
  answer.status = rc;
  answer.status_name = PMIx_Error_string(rc);
  for (size_t i = 0; i < nresults; ++i) {
    if (PMIX_CHECK_KEY(&results[i], proto::kReplyText) && results[i].value.type == PMIX_STRING &&
        results[i].value.data.string != nullptr)
      answer.text = results[i].value.data.string;
  }
  if (results != nullptr) PMIX_INFO_FREE(results, nresults);
  // PMIx 4.2.2 drops the daemon's text from a refusal; the daemon logs it.
  if (answer.text.empty())
    answer.text = rc == PMIX_SUCCESS ? "granted"
                                     : "refused by the daemon (" + answer.status_name +
                                           "); the daemon's log says why";
  return answer;
}

void ControlChannel::publish_metrics(const RankMetrics& m) {
  Info info(2 + protocol::kMetricsFields + 1);
  std::size_t i = 0;
  info.load(i++, proto::kVersion, &proto::kProtocolVersion, PMIX_UINT64);
  info.load(i++, proto::kMetricsRank, &m.rank, PMIX_UINT64);
  protocol::visit_fields(m.metrics, [&info, &i](const char*, const char* key, const auto& value) {
    info.load(i++, key, &value, proto::kTypeOf<std::remove_cvref_t<decltype(value)>>);
  });
  // PMIx 4.2.2 otherwise keeps every notification in a cache of limited size: a tool that
  // publishes often fails with OUT-OF-RESOURCE or crashes once it is full.
  const bool no_cache = true;
  info.load(i++, PMIX_EVENT_DO_NOT_CACHE, &no_cache, PMIX_BOOL);
  notify_daemon(*state_, proto::kRankMetrics, info.data(), info.size(), "publish_metrics");
}

void ControlChannel::report_resize(const protocol::ResizeReport& r) {
  Info info(1 + protocol::kResizeReportFields + 1);
  std::size_t i = 0;
  info.load(i++, proto::kVersion, &proto::kProtocolVersion, PMIX_UINT64);
  // Each field as it travels (proto::PayloadValue), written by the one helper.
  protocol::visit_fields(r, [&info, &i](const char*, const char* key, const auto& value) {
    info.load(i++, key, proto::payload_value(value));
  });
  const bool no_cache = true;  // see publish_metrics()
  info.load(i++, PMIX_EVENT_DO_NOT_CACHE, &no_cache, PMIX_BOOL);
  notify_daemon(*state_, proto::kResizeReport, info.data(), info.size(), "report_resize");
}

void ControlChannel::on_expand(std::function<void(const ExpandEvent&)> callback) {
  state_->expand = std::move(callback);
}
void ControlChannel::on_shrink(std::function<void(const ShrinkEvent&)> callback) {
  state_->shrink = std::move(callback);
}
void ControlChannel::on_abort(std::function<void(const AbortEvent&)> callback) {
  state_->abort = std::move(callback);
}
void ControlChannel::on_ranks_lost(std::function<void(const RanksLostEvent&)> callback) {
  state_->ranks_lost = std::move(callback);
}

std::size_t ControlChannel::poll_events(std::chrono::milliseconds wait) {
  std::deque<Event> events;
  {
    std::unique_lock lock(state_->mutex);
    if (state_->queue.empty() && wait.count() > 0)
      state_->arrived.wait_for(lock, wait, [&] { return !state_->queue.empty(); });
    events.swap(state_->queue);
  }
  State& s = *state_;
  for (const Event& event : events) {
    std::visit(
        [&s](const auto& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, ExpandEvent>) {
            if (s.expand) s.expand(e);
          } else if constexpr (std::is_same_v<E, ShrinkEvent>) {
            if (s.shrink) s.shrink(e);
          } else if constexpr (std::is_same_v<E, AbortEvent>) {
            if (s.abort) s.abort(e);
          } else {
            if (s.ranks_lost) s.ranks_lost(e);
          }
        },
        event);
  }
  return events.size();
}

std::uint64_t ControlChannel::dropped_events() const {
  std::lock_guard lock(state_->mutex);
  return state_->dropped;
}

std::string ControlChannel::last_drop_reason() const {
  std::lock_guard lock(state_->mutex);
  return state_->last_drop_reason;
}

}  // namespace bellows::runtime
