#pragma once
// What the two ways of running a job's controller share: `bellows run -- PROGRAM` (a new job,
// run_command.cpp) and `bellows run --attach JOB` (a running job taken over,
// attach_command.cpp).

#include <bellows/controller/controller_service.hpp>

#include <filesystem>
#include <string>

namespace bellows::cli {

/// bellowsd next to this executable (installed), or in the build tree's daemon/ folder; else
/// whatever `bellowsd` the PATH gives.
[[nodiscard]] std::filesystem::path find_bellowsd();

/// srun: $BELLOWS_SRUN, else whatever `srun` the PATH gives.
[[nodiscard]] std::filesystem::path find_srun();

/// The progress line: job, nodes, iteration, GFLOP/s and the last resize.
[[nodiscard]] std::string progress_line(const controller::ControllerService& service);

/// `bellows run --attach JOB`: takes the running job JOB (an id, "latest" or a job directory's
/// absolute path) over; returns the exit status (the job's, as its first node's daemon
/// reported it).
int attach_job(const std::string& job, bool verbose, bool quiet);

}  // namespace bellows::cli
