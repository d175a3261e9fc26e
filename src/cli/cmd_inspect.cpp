// posenc inspect: shape, dtype, storage, attributes, statistics and leading values of
// a tensor, or the datasets of an HDF5 file. The selection, its statistics and the
// streaming in slabs are the library's (ops/select.hpp, ops/stats.hpp); this file
// parses the options and prints.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "posenc/error.hpp"
#include "posenc/io/hdf5.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/io/text.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/ops/stats.hpp"
#include "posenc/printable.hpp"
#include "posenc/tensor.hpp"

namespace posenc::cli {

namespace {

struct InspectOptions {
  std::string input;
  bool stats = false;
  std::string slice;
  bool json = false;
  long long head = -1;  // -1: default
  std::string input_dtype;
};

constexpr std::size_t kDefaultHead = 10;
constexpr std::size_t kTableMax = 1000;  // selections up to this size print as a table

// --- output ------------------------------------------------------------------------

// Indices are the tensor's own, also within a --slice: element `flat` of the selection.
std::string index_str(std::size_t flat, const Selection& sel) {
  return fmt::format("({})", fmt::join(source_index(sel, flat), ", "));
}

// The source index of every entry of each result axis, to label the printed grid.
TableLabels source_labels(const Selection& sel) {
  TableLabels labels;
  for (const AxisSelection& a : sel.axes) {
    if (a.drop) continue;
    std::vector<std::size_t> l(a.size);
    for (std::size_t k = 0; k < a.size; ++k) l[k] = a.at(k);
    labels.push_back(std::move(l));
  }
  return labels;
}

std::string attr_text(const AttrValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return printable(*s);
  if (const auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (const auto* i = std::get_if<long long>(&v)) return fmt::format("{}", *i);
  return fmt::format("[{}]", fmt::join(std::get<std::vector<double>>(v), ", "));
}

using Json = nlohmann::json;

// JSON escapes control characters itself; bytes that are not UTF-8 (a file's names and
// strings may hold any) become U+FFFD rather than an exception.
std::string json_str(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

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
                const Selection& sel, const SelectionSummary& g, bool extra) {
  const TensorStats& st = g.stats;
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
  s.push_back(fmt::format("\"mean\": {}", num(st.mean)));
  s.push_back(fmt::format("\"std\": {}", num(st.std)));
  if (extra) {
    s.push_back(fmt::format("\"sum\": {}", num(st.sum)));
    s.push_back(fmt::format("\"absmax\": {}", num(st.absmax)));
    s.push_back(fmt::format("\"zeros\": {}", st.zeros));
    auto idx = [&](std::size_t flat) {
      return any ? json_shape(source_index(sel, flat)) : std::string("null");
    };
    s.push_back(fmt::format("\"argmin\": {}", idx(st.argmin)));
    s.push_back(fmt::format("\"argmax\": {}", idx(st.argmax)));
  }
  f.push_back(fmt::format("\"stats\": {{{}}}", fmt::join(s, ", ")));
  std::vector<std::string> vals;
  for (std::size_t i = 0; i < g.head.numel(); ++i) vals.push_back(json_value(g.head, i));
  f.push_back(fmt::format("\"values\": [{}]", fmt::join(vals, ", ")));
  f.push_back(fmt::format("\"values_complete\": {}", g.head.numel() == sel.numel));
  fmt::print("{{{}}}\n", fmt::join(f, ", "));
}

void print_text(const TensorRef& ref, const TensorInfo& info, const std::string& slice,
                const Selection& sel, const SelectionSummary& g, bool extra) {
  const TensorStats& st = g.stats;
  fmt::print("{}\n", printable(ref.text));
  fmt::print("  shape    {}\n", shape_str(info.shape));
  fmt::print("  dtype    {}\n", dtype_name(info.dtype));
  fmt::print("  storage  {}\n", printable(info.storage));
  for (std::size_t i = 0; i < info.attrs.size(); ++i) {
    fmt::print("  {}  {} = {}\n", i == 0 ? "attrs  " : "       ", printable(info.attrs[i].name),
               attr_text(info.attrs[i].value));
  }
  if (!slice.empty()) fmt::print("  slice    [{}] -> {}\n", slice, shape_str(sel.shape));
  if (st.finite > 0) {
    fmt::print("  min      {}\n  max      {}\n  mean     {}\n  std      {}\n", st.min, st.max,
               st.mean, st.std);
  } else {
    fmt::print("  min/max  (no finite values)\n");
  }
  fmt::print("  finite   {} of {}   NaN {}   +Inf {}   -Inf {}\n", st.finite, st.count, st.nan,
             st.posinf, st.neginf);
  if (extra && st.finite > 0) {
    fmt::print("  sum      {}\n  absmax   {}\n  zeros    {}\n", st.sum, st.absmax, st.zeros);
    fmt::print("  argmin   {}\n  argmax   {}\n", index_str(st.argmin, sel),
               index_str(st.argmax, sel));
  }
  const std::size_t n = g.head.numel();
  if (n == sel.numel && n <= kTableMax) {
    // The whole selection: a grid, numpy-like.
    Tensor t = Tensor(info.dtype, sel.shape);
    if (t.nbytes() > 0) std::memcpy(t.bytes(), g.head.bytes(), t.nbytes());
    // Rows and columns carry the tensor's own indices, not 0..n of the selection.
    std::string table = encode_table(t, source_labels(sel));
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
    for (std::size_t i = 0; i < n; ++i) vals.push_back(format_element(g.head, i));
    fmt::print("  values   first {} of {} (C order): [{}{}]\n", n, sel.numel, fmt::join(vals, ", "),
               n < sel.numel ? ", ..." : "");
  }
}

void list_file(const TensorRef& ref, bool json) {
  const std::vector<Hdf5Entry> entries = list_hdf5_entries(ref.path);
  std::vector<std::string> rows;
  if (!json) {
    fmt::print("{}: {} dataset{}\n", printable(ref.path), entries.size(),
               entries.size() == 1 ? "" : "s");
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
        fmt::print("  {}  {}  {}  {}\n", printable(e.name), shape_str(in.shape),
                   dtype_name(in.dtype), printable(in.storage));
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
      fmt::print("  {}  ({})\n", printable(e.name), printable(why));
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
      throw UsageError(
          fmt::format("--slice needs a dataset: {}:/NAME{}", ref.path, datasets_hint(ref.path)));
    }
    list_file(ref, o.json);
    return;
  }
  // Check the slice syntax before touching the file (a usage error comes first).
  const SliceSpec spec = parse_slice_option(o.slice);
  ref = with_input_dtype(ref, o.input_dtype);
  auto src = open_source(ref, {/*attrs=*/true});  // shown
  const TensorInfo& info = src->info();
  const Selection sel = resolve_slice_option(spec, info.shape, ref.text);
  std::size_t head = o.head >= 0                            ? static_cast<std::size_t>(o.head)
                     : !o.slice.empty() || sel.numel <= 100 ? kTableMax
                                                            : kDefaultHead;
  const SelectionSummary g = summarize(*src, sel, head);
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
                  std::string(kSliceHelp) +
                      "; statistics and values are of the selection, shown with the "
                      "tensor's own indices");
  sub->add_flag("--json", opt->json, "print one JSON object");
  sub->add_option("--head", opt->head,
                  "number of leading values shown (default 10; the whole selection up to "
                  "1000 values with --slice or for small tensors)")
      ->check(CLI::Range(0LL, 1000000000LL));
  sub->add_option("--input-dtype", opt->input_dtype, kInputDtypeHelp)->type_name("FP8");
  sub->callback([opt] { run_inspect(*opt); });
}

}  // namespace posenc::cli
