#pragma once
// PMIx fences and direct modex across the job's nodes, the daemon's part (docs/daemon.md):
//
//   client -> daemon (PMIx upcall)          daemon -> controller (transport)
//   PMIx_Fence (fence_nb, once every local  FenceContribution: the participants, those hosted
//   participant entered it)                 here, PMIX_COLLECT_DATA, the blob PMIx gave
//   PMIx_Get of a rank not hosted here      ModexRequest (nspace, rank)
//   (direct_modex)
//
//   controller -> daemon                     daemon -> PMIx
//   FenceRelease                             the fence_nb upcall's cbfunc: its status, the
//                                            blobs of every node concatenated
//   ModexRequest (for a rank hosted here)    PMIx_server_dmodex_request, then ModexReply
//   ModexReply                               the direct_modex upcall's cbfunc
//
// A fence whose participants are all hosted here completes here, without the controller.
// Statuses: participant_lost -> PMIX_ERR_PROC_TERM_WO_SYNC, unreachable -> PMIX_ERR_UNREACH,
// not_found -> PMIX_ERR_NOT_FOUND, refused -> PMIX_ERR_BAD_PARAM.
//
// Threads: the upcalls run on PMIx's progress thread; they copy what they get and hand it to
// the relay's own thread, which asks PMIx which participants are local (PMIx_Get of
// PMIX_LOCAL_PEERS and PMIX_JOB_SIZE) and sends. The controller's answers (any thread) are
// handed to the same thread, which calls the upcalls' cbfuncs.

#include <bellows/protocol/messages.hpp>

#include <pmix_common.h>
#include <pmix_server.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace bellows::daemon {

/// Relays the fence_nb and direct_modex upcalls of this daemon's PMIx server. At most one
/// exists at a time: it is the upcalls' target from construction to destruction; without one
/// the upcalls answer PMIX_ERR_NOT_SUPPORTED.
///
/// Thread safety: every method may be called from any thread but PMIx's progress thread.
class CollectiveRelay {
 public:
  /// How the relay reaches the controller (called on the relay's thread).
  struct Senders {
    std::function<void(const protocol::FenceContribution&)> contribute;
    std::function<void(const protocol::ModexRequest&)> ask;     ///< a request of this node's client
    std::function<void(const protocol::ModexReply&)> answer;    ///< the answer to serve()'s request
  };
  /// What the relay did, for tests and logs.
  struct Counters {
    std::uint64_t fences = 0;               ///< fence_nb upcalls taken
    std::uint64_t fences_local = 0;         ///< of them, completed without the controller
    std::uint64_t fences_failed = 0;        ///< answered with an error
    std::uint64_t modex_requests = 0;       ///< direct_modex upcalls taken
    std::uint64_t modex_served = 0;         ///< the controller's requests answered with a blob
  };

  /// Throws std::logic_error when another relay exists.
  explicit CollectiveRelay(Senders senders);
  /// Answers every fence and modex request still pending with PMIX_ERR_UNREACH ("the daemon
  /// stops"), then stops being the upcalls' target. Call it before the PmixServer goes.
  ~CollectiveRelay();
  CollectiveRelay(const CollectiveRelay&) = delete;
  CollectiveRelay& operator=(const CollectiveRelay&) = delete;

  /// The controller ended a fence this node contributed to.
  void released(const protocol::FenceRelease& release);
  /// The controller answered a modex request of this node's client.
  void answered(const protocol::ModexReply& reply);
  /// The controller asks for the data of a rank that may be hosted here: answered (through
  /// Senders::answer) with its blob, or not_found when it is not a client of this node.
  void serve(const protocol::ModexRequest& request);
  /// The controller is gone: every pending fence and modex request, and every one that would
  /// go to the controller until controller_back(), is answered PMIX_ERR_UNREACH with `why` (a
  /// fence among this node's clients alone still completes). Calling it again changes `why`.
  void controller_gone(const std::string& why);
  /// The controller is reachable again: fences and modex requests go to it as before.
  void controller_back();
  /// The job's namespace `nspace` is now the ranks `ranks`, out of the `numbers_given` rank
  /// numbers given so far (0..numbers_given-1; those not in `ranks` left, or join in a grow not
  /// yet committed). From now on a fence over the namespace's wildcard means `ranks`, and a
  /// contribution gives `numbers_given` as the namespace's size. Without it (another namespace,
  /// or before the job's first change), both are PMIX_JOB_SIZE's 0..size-1.
  void job_ranks(const std::string& nspace, const std::vector<std::uint32_t>& ranks, std::uint32_t numbers_given);

  [[nodiscard]] Counters counters() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

/// The server module's fence_nb and direct_modex upcalls (registered in pmix_server.cpp).
pmix_status_t fence_nb_upcall(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,
                              char* data, size_t ndata, pmix_modex_cbfunc_t cbfunc, void* cbdata);
pmix_status_t direct_modex_upcall(const pmix_proc_t* proc, const pmix_info_t info[], size_t ninfo,
                                  pmix_modex_cbfunc_t cbfunc, void* cbdata);

}  // namespace bellows::daemon
