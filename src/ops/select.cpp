#include "posenc/ops/select.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <xtensor/xadapt.hpp>

#include "dtype_visit.hpp"
#include "ops/select_batches.hpp"
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

// The entries of the slicing text: split at the commas outside brackets. Brackets must
// balance and not nest.
std::vector<std::string_view> split_entries(std::string_view s, std::string_view text) {
  std::vector<std::string_view> parts;
  std::size_t from = 0;
  bool open = false;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    const char c = i < s.size() ? s[i] : ',';
    if (c == '[') {
      if (open) {
        throw UsageError(fmt::format(
            "slice '{}': nested '[' (a list holds integers; [[i,j,...]] is only for a list "
            "that is the whole slice)",
            text));
      }
      open = true;
    } else if (c == ']') {
      if (!open) throw UsageError(fmt::format("slice '{}': ']' without '['", text));
      open = false;
    } else if (c == ',' && !open) {
      parts.push_back(trim(s.substr(from, i - from)));
      from = i + 1;
    }
  }
  if (open) throw UsageError(fmt::format("slice '{}': '[' without ']'", text));
  return parts;
}

// "[i, j, ...]": the index list of one axis.
SliceItem parse_list(std::string_view part, std::string_view text) {
  if (part.back() != ']') {
    throw UsageError(
        fmt::format("slice '{}': bad axis '{}' (a list is '[i,j,...]' alone)", text, part));
  }
  SliceItem item;
  item.kind = SliceItem::Kind::list;
  const std::string_view body = trim(part.substr(1, part.size() - 2));
  if (body.empty()) return item;
  for (std::string_view v : split(body, ',')) {
    if (v.empty())
      throw UsageError(fmt::format("slice '{}': empty entry in list '{}'", text, part));
    if (v.find(':') != std::string_view::npos) {
      throw UsageError(
          fmt::format("slice '{}': list '{}' holds a range; lists hold integers", text, part));
    }
    item.list.push_back(parse_int(v, text, false));
  }
  return item;
}

SliceItem parse_item(std::string_view part, std::string_view text) {
  if (part.front() == '[') return parse_list(part, text);
  if (part.find_first_of("[]") != std::string_view::npos) {
    throw UsageError(
        fmt::format("slice '{}': bad axis '{}' (a list is '[i,j,...]' alone)", text, part));
  }
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
    case SliceItem::Kind::list:
      return fmt::format("[{}]", fmt::join(it.list, ","));
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

// An index list: every entry in [-n, n); evenly spaced lists (all of size <= 2) become
// the range they equal, so strided views and contiguous runs still apply.
AxisSelection resolve_list(const SliceItem& it, std::int64_t n, std::size_t ax,
                           const std::string& text) {
  std::vector<std::size_t> idx;
  idx.reserve(it.list.size());
  for (std::int64_t v : it.list) {
    const std::int64_t i = v < 0 ? v + n : v;
    if (i < 0 || i >= n) {
      throw InputError(fmt::format("slice '{}': index {} is out of range for axis {} with size {}",
                                   text, v, ax, n));
    }
    idx.push_back(static_cast<std::size_t>(i));
  }
  AxisSelection a;
  a.size = idx.size();
  if (idx.empty()) return a;
  a.start = idx[0];
  if (idx.size() == 1) return a;
  const std::int64_t step = static_cast<std::int64_t>(idx[1]) - static_cast<std::int64_t>(idx[0]);
  bool even = step != 0;
  for (std::size_t k = 2; even && k < idx.size(); ++k) {
    even = static_cast<std::int64_t>(idx[k]) - static_cast<std::int64_t>(idx[k - 1]) == step;
  }
  if (even) {
    a.step = step;
  } else {
    a.indices = std::move(idx);
  }
  return a;
}

}  // namespace

