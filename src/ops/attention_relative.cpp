// Transformer-XL / XLNet / Funnel and DeBERTa relative attention as additive score terms
// (ops/attention_relative.hpp). The terms are dot products accumulated in float64 in a
// fixed order, one score at a time, spread over OpenMP threads by rows: no BLAS, and
// nothing depends on the thread count.

#include "posenc/ops/attention_relative.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "posenc/encodings/relative_attention.hpp"
#include "ops/attention_relative_terms.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace relative_detail {

Geo geometry(const Tensor& q, const Tensor& k, const AttentionOptions& opt) {
  for (const auto& [t, what] : {std::pair{&q, "q"}, std::pair{&k, "k"}}) {
    if (!is_float(t->dtype())) {
      throw InputError(
          fmt::format("{}: expected a float tensor, got {}", what, dtype_name(t->dtype())));
    }
  }
  Geo g;
  g.scores = attention_scores_shape(q.shape(), k.shape(), q.dtype(), opt);  // checks Q, K
  g.axes = resolve_axes(opt.axes, q.ndim(), "q").letters;
  auto size = [&g](const Tensor& t, char c) {
    const auto i = g.axes.find(c);
    return i == std::string::npos ? std::size_t{1} : t.shape()[i];
  };
  g.has_b = g.axes.find('b') != std::string::npos;
  g.has_h = g.axes.find('h') != std::string::npos;
  g.b = size(q, 'b');
  g.hq = size(q, 'h');
  g.hk = size(k, 'h');
  g.sq = size(q, 's');
  g.sk = size(k, 's');
  g.d = size(q, 'd');
  g.compute = attention_arith(opt);
  return g;
}

// x's values as float64 in [b][h][s][d] order.
std::vector<double> bhsd(const Tensor& x, const std::string& axes) {
  Tensor converted;
  if (x.dtype() != DType::f64) converted = x.astype(DType::f64);
  const double* p = x.dtype() == DType::f64 ? x.data<double>() : converted.data<double>();
  std::size_t n[4] = {1, 1, 1, 1};
  std::size_t st[4] = {0, 0, 0, 0};
  std::size_t stride = 1;
  for (std::size_t i = axes.size(); i-- > 0;) {
    const std::size_t a = std::string("bhsd").find(axes[i]);
    n[a] = x.shape()[i];
    st[a] = stride;
    stride *= x.shape()[i];
  }
  std::vector<double> out(x.numel());
  std::size_t o = 0;
  for (std::size_t b = 0; b < n[0]; ++b)
    for (std::size_t h = 0; h < n[1]; ++h)
      for (std::size_t s = 0; s < n[2]; ++s)
        for (std::size_t c = 0; c < n[3]; ++c)
          out[o++] = p[b * st[0] + h * st[1] + s * st[2] + c * st[3]];
  return out;
}

