#include "peer_tiles.hpp"

#include "tile_pool.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace bellows::runtime {
namespace {

/// The line of /proc/PID/maps whose range holds `address`.
struct Region {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::uint64_t offset = 0;
  std::string path;
};

bool find_region(pid_t pid, std::uint64_t address, Region& out, bool& readable) {
  const std::string maps = "/proc/" + std::to_string(pid) + "/maps";
  FILE* f = std::fopen(maps.c_str(), "re");
  readable = f != nullptr;
  if (f == nullptr) return false;
  char line[512];
  bool found = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    std::uint64_t start = 0, end = 0, offset = 0;
    int path_at = 0;
    if (std::sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %" SCNx64 " %*s %*s %n", &start, &end,
                    &offset, &path_at) < 3) {
      continue;
    }
    if (address < start || address >= end) continue;
    out.start = start;
    out.end = end;
    out.offset = offset;
    out.path = line + path_at;
    while (!out.path.empty() && (out.path.back() == '\n' || out.path.back() == ' ')) out.path.pop_back();
    found = true;
    break;
  }
  std::fclose(f);
  return found;
}

/// Opens the file descriptor of `pid` whose link reads `path` (read-only), or returns -1.
int open_peer_fd(pid_t pid, const std::string& path) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int fd = -1;
  char target[512];
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string link = dir + "/" + e->d_name;
    const auto n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (path == target) {
      fd = ::open(link.c_str(), O_RDONLY | O_CLOEXEC);
      break;
    }
  }
  ::closedir(d);
  return fd;
}

}  // namespace

PeerTiles::~PeerTiles() {
  for (const auto& m : mappings_) {
    if (m.local != nullptr) {
      ::munmap(const_cast<std::byte*>(m.local), static_cast<std::size_t>(m.end - m.start));
    }
  }
}

const PeerTiles::Mapping* PeerTiles::map_slab(pid_t pid, std::uint64_t address) {
  Region region;
  bool readable = false;
  if (!find_region(pid, address, region, readable)) {
    if (!readable) unreadable_.push_back(pid);
    return nullptr;
  }
  Mapping m{pid, region.start, region.end, nullptr};
  const std::string slab_path = std::string("/memfd:") + tile_pool::kSlabNamePrefix;
  if (region.path.compare(0, slab_path.size(), slab_path) == 0 && region.offset == 0) {
    const int fd = open_peer_fd(pid, region.path);
    struct stat info {};
    if (fd >= 0 && ::fstat(fd, &info) == 0 &&
        static_cast<std::uint64_t>(info.st_size) >= region.end - region.start) {
      void* p = ::mmap(nullptr, static_cast<std::size_t>(region.end - region.start), PROT_READ,
                       MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) m.local = static_cast<const std::byte*>(p);
    }
    if (fd >= 0) ::close(fd);
  }
  mappings_.push_back(m);
  return &mappings_.back();
}

bool PeerTiles::read(pid_t pid, std::uint64_t address, void* local, std::size_t bytes) {
  const std::byte* from = nullptr;
  {
    std::lock_guard lock(mutex_);
    const Mapping* found = nullptr;
    for (const auto& m : mappings_) {
      if (m.pid == pid && address >= m.start && address < m.end) {
        found = &m;
        break;
      }
    }
    if (found == nullptr) {
      for (const auto p : unreadable_) {
        if (p == pid) return false;
      }
      found = map_slab(pid, address);
    }
    if (found == nullptr || found->local == nullptr || address + bytes > found->end) return false;
    from = found->local + (address - found->start);
  }
  std::memcpy(local, from, bytes);
  return true;
}

}  // namespace bellows::runtime
