#include <bellows/daemon/payload.hpp>
#include <bellows/daemon/pmix_fence.hpp>

#include "worker.hpp"

#include <pmix.h>
#include <spdlog/spdlog.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <stdexcept>
#include <vector>

namespace bellows::daemon {
namespace {

using protocol::CollectiveStatus;

pmix_status_t to_pmix_status(CollectiveStatus status) {
  switch (status) {
    case CollectiveStatus::ok: return PMIX_SUCCESS;
    case CollectiveStatus::participant_lost: return PMIX_ERR_PROC_TERM_WO_SYNC;
    case CollectiveStatus::unreachable: return PMIX_ERR_UNREACH;
    case CollectiveStatus::not_found: return PMIX_ERR_NOT_FOUND;
    case CollectiveStatus::refused: return PMIX_ERR_BAD_PARAM;
  }
  return PMIX_ERROR;
}

std::string rank_text(std::uint32_t rank) {
  return rank == protocol::kWildcardRank ? std::string("*") : std::to_string(rank);
}

/// A blob handed to PMIx with a cbfunc, freed when PMIx releases it.
void release_blob(void* cbdata) { delete static_cast<std::string*>(cbdata); }

/// Calls a modex cbfunc with status and, on success, a copy of data that PMIx releases.
void answer_pmix(pmix_modex_cbfunc_t cbfunc, void* cbdata, pmix_status_t status, std::string data) {
  if (status != PMIX_SUCCESS || data.empty()) {
    cbfunc(status, nullptr, 0, cbdata, nullptr, nullptr);
    return;
  }
  auto* blob = new std::string(std::move(data));
  cbfunc(status, blob->data(), blob->size(), cbdata, release_blob, blob);
}

/// A namespace as this daemon's PMIx server knows it: its size and the ranks it hosts.
struct NamespaceLayout {
  std::uint32_t size = 0;
  std::set<std::uint32_t> local;
  /// The ranks a wildcard means, when they are not 0..size-1 (CollectiveRelay::job_ranks).
  std::optional<std::set<std::uint32_t>> ranks;
};

/// The ranks of a job whose numbers need not be 0..n-1 (CollectiveRelay::job_ranks).
struct KnownJobRanks {
  std::set<std::uint32_t> ranks;
  std::uint32_t numbers_given = 0;
};

/// PMIX_JOB_SIZE and PMIX_LOCAL_PEERS of `nspace`, or the reason they cannot be had.
std::optional<NamespaceLayout> namespace_layout(const std::string& nspace, std::string& why) {
  pmix_proc_t wildcard;
  PMIX_LOAD_PROCID(&wildcard, nspace.c_str(), PMIX_RANK_WILDCARD);
  pmix_info_t optional;
  const bool yes = true;
  PMIX_INFO_LOAD(&optional, PMIX_OPTIONAL, &yes, PMIX_BOOL);
  NamespaceLayout layout;
  pmix_value_t* value = nullptr;
  pmix_status_t rc = PMIx_Get(&wildcard, PMIX_JOB_SIZE, &optional, 1, &value);
  if (rc != PMIX_SUCCESS || value == nullptr || value->type != PMIX_UINT32) {
    if (value != nullptr) PMIX_VALUE_RELEASE(value);
    PMIX_INFO_DESTRUCT(&optional);
    why = "namespace " + nspace + " is not known here (PMIX_JOB_SIZE: " +
          status_string(rc == PMIX_SUCCESS ? PMIX_ERR_TYPE_MISMATCH : rc) + ")";
    return std::nullopt;
  }
  layout.size = value->data.uint32;
  PMIX_VALUE_RELEASE(value);
  value = nullptr;
  rc = PMIx_Get(&wildcard, PMIX_LOCAL_PEERS, &optional, 1, &value);
  PMIX_INFO_DESTRUCT(&optional);
  if (rc == PMIX_SUCCESS && value != nullptr && value->type == PMIX_STRING && value->data.string != nullptr) {
    const std::string peers = value->data.string;
    std::size_t start = 0;
    while (start < peers.size()) {
      const std::size_t comma = std::min(peers.find(',', start), peers.size());
      try {
        layout.local.insert(static_cast<std::uint32_t>(std::stoul(peers.substr(start, comma - start))));
      } catch (const std::exception&) {
        why = "namespace " + nspace + ": PMIX_LOCAL_PEERS '" + peers + "' is not a list of ranks";
        PMIX_VALUE_RELEASE(value);
        return std::nullopt;
      }
      start = comma + 1;
    }
  }
  // No PMIX_LOCAL_PEERS: the namespace has no rank here.
  if (value != nullptr) PMIX_VALUE_RELEASE(value);
  return layout;
}

struct PendingAnswer {
  pmix_modex_cbfunc_t cbfunc = nullptr;
  void* cbdata = nullptr;
  std::string what;  ///< "fence over job:*" or "data of job:2", for logs
};

/// One participant as a client named it.
struct Participant {
  std::string nspace;
  std::uint32_t rank = 0;
};

}  // namespace

struct CollectiveRelay::State {
  Senders senders;
  mutable std::mutex mutex;  // guards the maps and counters
  std::map<std::uint64_t, PendingAnswer> fences;
  std::map<std::uint64_t, PendingAnswer> modex;
  std::uint64_t next_id = 1;
  std::map<std::string, KnownJobRanks> job_ranks;
  Counters counters;
  /// Set while the controller is gone (controller_gone()): why what needs it fails.
  std::optional<std::string> controller_gone_why;
  Worker worker;  // last: stopped (joined) first when the state goes

