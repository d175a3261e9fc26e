// posenc compare A B: element-wise comparison with numpy.isclose semantics (B is the
// reference: |a - b| <= atol + rtol * |b|) and/or a bound on the distance in units in
// the last place. Exit 0 when every element matches, 1 when any differs or the shapes
// differ.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/compare.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/printable.hpp"
#include "posenc/tensor.hpp"

namespace posenc::cli {

namespace {

struct CompareCliOptions {
  std::string a, b;
  std::optional<double> rtol, atol;
  std::optional<std::uint64_t> max_ulp;
  bool json = false;
  bool equal_nan = false;
  std::string slice;
};

std::string index_str(const std::vector<std::size_t>& idx) {
  if (idx.size() == 1) return fmt::format("({},)", idx[0]);
  std::string s = "(";
  for (std::size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + ")";
}

std::string ulp_type_name(const CompareRule& rule) {
  return rule.ulp_type ? std::string(dtype_name(*rule.ulp_type)) : std::string("integer");
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

void print_json(const TensorRef& ra, DType da, const TensorRef& rb, DType db,
                const CompareResult& r, const std::string& slice) {
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
  j["ulp_type"] = ulp_type_name(rule);
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
  // References may name files whose names are not UTF-8: U+FFFD, not an exception.
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

void print_text(const TensorRef& ra, DType da, const TensorRef& rb, DType db,
                const CompareResult& r, const std::string& slice) {
  const CompareRule& rule = r.rule;
  fmt::print("a: {}: {} {}\n", printable(ra.text), dtype_name(da), shape_str(r.shape_a));
  fmt::print("b: {}: {} {} (reference)\n", printable(rb.text), dtype_name(db),
             shape_str(r.shape_b));
  if (!slice.empty()) {
    fmt::print("slice: [{}] -> {} and {} (indices below are in a)\n", slice,
               shape_str(r.sel_a.shape), shape_str(r.sel_b.shape));
  }
  if (!r.shapes_equal) {
    fmt::print("shapes differ: {} vs {}\ndiffer\n", shape_str(r.sel_a.shape),
               shape_str(r.sel_b.shape));
    return;
  }
  std::string text = fmt::format("|a - b| <= {} + {} * |b|", rule.atol, rule.rtol);
  if (rule.max_ulp) {
    std::string ulp_rule =
        fmt::format("ulp distance in {} <= {}", ulp_type_name(rule), *rule.max_ulp);
    text = rule.tolerance_explicit ? ulp_rule + " or " + text : ulp_rule;
  }
  if (rule.equal_nan) text += " (NaN equals NaN)";
  fmt::print("rule: {}\n", text);
  auto at = [&](const DiffAt& e) {
    if (!e.index) return std::string();
    return fmt::format(" at {}: a = {}, b = {}", index_str(r.index_in_a(*e.index)), e.a, e.b);
  };
  fmt::print("max abs diff: {}{}\n", r.max_abs.value, at(r.max_abs));
  fmt::print("max rel diff: {}{}\n", r.max_rel.value, at(r.max_rel));
  if (r.max_ulp) {
    fmt::print(
        "max ulp diff: {} ({}){}\n", *r.max_ulp, ulp_type_name(rule),
        r.max_ulp_index ? " at " + index_str(r.index_in_a(*r.max_ulp_index)) : std::string());
  }
  if (r.nan_a || r.nan_b) {
    fmt::print("NaN: {} in a, {} in b, {} where only one side is NaN\n", r.nan_a, r.nan_b,
               r.nan_mismatches);
  }
  const double pct = r.total ? 100.0 * static_cast<double>(r.mismatches) / r.total : 0.0;
  fmt::print("mismatches: {} of {} ({:.3g}%)", r.mismatches, r.total, pct);
  if (r.first_mismatch) {
    fmt::print(", first at {}", index_str(r.index_in_a(*r.first_mismatch)));
  }
  fmt::print("\n{}\n", r.match() ? "match" : "differ");
}

void run_compare(const CompareCliOptions& o) {
  const TensorRef ra = parse_ref(o.a), rb = parse_ref(o.b);
  if (ra.is_stdio() && rb.is_stdio()) {
    throw UsageError("compare: only one of A and B can come from standard input");
  }
  const SliceSpec spec = parse_slice_option(o.slice);  // usage errors before any read
  auto sa = open_source(ra);
  auto sb = open_source(rb);
  if ((o.rtol && !(*o.rtol >= 0)) || (o.atol && !(*o.atol >= 0))) {
    throw UsageError("--rtol and --atol must be non-negative numbers");
  }
  // Each side's selection is checked here, so that an index outside a shape names it.
  resolve_slice_option(spec, sa->info().shape, ra.text);
  resolve_slice_option(spec, sb->info().shape, rb.text);
  const CompareResult r =
      compare(*sa, *sb, CompareOptions{o.rtol, o.atol, o.max_ulp, o.equal_nan}, spec);
  exit_code() = r.match() ? 0 : 1;
  if (globals().quiet) return;
  if (o.json) {
    print_json(ra, sa->info().dtype, rb, sb->info().dtype, r, o.slice);
  } else {
    print_text(ra, sa->info().dtype, rb, sb->info().dtype, r, o.slice);
  }
}

}  // namespace

void register_compare(CLI::App& app) {
  auto opt = std::make_shared<CompareCliOptions>();
  auto* sub = app.add_subcommand(
      "compare",
      "compare tensor A with reference B element-wise: |a - b| <= atol + rtol * |b| "
      "(numpy.isclose) and/or a ULP bound. Exit 0 if all match, 1 if not.");
  sub->add_option("a", opt->a, "tensor to check")->required();
  sub->add_option("b", opt->b, "reference tensor")->required();
  sub->add_option("--rtol", opt->rtol,
                  "relative tolerance (default by the less precise float dtype, as "
                  "torch.testing: f64 1e-7, f32 1.3e-6, f16 1e-3, bf16 1.6e-2; 0 for integers)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--atol", opt->atol,
                  "absolute tolerance (default f64 1e-7, f32/f16/bf16 1e-5; 0 for integers)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-ulp", opt->max_ulp,
                  "match when the distance in units in the last place (in the less precise "
                  "dtype) is at most N; with --rtol/--atol, either test suffices");
  sub->add_flag("--json", opt->json, "print the report as JSON on stdout");
  sub->add_flag("--equal-nan", opt->equal_nan, "NaN in both at the same place counts as a match");
  sub->add_option("--slice", opt->slice,
                  std::string(kSliceHelp) +
                      "; the same selection of A and of B is compared (each resolved against "
                      "its own shape); reported indices are A's own, not the selection's");
  sub->callback([opt] { run_compare(*opt); });
}

}  // namespace posenc::cli
