#pragma once
// Where `bellows run` keeps a job's files, and how the other subcommands find them:
//   RUN_DIR/JOB/            the job's private directory (protocol::JobDirectory: where the
//                           controller listens, event log, one directory per node with its
//                           daemon's URI and log)
//   RUN_DIR/latest          a symbolic link to the job started last
// RUN_DIR is $BELLOWS_RUN_DIR, else /tmp/bellows-UID for a job of the local backend and
// $HOME/.bellows/jobs for a Slurm job, whose daemons on other nodes must see its directory.

#include <filesystem>
#include <string>

namespace bellows::cli {

/// $BELLOWS_RUN_DIR or /tmp/bellows-UID: the local backend's jobs, on this host alone.
[[nodiscard]] std::filesystem::path run_dir();

/// $BELLOWS_RUN_DIR or $HOME/.bellows/jobs: the jobs of a cluster, whose directory every node
/// of the job must see (a home directory is shared on a cluster; /tmp is not). Throws
/// std::runtime_error when neither variable is set.
[[nodiscard]] std::filesystem::path cluster_run_dir();

/// The state file of the host's local node pool, shared by every `bellows run` of the local
/// backend: $BELLOWS_LOCAL_POOL, or /tmp/bellows-UID/local-pool.json (the directory is made
/// 0700 when missing).
[[nodiscard]] std::filesystem::path local_pool_file();

/// The directory of job `job` ("" or "latest": the job started last): RUN_DIR/JOB (the local
/// RUN_DIR, then the cluster's), else the
/// one a job of that id running on this host named in its socket directory
/// (transport::SocketDirectory), else the one a Slurm job of that id names in its comment.
/// Throws std::runtime_error naming what is missing.
[[nodiscard]] std::filesystem::path find_job_dir(const std::string& job);

}  // namespace bellows::cli
