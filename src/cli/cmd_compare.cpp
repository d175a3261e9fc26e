// posenc compare A B: element-wise comparison with numpy.isclose semantics (B is the
// reference: |a - b| <= atol + rtol * |b|) and/or a bound on the distance in units in
// the last place. Exit 0 when every element matches, 1 when any differs or the shapes
// differ. --by and --top say where the errors are: a table per group of indices along
// any number of axes (written with -o, drawn with --plot like the analyses' tables for
// one or two axes) and the worst elements.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/declared_options.hpp"
#include "cli/table_output.hpp"
#include "posenc/analysis.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/compare.hpp"
#include "posenc/ops/compare_baseline.hpp"
#include "posenc/ops/compare_fields.hpp"
#include "posenc/ops/compare_locate.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/printable.hpp"
#include "posenc/tensor.hpp"

namespace posenc::cli {

namespace {

struct CompareCliOptions {
  std::string a, b;
  CompareOptions rule;  ///< --rtol, --atol, --max-ulp, --equal-nan (compare_fields.hpp)
  bool json = false;
  std::string slice;
  std::string axes, pairs;
  std::optional<std::string> by;
  std::optional<std::size_t> rotary_dim, top;
  TableOutputOptions table;
  std::string baseline;  ///< flash-attn's verdict against this baseline
  BaselineRule verdict;  ///< --factor (its atol is --atol)
  std::string atol_rule;
  std::string input_dtype;  ///< --input-dtype: A, B (and the baseline) read as fp8
  CLI::App* app = nullptr;
};

/// What the report says about the breakdown: the axes' names and the table.
struct Located {
  std::vector<std::string> names;
  std::optional<AnalysisTable> table;
};

/// For axis k of the breakdown: the entries whose groups hold mismatches.
std::vector<std::size_t> entries_with_mismatches(const CompareBreakdown& bd, std::size_t k) {
  std::size_t inner = 1;  // groups per entry of axis k (C order: the later axes')
  for (std::size_t j = k + 1; j < bd.coords.size(); ++j) inner *= bd.coords[j].size();
  std::vector<bool> hit(bd.coords[k].size(), false);
  for (std::size_t g = 0; g < bd.groups.size(); ++g) {
    if (bd.groups[g].mismatches != 0) hit[g / inner % hit.size()] = true;
  }
  std::vector<std::size_t> out;
  for (std::size_t e = 0; e < hit.size(); ++e) {
    if (hit[e]) out.push_back(e);
  }
  return out;
}

/// The indices of those entries as runs of consecutive indices [first, last].
std::vector<std::pair<std::size_t, std::size_t>> mismatch_runs(const CompareBreakdown& bd,
                                                               std::size_t k) {
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  for (std::size_t e : entries_with_mismatches(bd, k)) {
    const std::size_t c = bd.coords[k][e];
    if (!runs.empty() && runs.back().second + 1 == c) {
      runs.back().second = c;
    } else {
      runs.emplace_back(c, c);
    }
  }
  return runs;
}

/// The group with the largest tolerance ratio (the first such row), if any.
std::optional<std::size_t> worst_group(const CompareBreakdown& bd) {
  std::optional<std::size_t> w;
  for (std::size_t g = 0; g < bd.groups.size(); ++g) {
    if (bd.groups[g].count && (!w || bd.groups[g].max_tol_ratio > bd.groups[*w].max_tol_ratio)) {
      w = g;
    }
  }
  return w;
}

/// The entries of group `g` along the breakdown's axes: A's indices (or pair indices).
std::vector<std::size_t> group_index(const CompareBreakdown& bd, std::size_t g) {
  std::vector<std::size_t> idx(bd.coords.size());
  for (std::size_t k = idx.size(); k-- > 0;) {
    idx[k] = bd.coords[k][g % bd.coords[k].size()];
    g /= bd.coords[k].size();
  }
  return idx;
}

std::size_t groups_with_mismatches(const CompareBreakdown& bd) {
  return static_cast<std::size_t>(std::count_if(bd.groups.begin(), bd.groups.end(),
                                                [](const GroupStats& s) { return s.mismatches; }));
}

std::string runs_text(const std::vector<std::pair<std::size_t, std::size_t>>& runs) {
  if (runs.empty()) return "none";
  constexpr std::size_t kShown = 12;
  std::string s;
  for (std::size_t i = 0; i < runs.size() && i < kShown; ++i) {
    s += i ? ", " : "";
    s += runs[i].first == runs[i].second ? fmt::format("{}", runs[i].first)
                                         : fmt::format("{}-{}", runs[i].first, runs[i].second);
  }
  if (runs.size() > kShown) s += fmt::format(", ... ({} runs)", runs.size());
  return s;
}

std::string index_str(const std::vector<std::size_t>& idx) {
  if (idx.size() == 1) return fmt::format("({},)", idx[0]);
  std::string s = "(";
  for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + ")";
}

nlohmann::ordered_json json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

// Indices are reported in A's own coordinates, also with --slice.
nlohmann::ordered_json index_json(std::optional<std::size_t> flat, const CompareResult& r) {
  if (!flat) return nullptr;
  return r.index_in_a(*flat);
}

void print_json(std::FILE* to, const TensorRef& ra, DType da, const TensorRef& rb, DType db,
                const CompareResult& r, const std::string& slice, const Located& loc, bool top) {
  const CompareRule& rule = r.rule;
  auto side = [&](const TensorRef& ref, DType t, const Shape& s, const Selection& sel) {
    nlohmann::ordered_json j;
    j["ref"] = ref.text;
    j["dtype"] = std::string(dtype_name(t));
    j["shape"] = s;
    if (!slice.empty()) j["slice_shape"] = sel.shape;
    return j;
  };
  nlohmann::ordered_json j;
  j["a"] = side(ra, da, r.shape_a, r.sel_a);
  j["b"] = side(rb, db, r.shape_b, r.sel_b);
  if (!slice.empty()) j["slice"] = slice;
  j["match"] = r.match();
  j["shapes_equal"] = r.shapes_equal;
  j["rtol"] = rule.rtol;
  j["atol"] = rule.atol;
  j["max_ulp"] =
      rule.max_ulp ? nlohmann::ordered_json(*rule.max_ulp) : nlohmann::ordered_json(nullptr);
  j["equal_nan"] = rule.equal_nan;
  j["ulp_type"] = rule.ulp_type_name();
  j["total"] = r.total;
  j["mismatches"] = r.mismatches;
  j["first_mismatch_index"] = index_json(r.first_mismatch, r);
  j["max_abs_diff"] = json_number(r.max_abs.value);
  j["max_abs_diff_index"] = index_json(r.max_abs.index, r);
  j["max_rel_diff"] = json_number(r.max_rel.value);
  j["max_rel_diff_index"] = index_json(r.max_rel.index, r);
  j["max_ulp_diff"] =
      r.max_ulp ? nlohmann::ordered_json(*r.max_ulp) : nlohmann::ordered_json(nullptr);
  j["max_ulp_diff_index"] = index_json(r.max_ulp_index, r);
  j["nan_a"] = r.nan_a;
  j["nan_b"] = r.nan_b;
  j["nan_mismatches"] = r.nan_mismatches;
  if (loc.table) {
    const AnalysisTable& t = *loc.table;
    nlohmann::ordered_json by;
    by["axes"] = loc.names;
    std::vector<std::size_t> numbers;
    for (const ByAxis& a : r.breakdown->axes) numbers.push_back(a.axis);
    by["axis_numbers"] = numbers;
    nlohmann::ordered_json where = nlohmann::ordered_json::object();
    for (std::size_t k = 0; k < loc.names.size(); ++k) {
      nlohmann::ordered_json runs = nlohmann::ordered_json::array();
      for (const auto& [lo, hi] : mismatch_runs(*r.breakdown, k)) runs.push_back({lo, hi});
      where[loc.names[k]] = runs;
    }
    by["mismatches_at"] = where;
    by["groups_with_mismatches"] = groups_with_mismatches(*r.breakdown);
    by["worst_group"] = nullptr;
    if (const auto g = worst_group(*r.breakdown)) {
      const GroupStats& s = r.breakdown->groups[*g];
      nlohmann::ordered_json w;
      w["index"] = group_index(*r.breakdown, *g);
      w["count"] = s.count;
      w["mismatches"] = s.mismatches;
      w["max_abs"] = s.max_abs < 0 ? json_number(std::nan("")) : json_number(s.max_abs);
      w["max_tol_ratio"] = json_number(s.max_tol_ratio);
      by["worst_group"] = std::move(w);
    }
    by["columns"] = t.columns;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    const std::size_t cols = t.columns.size();
    for (std::size_t i = 0; i < t.data.shape()[0]; ++i) {
      nlohmann::ordered_json row = nlohmann::ordered_json::array();
      for (std::size_t c = 0; c < cols; ++c) row.push_back(json_number(t.data.get(i * cols + c)));
      rows.push_back(std::move(row));
    }
    by["rows"] = std::move(rows);
    j["by"] = std::move(by);
  }
  if (top) {
    nlohmann::ordered_json worst = nlohmann::ordered_json::array();
    for (const WorstElement& w : r.worst) {
      nlohmann::ordered_json e;
      e["index"] = r.index_in_a(w.flat);
      e["a"] = json_number(w.a);
      e["b"] = json_number(w.b);
      e["abs_diff"] = json_number(std::fabs(w.a - w.b));
      e["tol_ratio"] = json_number(w.tol_ratio);
      e["mismatch"] = w.mismatch;
      worst.push_back(std::move(e));
    }
    j["worst"] = std::move(worst);
  }
  // References may name files whose names are not UTF-8: U+FFFD, not an exception.
  fmt::print(to, "{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

/// What the tolerance ratio is under `rule`, for the heading of the worst elements.
std::string ratio_text(const CompareRule& rule) {
  const std::string tol = "|a - b| / (atol + rtol |b|)";
  if (!rule.max_ulp) return tol;
  const std::string ulp = "ulp / max_ulp";
  return rule.tolerance_explicit ? "min(" + ulp + ", " + tol + ")" : ulp;
}

void print_located(std::FILE* to, const CompareResult& r, const Located& loc, bool print_table,
                   bool top) {
  if (loc.table) {
    std::string where;
    for (std::size_t k = 0; k < loc.names.size(); ++k) {
      where += fmt::format("{}{} {}", k ? "; " : "", loc.names[k],
                           runs_text(mismatch_runs(*r.breakdown, k)));
    }
    fmt::print(to, "mismatches at: {}\n", where);
    const CompareBreakdown& bd = *r.breakdown;
    if (const auto g = worst_group(bd); g && bd.groups[*g].mismatches) {
      std::string names;
      for (const std::string& n : loc.names) names += (names.empty() ? "" : ", ") + n;
      fmt::print(
          to, "groups with mismatches: {} of {}; worst ({}) = {}: {} of {} differ, ratio {}\n",
          groups_with_mismatches(bd), bd.groups.size(), names, index_str(group_index(bd, *g)),
          bd.groups[*g].mismatches, bd.groups[*g].count, bd.groups[*g].max_tol_ratio);
    }
    if (print_table) fmt::print(to, "{}", table_text(*loc.table));
  }
  if (top) {
    fmt::print(to, "worst {} by {}:\n", r.worst.size(), ratio_text(r.rule));
    for (const WorstElement& w : r.worst) {
      fmt::print(to, "  {}: a = {}, b = {}, |a - b| = {}, ratio {}{}\n",
                 index_str(r.index_in_a(w.flat)), w.a, w.b, std::fabs(w.a - w.b), w.tol_ratio,
                 w.mismatch ? "" : " (matches)");
    }
  }
}

void print_text(std::FILE* to, const TensorRef& ra, DType da, const TensorRef& rb, DType db,
                const CompareResult& r, const std::string& slice, const Located& loc,
                bool print_table, bool top) {
  const CompareRule& rule = r.rule;
  fmt::print(to, "a: {}: {} {}\n", printable(ra.text), dtype_name(da), shape_str(r.shape_a));
  fmt::print(to, "b: {}: {} {} (reference)\n", printable(rb.text), dtype_name(db),
             shape_str(r.shape_b));
  if (!slice.empty()) {
    fmt::print(to, "slice: [{}] -> {} and {} (indices below are in a)\n", slice,
               shape_str(r.sel_a.shape), shape_str(r.sel_b.shape));
  }
  if (!r.shapes_equal) {
    fmt::print(to, "shapes differ: {} vs {}\ndiffer\n", shape_str(r.sel_a.shape),
               shape_str(r.sel_b.shape));
    return;
  }
  std::string text = fmt::format("|a - b| <= {} + {} * |b|", rule.atol, rule.rtol);
  if (rule.max_ulp) {
    std::string ulp_rule =
        fmt::format("ulp distance in {} <= {}", rule.ulp_type_name(), *rule.max_ulp);
    text = rule.tolerance_explicit ? ulp_rule + " or " + text : ulp_rule;
  }
  if (rule.equal_nan) text += " (NaN equals NaN)";
  fmt::print(to, "rule: {}\n", text);
  auto at = [&](const DiffAt& e) {
    if (!e.index) return std::string();
    return fmt::format(" at {}: a = {}, b = {}", index_str(r.index_in_a(*e.index)), e.a, e.b);
  };
  fmt::print(to, "max abs diff: {}{}\n", r.max_abs.value, at(r.max_abs));
  fmt::print(to, "max rel diff: {}{}\n", r.max_rel.value, at(r.max_rel));
  if (r.max_ulp) {
    fmt::print(
        to, "max ulp diff: {} ({}){}\n", *r.max_ulp, rule.ulp_type_name(),
        r.max_ulp_index ? " at " + index_str(r.index_in_a(*r.max_ulp_index)) : std::string());
  }
  if (r.nan_a || r.nan_b) {
    fmt::print(to, "NaN: {} in a, {} in b, {} where only one side is NaN\n", r.nan_a, r.nan_b,
               r.nan_mismatches);
  }
  const double pct = r.total ? 100.0 * static_cast<double>(r.mismatches) / r.total : 0.0;
  fmt::print(to, "mismatches: {} of {} ({:.3g}%)", r.mismatches, r.total, pct);
  if (r.first_mismatch) {
    fmt::print(to, ", first at {}", index_str(r.index_in_a(*r.first_mismatch)));
  }
  fmt::print(to, "\n");
  print_located(to, r, loc, print_table, top);
  fmt::print(to, "{}\n", r.match() ? "match" : "differ");
}

/// The --by, --pairs and --rotary-dim request, resolved against A's shape.
CompareLocate locate_request(const CompareCliOptions& o, const std::vector<ByItem>& by,
                             const Shape& shape_a, const std::string& what,
                             std::vector<std::string>& names) {
  CompareLocate loc;
  loc.top = o.top.value_or(0);
  if (by.empty()) return loc;
  const std::string layout = compare_layout(o.axes, shape_a.size(), what);
  loc.by = resolve_by(by, layout, shape_a.size(), what);
  if (!o.pairs.empty()) loc.pairs = parse_pair_style(o.pairs);
  loc.rotary_dim = o.rotary_dim;
  for (const ByAxis& a : loc.by) names.push_back(by_axis_name(a, layout));
  return loc;
}

// compare A B --baseline PT: flash-attn's verdict (ops/compare_baseline.hpp). The three
// tensors are read whole.
void run_verdict(const CompareCliOptions& o) {
  for (const char* name : {"--rtol", "--max-ulp", "--equal-nan", "--slice", "--by", "--axes",
                           "--pairs", "--rotary-dim", "--top", "-o", "--plot"}) {
    if (o.app->get_option_no_throw(name) && o.app->count(name) > 0) {
      throw UsageError(
          fmt::format("{}: not with --baseline (flash-attn's rule compares the "
                      "largest errors)",
                      name));
    }
  }
  if (o.rule.atol && !o.atol_rule.empty()) {
    throw UsageError("--atol: a fixed atol replaces --atol-rule; give one of them");
  }
  BaselineRule rule = o.verdict;
  rule.atol = o.rule.atol;
  std::vector<TensorRef> refs{with_input_dtype(parse_ref(o.a), o.input_dtype),
                              with_input_dtype(parse_ref(o.b), o.input_dtype),
                              with_input_dtype(parse_ref(o.baseline), o.input_dtype)};
  if ((refs[0].is_stdio() + refs[1].is_stdio() + refs[2].is_stdio()) > 1) {
    throw UsageError("compare: only one of A, B and --baseline can come from standard input");
  }
  rule.names = {refs[0].text, refs[1].text, refs[2].text};  // messages name the files
  const Tensor a = read_tensor(refs[0]), b = read_tensor(refs[1]), pt = read_tensor(refs[2]);
  const BaselineVerdict v = judge_against_baseline(a, b, pt, rule);
  exit_code() = v.pass() ? 0 : 1;
  if (globals().quiet) return;
  const Tensor* ts[] = {&a, &b, &pt};
  auto index_of = [](std::optional<std::size_t> flat, const Shape& shape) {
    return unravel_index(flat.value_or(0), shape);
  };
  const std::string atol_text =
      v.atol_fa ? fmt::format("2 * max|b + 0.3 - 0.3 - b| in {} (flash-attn's fwd_atol)",
                              dtype_name(v.ref_dtype))
                : std::string("given");
  if (o.json) {
    nlohmann::ordered_json j;
    const char* keys[] = {"a", "b", "baseline"};
    for (std::size_t i = 0; i < 3; ++i) {
      nlohmann::ordered_json side;
      side["ref"] = refs[i].text;
      side["dtype"] = std::string(dtype_name(ts[i]->dtype()));
      side["shape"] = ts[i]->shape();
      j[keys[i]] = side;
    }
    j["match"] = v.pass();
    j["shapes_equal"] = v.shapes_equal;
    j["rule"] = "flash-attn";
    for_each_verdict_number(v, a.shape(), b.shape(), [&j](const char* key, const auto& x) {
      using X = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<X, double>) {
        j[key] = json_number(x);
      } else if constexpr (std::is_same_v<X, std::string>) {
        j[key] = x;
      } else {
        j[key] = x ? nlohmann::ordered_json(*x) : nlohmann::ordered_json(nullptr);
      }
    });
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    return;
  }
  fmt::print("a: {}: {} {}\n", printable(refs[0].text), dtype_name(a.dtype()),
             shape_str(a.shape()));
  fmt::print("b: {}: {} {} (reference)\n", printable(refs[1].text), dtype_name(b.dtype()),
             shape_str(b.shape()));
  fmt::print("baseline: {}: {} {}\n", printable(refs[2].text), dtype_name(pt.dtype()),
             shape_str(pt.shape()));
  if (!v.shapes_equal) {
    fmt::print("shapes differ: {} vs {}\ndiffer\n", shape_str(a.shape()), shape_str(b.shape()));
    return;
  }
  fmt::print("rule: max|a - b| <= {} * max|baseline - b| + atol (flash-attn's tests)\n", v.factor);
  fmt::print("atol: {} = {}\n", atol_text, v.atol);
  auto at = [&](std::optional<std::size_t> flat, const Shape& shape) {
    return flat ? " at " + index_str(index_of(flat, shape)) : std::string();
  };
  fmt::print("error: max|a - b| = {}{} (in {})\n", v.kernel_error, at(v.kernel_at, a.shape()),
             dtype_name(v.kernel_diff_type));
  fmt::print("baseline error: max|baseline - b| = {}{} (in {})\n", v.baseline_error,
             at(v.baseline_at, b.shape()), dtype_name(v.baseline_diff_type));
  fmt::print("bound: {} * {} + {} = {}\n", v.factor, v.baseline_error, v.atol, v.bound);
  fmt::print("{}\n", v.pass() ? "match" : "differ");
}

void run_compare(const CompareCliOptions& o) {
  if (!o.baseline.empty()) return run_verdict(o);
  for (const char* name : {"--factor", "--atol-rule"}) {
    if (o.app->count(name) > 0) throw UsageError(fmt::format("{}: applies to --baseline", name));
  }
  const TensorRef ra = with_input_dtype(parse_ref(o.a), o.input_dtype),
                  rb = with_input_dtype(parse_ref(o.b), o.input_dtype);
  if (ra.is_stdio() && rb.is_stdio()) {
    throw UsageError("compare: only one of A and B can come from standard input");
  }
  const SliceSpec spec = parse_slice_option(o.slice);  // usage errors before any read
  const std::vector<ByItem> by = o.by ? parse_by(*o.by) : std::vector<ByItem>{};
  const bool pair = std::any_of(by.begin(), by.end(), [](const ByItem& i) { return i.pair; });
  if (!o.pairs.empty()) parse_pair_style(o.pairs);
  if ((!o.pairs.empty() || o.rotary_dim) && !pair) {
    throw UsageError(
        fmt::format("{}: applies to --by pair", o.pairs.empty() ? "--rotary-dim" : "--pairs"));
  }
  if (o.rotary_dim && (*o.rotary_dim == 0 || *o.rotary_dim % 2 != 0)) {
    throw UsageError(fmt::format("--rotary-dim: must be even and positive, got {}", *o.rotary_dim));
  }
  if (!o.axes.empty() && by.empty()) throw UsageError("--axes: applies to --by");
  if (o.top && *o.top == 0) throw UsageError("--top: must be at least 1");
  if (by.empty() && (!o.table.out.outputs.empty() || !o.table.plot.empty())) {
    throw UsageError(fmt::format("{}: writes the table of --by; give --by",
                                 o.table.plot.empty() ? "-o" : "--plot"));
  }
  if (by.size() > 2 && !o.table.plot.empty()) {
    throw UsageError(fmt::format(
        "--plot: draws a breakdown of one or two axes, --by '{}' has {}; write it with -o", *o.by,
        by.size()));
  }
  if (!o.table.out.outputs.empty() && o.table.out.outputs[0] == "-" && o.table.plot == "-") {
    throw UsageError("-o - and --plot - would both write to standard output");
  }
  auto sa = open_source(ra);
  auto sb = open_source(rb);
  // Each side's selection is checked here, so that an index outside a shape names it.
  resolve_slice_option(spec, sa->info().shape, ra.text);
  resolve_slice_option(spec, sb->info().shape, rb.text);
  Located loc;
  CompareOptions co = o.rule;
  co.locate = locate_request(o, by, sa->info().shape, ra.text, loc.names);
  const CompareResult r = compare(*sa, *sb, co, spec);
  if (r.breakdown) {
    Attrs extra;
    if (co.locate.by.size() && std::any_of(co.locate.by.begin(), co.locate.by.end(),
                                           [](const ByAxis& a) { return a.pairs; })) {
      extra.push_back({"pairs", pair_style_name(co.locate.pairs)});
    }
    if (!o.slice.empty()) extra.push_back({"slice", o.slice});
    loc.table = compare_breakdown_table(r, loc.names, std::move(extra));
    emit_table(*loc.table, o.table, false);
  }
  exit_code() = r.match() ? 0 : 1;
  if (globals().quiet) return;
  // With -o - or --plot -, standard output holds the table; the report goes to stderr.
  std::FILE* to = o.table.stdout_taken() ? stderr : stdout;
  const bool print_table = o.table.out.outputs.empty() && o.table.plot.empty();
  if (o.json) {
    print_json(to, ra, sa->info().dtype, rb, sb->info().dtype, r, o.slice, loc, o.top.has_value());
  } else {
    print_text(to, ra, sa->info().dtype, rb, sb->info().dtype, r, o.slice, loc, print_table,
               o.top.has_value());
  }
}

}  // namespace

void register_compare(CLI::App& app) {
  auto opt = std::make_shared<CompareCliOptions>();
  auto* sub = app.add_subcommand(
      "compare",
      "compare tensor A with reference B element-wise: |a - b| <= atol + rtol * |b| "
      "(numpy.isclose) and/or a ULP bound. Exit 0 if all match, 1 if not. --by and --top "
      "say where they differ.");
  opt->app = sub;
  sub->add_option("a", opt->a, "tensor to check")->required();
  sub->add_option("b", opt->b, "reference tensor")->required();
  sub->add_option("--input-dtype", opt->input_dtype,
                  std::string(kInputDtypeHelp) + "; applies to A, B and --baseline")
      ->type_name("FP8");
  add_declared_options(sub, opt->rule, {"rtol", "atol", "max_ulp"});
  sub->add_flag("--json", opt->json, "print the report as JSON on stdout");
  add_declared_options(sub, opt->rule, {"equal_nan"});
  sub->add_option("--slice", opt->slice,
                  std::string(kSliceHelp) +
                      "; the same selection of A and of B is compared (each resolved against "
                      "its own shape); reported indices are A's own, not the selection's");
  const char* fa = "FLASH-ATTN'S VERDICT";
  sub->add_option("--baseline", opt->baseline,
                  "judge A as flash-attn's tests do: pass when max|A - B| <= R * "
                  "max|PT - B| + atol, with PT the same computation in low precision "
                  "(FA's PyTorch baseline) and B the reference")
      ->group(fa);
  add_declared_options(sub, opt->verdict, {"factor"}, fa);
  sub->add_option("--atol-rule", opt->atol_rule,
                  "atol of --baseline: fa (default), 2 * max|B + 0.3 - 0.3 - B| computed in "
                  "B's dtype as torch does (FA's fwd_atol); --atol X gives a fixed one instead")
      ->check(CLI::IsMember({"fa"}))
      ->group(fa);
  const char* g = "LOCATING ERRORS";
  sub->add_option("--by", opt->by,
                  "where the errors are: mismatches and max abs/rel/ulp error and tolerance "
                  "ratio per group of indices along any number of axes (comma list of axis "
                  "letters of --axes, axis numbers, or pair: the dimension pairs of axis d), "
                  "e.g. --by h,s,d: one row per (head, position, dim)")
      ->group(g);
  sub->add_option("--axes", opt->axes,
                  "axis letters of A for --by (b, h, s, d; default by rank: bhsd, bsd, sd)")
      ->group(g);
  sub->add_option("--pairs", opt->pairs,
                  "how --by pair groups dims: neox (j, j + R/2; alias half) or gptj (2j, 2j + 1; "
                  "alias interleaved); default neox")
      ->group(g);
  sub->add_option("--rotary-dim", opt->rotary_dim,
                  "with --by pair: the first R dims rotate (default all); dims R.. count as "
                  "consecutive pairs after them")
      ->group(g);
  sub->add_option("--top", opt->top,
                  "list the N worst elements (by tolerance ratio: |a - b| / (atol + rtol |b|), "
                  "or ulp / max_ulp; ties by |a - b|, then index) with their indices and values")
      ->group(g);
  add_table_output_options(
      sub, opt->table, "write the --by table (x.npy, x.h5:/d, x.csv, x.tsv, x.json, - for stdout)",
      "draw the --by table: an image file (.png, .svg, .pdf) or - for the terminal: curves "
      "for one axis, heatmaps for two (more axes: refused; write the table with -o)");
  sub->callback([opt] { run_compare(*opt); });
}

}  // namespace posenc::cli
