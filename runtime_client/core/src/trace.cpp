#include "trace.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace bellows::runtime {

Trace::Trace(std::string path, int rank) : path_(std::move(path)), rank_(rank) {}

void Trace::begin_iteration(int iteration) {
  std::lock_guard lock(mutex_);
  iteration_ = iteration;
  samples_.clear();
  last_seconds_ = -1.0;
}

void Trace::sample(double seconds, std::size_t ready, std::uint64_t completed) {
  std::lock_guard lock(mutex_);
  if (last_seconds_ >= 0.0 && seconds - last_seconds_ < kMinInterval && ready != 0) return;
  samples_.push_back({seconds, ready, completed});
  last_seconds_ = seconds;
}

bool Trace::flush() {
  std::string text;
  {
    std::lock_guard lock(mutex_);
    char line[160];
    for (const auto& s : samples_) {
      const int n = std::snprintf(line, sizeof line,
                                  "{\"rank\":%d,\"iteration\":%d,\"t\":%.6f,\"ready\":%zu,"
                                  "\"completed\":%llu}\n",
                                  rank_, iteration_, s.seconds, s.ready,
                                  static_cast<unsigned long long>(s.completed));
      text.append(line, static_cast<std::size_t>(n));
    }
    samples_.clear();
  }
  return append(path_, rank_, text);
}

bool Trace::append(const std::string& path, int rank, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "bellows: rank %d: cannot open trace file %s: %s\n", rank,
                 path.c_str(), std::strerror(errno));
    return false;
  }
  const ssize_t written = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) {
    std::fprintf(stderr, "bellows: rank %d: short write to trace file %s\n", rank, path.c_str());
    return false;
  }
  return true;
}

}  // namespace bellows::runtime
