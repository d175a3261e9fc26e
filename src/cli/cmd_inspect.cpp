// posenc inspect: shape, dtype, storage, attributes, statistics and leading values of
// a tensor, or the datasets of an HDF5 file. The tensor is streamed in row slabs, so
// statistics of tensors larger than memory work; `--slice` reads only the rows (axis
// 0) it selects.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "posenc/error.hpp"
#include "posenc/io/hdf5.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/io/text.hpp"
#include "posenc/tensor.hpp"

namespace posenc::cli {

namespace {

struct InspectOptions {
  std::string input;
  bool stats = false;
  std::string slice;
  bool json = false;
  long long head = -1;  // -1: default
};

constexpr std::size_t kSlabBytes = std::size_t{16} << 20;
constexpr std::size_t kDefaultHead = 10;
constexpr std::size_t kTableMax = 1000;  // selections up to this size print as a table

// --- slicing -------------------------------------------------------------------------

/// A resolved selection: one arithmetic progression per source axis (parse.hpp) and
/// the shape of what remains. Nothing here is sized by the tensor's extents.
struct Selection {
  std::vector<AxisRange> axes;
  Shape shape;  // result shape
  std::size_t numel = 1;
};

Selection resolve(const std::string& text, const Shape& shape) {
  Selection s;
  s.axes = resolve_slice(text, shape);
  for (const AxisRange& r : s.axes) {
    if (r.keep) s.shape.push_back(r.count);
    s.numel *= r.count;  // at most the tensor's element count: no overflow
  }
  return s;
}

// --- statistics ------------------------------------------------------------------------

/// Count, mean and M2 (sum of squared deviations) of finite values, merged over slabs
/// with Chan et al.'s pairwise update; each slab is summed two-pass in long double.
/// This matches numpy's pairwise mean/std to ~1e-15 relative on ordinary data.
struct Stats {
  std::size_t count = 0, finite = 0, nan = 0, posinf = 0, neginf = 0, zeros = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double absmax = 0;
  std::size_t argmin = 0, argmax = 0;  // flat index (C order) within the selection
  long double mean = 0, m2 = 0, sum = 0;

  void add_block(const std::vector<double>& v, std::size_t first_flat) {
    long double s = 0;
    std::size_t n = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      double x = v[i];
      ++count;
      if (std::isnan(x)) {
        ++nan;
        continue;
      }
      if (std::isinf(x)) {
        ++(x > 0 ? posinf : neginf);
        continue;
      }
      if (x < min) min = x, argmin = first_flat + i;
      if (x > max) max = x, argmax = first_flat + i;
      absmax = std::max(absmax, std::fabs(x));
      zeros += x == 0;
      s += x;
      ++n;
    }
    if (n == 0) return;
    long double bmean = s / n, bm2 = 0;
    for (double x : v) {
      if (std::isfinite(x)) bm2 += (x - bmean) * (x - bmean);
    }
    long double delta = bmean - mean;
    std::size_t total = finite + n;
    mean += delta * n / total;
    m2 += bm2 + delta * delta * static_cast<long double>(finite) * n / total;
    sum += s;
    finite = total;
  }
};

// --- reading the selection -----------------------------------------------------------

/// Streams the selected elements in C order of the selection: stats for all, raw
/// bytes of the first `keep_n` for printing.
struct Gathered {
  Stats stats;
  Tensor kept;  // the first min(keep_n, numel) selected values, source dtype, flat
};

/// Walks the selected elements of one row (the axes after the row axis) in C order,
/// keeping the element offset in step with an odometer: O(1) per element, no list.
class RowWalk {
 public:
  RowWalk(const Shape& shape, const std::vector<AxisRange>& sel, std::size_t first_axis) {
    std::int64_t stride = 1;
    for (std::size_t ax = shape.size(); ax-- > first_axis;) {
      axes_.insert(axes_.begin(), Axis{sel[ax], stride, 0});
      stride *= static_cast<std::int64_t>(shape[ax]);
    }
    for (const Axis& a : axes_) count_ *= a.r.count;
  }
  std::size_t count() const { return count_; }
  /// Calls f(offset) for each selected element of the row, in C order.
  template <class F>
  void each(F f) {
    if (count_ == 0) return;
    std::int64_t off = 0;
    for (Axis& a : axes_) {
      a.k = 0;
      off += static_cast<std::int64_t>(a.r.start) * a.stride;
    }
    for (std::size_t n = 0; n < count_; ++n) {
      f(static_cast<std::size_t>(off));
      for (std::size_t j = axes_.size(); j-- > 0;) {
        Axis& a = axes_[j];
        const std::int64_t delta = a.r.step * a.stride;
        if (++a.k < a.r.count) {
          off += delta;
          break;
        }
        off -= delta * static_cast<std::int64_t>(a.r.count - 1);
        a.k = 0;
      }
    }
  }

