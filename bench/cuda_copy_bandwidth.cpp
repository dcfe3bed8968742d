// What a copy between host and GPU costs, by where the host buffer lives: plain pageable
// memory (malloc), a shared-memory slab like the tile pool's (memfd, MAP_SHARED), the same
// slab page-locked with cudaHostRegister (what the CUDA device does with the tile pool's slabs,
// RuntimeOptions::cuda_pinned_tiles), and cudaMallocHost. Copies go one after the other on
// one stream, host to device, then device to host.
//
//   bellows_cuda_copy_bandwidth --sizes-kib 512,2048,8192
//
// Prints one line per size and, as the last line, a JSON object with GB/s (1e9 bytes/s) and
// the microseconds cudaHostRegister took per slab.

#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

/// GB/s of `repeats` copies of `bytes` between `host` and `device` in direction `kind`.
double copy_rate(void* host, void* device, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                 int repeats) {
  void* to = kind == cudaMemcpyHostToDevice ? device : host;
  const void* from = kind == cudaMemcpyHostToDevice ? host : device;
  for (int i = 0; i < 2; ++i) check(cudaMemcpyAsync(to, from, bytes, kind, stream), "warm-up copy");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const auto start = Clock::now();
  for (int i = 0; i < repeats; ++i) check(cudaMemcpyAsync(to, from, bytes, kind, stream), "copy");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(bytes) * repeats / seconds / 1e9;
}

struct SharedSlab {
  std::size_t bytes = 0;
  int fd = -1;
  void* base = MAP_FAILED;
  explicit SharedSlab(std::size_t size) : bytes(size) {
    fd = ::memfd_create("bellows-copy-bench", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) throw std::runtime_error("memfd_create");
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) throw std::runtime_error("mmap of the memfd");
    std::memset(base, 1, bytes);
  }
  SharedSlab(const SharedSlab&) = delete;
  SharedSlab& operator=(const SharedSlab&) = delete;
  ~SharedSlab() {
    if (base != MAP_FAILED) ::munmap(base, bytes);
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes_kib{512, 2048, 8192};
  std::size_t bytes_per_size = std::size_t{256} << 20;
  CLI::App cli("Host <-> GPU copy bandwidth by host memory kind");
  cli.add_option("--sizes-kib", sizes_kib, "copy sizes, KiB")->delimiter(',');
  cli.add_option("--bytes", bytes_per_size, "bytes copied per size and direction");
  CLI11_PARSE(cli, argc, argv);
  try {
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    nlohmann::json report = nlohmann::json::array();
    for (int kib : sizes_kib) {
      const std::size_t bytes = static_cast<std::size_t>(kib) << 10;
      const int repeats = static_cast<int>(std::max<std::size_t>(bytes_per_size / bytes, 4));
      void* device = nullptr;
      check(cudaMalloc(&device, bytes), "cudaMalloc");
      std::vector<char> pageable(bytes, 1);
      SharedSlab slab(bytes);
      void* locked = nullptr;
      check(cudaMallocHost(&locked, bytes), "cudaMallocHost");
      std::memset(locked, 1, bytes);
      nlohmann::json row{{"kib", kib}};
      auto measure = [&](const char* name, void* host) {
        row[name] = {{"to_device", copy_rate(host, device, bytes, cudaMemcpyHostToDevice, stream, repeats)},
                     {"to_host", copy_rate(host, device, bytes, cudaMemcpyDeviceToHost, stream, repeats)}};
      };
      measure("malloc", pageable.data());
      measure("shared_slab", slab.base);
      const auto start = Clock::now();
      check(cudaHostRegister(slab.base, bytes, cudaHostRegisterPortable), "cudaHostRegister");
      row["register_us"] = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      measure("shared_slab_registered", slab.base);
      check(cudaHostUnregister(slab.base), "cudaHostUnregister");
      measure("cuda_malloc_host", locked);
      std::printf("%6d KiB, GB/s to device / to host: malloc %.1f / %.1f, shared slab %.1f / %.1f, "
                  "registered %.1f / %.1f (cudaHostRegister %.0f us), cudaMallocHost %.1f / %.1f\n",
                  kib, row["malloc"]["to_device"].get<double>(), row["malloc"]["to_host"].get<double>(),
                  row["shared_slab"]["to_device"].get<double>(), row["shared_slab"]["to_host"].get<double>(),
                  row["shared_slab_registered"]["to_device"].get<double>(),
                  row["shared_slab_registered"]["to_host"].get<double>(), row["register_us"].get<double>(),
                  row["cuda_malloc_host"]["to_device"].get<double>(),
                  row["cuda_malloc_host"]["to_host"].get<double>());
      check(cudaFreeHost(locked), "cudaFreeHost");
      check(cudaFree(device), "cudaFree");
      report.push_back(row);
    }
    cudaStreamDestroy(stream);
    std::printf("%s\n", nlohmann::json{{"copies", report}}.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bellows_cuda_copy_bandwidth: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
