// numpy basic slicing of stored tensors, read row slab by row slab (see slice.hpp).

#include "posenc/slice.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>

#include "posenc/error.hpp"

namespace posenc {

namespace {

constexpr std::size_t kSlabBytes = std::size_t{16} << 20;
constexpr std::size_t kBlockElems = std::size_t{1} << 20;

/// One axis of a slicing expression.
struct AxisSel {
  bool index = false;  // an integer: the axis disappears
  long long start = 0, stop = 0, step = 1;
  bool has_start = false, has_stop = false;
};

long long parse_int(const std::string& text, const std::string& whole) {
  // Optional sign and decimal digits, nothing else (as parse_integer on the CLI side).
  std::string_view s = text;
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  long long v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end) {
    throw UsageError(fmt::format("--slice '{}': '{}' is not an integer", whole, text));
  }
  return v;
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

AxisSel parse_axis(const std::string& part, const std::string& text) {
  AxisSel a;
  std::vector<std::string> f;
  std::size_t p = 0;
  for (;;) {
    std::size_t c = part.find(':', p);
    f.push_back(trim(part.substr(p, c == std::string::npos ? std::string::npos : c - p)));
    if (c == std::string::npos) break;
    p = c + 1;
  }
  if (f.size() > 3) throw UsageError(fmt::format("--slice '{}': bad axis '{}'", text, part));
  if (f.size() == 1) {
    a.index = true;
    a.start = parse_int(f[0], text);
    return a;
  }
  if (!f[0].empty()) a.has_start = true, a.start = parse_int(f[0], text);
  if (!f[1].empty()) a.has_stop = true, a.stop = parse_int(f[1], text);
  if (f.size() == 3 && !f[2].empty()) a.step = parse_int(f[2], text);
  if (a.step == 0) throw UsageError(fmt::format("--slice '{}': step is zero", text));
  return a;
}

/// Parses the expression; nullopt marks "...".
std::vector<std::optional<AxisSel>> parse_slice(const std::string& text) {
  std::vector<std::optional<AxisSel>> out;
  std::string body = trim(text);
  if (!body.empty() && body.front() == '[' && body.back() == ']') {
    body = body.substr(1, body.size() - 2);
  }
  if (trim(body).empty()) return out;
  std::size_t pos = 0;
  bool ellipsis = false;
  for (;;) {
    std::size_t comma = body.find(',', pos);
    std::string part =
        trim(body.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (part == "...") {
      if (ellipsis) throw UsageError(fmt::format("--slice '{}': more than one '...'", text));
      ellipsis = true;
      out.emplace_back(std::nullopt);
    } else if (part.empty()) {
      throw UsageError(fmt::format("--slice '{}': empty axis (use ':' for a whole axis)", text));
    } else {
      out.emplace_back(parse_axis(part, text));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

/// The indices one axis selects, by Python's slice.indices rules.
std::vector<std::size_t> axis_indices(const AxisSel& a, std::size_t n, std::size_t axis,
                                      const std::string& text) {
  const long long len = static_cast<long long>(n);
  std::vector<std::size_t> idx;
  if (a.index) {
    long long i = a.start < 0 ? a.start + len : a.start;
    if (i < 0 || i >= len) {
      throw InputError(
          fmt::format("--slice '{}': index {} is out of range for axis {} with size {}", text,
                      a.start, axis, n));
    }
    idx.push_back(static_cast<std::size_t>(i));
    return idx;
  }
  long long start, stop;
  if (a.step > 0) {
    start = !a.has_start ? 0 : a.start < 0 ? std::max(0LL, a.start + len) : std::min(a.start, len);
    stop = !a.has_stop ? len : a.stop < 0 ? std::max(0LL, a.stop + len) : std::min(a.stop, len);
    for (long long i = start; i < stop; i += a.step) idx.push_back(static_cast<std::size_t>(i));
  } else {
    start = !a.has_start  ? len - 1
            : a.start < 0 ? std::max(-1LL, a.start + len)
                          : std::min(a.start, len - 1);
    stop = !a.has_stop ? -1 : a.stop < 0 ? std::max(-1LL, a.stop + len) : std::min(a.stop, len - 1);
    for (long long i = start; i > stop; i += a.step) idx.push_back(static_cast<std::size_t>(i));
  }
  return idx;
}

}  // namespace

void check_slice(const std::string& text) { parse_slice(text); }

Selection resolve_slice(const std::string& text, const Shape& shape) {
  auto parts = parse_slice(text);
  std::size_t explicit_axes = 0;
  for (const auto& p : parts) explicit_axes += p.has_value();
  if (explicit_axes > shape.size()) {
    throw InputError(fmt::format("--slice '{}': {} axes given for shape {}", text, explicit_axes,
                                 shape_str(shape)));
  }
  // Expand "..." (or the missing trailing axes) into whole-axis slices.
  std::vector<AxisSel> full;
  for (const auto& p : parts) {
    if (p) {
      full.push_back(*p);
    } else {
      for (std::size_t k = 0; k < shape.size() - explicit_axes; ++k) full.push_back(AxisSel{});
    }
  }
  while (full.size() < shape.size()) full.push_back(AxisSel{});
  Selection s;
  for (std::size_t ax = 0; ax < shape.size(); ++ax) {
    s.idx.push_back(axis_indices(full[ax], shape[ax], ax, text));
    s.keep.push_back(!full[ax].index);
    if (!full[ax].index) s.shape.push_back(s.idx.back().size());
    s.numel *= s.idx.back().size();
  }
  return s;
}

void read_selection(TensorSource& src, const Selection& sel, const std::string& what,
                    const std::function<void(const Tensor&, std::size_t)>& block) {
  const TensorInfo& info = src.info();
  const std::size_t isz = dtype_size(info.dtype);
  if (sel.numel == 0) return;

  // Rows are the entries of the first axis whose extent is not 1 (the axes before it
  // have extent 1), so a [1, s, h, d] tensor is read along s, never as one row.
  const std::size_t row_axis = info.shape.empty() ? 0 : slab_axis(info.shape);
  // Offsets (in elements) inside one row of the remaining axes, in selection order.
  Shape row_shape(info.shape.empty() ? info.shape.begin() : info.shape.begin() + row_axis + 1,
                  info.shape.end());
  const std::size_t row_elems = checked_numel(row_shape, isz, what);
  std::vector<std::size_t> offsets{0};
  for (std::size_t ax = row_axis + 1; ax < info.shape.size(); ++ax) {
    std::vector<std::size_t> next;
    next.reserve(offsets.size() * sel.idx[ax].size());
    for (auto o : offsets) {
      for (auto i : sel.idx[ax]) next.push_back(o * info.shape[ax] + i);
    }
    offsets.swap(next);
  }
  std::vector<std::size_t> rows =
      info.shape.empty() ? std::vector<std::size_t>{0} : sel.idx[row_axis];
  const std::size_t row_bytes = std::max<std::size_t>(1, row_elems * isz);
  const std::size_t slab_rows = std::max<std::size_t>(1, kSlabBytes / row_bytes);

  // Selected values are handed on in blocks of at most kBlockElems, so the caller's
  // per-block work (e.g. a conversion to double) stays small next to the slab.
  Tensor slab;
  Tensor values(info.dtype, Shape{std::min(sel.numel, kBlockElems)});
  std::size_t flat = 0, n = 0;
  auto flush = [&](std::size_t count) {
    if (count == 0) return;
    if (count < values.numel()) {
      Tensor part(info.dtype, Shape{count});
      std::memcpy(part.bytes(), values.bytes(), count * isz);
      block(part, flat);
    } else {
      block(values, flat);
    }
    flat += count;
    n = 0;
  };
  for (std::size_t k = 0; k < rows.size();) {
    // A batch of selected rows whose span fits one slab read (always at least one).
    std::size_t lo = rows[k], hi = rows[k], e = k + 1;
    while (e < rows.size()) {
      std::size_t nlo = std::min(lo, rows[e]), nhi = std::max(hi, rows[e]);
      if (nhi - nlo + 1 > slab_rows) break;
      lo = nlo, hi = nhi, ++e;
    }
    const std::size_t span = hi - lo + 1;
    if (slab.numel() != span * row_elems) slab = Tensor(info.dtype, Shape{span * row_elems});
    src.read_slab(row_axis, lo, span, slab.bytes());
    for (std::size_t r = k; r < e; ++r) {
      const std::size_t base = (rows[r] - lo) * row_elems;
      for (auto o : offsets) {
        std::memcpy(values.bytes() + n * isz, slab.bytes() + (base + o) * isz, isz);
        if (++n == values.numel()) flush(n);
      }
    }
    k = e;
  }
  flush(n);
}

Tensor read_selection(TensorSource& src, const Selection& sel, const std::string& what) {
  const std::size_t isz = dtype_size(src.info().dtype);
  Tensor out(src.info().dtype, sel.shape);
  read_selection(src, sel, what, [&](const Tensor& values, std::size_t first) {
    if (values.nbytes() > 0)
      std::memcpy(out.bytes() + first * isz, values.bytes(), values.nbytes());
  });
  return out;
}

}  // namespace posenc
