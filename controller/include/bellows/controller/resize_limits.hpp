#pragma once
// The controller's time limits on a resize. Each setting is declared once, in
// resize_settings(), with its key, type, default and help text; ResizeLimits::defaults()
// and the documentation are built from that table.

#include <chrono>
#include <span>
#include <string>
#include <string_view>

namespace bellows::controller {

/// How long the phases of a resize may take before the controller gives up on them.
struct ResizeLimits {
  std::chrono::milliseconds rm_request{0};       ///< timeout passed to request_expand()
  std::chrono::milliseconds rm_answer_grace{0};  ///< extra wait for the answer after it
  std::chrono::milliseconds daemon_start{0};     ///< granted -> every daemon up
  std::chrono::milliseconds release{0};          ///< release_nodes() -> its answer
  std::chrono::milliseconds cancel{0};           ///< cancel() -> the job's answer
  std::chrono::milliseconds resize_deadline{0};  ///< request -> final state (policy's limit)

  /// Every limit at its declared default.
  [[nodiscard]] static ResizeLimits defaults();
};

/// One declared setting.
struct ResizeSetting {
  std::string_view key;   ///< e.g. "controller.daemon_start_timeout"
  std::string_view type;  ///< "duration" (milliseconds in code, seconds in files)
  std::chrono::milliseconds default_value;
  std::string_view help;
  std::chrono::milliseconds ResizeLimits::*member;
};

/// The declared settings, in documentation order.
[[nodiscard]] std::span<const ResizeSetting> resize_settings() noexcept;

/// Sets one limit by key. Throws std::invalid_argument for an unknown key (naming the known
/// ones) or a value that is not positive.
void set_limit(ResizeLimits& limits, std::string_view key, std::chrono::milliseconds value);

/// Throws std::invalid_argument naming the first limit that is not positive.
void validate(const ResizeLimits& limits);

/// The settings as a Markdown table (key | type | default | meaning) for docs/controller.md.
[[nodiscard]] std::string settings_markdown();

}  // namespace bellows::controller