  /// namespace_layout(), with the job's ranks and numbers given where job_ranks() told them.
  std::optional<NamespaceLayout> layout_of(const std::string& nspace, std::string& why) {
    auto layout = namespace_layout(nspace, why);
    if (!layout) return layout;
    std::lock_guard lock(mutex);
    if (const auto known = job_ranks.find(nspace); known != job_ranks.end()) {
      layout->size = known->second.numbers_given;
      layout->ranks = known->second.ranks;
    }
    return layout;
  }

  /// On the worker: a fence_nb upcall.
  void contribute(const std::vector<Participant>& participants, bool collect, std::string data,
                  pmix_modex_cbfunc_t cbfunc, void* cbdata) {
    protocol::FenceContribution c;
    std::string what = "fence over ";
    std::map<std::string, NamespaceLayout> layouts;
    std::string why;
    for (const Participant& p : participants) {
      what += (c.participant_nspaces.empty() ? "" : ",") + p.nspace + ":" + rank_text(p.rank);
      if (!layouts.contains(p.nspace)) {
        auto layout = layout_of(p.nspace, why);
        if (!layout) break;
        layouts[p.nspace] = std::move(*layout);
      }
      c.participant_nspaces.push_back(p.nspace);
      c.participant_ranks.push_back(p.rank);
      c.nspace_sizes.push_back(layouts[p.nspace].size);
    }
    {
      std::lock_guard lock(mutex);
      ++counters.fences;
    }
    if (!why.empty()) return fail(cbfunc, cbdata, PMIX_ERR_NOT_FOUND, what, why);
    if (data.size() > protocol::kMaxStringBytes)
      return fail(cbfunc, cbdata, PMIX_ERR_BAD_PARAM, what,
                  "the node's blob of " + std::to_string(data.size()) + " bytes exceeds the " +
                      std::to_string(protocol::kMaxStringBytes) + " a contribution may carry");
    // Which participants this node hosts, and whether they are all of them.
    std::set<std::pair<std::string, std::uint32_t>> members;
    for (const Participant& p : participants) {
      const NamespaceLayout& layout = layouts[p.nspace];
      if (p.rank != protocol::kWildcardRank) {
        members.emplace(p.nspace, p.rank);
        continue;
      }
      if (layout.ranks) {
        for (const std::uint32_t r : *layout.ranks) members.emplace(p.nspace, r);
        continue;
      }
      for (std::uint32_t r = 0; r < layout.size; ++r) members.emplace(p.nspace, r);
    }
    bool all_local = true;
    for (const auto& [nspace, rank] : members) {
      if (layouts[nspace].local.contains(rank)) {
        c.local_nspaces.push_back(nspace);
        c.local_ranks.push_back(rank);
      } else {
        all_local = false;
      }
    }
    if (all_local) {
      {
        std::lock_guard lock(mutex);
        ++counters.fences_local;
      }
      spdlog::debug("{}: every participant is hosted here", what);
      answer_pmix(cbfunc, cbdata, PMIX_SUCCESS, collect ? std::move(data) : std::string());
      return;
    }
    if (const auto gone = why_controller_gone())
      return fail(cbfunc, cbdata, PMIX_ERR_UNREACH, what, *gone);
    c.collect_data = collect ? 1 : 0;
    if (collect) c.data = std::move(data);
    {
      std::lock_guard lock(mutex);
      c.contribution_id = next_id++;
      fences[c.contribution_id] = PendingAnswer{cbfunc, cbdata, what};
    }
    spdlog::debug("{}: contribution {} ({} local participant(s), {} bytes) to the controller", what,
                  c.contribution_id, c.local_ranks.size(), c.data.size());
    senders.contribute(c);
  }

