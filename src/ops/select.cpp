#include "posenc/ops/select.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <xtensor/xadapt.hpp>

#include "dtype_visit.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

constexpr std::int64_t kMaxIndex = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMinIndex = std::numeric_limits<std::int64_t>::min();

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto at = s.find(sep);
    parts.push_back(trim(s.substr(0, at)));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

// An integer of the slicing text. Out of the int64 range, a range bound saturates as
// CPython's slice indices do (so `a[10**30:]` is empty, as in numpy), while an index
// is refused.
std::int64_t parse_int(std::string_view s, std::string_view text, bool saturate) {
  std::string_view digits = s;
  if (!digits.empty() && digits.front() == '+' && s.substr(1, 1) != "-") digits.remove_prefix(1);
  std::int64_t v = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, v);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    if (saturate) return digits.front() == '-' ? kMinIndex : kMaxIndex;
    throw UsageError(fmt::format("slice '{}': index '{}' is outside the int64 range", text, s));
  }
  if (digits.empty() || ec != std::errc() || ptr != end) {
    throw UsageError(fmt::format("slice '{}': '{}' is not an integer", text, s));
  }
  return v;
}

SliceItem parse_item(std::string_view part, std::string_view text) {
  const std::vector<std::string_view> f = split(part, ':');
  if (f.size() > 3) throw UsageError(fmt::format("slice '{}': bad axis '{}'", text, part));
  SliceItem item;
  if (f.size() == 1) {
    item.kind = SliceItem::Kind::index;
    item.index = parse_int(f[0], text, false);
    return item;
  }
  if (!f[0].empty()) item.start = parse_int(f[0], text, true);
  if (!f[1].empty()) item.stop = parse_int(f[1], text, true);
  if (f.size() == 3 && !f[2].empty()) item.step = parse_int(f[2], text, true);
  if (item.step == 0) throw UsageError(fmt::format("slice '{}': step is zero", text));
  return item;
}

std::string item_text(const SliceItem& it) {
  switch (it.kind) {
    case SliceItem::Kind::index:
      return std::to_string(it.index);
    case SliceItem::Kind::ellipsis:
      return "...";
    case SliceItem::Kind::range:
      break;
  }
  std::string s =
      (it.start ? std::to_string(*it.start) : "") + ":" + (it.stop ? std::to_string(*it.stop) : "");
  return it.step == 1 ? s : s + ":" + std::to_string(it.step);
}

/// The text that names `spec` in messages.
std::string spec_text(const SliceSpec& spec) {
  if (!spec.text.empty() || spec.items.empty()) return spec.text;
  std::string s;
  for (const auto& it : spec.items) s += (s.empty() ? "" : ",") + item_text(it);
  return s;
}

// A bound of a range clamped as CPython's PySlice_AdjustIndices does: negative values
// count from the end, then the result is clamped to [0, n] (step > 0) or [-1, n - 1]
// (step < 0). `v + n` cannot overflow: v < 0 and 0 <= n <= INT64_MAX.
std::int64_t clamp_bound(std::int64_t v, std::int64_t n, std::int64_t step) {
  if (v < 0) {
    v += n;
    if (v < 0) v = step < 0 ? -1 : 0;
  } else if (v >= n) {
    v = step < 0 ? n - 1 : n;
  }
  return v;
}

AxisSelection resolve_range(const SliceItem& it, std::int64_t n) {
  // CPython's PySlice_Unpack: a step below -INT64_MAX becomes -INT64_MAX, so -step is
  // representable; omitted bounds are the extreme values, clamped below.
  const std::int64_t step = it.step < -kMaxIndex ? -kMaxIndex : it.step;
  const std::int64_t start = clamp_bound(it.start.value_or(step < 0 ? kMaxIndex : 0), n, step);
  const std::int64_t stop =
      clamp_bound(it.stop.value_or(step < 0 ? kMinIndex : kMaxIndex), n, step);
  // start and stop now lie in [-1, n], so the differences below cannot overflow.
  std::int64_t size = 0;
  if (step < 0 && stop < start) size = (start - stop - 1) / -step + 1;
  if (step > 0 && start < stop) size = (stop - start - 1) / step + 1;
  AxisSelection a;
  a.size = static_cast<std::size_t>(size);
  a.start = size == 0 ? 0 : static_cast<std::size_t>(start);
  // With two or more entries |step| < n; with fewer the step is irrelevant, and 1 keeps
  // every stride product (step * stride) inside the tensor.
  a.step = size <= 1 ? 1 : step;
  return a;
}

}  // namespace

SliceSpec parse_slice(std::string_view text) {
  SliceSpec spec;
  spec.text = std::string(text);
  std::string_view body = trim(text);
  if (!body.empty() && body.front() == '[' && body.back() == ']') {
    body = body.substr(1, body.size() - 2);
  }
  if (trim(body).empty()) return spec;
  bool ellipsis = false;
  for (std::string_view part : split(body, ',')) {
    if (part == "...") {
      if (ellipsis) throw UsageError(fmt::format("slice '{}': more than one '...'", text));
      ellipsis = true;
      SliceItem item;
      item.kind = SliceItem::Kind::ellipsis;
      spec.items.push_back(item);
    } else if (part.empty()) {
      throw UsageError(fmt::format("slice '{}': empty axis (use ':' for a whole axis)", text));
    } else {
      spec.items.push_back(parse_item(part, text));
    }
  }
  return spec;
}