 private:
  struct Axis {
    AxisRange r;
    std::int64_t stride;
    std::size_t k;
  };
  std::vector<Axis> axes_;
  std::size_t count_ = 1;
};

/// `read(first, count, dst)` delivers `count` entries of the row axis from `first`.
template <class Read>
Gathered gather(const TensorInfo& info, Read read, const Selection& sel, std::size_t keep_n,
                const std::string& what) {
  const std::size_t isz = dtype_size(info.dtype);
  Gathered g;
  const std::size_t keep = std::min(keep_n, sel.numel);
  g.kept = Tensor(info.dtype, Shape{keep});
  if (sel.numel == 0) return g;

  // Rows are the entries of the first axis whose extent is not 1 (the axes before it
  // have extent 1), so a [1, s, h, d] tensor is read along s, never as one row.
  const std::size_t row_axis = info.shape.empty() ? 0 : slab_axis(info.shape);
  Shape row_shape(info.shape.empty() ? info.shape.begin() : info.shape.begin() + row_axis + 1,
                  info.shape.end());
  const std::size_t row_elems = checked_numel(row_shape, isz, what);
  RowWalk walk(info.shape, sel.axes, info.shape.empty() ? 0 : row_axis + 1);
  const AxisRange rows = info.shape.empty() ? AxisRange{} : sel.axes[row_axis];
  const std::size_t nrows = info.shape.empty() ? 1 : rows.count;
  const std::size_t row_bytes = std::max<std::size_t>(1, row_elems * isz);
  const std::size_t slab_rows = std::max<std::size_t>(1, kSlabBytes / row_bytes);
  constexpr std::size_t kStatsBlock = std::size_t{1} << 20;

  Tensor slab;
  std::vector<double> values;
  std::size_t flat = 0, block_first = 0;
  auto flush = [&] {
    g.stats.add_block(values, block_first);
    block_first = flat;
    values.clear();
  };
  for (std::size_t k = 0; k < nrows;) {
    // Selected rows k..e-1 whose span fits one slab read (always at least one); the
    // rows are monotonic, so the span is between the first and the last.
    std::size_t e = k + 1;
    while (e < nrows) {
      const std::size_t a = rows.at(k), b = rows.at(e);
      if ((a > b ? a - b : b - a) + 1 > slab_rows) break;
      ++e;
    }
    const std::size_t lo = std::min(rows.at(k), rows.at(e - 1));
    const std::size_t span = std::max(rows.at(k), rows.at(e - 1)) - lo + 1;
    if (slab.numel() != span * row_elems) slab = Tensor(info.dtype, Shape{span * row_elems});
    read(lo, span, slab.bytes());
    for (std::size_t r = k; r < e; ++r) {
      const std::size_t base = (rows.at(r) - lo) * row_elems;
      walk.each([&](std::size_t o) {
        const std::size_t at = base + o;
        if (flat < keep) std::memcpy(g.kept.bytes() + flat * isz, slab.bytes() + at * isz, isz);
        values.push_back(slab.get(at));
        ++flat;
        if (values.size() >= kStatsBlock) flush();
      });
    }
    k = e;
  }
  if (!values.empty()) flush();
  return g;
}

// --- output ------------------------------------------------------------------------

/// The multi-index (C order) of flat position `flat` in `shape`.
std::vector<std::size_t> unravel(std::size_t flat, const Shape& shape) {
  std::vector<std::size_t> idx(shape.size());
  for (std::size_t a = shape.size(); a-- > 0;) {
    idx[a] = shape[a] == 0 ? 0 : flat % shape[a];
    flat = shape[a] == 0 ? 0 : flat / shape[a];
  }
  return idx;
}

std::string index_str(std::size_t flat, const Shape& shape) {
  return fmt::format("({})", fmt::join(unravel(flat, shape), ", "));
}

std::string attr_text(const AttrValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (const auto* i = std::get_if<long long>(&v)) return fmt::format("{}", *i);
  return fmt::format("[{}]", fmt::join(std::get<std::vector<double>>(v), ", "));
}

using Json = nlohmann::json;

std::string json_str(const std::string& s) { return Json(s).dump(); }

std::string json_double(double v) {
  if (std::isnan(v)) return "\"NaN\"";
  if (std::isinf(v)) return v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  return fmt::format("{}", v);
}

std::string json_attr(const AttrValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return json_str(*s);
  if (const auto* d = std::get_if<double>(&v)) return json_double(*d);
  if (const auto* i = std::get_if<long long>(&v)) return fmt::format("{}", *i);
  std::vector<std::string> parts;
  for (double d : std::get<std::vector<double>>(v)) parts.push_back(json_double(d));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string json_value(const Tensor& t, std::size_t i) {
  std::string s = format_element(t, i);
  if (s == "nan") return "\"NaN\"";
  if (s == "inf") return "\"Infinity\"";
  if (s == "-inf") return "\"-Infinity\"";
  return s;
}

std::string json_shape(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

void print_json(const TensorRef& ref, const TensorInfo& info, const std::string& slice,
                const Selection& sel, const Gathered& g, bool extra) {
  const Stats& st = g.stats;
  std::vector<std::string> f;
  f.push_back(fmt::format("\"ref\": {}", json_str(ref.text)));
  f.push_back(fmt::format("\"shape\": {}", json_shape(info.shape)));
  f.push_back(fmt::format("\"dtype\": {}", json_str(std::string(dtype_name(info.dtype)))));
  f.push_back(fmt::format("\"storage\": {}", json_str(info.storage)));
  std::vector<std::string> attrs;
  for (const auto& a : info.attrs) attrs.push_back(json_str(a.name) + ": " + json_attr(a.value));
  f.push_back(fmt::format("\"attrs\": {{{}}}", fmt::join(attrs, ", ")));
  if (!slice.empty()) {
    f.push_back(fmt::format("\"slice\": {}", json_str(slice)));
    f.push_back(fmt::format("\"slice_shape\": {}", json_shape(sel.shape)));
  }
  std::vector<std::string> s;
  s.push_back(fmt::format("\"count\": {}", st.count));
  s.push_back(fmt::format("\"finite\": {}", st.finite));
  s.push_back(fmt::format("\"nan\": {}", st.nan));
  s.push_back(fmt::format("\"posinf\": {}", st.posinf));
  s.push_back(fmt::format("\"neginf\": {}", st.neginf));
  bool any = st.finite > 0;
  auto num = [&](double v) { return any ? json_double(v) : std::string("null"); };
  s.push_back(fmt::format("\"min\": {}", num(st.min)));
  s.push_back(fmt::format("\"max\": {}", num(st.max)));
  s.push_back(fmt::format("\"mean\": {}", num(static_cast<double>(st.mean))));
  s.push_back(fmt::format("\"std\": {}",
                          num(any ? static_cast<double>(std::sqrt(st.m2 / st.finite)) : 0.0)));
  if (extra) {
    s.push_back(fmt::format("\"sum\": {}", num(static_cast<double>(st.sum))));
    s.push_back(fmt::format("\"absmax\": {}", num(st.absmax)));
    s.push_back(fmt::format("\"zeros\": {}", st.zeros));
    auto idx = [&](std::size_t flat) {
      return any ? json_shape(unravel(flat, sel.shape)) : std::string("null");
    };
    s.push_back(fmt::format("\"argmin\": {}", idx(st.argmin)));
    s.push_back(fmt::format("\"argmax\": {}", idx(st.argmax)));
  }
  f.push_back(fmt::format("\"stats\": {{{}}}", fmt::join(s, ", ")));
  std::vector<std::string> vals;
  for (std::size_t i = 0; i < g.kept.numel(); ++i) vals.push_back(json_value(g.kept, i));
  f.push_back(fmt::format("\"values\": [{}]", fmt::join(vals, ", ")));
  f.push_back(fmt::format("\"values_complete\": {}", g.kept.numel() == sel.numel));
  fmt::print("{{{}}}\n", fmt::join(f, ", "));
}

void print_text(const TensorRef& ref, const TensorInfo& info, const std::string& slice,
                const Selection& sel, const Gathered& g, bool extra) {
  const Stats& st = g.stats;
  fmt::print("{}\n", ref.text);
  fmt::print("  shape    {}\n", shape_str(info.shape));
  fmt::print("  dtype    {}\n", dtype_name(info.dtype));
  fmt::print("  storage  {}\n", info.storage);
  for (std::size_t i = 0; i < info.attrs.size(); ++i) {
    fmt::print("  {}  {} = {}\n", i == 0 ? "attrs  " : "       ", info.attrs[i].name,
               attr_text(info.attrs[i].value));
  }
  if (!slice.empty()) fmt::print("  slice    [{}] -> {}\n", slice, shape_str(sel.shape));
  if (st.finite > 0) {
    double sd = static_cast<double>(std::sqrt(st.m2 / st.finite));
    fmt::print("  min      {}\n  max      {}\n  mean     {}\n  std      {}\n", st.min, st.max,
               static_cast<double>(st.mean), sd);
  } else {
    fmt::print("  min/max  (no finite values)\n");
  }
  fmt::print("  finite   {} of {}   NaN {}   +Inf {}   -Inf {}\n", st.finite, st.count, st.nan,
             st.posinf, st.neginf);
  if (extra && st.finite > 0) {
    fmt::print("  sum      {}\n  absmax   {}\n  zeros    {}\n", static_cast<double>(st.sum),
               st.absmax, st.zeros);
    fmt::print("  argmin   {}\n  argmax   {}\n", index_str(st.argmin, sel.shape),
               index_str(st.argmax, sel.shape));
  }
  const std::size_t n = g.kept.numel();
  if (n == sel.numel && n <= kTableMax) {
    // The whole selection: a grid, numpy-like.
    Tensor t = Tensor(info.dtype, sel.shape);
    if (t.nbytes() > 0) std::memcpy(t.bytes(), g.kept.bytes(), t.nbytes());
    std::string table = encode_text(Format::text, t);
    table = table.substr(table.find('\n') + 1);  // the header repeats shape and dtype
    std::string indented;
    for (std::size_t p = 0; p < table.size();) {
      std::size_t nl = table.find('\n', p);
      std::string line = table.substr(p, nl - p);
      indented += line.empty() ? "\n" : "    " + line + "\n";
      p = nl + 1;
    }
    fmt::print("  values\n{}", indented);
  } else {
    std::vector<std::string> vals;
    for (std::size_t i = 0; i < n; ++i) vals.push_back(format_element(g.kept, i));
    fmt::print("  values   first {} of {} (C order): [{}{}]\n", n, sel.numel, fmt::join(vals, ", "),
               n < sel.numel ? ", ..." : "");
  }
}

void list_file(const TensorRef& ref, bool json) {
  const std::vector<Hdf5Entry> entries = list_hdf5_entries(ref.path);
  std::vector<std::string> rows;
  if (!json) {
    fmt::print("{}: {} dataset{}\n", ref.path, entries.size(), entries.size() == 1 ? "" : "s");
  }
  for (const Hdf5Entry& e : entries) {
    if (e.error.empty()) {
      const TensorInfo& in = e.info;
      if (json) {
        rows.push_back(fmt::format(
            "{{\"name\": {}, \"shape\": {}, \"dtype\": \"{}\", "
            "\"storage\": {}}}",
            json_str(e.name), json_shape(in.shape), dtype_name(in.dtype), json_str(in.storage)));
      } else {
        fmt::print("  {}  {}  {}  {}\n", e.name, shape_str(in.shape), dtype_name(in.dtype),
                   in.storage);
      }
      continue;
    }
    // Unreadable datasets are listed with the reason, without the file prefix.
    std::string why = e.error;
    auto at = why.find(e.name + "': ");
    if (at != std::string::npos) why = why.substr(at + e.name.size() + 3);
    if (json) {
      rows.push_back(
          fmt::format("{{\"name\": {}, \"error\": {}}}", json_str(e.name), json_str(why)));
    } else {
      fmt::print("  {}  ({})\n", e.name, why);
    }
  }
  if (json) {
    fmt::print("{{\"file\": {}, \"datasets\": [{}]}}\n", json_str(ref.path), fmt::join(rows, ", "));
  }
}

void run_inspect(const InspectOptions& o) {
  // "/" as the default dataset marks a bare file reference (x.h5 or x.h5:/): list it.
  TensorRef ref = parse_ref(o.input, "", "/");
  if (ref.format == Format::hdf5 && ref.dataset == "/") {
    if (!o.slice.empty()) {
      throw UsageError(fmt::format("--slice needs a dataset: {}:/NAME", ref.path));
    }
    list_file(ref, o.json);
    return;
  }
  // Check the slice syntax before touching the file (a usage error comes first).
  if (!o.slice.empty()) parse_slice(o.slice);
  auto src = open_source(ref, {/*attrs=*/true});
  const TensorInfo& info = src->info();
  Selection sel = resolve(o.slice, info.shape);
  std::size_t head = o.head >= 0                            ? static_cast<std::size_t>(o.head)
                     : !o.slice.empty() || sel.numel <= 100 ? kTableMax
                                                            : kDefaultHead;
  // A stream (stdin) whose rows are too large to read one at a time is read whole
  // first, in pieces as the data arrive: memory follows the data, not the header.
  const std::size_t axis = slab_axis(info.shape);
  std::size_t entry = dtype_size(info.dtype);
  for (std::size_t ax = axis + 1; ax < info.shape.size(); ++ax) entry *= info.shape[ax];
  const bool huge_rows = entry > kSlabBytes && !src->seekable();
  Tensor whole;
  if (huge_rows) whole = read_all_rows(*src);
  auto read = [&](std::size_t first, std::size_t count, std::byte* dst) {
    if (!huge_rows) return src->read_slab(axis, first, count, dst);
    std::memcpy(dst, whole.bytes() + first * entry, count * entry);
  };
  Gathered g = gather(info, read, sel, head, ref.text);
  if (o.json) {
    print_json(ref, info, o.slice, sel, g, o.stats);
  } else {
    print_text(ref, info, o.slice, sel, g, o.stats);
  }
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto opt = std::make_shared<InspectOptions>();
  auto* sub = app.add_subcommand(
      "inspect",
      "show shape, dtype, storage, attributes, statistics (min/max/mean/std over finite "
      "values, NaN/Inf counts) and leading values of a tensor; for an HDF5 file without a "
      "dataset, list its datasets.");
  sub->add_option("input", opt->input, "tensor reference (x.npy, x.h5:/d, x.h5, x.csv, x.json, -)")
      ->required();
  sub->add_flag("--stats", opt->stats, "also show sum, absmax, zero count, argmin and argmax");
  sub->add_option("--slice", opt->slice,
                  "numpy basic slicing, one entry per axis: ints, a:b, a:b:c, negative "
                  "indices, ':' and '...' (e.g. \"0,:,:4\"); statistics and values are of "
                  "the selection");
  sub->add_flag("--json", opt->json, "print one JSON object");
  sub->add_option("--head", opt->head,
                  "number of leading values shown (default 10; the whole selection up to "
                  "1000 values with --slice or for small tensors)")
      ->check(CLI::Range(0LL, 1000000000LL));
  sub->callback([opt] { run_inspect(*opt); });
}

}  // namespace posenc::cli
