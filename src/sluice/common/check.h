// Invariant checks: a broken invariant is a bug in sluice, never bad user input.
// They stay on in release builds and report the source location and the values.
#pragma once

#include <source_location>
#include <sstream>
#include <string>
#include <string_view>

namespace sluice {

[[noreturn]] void check_failed(std::string_view condition, std::string_view detail,
                               const std::source_location& where);

template <class A, class B>
void check_op(bool holds, const char* expression, const A& a, const B& b,
              const std::source_location& where = std::source_location::current()) {
  if (holds) return;
  std::ostringstream values;
  values << "left=" << a << " right=" << b;
  check_failed(expression, values.str(), where);
}

}  // namespace sluice

#define SLUICE_CHECK(cond) \
  ((cond) ? void(0) : ::sluice::check_failed(#cond, {}, std::source_location::current()))
#define SLUICE_CHECK_MSG(cond, msg) \
  ((cond) ? void(0) : ::sluice::check_failed(#cond, (msg), std::source_location::current()))
#define SLUICE_CHECK_EQ(a, b) ::sluice::check_op((a) == (b), #a " == " #b, (a), (b))
#define SLUICE_CHECK_LE(a, b) ::sluice::check_op((a) <= (b), #a " <= " #b, (a), (b))
#define SLUICE_CHECK_LT(a, b) ::sluice::check_op((a) < (b), #a " < " #b, (a), (b))
