#pragma once
// One controller per job: JOB_DIR/controller.lock, held (flock) by the controller that runs
// the job, with that process's identity in it ("PID START", protocol::ProcessIdentity). The
// kernel lets the lock go when the process ends however it ends (a SIGKILL too), so a
// controller that died leaves no stale lock; a second controller of a job whose controller
// still runs (`bellows run --attach` twice) is refused, naming the holder.
//
// Thread safety: a ControllerLock is made and destroyed on one thread.

#include <filesystem>

namespace bellows::controller {

class ControllerLock {
 public:
  /// Locks `job_dir`/controller.lock (created 0600, close-on-exec so that no child keeps it)
  /// and writes this process into it. Throws std::runtime_error naming the job directory and
  /// the process that holds the lock, or the file and the system's reason.
  explicit ControllerLock(const std::filesystem::path& job_dir);
  /// Unlocks (the file stays; its content names the last holder).
  ~ControllerLock();
  ControllerLock(const ControllerLock&) = delete;
  ControllerLock& operator=(const ControllerLock&) = delete;

  /// True while a controller holds `job_dir`'s lock: a shared lock on the file is tried and,
  /// when granted, dropped at once (false too when there is no lock file). Throws
  /// std::runtime_error naming the file and the system's reason when it cannot be read.
  [[nodiscard]] static bool held(const std::filesystem::path& job_dir);

  /// JOB_DIR/controller.lock.
  [[nodiscard]] static std::filesystem::path path_in(const std::filesystem::path& job_dir) {
    return job_dir / "controller.lock";
  }

 private:
  int fd_ = -1;
};

}  // namespace bellows::controller