SliceSpec parse_slice(std::string_view text) {
  SliceSpec spec;
  spec.text = std::string(text);
  std::string_view body = trim(text);
  // Brackets around the whole text are numpy's own a[...]: the '[' at the front must
  // close at the very end ("[[0,1],2]" is wrapped, "[0,1],[2,3]" is two lists).
  if (!body.empty() && body.front() == '[') {
    int depth = 0;
    std::size_t close = std::string_view::npos;
    for (std::size_t i = 0; i < body.size() && close == std::string_view::npos; ++i) {
      depth += body[i] == '[' ? 1 : body[i] == ']' ? -1 : 0;
      if (depth == 0) close = i;
    }
    if (close == body.size() - 1) body = body.substr(1, body.size() - 2);
  }
  if (trim(body).empty()) return spec;
  bool ellipsis = false;
  for (std::string_view part : split_entries(body, text)) {
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
    // "[1,2,3]" is numpy's a[1,2,3]; the list was probably meant.
    const std::string_view t = trim(spec.text);
    const bool wrapped = t.size() > 1 && t.front() == '[' && t.back() == ']';
    throw InputError(fmt::format("slice '{}': {} axes given for shape {}{}", spec_text(spec),
                                 explicit_axes, shape_str(shape),
                                 wrapped ? " (brackets around the whole slice are numpy's "
                                           "a[...]; write a list on the first axis as [[i,j,...]])"
                                         : ""));
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
    } else if (it.kind == SliceItem::Kind::list) {
      a = resolve_list(it, n, ax, spec_text(spec));
      sel.shape.push_back(a.size);
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
    sel.axes.push_back(AxisSelection{0, 1, n, false, {}});
    sel.numel *= n;
  }
  return sel;
}

bool has_index_list(const Selection& sel) {
  return std::any_of(sel.axes.begin(), sel.axes.end(),
                     [](const AxisSelection& a) { return !a.indices.empty(); });
}

xt::xstrided_slice_vector strided_slices(const Selection& sel) {
  if (has_index_list(sel)) {
    throw std::invalid_argument("strided_slices: an index list is not a strided view");
  }
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
    if (a.size > 1 && (a.step != 1 || !a.indices.empty())) return std::nullopt;
    offset += a.start * stride;
    whole = whole && a.start == 0 && a.size == sel.source[ax];
    stride *= sel.source[ax];
  }
  return offset;
}

namespace {

// The selected elements of a C-ordered `src` of shape sel.source into `dst`, C order
// of the selection: an odometer over the result with the source offsets of every
// axis's entries computed once.
template <class T>
void gather_elements(const T* src, const Selection& sel, T* dst) {
  const std::size_t nd = sel.axes.size();
  if (sel.numel == 0) return;
  if (nd == 0) {
    *dst = *src;
    return;
  }
  std::vector<std::vector<std::size_t>> offset(nd);
  std::size_t stride = 1;
  for (std::size_t ax = nd; ax-- > 0;) {
    const AxisSelection& a = sel.axes[ax];
    offset[ax].resize(a.size);
    for (std::size_t k = 0; k < a.size; ++k) offset[ax][k] = a.at(k) * stride;
    stride *= sel.source[ax];
  }
  const std::vector<std::size_t>& inner = offset[nd - 1];
  std::vector<std::size_t> pos(nd, 0);
  for (;;) {
    std::size_t base = 0;
    for (std::size_t ax = 0; ax + 1 < nd; ++ax) base += offset[ax][pos[ax]];
    for (std::size_t off : inner) *dst++ = src[base + off];
    std::size_t ax = nd - 1;
    for (;;) {
      if (ax == 0) return;
      --ax;
      if (++pos[ax] < offset[ax].size()) break;
      pos[ax] = 0;
    }
  }
}

// Copies the selected elements of `src` (C order, shape sel.source) to `dst`.
template <class S>
void copy_selected(const S* src, const Selection& sel, S* dst) {
  if (sel.numel == 0) return;
  if (has_index_list(sel)) {
    gather_elements(src, sel, dst);
    return;
  }
  std::size_t n = 1;
  for (std::size_t e : sel.source) n *= e;
  auto in = xt::adapt(src, n, xt::no_ownership(), sel.source);
  auto out = xt::adapt(dst, sel.numel, xt::no_ownership(), sel.shape);
  out = select_view(in, sel);
}

}  // namespace

Tensor select(const Tensor& t, const Selection& sel) {
  if (t.shape() != sel.source) {
    throw std::invalid_argument(fmt::format("select: a selection of shape {} applied to {}",
                                            shape_str(sel.source), shape_str(t.shape())));
  }
  Tensor out(t.dtype(), sel.shape);
  detail::visit_dtype(t.dtype(), [&](auto tag) {
    using S = detail::storage_t<decltype(tag)::value>;
    copy_selected(t.data<S>(), sel, out.data<S>());
  });
  return out;
}

std::vector<std::size_t> source_index(const Selection& sel, std::size_t flat) {
  const std::vector<std::size_t> at = unravel_index(flat, sel.shape);
  std::vector<std::size_t> idx(sel.axes.size());
  std::size_t kept = 0;
  for (std::size_t ax = 0; ax < sel.axes.size(); ++ax) {
    const AxisSelection& a = sel.axes[ax];
    idx[ax] = a.drop ? a.start : a.at(at[kept++]);
  }
  return idx;
}

