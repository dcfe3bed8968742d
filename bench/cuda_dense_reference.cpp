// The vendor libraries on one GPU, what Bellows' tile GEMM and Cholesky are measured against:
// cuBLAS DGEMM (C = A B + C) and cuSOLVER DPOTRF (lower) of n x n matrices, each
//   - resident: the matrices already in GPU memory, only the call timed;
//   - with copies: the inputs copied in from page-locked host memory and the result copied
//     back, on one stream, timed with the call (what a tile run from host-resident tiles does).
// Timed with CUDA events after a warm-up call; the median of --repeats. DPOTRF factors a fresh
// copy of the same symmetric positive definite matrix each time (the copy on the GPU is not
// timed), and its info must be 0.
//
//   bellows_cuda_dense_reference --n 8192,16384 --repeats 5
//
// Prints one line per measurement and, as the last line, a JSON object.

#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/cuda_libraries.hpp"

namespace {

using bellows::runtime::CudaMathLibraries;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}
void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + " failed with cuBLAS status " + std::to_string(status));
  }
}
void check_solver(cusolverStatus_t status, const char* what) {
  if (status != CUSOLVER_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + " failed with cuSOLVER status " + std::to_string(status));
  }
}

/// Page-locked host memory of `count` doubles.
struct HostMatrix {
  double* data = nullptr;
  explicit HostMatrix(std::size_t count) {
    check(cudaMallocHost(reinterpret_cast<void**>(&data), count * sizeof(double)), "cudaMallocHost");
  }
  HostMatrix(const HostMatrix&) = delete;
  HostMatrix& operator=(const HostMatrix&) = delete;
  ~HostMatrix() { cudaFreeHost(data); }
};

struct DeviceMatrix {
  double* data = nullptr;
  explicit DeviceMatrix(std::size_t count) {
    check(cudaMalloc(reinterpret_cast<void**>(&data), count * sizeof(double)), "cudaMalloc");
  }
  DeviceMatrix(const DeviceMatrix&) = delete;
  DeviceMatrix& operator=(const DeviceMatrix&) = delete;
  ~DeviceMatrix() { cudaFree(data); }
};

/// Uniform values in [-0.5, 0.5) from a 64-bit LCG: cheap enough for matrices of 2 GiB.
void fill_random(double* out, std::size_t count, std::uint64_t seed) {
  std::uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (std::size_t i = 0; i < count; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    out[i] = static_cast<double>(state >> 11) * 0x1.0p-53 - 0.5;
  }
}

