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
  const std::string t = trim(text);
  if (t.empty()) return "empty value";
  const char* s = t.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0') return fmt::format("'{}' is not a number", text);
  if (std::isnan(v)) return fmt::format("'{}' is not a number", text);
  if (std::isinf(v)) return fmt::format("{} is out of range", text);
  return "";
}

std::size_t parse_memory_size(const std::string& text, const std::string& option) {
  std::size_t i = 0;
  std::size_t digits = 0;
  bool dot = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++digits;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  std::string unit = text.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();  // KiB = K
  double mult = 0;
  if (unit.empty()) mult = 1;
  const std::string kUnits = "KMGT";
  if (unit.size() == 1 && kUnits.find(unit[0]) != std::string::npos) {
    mult = std::ldexp(1.0, 10 * static_cast<int>(kUnits.find(unit[0]) + 1));
  }
  const double value = digits > 0 ? std::strtod(text.substr(0, i).c_str(), nullptr) : 0;
  const double bytes = value * mult;
  if (digits == 0 || mult == 0 || !(bytes >= 1)) {
    throw UsageError(
        fmt::format("{}: expected a size such as 512M, 2G, 1.5GiB or a byte count "
                    "(K, M, G, T are powers of 1024), got '{}'",
                    option, text));
  }
  if (bytes >= std::ldexp(1.0, 63)) {
    throw UsageError(fmt::format("{}: size '{}' is too large", option, text));
  }
  return static_cast<std::size_t>(bytes);
}

std::optional<std::vector<double>> parse_number_list(const std::string& text,
                                                     const std::string& option) {
  if (trim(text).empty()) return std::nullopt;
  std::vector<double> v;
  for (const std::string& item : split(text, ',')) {
    const std::string t = trim(item);
    const char* s = t.c_str();
    char* end = nullptr;
    const double x = std::strtod(s, &end);
    if (t.empty() || end == s || *end != '\0') return std::nullopt;
    if (!std::isfinite(x)) {
      throw UsageError(fmt::format("{}: '{}' is not a finite number", option, t));
    }
    v.push_back(x);
  }
  return v;
}

std::pair<std::int64_t, std::int64_t> parse_window(const std::string& text) {
  const std::vector<std::string> sides = split(text, ',');
  auto side = [&](const std::string& s) -> std::int64_t {
    const std::optional<long long> v = parse_integer(trim(s));
    if (!v || *v < -1 || *v > kMaxWindow) {
      throw UsageError(fmt::format(
          "--window {}: expected LEFT[,RIGHT], integers from 0 to 2^53, or -1 for unbounded",
          text));
    }
    return *v;
  };
  if (sides.size() > 2) {
    throw UsageError(fmt::format("--window {}: expected LEFT[,RIGHT]", text));
  }
  const std::int64_t left = side(sides[0]);
  const std::int64_t right = sides.size() == 2 ? side(sides[1]) : -1;
  return {left, right};
}

std::vector<int> parse_sections(const std::string& text) {
  std::vector<int> v;
  for (const std::string& item : split(text, ',')) {
    const std::optional<long long> x = parse_integer(trim(item));
    if (!x || *x < 0 || *x > (1 << 20)) {
      throw UsageError(
          fmt::format("--mrope-section: expected three counts t,h,w such as "
                      "16,24,24, got '{}'",
                      text));
    }
    v.push_back(static_cast<int>(*x));
  }
  if (v.size() != 3) {
    throw UsageError(fmt::format("--mrope-section: expected three counts t,h,w, got '{}'", text));
  }
  return v;
}

// --- slicing -------------------------------------------------------------------------