  /// On the worker: a direct_modex upcall.
  void ask(const Participant& proc, pmix_modex_cbfunc_t cbfunc, void* cbdata) {
    protocol::ModexRequest request{0, proc.nspace, proc.rank};
    {
      std::lock_guard lock(mutex);
      ++counters.modex_requests;
    }
    std::string why;
    if (const auto layout = layout_of(proc.nspace, why); layout && proc.rank >= layout->size) {
      // PMIx asks for ranks past the namespace's end too: no node can have them.
      spdlog::debug("data of {}:{}: the namespace has {} rank number(s)", proc.nspace, proc.rank, layout->size);
      answer_pmix(cbfunc, cbdata, PMIX_ERR_NOT_FOUND, {});
      return;
    }
    if (const auto gone = why_controller_gone()) {
      spdlog::debug("data of {}:{}: {}", proc.nspace, proc.rank, *gone);
      answer_pmix(cbfunc, cbdata, PMIX_ERR_UNREACH, {});
      return;
    }
    {
      std::lock_guard lock(mutex);
      request.request_id = next_id++;
      modex[request.request_id] = PendingAnswer{cbfunc, cbdata, "data of " + proc.nspace + ":" + rank_text(proc.rank)};
    }
    senders.ask(request);
  }

  void fail(pmix_modex_cbfunc_t cbfunc, void* cbdata, pmix_status_t status, const std::string& what,
            const std::string& why) {
    {
      std::lock_guard lock(mutex);
      ++counters.fences_failed;
    }
    spdlog::warn("{} failed ({}): {}", what, status_string(status), why);
    answer_pmix(cbfunc, cbdata, status, {});
  }

  /// Takes the pending answer `id` of `table`, if there is one.
  std::optional<PendingAnswer> take(std::map<std::uint64_t, PendingAnswer>& table, std::uint64_t id) {
    std::lock_guard lock(mutex);
    const auto it = table.find(id);
    if (it == table.end()) return std::nullopt;
    PendingAnswer pending = std::move(it->second);
    table.erase(it);
    return pending;
  }

  std::optional<std::string> why_controller_gone() {
    std::lock_guard lock(mutex);
    return controller_gone_why;
  }

