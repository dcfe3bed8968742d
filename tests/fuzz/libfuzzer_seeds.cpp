// Linked into the libFuzzer builds of the targets (BELLOWS_LIBFUZZER=ON) in place of
// fuzz_driver.cpp: before fuzzing starts, the target's seeds() go into the corpus directory
// named on the command line (the first argument that is not a -flag; created when missing),
// as seed-0, seed-1, ..., so that libFuzzer starts from valid messages of every type.
//   bellows_wire_fuzz corpus/wire -max_total_time=60

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "fuzz_target.hpp"

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = (*argv)[i];
    if (arg.empty() || arg.front() == '-') continue;
    const std::filesystem::path dir(arg);
    std::error_code ec;
    if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) return 0;
    std::filesystem::create_directories(dir, ec);
    const auto seeds = bellows::fuzz::seeds();
    for (std::size_t n = 0; n < seeds.size(); ++n) {
      const auto file = dir / ("seed-" + std::to_string(n));
      if (std::filesystem::exists(file, ec)) continue;
      std::ofstream out(file, std::ios::binary);
      out.write(reinterpret_cast<const char*>(seeds[n].data()),
                static_cast<std::streamsize>(seeds[n].size()));
    }
    return 0;
  }
  return 0;
}
