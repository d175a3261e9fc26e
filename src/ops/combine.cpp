// Split-KV combine (flash_attn_combine, FlashInfer merge_state) in float64: both inputs
// are widened exactly, each position is merged with the maximum lse subtracted (so no
// exp overflows), and the results are rounded once.

#include "posenc/ops/combine.hpp"

#include <fmt/core.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "posenc/error.hpp"
#include "posenc/ops/cast.hpp"

namespace posenc {

namespace {

std::size_t product(const Shape& s, std::size_t from, std::size_t to) {
  std::size_t n = 1;
  for (std::size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

// "(1, 0, 3)": the multi-index of flat entry `flat` of a tensor of shape `s`.
std::string index_str(std::size_t flat, const Shape& s) {
  std::vector<std::size_t> idx(s.size());
  for (std::size_t i = s.size(); i-- > 0;) {
    idx[i] = s[i] == 0 ? 0 : flat % s[i];
    flat = s[i] == 0 ? 0 : flat / s[i];
  }
  std::string out = "(";
  for (std::size_t i = 0; i < idx.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(idx[i]);
  }
  return out + (idx.size() == 1 ? ",)" : ")");
}

Shape without(const Shape& s, std::size_t axis) {
  Shape r = s;
  r.erase(r.begin() + static_cast<std::ptrdiff_t>(axis));
  return r;
}

}  // namespace

CombineResult combine(const Tensor& out_partial, const Tensor& lse_partial,
                      const CombineOptions& opt) {
  const Shape& os = out_partial.shape();
  const Shape& ls = lse_partial.shape();
  for (const auto* t : {&out_partial, &lse_partial}) {
    const char* name = t == &out_partial ? "out_partial" : "lse_partial";
    if (!is_float(t->dtype())) {
      throw InputError(
          fmt::format("{}: expected a float dtype, got {}", name, dtype_name(t->dtype())));
    }
  }
  const bool hs = opt.lse_layout == LseLayout::hs;
  const std::size_t min_rank = hs ? 4 : 2;
  if (os.size() < min_rank) {
    throw InputError(fmt::format(
        "out_partial: has shape {}; expected at least {} axes (splits{} and d){}", shape_str(os),
        min_rank, hs ? ", s, h" : "", hs ? " with the hs lse layout" : ""));
  }
  const auto rank = static_cast<std::int64_t>(os.size());
  const std::int64_t a = opt.axis < 0 ? opt.axis + rank : opt.axis;
  const std::int64_t last = rank - (hs ? 4 : 2);  // the last axis allowed to be the split axis
  if (a < 0 || a > last) {
    throw UsageError(fmt::format(
        "axis: {} is not a split axis of out_partial (shape {}): the split axis is one of "
        "axes {} to {}{}",
        opt.axis, shape_str(os), -rank, last,
        hs ? " (not d, nor the s and h axes the hs lse layout swaps)" : " (not the last, d)"));
  }
  const auto axis = static_cast<std::size_t>(a);

  // lse_partial's expected shape.
  Shape want(os.begin(), os.end() - 1);
  if (hs) std::swap(want[want.size() - 1], want[want.size() - 2]);
  if (ls != want) {
    Shape other(os.begin(), os.end() - 1);
    if (!hs) std::swap(other[other.size() - 1], other[other.size() - 2]);
    throw InputError(fmt::format(
        "lse_partial: has shape {}, expected {} for out_partial of shape {} ({} lse layout){}",
        shape_str(ls), shape_str(want), shape_str(os), hs ? "hs" : "sh",
        os.size() >= 3 && ls == other && ls != want
            ? fmt::format("; {} matches the {} layout", shape_str(ls), hs ? "sh" : "hs")
            : std::string()));
  }
  const DType out_dtype = opt.dtype.value_or(out_partial.dtype());
  if (!is_float(out_dtype)) {
    throw UsageError(
        fmt::format("dtype: the output is a float type, got {}", dtype_name(out_dtype)));
  }

  // Positions: outer (axes before the split) x inner (between the split axis and d).
  const std::size_t outer = product(os, 0, axis);
  const std::size_t splits = os[axis];
  const std::size_t inner = product(os, axis + 1, os.size() - 1);
  const std::size_t d = os.back();
  // With hs, inner = rest x S x H in out's order, and lse holds rest x H x S.
  const std::size_t S = hs ? os[os.size() - 3] : 1;
  const std::size_t H = hs ? os[os.size() - 2] : 1;
  auto lse_pos = [&](std::size_t p) -> std::size_t {
    if (!hs) return p;
    const std::size_t h = p % H, s = (p / H) % S, q = p / (H * S);
    return (q * H + h) * S + s;
  };

  checked_numel(os, sizeof(double), "out_partial");
  // out_partial is widened a row of d at a time (exactly), so that memory holds the
  // inputs and the float64 results only.
  const Tensor l64 = cast(lse_partial, DType::f64);
  const std::byte* op = out_partial.bytes();
  const std::size_t item = dtype_size(out_partial.dtype());
  std::vector<double> row(d);
  const double* lp = l64.data<double>();
  Tensor out(DType::f64, without(os, axis));
  Tensor lse(DType::f64, without(ls, axis));
  double* out_p = out.data<double>();
  double* lse_p = lse.data<double>();
  constexpr double kInf = std::numeric_limits<double>::infinity();

  for (std::size_t i = 0; i < lse_partial.numel(); ++i) {
    if (std::isnan(lp[i]) || lp[i] == kInf) {
      throw InputError(
          fmt::format("lse_partial: {} at {}; an lse is finite, or -inf for a "
                      "split that saw no key",
                      std::isnan(lp[i]) ? "NaN" : "+inf", index_str(i, ls)));
    }
  }
  std::vector<double> e(splits);
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t p = 0; p < inner; ++p) {
      const std::size_t lq = lse_pos(p);
      auto lse_at = [&](std::size_t i) { return lp[(o * splits + i) * inner + lq]; };
      double m = -kInf;
      for (std::size_t i = 0; i < splits; ++i) m = std::max(m, lse_at(i));
      double* dst = out_p + (o * inner + p) * d;
      if (m == -kInf) {  // no split saw a key
        for (std::size_t k = 0; k < d; ++k) dst[k] = 0.0;
        lse_p[o * inner + lq] = -kInf;
        continue;
      }
      double sum = 0.0;
      for (std::size_t i = 0; i < splits; ++i) {
        e[i] = std::exp(lse_at(i) - m);  // 0 for -inf, 1 for the maximum
        sum += e[i];
      }
      lse_p[o * inner + lq] = m + std::log(sum);
      for (std::size_t k = 0; k < d; ++k) dst[k] = 0.0;
      for (std::size_t i = 0; i < splits; ++i) {
        // A split with lse -inf contributes nothing and its values are not read.
        if (lse_at(i) == -kInf || d == 0) continue;
        const std::size_t base = ((o * splits + i) * inner + p) * d;
        const double w = e[i] / sum;
        cast(op + base * item, out_partial.dtype(), reinterpret_cast<std::byte*>(row.data()),
             DType::f64, d);
        for (std::size_t k = 0; k < d; ++k) {
          const double x = row[k];
          if (!std::isfinite(x)) {
            throw InputError(
                fmt::format("out_partial: {} at {} in a split that contributes (its lse is {})",
                            std::isnan(x) ? "NaN" : (x > 0 ? "+inf" : "-inf"),
                            index_str(base + k, os), lse_at(i)));
          }
          dst[k] += w * x;
        }
      }
    }
  }
  CombineResult r;
  r.out = out_dtype == DType::f64 ? std::move(out) : cast(out, out_dtype);
  r.lse = out_dtype == DType::f64 ? std::move(lse) : cast(lse, DType::f32);
  return r;
}

}  // namespace posenc
