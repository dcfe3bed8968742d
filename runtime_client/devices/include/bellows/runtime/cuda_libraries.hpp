#pragma once
// cuBLAS and cuSOLVER, loaded with dlopen the first time a CUDA device or kernel needs
// them. Linking them would make every process pay their start-up (about 0.1 s of CPU
// for their static initializers, measured on the 2-core machine), which is most of what
// an expand costs per new rank, even when no rank uses CUDA; and a binary built with
// CUDA would not start where the libraries are missing. The CUDA runtime itself
// (libcudart) is cheap to load and stays linked.
//
// Only for code built with CUDA (it includes the CUDA headers).

#include <cublas_v2.h>
#include <cusolverDn.h>

namespace bellows::runtime {

/// The cuBLAS and cuSOLVER functions Bellows uses, resolved from the loaded libraries.
/// The members carry the functions' own names (cublas_v2.h maps some to their _v2
/// symbols, which is what is looked up).
struct CudaMathLibraries {
  decltype(&::cublasCreate) create_cublas = nullptr;
  decltype(&::cublasDestroy) destroy_cublas = nullptr;
  decltype(&::cublasSetStream) cublas_set_stream = nullptr;
  decltype(&::cublasDgemm) dgemm = nullptr;
  decltype(&::cublasDsyrk) dsyrk = nullptr;
  decltype(&::cublasDtrsm) dtrsm = nullptr;
  decltype(&::cusolverDnCreate) create_cusolver = nullptr;
  decltype(&::cusolverDnDestroy) destroy_cusolver = nullptr;
  decltype(&::cusolverDnSetStream) cusolver_set_stream = nullptr;
  decltype(&::cusolverDnDpotrf_bufferSize) dpotrf_buffer_size = nullptr;
  decltype(&::cusolverDnDpotrf) dpotrf = nullptr;
};

/// Loads the libraries on the first call and returns the table; later calls return the
/// same table. Thread-safe. Throws std::runtime_error naming the library or symbol and
/// dlerror()'s text when one cannot be loaded (the error is thrown again by every call).
[[nodiscard]] const CudaMathLibraries& cuda_math_libraries();

}  // namespace bellows::runtime