  void fail_all(const std::string& why) {
    std::map<std::uint64_t, PendingAnswer> fences_left;
    std::map<std::uint64_t, PendingAnswer> modex_left;
    {
      std::lock_guard lock(mutex);
      fences_left.swap(fences);
      modex_left.swap(modex);
      counters.fences_failed += fences_left.size();
    }
    for (auto& [id, pending] : fences_left) {
      spdlog::warn("{} failed ({}): {}", pending.what, status_string(PMIX_ERR_UNREACH), why);
      answer_pmix(pending.cbfunc, pending.cbdata, PMIX_ERR_UNREACH, {});
    }
    for (auto& [id, pending] : modex_left) answer_pmix(pending.cbfunc, pending.cbdata, PMIX_ERR_UNREACH, {});
  }
};

namespace {

// The upcalls find the relay here: PMIx gives them no pointer of ours.
std::shared_mutex g_relay_mutex;
CollectiveRelay::State* g_relay = nullptr;

/// What PMIx_server_dmodex_request's callback needs to answer the controller.
struct ServeContext {
  std::weak_ptr<CollectiveRelay::State> state;
  protocol::ModexRequest request;
};

void dmodex_done(pmix_status_t status, char* data, size_t size, void* cbdata) {
  std::unique_ptr<ServeContext> context(static_cast<ServeContext*>(cbdata));
  const auto state = context->state.lock();
  if (!state) return;
  protocol::ModexReply reply{context->request.request_id, CollectiveStatus::ok, "", ""};
  if (status == PMIX_SUCCESS) {
    reply.data.assign(data == nullptr ? "" : data, data == nullptr ? 0 : size);
  } else {
    reply.status = status == PMIX_ERR_NOT_FOUND ? CollectiveStatus::not_found : CollectiveStatus::participant_lost;
    reply.text = "PMIx_server_dmodex_request(" + context->request.nspace + ":" +
                 std::to_string(context->request.rank) + "): " + status_string(status);
  }
  // Runs on PMIx's progress thread: the answer goes from the relay's.
  state->worker.post([state, reply = std::move(reply)] {
    if (reply.status == CollectiveStatus::ok) {
      std::lock_guard lock(state->mutex);
      ++state->counters.modex_served;
    }
    state->senders.answer(reply);
  });
}

}  // namespace

CollectiveRelay::CollectiveRelay(Senders senders) : state_(std::make_shared<State>()) {
  state_->senders = std::move(senders);
  std::unique_lock lock(g_relay_mutex);
  if (g_relay != nullptr) throw std::logic_error("a CollectiveRelay already exists in this process");
  g_relay = state_.get();
}

CollectiveRelay::~CollectiveRelay() {
  {
    std::unique_lock lock(g_relay_mutex);
    g_relay = nullptr;
  }
  state_->worker.stop();  // what the upcalls handed over is sent or answered first
  state_->fail_all("the daemon stops");
}

void CollectiveRelay::released(const protocol::FenceRelease& release) {
  state_->worker.post([state = state_, release] {
    auto pending = state->take(state->fences, release.contribution_id);
    if (!pending) {
      spdlog::warn("fence release {} dropped: no fence of this node waits under that id", release.contribution_id);
      return;
    }
    if (release.status != CollectiveStatus::ok) {
      state->fail(pending->cbfunc, pending->cbdata, to_pmix_status(release.status), pending->what, release.text);
      return;
    }
    std::string data;
    for (const std::string& blob : release.data) data += blob;
    spdlog::debug("{}: released with {} bytes from {} node(s)", pending->what, data.size(), release.data.size());
    answer_pmix(pending->cbfunc, pending->cbdata, PMIX_SUCCESS, std::move(data));
  });
}

void CollectiveRelay::answered(const protocol::ModexReply& reply) {
  state_->worker.post([state = state_, reply] {
    auto pending = state->take(state->modex, reply.request_id);
    if (!pending) {
      spdlog::warn("modex reply {} dropped: no request of this node waits under that id", reply.request_id);
      return;
    }
    if (reply.status != CollectiveStatus::ok)
      spdlog::info("{}: {} ({})", pending->what, reply.text, status_string(to_pmix_status(reply.status)));
    answer_pmix(pending->cbfunc, pending->cbdata, to_pmix_status(reply.status), reply.data);
  });
}

void CollectiveRelay::serve(const protocol::ModexRequest& request) {
  std::weak_ptr<State> weak = state_;
  state_->worker.post([state = state_, weak, request] {
    std::string why;
    const auto layout = namespace_layout(request.nspace, why);
    if (!layout || !layout->local.contains(request.rank)) {
      state->senders.answer(protocol::ModexReply{request.request_id, CollectiveStatus::not_found,
                                                 "no client of this node is " + request.nspace + ":" +
                                                     std::to_string(request.rank),
                                                 ""});
      return;
    }
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, request.nspace.c_str(), request.rank);
    auto* context = new ServeContext{weak, request};
    const pmix_status_t rc = PMIx_server_dmodex_request(&proc, dmodex_done, context);
    if (rc != PMIX_SUCCESS) {
      delete context;  // no callback comes
      state->senders.answer(protocol::ModexReply{request.request_id, CollectiveStatus::participant_lost,
                                                 "PMIx_server_dmodex_request(" + request.nspace + ":" +
                                                     std::to_string(request.rank) + "): " + status_string(rc),
                                                 ""});
    }
  });
}