// Four partial sums in a fixed order: vectorisable, and the same bits on any thread.
double dot(const double* a, const double* b, std::size_t n) {
  double s[4] = {0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (std::size_t l = 0; l < 4; ++l) s[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// `shift` 0 with rlen = sk is Transformer-XL's _rel_shift: row i of [sq, rlen + 1] with
// a zero first column, read in the layout of [rlen + 1, sq] without its first row.
// Otherwise HF's reshape-and-slice of XLNet (rel_shift_bnij, shift 1) and Funnel
// (_relative_shift_gather, shift s): [sq, rlen] read as [rlen, sq] without its first s
// rows, as [sq, rlen - s], first sk columns. Score (i, j) is then entry
// i rlen + s (sq - i) + j of the unshifted matrix.
ShiftSource xl_shift(std::size_t sq, std::size_t rlen, std::size_t sk, std::size_t shift,
                     std::size_t i, std::size_t j) {
  if (shift == 0 && rlen == sk) {
    const std::size_t c = sq - i + j;
    if (c <= rlen) return {i, c - 1, false};
    const std::size_t c2 = c - rlen - 1;
    if (c2 == 0) return {0, 0, true};
    return {i + 1, c2 - 1, false};
  }
  const std::size_t c = (shift == 0 ? 1 : shift) * (sq - i) + j;
  return {i + c / rlen, c % rlen, false};
}

void xl_attrs(const XlInputs& in, Attrs& attrs) {
  const char* scheme = in.fact         ? "funnel-factorized"
                       : in.shift > 0  ? "funnel"
                       : in.r.rows == in.g.sk ? "transfo-xl"
                                              : "xlnet";
  attrs.push_back({"relative", std::string(scheme)});
  attrs.push_back({"rel_rows", static_cast<long long>(in.fact ? 0 : in.r.rows)});
  attrs.push_back({"rel_shift", static_cast<long long>(in.shift)});
  attrs.push_back({"segment_term", static_cast<long long>(in.seg)});
  attrs.push_back({"cls_mask", static_cast<long long>(in.cls_mask)});
}

void deberta_attrs(const DebertaInputs& in, Attrs& attrs) {
  std::string types = in.c2p ? "c2p" : "";
  if (in.p2c) types += types.empty() ? "p2c" : ",p2c";
  attrs.push_back({"relative", std::string("deberta")});
  attrs.push_back({"pos_att_type", types});
  attrs.push_back({"position_buckets", static_cast<long long>(in.position_buckets)});
  attrs.push_back({"max_relative_positions", static_cast<long long>(in.max_relative_positions)});
}

}  // namespace relative_detail

using namespace relative_detail;

namespace {

void require_values(const Tensor& t, const char* name, const AttentionOptions& opt) {
  if (!is_float(t.dtype())) {
    throw InputError(
        fmt::format("{}: expected a float tensor, got {}", name, dtype_name(t.dtype())));
  }
  if (!opt.allow_nonfinite && t.has_nonfinite()) {
    throw InputError(fmt::format(
        "{}: contains NaN or Inf (use allow_nonfinite to compute with it anyway)", name));
  }
}

// A per-head vector [hq, d] (or [d] when Q has one head and no h axis) as float64
// [hq][d]; zeros when absent.
std::vector<double> per_head(const Tensor* t, const char* name, const Geo& g,
                             const AttentionOptions& opt) {
  if (!t) return std::vector<double>(g.hq * g.d, 0.0);
  require_values(*t, name, opt);
  const bool ok = (t->shape() == Shape{g.hq, g.d}) || (!g.has_h && t->shape() == Shape{g.d});
  if (!ok) {
    throw InputError(fmt::format("{}: expected shape ({}, {}) ([heads, d]), got {}", name, g.hq,
                                 g.d, shape_str(t->shape())));
  }
  const Tensor c = t->astype(DType::f64);
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// Relative rows (RelRows); `rows_ok` checks the row count, `rows_text` describes it for
// the message.
template <class RowsOk>
RelRows rel_rows(const Tensor& t, const char* name, const Geo& g, const AttentionOptions& opt,
                 bool allow_batched, RowsOk rows_ok, const std::string& rows_text) {
  require_values(t, name, opt);
  const Shape& s = t.shape();
  const bool plain = s.size() == 3 && s[1] == g.hq && s[2] == g.d;
  const bool batched = allow_batched && s.size() == 4 && s[1] == g.b && s[2] == g.hq && s[3] == g.d;
  const bool flat = !g.has_h && s.size() == 2 && s[1] == g.d;
  if (!(plain || batched || flat) || !rows_ok(s[0])) {
    throw InputError(fmt::format(
        "{}: expected shape (rows, {}, {}) ([rows, heads, d]){} with {}, "
        "got {}",
        name, g.hq, g.d,
        allow_batched ? fmt::format(" or (rows, {}, {}, {})", g.b, g.hq, g.d) : std::string(),
        rows_text, shape_str(s)));
  }
  RelRows r;
  r.rows = s[0];
  r.batched = batched;
  const Tensor c = t.astype(DType::f64);
  const double* p = c.data<double>();
  const std::size_t nb = batched ? g.b : 1;
  r.v.resize(nb * g.hq * r.rows * g.d);
  for (std::size_t row = 0; row < r.rows; ++row)
    for (std::size_t b = 0; b < nb; ++b)
      for (std::size_t h = 0; h < g.hq; ++h)
        std::copy_n(p + ((row * nb + b) * g.hq + h) * g.d, g.d,
                    r.v.data() + ((b * g.hq + h) * r.rows + row) * g.d);
  return r;
}

// Fills `out` (compute type) with f(b, h, i, j) over the scores, rows in parallel.
template <class F>
void fill_scores(Tensor& out, const Geo& g, F f) {
  const std::int64_t rows = static_cast<std::int64_t>(g.b * g.hq * g.sq);
  const bool f64 = out.dtype() == DType::f64;
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::size_t r = static_cast<std::size_t>(row);
    const std::size_t i = r % g.sq, h = (r / g.sq) % g.hq, b = r / (g.sq * g.hq);
    for (std::size_t j = 0; j < g.sk; ++j) {
      const double v = f(b, h, i, j);
      if (f64) {
        out.data<double>()[r * g.sk + j] = v;
      } else {
        out.data<float>()[r * g.sk + j] = static_cast<float>(v);
      }
    }
  }
}

std::vector<std::int64_t> segment_ids(const Tensor& t, const Geo& g) {
  const Shape& s = t.shape();
  const bool ok =
      is_integer(t.dtype()) && (s == Shape{g.sk} || (s.size() == 2 && s[0] == g.b && s[1] == g.sk));
  if (!ok) {
    throw InputError(fmt::format(
        "segment_ids: expected integers of shape ({},) or ({}, {}) (one id per key), got {} of "
        "shape {}",
        g.sk, g.b, g.sk, dtype_name(t.dtype()), shape_str(s)));
  }
  std::vector<std::int64_t> ids(g.b * g.sk);
  for (std::size_t b = 0; b < g.b; ++b)
    for (std::size_t j = 0; j < g.sk; ++j)
      ids[b * g.sk + j] = static_cast<std::int64_t>(t.get(s.size() == 2 ? b * g.sk + j : j));
  return ids;
}

double scale_of(const AttentionOptions& opt, double fallback) {
  return opt.scale > 0 ? opt.scale : fallback;
}

// The memory the terms take besides the attention itself: the [b, hq, sq, sk] tensor
// and the float64 copies of Q and K (with a converted copy while each is made).
std::size_t terms_bytes(const Geo& g, const Tensor& q, const Tensor& k) {
  return g.b * g.hq * g.sq * g.sk * dtype_size(g.compute) + (q.numel() + k.numel()) * 16;
}

// Funnel's float64 work besides: r projected by the kernel [hq, rlen, d], and the
// factorized products [b, hq, sq, d_model] twice with the four tables.
std::size_t funnel_bytes(const Geo& g, const XlAttention& xl) {
  if (!xl.rel_kernel || xl.rel_kernel->ndim() == 0) return 0;
  const std::size_t dm = xl.rel_kernel->shape()[0];
  if (xl.phi) return (2 * g.b * g.hq * g.sq + 2 * (g.sq + g.sk)) * dm * 8;
  return xl.rel_keys && xl.rel_keys->ndim() > 0 ? g.hq * xl.rel_keys->shape()[0] * g.d * 8 : 0;
}

template <class Terms>
AttentionResult with_terms(const Tensor& q, const Tensor& k, const Tensor* v,
                           const AttentionOptions& user, Terms terms, const char* scheme,
                           std::size_t extra_bytes = 0) {
  AttentionOptions opt = user;
  if (opt.score_bias) {
    throw UsageError(fmt::format("score_bias: {} attention computes its own terms", scheme));
  }
  const Geo g = geometry(q, k, opt);
  auto [need, names] =
      attention_memory(q.shape(), k.shape(), v ? &v->shape() : nullptr, q.dtype(), opt);
  need += terms_bytes(g, q, k) + extra_bytes;
  if (opt.max_memory && need > opt.max_memory) {
    throw InputError(fmt::format("{} with the {} terms would need {} > max_memory {}", names,
                                 scheme, bytes_str(need), bytes_str(opt.max_memory)));
  }
  double scale = 0;
  Attrs attrs;
  const Tensor bias = terms(g, scale, attrs);
  opt.score_bias = &bias;
  opt.scale = scale;
  opt.max_memory = 0;  // checked above, with the terms
  AttentionResult res = attention(q, k, v, opt);
  res.attrs.insert(res.attrs.end(), attrs.begin(), attrs.end());
  return res;
}

// segment_index [sq, sk] or [b, sq, sk] (bool or integers 0 / 1) as [b][sq][sk].
std::vector<std::uint8_t> segment_rows(const Tensor& t, const Geo& g) {
  const Shape& s = t.shape();
  const bool ok = (is_integer(t.dtype()) || t.dtype() == DType::b1) &&
                  (s == Shape{g.sq, g.sk} || s == Shape{g.b, g.sq, g.sk});
  if (!ok) {
    throw InputError(fmt::format(
        "segment_index: expected bool or integers of shape ({}, {}) or ({}, {}, {}) (the "
        "seg_embed row of every score), got {} of shape {}",
        g.sq, g.sk, g.b, g.sq, g.sk, dtype_name(t.dtype()), shape_str(s)));
  }
  const std::size_t per = g.sq * g.sk;
  std::vector<std::uint8_t> rows(g.b * per);
  for (std::size_t n = 0; n < rows.size(); ++n) {
    const std::size_t at = s.size() == 3 ? n : n % per;
    const double v = t.get(at);
    if (v != 0 && v != 1) {
      throw InputError(fmt::format("segment_index: values must be 0 or 1 (rows of seg_embed), got "
                                   "{} at flat index {}",
                                   v, at));
    }
    rows[n] = static_cast<std::uint8_t>(v);
  }
  return rows;
}

Kernel kernel(const Tensor& t, const Geo& g, const AttentionOptions& opt) {
  require_values(t, "rel_kernel", opt);
  const Shape& s = t.shape();
  const bool ok = (s.size() == 3 && s[1] == g.hq && s[2] == g.d) ||
                  (!g.has_h && s.size() == 2 && s[1] == g.d);
  if (!ok || s[0] == 0) {
    throw InputError(
        fmt::format("rel_kernel: expected shape (d_model, {}, {}) ([d_model, heads, d]), "
                    "got {}",
                    g.hq, g.d, shape_str(s)));
  }
  const Tensor c = t.astype(DType::f64);
  return Kernel{std::vector<double>(c.data<double>(), c.data<double>() + c.numel()), s[0]};
}

// Unprojected embeddings [rows, d_model] as float64, checked.
template <class RowsOk>
std::vector<double> embeddings(const Tensor& t, const std::string& name, std::size_t dm,
                               const AttentionOptions& opt, RowsOk rows_ok,
                               const std::string& rows_text) {
  require_values(t, name.c_str(), opt);
  const Shape& s = t.shape();
  if (s.size() != 2 || s[1] != dm || !rows_ok(s[0])) {
    throw InputError(fmt::format("{}: expected shape (rows, {}) ([rows, d_model] of rel_kernel) "
                                 "with {}, got {}",
                                 name, dm, rows_text, shape_str(s)));
  }
  const Tensor c = t.astype(DType::f64);
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

// r_head = r·W (HF einsum "td,dnh->tnh"), each entry a sum over d_model in order.
RelRows project(const std::vector<double>& r, const Kernel& w, const Geo& g) {
  RelRows out;
  out.rows = r.size() / w.dm;
  out.v.assign(g.hq * out.rows * g.d, 0.0);
  const std::int64_t n = static_cast<std::int64_t>(g.hq * out.rows);
#pragma omp parallel for schedule(static)
  for (std::int64_t hr = 0; hr < n; ++hr) {
    const std::size_t h = static_cast<std::size_t>(hr) / out.rows;
    const std::size_t row = static_cast<std::size_t>(hr) % out.rows;
    double* o = out.v.data() + static_cast<std::size_t>(hr) * g.d;
    for (std::size_t m = 0; m < w.dm; ++m) {
      const double x = r[row * w.dm + m];
      const double* wm = w.at(m, h, g.hq, g.d);
      for (std::size_t c = 0; c < g.d; ++c) o[c] += x * wm[c];
    }
  }
  return out;
}

// Funnel's factorized term, per (b, h, i): a = qr * phi_i and c = qr * pi_i with
// qr[D] = (q_i + v)·W[D]; the term is a·psi_j + c·omega_j.
struct Factorized {
  std::vector<double> a, c, psi, omega;
  std::size_t dm = 0;
};

// The four tables, checked, into `in`.
void read_factorized(XlInputs& in, const XlAttention& xl, const Geo& g,
                     const AttentionOptions& opt) {
  const std::size_t dm = in.w->dm;
  auto rows = [](std::size_t n) { return [n](std::size_t r) { return r == n; }; };
  const std::string q_text = fmt::format("rows = q_len {}", g.sq);
  const std::string k_text = fmt::format("rows = k_len {}", g.sk);
  in.phi = embeddings(*xl.phi, "factorized: phi", dm, opt, rows(g.sq), q_text);
  in.pi = embeddings(*xl.pi, "factorized: pi", dm, opt, rows(g.sq), q_text);
  in.psi = embeddings(*xl.psi, "factorized: psi", dm, opt, rows(g.sk), k_text);
  in.omega = embeddings(*xl.omega, "factorized: omega", dm, opt, rows(g.sk), k_text);
}

Factorized factorized(const XlInputs& in, const Kernel& w, const std::vector<double>& qd,
                      const std::vector<double>& vb, const Geo& g) {
  const std::size_t dm = w.dm;
  Factorized f;
  f.dm = dm;
  const std::vector<double>&phi = in.phi, &pi = in.pi;
  f.psi = in.psi;
  f.omega = in.omega;
  const std::size_t n = g.b * g.hq * g.sq, d = g.d;
  f.a.resize(n * dm);
  f.c.resize(n * dm);
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < static_cast<std::int64_t>(n); ++row) {
    const std::size_t r = static_cast<std::size_t>(row);
    const std::size_t i = r % g.sq, h = (r / g.sq) % g.hq;
    std::vector<double> qv(d);
    for (std::size_t c = 0; c < d; ++c) qv[c] = qd[r * d + c] + vb[h * d + c];
    for (std::size_t m = 0; m < dm; ++m) {
      const double qr = dot(qv.data(), w.at(m, h, g.hq, d), d);
      f.a[r * dm + m] = qr * phi[i * dm + m];
      f.c[r * dm + m] = qr * pi[i * dm + m];
    }
  }
  return f;
}

void check_xl(const XlAttention& xl, const Geo& g, bool fact) {
  if (fact) {
    if (!(xl.phi && xl.pi && xl.psi && xl.omega)) {
      throw UsageError("factorized: needs the four tables phi, pi, psi and omega");
    }
    if (xl.rel_keys) throw UsageError("rel_keys: not with the factorized tables (they replace r)");
    if (!xl.rel_kernel)
      throw UsageError("factorized: needs rel_kernel (W, which projects the tables)");
    if (xl.shift != 0) throw UsageError("shift: the factorized term has no shift");
  } else if (!xl.rel_keys) {
    throw UsageError("rel_keys: Transformer-XL / XLNet attention needs r");
  }
  if (xl.shift < 0 || xl.shift > (std::int64_t{1} << 30)) {
    throw UsageError(
        fmt::format("shift: must be from 0 (by the rows of r) to 2^30, got {}", xl.shift));
  }
  if (xl.segment_ids && xl.segment_index) {
    throw UsageError("segment_ids/segment_index: give one (ids per key, or the row per score)");
  }
  const bool seg = xl.segment_ids || xl.segment_index || xl.segment_embed || xl.segment_bias;
  if (seg && (!xl.segment_embed || !(xl.segment_ids || xl.segment_index))) {
    throw UsageError(
        "segment_ids/segment_embed: the XLNet segment term needs both (or segment_index and "
        "segment_embed)");
  }
  // XLNet's keys are the memory and the queries: query i is key sk - sq + i.
  if ((xl.shift == 0 && !fact) || xl.segment_ids) {
    if (g.sq > g.sk) {
      throw InputError(fmt::format(
          "{}: Transformer-XL / XLNet keys are the memory and the queries, so k_len {} must "
          "be at least q_len {}",
          xl.segment_ids && (xl.shift != 0 || fact) ? "segment_ids" : "rel_keys", g.sk, g.sq));
    }
  }
}

XlInputs read_xl(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                 const XlAttention& xl, const Geo& g) {
  XlInputs in;
  in.g = g;
  const bool fact = in.fact = xl.phi || xl.pi || xl.psi || xl.omega;
  check_xl(xl, g, fact);
  const std::size_t shift = in.shift = static_cast<std::size_t>(xl.shift);
  if (xl.rel_kernel) in.w = kernel(*xl.rel_kernel, g, opt);
  if (!fact) {
    const std::size_t min_rows = shift == 0 ? g.sk : g.sk + shift;
    auto rows_ok = [min_rows](std::size_t rows) { return rows >= min_rows; };
    const std::string rows_text =
        shift == 0 ? fmt::format("rows = k_len {} (Transformer-XL) or more (XLNet: k_len + q_len = "
                                 "{}, or k_len + 1 = {})",
                                 g.sk, g.sk + g.sq, g.sk + 1)
                   : fmt::format("rows >= k_len + shift = {} (Funnel: k_len + shift q_len = {})",
                                 min_rows, g.sk + shift * g.sq);
    if (in.w) {
      in.embed = embeddings(*xl.rel_keys, "rel_keys", in.w->dm, opt, rows_ok, rows_text);
      in.r = project(in.embed, *in.w, g);
    } else {
      in.r = rel_rows(*xl.rel_keys, "rel_keys", g, opt, /*allow_batched=*/true, rows_ok, rows_text);
    }
  }
  if (fact) read_factorized(in, xl, g, opt);
  in.u = per_head(xl.content_bias, "content_bias", g, opt);
  in.vb = per_head(xl.position_bias, "position_bias", g, opt);
  in.seg = xl.segment_embed != nullptr;
  if (in.seg) {
    if (xl.segment_ids) in.ids = segment_ids(*xl.segment_ids, g);
    if (xl.segment_index) in.seg_rows = segment_rows(*xl.segment_index, g);
    in.se = rel_rows(
        *xl.segment_embed, "segment_embed", g, opt, false,
        [](std::size_t rows) { return rows == 2; }, "rows = 2");
    in.sb = per_head(xl.segment_bias, "segment_bias", g, opt);
  }
  in.qd = bhsd(q, g.axes);
  in.kd = bhsd(k, g.axes);
  in.mlen = g.sk - std::min(g.sk, g.sq);
  in.cls_mask = xl.cls_mask;
  in.scale = scale_of(opt, 1.0 / std::sqrt(static_cast<double>(g.d)));
  return in;
}

Tensor xl_terms(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                const XlAttention& xl, const Geo& g, double& scale, Attrs& attrs) {
  const XlInputs in = read_xl(q, k, opt, xl, g);
  const bool fact = in.fact, seg = in.seg;
  const std::size_t shift = in.shift;
  const RelRows& r = in.r;
  const std::vector<double>&u = in.u, &vb = in.vb, &sb = in.sb, &qd = in.qd, &kd = in.kd;
  const RelRows& se = in.se;
  const std::size_t d = g.d, group = g.hq / g.hk, rlen = r.rows;
  Factorized f;
  if (fact) f = factorized(in, *in.w, qd, vb, g);
  auto qrow = [&](std::size_t b, std::size_t h, std::size_t i) {
    return qd.data() + ((b * g.hq + h) * g.sq + i) * d;
  };
  // Per (b, h): u·k_j, v·r_c and the two segment scores of each query.
  std::vector<double> uk(g.b * g.hq * g.sk), vr(g.b * g.hq * rlen),
      ef(seg ? g.b * g.hq * g.sq * 2 : 0);
  for (std::size_t b = 0; b < g.b; ++b) {
    for (std::size_t h = 0; h < g.hq; ++h) {
      const std::size_t bh = b * g.hq + h;
      for (std::size_t j = 0; j < g.sk; ++j) {
        uk[bh * g.sk + j] =
            dot(u.data() + h * d, kd.data() + ((b * g.hk + h / group) * g.sk + j) * d, d);
      }
      for (std::size_t c = 0; c < rlen; ++c)
        vr[bh * rlen + c] = dot(vb.data() + h * d, r.at(b, h, g.hq, c, d), d);
      for (std::size_t i = 0; seg && i < g.sq; ++i) {
        for (std::size_t s = 0; s < 2; ++s) {
          const double* e = se.at(0, h, g.hq, s, d);
          ef[(bh * g.sq + i) * 2 + s] = dot(qrow(b, h, i), e, d) + dot(sb.data() + h * d, e, d);
        }
      }
    }
  }
  scale = in.scale;
  Tensor out(g.compute, g.scores);
  fill_scores(out, g, [&](std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    const std::size_t bh = b * g.hq + h;
    const double content = uk[bh * g.sk + j];
    if (xl.cls_mask && (i == 0 || j == 0)) return scale * content;
    double bd = 0;
    if (fact) {
      const std::size_t at = (bh * g.sq + i) * f.dm;
      bd = dot(f.a.data() + at, f.psi.data() + j * f.dm, f.dm) +
           dot(f.c.data() + at, f.omega.data() + j * f.dm, f.dm);
    } else {
      const ShiftSource src = xl_shift(g.sq, rlen, g.sk, shift, i, j);
      if (!src.zero)
        bd = dot(qrow(b, h, src.row), r.at(b, h, g.hq, src.col, d), d) + vr[bh * rlen + src.col];
    }
    double e = 0;
    if (seg) e = ef[(bh * g.sq + i) * 2 + in.segment_row(b, i, j)];
    return scale * (content + bd + e);
  });
  xl_attrs(in, attrs);
  return out;
}

DebertaInputs read_deberta(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                           const DebertaAttention& deb, const Geo& g) {
  DebertaInputs in;
  in.g = g;
  check_deberta_buckets(deb.position_buckets, deb.max_relative_positions);
  if (!deb.pos_key && !deb.pos_query) {
    throw UsageError("pos_key/pos_query: DeBERTa attention needs c2p (pos_key) or p2c (pos_query)");
  }
  const std::size_t span = static_cast<std::size_t>(
      deb.position_buckets > 0 ? deb.position_buckets : deb.max_relative_positions);
  const std::string rows_text = fmt::format("rows >= 2 * span = {}", 2 * span);
  auto rows_ok = [span](std::size_t rows) { return rows >= 2 * span; };
  RelRows &pk = in.pk, &pq = in.pq;
  if (deb.pos_key) pk = rel_rows(*deb.pos_key, "pos_key", g, opt, false, rows_ok, rows_text);
  if (deb.pos_query) {
    pq = rel_rows(*deb.pos_query, "pos_query", g, opt, false, rows_ok, rows_text);
    if (g.sq != g.sk) {
      throw InputError(fmt::format(
          "pos_query: the p2c term needs as many queries as keys (HF DeBERTa-v2 builds it from "
          "the keys' positions alone), got q_len {} and k_len {}",
          g.sq, g.sk));
    }
  }
  const int terms = (deb.pos_key ? 1 : 0) + (deb.pos_query ? 1 : 0);
  in.scale = scale_of(opt, deberta_default_scale(g.d, terms));
  in.c2p = deb.pos_key != nullptr;
  in.position_buckets = deb.position_buckets;
  in.max_relative_positions = deb.max_relative_positions;
  in.p2c = deb.pos_query != nullptr;
  // Bucket index by distance delta = a - c, a, c < n: clamp(rel + span, 0, 2 span - 1).
  const std::int64_t n = in.n = static_cast<std::int64_t>(std::max(g.sq, g.sk));
  std::vector<std::int32_t>& index = in.index;
  index.resize(static_cast<std::size_t>(2 * n - 1));
  for (std::int64_t delta = -(n - 1); delta <= n - 1; ++delta) {
    const std::int64_t rel =
        deberta_relative_position(delta, 0, deb.position_buckets, deb.max_relative_positions);
    index[static_cast<std::size_t>(delta + n - 1)] =
        static_cast<std::int32_t>(std::clamp<std::int64_t>(
            rel + static_cast<std::int64_t>(span), 0, static_cast<std::int64_t>(2 * span) - 1));
  }
  // p2c at (i, j) takes clamp(-rel(j, i) + span, ...): looked up at delta = j - i.
  std::vector<std::int32_t>& index_p2c = in.index_p2c;
  index_p2c.resize(index.size());
  for (std::int64_t delta = -(n - 1); delta <= n - 1; ++delta) {
    const std::int64_t rel =
        deberta_relative_position(delta, 0, deb.position_buckets, deb.max_relative_positions);
    index_p2c[static_cast<std::size_t>(delta + n - 1)] =
        static_cast<std::int32_t>(std::clamp<std::int64_t>(
            -rel + static_cast<std::int64_t>(span), 0, static_cast<std::int64_t>(2 * span) - 1));
  }
  in.qd = bhsd(q, g.axes);
  in.kd = bhsd(k, g.axes);
  return in;
}

Tensor deberta_terms(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                     const DebertaAttention& deb, const Geo& g, double& scale, Attrs& attrs) {
  const DebertaInputs in = read_deberta(q, k, opt, deb, g);
  scale = in.scale;
  const RelRows &pk = in.pk, &pq = in.pq;
  const std::vector<std::int32_t>&index = in.index, &index_p2c = in.index_p2c;
  const std::int64_t n = in.n;
  const std::vector<double>&qd = in.qd, &kd = in.kd;
  const std::size_t d = g.d, group = g.hq / g.hk;
  Tensor out(g.compute, g.scores);
  fill_scores(out, g, [&](std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    double s = 0;
    const auto ii = static_cast<std::int64_t>(i), jj = static_cast<std::int64_t>(j);
    if (deb.pos_key) {
      const std::int32_t c = index[static_cast<std::size_t>(ii - jj + n - 1)];
      s += dot(qd.data() + ((b * g.hq + h) * g.sq + i) * d, pk.at(0, h, g.hq, c, d), d);
    }
    if (deb.pos_query) {
      const std::int32_t c = index_p2c[static_cast<std::size_t>(jj - ii + n - 1)];
      s += dot(kd.data() + ((b * g.hk + h / group) * g.sk + j) * d, pq.at(0, h, g.hq, c, d), d);
    }
    return scale * s;
  });
  deberta_attrs(in, attrs);
  return out;
}

}  // namespace

namespace relative_detail {

XlInputs xl_inputs(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                   const XlAttention& xl) {
  return read_xl(q, k, opt, xl, geometry(q, k, opt));
}

DebertaInputs deberta_inputs(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                             const DebertaAttention& deb) {
  return read_deberta(q, k, opt, deb, geometry(q, k, opt));
}

}  // namespace relative_detail

double deberta_default_scale(std::size_t d, int terms) {
  const float root = std::sqrt(static_cast<float>(d) * static_cast<float>(1 + terms));
  return 1.0 / static_cast<double>(root);
}

Tensor xl_score_bias(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                     const XlAttention& xl) {
  const Geo g = geometry(q, k, opt);
  double scale = 0;
  Attrs attrs;
  return xl_terms(q, k, opt, xl, g, scale, attrs);
}

Tensor deberta_score_bias(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                          const DebertaAttention& deb) {
  const Geo g = geometry(q, k, opt);
  double scale = 0;
  Attrs attrs;
  return deberta_terms(q, k, opt, deb, g, scale, attrs);
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v, AttentionOptions opt,
                          const XlAttention& xl) {
  return with_terms(
      q, k, v, opt,
      [&](const Geo& g, double& scale, Attrs& attrs) {
        return xl_terms(q, k, opt, xl, g, scale, attrs);
      },
      "Transformer-XL / XLNet / Funnel", funnel_bytes(geometry(q, k, opt), xl));
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v, AttentionOptions opt,
                          const DebertaAttention& deb) {
  return with_terms(
      q, k, v, opt,
      [&](const Geo& g, double& scale, Attrs& attrs) {
        return deberta_terms(q, k, opt, deb, g, scale, attrs);
      },
      "DeBERTa");
}

}  // namespace posenc
