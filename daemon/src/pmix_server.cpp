#include <bellows/daemon/pmix_fence.hpp>
#include <bellows/daemon/pmix_server.hpp>
#include <bellows/daemon/queries.hpp>

#include <bellows/protocol/job_file.hpp>
#include <bellows/protocol/pmix_events.hpp>
#include <bellows/protocol/tcp_nodelay.hpp>

#include "server_connections.hpp"
#include "worker.hpp"

#include <pmix.h>
#include <pmix_server.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <shared_mutex>
#include <system_error>
#include <type_traits>

namespace bellows::daemon {

namespace proto = bellows::protocol::pmix;

/// Builds responders (their constructor is private to keep them made here only).
struct ResponderAccess {
  static AllocationResponder make(std::shared_ptr<ReplyGate> gate, std::string what, std::string request_id,
                                  pmix_info_cbfunc_t cbfunc, void* cbdata) {
    return AllocationResponder(std::move(gate), std::move(what), std::move(request_id), cbfunc, cbdata);
  }
};

/// Open while PMIx may be called back; closed (under the exclusive lock) before finalize.
struct ReplyGate {
  std::shared_mutex mutex;
  bool open = true;
};

namespace {

/// A release callback's argument: the info array handed to PMIx with a reply.
struct ReleasedInfo {
  pmix_info_t* info;
  std::size_t size;
};

void release_info(void* cbdata) {
  auto* released = static_cast<ReleasedInfo*>(cbdata);
  if (released->info != nullptr) PMIX_INFO_FREE(released->info, released->size);
  delete released;
}

/// Calls an allocation request's cbfunc with status, a kReplyText entry and, when there is
/// one, the request's PMIX_ALLOC_REQ_ID.
void send_reply(pmix_info_cbfunc_t cbfunc, void* cbdata, pmix_status_t status,
                const std::string& text, const std::string& request_id) {
  InfoArray info(request_id.empty() ? 2 : 3);
  info.load(0, proto::kVersion, &proto::kProtocolVersion, PMIX_UINT64);
  info.load(1, proto::kReplyText, text.c_str(), PMIX_STRING);
  if (!request_id.empty()) info.load(2, PMIX_ALLOC_REQ_ID, request_id.c_str(), PMIX_STRING);
  auto* released = new ReleasedInfo{nullptr, info.size()};
  released->info = info.release();
  cbfunc(status, released->info, released->size, cbdata, release_info, released);
}

/// The port of a "nspace.rank;tcp4://host:port" URI, or -1.
int uri_port(const std::string& uri) {
  const auto colon = uri.rfind(':');
  if (colon == std::string::npos) return -1;
  try {
    return std::stoi(uri.substr(colon + 1));
  } catch (const std::exception&) {
    return -1;
  }
}

/// Number in a pmix_value_t of an integer type; false for other types or negative values.
bool unsigned_value(const pmix_value_t& v, std::uint64_t& out) {
  switch (v.type) {
    case PMIX_UINT64: out = v.data.uint64; return true;
    case PMIX_UINT32: out = v.data.uint32; return true;
    case PMIX_UINT16: out = v.data.uint16; return true;
    case PMIX_UINT8: out = v.data.uint8; return true;
    case PMIX_UINT: out = v.data.uint; return true;
    case PMIX_SIZE: out = v.data.size; return true;
    case PMIX_INT64:
      if (v.data.int64 < 0) return false;
      out = static_cast<std::uint64_t>(v.data.int64);
      return true;
    case PMIX_INT32:
      if (v.data.int32 < 0) return false;
      out = static_cast<std::uint64_t>(v.data.int32);
      return true;
    case PMIX_INT:
      if (v.data.integer < 0) return false;
      out = static_cast<std::uint64_t>(v.data.integer);
      return true;
    default: return false;
  }
}

std::string directive_name(pmix_alloc_directive_t directive) {
  switch (directive) {
    case PMIX_ALLOC_NEW: return "new";
    case PMIX_ALLOC_EXTEND: return "extend";
    case PMIX_ALLOC_RELEASE: return "release";
    case PMIX_ALLOC_REAQUIRE: return "reacquire";
    case kAllocRequestCancel: return "cancel";
    default: return "directive " + std::to_string(static_cast<int>(directive));
  }
}

/// Removes what PMIx leaves in a server tmpdir (names starting with "pmix").
void remove_pmix_files(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().starts_with("pmix"))
      std::filesystem::remove_all(entry.path(), ec);
  }
}

// 0: no server yet, 1: one runs, 2: one ran and was finalized. PMIx 4.2.2 crashes in a second
// PMIx_server_init after PMIx_server_finalize ("bit out of range 0 - FD_SETSIZE on fd_set"),
// so a process gets one server in its life.
std::atomic<int> g_server_state{0};

}  // namespace

class PmixServer::Impl {
 public:
  explicit Impl(Options options) : options_(std::move(options)) {}

  Options options_;
  std::string uri_;
  ProcId id_;
  int port_ = -1;
  bool created_tmpdir_ = false;
  std::shared_ptr<ReplyGate> gate_ = std::make_shared<ReplyGate>();
  Worker worker_;

  mutable std::mutex mutex_;  // guards the handlers and counters
  AllocateHandler allocate_handler_;
  JobControlHandler job_control_handler_;
  std::uint64_t next_request_ = 1;
  MetricsHandler metrics_handler_;
  ResizeReportHandler resize_report_handler_;
  RankAttachedHandler rank_attached_handler_;
  RankDetachedHandler rank_detached_handler_;
  ToolHandler tool_handler_;
  ClientHandler client_handler_;
  Counters counters_;
  std::uint64_t next_tool_ = 1;
  std::optional<protocol::JobView> job_view_;

