// Shares of a job (see part.hpp).
#include "posenc/io/part.hpp"

#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdlib>

#include "posenc/error.hpp"

namespace posenc {

namespace {

bool parse_size(const std::string& s, std::size_t& out) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  out = static_cast<std::size_t>(std::strtoull(s.c_str(), nullptr, 10));
  return true;
}

}  // namespace

Part parse_part(const std::string& text, const std::string& what) {
  const auto slash = text.find('/');
  Part p;
  if (slash == std::string::npos || !parse_size(text.substr(0, slash), p.index) ||
      !parse_size(text.substr(slash + 1), p.count)) {
    throw UsageError(
        fmt::format("{}: expected I/N with 0 <= I < N (e.g. 0/4), got '{}'", what, text));
  }
  if (p.count == 0 || p.index >= p.count) {
    throw UsageError(fmt::format(
        "{}: part index {} is outside 0..{} (parts are numbered from 0 to N-1), got '{}'", what,
        p.index, p.count == 0 ? std::string("N-1 with N >= 1") : std::to_string(p.count - 1),
        text));
  }
  return p;
}

std::pair<std::size_t, std::size_t> part_range(const Part& p, std::size_t extent) {
  // floor(i * R / N) without overflow for any R and N below 2^63: 128-bit products.
  __extension__ typedef unsigned __int128 Wide;
  auto at = [&](std::size_t i) {
    return static_cast<std::size_t>(static_cast<Wide>(i) * extent / p.count);
  };
  return {at(p.index), at(p.index + 1)};
}

Shape part_shape(const Part& p, const Shape& total, std::size_t axis) {
  Shape s = total;
  if (!s.empty()) {
    const auto [a, b] = part_range(p, s[axis]);
    s[axis] = b - a;
  }
  return s;
}

std::string input_identity(const std::vector<TensorRef>& inputs) {
  std::string out;
  for (const auto& r : inputs) {
    if (!out.empty()) out += ", ";
    if (r.is_stdio()) {
      out += "-";
      continue;
    }
    char buf[PATH_MAX];
    out += ::realpath(r.path.c_str(), buf) != nullptr ? std::string(buf) : r.path;
    if (r.format == Format::hdf5) out += ":" + (r.dataset.empty() ? "/" : r.dataset);
  }
  return out;
}

Attrs part_attrs(const Part& p, const Shape& total, std::size_t axis,
                 const std::vector<TensorRef>& inputs) {
  std::vector<double> offset(total.size(), 0.0), shape(total.begin(), total.end());
  if (!total.empty()) offset[axis] = static_cast<double>(part_range(p, total[axis]).first);
  Attrs a{{kPartIndexAttr, static_cast<long long>(p.index)},
          {kPartCountAttr, static_cast<long long>(p.count)},
          {kPartAxisAttr, static_cast<long long>(axis)},
          {kPartOffsetAttr, offset},
          {kPartTotalShapeAttr, shape}};
  if (!inputs.empty()) a.push_back({kPartInputsAttr, input_identity(inputs)});
  return a;
}

}  // namespace posenc
