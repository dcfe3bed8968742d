#pragma once
// Who may talk to a job's controller and daemons: the job owner's processes only.
//
// Two ways to prove it, chosen by the endpoint:
// - ipc:// (everything on one host): the socket lives in a directory of mode 0700 owned by
//   the job owner, so no other user can reach it, and every connection is checked once more
//   through ZeroMQ's ZAP hook, which hands over the peer's kernel credentials
//   (SO_PEERCRED: "localhost:UID:GID:PID") so that a peer whose uid is not the owner's is
//   refused.
// - tcp:// (daemons on other hosts): CURVE with one key pair per job, written 0600 into the
//   job's directory. The controller serves with it and accepts exactly that public key from
//   its clients; whoever can read the key file (the owner, root) can connect.
//
// Thread safety: free functions without shared state; each may be called from any thread.

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace bellows::transport {

/// A failure inside this library that the caller must handle (bad options, a directory
/// with the wrong owner or mode, a key file that others can read). The text names what was
/// wrong and where.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A CURVE key pair, each key in Z85 text (40 characters).
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
  bool operator==(const CurveKeyPair&) const = default;
};

/// A fresh key pair from libzmq (libsodium underneath).
CurveKeyPair generate_curve_key_pair();

/// Writes `keys` to a new file of mode 0600 ("public=...\nsecret=...\n"). Throws
/// TransportError when the file exists or cannot be written.
void write_key_file(const std::filesystem::path& file, const CurveKeyPair& keys);

/// Reads a key file written by write_key_file. Throws TransportError naming the file and
/// the problem when it is missing, not owned by this process's user, readable or writable
/// by group or others, or not in the expected format.
CurveKeyPair read_key_file(const std::filesystem::path& file);

/// Creates `dir` with mode 0700 when it does not exist; checks that an existing one is a
/// real directory (not a symlink) owned by this process's effective user with no access for
/// group or others. Throws TransportError naming the directory and what is wrong.
void prepare_private_directory(const std::filesystem::path& dir);

/// The problem with `dir` as a home for an ipc socket, or "" when it is a directory (not a
/// symlink) owned by `owner` with no group or other permissions.
std::string private_directory_problem(const std::filesystem::path& dir, uid_t owner);

/// What a ZAP request says about a connecting peer.
struct ZapRequest {
  std::string domain;
  std::string address;    ///< "localhost:UID:GID:PID" for ipc, the peer's IP for tcp
  std::string mechanism;  ///< "NULL" or "CURVE"
  std::vector<std::string> credentials;  ///< CURVE: the client's 32-byte public key
};

/// Who is allowed in.
struct AuthPolicy {
  uid_t owner_uid = 0;                       ///< the only uid accepted over ipc
  std::optional<std::string> curve_client_key;  ///< Z85; the only key accepted over CURVE
};

/// The answer for one peer: allowed with a user id ("uid:1000", "curve:job-key"), or
/// refused with the exact reason ("peer uid 65534 (pid 812) is not the job owner (uid 0)").
struct AuthDecision {
  bool allowed = false;
  std::string user_id;
  std::string reason;
};

/// Decides a ZAP request. Pure: what the server's ZAP handler calls for every connection.
AuthDecision authorize(const ZapRequest& request, const AuthPolicy& policy);

/// The credentials in an ipc ZAP address "localhost:UID:GID:PID", if it is one.
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};
std::optional<PeerCredentials> parse_ipc_peer_address(const std::string& address);

}  // namespace bellows::transport
