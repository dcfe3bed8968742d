#include <bellows/daemon/payload.hpp>

#include <pmix.h>

#include <cstring>
#include <type_traits>
#include <utility>

namespace bellows::daemon {

std::string to_string(const ProcId& proc) { return proc.nspace + ":" + std::to_string(proc.rank); }

pmix_proc_t to_pmix(const ProcId& proc) {
  if (proc.nspace.size() > PMIX_MAX_NSLEN)
    throw std::invalid_argument("nspace '" + proc.nspace + "' is longer than " +
                                std::to_string(PMIX_MAX_NSLEN) + " characters");
  pmix_proc_t out;
  PMIX_PROC_CONSTRUCT(&out);
  PMIX_LOAD_PROCID(&out, proc.nspace.c_str(), proc.rank);
  return out;
}

ProcId from_pmix(const pmix_proc_t& proc) {
  return ProcId{std::string(proc.nspace, ::strnlen(proc.nspace, PMIX_MAX_NSLEN + 1)), proc.rank};
}

std::string status_string(pmix_status_t code) { return PMIx_Error_string(code); }

PmixError::PmixError(const std::string& call, pmix_status_t code)
    : std::runtime_error(call + " failed: " + status_string(code)), code_(code) {}

InfoArray::InfoArray(std::size_t n) : size_(n) {
  PMIX_INFO_CREATE(info_, n);
  if (n > 0 && info_ == nullptr) throw std::bad_alloc();
}

InfoArray::InfoArray(const Payload& payload) : InfoArray(payload.size()) {
  std::size_t i = 0;
  for (const auto& [key, value] : payload) load(i++, key, value);
}

void InfoArray::load(std::size_t i, const std::string& key, const Value& value) {
  if (const auto* u = std::get_if<std::uint64_t>(&value))
    load(i, key.c_str(), u, PMIX_UINT64);
  else if (const auto* d = std::get_if<double>(&value))
    load(i, key.c_str(), d, PMIX_DOUBLE);
  else
    load(i, key.c_str(), std::get<std::string>(value).c_str(), PMIX_STRING);
}

InfoArray::~InfoArray() {
  if (info_ != nullptr) PMIX_INFO_FREE(info_, size_);
}

InfoArray::InfoArray(InfoArray&& other) noexcept
    : info_(std::exchange(other.info_, nullptr)), size_(std::exchange(other.size_, 0)) {}

InfoArray& InfoArray::operator=(InfoArray&& other) noexcept {
  if (this != &other) {
    if (info_ != nullptr) PMIX_INFO_FREE(info_, size_);
    info_ = std::exchange(other.info_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void InfoArray::load(std::size_t i, const char* key, const void* data, pmix_data_type_t type) {
  if (i >= size_) throw std::out_of_range("InfoArray::load: entry out of range");
  if (std::strlen(key) > PMIX_MAX_KEYLEN)
    throw std::invalid_argument(std::string("PMIx key '") + key + "' is too long");
  const pmix_status_t rc = PMIx_Info_load(&info_[i], key, data, type);
  if (rc != PMIX_SUCCESS) throw PmixError(std::string("PMIx_Info_load(") + key + ")", rc);
}

pmix_info_t* InfoArray::release() noexcept {
  size_ = 0;
  return std::exchange(info_, nullptr);
}

Payload decode_payload(const pmix_info_t* info, std::size_t ninfo) {
  Payload out;
  for (std::size_t i = 0; i < ninfo; ++i) {
    const std::string_view key(info[i].key, ::strnlen(info[i].key, PMIX_MAX_KEYLEN + 1));
    if (!key.starts_with("bellows.")) continue;
    const pmix_value_t& v = info[i].value;
    switch (v.type) {
      case PMIX_UINT64: out.emplace(key, v.data.uint64); break;
      case PMIX_DOUBLE: out.emplace(key, v.data.dval); break;
      case PMIX_STRING: out.emplace(key, std::string(v.data.string ? v.data.string : "")); break;
      default: break;
    }
  }
  return out;
}

void read_fields(const Payload& payload, protocol::ResizeReport& report) {
  protocol::visit_fields(report, [&payload](const char*, const char* key, auto& value) {
    using Carried = protocol::pmix::PayloadValue<std::remove_cvref_t<decltype(value)>>;
    if (std::string why = protocol::pmix::read_payload_value(get<Carried>(payload, key), value);
        !why.empty())
      throw std::invalid_argument(std::string(key) + ": " + why);
  });
}

}  // namespace bellows::daemon
