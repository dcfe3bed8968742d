// What moving one tile costs on this machine, for comparison with what the runtime achieves
// (bench/tile_moves.py): single-thread memcpy, and process_vm_readv from another process
// (the same-host transport's copy, same_host.hpp), for buffers of the given sizes.
//
// Each size is copied in three ways:
//  - hot:       the same source and destination each time (in cache when they fit);
//  - streaming: source and destination cycle through 64 MiB of buffers, out of cache, but
//               every page is already mapped (a tile pool that recycles buffers);
//  - faulting:  the destination is freshly mmap'd for each copy and unmapped after it, so
//               every page of it faults in (a buffer allocated per transfer).
//
//   bellows_copy_bandwidth --sizes-kib 512,2048 --seconds 0.3
//
// Prints one line per case and, as the last line, a JSON object with GB/s (1e9 bytes/s).

#include <CLI/CLI.hpp>

#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kStreamBytes = std::size_t{64} << 20;

std::byte* map_bytes(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
  return static_cast<std::byte*>(p);
}

/// A set of touched buffers of `bytes` each, `count` of them.
std::vector<std::byte*> buffers(std::size_t bytes, std::size_t count, int fill) {
  std::vector<std::byte*> out;
  for (std::size_t i = 0; i < count; ++i) {
    out.push_back(map_bytes(bytes));
    std::memset(out.back(), fill, bytes);
  }
  return out;
}

/// Repeats `copy(i)` for about `seconds` (at least 8 times); returns GB/s.
double rate(std::size_t bytes, double seconds, const std::function<void(std::size_t)>& copy) {
  for (std::size_t i = 0; i < 4; ++i) copy(i);  // warm up
  std::size_t n = 0;
  const auto start = Clock::now();
  double elapsed = 0.0;
  while (n < 8 || elapsed < seconds) {
    copy(n++);
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return static_cast<double>(bytes) * static_cast<double>(n) / elapsed / 1e9;
}

void read_from(pid_t pid, const std::byte* remote, std::byte* local, std::size_t bytes) {
  std::size_t done = 0;
  while (done < bytes) {
    iovec l{local + done, bytes - done};
    iovec r{const_cast<std::byte*>(remote) + done, bytes - done};
    const auto n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) throw std::runtime_error(std::string("process_vm_readv: ") + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"memcpy and process_vm_readv bandwidth, hot, streaming and faulting"};
  std::vector<std::size_t> sizes_kib{512, 2048};
  double seconds = 0.3;
  app.add_option("--sizes-kib", sizes_kib, "buffer sizes, KiB")->delimiter(',');
  app.add_option("--seconds", seconds, "time per case");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json report;
  report["gbytes_per_s"] = nlohmann::json::object();
  for (const auto kib : sizes_kib) {
    const std::size_t bytes = kib * 1024;
    const std::size_t ring = std::max<std::size_t>(2, kStreamBytes / bytes);
    auto sources = buffers(bytes, ring, 1);
    auto targets = buffers(bytes, ring, 2);

    // The reader's peer: a child holds the same (copy-on-write, already touched) sources at
    // the same addresses; it touches them once so that they are its own pages, then waits.
    int gate[2];
    if (::pipe(gate) != 0) throw std::runtime_error("pipe");
    const pid_t child = ::fork();
    if (child == 0) {
      ::close(gate[1]);
      for (auto* s : sources) std::memset(s, 3, bytes);
      char c = 0;
      [[maybe_unused]] auto r = ::read(gate[0], &c, 1);  // returns when the parent closes it
      ::_exit(0);
    }
    ::close(gate[0]);
    ::usleep(200000);  // the child's memset

    auto& row = report["gbytes_per_s"][std::to_string(kib) + "KiB"];
    row["memcpy_hot"] = rate(bytes, seconds, [&](std::size_t) {
      std::memcpy(targets[0], sources[0], bytes);
    });
    row["memcpy_streaming"] = rate(bytes, seconds, [&](std::size_t i) {
      std::memcpy(targets[i % ring], sources[(i * 7 + 3) % ring], bytes);
    });
    row["memcpy_faulting"] = rate(bytes, seconds, [&](std::size_t i) {
      auto* fresh = map_bytes(bytes);
      std::memcpy(fresh, sources[i % ring], bytes);
      ::munmap(fresh, bytes);
    });
    row["process_vm_readv_hot"] = rate(bytes, seconds, [&](std::size_t) {
      read_from(child, sources[0], targets[0], bytes);
    });
    row["process_vm_readv_streaming"] = rate(bytes, seconds, [&](std::size_t i) {
      read_from(child, sources[(i * 7 + 3) % ring], targets[i % ring], bytes);
    });
    row["process_vm_readv_faulting"] = rate(bytes, seconds, [&](std::size_t i) {
      auto* fresh = map_bytes(bytes);
      read_from(child, sources[i % ring], fresh, bytes);
      ::munmap(fresh, bytes);
    });
    ::close(gate[1]);
    ::waitpid(child, nullptr, 0);
    for (auto* p : sources) ::munmap(p, bytes);
    for (auto* p : targets) ::munmap(p, bytes);
    for (const auto& [name, value] : row.items()) {
      std::printf("%6zu KiB  %-28s %6.2f GB/s\n", kib, name.c_str(), value.get<double>());
    }
  }
  std::printf("%s\n", report.dump().c_str());
  return 0;
}
