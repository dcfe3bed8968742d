#include "bellows/controller/controller_lock.hpp"

#include <bellows/protocol/process_identity.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace bellows::controller {

ControllerLock::ControllerLock(const std::filesystem::path& job_dir) {
  const auto path = path_in(job_dir);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char text[128] = {};
    const ssize_t n = ::pread(fd_, text, sizeof text - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (error != EWOULDBLOCK)
      throw std::runtime_error("cannot lock " + path.string() + ": " + std::strerror(error));
    const auto holder = protocol::ProcessIdentity::parse(n > 0 ? std::string(text, static_cast<std::size_t>(n)) : "");
    throw std::runtime_error("the job in " + job_dir.string() + " has a controller already (" +
                             (holder.pid > 0 ? "process " + std::to_string(holder.pid) : std::string("a process")) +
                             " holds " + path.filename().string() + "): one controller per job");
  }
  const std::string self = protocol::ProcessIdentity::self().text() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, self.data(), self.size(), 0) != static_cast<ssize_t>(self.size())) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(error));
  }
}

bool ControllerLock::held(const std::filesystem::path& job_dir) {
  const auto path = path_in(job_dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
  }
  const bool free = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
  const int error = errno;
  ::close(fd);  // drops the shared lock, if taken
  if (!free && error != EWOULDBLOCK) throw std::runtime_error("cannot lock " + path.string() + ": " + std::strerror(error));
  return !free;
}

ControllerLock::~ControllerLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace bellows::controller
