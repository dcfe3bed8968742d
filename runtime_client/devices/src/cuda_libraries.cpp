#include "bellows/runtime/cuda_libraries.hpp"

#include <dlfcn.h>

#include <initializer_list>
#include <mutex>
#include <stdexcept>
#include <string>

namespace bellows::runtime {
namespace {

#define BELLOWS_SYMBOL_NAME(function) BELLOWS_SYMBOL_NAME_EXPANDED(function)
#define BELLOWS_SYMBOL_NAME_EXPANDED(function) #function

// Tries the library CMake found at build time, then its file name in the loader's
// search path (LD_LIBRARY_PATH, ld.so.cache), e.g. on a machine whose toolkit lives
// elsewhere.
void* open_library(std::initializer_list<const char*> candidates) {
  std::string errors;
  for (const char* path : candidates) {
    if (path == nullptr || *path == '\0') continue;
    if (void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return handle;
    errors += std::string(errors.empty() ? "" : "; ") + dlerror();
  }
  throw std::runtime_error("cannot load a CUDA math library: " + errors);
}

template <typename Function>
void resolve(void* library, const char* name, Function& out) {
  dlerror();
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error(std::string("cannot resolve ") + name + ": " +
                             (why != nullptr ? why : "symbol is null"));
  }
  out = reinterpret_cast<Function>(symbol);
}

CudaMathLibraries load() {
  void* cublas = open_library({BELLOWS_CUBLAS_LIBRARY, BELLOWS_CUBLAS_FILE_NAME});
  void* cusolver = open_library({BELLOWS_CUSOLVER_LIBRARY, BELLOWS_CUSOLVER_FILE_NAME});
  CudaMathLibraries t;
  resolve(cublas, BELLOWS_SYMBOL_NAME(cublasCreate), t.create_cublas);
  resolve(cublas, BELLOWS_SYMBOL_NAME(cublasDestroy), t.destroy_cublas);
  resolve(cublas, BELLOWS_SYMBOL_NAME(cublasSetStream), t.cublas_set_stream);
  resolve(cublas, BELLOWS_SYMBOL_NAME(cublasDgemm), t.dgemm);
  resolve(cublas, BELLOWS_SYMBOL_NAME(cublasDsyrk), t.dsyrk);
  resolve(cublas, BELLOWS_SYMBOL_NAME(cublasDtrsm), t.dtrsm);
  resolve(cusolver, BELLOWS_SYMBOL_NAME(cusolverDnCreate), t.create_cusolver);
  resolve(cusolver, BELLOWS_SYMBOL_NAME(cusolverDnDestroy), t.destroy_cusolver);
  resolve(cusolver, BELLOWS_SYMBOL_NAME(cusolverDnSetStream), t.cusolver_set_stream);
  resolve(cusolver, BELLOWS_SYMBOL_NAME(cusolverDnDpotrf_bufferSize), t.dpotrf_buffer_size);
  resolve(cusolver, BELLOWS_SYMBOL_NAME(cusolverDnDpotrf), t.dpotrf);
  // The libraries stay loaded for the life of the process.
  return t;
}

}  // namespace

const CudaMathLibraries& cuda_math_libraries() {
  static std::mutex mutex;
  static CudaMathLibraries table;
  static bool loaded = false;
  std::lock_guard lock(mutex);
  if (!loaded) {
    table = load();
    loaded = true;
  }
  return table;
}

}  // namespace bellows::runtime