  /// Runs on the worker before each job: Nagle off on connections accepted since last time.
  void nodelay() const {
    if (options_.tcp_nodelay && port_ > 0) protocol::set_nodelay_on_port(port_, protocol::PortSide::local);
  }

  void count(std::uint64_t Counters::*field) {
    std::lock_guard lock(mutex_);
    ++(counters_.*field);
  }
};

namespace {

// The upcalls find the server here: PMIx gives them no pointer of ours.
std::atomic<PmixServer::Impl*> g_impl{nullptr};

pmix_status_t allocate_upcall(const pmix_proc_t* client, pmix_alloc_directive_t directive,
                              const pmix_info_t data[], size_t ndata, pmix_info_cbfunc_t cbfunc,
                              void* cbdata) {
  PmixServer::Impl* impl = g_impl.load();
  if (impl == nullptr) return PMIX_ERR_NOT_AVAILABLE;
  AllocationRequest request;
  request.requester = from_pmix(*client);
  request.directive = directive;
  std::string error;
  bool have_count = false;
  for (size_t i = 0; i < ndata; ++i) {
    if (PMIX_CHECK_KEY(&data[i], PMIX_ALLOC_NUM_NODES)) {
      if (!unsigned_value(data[i].value, request.num_nodes)) {
        error = "pmix.alloc.nnodes must be a non-negative integer";
      }
      have_count = true;
    } else if (PMIX_CHECK_KEY(&data[i], PMIX_ALLOC_REQ_ID) && data[i].value.type == PMIX_STRING &&
               data[i].value.data.string != nullptr) {
      request.request_id = data[i].value.data.string;
    }
  }
  if (error.empty()) {
    if (directive == kAllocRequestCancel) {
      if (request.request_id.empty()) error = "a cancel names no request (pmix.alloc.reqid)";
    } else if (directive != PMIX_ALLOC_EXTEND && directive != PMIX_ALLOC_RELEASE) {
      error = directive_name(directive) + " is not supported (only extend, release and cancel)";
    } else if (!have_count) {
      error = "no node count (pmix.alloc.nnodes)";
    } else if (request.num_nodes == 0) {
      error = "node count (pmix.alloc.nnodes) is 0";
    }
  }
  if (error.empty() && request.request_id.empty()) {
    std::lock_guard lock(impl->mutex_);
    request.request_id = impl->options_.node_name + "." + std::to_string(impl->next_request_++);
  }
  const bool posted = impl->worker_.post([impl, request, error, cbfunc, cbdata] {
    impl->nodelay();
    if (!error.empty()) {
      impl->count(&PmixServer::Counters::refused_requests);
      const std::string text = "allocation request from " + to_string(request.requester) +
                               " refused: " + error;
      spdlog::warn("{}", text);
      send_reply(cbfunc, cbdata, PMIX_ERR_BAD_PARAM, text, request.request_id);
      return;
    }
    impl->count(&PmixServer::Counters::allocation_requests);
    std::string what = "allocation request " + request.request_id + " from " + to_string(request.requester) +
                       " (" + directive_name(request.directive) +
                       (request.directive == kAllocRequestCancel ? std::string()
                                                                 : " " + std::to_string(request.num_nodes) + " node(s)") +
                       ")";
    spdlog::debug("{}", what);
    PmixServer::AllocateHandler handler;
    {
      std::lock_guard lock(impl->mutex_);
      handler = impl->allocate_handler_;
    }
    AllocationResponder responder =
        ResponderAccess::make(impl->gate_, std::move(what), request.request_id, cbfunc, cbdata);
    if (!handler) {
      responder.reply(PMIX_ERR_NOT_SUPPORTED, "no controller is attached to this daemon");
      return;
    }
    try {
      handler(request, std::move(responder));
    } catch (const std::exception& e) {
      spdlog::error("allocation handler failed: {}", e.what());
    }
  });
  return posted ? PMIX_SUCCESS : PMIX_ERR_NOT_AVAILABLE;
}

pmix_status_t notify_event_upcall(pmix_status_t /*code*/, const pmix_proc_t* /*source*/,
                                  pmix_data_range_t /*range*/, pmix_info_t* /*info*/,
                                  size_t /*ninfo*/, pmix_op_cbfunc_t /*cbfunc*/, void* /*cbdata*/) {
  // Events that ranks send beyond their node (ranges NAMESPACE, SESSION, GLOBAL) end here;
  // Bellows has none (metrics use PMIX_RANGE_RM and reach rank_event_handler). Never call
  // cbfunc here: in PMIx 4.2.2 calling it inline deadlocks and calling it later touches
  // released data; PMIX_OPERATION_SUCCEEDED tells PMIx we are done.
  return PMIX_OPERATION_SUCCEEDED;
}

/// A client or tool registered a handler for environmental events (PMIx's "system" codes,
/// PMIX_EVENT_NODE_DOWN among them): PMIx 4.2.2 refuses the registration unless the host
/// takes it. The daemon raises the ones it knows itself (standard_events.hpp) and needs to
/// hear of nothing: taken at once, cbfunc never called (PMIX_OPERATION_SUCCEEDED).
pmix_status_t register_events_upcall(pmix_status_t* /*codes*/, size_t /*ncodes*/,
                                     const pmix_info_t* /*info*/, size_t /*ninfo*/,
                                     pmix_op_cbfunc_t /*cbfunc*/, void* /*cbdata*/) {
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t deregister_events_upcall(pmix_status_t* /*codes*/, size_t /*ncodes*/,
                                       pmix_op_cbfunc_t /*cbfunc*/, void* /*cbdata*/) {
  return PMIX_OPERATION_SUCCEEDED;
}

/// A rank's resize report (kResizeReport, PMIX_RANGE_RM): decoded here, handed to the worker.
void resize_report_event(PmixServer::Impl* impl, const pmix_proc_t* source, pmix_info_t info[],
                         size_t ninfo) {
  ReceivedResizeReport received;
  received.source = from_pmix(*source);
  std::string error;
  try {
    const Payload payload = decode_payload(info, ninfo);
    const auto version = get<std::uint64_t>(payload, proto::kVersion);
    if (version != proto::kProtocolVersion) {
      error = "protocol version " + std::to_string(version) + ", this daemon speaks " +
              std::to_string(proto::kProtocolVersion);
    } else {
      read_fields(payload, received.report);
      error = protocol::check(received.report);
    }
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  impl->worker_.post([impl, received, error] {
    impl->nodelay();
    if (!error.empty()) {
      impl->count(&PmixServer::Counters::dropped_resize_reports);
      spdlog::warn("resize report from {} dropped: {}", to_string(received.source), error);
      return;
    }
    impl->count(&PmixServer::Counters::resize_reports);
    PmixServer::ResizeReportHandler handler;
    {
      std::lock_guard lock(impl->mutex_);
      handler = impl->resize_report_handler_;
    }
    if (handler) {
      try {
        handler(received);
      } catch (const std::exception& e) {
        spdlog::error("resize report handler failed: {}", e.what());
      }
    }
  });
}

/// A rank's attach notice (kRankAttached): its pid, handed to the worker.
void rank_attached_event(PmixServer::Impl* impl, const pmix_proc_t* source, pmix_info_t info[],
                         size_t ninfo) {
  const ProcId proc = from_pmix(*source);
  std::uint64_t pid = 0;
  std::string error;
  try {
    const Payload payload = decode_payload(info, ninfo);
    const auto version = get<std::uint64_t>(payload, proto::kVersion);
    if (version != proto::kProtocolVersion)
      error = "protocol version " + std::to_string(version) + ", this daemon speaks " +
              std::to_string(proto::kProtocolVersion);
    else
      pid = get<std::uint64_t>(payload, proto::kAttachedPid);
    if (error.empty() && (pid == 0 || pid > 4194304)) error = "pid " + std::to_string(pid) + " is no process id";
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  impl->worker_.post([impl, proc, pid, error] {
    if (!error.empty()) {
      spdlog::warn("attach notice from {} dropped: {}", to_string(proc), error);
      return;
    }
    PmixServer::RankAttachedHandler handler;
    {
      std::lock_guard lock(impl->mutex_);
      handler = impl->rank_attached_handler_;
    }
    if (handler) handler(proc, static_cast<pid_t>(pid));
  });
}

/// A rank's detach notice (kRankDetached), handed to the worker.
void rank_detached_event(PmixServer::Impl* impl, const pmix_proc_t* source, pmix_info_t info[],
                         size_t ninfo) {
  const ProcId proc = from_pmix(*source);
  std::string error;
  try {
    const auto version = get<std::uint64_t>(decode_payload(info, ninfo), proto::kVersion);
    if (version != proto::kProtocolVersion)
      error = "protocol version " + std::to_string(version) + ", this daemon speaks " +
              std::to_string(proto::kProtocolVersion);
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  impl->worker_.post([impl, proc, error] {
    if (!error.empty()) {
      spdlog::warn("detach notice from {} dropped: {}", to_string(proc), error);
      return;
    }
    PmixServer::RankDetachedHandler handler;
    {
      std::lock_guard lock(impl->mutex_);
      handler = impl->rank_detached_handler_;
    }
    if (handler) handler(proc);
  });
}

/// What ranks send the daemon: PMIx_Notify_event(kRankMetrics or kResizeReport,
/// PMIX_RANGE_RM) from a tool or client reaches the server's own event handlers (PMIx 4.2.2
/// does not pass RM-range events to the notify_event upcall). Runs on PMIx's progress
/// thread: decode, hand over, return.
void rank_event_handler(size_t /*id*/, pmix_status_t code, const pmix_proc_t* source,
                           pmix_info_t info[], size_t ninfo, pmix_info_t* /*results*/,
                           size_t /*nresults*/, pmix_event_notification_cbfunc_fn_t cbfunc,
                           void* cbdata) {
  PmixServer::Impl* impl = g_impl.load();
  if (impl != nullptr && code == proto::kResizeReport) {
    resize_report_event(impl, source, info, ninfo);
  } else if (impl != nullptr && code == proto::kRankAttached) {
    rank_attached_event(impl, source, info, ninfo);
  } else if (impl != nullptr && code == proto::kRankDetached) {
    rank_detached_event(impl, source, info, ninfo);
  } else if (impl != nullptr) {
    ReceivedMetrics metrics;
    metrics.source = from_pmix(*source);
    const Payload payload = decode_payload(info, ninfo);
    std::string error;
    try {
      const auto version = get<std::uint64_t>(payload, proto::kVersion);
      if (version != proto::kProtocolVersion) {
        error = "protocol version " + std::to_string(version) + ", this daemon speaks " +
                std::to_string(proto::kProtocolVersion);
      } else {
        metrics.rank = get<std::uint64_t>(payload, proto::kMetricsRank);
        protocol::visit_fields(metrics.metrics,
                               [&payload](const char*, const char* key, auto& value) {
                                 value = get<std::remove_cvref_t<decltype(value)>>(payload, key);
                               });
      }
    } catch (const std::invalid_argument& e) {
      error = e.what();
    }
    impl->worker_.post([impl, metrics, error] {
      impl->nodelay();
      if (!error.empty()) {
        impl->count(&PmixServer::Counters::dropped_metrics);
        spdlog::warn("metrics from {} dropped: {}", to_string(metrics.source), error);
        return;
      }
      impl->count(&PmixServer::Counters::metrics);
      PmixServer::MetricsHandler handler;
      {
        std::lock_guard lock(impl->mutex_);
        handler = impl->metrics_handler_;
      }
      if (handler) {
        try {
          handler(metrics);
        } catch (const std::exception& e) {
          spdlog::error("metrics handler failed: {}", e.what());
        }
      }
    });
  }
  if (cbfunc != nullptr) cbfunc(PMIX_EVENT_ACTION_COMPLETE, nullptr, 0, nullptr, nullptr, cbdata);
}

/// Refuses a tool's connection with `status`. PMIx 4.2.2 reads the name even then (its
/// cnct_cbfunc copies proc->nspace before it looks at the status): a null one crashes it.
void refuse_tool(pmix_tool_connection_cbfunc_t cbfunc, void* cbdata, pmix_status_t status) {
  pmix_proc_t nobody;
  PMIX_LOAD_PROCID(&nobody, "", PMIX_RANK_UNDEF);
  cbfunc(status, &nobody, cbdata);
}

void tool_connected_upcall(pmix_info_t* info, size_t ninfo, pmix_tool_connection_cbfunc_t cbfunc,
                           void* cbdata) {
  PmixServer::Impl* impl = g_impl.load();
  if (impl == nullptr) return refuse_tool(cbfunc, cbdata, PMIX_ERR_NOT_AVAILABLE);
  // A tool that chose its name (PMIX_TOOL_NSPACE and PMIX_TOOL_RANK) brings it along.
  ProcId proc;
  bool named = false;
  for (size_t i = 0; i < ninfo; ++i) {
    if (PMIX_CHECK_KEY(&info[i], PMIX_NSPACE) && info[i].value.type == PMIX_STRING &&
        info[i].value.data.string != nullptr) {
      proc.nspace = info[i].value.data.string;
      named = true;
    } else if (PMIX_CHECK_KEY(&info[i], PMIX_RANK) && info[i].value.type == PMIX_PROC_RANK) {
      proc.rank = info[i].value.data.rank;
    }
  }
  {
    std::lock_guard lock(impl->mutex_);
    if (!named) proc.nspace = impl->options_.nspace + ".tool." + std::to_string(impl->next_tool_++);
  }
  const bool posted = impl->worker_.post([impl, proc, cbfunc, cbdata] {
    impl->nodelay();
    pmix_proc_t assigned = to_pmix(proc);
    cbfunc(PMIX_SUCCESS, &assigned, cbdata);
    impl->count(&PmixServer::Counters::tools);
    PmixServer::ToolHandler handler;
    {
      std::lock_guard lock(impl->mutex_);
      handler = impl->tool_handler_;
    }
    if (handler) handler(proc);
  });
  if (!posted) refuse_tool(cbfunc, cbdata, PMIX_ERR_NOT_AVAILABLE);
}

/// PMIx_Query_info from a tool or client: copied here, answered on the worker from the job
/// view (bellows/daemon/queries.hpp). PMIx 4.2.2 names the server itself as the requester
/// (its own PMIx_Query_info_nb hands the query on), so who asked is not known here.
pmix_status_t query_upcall(pmix_proc_t* /*requester*/, pmix_query_t* queries, size_t nqueries,
                           pmix_info_cbfunc_t cbfunc, void* cbdata) {
  PmixServer::Impl* impl = g_impl.load();
  if (impl == nullptr) return PMIX_ERR_NOT_AVAILABLE;
  std::vector<Query> asked = read_queries(queries, nqueries);
  const bool posted = impl->worker_.post([impl, asked = std::move(asked), cbfunc, cbdata] {
    impl->nodelay();
    std::optional<protocol::JobView> view;
    {
      std::lock_guard lock(impl->mutex_);
      view = impl->job_view_;
      ++impl->counters_.queries;
    }
    const QueryResults results = answer_queries(asked, view, impl->options_.node_name);
    if (!results.unsupported.empty()) {
      std::string keys;
      for (const auto& key : results.unsupported) keys += (keys.empty() ? "" : ", ") + key;
      spdlog::debug("query: not supported: {}", keys);
    } else {
      spdlog::debug("query: {} answer(s), {}", results.answers.size(), status_string(results.status));
    }
    try {
      InfoArray info = to_info(results.answers);
      auto* released = new ReleasedInfo{nullptr, info.size()};
      released->info = info.release();
      cbfunc(results.status, released->info, released->size, cbdata, release_info, released);
    } catch (const std::exception& e) {
      spdlog::error("cannot answer a query: {}", e.what());
      cbfunc(PMIX_ERROR, nullptr, 0, cbdata, nullptr, nullptr);
    }
  });
  return posted ? PMIX_SUCCESS : PMIX_ERR_NOT_AVAILABLE;
}

/// PMIx_Job_control from a tool or client: read here (read_job_control), carried out by the
/// handler (the controller link) on the worker.
pmix_status_t job_control_upcall(const pmix_proc_t* requester, const pmix_proc_t targets[], size_t ntargets,
                                 const pmix_info_t directives[], size_t ndirectives, pmix_info_cbfunc_t cbfunc,
                                 void* cbdata) {
  PmixServer::Impl* impl = g_impl.load();
  if (impl == nullptr) return PMIX_ERR_NOT_AVAILABLE;
  std::string job;
  {
    std::lock_guard lock(impl->mutex_);
    if (impl->job_view_) job = impl->job_view_->job;
  }
  const ProcId who = requester != nullptr ? from_pmix(*requester) : ProcId{"unknown", 0};
  const JobControlReading reading = read_job_control(who, targets, ntargets, directives, ndirectives, job);
  const bool posted = impl->worker_.post([impl, reading, job, cbfunc, cbdata] {
    impl->nodelay();
    const std::string what = "job control from " + to_string(reading.order.requester) +
                             (reading.status == PMIX_SUCCESS ? " (" + describe(reading.order, job) + ")" : "");
    if (reading.status != PMIX_SUCCESS) {
      spdlog::warn("{} refused ({}): {}", what, status_string(reading.status), reading.error);
      send_reply(cbfunc, cbdata, reading.status, reading.error, "");
      return;
    }
    PmixServer::JobControlHandler handler;
    {
      std::lock_guard lock(impl->mutex_);
      handler = impl->job_control_handler_;
    }
    AllocationResponder responder = ResponderAccess::make(impl->gate_, what, "", cbfunc, cbdata);
    if (!handler) {
      responder.reply(PMIX_ERR_NOT_SUPPORTED, "no controller is attached to this daemon");
      return;
    }
    try {
      handler(reading.order, std::move(responder));
    } catch (const std::exception& e) {
      spdlog::error("job control handler failed: {}", e.what());
    }
  });
  return posted ? PMIX_SUCCESS : PMIX_ERR_NOT_AVAILABLE;
}

pmix_status_t client_connected_upcall(const pmix_proc_t* proc, void* /*server_object*/,
                                      pmix_op_cbfunc_t /*cbfunc*/, void* /*cbdata*/) {
  PmixServer::Impl* impl = g_impl.load();
  if (impl == nullptr) return PMIX_OPERATION_SUCCEEDED;
  std::optional<ProcId> client;
  if (proc != nullptr) client = from_pmix(*proc);
  impl->worker_.post([impl, client] {
    impl->nodelay();
    if (!client) return;
    PmixServer::ClientHandler handler;
    {
      std::lock_guard lock(impl->mutex_);
      handler = impl->client_handler_;
    }
    if (!handler) return;
    try {
      handler(*client);
    } catch (const std::exception& e) {
      spdlog::error("client connection handler failed: {}", e.what());
    }
  });
  return PMIX_OPERATION_SUCCEEDED;
}

/// The upcalls bellowsd gives PMIx; the entries left empty PMIx answers without the daemon.
pmix_server_module_t server_module() {
  pmix_server_module_t module{};
  module.client_connected = client_connected_upcall;
  module.notify_event = notify_event_upcall;
  module.register_events = register_events_upcall;
  module.deregister_events = deregister_events_upcall;
  module.tool_connected = tool_connected_upcall;
  module.allocate = allocate_upcall;
  module.query = query_upcall;
  module.job_control = job_control_upcall;
  module.fence_nb = fence_nb_upcall;          // pmix_fence.cpp
  module.direct_modex = direct_modex_upcall;  // pmix_fence.cpp
  return module;
}

}  // namespace

std::vector<ServerUpcall> server_upcalls() {
  const pmix_server_module_t m = server_module();
  return {{"client_connected", m.client_connected != nullptr},
          {"client_finalized", m.client_finalized != nullptr},
          {"abort", m.abort != nullptr},
          {"fence_nb", m.fence_nb != nullptr},
          {"direct_modex", m.direct_modex != nullptr},
          {"publish", m.publish != nullptr},
          {"lookup", m.lookup != nullptr},
          {"unpublish", m.unpublish != nullptr},
          {"spawn", m.spawn != nullptr},
          {"connect", m.connect != nullptr},
          {"disconnect", m.disconnect != nullptr},
          {"register_events", m.register_events != nullptr},
          {"deregister_events", m.deregister_events != nullptr},
          {"listener", m.listener != nullptr},
          {"notify_event", m.notify_event != nullptr},
          {"query", m.query != nullptr},
          {"tool_connected", m.tool_connected != nullptr},
          {"log", m.log != nullptr},
          {"allocate", m.allocate != nullptr},
          {"job_control", m.job_control != nullptr},
          {"monitor", m.monitor != nullptr},
          {"get_credential", m.get_credential != nullptr},
          {"validate_credential", m.validate_credential != nullptr},
          {"iof_pull", m.iof_pull != nullptr},
          {"push_stdin", m.push_stdin != nullptr},
          {"group", m.group != nullptr},
          {"fabric", m.fabric != nullptr},
          {"client_connected2", m.client_connected2 != nullptr}};
}

// ------------------------------------------------------------------ AllocationResponder

AllocationResponder::~AllocationResponder() { reply(PMIX_ERR_NOT_AVAILABLE, "the daemon gave no answer"); }

AllocationResponder::AllocationResponder(AllocationResponder&& other) noexcept
    : gate_(std::move(other.gate_)),
      what_(std::move(other.what_)),
      request_id_(std::move(other.request_id_)),
      cbfunc_(std::exchange(other.cbfunc_, nullptr)),
      cbdata_(std::exchange(other.cbdata_, nullptr)) {}

AllocationResponder& AllocationResponder::operator=(AllocationResponder&& other) noexcept {
  if (this != &other) {
    reply(PMIX_ERR_NOT_AVAILABLE, "the daemon gave no answer");
    gate_ = std::move(other.gate_);
    what_ = std::move(other.what_);
    request_id_ = std::move(other.request_id_);
    cbfunc_ = std::exchange(other.cbfunc_, nullptr);
    cbdata_ = std::exchange(other.cbdata_, nullptr);
  }
  return *this;
}

void AllocationResponder::reply(pmix_status_t status, const std::string& text) {
  if (cbfunc_ == nullptr || !gate_) return;
  auto cbfunc = std::exchange(cbfunc_, nullptr);
  std::shared_lock lock(gate_->mutex);
  if (!gate_->open) return;
  if (status == PMIX_SUCCESS)
    spdlog::debug("{} granted: {}", what_, text);
  else
    spdlog::info("{} refused ({}): {}", what_, status_string(status), text);
  try {
    send_reply(cbfunc, cbdata_, status, text, request_id_);
  } catch (const std::exception& e) {
    spdlog::error("cannot answer an allocation request: {}", e.what());
  }
}

// ------------------------------------------------------------------ PmixServer

PmixServer::PmixServer(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {
  int expected = 0;
  if (!g_server_state.compare_exchange_strong(expected, 1)) {
    if (expected == 1)
      throw std::logic_error("a PmixServer already exists in this process (PMIx allows one)");
    throw std::logic_error("a PmixServer already ran in this process (PMIx 4.2.2 cannot start "
                           "a server again after PMIx_server_finalize)");
  }
  Impl& s = *impl_;
  bool initialized = false;  // PMIx_server_init succeeded (a later failure finalizes it)
  try {
    if (s.options_.tmpdir.empty()) throw std::invalid_argument("PmixServer: tmpdir is empty");
    std::error_code ec;
    s.created_tmpdir_ = std::filesystem::create_directories(s.options_.tmpdir, ec);
    if (ec)
      throw std::runtime_error("cannot create tmpdir " + s.options_.tmpdir.string() + ": " +
                               ec.message());
    remove_pmix_files(s.options_.tmpdir);  // what a killed server left behind
    if (s.options_.node_name.empty()) {
      std::array<char, 256> host{};
      ::gethostname(host.data(), host.size() - 1);
      s.options_.node_name = host.data();
    }

    static pmix_server_module_t module = server_module();

    // The hash store, not the shared-memory ds21 (PMIx 4.2.2's default): with ds21 a client's
    // PMIx_Commit never returns once its namespace was registered again, as the daemon does at
    // each resize (docs/daemon.md, "What PMIx 4.2.2 does here"). PMIx_server_setup_fork then tells
    // the clients (PMIX_GDS_MODULE=hash). A value the daemon was given stays.
    ::setenv("PMIX_MCA_gds", "hash", 0);

    const std::string tmpdir = s.options_.tmpdir.string();
    const pmix_rank_t rank = 0;
    const bool yes = true;
    InfoArray info(7);
    info.load(0, PMIX_SERVER_TOOL_SUPPORT, &yes, PMIX_BOOL);
    info.load(1, PMIX_SERVER_TMPDIR, tmpdir.c_str(), PMIX_STRING);
    info.load(2, PMIX_SYSTEM_TMPDIR, tmpdir.c_str(), PMIX_STRING);
    info.load(3, PMIX_SERVER_NSPACE, s.options_.nspace.c_str(), PMIX_STRING);
    info.load(4, PMIX_SERVER_RANK, &rank, PMIX_PROC_RANK);
    info.load(5, PMIX_HOSTNAME, s.options_.node_name.c_str(), PMIX_STRING);
    info.load(6, PMIX_TCP_DISABLE_IPV6, &yes, PMIX_BOOL);
    g_impl.store(&s);
    const pmix_status_t rc = PMIx_server_init(&module, info.data(), info.size());
    if (rc != PMIX_SUCCESS) {
      g_impl.store(nullptr);
      throw PmixError("PMIx_server_init", rc);
    }
    initialized = true;
    s.id_ = ProcId{s.options_.nspace, 0};

    pmix_status_t rank_codes[] = {proto::kRankMetrics, proto::kResizeReport, proto::kRankAttached,
                                  proto::kRankDetached};
    const pmix_status_t ref = PMIx_Register_event_handler(rank_codes, std::size(rank_codes), nullptr, 0,
                                                          rank_event_handler, nullptr, nullptr);
    if (ref < 0) {
      PMIx_server_finalize();
      g_impl.store(nullptr);
      throw PmixError("PMIx_Register_event_handler(rank metrics)", ref);
    }

    pmix_proc_t self = to_pmix(s.id_);
    pmix_value_t* value = nullptr;
    const pmix_status_t got = PMIx_Get(&self, PMIX_SERVER_URI, nullptr, 0, &value);
    if (got != PMIX_SUCCESS || value == nullptr || value->type != PMIX_STRING) {
      if (value != nullptr) PMIX_VALUE_RELEASE(value);
      PMIx_server_finalize();
      g_impl.store(nullptr);
      throw PmixError("PMIx_Get(PMIX_SERVER_URI)", got == PMIX_SUCCESS ? PMIX_ERR_TYPE_MISMATCH : got);
    }
    s.uri_ = value->data.string;
    PMIX_VALUE_RELEASE(value);
    s.port_ = uri_port(s.uri_);

    if (!s.options_.uri_file.empty()) {
      try {
        protocol::write_line_atomically(s.options_.uri_file, s.uri_);
      } catch (const std::runtime_error&) {
        PMIx_server_finalize();
        g_impl.store(nullptr);
        throw;
      }
    }
    spdlog::debug("pmix server {} listening at {}", to_string(s.id_), s.uri_);
  } catch (...) {
    // A failed PMIx_server_init leaves nothing to finalize; a later one may try again.
    g_server_state.store(initialized ? 2 : 0);
    throw;
  }
}

PmixServer::~PmixServer() {
  Impl& s = *impl_;
  // PMIx_server_finalize holds PMIx's global lock while it stops the progress thread; a query
  // that thread reads meanwhile waits for that lock (PMIx_Query_info_nb) and the finalize for
  // the thread, for ever, with the query unanswered. So the connections go first, while the
  // worker still answers (docs/daemon.md, "Stopping").
  if (s.port_ > 0) {
    const ClosedConnections closed =
        close_server_connections(s.port_, s.options_.peers_leave_limit, std::chrono::milliseconds(500));
    if (closed.open_at_stop > 0 || !closed.stopped_listening)
      spdlog::info("stopping the PMIx server: {}", closed.describe());
  }
  s.worker_.stop();  // runs what is queued (answers included) while PMIx still runs
  {
    std::unique_lock lock(s.gate_->mutex);
    s.gate_->open = false;
  }
  g_impl.store(nullptr);
  const pmix_status_t rc = PMIx_server_finalize();
  if (rc != PMIX_SUCCESS) spdlog::warn("PMIx_server_finalize failed: {}", status_string(rc));
  std::error_code ec;
  if (!s.options_.uri_file.empty()) std::filesystem::remove(s.options_.uri_file, ec);
  remove_pmix_files(s.options_.tmpdir);
  if (s.created_tmpdir_) std::filesystem::remove(s.options_.tmpdir, ec);  // only when empty
  g_server_state.store(2);
}

const std::string& PmixServer::uri() const noexcept { return impl_->uri_; }
const ProcId& PmixServer::id() const noexcept { return impl_->id_; }
const PmixServer::Options& PmixServer::options() const noexcept { return impl_->options_; }

void PmixServer::on_allocate(AllocateHandler handler) {
  std::lock_guard lock(impl_->mutex_);
  impl_->allocate_handler_ = std::move(handler);
}

void PmixServer::on_job_control(JobControlHandler handler) {
  std::lock_guard lock(impl_->mutex_);
  impl_->job_control_handler_ = std::move(handler);
}

void PmixServer::on_resize_report(ResizeReportHandler handler) {
  std::lock_guard lock(impl_->mutex_);
  impl_->resize_report_handler_ = std::move(handler);
}

void PmixServer::on_rank_detached(RankDetachedHandler handler) {
  std::lock_guard lock(impl_->mutex_);
  impl_->rank_detached_handler_ = std::move(handler);
}

void PmixServer::on_rank_attached(RankAttachedHandler handler) {
  std::lock_guard lock(impl_->mutex_);
  impl_->rank_attached_handler_ = std::move(handler);
}

void PmixServer::on_metrics(MetricsHandler handler) {
  std::lock_guard lock(impl_->mutex_);
  impl_->metrics_handler_ = std::move(handler);
}

void PmixServer::on_client_connected(ClientHandler handler) {
  std::lock_guard lock(impl_->mutex_);
  impl_->client_handler_ = std::move(handler);
}

void PmixServer::on_tool_connected(ToolHandler handler) {
  std::lock_guard lock(impl_->mutex_);
  impl_->tool_handler_ = std::move(handler);
}

void PmixServer::set_job_view(protocol::JobView view) {
  std::lock_guard lock(impl_->mutex_);
  impl_->job_view_ = std::move(view);
}

std::optional<protocol::JobView> PmixServer::job_view() const {
  std::lock_guard lock(impl_->mutex_);
  return impl_->job_view_;
}

PmixServer::Counters PmixServer::counters() const {
  std::lock_guard lock(impl_->mutex_);
  return impl_->counters_;
}

Status PmixServer::notify(pmix_status_t code, const Payload& payload, pmix_data_range_t range,
                          const std::vector<ProcId>& targets) {
  const std::string_view name = proto::event_name(code);
  const std::string what = name.empty() ? "event " + std::to_string(code) : std::string(name);
  if (range == PMIX_RANGE_CUSTOM && targets.empty())
    return {PMIX_ERR_BAD_PARAM, "notify " + what + ": custom range without targets"};
  if (range != PMIX_RANGE_CUSTOM && !targets.empty())
    return {PMIX_ERR_BAD_PARAM, "notify " + what + ": targets given for a range other than custom"};
  try {
    Payload full = payload;
    full[proto::kVersion] = proto::kProtocolVersion;
    InfoArray info(full.size() + 1 + (targets.empty() ? 0 : 1));
    std::size_t i = 0;
    for (const auto& [key, value] : full) info.load(i++, key, value);
    // Not cached, here nor in the rank: PMIx 4.2.2 would keep it in the rank's cache of
    // notifications, from the rank's progress thread, while the rank's own thread caches
    // its metrics there too (unconditionally, in PMIx_Notify_event); the two do not lock it,
    // and a cache corrupted that way fails the rank's notifications with OUT-OF-RESOURCE
    // (docs/daemon.md). An event is for the ranks attached now.
    const bool no_cache = true;
    info.load(i++, PMIX_EVENT_DO_NOT_CACHE, &no_cache, PMIX_BOOL);
    if (!targets.empty()) {
      std::vector<pmix_proc_t> procs;
      procs.reserve(targets.size());
      for (const auto& t : targets) procs.push_back(to_pmix(t));
      pmix_data_array_t array{PMIX_PROC, procs.size(), procs.data()};
      info.load(i, PMIX_EVENT_CUSTOM_RANGE, &array, PMIX_DATA_ARRAY);
    }
    impl_->nodelay();
    pmix_proc_t self = to_pmix(impl_->id_);
    const pmix_status_t rc =
        PMIx_Notify_event(code, &self, range, info.data(), info.size(), nullptr, nullptr);
    if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED)
      return {rc, "notify " + what + ": PMIx_Notify_event failed: " + status_string(rc)};
    return {PMIX_SUCCESS, "notified " + what};
  } catch (const std::exception& e) {
    return {PMIX_ERROR, "notify " + what + ": " + e.what()};
  }
}

namespace {

/// A standard event on its way: kept alive by PMIx's completion callback, which may come after
/// notify_standard() stopped waiting.
struct PendingEvent {
  InfoArray info;
  std::mutex mutex;
  std::condition_variable done_changed;
  bool done = false;
  pmix_status_t status = PMIX_SUCCESS;
};

void standard_event_sent(pmix_status_t status, void* cbdata) {
  auto* held = static_cast<std::shared_ptr<PendingEvent>*>(cbdata);
  {
    std::lock_guard lock((*held)->mutex);
    (*held)->done = true;
    (*held)->status = status;
  }
  (*held)->done_changed.notify_all();
  delete held;
}

}  // namespace

Status PmixServer::notify_standard(const StandardEvent& event, std::chrono::milliseconds wait) {
  const std::string_view constant = standard_event_constant(event.code);
  const std::string what = constant.empty() ? "event " + std::to_string(event.code) : std::string(constant);
  try {
    auto pending = std::make_shared<PendingEvent>();
    const std::size_t count = 1 + (event.affected.empty() ? 0 : 1) + (event.hostname.empty() ? 0 : 1) +
                              (event.exit_code ? 1 : 0) + (event.text.empty() ? 0 : 1);
    pending->info = InfoArray(count);
    std::size_t i = 0;
    const bool no_cache = true;
    pending->info.load(i++, PMIX_EVENT_DO_NOT_CACHE, &no_cache, PMIX_BOOL);
    std::vector<pmix_proc_t> procs;
    for (const ProcId& proc : event.affected) procs.push_back(to_pmix(proc));
    if (procs.size() == 1) {
      pending->info.load(i++, PMIX_EVENT_AFFECTED_PROC, procs.data(), PMIX_PROC);
    } else if (!procs.empty()) {
      pmix_data_array_t array{PMIX_PROC, procs.size(), procs.data()};
      pending->info.load(i++, PMIX_EVENT_AFFECTED_PROCS, &array, PMIX_DATA_ARRAY);
    }
    if (!event.hostname.empty()) pending->info.load(i++, PMIX_HOSTNAME, event.hostname.c_str(), PMIX_STRING);
    if (event.exit_code) {
      const int exit_code = *event.exit_code;
      pending->info.load(i++, PMIX_EXIT_CODE, &exit_code, PMIX_INT);
    }
    if (!event.text.empty()) pending->info.load(i++, PMIX_EVENT_TEXT_MESSAGE, event.text.c_str(), PMIX_STRING);
    impl_->nodelay();
    pmix_proc_t self = to_pmix(impl_->id_);
    auto* held = new std::shared_ptr<PendingEvent>(pending);
    const pmix_status_t rc = PMIx_Notify_event(event.code, &self, PMIX_RANGE_LOCAL, pending->info.data(),
                                               pending->info.size(), standard_event_sent, held);
    if (rc != PMIX_SUCCESS) {
      delete held;  // no callback comes
      if (rc == PMIX_OPERATION_SUCCEEDED) return {PMIX_SUCCESS, "notified " + what};
      return {rc, "notify " + what + ": PMIx_Notify_event failed: " + status_string(rc)};
    }
    std::unique_lock lock(pending->mutex);
    if (!pending->done_changed.wait_for(lock, wait, [&pending] { return pending->done; }))
      return {PMIX_ERR_TIMEOUT, "notify " + what + ": PMIx did not hand it on within " +
                                    std::to_string(wait.count()) + " ms"};
    if (pending->status != PMIX_SUCCESS && pending->status != PMIX_OPERATION_SUCCEEDED)
      return {pending->status, "notify " + what + ": " + status_string(pending->status)};
    return {PMIX_SUCCESS, "notified " + what};
  } catch (const std::exception& e) {
    return {PMIX_ERROR, "notify " + what + ": " + e.what()};
  }
}

}  // namespace bellows::daemon
