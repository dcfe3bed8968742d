#pragma once
// Where a job's Unix sockets live: a short private directory of this host, whatever the length
// of the job directory's path.
//
// A Unix socket's path holds at most 107 bytes (sockaddr_un::sun_path), and a job directory
// may be anywhere a user or a site puts it (/gpfs/projects/ACCOUNT/USER/...). So sockets are
// never bound inside the job directory: each process that binds some gets a directory of its
// own under the socket root, named after its job and a hash of the job directory's path,
//
//   SOCKET_ROOT/JOB-HASH/controller.sock
//
// and the job directory records the endpoint (protocol::JobDirectory::controller_endpoint_file).
// SOCKET_ROOT is $BELLOWS_SOCKET_DIR, else $XDG_RUNTIME_DIR/bellows, else /tmp/bellows-UID/sockets;
// every level Bellows creates is 0700 and owned by the user, so only the user (and root) can
// reach a socket, as before.
//
// The directory holds an `owner` file (the pid and start time of the process that made it) and
// a `job_dir` file (the job directory's path, so that a job can be found by its id on this
// host while it runs, wherever its directory is).
// The owner removes the directory when it ends; a directory whose owner was killed is removed
// by the next SocketDirectory made under the same root.
//
// Thread safety: none needed; a SocketDirectory is made and destroyed on one thread.

#include <cstddef>
#include <filesystem>
#include <string>

namespace bellows::transport {

/// The longest path a Unix socket can be bound to or connected to: sizeof(sun_path) - 1.
inline constexpr std::size_t kMaxSocketPathLength = 107;

/// The variable that moves the socket root.
inline constexpr const char* kSocketDirVariable = "BELLOWS_SOCKET_DIR";

/// $BELLOWS_SOCKET_DIR, else $XDG_RUNTIME_DIR/bellows when XDG_RUNTIME_DIR names a directory,
/// else /tmp/bellows-UID/sockets.
[[nodiscard]] std::filesystem::path socket_root();

/// "" when `path` fits in a Unix socket address, else what is wrong and what to do: the path,
/// its length, the limit and the variable to set.
[[nodiscard]] std::string socket_path_problem(const std::filesystem::path& path);

/// "" when every socket a SocketDirectory under `root` may hold fits (a 32-character job
/// name, its hash and "controller.sock"), else what is wrong with `root` and what to set.
/// Lets a program refuse a root before it starts anything.
[[nodiscard]] std::string socket_root_problem(const std::filesystem::path& root);

/// A private directory for the sockets of one process of job `job`.
class SocketDirectory {
 public:
  /// Creates SOCKET_ROOT/JOB-HASH (HASH: 8 hex digits of `job_dir`'s path), 0700, records this
  /// process as its owner, and removes the directories under the root whose owner is gone.
  /// Throws TransportError naming the directory and the problem (a root others can enter, a
  /// directory another live process owns, a path too long for a socket).
  SocketDirectory(const std::string& job, const std::filesystem::path& job_dir,
                  std::filesystem::path root = socket_root());
  /// Removes the directory and everything in it.
  ~SocketDirectory();
  SocketDirectory(const SocketDirectory&) = delete;
  SocketDirectory& operator=(const SocketDirectory&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  /// "ipc://DIR/NAME". Throws TransportError (socket_path_problem) when DIR/NAME is too long.
  [[nodiscard]] std::string ipc_endpoint(const std::string& name) const;

  /// Removes the directories under `root` whose owner process no longer exists; returns how
  /// many. Directories without an owner file are left alone.
  static std::size_t remove_stale(const std::filesystem::path& root);

  /// The job directory of the running job `job` (one whose SocketDirectory under `root` has
  /// a live owner), or "" when there is none.
  static std::filesystem::path find_job_dir(const std::string& job,
                                            const std::filesystem::path& root = socket_root());

 private:
  std::filesystem::path path_;
};

}  // namespace bellows::transport
