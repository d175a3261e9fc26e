// Checked parsing of option values (see parse.hpp).
#include "cli/parse.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "posenc/error.hpp"

namespace posenc::cli {

namespace {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t next = s.find(sep, at);
    out.push_back(s.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos) return out;
    at = next + 1;
  }
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The one grammar of real numbers, beside parse_integer's for integers: an optional
// sign, decimal digits with an optional fraction, an optional decimal exponent. No
// spaces, hex floats, inf or nan, which strtod alone would take.
bool is_decimal_number(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  std::size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    std::size_t exp_digits = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

}  // namespace

std::optional<long long> parse_integer(std::string_view s) {
  std::string_view digits = s;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) {
    digits.remove_prefix(1);
  }
  if (!all_digits(digits)) return std::nullopt;
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  long long v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

long long parse_int_option(std::string_view text, std::string_view option, long long lo,
                           long long hi) {
  const std::optional<long long> v = parse_integer(text);
  if (!v || *v < lo || *v > hi) {
    throw UsageError(
        fmt::format("{}: expected an integer from {} to {}, got '{}'", option, lo, hi, text));
  }
  return *v;
}

std::string integer_text_error(std::string& text, bool is_signed) {
  std::string_view digits = text;
  const bool negative = !digits.empty() && digits.front() == '-';
  if (!digits.empty() && (digits.front() == '+' || negative)) digits.remove_prefix(1);
  if (!all_digits(digits)) return fmt::format("'{}' is not a decimal integer", text);
  if (negative && !is_signed) return fmt::format("'{}' is negative", text);
  // Out of the 64-bit range (as signed, or as unsigned for unsigned options).
  if (is_signed) {
    const std::optional<long long> v = parse_integer(text);
    if (!v) return fmt::format("{} is out of range", text);
    text = std::to_string(*v);
  } else {
    unsigned long long u = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), u);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) {
      return fmt::format("{} is out of range", text);
    }
    text = std::to_string(u);
  }
  return "";
}

std::string number_text_error(const std::string& text) {
  if (text.empty()) return "empty value";
  if (!is_decimal_number(text)) return fmt::format("'{}' is not a decimal number", text);
  if (std::isinf(std::strtod(text.c_str(), nullptr))) {
    return fmt::format("{} is out of range", text);
  }
  return "";
}

std::optional<std::vector<std::int64_t>> parse_integer_list(const std::string& text) {
  std::vector<std::int64_t> v;
  for (const std::string& item : split(text, ',')) {
    const std::optional<long long> n = parse_integer(trim(item));
    if (!n) return std::nullopt;
    v.push_back(*n);
  }
  return v;
}

}  // namespace posenc::cli