std::vector<SliceEntry> parse_slice(const std::string& text) {
  std::vector<SliceEntry> out;
  std::string body = trim(text);
  if (!body.empty() && body.front() == '[' && body.back() == ']') {
    body = body.substr(1, body.size() - 2);
  }
  if (trim(body).empty()) return out;
  bool ellipsis = false;
  auto number = [&](const std::string& s) {
    const std::optional<long long> v = parse_integer(s);
    if (!v) throw UsageError(fmt::format("--slice '{}': '{}' is not an integer", text, s));
    return *v;
  };
  for (const std::string& raw : split(body, ',')) {
    const std::string part = trim(raw);
    SliceEntry e;
    if (part == "...") {
      if (ellipsis) throw UsageError(fmt::format("--slice '{}': more than one '...'", text));
      ellipsis = true;
      e.ellipsis = true;
    } else if (part.empty()) {
      throw UsageError(fmt::format("--slice '{}': empty axis (use ':' for a whole axis)", text));
    } else {
      std::vector<std::string> f = split(part, ':');
      for (auto& x : f) x = trim(x);
      if (f.size() > 3) throw UsageError(fmt::format("--slice '{}': bad axis '{}'", text, part));
      if (f.size() == 1) {
        e.index = true;
        e.start = number(f[0]);
      } else {
        if (!f[0].empty()) e.has_start = true, e.start = number(f[0]);
        if (!f[1].empty()) e.has_stop = true, e.stop = number(f[1]);
        if (f.size() == 3 && !f[2].empty()) e.step = number(f[2]);
        if (e.step == 0) throw UsageError(fmt::format("--slice '{}': step is zero", text));
      }
    }
    out.push_back(e);
  }
  return out;
}

namespace {

// Python's slice.indices for an axis of length `n`, then the element count, all in
// ranges where nothing can overflow: bounds are clamped into [-1, n] first, and the
// count divides a distance below n by the step's magnitude.
AxisRange slice_range(const SliceEntry& e, std::size_t n, std::size_t axis,
                      const std::string& text) {
  const auto len = static_cast<long long>(n);
  AxisRange r;
  if (e.index) {
    const long long i = e.start < 0 ? e.start + len : e.start;
    if (i < 0 || i >= len) {
      throw InputError(
          fmt::format("--slice '{}': index {} is out of range for axis {} with size {}", text,
                      e.start, axis, n));
    }
    r.start = static_cast<std::size_t>(i);
    r.count = 1;
    r.keep = false;
    return r;
  }
  auto clamp = [&](long long v, long long lo, long long hi) {
    if (v < 0) v = v < -len ? lo : v + len;  // no overflow: len >= 0 > v
    return std::min(std::max(v, lo), hi);
  };
  long long start, stop;
  r.step = e.step;
  if (e.step > 0) {
    start = e.has_start ? clamp(e.start, 0, len) : 0;
    stop = e.has_stop ? clamp(e.stop, 0, len) : len;
    const auto dist = static_cast<unsigned long long>(stop - start);
    r.count =
        stop > start
            ? static_cast<std::size_t>((dist - 1) / static_cast<unsigned long long>(e.step) + 1)
            : 0;
  } else {
    start = e.has_start ? clamp(e.start, -1, len - 1) : len - 1;
    stop = e.has_stop ? clamp(e.stop, -1, len - 1) : -1;
    const unsigned long long mag = 0ULL - static_cast<unsigned long long>(e.step);
    const auto dist = static_cast<unsigned long long>(start - stop);
    r.count = start > stop ? static_cast<std::size_t>((dist - 1) / mag + 1) : 0;
  }
  r.start = r.count > 0 ? static_cast<std::size_t>(start) : 0;
  if (r.count <= 1) r.step = 1;  // one element: the step never matters, keep it small
  return r;
}

}  // namespace

std::vector<AxisRange> resolve_slice(const std::string& text, const Shape& shape) {
  const std::vector<SliceEntry> parts = parse_slice(text);
  std::size_t explicit_axes = 0;
  for (const auto& p : parts) explicit_axes += !p.ellipsis;
  if (explicit_axes > shape.size()) {
    throw InputError(fmt::format("--slice '{}': {} axes given for shape {}", text, explicit_axes,
                                 shape_str(shape)));
  }
  // "..." (or the missing trailing axes) become whole-axis slices.
  std::vector<SliceEntry> full;
  for (const auto& p : parts) {
    if (!p.ellipsis) {
      full.push_back(p);
    } else {
      full.insert(full.end(), shape.size() - explicit_axes, SliceEntry{});
    }
  }
  full.resize(shape.size(), SliceEntry{});
  std::vector<AxisRange> out;
  for (std::size_t ax = 0; ax < shape.size(); ++ax) {
    out.push_back(slice_range(full[ax], shape[ax], ax, text));
  }
  return out;
}

}  // namespace posenc::cli