/// Milliseconds of `body` on `stream` by events: the median of `repeats` after one warm-up.
/// `before` runs ahead of each call, untimed.
double median_ms(cudaStream_t stream, int repeats, const std::function<void()>& before,
                 const std::function<void()>& body) {
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  std::vector<float> times;
  for (int r = 0; r <= repeats; ++r) {
    before();
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    body();
    check(cudaEventRecord(end, stream), "cudaEventRecord");
    check(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0.0F;
    check(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
    if (r > 0) times.push_back(ms);  // the first is the warm-up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

nlohmann::json measure_dgemm(const CudaMathLibraries& math, cublasHandle_t cublas, cudaStream_t stream,
                             int n, int repeats) {
  const std::size_t count = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  const std::size_t bytes = count * sizeof(double);
  HostMatrix a(count), b(count), c(count);
  fill_random(a.data, count, 1);
  fill_random(b.data, count, 2);
  fill_random(c.data, count, 3);
  DeviceMatrix da(count), db(count), dc(count);
  const double one = 1.0;
  const auto call = [&] {
    check_blas(math.dgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da.data, n, db.data, n, &one,
                          dc.data, n), "cublasDgemm");
  };
  const auto copy_in = [&] {
    check(cudaMemcpyAsync(da.data, a.data, bytes, cudaMemcpyHostToDevice, stream), "copy A in");
    check(cudaMemcpyAsync(db.data, b.data, bytes, cudaMemcpyHostToDevice, stream), "copy B in");
    check(cudaMemcpyAsync(dc.data, c.data, bytes, cudaMemcpyHostToDevice, stream), "copy C in");
  };
  copy_in();
  const double resident = median_ms(stream, repeats, [] {}, call);
  const double with_copies = median_ms(stream, repeats, [] {}, [&] {
    copy_in();
    call();
    check(cudaMemcpyAsync(c.data, dc.data, bytes, cudaMemcpyDeviceToHost, stream), "copy C out");
  });
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  return {{"operation", "dgemm"}, {"n", n}, {"resident_seconds", resident / 1e3},
          {"resident_gflops", flops / (resident / 1e3) / 1e9}, {"with_copies_seconds", with_copies / 1e3},
          {"with_copies_gflops", flops / (with_copies / 1e3) / 1e9}};
}

nlohmann::json measure_dpotrf(const CudaMathLibraries& math, cusolverDnHandle_t cusolver, cudaStream_t stream,
                              int n, int repeats) {
  const std::size_t count = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  const std::size_t bytes = count * sizeof(double);
  HostMatrix spd(count), factor(count);
  // Symmetric, diagonally dominant (so positive definite): random off the diagonal, n on it.
  fill_random(spd.data, count, 4);
  for (int j = 0; j < n; ++j) {
    for (int i = j + 1; i < n; ++i) {
      spd.data[static_cast<std::size_t>(j) * n + i] = spd.data[static_cast<std::size_t>(i) * n + j];
    }
    spd.data[static_cast<std::size_t>(j) * n + j] = n;
  }
  DeviceMatrix pristine(count), work(count);
  check(cudaMemcpy(pristine.data, spd.data, bytes, cudaMemcpyHostToDevice), "copy the matrix in");
  int lwork = 0;
  check_solver(math.dpotrf_buffer_size(cusolver, CUBLAS_FILL_MODE_LOWER, n, work.data, n, &lwork),
               "cusolverDnDpotrf_bufferSize");
  DeviceMatrix workspace(static_cast<std::size_t>(lwork));
  int* info = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&info), sizeof(int)), "cudaMalloc(info)");
  const auto call = [&] {
    check_solver(math.dpotrf(cusolver, CUBLAS_FILL_MODE_LOWER, n, work.data, n, workspace.data, lwork, info),
                 "cusolverDnDpotrf");
  };
  const auto refresh = [&] {
    check(cudaMemcpyAsync(work.data, pristine.data, bytes, cudaMemcpyDeviceToDevice, stream), "refresh");
  };
  const double resident = median_ms(stream, repeats, refresh, call);
  const double with_copies = median_ms(stream, repeats, [] {}, [&] {
    check(cudaMemcpyAsync(work.data, spd.data, bytes, cudaMemcpyHostToDevice, stream), "copy in");
    call();
    check(cudaMemcpyAsync(factor.data, work.data, bytes, cudaMemcpyDeviceToHost, stream), "copy out");
  });
  int host_info = -1;
  check(cudaMemcpy(&host_info, info, sizeof(int), cudaMemcpyDeviceToHost), "copy info");
  cudaFree(info);
  const double flops = static_cast<double>(n) * n * n / 3.0;
  nlohmann::json row{{"operation", "dpotrf"}, {"n", n}, {"resident_seconds", resident / 1e3},
                     {"resident_gflops", flops / (resident / 1e3) / 1e9},
                     {"with_copies_seconds", with_copies / 1e3},
                     {"with_copies_gflops", flops / (with_copies / 1e3) / 1e9}, {"info", host_info}};
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes{8192, 16384};
  int repeats = 5;
  CLI::App cli("cuBLAS DGEMM and cuSOLVER DPOTRF on one GPU, resident and with copies");
  cli.add_option("--n", sizes, "matrix orders")->delimiter(',');
  cli.add_option("--repeats", repeats, "timed calls per measurement (median)")->check(CLI::PositiveNumber);
  CLI11_PARSE(cli, argc, argv);
  try {
    const CudaMathLibraries& math = bellows::runtime::cuda_math_libraries();
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cublasHandle_t cublas = nullptr;
    cusolverDnHandle_t cusolver = nullptr;
    check_blas(math.create_cublas(&cublas), "cublasCreate");
    check_blas(math.cublas_set_stream(cublas, stream), "cublasSetStream");
    check_solver(math.create_cusolver(&cusolver), "cusolverDnCreate");
    check_solver(math.cusolver_set_stream(cusolver, stream), "cusolverDnSetStream");
    nlohmann::json report = nlohmann::json::array();
    for (int n : sizes) {
      for (const nlohmann::json& row : {measure_dgemm(math, cublas, stream, n, repeats),
                                        measure_dpotrf(math, cusolver, stream, n, repeats)}) {
        std::printf("%-7s n=%-6d resident %.4f s (%.0f GFLOP/s), with copies %.4f s (%.0f GFLOP/s)\n",
                    row["operation"].get<std::string>().c_str(), n, row["resident_seconds"].get<double>(),
                    row["resident_gflops"].get<double>(), row["with_copies_seconds"].get<double>(),
                    row["with_copies_gflops"].get<double>());
        if (row.contains("info") && row["info"].get<int>() != 0) {
          throw std::runtime_error("cusolverDnDpotrf: info " + std::to_string(row["info"].get<int>()));
        }
        report.push_back(row);
      }
    }
    math.destroy_cusolver(cusolver);
    math.destroy_cublas(cublas);
    cudaStreamDestroy(stream);
    std::printf("%s\n", nlohmann::json{{"reference", report}}.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bellows_cuda_dense_reference: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
