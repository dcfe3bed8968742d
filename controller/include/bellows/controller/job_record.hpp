#pragma once
// What a job's controller keeps in its job directory (JOB_DIR/job.json) so that another
// controller can take the running job over (`bellows run --attach`, docs/controller.md,
// "Taking a job over"): the job's nodes now, its ranks, its node range, its policy (the text,
// not only the path), how its daemons start ranks (and whether its program is PMIx-native), its
// PMIx job map (each node's rank number in the job's namespace, and every number given so far),
// the pid of the first rank's process, each daemon's pid, the allocations besides
// the job that hold some of its nodes (Slurm companions), how a Slurm job grows (the expand
// strategy `bellows run --expand-strategy` asked for), and whether and how the job ended (when,
// why, and the exit status its controller returned). The controller rewrites the file (a
// temporary file renamed over it) whenever one of these changes, so that a controller killed at
// any moment leaves the last state.
//
// A record written by an older `bellows` lacks the fields added since (companions,
// expand_strategy, exit_status, and the PMIx fields: pmix_native, pmix_job_map, pmix_rank_nodes,
// first_rank_pid): each takes its default when absent (kOptionalJobRecordFields).
// A field that is present but malformed is refused all the same, naming the file and the field.
//
// Thread safety: free functions without shared state.

#include "bellows/controller/resource_manager.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::controller {

/// One job as its controller last wrote it.
struct JobRecord {
  std::string job;                       ///< the job's id
  std::string backend;                   ///< "local" or "slurm"
  std::vector<std::string> nodes;        ///< the job's nodes now, its first node first
  unsigned ranks = 0;                    ///< ranks in the job as last reported (0: unknown)
  unsigned min_nodes = 1;                ///< the node range resizes stay within
  unsigned max_nodes = 1;
  std::string policy_file;               ///< "" without a policy
  std::string policy_text;               ///< the policy as it was loaded ("" without one)
  std::vector<std::string> rank_command;      ///< how a daemon starts a rank (RankLaunch)
  std::vector<std::string> rank_environment;  ///< NAME=VALUE
  /// The program is PMIx-native (`bellows run --pmix-native`, RankLaunch::pmix_native).
  bool pmix_native = false;
  /// The job map: each node of the job's PMIx rank number (DaemonJobControl::job_map()).
  std::map<std::string, std::uint32_t> pmix_job_map;
  /// Every PMIx rank number given so far, with the node it was given on, a number that left
  /// included (DaemonJobControl::numbered_nodes()).
  std::vector<std::string> pmix_rank_nodes;
  /// The process `bellows run` started as the job's first rank (its launcher); 0: unknown. A
  /// controller that takes a PMIx-native job over learns the job's end from it: no daemon
  /// watches that process.
  std::int32_t first_rank_pid = 0;
  std::map<std::string, std::int32_t> daemon_pids;  ///< node -> its daemon's pid (its hello)
  /// The allocations besides the job that hold some of `nodes` (Slurm companions), in the
  /// order granted; none on the local backend or a Slurm job grown by merging. Absent from an
  /// older record: none.
  std::vector<CompanionAllocation> companions;
  /// How a Slurm job grows, as `bellows run --expand-strategy` asked: "auto" (the site's
  /// settings choose), "merge" or "companion" (slurm_expand_strategy.hpp); "" on the local
  /// backend. A controller that takes the job over grows it the same way. Absent from an older
  /// record: "auto" for a Slurm job, "" on the local backend.
  std::string expand_strategy;
  std::string controller;                ///< "PID START" of the controller that wrote it
  std::string ended_at;                  ///< UTC when the job ended; "" while it runs
  std::string end;                       ///< how it ended ("" while it runs)
  /// The exit status the job's controller returned when the job ended (`bellows run`: the
  /// program's, 128 + N for a signal N; `bellows wait` returns it); std::nullopt while the job
  /// runs, and in an ended record of an older `bellows`, which did not keep it.
  std::optional<int> exit_status;

  bool operator==(const JobRecord&) const = default;
};

/// The fields added to the record after its first form, which an older `bellows` did not
/// write; every other field is required.
inline constexpr std::string_view kOptionalJobRecordFields[] = {
    "companions", "expand_strategy", "exit_status", "pmix_native", "pmix_job_map", "pmix_rank_nodes", "first_rank_pid"};

/// The record as JSON text (one object, pretty-printed, ending in a newline).
[[nodiscard]] std::string to_json_text(const JobRecord& record);

/// Parses what to_json_text() wrote, or an older `bellows` (kOptionalJobRecordFields take
/// their defaults when absent). Throws std::runtime_error naming `source` and the field
/// that is wrong, e.g. "JOB_DIR/job.json: field 'nodes': expected a non-empty list of node
/// names, got []". The job map must agree with the numbers given: each node's number is one
/// given on that node.
[[nodiscard]] JobRecord parse_job_record(std::string_view text, const std::string& source);

/// Writes the record to `path` through `path`.tmp renamed over it (mode 0600). Throws
/// std::runtime_error naming the file and the system's reason.
void write_job_record(const std::filesystem::path& path, const JobRecord& record);

/// Reads and parses `path`. Throws std::runtime_error naming the file when it is missing,
/// unreadable or not a job record.
[[nodiscard]] JobRecord read_job_record(const std::filesystem::path& path);

}  // namespace bellows::controller
