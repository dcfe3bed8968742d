#include "bellows/transport/security.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

namespace bellows::transport {
namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

template <class T>
bool parse_number(std::string_view text, T& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc{} && end == text.data() + text.size();
}

}  // namespace

CurveKeyPair generate_curve_key_pair() {
  char public_key[41];
  char secret_key[41];
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    throw TransportError(std::string("cannot generate a curve key pair: ") +
                         zmq_strerror(zmq_errno()));
  }
  return {public_key, secret_key};
}

void write_key_file(const std::filesystem::path& file, const CurveKeyPair& keys) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    throw TransportError("cannot create key file " + file.string() + ": " + std::strerror(errno));
  }
  const std::string text = "public=" + keys.public_key + "\nsecret=" + keys.secret_key + "\n";
  const ssize_t written = ::write(fd, text.data(), text.size());
  const int saved = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) {
    throw TransportError("cannot write key file " + file.string() + ": " + std::strerror(saved));
  }
}

CurveKeyPair read_key_file(const std::filesystem::path& file) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0) {
    throw TransportError("cannot read key file " + file.string() + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    throw TransportError("key file " + file.string() + " is not a regular file");
  }
  if (st.st_uid != ::geteuid()) {
    throw TransportError("key file " + file.string() + " is owned by uid " +
                         std::to_string(st.st_uid) + ", not by this user (uid " +
                         std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & 077) != 0) {
    throw TransportError("key file " + file.string() + " has mode " + octal_mode(st.st_mode) +
                         ": group and others must have no access (0600)");
  }
  std::ifstream in(file);
  CurveKeyPair keys;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const auto eq = line.find('=');
    const std::string key = line.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : line.substr(eq + 1);
    if (eq == std::string::npos || (key != "public" && key != "secret") || value.size() != 40) {
      throw TransportError("key file " + file.string() + " line " + std::to_string(line_number) +
                           ": expected public=<40 Z85 characters> or secret=<40 Z85 characters>");
    }
    (key == "public" ? keys.public_key : keys.secret_key) = value;
  }
  if (keys.public_key.empty() || keys.secret_key.empty()) {
    throw TransportError("key file " + file.string() + " lacks its " +
                         (keys.public_key.empty() ? "public" : "secret") + " key");
  }
  return keys;
}

std::string private_directory_problem(const std::filesystem::path& dir, uid_t owner) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return "directory " + dir.string() + ": " + std::strerror(errno);
  }
  if (S_ISLNK(st.st_mode)) return dir.string() + " is a symbolic link, not a directory";
  if (!S_ISDIR(st.st_mode)) return dir.string() + " is not a directory";
  if (st.st_uid != owner) {
    return "directory " + dir.string() + " is owned by uid " + std::to_string(st.st_uid) +
           ", not by uid " + std::to_string(owner);
  }
  if ((st.st_mode & 077) != 0) {
    return "directory " + dir.string() + " has mode " + octal_mode(st.st_mode) +
           ": group and others must have no access (0700)";
  }
  return {};
}

void prepare_private_directory(const std::filesystem::path& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw TransportError("cannot create directory " + dir.string() + ": " + std::strerror(errno));
  }
  if (std::string problem = private_directory_problem(dir, ::geteuid()); !problem.empty()) {
    throw TransportError(problem);
  }
}

std::optional<PeerCredentials> parse_ipc_peer_address(const std::string& address) {
  // libzmq (with SO_PEERCRED) describes an ipc peer as "localhost:UID:GID:PID".
  constexpr std::string_view prefix = "localhost:";
  if (address.rfind(prefix, 0) != 0) return std::nullopt;
  std::string_view rest(address);
  rest.remove_prefix(prefix.size());
  const auto first = rest.find(':');
  const auto second = first == std::string_view::npos ? first : rest.find(':', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  PeerCredentials c;
  if (!parse_number(rest.substr(0, first), c.uid) ||
      !parse_number(rest.substr(first + 1, second - first - 1), c.gid) ||
      !parse_number(rest.substr(second + 1), c.pid)) {
    return std::nullopt;
  }
  return c;
}

AuthDecision authorize(const ZapRequest& request, const AuthPolicy& policy) {
  AuthDecision d;
  if (request.mechanism == "CURVE") {
    if (!policy.curve_client_key) {
      d.reason = "peer " + request.address + " offered a curve key, but this endpoint has none";
      return d;
    }
    if (request.credentials.empty() || request.credentials.front().size() != 32) {
      d.reason = "peer " + request.address + " sent no curve public key";
      return d;
    }
    char z85[41];
    zmq_z85_encode(z85, reinterpret_cast<const std::uint8_t*>(request.credentials.front().data()), 32);
    if (z85 != *policy.curve_client_key) {
      d.reason = "peer " + request.address + " presented curve key " + std::string(z85, 8) +
                 "..., not the job's key";
      return d;
    }
    // A CURVE peer on ipc must also be the owner.
    if (const auto creds = parse_ipc_peer_address(request.address);
        creds && creds->uid != policy.owner_uid) {
      d.reason = "peer uid " + std::to_string(creds->uid) + " (pid " + std::to_string(creds->pid) +
                 ") is not the job owner (uid " + std::to_string(policy.owner_uid) + ")";
      return d;
    }
    d.allowed = true;
    d.user_id = "curve:job-key";
    return d;
  }
  if (request.mechanism == "NULL") {
    const auto creds = parse_ipc_peer_address(request.address);
    if (!creds) {
      d.reason = "peer " + request.address +
                 " has no kernel credentials (plain tcp is not authenticated: use curve)";
      return d;
    }
    if (creds->uid != policy.owner_uid) {
      d.reason = "peer uid " + std::to_string(creds->uid) + " (pid " + std::to_string(creds->pid) +
                 ") is not the job owner (uid " + std::to_string(policy.owner_uid) + ")";
      return d;
    }
    d.allowed = true;
    d.user_id = "uid:" + std::to_string(creds->uid);
    return d;
  }
  d.reason = "peer " + request.address + " uses mechanism " + request.mechanism +
             ", which this endpoint does not accept";
  return d;
}

}  // namespace bellows::transport
