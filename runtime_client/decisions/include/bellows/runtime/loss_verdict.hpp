#pragma once
// What a rank does while an iteration fails: wait for the verdict on who is lost, report the
// peers found lost, or end with an MPI failure that no lost peer explains.
//
// Two ways tell a rank that a peer is lost (docs/recovery.md, "When a rank dies mid-iteration"):
// its own watch (a receive from the dead peer fails) and the control plane's word (the
// controller's kRanksLost, from a daemon that saw the pid end or from heartbeats). An MPI call
// can fail before either has spoken: a collective fails on a survivor that learnt of the death
// from another survivor, not from its own connection to the dead. On a loaded host the watch
// may then take longer than the grace, or never fail at all when no connection to the dead was
// ever opened, and the control plane's word takes a few hundred milliseconds to seconds. So a
// failure that names no lost peer waits for a verdict up to `verdict_seconds`, long enough for
// the controller to find a killed rank (its daemon's pid watch) or a silent one (the heartbeat
// timeout); a healthy rank is never ended for a slow verdict, and the wait is bounded.
//
// Once a peer is found lost, the rank waits `grace_seconds` more, so that ranks that died
// together are named together and every survivor names the same set.
//
// Pure: the runtime measures the times and polls the watch; this decides.

namespace bellows::runtime {

/// What the rank does now.
enum class LossVerdict {
  wait,         ///< keep polling the watch and the control plane's word
  report_lost,  ///< end the iteration and report the peers found lost
  unexplained,  ///< no peer was found lost in time: the MPI failure stands on its own
};

/// What the rank knows when it decides.
struct LossVerdictFacts {
  /// Whether the watch or the control plane has named a peer lost.
  bool peer_found_lost = false;
  /// Seconds since the first peer was found lost (read only when one was).
  double seconds_since_first_loss = 0.0;
  /// Seconds since the rank stopped the iteration for a failure (an MPI call failed, or a
  /// peer was found lost), the verdict's wait counted from there.
  double seconds_since_failure = 0.0;
};

/// How long the rank waits.
struct LossVerdictLimits {
  /// After the first peer found lost, for others that died with it: more than the 2-20 ms
  /// ch3 takes to fail what involves a dead peer on an idle host.
  double grace_seconds = 0.1;
  /// For a failure that names no lost peer: the controller's heartbeat timeout (5 s by
  /// default) plus as long again for its word to reach a loaded host.
  double verdict_seconds = 10.0;
};

/// Decides from `facts` under `limits`.
[[nodiscard]] LossVerdict decide_loss_verdict(const LossVerdictFacts& facts,
                                              const LossVerdictLimits& limits = {}) noexcept;

/// "wait", "report_lost", "unexplained".
[[nodiscard]] const char* to_string(LossVerdict verdict) noexcept;

}  // namespace bellows::runtime
