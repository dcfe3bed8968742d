#include "job_dir.hpp"

#if BELLOWS_HAVE_SLURM_BACKEND
#include <bellows/controller/slurm_resource_manager.hpp>
#endif

#include <bellows/transport/socket_directory.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>

namespace bellows::cli {

namespace {

/// /tmp/bellows-UID: where this user's job files, pool and sockets go unless told otherwise.
std::filesystem::path user_tmp_dir() {
  return std::filesystem::path("/tmp") / ("bellows-" + std::to_string(::geteuid()));
}

}  // namespace

std::filesystem::path run_dir() {
  if (const char* dir = std::getenv("BELLOWS_RUN_DIR"); dir != nullptr && *dir != '\0') return dir;
  return user_tmp_dir();
}

std::filesystem::path cluster_run_dir() {
  if (const char* dir = std::getenv("BELLOWS_RUN_DIR"); dir != nullptr && *dir != '\0') return dir;
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0')
    throw std::runtime_error("neither BELLOWS_RUN_DIR nor HOME is set: name a directory every node of the "
                             "job sees with BELLOWS_RUN_DIR");
  return std::filesystem::path(home) / ".bellows" / "jobs";
}

std::filesystem::path local_pool_file() {
  if (const char* file = std::getenv("BELLOWS_LOCAL_POOL"); file != nullptr && *file != '\0') return file;
  const auto dir = user_tmp_dir();
  std::error_code ec;
  if (std::filesystem::create_directory(dir, ec))
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace, ec);
  return dir / "local-pool.json";
}

namespace {

/// The job directory a Slurm job's `bellows run` wrote into the job's comment, or "" with
/// why in `why`. Asks Slurm only where it is configured (libslurm exits on a missing
/// slurm.conf).
std::filesystem::path job_dir_from_slurm(const std::string& job, std::string& why) {
#if BELLOWS_HAVE_SLURM_BACKEND
  if (job.empty() || !std::all_of(job.begin(), job.end(), [](unsigned char c) { return std::isdigit(c); }))
    return {};
  const char* conf = std::getenv("SLURM_CONF");
  std::error_code ec;
  if ((conf == nullptr || *conf == '\0') && !std::filesystem::exists("/etc/slurm/slurm.conf", ec)) return {};
  controller::SlurmResourceManager slurm;
  auto published = slurm.published_job_dir(job);
  if (!published.status.ok()) {
    why = published.status.text;
    return {};
  }
  return published.value;
#else
  (void)job;
  (void)why;
  return {};
#endif
}

}  // namespace

std::filesystem::path find_job_dir(const std::string& job) {
  const auto name = job.empty() ? std::string("latest") : job;
  auto dir = run_dir() / name;
  std::error_code ec;
  const char* home = std::getenv("HOME");
  if (!std::filesystem::is_directory(dir, ec) && home != nullptr && *home != '\0') {
    // A Slurm job's directory, or the Slurm job started last, in the cluster's run directory.
    const auto cluster = cluster_run_dir() / name;
    if (std::filesystem::is_directory(cluster, ec)) dir = cluster;
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    if (job.empty() || job == "latest")
      throw std::runtime_error("no job has been started with bellows run (no " + dir.string() + ")");
    // A job running on this host says where its directory is in its socket directory.
    if (auto running = transport::SocketDirectory::find_job_dir(job);
        !running.empty() && std::filesystem::is_directory(running, ec)) {
      return std::filesystem::canonical(running, ec).empty() ? running : std::filesystem::canonical(running);
    }
    std::string why;
    const auto published = job_dir_from_slurm(job, why);
    if (published.empty() || !std::filesystem::is_directory(published, ec)) {
      std::string text = "no job " + job + " (no directory " + dir.string();
      if (!published.empty()) text += " nor " + published.string() + ", named by the Slurm job";
      if (!why.empty()) text += "; " + why;
      throw std::runtime_error(text + ")");
    }
    dir = published;
  }
  return std::filesystem::canonical(dir, ec).empty() ? dir : std::filesystem::canonical(dir);
}

}  // namespace bellows::cli
