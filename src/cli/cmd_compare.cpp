// posenc compare A B: element-wise comparison with numpy.isclose semantics (B is the
// reference: |a - b| <= atol + rtol * |b|) and/or a bound on the distance in units in
// the last place. Exit 0 when every element matches, 1 when any differs or the shapes
// differ.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc::cli {

namespace {

struct CompareOptions {
  std::string a, b;
  std::optional<double> rtol, atol;
  std::optional<std::uint64_t> max_ulp;
  bool json = false;
  bool equal_nan = false;
};

// Float types by precision, least precise first (bf16 has fewer significand bits
// than f16).
int float_rank(DType t) {
  switch (t) {
    case DType::bf16:
      return 0;
    case DType::f16:
      return 1;
    case DType::f32:
      return 2;
    case DType::f64:
      return 3;
    default:
      return -1;
  }
}

// The type both sides are compared in for ULPs and default tolerances: the less
// precise float type of the two, or none when both are integers/bools.
std::optional<DType> comparison_type(DType a, DType b) {
  int ra = float_rank(a), rb = float_rank(b);
  if (ra < 0 && rb < 0) return std::nullopt;
  if (ra < 0) return b;
  if (rb < 0) return a;
  return ra <= rb ? a : b;
}

// torch.testing.assert_close defaults for the comparison type; exact for integers.
void default_tolerances(std::optional<DType> t, double& rtol, double& atol) {
  if (!t) {
    rtol = 0;
    atol = 0;
    return;
  }
  switch (*t) {
    case DType::f64:
      rtol = 1e-7;
      atol = 1e-7;
      break;
    case DType::f32:
      rtol = 1.3e-6;
      atol = 1e-5;
      break;
    case DType::f16:
      rtol = 1e-3;
      atol = 1e-5;
      break;
    default:
      rtol = 1.6e-2;
      atol = 1e-5;
      break;  // bf16
  }
}

// Sign-magnitude bits of v rounded to `t`, mapped to a line where adjacent floats are
// adjacent integers (+0 and -0 both map to 0), as numpy.testing's nulp_diff does.
struct Ordered {
  bool neg;
  std::uint64_t mag;
};
Ordered ordered_bits(double v, DType t) {
  std::uint64_t bits = 0, sign_bit = 0;
  switch (t) {
    case DType::f64: {
      std::memcpy(&bits, &v, 8);
      sign_bit = std::uint64_t{1} << 63;
      break;
    }
    case DType::f32: {
      float f = static_cast<float>(v);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      bits = u;
      sign_bit = std::uint64_t{1} << 31;
      break;
    }
    case DType::f16:
      bits = double_to_half(v);
      sign_bit = 0x8000;
      break;
    default:
      bits = double_to_bf16(v);
      sign_bit = 0x8000;
      break;
  }
  return {(bits & sign_bit) != 0, bits & (sign_bit - 1)};
}

std::uint64_t ulp_distance(double a, double b, std::optional<DType> t) {
  if (!t) {
    // Integers: the unit in the last place is 1.
    double d = std::fabs(a - b);
    return d >= 1.8e19 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(d);
  }
  Ordered x = ordered_bits(a, *t), y = ordered_bits(b, *t);
  if (x.mag == 0) x.neg = false;
  if (y.mag == 0) y.neg = false;
  if (x.neg == y.neg) return x.mag > y.mag ? x.mag - y.mag : y.mag - x.mag;
  return x.mag + y.mag;
}

std::vector<std::size_t> unravel(std::size_t flat, const Shape& shape) {
  std::vector<std::size_t> idx(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    idx[k] = shape[k] ? flat % shape[k] : 0;
    if (shape[k]) flat /= shape[k];
  }
  return idx;
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

struct Extreme {
  double value = 0;
  std::optional<std::size_t> at;
  void offer(double v, std::size_t i) {
    if (!at || v > value) {
      value = v;
      at = i;
    }
  }
};

void run_compare(const CompareOptions& o) {
  const TensorRef ra = parse_ref(o.a), rb = parse_ref(o.b);
  const Tensor a = read_tensor(ra);
  const Tensor b = read_tensor(rb);
  const std::optional<DType> ctype = comparison_type(a.dtype(), b.dtype());
  double rtol, atol;
  default_tolerances(ctype, rtol, atol);
  const bool tol_explicit = o.rtol || o.atol;
  if (o.rtol) rtol = *o.rtol;
  if (o.atol) atol = *o.atol;
  if (!(rtol >= 0) || !(atol >= 0)) {
    throw UsageError("--rtol and --atol must be non-negative numbers");
  }
  const bool quiet = globals().quiet;
  const bool shapes_equal = a.shape() == b.shape();

  std::size_t mismatches = 0, nan_a = 0, nan_b = 0, nan_mismatches = 0;
  std::optional<std::size_t> first_mismatch;
  Extreme max_abs, max_rel;
  std::optional<std::uint64_t> max_ulp_val;
  std::optional<std::size_t> max_ulp_at;
  if (shapes_equal) {
    for (std::size_t i = 0; i < a.numel(); ++i) {
      const double x = a.get(i), y = b.get(i);
      const bool xn = std::isnan(x), yn = std::isnan(y);
      nan_a += xn;
      nan_b += yn;
      bool ok;
      if (xn || yn) {
        ok = xn && yn && o.equal_nan;
        if (xn != yn) ++nan_mismatches;
      } else if (std::isinf(x) || std::isinf(y)) {
        ok = x == y;
        if (!ok) {
          max_abs.offer(std::numeric_limits<double>::infinity(), i);
          max_rel.offer(std::numeric_limits<double>::infinity(), i);
        }
      } else {
        const double d = std::fabs(x - y);
        const double rel = y != 0   ? d / std::fabs(y)
                           : d == 0 ? 0.0
                                    : std::numeric_limits<double>::infinity();
        max_abs.offer(d, i);
        max_rel.offer(rel, i);
        const bool tol_ok = d <= atol + rtol * std::fabs(y);
        if (o.max_ulp) {
          ok = ulp_distance(x, y, ctype) <= *o.max_ulp || (tol_explicit && tol_ok);
        } else {
          ok = tol_ok;
        }
      }
      if (!xn && !yn) {
        const std::uint64_t u = ulp_distance(x, y, ctype);
        if (!max_ulp_val || u > *max_ulp_val) {
          max_ulp_val = u;
          max_ulp_at = i;
        }
      }
      if (!ok) {
        ++mismatches;
        if (!first_mismatch) first_mismatch = i;
      }
    }
  }
  const bool match = shapes_equal && mismatches == 0;
  exit_code() = match ? 0 : 1;
  if (quiet) return;

  const Shape& shape = a.shape();
  auto idx_json = [&](std::optional<std::size_t> i) -> nlohmann::ordered_json {
    if (!i) return nullptr;
    return unravel(*i, shape);
  };
  const std::string ulp_type = ctype ? std::string(dtype_name(*ctype)) : std::string("integer");

  if (o.json) {
    nlohmann::ordered_json j;
    auto side = [](const TensorRef& r, const Tensor& t) {
      nlohmann::ordered_json s;
      s["ref"] = r.text;
      s["dtype"] = std::string(dtype_name(t.dtype()));
      s["shape"] = t.shape();
      return s;
    };
    j["a"] = side(ra, a);
    j["b"] = side(rb, b);
    j["match"] = match;
    j["shapes_equal"] = shapes_equal;
    j["rtol"] = rtol;
    j["atol"] = atol;
    j["max_ulp"] = o.max_ulp ? nlohmann::ordered_json(*o.max_ulp) : nlohmann::ordered_json(nullptr);
    j["equal_nan"] = o.equal_nan;
    j["ulp_type"] = ulp_type;
    j["total"] = shapes_equal ? a.numel() : 0;
    j["mismatches"] = mismatches;
    j["first_mismatch_index"] = idx_json(first_mismatch);
    j["max_abs_diff"] = json_number(max_abs.value);
    j["max_abs_diff_index"] = idx_json(max_abs.at);
    j["max_rel_diff"] = json_number(max_rel.value);
    j["max_rel_diff_index"] = idx_json(max_rel.at);
    j["max_ulp_diff"] =
        max_ulp_val ? nlohmann::ordered_json(*max_ulp_val) : nlohmann::ordered_json(nullptr);
    j["max_ulp_diff_index"] = idx_json(max_ulp_at);
    j["nan_a"] = nan_a;
    j["nan_b"] = nan_b;
    j["nan_mismatches"] = nan_mismatches;
    fmt::print("{}\n", j.dump(2));
    return;
  }

  fmt::print("a: {}: {} {}\n", ra.text, dtype_name(a.dtype()), shape_str(a.shape()));
  fmt::print("b: {}: {} {} (reference)\n", rb.text, dtype_name(b.dtype()), shape_str(b.shape()));
  if (!shapes_equal) {
    fmt::print("shapes differ: {} vs {}\ndiffer\n", shape_str(a.shape()), shape_str(b.shape()));
    return;
  }
  std::string rule = fmt::format("|a - b| <= {} + {} * |b|", atol, rtol);
  if (o.max_ulp) {
    std::string ulp_rule = fmt::format("ulp distance in {} <= {}", ulp_type, *o.max_ulp);
    rule = tol_explicit ? ulp_rule + " or " + rule : ulp_rule;
  }
  if (o.equal_nan) rule += " (NaN equals NaN)";
  fmt::print("rule: {}\n", rule);
  auto at = [&](const Extreme& e) {
    if (!e.at) return std::string();
    return fmt::format(" at {}: a = {}, b = {}", index_str(unravel(*e.at, shape)), a.get(*e.at),
                       b.get(*e.at));
  };
  fmt::print("max abs diff: {}{}\n", max_abs.value, at(max_abs));
  fmt::print("max rel diff: {}{}\n", max_rel.value, at(max_rel));
  if (max_ulp_val) {
    fmt::print("max ulp diff: {} ({}){}\n", *max_ulp_val, ulp_type,
               max_ulp_at ? " at " + index_str(unravel(*max_ulp_at, shape)) : std::string());
  }
  if (nan_a || nan_b) {
    fmt::print("NaN: {} in a, {} in b, {} where only one side is NaN\n", nan_a, nan_b,
               nan_mismatches);
  }
  const double pct = a.numel() ? 100.0 * static_cast<double>(mismatches) / a.numel() : 0.0;
  fmt::print("mismatches: {} of {} ({:.3g}%)", mismatches, a.numel(), pct);
  if (first_mismatch) fmt::print(", first at {}", index_str(unravel(*first_mismatch, shape)));
  fmt::print("\n{}\n", match ? "match" : "differ");
}

}  // namespace

void register_compare(CLI::App& app) {
  auto opt = std::make_shared<CompareOptions>();
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
  sub->callback([opt] { run_compare(*opt); });
}

}  // namespace posenc::cli
