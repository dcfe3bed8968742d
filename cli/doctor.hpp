#pragma once
// `bellows doctor`: what a site checks before it offers `--elastic` to its users. The facts
// are gathered by doctor_command.cpp (scontrol show config, the plugstack file, the munge
// socket); what they mean is decided here, without I/O, so that every verdict and its text
// is unit-tested.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bellows::cli {

/// What `bellows doctor` learned about the cluster.
struct SiteFacts {
  /// `scontrol show config`, key -> value; empty with config_error set when it failed.
  std::map<std::string, std::string> config;
  std::string config_error;
  /// The SPANK plugstack file named by PlugStackConfig, or why it could not be read.
  std::string plugstack_text;
  std::string plugstack_error;
  /// "" when a connection to the munge socket (AuthInfo socket=, else munge's default)
  /// succeeded, else why not.
  std::string munge_error;
  /// This host's name and the first IPv4 address it resolves to ("" when none): where a job's
  /// controller listens for the other nodes' daemons (bellows run --listen tcp) and what a
  /// rank's MPI port carries.
  std::string host_name;
  std::string host_address;
};

enum class Verdict { ok, warning, problem };

/// One check: what was found and, unless ok, what to do.
struct Finding {
  std::string check;  ///< e.g. "job expansion"
  Verdict verdict = Verdict::ok;
  std::string what;   ///< what was found
  std::string fix;    ///< what to change (empty when ok)
};

/// Parses `scontrol show config` ("Key = Value" lines; "SlurmctldHost[0]" keeps its index).
[[nodiscard]] std::map<std::string, std::string> parse_scontrol_config(const std::string& text);

/// The findings, in a fixed order: slurmctld, job expansion, accounting, SPANK plugin,
/// node loss, select plugin, extern step, munge, control plane.
[[nodiscard]] std::vector<Finding> diagnose(const SiteFacts& facts);

[[nodiscard]] const char* to_string(Verdict verdict) noexcept;

}  // namespace bellows::cli