// --- reading a selection slab by slab ---------------------------------------------------

namespace detail {

SelectionBatches::SelectionBatches(const Selection& sel, std::size_t entry_bytes,
                                   std::size_t slab_bytes)
    : sel_(sel) {
  axis_ = sel.source.empty() ? 0 : slab_axis(sel.source);
  slab_entries_ = std::max<std::size_t>(1, slab_bytes / std::max<std::size_t>(1, entry_bytes));
  done_ = sel.numel == 0;
}

bool SelectionBatches::next(SelectionBatch& b) {
  if (done_) return false;
  b.axis = axis_;
  b.local = sel_;
  if (sel_.source.empty()) {  // rank 0: one value
    b.lo = 0;
    b.count = 1;
    done_ = true;
    return true;
  }
  const AxisSelection& rows = sel_.axes[axis_];
  // Entries k_, k_ + 1, ... of the axis while their span fits a slab.
  std::size_t lo = rows.at(k_), hi = lo, m = 1;
  while (k_ + m < rows.size) {
    const std::size_t i = rows.at(k_ + m);
    const std::size_t nlo = std::min(lo, i), nhi = std::max(hi, i);
    if (nhi - nlo + 1 > slab_entries_) break;
    lo = nlo, hi = nhi, ++m;
  }
  b.lo = lo;
  b.count = hi - lo + 1;
  b.local.source[axis_] = b.count;
  AxisSelection& a = b.local.axes[axis_];
  if (rows.indices.empty()) {
    a.start = rows.at(k_) - lo;
    a.step = m <= 1 ? 1 : rows.step;
  } else {
    a.indices.clear();
    for (std::size_t k = 0; k < m; ++k) a.indices.push_back(rows.at(k_ + k) - lo);
    a.start = a.indices[0];
    a.step = 1;
    if (m == 1) a.indices.clear();
  }
  a.size = m;
  b.local.numel = sel_.numel / rows.size * m;
  if (!a.drop) {
    std::size_t kept = 0;  // position of the axis in the result shape
    for (std::size_t ax = 0; ax < axis_; ++ax) kept += !sel_.axes[ax].drop;
    b.local.shape[kept] = m;
  }
  k_ += m;
  done_ = k_ >= rows.size;
  return true;
}

const std::byte* selected_elements(DType t, const std::byte* slab, const Selection& local,
                                   std::vector<std::byte>& gather) {
  const std::size_t item = dtype_size(t);
  if (auto off = contiguous_offset(local)) return slab + *off * item;  // zero-copy
  gather.resize(local.numel * item);
  visit_dtype(t, [&](auto tag) {
    using S = storage_t<decltype(tag)::value>;
    copy_selected(reinterpret_cast<const S*>(slab), local, reinterpret_cast<S*>(gather.data()));
  });
  return gather.data();
}

SelectionBatches::SelectionBatches(const Selection& sel, const TensorInfo& info,
                                   std::size_t slab_bytes)
    : SelectionBatches(sel,
                       info.shape.empty()
                           ? dtype_size(info.dtype)
                           : entry_bytes(info.shape, slab_axis(info.shape), info.dtype),
                       slab_bytes) {
  if (sel.source != info.shape) {
    throw std::invalid_argument(fmt::format("a selection of shape {} applied to {}",
                                            shape_str(sel.source), shape_str(info.shape)));
  }
}

SelectedReader::SelectedReader(const TensorInfo& info, FetchSlab fetch, Selection sel,
                               std::size_t slab_bytes)
    : dtype_(info.dtype),
      fetch_(std::move(fetch)),
      sel_(std::move(sel)),
      batches_(sel_, info, slab_bytes) {}

std::pair<const std::byte*, std::size_t> SelectedReader::next() {
  if (!batches_.next(batch_)) return {nullptr, 0};
  const std::byte* slab = fetch_(batch_.axis, batch_.lo, batch_.count);
  return {selected_elements(dtype_, slab, batch_.local, gather_), batch_.local.numel};
}

void for_each_selected(const TensorInfo& info, const FetchSlab& fetch, const Selection& sel,
                       std::size_t slab_bytes, const SelectedBlock& f) {
  SelectedReader reader(info, fetch, sel, slab_bytes);
  for (auto [p, n] = reader.next(); n > 0; std::tie(p, n) = reader.next()) f(p, n);
}

}  // namespace detail

void read_selection(TensorSource& src, const Selection& sel, const SelectedBlock& f,
                    std::size_t slab_bytes) {
  Buffer slab;
  detail::for_each_selected(src.info(), detail::fetch_from(src, slab), sel, slab_bytes, f);
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
