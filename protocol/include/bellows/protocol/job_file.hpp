#pragma once
// Writing one of a job's small files that other processes poll for (a daemon's URI, the
// controller's endpoint, the job's MPI port): written under another name and renamed, so that
// a reader never sees half a line.
//
// Thread safety: free of shared state.

#include <filesystem>
#include <string>

namespace bellows::protocol {

/// Writes `line` and a newline to `file` through FILE.partial and a rename. Throws
/// std::runtime_error naming the file and the cause when it cannot be written or renamed.
void write_line_atomically(const std::filesystem::path& file, const std::string& line);

}  // namespace bellows::protocol
