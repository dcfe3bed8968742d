#pragma once
// How the Slurm backend grows a job, decided without Slurm: pure functions and bookkeeping,
// tested on their own (tests/controller/slurm_expand_strategy_test.cpp); the Slurm backend
// (slurm_resource_manager.hpp) builds on them.
//
// Two strategies:
// - merge: a helper allocation depending on the job (expand:JOBID) is merged into it, and the
//   job holds the new nodes under its own id. Needs SchedulerParameters=permit_job_expansion
//   (off by default since Slurm 19.05) and fails on sites whose jobs carry an extern step
//   (PrologFlags=Contain): Slurm refuses to merge a job that has a step.
// - companion: a step-less allocation of its own on the new nodes (as `salloc --no-shell`),
//   named bellows-grow-JOBID, commented bellows:companion-of:JOBID, its time limit trimmed
//   to what the job has left; the elastic job spans it (its daemons there run as steps of the
//   companion) and gives it back whole or in part at a shrink, and all of it at its end. Works
//   on an unmodified Slurm. (PRRTE grows a job on Slurm the same way.)

#include "bellows/controller/resource_manager.hpp"

#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::controller {

/// How an expansion is carried out on Slurm; automatic lets the site's settings decide.
enum class ExpandStrategy { automatic, merge, companion };

/// "auto", "merge" or "companion".
[[nodiscard]] std::string_view to_string(ExpandStrategy strategy) noexcept;
/// The inverse of to_string(ExpandStrategy); false when text names none.
[[nodiscard]] bool parse_expand_strategy(std::string_view text, ExpandStrategy& strategy) noexcept;

/// The strategy a job uses (merge or companion, never automatic) and why, in words for
/// `bellows run` and `bellows doctor`.
struct StrategyChoice {
  ExpandStrategy strategy = ExpandStrategy::companion;
  std::string reason;
};

/// Picks the strategy: `requested` unless it is automatic; else merge when
/// `scheduler_parameters` (slurm.conf's SchedulerParameters, comma-separated) holds
/// permit_job_expansion and `prolog_flags` (PrologFlags, comma-separated, any case) holds no
/// Contain, companion otherwise. A forced merge the site refuses is chosen all the same, the
/// reason says what Slurm will answer.
[[nodiscard]] StrategyChoice choose_expand_strategy(ExpandStrategy requested,
                                                    std::string_view scheduler_parameters,
                                                    std::string_view prolog_flags);

/// How a job grows under `choice`, and why, as `bellows run` says it: "merging helper jobs into
/// it (same job id): REASON" or "companion allocations it spans (bellows-grow-JOBID): REASON".
[[nodiscard]] std::string describe_growth(const StrategyChoice& choice);

/// How long a grant may last so that it ends no later than the job: `time_limit_minutes`
/// (Slurm's; std::nullopt when the job has none) and `end_time` (when it ends) at `now`.
/// ok with the whole minutes the job has left (std::nullopt: no limit), or denied when the
/// job ends within a minute ("the job ends in 42 s (its time limit): too late to grow").
struct GrantMinutes {
  RmStatus status;
  std::optional<std::uint32_t> minutes;
};
[[nodiscard]] GrantMinutes grant_minutes(std::optional<std::uint32_t> time_limit_minutes,
                                         std::time_t end_time, std::time_t now);

/// The job name and comment of job's companions: "bellows-grow-JOB",
/// "bellows:companion-of:JOB". Every companion's name starts with kCompanionPrefix.
inline constexpr std::string_view kCompanionPrefix = "bellows-grow-";
inline constexpr std::string_view kCompanionCommentPrefix = "bellows:companion-of:";
[[nodiscard]] std::string companion_name(const std::string& job);
[[nodiscard]] std::string companion_comment(const std::string& job);

