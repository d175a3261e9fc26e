// SAM / ViTDet decomposed relative positions (attention_decomposed.hpp): the options
// checked, the tables resized as F.interpolate(mode="linear") and indexed as HF's
// get_rel_pos.
#include "ops/attention_decomposed.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "posenc/error.hpp"

namespace posenc::attention_detail {

namespace {

// Row o of a table of `len` rows resized to `n` as torch's F.interpolate(mode="linear",
// align_corners=False) on its transpose [1, d, L]: x[i0] l0 + x[i1] l1 at the source
// position (o + 0.5) L / n - 0.5 (clamped at 0), i0 its floor, i1 = i0 + 1 but for the
// last row, l1 = the fraction, l0 = 1 - l1 (upsample_linear1d's CPU kernel, in float64
// for float64 tables). The resize and its transpose (resized_grad) both read it.
struct Lerp {
  std::size_t i0, i1;
  double l0, l1;
};
Lerp lerp_at(std::size_t o, std::size_t len, std::size_t n) {
  const double scale = static_cast<double>(len) / static_cast<double>(n);
  const auto last = static_cast<std::int64_t>(len) - 1;
  const double src = std::max(scale * (static_cast<double>(o) + 0.5) - 0.5, 0.0);
  const std::int64_t i0 = std::min(static_cast<std::int64_t>(std::floor(src)), last);
  const double l1 = std::min(std::max(src - static_cast<double>(i0), 0.0), 1.0);
  const std::int64_t i1 = i0 + (i0 < last ? 1 : 0);
  return {static_cast<std::size_t>(i0), static_cast<std::size_t>(i1), 1.0 - l1, l1};
}

// Table `t` [L, d] resized to `n` rows (lerp_at). A table of n rows is used as it is.
std::vector<double> resized(const Tensor& t, std::size_t n) {
  const std::size_t len = t.shape()[0], d = t.shape()[1];
  std::vector<double> x(len * d);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = t.get(i);
  if (len == n) return x;
  std::vector<double> out(n * d);
  for (std::size_t o = 0; o < n; ++o) {
    const Lerp w = lerp_at(o, len, n);
    for (std::size_t c = 0; c < d; ++c) {
      out[o * d + c] = x[w.i0 * d + c] * w.l0 + x[w.i1 * d + c] * w.l1;
    }
  }
  return out;
}

// get_rel_pos's rows for q query and k key coordinates: [a][b] = long((a max(k/q, 1) -
// b max(q/k, 1)) + (k - 1) max(q/k, 1)), computed in float32 as torch computes
// arange(n) * python_float in its default dtype.
std::vector<std::int32_t> offsets(std::size_t q, std::size_t k, const char* what) {
  const double fq = static_cast<double>(q), fk = static_cast<double>(k);
  const auto sq = static_cast<float>(std::max(fk / fq, 1.0));
  const auto sk = static_cast<float>(std::max(fq / fk, 1.0));
  const auto shift = static_cast<float>((fk - 1.0) * std::max(fq / fk, 1.0));
  const auto rows = static_cast<std::int64_t>(2 * std::max(q, k) - 1);
  std::vector<std::int32_t> idx(q * k);
  for (std::size_t a = 0; a < q; ++a) {
    for (std::size_t b = 0; b < k; ++b) {
      const float c = (static_cast<float>(a) * sq - static_cast<float>(b) * sk) + shift;
      const auto r = static_cast<std::int64_t>(c);
      if (r < 0 || r >= rows) {
        throw InputError(
            fmt::format("{}: relative coordinate {} outside the {} rows", what, r, rows));
      }
      idx[a * k + b] = static_cast<std::int32_t>(r);
    }
  }
  return idx;
}

}  // namespace

std::vector<double> resized_grad(const std::vector<double>& grad, std::size_t len,
                                 std::size_t d) {
  const std::size_t n = d ? grad.size() / d : 0;
  if (len == n) return grad;
  std::vector<double> out(len * d, 0.0);
  for (std::size_t o = 0; o < n; ++o) {  // rows in order: the sums' order is fixed
    const Lerp w = lerp_at(o, len, n);
    for (std::size_t c = 0; c < d; ++c) {
      out[w.i0 * d + c] += grad[o * d + c] * w.l0;
      out[w.i1 * d + c] += grad[o * d + c] * w.l1;
    }
  }
  return out;
}

void check_decomposed(Geometry& g, const AttentionOptions& opt) {
  const bool tables = opt.rel_pos_h || opt.rel_pos_w;
  const bool grid = opt.grid_h || opt.grid_w, key_grid = opt.key_grid_h || opt.key_grid_w;
  if (!tables) {
    if (grid || key_grid) {
      throw UsageError(
          "grid/key_grid: only for the decomposed relative positions "
          "(rel_pos_h and rel_pos_w)");
    }
    return;
  }
  if (!opt.rel_pos_h || !opt.rel_pos_w) {
    throw UsageError("rel_pos_h and rel_pos_w: decomposed relative positions need both tables");
  }
  if (!opt.grid_h || !opt.grid_w) {
    throw UsageError("rel_pos_h/rel_pos_w: need the query grid (grid_h, grid_w), both >= 1");
  }
  if (key_grid && (!opt.key_grid_h || !opt.key_grid_w)) {
    throw UsageError("key_grid: both key_grid_h and key_grid_w >= 1, or neither");
  }
  const std::size_t kh = key_grid ? opt.key_grid_h : opt.grid_h;
  const std::size_t kw = key_grid ? opt.key_grid_w : opt.grid_w;
  if (mul_sat(opt.grid_h, opt.grid_w) != g.sq) {
    throw InputError(fmt::format("grid {}x{}: holds {} queries, q has {}", opt.grid_h, opt.grid_w,
                                 mul_sat(opt.grid_h, opt.grid_w), g.sq));
  }
  if (mul_sat(kh, kw) != g.sk) {
    throw InputError(
        fmt::format("key grid {}x{}: holds {} keys, k has {}", kh, kw, mul_sat(kh, kw), g.sk));
  }
  for (const Tensor* t : {opt.rel_pos_h, opt.rel_pos_w}) {
    const char* what = t == opt.rel_pos_h ? "rel_pos_h" : "rel_pos_w";
    require_float(t->dtype(), what);
    if (t->ndim() != 2 || t->shape()[0] == 0 || t->shape()[1] != g.d) {
      throw InputError(fmt::format("{}: expected shape (L, {}) with L >= 1 (d = {}), got {}", what,
                                   g.d, g.d, shape_str(t->shape())));
    }
  }
  g.dec_cols = kh + kw;
}

Decomposed Decomposed::from(const Geometry& g, const AttentionOptions& opt) {
  Decomposed t;
  if (!opt.rel_pos_h) return t;
  const bool key_grid = opt.key_grid_h || opt.key_grid_w;
  const std::size_t qh = opt.grid_h;
  t.qw = opt.grid_w;
  t.kh = key_grid ? opt.key_grid_h : opt.grid_h;
  t.kw = key_grid ? opt.key_grid_w : opt.grid_w;
  t.d = g.d;
  t.rh = resized(*opt.rel_pos_h, 2 * std::max(qh, t.kh) - 1);
  t.rw = resized(*opt.rel_pos_w, 2 * std::max(t.qw, t.kw) - 1);
  t.ih = offsets(qh, t.kh, "rel_pos_h");
  t.iw = offsets(t.qw, t.kw, "rel_pos_w");
  return t;
}

}  // namespace posenc::attention_detail
