#pragma once
// The message of the exception a callable throws, or "<nothing thrown>".

#include <exception>
#include <string>

namespace bellows::testing {

template <typename F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<nothing thrown>";
}

}  // namespace bellows::testing