/// What a release does to one companion: complete it (every node of it leaves) or shrink it
/// to `remaining`.
struct CompanionRelease {
  std::uint32_t companion = 0;
  std::vector<std::string> leaving;    ///< its nodes that leave, in the release's order
  std::vector<std::string> remaining;  ///< its nodes that stay; empty: it is given back whole
};

/// A release split by the Slurm job holding each leaving node: the elastic job's own nodes,
/// and one entry per companion touched, in order of their first leaving node.
struct ReleaseSplit {
  std::vector<std::string> own;
  std::vector<CompanionRelease> companions;
};

/// The companions of one elastic job and their nodes. Not thread-safe; values only.
class CompanionBook {
 public:
  /// Records a granted companion and its nodes (none of them in another companion).
  void add(std::uint32_t companion, std::vector<std::string> nodes);
  /// The companion holding node, std::nullopt when none does (the job's own node).
  [[nodiscard]] std::optional<std::uint32_t> holder_of(const std::string& node) const;
  /// Every node of every companion, in the order they were added.
  [[nodiscard]] std::vector<std::string> nodes() const;
  /// The companions' ids, in the order they were added.
  [[nodiscard]] std::vector<std::uint32_t> companions() const;
  /// The nodes of one companion (none for an unknown id).
  [[nodiscard]] std::vector<std::string> nodes_of(std::uint32_t companion) const;
  /// Splits `leaving` (checked beforehand, e.g. by plan_release) by holder.
  [[nodiscard]] ReleaseSplit split(const std::vector<std::string>& leaving) const;
  /// Forgets nodes that left; a companion left with no node is forgotten too.
  void remove_nodes(const std::vector<std::string>& nodes);
  /// Forgets a companion and its nodes.
  void remove(std::uint32_t companion);
  [[nodiscard]] bool empty() const noexcept { return order_.empty(); }

 private:
  std::vector<std::uint32_t> order_;
  std::map<std::uint32_t, std::vector<std::string>> nodes_;
};

/// What slurmctld says now of one Slurm job a taken-over job's record names: the job itself
/// or one of its companions.
struct SlurmJobView {
  std::string id;
  std::string state;    ///< "RUNNING", "COMPLETED", ...; "" when slurmctld does not know the job
  std::string comment;  ///< the job's comment (a companion's is companion_comment(job))
  std::vector<std::string> nodes;
  std::string batch_host;  ///< BatchHost: where the batch script ran ("" when none)
};

/// What a controller taking a Slurm job over rebuilds of the backend's books, or why it
/// cannot.
struct SlurmTakeover {
  RmStatus status;
  CompanionBook companions;  ///< the job's companions and the nodes each holds (when ok)
  /// The record's first node when it is the job's batch host and Slurm no longer gives it
  /// the job: it failed, and Slurm took it out of the no-kill job (nothing else takes a
  /// batch host out of a running job). "" when the first node is still the job's.
  std::string first_node_lost;
};

/// Checks the record of a job taken over (`bellows run --attach`) against what Slurm says
/// now: `job` runs and still holds each of `nodes` that no companion of `companions` holds
/// (its own nodes); each companion runs, is one of `job` (its comment) and still holds the
/// nodes the record gives it; only the record's first node may be missing from the job, when
/// it is the job's batch host (first_node_lost). ok with the companion book to rebuild, else denied naming the
/// first thing wrong, e.g. "n3, a node of job 41 held by its companion job 43, is no longer
/// the companion's: Slurm gives job 43 n4". `views` holds what slurmctld said of the job and
/// of each companion, by id (a job missing from it counts as unknown to slurmctld).
/// No I/O: the Slurm backend asks slurmctld and calls this (SlurmResourceManager::take_over).
[[nodiscard]] SlurmTakeover check_slurm_takeover(const std::string& job, const std::vector<std::string>& nodes,
                                                 const std::vector<CompanionAllocation>& companions,
                                                 const std::vector<SlurmJobView>& views);

}  // namespace bellows::controller
