#include "bellows/transport/controller_contact.hpp"

#include <bellows/protocol/job_directory.hpp>
#include <bellows/protocol/job_file.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

namespace bellows::transport {

ClientOptions ControllerContact::client_options() const {
  ClientOptions options;
  options.endpoint = endpoint;
  options.curve = curve;
  return options;
}

bool is_tcp_endpoint(const std::string& endpoint) { return endpoint.starts_with("tcp://"); }

std::string this_host_address() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0)
    throw TransportError(std::string("cannot read this host's name: ") + std::strerror(errno));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(name.data(), nullptr, &hints, &found); rc != 0 || found == nullptr) {
    throw TransportError("this host's name " + std::string(name.data()) +
                         " resolves to no IPv4 address (" + ::gai_strerror(rc) +
                         "): name the address to listen on (tcp:ADDRESS)");
  }
  std::array<char, INET_ADDRSTRLEN> text{};
  const auto* address = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  ::inet_ntop(AF_INET, &address->sin_addr, text.data(), text.size());
  ::freeaddrinfo(found);
  return text.data();
}

std::string this_host_tcp_endpoint() { return "tcp://" + this_host_address() + ":*"; }

void publish_controller_contact(const std::filesystem::path& job_dir, const ControllerContact& contact) {
  const protocol::JobDirectory layout{job_dir};
  std::error_code ignored;
  std::filesystem::remove(layout.controller_key_file(), ignored);
  if (contact.curve) write_key_file(layout.controller_key_file(), *contact.curve);
  try {
    protocol::write_line_atomically(layout.controller_endpoint_file(), contact.endpoint);
  } catch (const std::runtime_error& e) {
    throw TransportError(e.what());
  }
}

ControllerContact read_controller_contact(const std::filesystem::path& job_dir) {
  const protocol::JobDirectory layout{job_dir};
  ControllerContact contact;
  std::ifstream in(layout.controller_endpoint_file());
  if (!std::getline(in, contact.endpoint) || contact.endpoint.empty())
    throw TransportError("the controller has not said where it listens (no " +
                         layout.controller_endpoint_file().string() + ")");
  if (is_tcp_endpoint(contact.endpoint)) {
    if (!std::filesystem::exists(layout.controller_key_file()))
      throw TransportError("the controller listens at " + contact.endpoint + " but its key file " +
                           layout.controller_key_file().string() +
                           " is missing: this host does not see the job directory the controller wrote");
    contact.curve = read_key_file(layout.controller_key_file());
  }
  return contact;
}

}  // namespace bellows::transport
