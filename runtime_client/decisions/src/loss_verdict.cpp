#include <bellows/runtime/loss_verdict.hpp>

namespace bellows::runtime {

LossVerdict decide_loss_verdict(const LossVerdictFacts& facts, const LossVerdictLimits& limits) noexcept {
  // Written as "still short of the limit": a NaN time ends the wait rather than prolonging it.
  if (facts.peer_found_lost) {
    return facts.seconds_since_first_loss < limits.grace_seconds ? LossVerdict::wait : LossVerdict::report_lost;
  }
  return facts.seconds_since_failure < limits.verdict_seconds ? LossVerdict::wait : LossVerdict::unexplained;
}

const char* to_string(LossVerdict verdict) noexcept {
  switch (verdict) {
    case LossVerdict::wait: return "wait";
    case LossVerdict::report_lost: return "report_lost";
    case LossVerdict::unexplained: return "unexplained";
  }
  return "unknown";
}

}  // namespace bellows::runtime
