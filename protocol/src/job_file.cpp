#include "bellows/protocol/job_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace bellows::protocol {

void write_line_atomically(const std::filesystem::path& file, const std::string& line) {
  auto partial = file;
  partial += ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << line << '\n';
    if (!out.flush()) throw std::runtime_error("cannot write " + partial.string() + ": " + std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(partial, file, ec);
  if (ec) throw std::runtime_error("cannot rename " + partial.string() + " to " + file.string() + ": " + ec.message());
}

}  // namespace bellows::protocol
