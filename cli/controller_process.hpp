#pragma once
// What the two ways of running a job's controller share: `bellows run -- PROGRAM` (a new job,
// run_command.cpp) and `bellows run --attach JOB` (a running job taken over,
// attach_command.cpp).

#include <bellows/controller/controller_service.hpp>
#include <bellows/controller/local_node_pool.hpp>
#include <bellows/policy/policy.hpp>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace bellows::cli {

/// bellowsd next to this executable (installed), or in the build tree's daemon/ folder; else
/// whatever `bellowsd` the PATH gives.
[[nodiscard]] std::filesystem::path find_bellowsd();

/// srun: $BELLOWS_SRUN, else whatever `srun` the PATH gives.
[[nodiscard]] std::filesystem::path find_srun();

/// The launcher of job `job`'s node daemons, bellowsd with the job's directory and its policy's
/// recovery.heartbeat_timeout (the default without a policy): on this host (the local backend),
/// or under Slurm by srun, each as a step of the Slurm job `slurm_job_of` names for its node
/// (the job itself, or a companion allocation it spans).
[[nodiscard]] std::unique_ptr<controller::NodeLauncher> local_daemon_launcher(
    const std::filesystem::path& job_dir, bool verbose, const std::optional<policy::Policy>& policy);
[[nodiscard]] std::unique_ptr<controller::NodeLauncher> slurm_daemon_launcher(
    const std::string& job, const std::filesystem::path& job_dir, bool verbose,
    const std::optional<policy::Policy>& policy, std::function<std::string(const std::string& node)> slurm_job_of);

/// The progress line: job, nodes, iteration, GFLOP/s and the last resize.
[[nodiscard]] std::string progress_line(const controller::ControllerService& service);

/// `bellows run --attach JOB`: takes the running job JOB (an id, "latest" or a job directory's
/// absolute path) over; returns the exit status (the job's, as its first node's daemon
/// reported it).
int attach_job(const std::string& job, bool verbose, bool quiet);

}  // namespace bellows::cli
