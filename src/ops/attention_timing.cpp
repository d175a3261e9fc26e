// Gemma-3n audio's timing-signal relative keys and per-dimension query scale
// (attention_timing.hpp).
#include "ops/attention_timing.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "posenc/error.hpp"

namespace posenc::attention_detail {

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

std::vector<double> timing_signal(double t, std::size_t channels) {
  const std::size_t half = channels / 2;
  // HF: log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
  const double step = std::log(1.0e4) / static_cast<double>(half > 1 ? half - 1 : std::size_t{1});
  std::vector<double> row(channels);
  for (std::size_t i = 0; i < half; ++i) {
    const double a = t * std::exp(static_cast<double>(i) * -step);
    row[i] = std::sin(a);
    row[half + i] = std::cos(a);
  }
  return row;
}

void check_timing(Geometry& g, const AttentionOptions& opt) {
  if (opt.per_dim_scale) {
    const Tensor& p = *opt.per_dim_scale;
    require_float(p.dtype(), "per_dim_scale");
    if (p.ndim() != 1 || p.shape()[0] != g.d) {
      throw InputError(fmt::format("per_dim_scale: expected shape ({}) ([d]), got {}", g.d,
                                   shape_str(p.shape())));
    }
    if (opt.score_bias) {
      // Those terms were computed from the queries as given.
      throw UsageError(
          "per_dim_scale: not with the relative score terms (Transformer-XL, XLNet, DeBERTa)");
    }
  }
  if (!opt.relative_proj) return;
  if (opt.relative_k) {
    throw UsageError("relative_proj: not with relative_k (it computes the relative keys)");
  }
  const std::optional<RelativeWindow>& w = opt.relative_window;
  constexpr std::int64_t kMaxSide = std::int64_t{1} << 30;
  if (!w || w->left < 0 || w->right < 0 || w->left > kMaxSide || w->right > kMaxSide) {
    throw UsageError(
        "relative_proj: needs the relative window's left and right, 0 to 2^30 (the "
        "distances it projects)");
  }
  const Tensor& p = *opt.relative_proj;
  require_float(p.dtype(), "relative_proj");
  if (p.ndim() != 2 || p.shape()[0] != g.hq * g.d || p.shape()[1] == 0 || p.shape()[1] % 2 != 0) {
    throw InputError(
        fmt::format("relative_proj: expected shape ({}, D) ([heads * d, D], D even), got {}",
                    g.hq * g.d, shape_str(p.shape())));
  }
  const auto rows = static_cast<std::size_t>(w->rows());
  if (g.rel_rows && g.rel_rows != rows) {
    throw InputError(fmt::format("relative_v: {} rows, but the window of relative_proj needs {}",
                                 g.rel_rows, rows));
  }
  g.rel_rows = rows;
  g.window = *w;
  g.rel_k_per_head = true;
}

namespace {

// The timing signal of row r of the relative table: the distance r - left in the
// window's sign (k-q: j - i).
std::vector<double> row_signal(const Geometry& g, std::size_t r, std::size_t channels) {
  const auto dist = static_cast<std::int64_t>(r) - g.window.left;
  return timing_signal(static_cast<double>(g.window.q_minus_k ? dist : -dist), channels);
}

// The table [rows, hq, d]: row r holds pos_proj(timing(t)) for the query-minus-key
// distance t of row r, as HF's sin_emb (its rows run from t = L down to -R).
Tensor relative_keys(const Geometry& g, const Tensor& proj) {
  const std::size_t rows = g.rel_rows, hd = g.hq * g.d, D = proj.shape()[1];
  const Tensor w = proj.astype(DType::f64);
  const double* W = w.data<double>();
  Tensor out(DType::f64, Shape{rows, g.hq, g.d});
  double* o = out.data<double>();
  for (std::size_t r = 0; r < rows; ++r) {
    const std::vector<double> sig = row_signal(g, r, D);
    for (std::size_t c = 0; c < hd; ++c) {
      double acc = 0;
      for (std::size_t e = 0; e < D; ++e) acc += W[c * D + e] * sig[e];
      o[r * hd + c] = acc;
    }
  }
  return out;
}

template <class T>
Tensor scaled_queries(const Tensor& q, const Geometry& g, const std::vector<double>& factor) {
  Tensor out = q.astype(std::is_same_v<T, double> ? DType::f64 : DType::f32);
  T* p = out.data<T>();
  const std::size_t da = g.axes.find('d');
  std::size_t inner = 1;
  for (std::size_t a = da + 1; a < q.ndim(); ++a) inner *= q.shape()[a];
  std::vector<T> f(factor.begin(), factor.end());
  const std::size_t n = out.numel();
  for (std::size_t i = 0; i < n; ++i) p[i] *= f[(i / inner) % g.d];
  return out;
}

}  // namespace

std::vector<double> relative_proj_grad(const Geometry& g, const Tensor& proj,
                                       const Tensor& grad_keys) {
  const std::size_t rows = g.rel_rows, hd = g.hq * g.d, D = proj.shape()[1];
  std::vector<double> out(hd * D, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {  // rows in order: the sums' order is fixed
    const std::vector<double> sig = row_signal(g, r, D);
    for (std::size_t c = 0; c < hd; ++c) {
      const double gk = grad_keys.get(r * hd + c);
      for (std::size_t e = 0; e < D; ++e) out[c * D + e] += gk * sig[e];
    }
  }
  return out;
}

void timing_inputs(TimingInputs& out, const Tensor& q, const Geometry& g,
                   const AttentionOptions& opt) {
  out.opt = opt;
  AttentionOptions& o = out.opt;
  if (o.scale <= 0) {
    o.scale = 1.0 / std::sqrt(static_cast<double>(g.d));
    if (opt.per_dim_scale) o.scale /= softplus(0.0);
  }
  if (!o.dtype) o.dtype = q.dtype();
  o.precision = g.compute == DType::f64 ? Precision::f64 : Precision::f32;
  if (opt.per_dim_scale) {
    const Tensor p = opt.per_dim_scale->astype(DType::f64);
    std::vector<double> factor(g.d);
    for (std::size_t c = 0; c < g.d; ++c) factor[c] = softplus(p.data<double>()[c]);
    out.q = g.compute == DType::f64 ? scaled_queries<double>(q, g, factor)
                                    : scaled_queries<float>(q, g, factor);
    o.per_dim_scale = nullptr;
  }
  if (opt.relative_proj) {
    out.rel_k = relative_keys(g, *opt.relative_proj);
    o.relative_k = &out.rel_k;
    o.relative_proj = nullptr;
  }
}

}  // namespace posenc::attention_detail
