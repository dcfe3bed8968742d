#include "bellows/controller/resize_limits.hpp"

#include <array>
#include <stdexcept>

namespace bellows::controller {

namespace {

using std::chrono::milliseconds;

constexpr std::array kSettings{
    ResizeSetting{"controller.rm_request_timeout", "duration", milliseconds(10000),
                  "how long the resource manager may take to grant an expansion",
                  &ResizeLimits::rm_request},
    ResizeSetting{"controller.rm_answer_grace", "duration", milliseconds(2000),
                  "how much longer the controller waits for an answer before it counts "
                  "the request as timed out itself",
                  &ResizeLimits::rm_answer_grace},
    ResizeSetting{"controller.daemon_start_timeout", "duration", milliseconds(15000),
                  "how long the daemons on granted nodes may take to come up",
                  &ResizeLimits::daemon_start},
    ResizeSetting{"controller.release_timeout", "duration", milliseconds(30000),
                  "how long the resource manager may take to take nodes back",
                  &ResizeLimits::release},
    ResizeSetting{"controller.cancel_timeout", "duration", milliseconds(30000),
                  "how long the job may take to answer when a resize it was told of is called "
                  "off (it answers between iterations)",
                  &ResizeLimits::cancel},
    ResizeSetting{"controller.resize_deadline", "duration", milliseconds(120000),
                  "how long a whole resize may take unless the request sets its own limit",
                  &ResizeLimits::resize_deadline},
};

std::string seconds_text(milliseconds value) {
  const auto ms = value.count();
  std::string text = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    std::string fraction = std::to_string(1000 + ms % 1000).substr(1);
    while (fraction.back() == '0') fraction.pop_back();
    text += "." + fraction;
  }
  return text + " s";
}

}  // namespace

ResizeLimits ResizeLimits::defaults() {
  ResizeLimits limits;
  for (const ResizeSetting& s : kSettings) limits.*(s.member) = s.default_value;
  return limits;
}

std::span<const ResizeSetting> resize_settings() noexcept { return kSettings; }

void set_limit(ResizeLimits& limits, std::string_view key, std::chrono::milliseconds value) {
  for (const ResizeSetting& s : kSettings) {
    if (s.key != key) continue;
    if (value.count() <= 0) {
      throw std::invalid_argument(std::string(key) + " must be positive, got " +
                                  std::to_string(value.count()) + " ms");
    }
    limits.*(s.member) = value;
    return;
  }
  std::string known;
  for (const ResizeSetting& s : kSettings) known += (known.empty() ? "" : ", ") + std::string(s.key);
  throw std::invalid_argument("unknown controller setting '" + std::string(key) + "' (known: " + known + ")");
}

void validate(const ResizeLimits& limits) {
  for (const ResizeSetting& s : kSettings) {
    const auto value = limits.*(s.member);
    if (value.count() <= 0) {
      throw std::invalid_argument(std::string(s.key) + " must be positive, got " +
                                  std::to_string(value.count()) + " ms");
    }
  }
}

std::string settings_markdown() {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const ResizeSetting& s : kSettings) {
    out += "| `" + std::string(s.key) + "` | " + std::string(s.type) + " | " +
           seconds_text(s.default_value) + " | " + std::string(s.help) + " |\n";
  }
  return out;
}

}  // namespace bellows::controller
