// Built when CUDA is not available: asking for the CUDA device is an error.

#include <stdexcept>

#include "device.hpp"

namespace bellows::runtime {

std::unique_ptr<Device> make_cuda_device(DeviceOwner& /*owner*/, int /*ordinal*/,
                                         const RuntimeOptions& /*options*/, std::size_t /*index*/) {
  throw std::runtime_error(
      "the CUDA device is not available: Bellows was built without CUDA (nvcc, cuBLAS and "
      "cuSOLVER were not found at configure time)");
}

int visible_cuda_devices() { return 0; }

}  // namespace bellows::runtime
