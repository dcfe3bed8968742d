// cuBLAS and cuSOLVER are loaded on first use, not at process start: loading them needs
// no GPU, so this runs on any machine with the CUDA toolkit the build found.
#include "bellows/runtime/cuda_libraries.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace {

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

TEST(CudaMathLibraries, AreLoadedOnFirstUseWithEveryFunctionResolved) {
  EXPECT_FALSE(mapped("libcublas")) << "cuBLAS was loaded before anything asked for it";
  EXPECT_FALSE(mapped("libcusolver"));
  const auto& math = bellows::runtime::cuda_math_libraries();
  EXPECT_TRUE(mapped("libcublas"));
  EXPECT_TRUE(mapped("libcusolver"));
  for (const void* f : {reinterpret_cast<const void*>(math.create_cublas),
                        reinterpret_cast<const void*>(math.destroy_cublas),
                        reinterpret_cast<const void*>(math.cublas_set_stream),
                        reinterpret_cast<const void*>(math.dgemm),
                        reinterpret_cast<const void*>(math.dsyrk),
                        reinterpret_cast<const void*>(math.dtrsm),
                        reinterpret_cast<const void*>(math.create_cusolver),
                        reinterpret_cast<const void*>(math.destroy_cusolver),
                        reinterpret_cast<const void*>(math.cusolver_set_stream),
                        reinterpret_cast<const void*>(math.dpotrf_buffer_size),
                        reinterpret_cast<const void*>(math.dpotrf)}) {
    EXPECT_NE(f, nullptr);
  }
  EXPECT_EQ(&math, &bellows::runtime::cuda_math_libraries()) << "loaded twice";
}

}  // namespace
