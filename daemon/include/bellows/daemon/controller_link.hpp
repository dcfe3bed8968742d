#pragma once
// bellowsd's connection to the job's controller: what the node's ranks send the daemon over
// PMIx goes on to the controller over the transport, and the controller's decisions come
// back to the ranks as PMIx events.
//
//   rank -> daemon (PMIx)                        daemon -> controller (transport)
//   PMIx_Allocation_request(EXTEND|RELEASE, k)   AllocationRequest (request; its Ack answers
//                                                the rank: ok -> PMIX_SUCCESS + text)
//   kRankMetrics                                 NodeMetrics
//   kResizeReport                                ResizeAck
//   kRankAttached (pid), then the process ends   RankExited (unless it reported "left")
//
//   controller -> daemon (transport)             daemon -> ranks (PMIx event, local range)
//   ResizeDecided (expand | shrink)              kExpandDecided | kShrinkDecided
//   Abort                                        kResizeAborted
//   RanksLost (a failure)                        kRanksLost
//   Stop                                         (the daemon stops: on_stop)
//
// A controller that goes away without Stop (killed, its host lost): once its connection has
// been lost for the grace (a killed process's connection closes at once; a lost host's is
// closed by the transport's heartbeat), the daemon keeps serving the ranks of its node while
// they run, and stops (on_stop, with the reason) as soon as none runs: no daemon stays behind
// a job whose controller is gone. While ranks run it probes the controller's host every
// heartbeat interval (at most a second apart): when that host has answered nothing for the
// unreachable limit (this node cut off from the network, or the host gone), the controller
// has counted this node's ranks lost, so the daemon stops and its ranks end with it. The grace,
// the limit and the probes' interval follow heartbeat_timeout
// (bellows/runtime/controller_loss.hpp, runtime::controller_loss_limits): 2 s, 5 s and 1 s
// at the default 5 s, 0.8 s, 2 s and 0.4 s at 2 s.

#include <bellows/daemon/pmix_server.hpp>
#include <bellows/transport/endpoint.hpp>
#include <bellows/transport/security.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace bellows::runtime {
struct FirstNodeLossFacts;
}  // namespace bellows::runtime

namespace bellows::daemon {

/// Joins one PmixServer to the job's controller. Registers the server's allocation, metrics
/// and resize-report handlers (replacing any others) and sends Hello.
///
/// Thread safety: the handlers run on the server's worker and the transport's receive
/// thread; wait_registered() and the accessors may be called from any thread.
class ControllerLink {
 public:
  struct Options {
    /// The controller's endpoint (transport::Server::endpoint()).
    std::string endpoint;
    /// This node's name as the controller knows it.
    std::string node_name;
    /// How long a rank's allocation request may wait for the controller's answer.
    std::chrono::milliseconds request_timeout{10000};
    /// The job's key pair, required when endpoint is tcp:// (transport::read_controller_contact).
    std::optional<transport::CurveKeyPair> curve;
    /// Whether a stop signal reached this daemon (taken or pending); none: never. Slurm
    /// signals every process of a step at once, so a rank's launcher may end of that SIGTERM
    /// before the daemon takes its own: a launcher that ends abnormally within
    /// kStopSignalGrace of a stop signal is stopped with the daemon, not reported as a death.
    std::function<bool()> stop_signal_arrived;
    /// How long the connection to the controller may stay lost before the controller counts
    /// as gone; unset: runtime::controller_loss_limits(heartbeat_timeout)'s grace (0.4 of it).
    std::optional<std::chrono::milliseconds> controller_loss_grace{};
    /// The job's directory, where the PMIx variables of a rank the controller starts itself
    /// are written (StartRank with started_by_daemon false); empty: none (such a StartRank
    /// fails).
    std::filesystem::path job_dir{};
    /// How long, once the controller counts as gone, its host may answer nothing (no
    /// connection accepted or refused: this node is cut off, or that host is gone) before the
    /// ranks of this node are ended and the daemon stops (runtime::on_controller_loss). 0:
    /// never; the ranks run until they end. Unset: runtime::controller_loss_limits(
    /// heartbeat_timeout)'s (the timeout itself).
    std::optional<std::chrono::milliseconds> controller_unreachable_limit{};
    /// How long the connection to the controller may stay silent before it counts as lost
    /// (the job's recovery.heartbeat_timeout; heartbeats every transport::heartbeat_interval_for).
    std::chrono::milliseconds heartbeat_timeout{5000};
    /// Under Slurm, how long the ranks are kept past the unreachable limit for a takeover while
    /// slurmctld has not set the job's silent batch host DOWN (runtime::keep_ranks_for_takeover;
    /// bellowsd --takeover-grace). Unset: runtime::takeover_grace_seconds of Slurm's
    /// SlurmdTimeout, as slurmctld_said() gets it.
    std::optional<std::chrono::milliseconds> takeover_grace{};
  };

  /// How long a launcher's abnormal end waits for the daemon's own stop signal.
  static constexpr std::chrono::milliseconds kStopSignalGrace{250};

  /// `server` must outlive the link. on_stop runs (on the transport's thread) when the
  /// controller sends Stop, with its reason, or (on the link's watching thread, once) when the
  /// controller is gone and no rank of this node runs, with "the controller at ENDPOINT is
  /// gone and no rank of node NODE runs". Throws transport::TransportError for a bad
  /// endpoint.
  ControllerLink(PmixServer& server, Options options,
                 std::function<void(const std::string&)> on_stop);
  ~ControllerLink();
  ControllerLink(const ControllerLink&) = delete;
  ControllerLink& operator=(const ControllerLink&) = delete;

  /// Waits until the controller answered Hello; false on timeout or refusal, with the
  /// reason in *why.
  bool wait_registered(std::chrono::milliseconds timeout, std::string* why = nullptr);

  /// Whether the link stopped the daemon (called on_stop) because the controller is gone,
  /// rather than on the controller's Stop.
  [[nodiscard]] bool stopped_without_controller() const;

  /// Whether the controller counts as gone (its grace passed) while ranks of this node run
  /// on and the controller's host answers (on_controller_loss says keep_ranks). Meanwhile
  /// the link follows the endpoint the job directory publishes (a controller that took the
  /// job over on another node).
  [[nodiscard]] bool controller_gone_while_ranks_run() const;

  /// What slurmctld said when asked about the job while the controller is gone (`job`: null
  /// when it did not answer), and Slurm's SlurmdTimeout when known: while the controller's host
  /// answers nothing, the ranks are kept past the unreachable limit as long as
  /// runtime::keep_ranks_for_takeover says a takeover may still come. Forgotten once the
  /// controller is back. Thread-safe.
  void slurmctld_said(const runtime::FirstNodeLossFacts* job, std::optional<double> slurmd_timeout_seconds);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace bellows::daemon
