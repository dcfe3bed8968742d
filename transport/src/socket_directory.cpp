#include "bellows/transport/socket_directory.hpp"

#include "bellows/transport/security.hpp"

#include <bellows/protocol/process_identity.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace bellows::transport {
namespace {

namespace fs = std::filesystem;

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

/// FNV-1a, 32 bits: stable across builds and hosts, so the name is the same wherever it is
/// computed.
std::string hash_hex(const std::string& text) {
  std::uint32_t h = 2166136261u;
  for (const unsigned char c : text) {
    h ^= c;
    h *= 16777619u;
  }
  char out[9];
  std::snprintf(out, sizeof out, "%08x", h);
  return out;
}

/// The job id as a file name: [A-Za-z0-9._-], at most 32 characters.
std::string file_name_of(const std::string& job) {
  std::string name;
  for (const char c : job) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    name += plain ? c : '_';
    if (name.size() == 32) break;
  }
  return name.empty() ? std::string("job") : name;
}

/// True when the directory's owner file names a process that no longer exists.
bool owner_gone(const fs::path& dir) {
  std::ifstream in(dir / "owner");
  std::string text;
  if (!std::getline(in, text)) return false;  // no owner file: not ours to judge
  const auto owner = protocol::ProcessIdentity::parse(text);
  return owner.pid > 0 && !owner.alive();
}

}  // namespace

fs::path socket_root() {
  if (const std::string dir = environment(kSocketDirVariable); !dir.empty()) return dir;
  if (const std::string xdg = environment("XDG_RUNTIME_DIR"); !xdg.empty()) {
    std::error_code ec;
    if (fs::is_directory(xdg, ec)) return fs::path(xdg) / "bellows";
  }
  return fs::path("/tmp") / ("bellows-" + std::to_string(::geteuid())) / "sockets";
}

/// What to do about a socket path that is too long.
std::string shorter_root_advice() {
  return std::string("set ") + kSocketDirVariable + " to a shorter private directory of this host (such as /tmp/bellows-" +
         std::to_string(::geteuid()) + ")";
}

std::string socket_path_problem(const fs::path& path) {
  const std::size_t length = path.string().size();
  if (length <= kMaxSocketPathLength) return {};
  return "the socket path " + path.string() + " has " + std::to_string(length) +
         " characters, more than the " + std::to_string(kMaxSocketPathLength) + " a Unix socket allows; " +
         shorter_root_advice();
}

std::string socket_root_problem(const fs::path& root) {
  constexpr std::size_t longest_directory = 32 + 1 + 8;  // job name, '-', hash
  const std::size_t length = root.string().size() + 1 + longest_directory + 1 + std::strlen("controller.sock");
  if (length <= kMaxSocketPathLength) return {};
  return "the socket directory " + root.string() + " (" + kSocketDirVariable + ", XDG_RUNTIME_DIR or " +
         "/tmp) is too long: a job's sockets under it would have up to " + std::to_string(length) +
         " characters, more than the " + std::to_string(kMaxSocketPathLength) + " a Unix socket allows; " +
         shorter_root_advice();
}

SocketDirectory::SocketDirectory(const std::string& job, const fs::path& job_dir, fs::path root) {
  if (const std::string problem = socket_root_problem(root); !problem.empty())
    throw TransportError(problem);
  // Missing levels are made 0700 (/tmp/bellows-UID, then sockets); the root must end up
  // private whoever made it.
  fs::path level;
  for (const auto& part : fs::absolute(root).lexically_normal()) {
    level /= part;
    if (::mkdir(level.c_str(), 0700) != 0 && errno != EEXIST)
      throw TransportError("cannot create directory " + level.string() + ": " + std::strerror(errno));
  }
  prepare_private_directory(root);
  remove_stale(root);

  const std::string job_path = fs::absolute(job_dir).lexically_normal().string();
  path_ = root / (file_name_of(job) + "-" + hash_hex(job_path));
  if (::mkdir(path_.c_str(), 0700) != 0) {
    if (errno != EEXIST)
      throw TransportError("cannot create directory " + path_.string() + ": " + std::strerror(errno));
    // Taken by a live process of the same job directory, or left without an owner by one
    // that died as it made it (remove_stale took those whose owner is gone).
    std::ifstream in(path_ / "owner");
    long pid = 0;
    if (in >> pid && pid > 0)
      throw TransportError("socket directory " + path_.string() + " belongs to process " +
                           std::to_string(pid) + ", which is still running (the same job twice?)");
    std::error_code ec;
    fs::remove_all(path_, ec);
    if (::mkdir(path_.c_str(), 0700) != 0)
      throw TransportError("cannot create directory " + path_.string() + ": " + std::strerror(errno));
  }
  for (const auto& [file, text] : {std::pair{"job_dir", job_path},
                                    std::pair{"owner", protocol::ProcessIdentity::self().text()}}) {
    std::ofstream out(path_ / file);
    out << text << '\n';
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove_all(path_, ec);
      throw TransportError("cannot write " + (path_ / file).string());
    }
  }
}

SocketDirectory::~SocketDirectory() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string SocketDirectory::ipc_endpoint(const std::string& name) const {
  const fs::path socket = path_ / name;
  if (const std::string problem = socket_path_problem(socket); !problem.empty())
    throw TransportError(problem);
  return "ipc://" + socket.string();
}

fs::path SocketDirectory::find_job_dir(const std::string& job, const fs::path& root) {
  const std::string prefix = file_name_of(job) + "-";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != prefix.size() + 8 || name.rfind(prefix, 0) != 0) continue;
    if (owner_gone(entry.path())) continue;
    std::ifstream in(entry.path() / "job_dir");
    std::string dir;
    if (std::getline(in, dir) && !dir.empty()) return dir;
  }
  return {};
}

std::size_t SocketDirectory::remove_stale(const fs::path& root) {
  std::size_t removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::error_code kind;
    if (!entry.is_directory(kind) || entry.is_symlink(kind)) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (!owner_gone(entry.path())) continue;
    std::error_code gone;
    fs::remove_all(entry.path(), gone);
    if (!gone) ++removed;
  }
  return removed;
}

}  // namespace bellows::transport