Selection resolve_selection(const SliceSpec& spec, const Shape& shape) {
  std::size_t explicit_axes = 0;
  for (const auto& it : spec.items) explicit_axes += it.kind != SliceItem::Kind::ellipsis;
  if (explicit_axes > shape.size()) {
    throw InputError(fmt::format("slice '{}': {} axes given for shape {}", spec_text(spec),
                                 explicit_axes, shape_str(shape)));
  }
  // "..." (or the missing trailing entries) stands for whole axes.
  std::vector<SliceItem> full;
  for (const auto& it : spec.items) {
    if (it.kind != SliceItem::Kind::ellipsis) {
      full.push_back(it);
    } else {
      full.insert(full.end(), shape.size() - explicit_axes, SliceItem{});
    }
  }
  full.resize(shape.size(), SliceItem{});

  Selection sel;
  sel.source = shape;
  sel.numel = 1;
  for (std::size_t ax = 0; ax < shape.size(); ++ax) {
    if (shape[ax] > static_cast<std::size_t>(kMaxIndex)) {
      throw InputError(fmt::format("slice '{}': axis {} of shape {} is too long to index",
                                   spec_text(spec), ax, shape_str(shape)));
    }
    const auto n = static_cast<std::int64_t>(shape[ax]);
    const SliceItem& it = full[ax];
    AxisSelection a;
    if (it.kind == SliceItem::Kind::index) {
      const std::int64_t i = it.index < 0 ? it.index + n : it.index;
      if (i < 0 || i >= n) {
        throw InputError(
            fmt::format("slice '{}': index {} is out of range for axis {} with size {}",
                        spec_text(spec), it.index, ax, n));
      }
      a.start = static_cast<std::size_t>(i);
      a.size = 1;
      a.drop = true;
    } else {
      a = resolve_range(it, n);
      sel.shape.push_back(a.size);
    }
    sel.axes.push_back(a);
    sel.numel *= a.size;
  }
  return sel;
}

Selection select_all(const Shape& shape) {
  Selection sel;
  sel.source = shape;
  sel.shape = shape;
  sel.numel = 1;
  for (std::size_t n : shape) {
    sel.axes.push_back(AxisSelection{0, 1, n, false});
    sel.numel *= n;
  }
  return sel;
}

xt::xstrided_slice_vector strided_slices(const Selection& sel) {
  using Index = std::ptrdiff_t;
  xt::xstrided_slice_vector out;
  for (std::size_t ax = 0; ax < sel.axes.size(); ++ax) {
    const AxisSelection& a = sel.axes[ax];
    const auto start = static_cast<Index>(a.start);
    const auto size = static_cast<Index>(a.size);
    const Index step = a.step;
    if (a.drop) {
      out.emplace_back(start);
    } else if (a.start == 0 && a.step == 1 && a.size == sel.source[ax]) {
      out.emplace_back(xt::all());
    } else if (size == 0) {
      out.emplace_back(xt::range(Index{0}, Index{0}));
    } else if (step > 0) {
      out.emplace_back(xt::range(start, start + (size - 1) * step + 1, step));
    } else {
      // Stopping at -1 would count from the end, so an end at index 0 is left open.
      const Index last = start + (size - 1) * step;
      if (last > 0) {
        out.emplace_back(xt::range(start, last - 1, step));
      } else {
        out.emplace_back(xt::range(start, xt::placeholders::_, step));
      }
    }
  }
  return out;
}

std::optional<std::size_t> contiguous_offset(const Selection& sel) {
  // C order: the run is contiguous when every axis after some axis k is taken whole,
  // axis k with unit step, and every axis before k holds a single entry.
  if (sel.numel == 0) return 0;
  std::size_t offset = 0, stride = 1;
  bool whole = true;  // all axes after the current one are taken whole
  for (std::size_t ax = sel.axes.size(); ax-- > 0;) {
    const AxisSelection& a = sel.axes[ax];
    if (!whole && a.size > 1) return std::nullopt;
    if (a.size > 1 && a.step != 1) return std::nullopt;
    offset += a.start * stride;
    whole = whole && a.start == 0 && a.size == sel.source[ax];
    stride *= sel.source[ax];
  }
  return offset;
}

Tensor select(const Tensor& t, const Selection& sel) {
  if (t.shape() != sel.source) {
    throw std::invalid_argument(fmt::format("select: a selection of shape {} applied to {}",
                                            shape_str(sel.source), shape_str(t.shape())));
  }
  Tensor out(t.dtype(), sel.shape);
  detail::visit_dtype(t.dtype(), [&](auto tag) {
    using S = detail::storage_t<decltype(tag)::value>;
    auto src = xt::adapt(t.data<S>(), t.numel(), xt::no_ownership(), t.shape());
    auto dst = xt::adapt(out.data<S>(), out.numel(), xt::no_ownership(), out.shape());
    if (out.numel() > 0) dst = select_view(src, sel);
  });
  return out;
}

std::vector<std::size_t> unravel_index(std::size_t flat, const Shape& shape) {
  std::vector<std::size_t> idx(shape.size());
  for (std::size_t a = shape.size(); a-- > 0;) {
    if (shape[a] == 0) continue;
    idx[a] = flat % shape[a];
    flat /= shape[a];
  }
  return idx;
}

}  // namespace posenc