void CollectiveRelay::controller_gone(const std::string& why) {
  state_->worker.post([state = state_, why] {
    {
      std::lock_guard lock(state->mutex);
      state->controller_gone_why = why;
    }
    state->fail_all(why);
  });
}

void CollectiveRelay::controller_back() {
  state_->worker.post([state = state_] {
    std::lock_guard lock(state->mutex);
    state->controller_gone_why.reset();
  });
}

void CollectiveRelay::job_ranks(const std::string& nspace, const std::vector<std::uint32_t>& ranks,
                                std::uint32_t numbers_given) {
  std::lock_guard lock(state_->mutex);
  state_->job_ranks[nspace] = KnownJobRanks{{ranks.begin(), ranks.end()}, numbers_given};
}

CollectiveRelay::Counters CollectiveRelay::counters() const {
  std::lock_guard lock(state_->mutex);
  return state_->counters;
}

pmix_status_t fence_nb_upcall(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                              char* data, size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  std::shared_lock lock(g_relay_mutex);
  if (g_relay == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  std::vector<Participant> participants;
  participants.reserve(nprocs);
  for (size_t i = 0; i < nprocs; ++i) participants.push_back({procs[i].nspace, procs[i].rank});
  bool collect = false;
  for (size_t i = 0; i < ninfo; ++i) {
    if (PMIX_CHECK_KEY(&info[i], PMIX_COLLECT_DATA)) collect = PMIX_INFO_TRUE(&info[i]);
  }
  std::string blob = data == nullptr ? std::string() : std::string(data, ndata);
  CollectiveRelay::State* relay = g_relay;
  const bool posted = relay->worker.post([relay, participants = std::move(participants), collect,
                                          blob = std::move(blob), cbfunc, cbdata]() mutable {
    relay->contribute(participants, collect, std::move(blob), cbfunc, cbdata);
  });
  return posted ? PMIX_SUCCESS : PMIX_ERR_NOT_AVAILABLE;
}

pmix_status_t direct_modex_upcall(const pmix_proc_t* proc, const pmix_info_t* /*info*/, size_t /*ninfo*/,
                                  pmix_modex_cbfunc_t cbfunc, void* cbdata) {
  std::shared_lock lock(g_relay_mutex);
  if (g_relay == nullptr) return PMIX_ERR_NOT_SUPPORTED;
  if (proc->rank == PMIX_RANK_WILDCARD) return PMIX_ERR_BAD_PARAM;
  CollectiveRelay::State* relay = g_relay;
  const Participant asked{proc->nspace, proc->rank};
  const bool posted = relay->worker.post([relay, asked, cbfunc, cbdata] { relay->ask(asked, cbfunc, cbdata); });
  return posted ? PMIX_SUCCESS : PMIX_ERR_NOT_AVAILABLE;
}

}  // namespace bellows::daemon
