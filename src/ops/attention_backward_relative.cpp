// attention_backward() with the Transformer-XL / XLNet / Funnel and DeBERTa score terms
// (ops/attention_relative.hpp): the terms are computed as the forward computes them
// (one [b, hq, sq, sk] tensor), the backward runs with them as a constant additive
// term and keeps their gradient dS (AttentionBackwardOptions::dscore_bias), and each
// term's tensors then get their gradients from dS by the chain rule through its
// formula, in float64. The terms' part of dq and dk is added to the attention's before
// the one rounding. Work items are (batch, KV head), each owning the rows of Q and K it
// writes and keeping its own sums of the per-head tensors' gradients, added over the
// items in order: the bytes do not depend on the thread count.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "ops/attention_geometry.hpp"
#include "ops/attention_relative_terms.hpp"
#include "ops/attention_varlen.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/attention_backward.hpp"
#include "posenc/ops/attention_relative.hpp"
#include "posenc/ops/cast.hpp"

namespace posenc {

using namespace attention_detail;
using namespace relative_detail;

namespace {

// y += a x over n values.
inline void axpy(double* y, double a, const double* x, std::size_t n) {
  for (std::size_t c = 0; c < n; ++c) y[c] += a * x[c];
}

// The gradient switches of the relative terms' tensors, by the option that gives each.
struct Switch {
  bool AttentionBackwardOptions::*wanted;
  const char* name;
  const char* option;
};
const Switch kSwitches[] = {
    {&AttentionBackwardOptions::drel_keys, "drel_keys", "--rel-keys"},
    {&AttentionBackwardOptions::dcontent_bias, "dcontent_bias", "--content-bias"},
    {&AttentionBackwardOptions::dposition_bias, "dposition_bias", "--position-bias"},
    {&AttentionBackwardOptions::dsegment_embed, "dsegment_embed", "--segment-embed"},
    {&AttentionBackwardOptions::dsegment_bias, "dsegment_bias", "--segment-bias"},
    {&AttentionBackwardOptions::drel_kernel, "drel_kernel", "--rel-kernel"},
    {&AttentionBackwardOptions::dpos_key, "dpos_key", "--pos-key"},
    {&AttentionBackwardOptions::dpos_query, "dpos_query", "--pos-query"},
    {&AttentionBackwardOptions::dfactorized, "dphi/dpi/dpsi/domega", "--factorized"},
};
constexpr std::size_t kNumSwitches = sizeof(kSwitches) / sizeof(kSwitches[0]);

// UsageError for a switch whose tensor is not given (`given` by the switch's index).
void refuse_switches(const AttentionBackwardOptions& bopt, const bool (&given)[kNumSwitches]) {
  for (std::size_t i = 0; i < kNumSwitches; ++i) {
    if (bopt.*(kSwitches[i].wanted) && !given[i]) {
      throw UsageError(
          fmt::format("gradients: {} needs {}", kSwitches[i].name, kSwitches[i].option));
    }
  }
}

AttentionBackwardOptions without_switches(AttentionBackwardOptions b) {
  for (const Switch& s : kSwitches) b.*(s.wanted) = false;
  return b;
}

// What the terms' backward cannot take, refused by name.
void refuse_relative(const AttentionOptions& opt, const AttentionBackwardOptions& bopt,
                     const char* scheme) {
  if (opt.score_bias) {
    throw UsageError(fmt::format("score_bias: {} attention computes its own terms", scheme));
  }
  if (bopt.sink || bopt.forward_output || bopt.release_kv || bopt.dscore_bias) {
    throw UsageError(
        "gradients: the relative terms' are computed in memory (no sinks, given forward or "
        "released K, V)");
  }
  const std::pair<bool, const char*> no[] = {
      {opt.qv != nullptr, "--qv"},
      {opt.per_dim_scale != nullptr || opt.relative_proj != nullptr,
       "--per-dim-scale/--relative-proj"},
      {attention_detail::is_varlen(opt), "--cu-seqlens-q/--cu-seqlens-k"},
  };
  for (const auto& [bad, what] : no) {
    if (bad) {
      throw UsageError(fmt::format(
          "gradients: {} is not supported by the backward pass with the {} terms", what,
          scheme));
    }
  }
}

// Q's (or K's) rows of bhsd() order [b][h][s][d] added to `t` (float64, axes `axes`).
void add_bhsd(Tensor& t, const std::vector<double>& x, const std::string& axes) {
  std::size_t n[4] = {1, 1, 1, 1};
  std::size_t st[4] = {0, 0, 0, 0};
  std::size_t stride = 1;
  for (std::size_t i = axes.size(); i-- > 0;) {
    const std::size_t a = std::string("bhsd").find(axes[i]);
    n[a] = t.shape()[i];
    st[a] = stride;
    stride *= t.shape()[i];
  }
  double* p = t.data<double>();
  std::size_t o = 0;
  for (std::size_t b = 0; b < n[0]; ++b)
    for (std::size_t h = 0; h < n[1]; ++h)
      for (std::size_t s = 0; s < n[2]; ++s)
        for (std::size_t c = 0; c < n[3]; ++c) p[b * st[0] + h * st[1] + s * st[2] + c * st[3]] += x[o++];
}

// A float64 vector as a tensor of `like`'s shape in `out`, each value rounded once.
Tensor as_tensor(const std::vector<double>& x, const Shape& like, DType out) {
  Tensor t(out, like);
  for (std::size_t i = 0; i < x.size(); ++i) t.set(i, x[i]);
  return t;
}

// Rows [b'][hq][rows][d] (RelRows' order) as the tensor's [rows][b'][hq][d].
std::vector<double> rows_first(const std::vector<double>& x, std::size_t nb, std::size_t hq,
                               std::size_t rows, std::size_t d) {
  std::vector<double> out(x.size());
  for (std::size_t b = 0; b < nb; ++b)
    for (std::size_t h = 0; h < hq; ++h)
      for (std::size_t r = 0; r < rows; ++r)
        std::copy_n(x.data() + ((b * hq + h) * rows + r) * d, d,
                    out.data() + ((r * nb + b) * hq + h) * d);
  return out;
}

// Per-item sums [items][group][n] added over the batch entries in order, to [hq][n].
std::vector<double> by_head(const std::vector<double>& parts, const Geo& g, std::size_t n) {
  const std::size_t group = g.hq / g.hk;
  std::vector<double> out(g.hq * n, 0.0);
  for (std::size_t b = 0; b < g.b; ++b)
    for (std::size_t h = 0; h < g.hq; ++h) {
      const double* p = parts.data() + ((b * g.hk + h / group) * group + h % group) * n;
      double* o = out.data() + h * n;
      for (std::size_t i = 0; i < n; ++i) o[i] += p[i];
    }
  return out;
}

// The gradients of the Transformer-XL / XLNet / Funnel terms' inputs from dS (float64,
// bhsd order for Q and K).
struct XlGrads {
  std::vector<double> dq, dk, du, dvb, dr, dse, dsb, dembed, dw;
  std::vector<double> dphi, dpi, dpsi, domega;  // Funnel's factorized tables
};

// Funnel's factorized term of one item's head h: pos_ij = sum_D qr_i[D] (phi[i, D]
// psi[j, D] + pi[i, D] omega[j, D]), qr_i[D] = (q_i + v).W[D]. Row i's sums over its
// keys (A = sum_j s_ij psi_j, C = sum_j s_ij omega_j) give dqr = phi_i A + pi_i C, then
// dq_i, dv and dW through qr; dphi_i = qr A, dpi_i = qr C; the keys' tables get s_ij
// qr_i phi_i and s_ij qr_i pi_i.
struct FactorizedHead {
  const XlInputs& in;
  std::size_t h, dm;
  std::vector<double> qv, qr, a, c, A, C;
  FactorizedHead(const XlInputs& x, std::size_t head)
      : in(x), h(head), dm(x.w ? x.w->dm : 0), qv(x.g.d), qr(dm), a(dm), c(dm), A(dm), C(dm) {}
  // Row i's qr and its products with phi_i and pi_i, as the forward forms them.
  void begin(const double* qi, std::size_t i) {
    const std::size_t d = in.g.d;
    for (std::size_t x = 0; x < d; ++x) qv[x] = qi[x] + in.vb[h * d + x];
    for (std::size_t m = 0; m < dm; ++m) {
      qr[m] = dot(qv.data(), in.w->at(m, h, in.g.hq, d), d);
      a[m] = qr[m] * in.phi[i * dm + m];
      c[m] = qr[m] * in.pi[i * dm + m];
    }
    std::fill(A.begin(), A.end(), 0.0);
    std::fill(C.begin(), C.end(), 0.0);
  }
  void score(std::size_t j, double gs, double* dpsi, double* domega) {
    axpy(A.data(), gs, in.psi.data() + j * dm, dm);
    axpy(C.data(), gs, in.omega.data() + j * dm, dm);
    axpy(dpsi + j * dm, gs, a.data(), dm);
    axpy(domega + j * dm, gs, c.data(), dm);
  }
  // Row i's gradients: dq_i (and dv) += sum_D dqr[D] W[D], dW[D] += dqr[D] (q_i + v).
  void end(std::size_t i, double* dqi, double* dvb, double* dw, double* dphi, double* dpi) {
    const std::size_t d = in.g.d;
    for (std::size_t m = 0; m < dm; ++m) {
      const double dqr = in.phi[i * dm + m] * A[m] + in.pi[i * dm + m] * C[m];
      dphi[i * dm + m] += qr[m] * A[m];
      dpi[i * dm + m] += qr[m] * C[m];
      const double* wm = in.w->at(m, h, in.g.hq, d);
      axpy(dqi, dqr, wm, d);
      axpy(dvb, dqr, wm, d);
      axpy(dw + m * d, dqr, qv.data(), d);
    }
  }
};

XlGrads xl_grads(const XlInputs& in, const std::vector<double>& dS) {
  const Geo& g = in.g;
  const std::size_t d = g.d, group = g.hq / g.hk, items = g.b * g.hk, rlen = in.r.rows;
  const std::size_t nb = in.r.batched ? g.b : 1;
  XlGrads o;
  o.dq.assign(g.b * g.hq * g.sq * d, 0.0);
  o.dk.assign(g.b * g.hk * g.sk * d, 0.0);
  // Each item's sums of the per-head tensors' gradients (r's own rows when r is batched).
  std::vector<double> du(items * group * d, 0.0), dvb(du.size(), 0.0), dsb(du.size(), 0.0),
      dse(items * group * 2 * d, 0.0);
  std::vector<double> dr(in.r.batched ? nb * g.hq * rlen * d : items * group * rlen * d, 0.0);
  // Funnel's factorized term: each item's sums of the tables' and W's gradients.
  const std::size_t dm = in.fact ? in.w->dm : 0;
  std::vector<double> dphi(items * g.sq * dm, 0.0), dpi(dphi.size(), 0.0),
      dpsi(items * g.sk * dm, 0.0), domega(dpsi.size(), 0.0), dwf(items * group * dm * d, 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t item = 0; item < static_cast<std::int64_t>(items); ++item) {
    const std::size_t it = static_cast<std::size_t>(item), b = it / g.hk, kvh = it % g.hk;
    std::vector<double> colsum(g.sk), bycol(rlen);
    for (std::size_t hh = 0; hh < group; ++hh) {
      const std::size_t h = kvh * group + hh, bh = b * g.hq + h, part = it * group + hh;
      const double* qh = in.qd.data() + bh * g.sq * d;
      double* dqh = o.dq.data() + bh * g.sq * d;
      double* drh = in.r.batched ? dr.data() + bh * rlen * d : dr.data() + part * rlen * d;
      std::fill(colsum.begin(), colsum.end(), 0.0);
      std::fill(bycol.begin(), bycol.end(), 0.0);
      FactorizedHead fh(in, h);
      for (std::size_t i = 0; i < g.sq; ++i) {
        const double* gr = dS.data() + (bh * g.sq + i) * g.sk;
        double seg_sum[2] = {0, 0};
        if (in.fact) fh.begin(qh + i * d, i);
        for (std::size_t j = 0; j < g.sk; ++j) {
          const double gs = in.scale * gr[j];
          if (gs == 0) continue;
          colsum[j] += gs;  // (q_i + u).k_j: u's and k_j's part
          if (in.cls_mask && (i == 0 || j == 0)) continue;
          if (in.fact) {
            fh.score(j, gs, dpsi.data() + it * g.sk * dm, domega.data() + it * g.sk * dm);
          }
          // shift((q + v).r): the row and column the score reads.
          const ShiftSource src =
              in.fact ? ShiftSource{0, 0, true} : xl_shift(g.sq, rlen, g.sk, in.shift, i, j);
          if (!src.zero) {
            axpy(dqh + src.row * d, gs, in.r.at(b, h, g.hq, src.col, d), d);
            axpy(drh + src.col * d, gs, qh + src.row * d, d);
            bycol[src.col] += gs;
          }
          if (in.seg) seg_sum[in.segment_row(b, i, j)] += gs;
        }
        if (in.fact) {
          fh.end(i, dqh + i * d, dvb.data() + part * d, dwf.data() + part * dm * d,
                 dphi.data() + it * g.sq * dm, dpi.data() + it * g.sq * dm);
        }
        for (std::size_t s = 0; in.seg && s < 2; ++s) {  // (q_i + r_s_bias).seg_embed[s]
          const double* e = in.se.at(0, h, g.hq, s, d);
          axpy(dqh + i * d, seg_sum[s], e, d);
          axpy(dsb.data() + part * d, seg_sum[s], e, d);
          double* de = dse.data() + (part * 2 + s) * d;
          axpy(de, seg_sum[s], qh + i * d, d);
          axpy(de, seg_sum[s], in.sb.data() + h * d, d);
        }
      }
      const double* kh = in.kd.data() + (b * g.hk + kvh) * g.sk * d;
      double* dkh = o.dk.data() + (b * g.hk + kvh) * g.sk * d;
      for (std::size_t j = 0; j < g.sk; ++j) {
        axpy(dkh + j * d, colsum[j], in.u.data() + h * d, d);
        axpy(du.data() + part * d, colsum[j], kh + j * d, d);
      }
      for (std::size_t c = 0; c < rlen; ++c) {  // v's part of (q + v).r
        axpy(drh + c * d, bycol[c], in.vb.data() + h * d, d);
        axpy(dvb.data() + part * d, bycol[c], in.r.at(b, h, g.hq, c, d), d);
      }
    }
  }
  o.du = by_head(du, g, d);
  o.dvb = by_head(dvb, g, d);
  o.dsb = by_head(dsb, g, d);
  o.dse = by_head(dse, g, 2 * d);  // [hq][2][d]
  o.dr = in.r.batched ? std::move(dr) : by_head(dr, g, rlen * d);  // [b'][hq][rlen][d]
  if (in.fact) {
    // The items' sums in item order; W's by head over the batch entries.
    auto sum_items = [&](const std::vector<double>& parts, std::size_t n) {
      std::vector<double> out(n, 0.0);
      for (std::size_t it = 0; it < items; ++it)
        for (std::size_t x = 0; x < n; ++x) out[x] += parts[it * n + x];
      return out;
    };
    o.dphi = sum_items(dphi, g.sq * dm);
    o.dpi = sum_items(dpi, g.sq * dm);
    o.dpsi = sum_items(dpsi, g.sk * dm);
    o.domega = sum_items(domega, g.sk * dm);
    const std::vector<double> dw_h = by_head(dwf, g, dm * d);  // [hq][dm][d]
    o.dw.assign(dm * g.hq * d, 0.0);
    for (std::size_t h = 0; h < g.hq; ++h)
      for (std::size_t m = 0; m < dm; ++m)
        std::copy_n(dw_h.data() + (h * dm + m) * d, d, o.dw.data() + (m * g.hq + h) * d);
  } else if (in.w) {
    // r = R W: dR[row, m] = sum over h, c of dr[h, row, c] W[m, h, c]; dW[m, h, c] = sum
    // over rows of R[row, m] dr[h, row, c].
    const Kernel& w = *in.w;
    const std::size_t dm = w.dm;
    o.dembed.assign(rlen * dm, 0.0);
    o.dw.assign(dm * g.hq * d, 0.0);
#pragma omp parallel for schedule(static)
    for (std::int64_t m = 0; m < static_cast<std::int64_t>(dm); ++m) {
      const std::size_t mm = static_cast<std::size_t>(m);
      for (std::size_t row = 0; row < rlen; ++row) {
        double s = 0;
        for (std::size_t h = 0; h < g.hq; ++h)
          s += dot(o.dr.data() + (h * rlen + row) * d, w.at(mm, h, g.hq, d), d);
        o.dembed[row * dm + mm] = s;
      }
      for (std::size_t h = 0; h < g.hq; ++h) {
        double* dwm = o.dw.data() + (mm * g.hq + h) * d;
        for (std::size_t row = 0; row < rlen; ++row)
          axpy(dwm, in.embed[row * dm + mm], o.dr.data() + (h * rlen + row) * d, d);
      }
    }
  }
  return o;
}

// DeBERTa's: dq, dk and the two tables' gradients [hq][rows][d].
struct DebertaGrads {
  std::vector<double> dq, dk, dpk, dpq;
};

DebertaGrads deberta_grads(const DebertaInputs& in, const std::vector<double>& dS) {
  const Geo& g = in.g;
  const std::size_t d = g.d, group = g.hq / g.hk, items = g.b * g.hk;
  const std::size_t rk = in.pk.rows, rq = in.pq.rows;
  DebertaGrads o;
  o.dq.assign(g.b * g.hq * g.sq * d, 0.0);
  o.dk.assign(g.b * g.hk * g.sk * d, 0.0);
  std::vector<double> dpk(items * group * rk * d, 0.0), dpq(items * group * rq * d, 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t item = 0; item < static_cast<std::int64_t>(items); ++item) {
    const std::size_t it = static_cast<std::size_t>(item), b = it / g.hk, kvh = it % g.hk;
    const double* kh = in.kd.data() + (b * g.hk + kvh) * g.sk * d;
    double* dkh = o.dk.data() + (b * g.hk + kvh) * g.sk * d;
    // Each row's (c2p) or column's (p2c) scores summed by table row first: far
    // distances share a log bucket, so a row's products are with its distinct rows.
    std::vector<double> by_row(std::max(rk, rq));
    for (std::size_t hh = 0; hh < group; ++hh) {
      const std::size_t h = kvh * group + hh, bh = b * g.hq + h, part = it * group + hh;
      const double* sh = dS.data() + bh * g.sq * g.sk;
      for (std::size_t i = 0; in.c2p && i < g.sq; ++i) {  // q_i . pos_key[c2p row]
        std::fill(by_row.begin(), by_row.begin() + rk, 0.0);
        for (std::size_t j = 0; j < g.sk; ++j) by_row[in.c2p_row(i, j)] += sh[i * g.sk + j];
        const double* qi = in.qd.data() + (bh * g.sq + i) * d;
        double* dqi = o.dq.data() + (bh * g.sq + i) * d;
        for (std::size_t c = 0; c < rk; ++c) {
          const double gs = in.scale * by_row[c];
          if (gs == 0) continue;
          axpy(dqi, gs, in.pk.at(0, h, g.hq, c, d), d);
          axpy(dpk.data() + (part * rk + c) * d, gs, qi, d);
        }
      }
      for (std::size_t j = 0; in.p2c && j < g.sk; ++j) {  // k_j . pos_query[p2c row]
        std::fill(by_row.begin(), by_row.begin() + rq, 0.0);
        for (std::size_t i = 0; i < g.sq; ++i) by_row[in.p2c_row(i, j)] += sh[i * g.sk + j];
        for (std::size_t c = 0; c < rq; ++c) {
          const double gs = in.scale * by_row[c];
          if (gs == 0) continue;
          axpy(dkh + j * d, gs, in.pq.at(0, h, g.hq, c, d), d);
          axpy(dpq.data() + (part * rq + c) * d, gs, kh + j * d, d);
        }
      }
    }
  }
  if (in.c2p) o.dpk = by_head(dpk, g, rk * d);
  if (in.p2c) o.dpq = by_head(dpq, g, rq * d);
  return o;
}

// The bytes the terms' backward holds besides attention_backward's own: the terms, Q
// and K in float64 (twice while they are read), the terms' dq and dk, the rounded dq,
// dk, dv, and each relative tensor's copies (float64, the items' sums, the gradient).
std::size_t relative_extra(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                           const AttentionOptions& opt,
                           std::initializer_list<const Tensor*> tensors) {
  const DType compute = attention_arith(opt);
  const Shape scores = attention_scores_shape(q, k, q_dtype, opt);
  const std::size_t out = dtype_size(opt.dtype.value_or(q_dtype));
  const std::size_t nq = checked_numel(q, 1, "attention"), nk = checked_numel(k, 1, "attention"),
                    nv = checked_numel(v, 1, "attention");
  std::size_t n = mul_sat(checked_numel(scores, 1, "attention"), dtype_size(compute));
  n = add_sat(n, mul_sat(add_sat(nq, nk), 24));
  n = add_sat(n, mul_sat(add_sat(add_sat(nq, nk), nv), out));
  const std::size_t b = q.size() == 4 ? q[0] : 1;
  for (const Tensor* t : tensors) {
    if (t) n = add_sat(n, mul_sat(t->numel(), add_sat(mul_sat(b + 3, 8), out)));
  }
  return n;
}

// The backward with `bias` (the terms, scale `scale`) as opt.score_bias: attention's
// gradients in float64 and dS, or an InputError over the budget.
AttentionGrads inner_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& grad_output, const AttentionOptions& opt,
                              const AttentionBackwardOptions& bopt, const Tensor& bias,
                              double scale, std::size_t extra, std::vector<double>& dS) {
  AttentionOptions o = opt;
  o.score_bias = &bias;
  o.scale = scale;
  o.dtype = DType::f64;  // the terms' part of dq and dk is added before the one rounding
  if (opt.max_memory) o.max_memory = std::max<std::size_t>(1, opt.max_memory - extra);
  AttentionBackwardOptions ib = without_switches(bopt);
  ib.dscore_bias = &dS;
  return attention_backward(q, k, v, grad_output, o, ib);
}

// Checks the budget before anything is computed: attention_backward's need with the
// term and its gradient, and `extra`.
void require_budget(const Tensor& q, const Tensor& k, const Tensor& v,
                    const AttentionOptions& opt, const AttentionBackwardOptions& bopt,
                    std::size_t extra, const char* scheme) {
  if (!opt.max_memory) return;
  const std::size_t need =
      add_sat(relative_backward_memory_inner(q.shape(), k.shape(), v.shape(), q.dtype(), opt,
                                             bopt),
              extra);
  if (need > opt.max_memory) {
    throw InputError(fmt::format("gradients with the {} terms would need {} > max_memory {}",
                                 scheme, bytes_str(need), bytes_str(opt.max_memory)));
  }
}

// The result: every gradient of `c` rounded once to the output dtype (the row
// statistics stay float64), dq and dk with the terms' parts added first.
AttentionGrads finish(AttentionGrads& c, const Tensor& q, const AttentionOptions& opt,
                      const std::string& axes, const std::vector<double>& dq,
                      const std::vector<double>& dk) {
  add_bhsd(c.dq, dq, axes);
  add_bhsd(c.dk, dk, axes);
  const DType out = opt.dtype.value_or(q.dtype());
  AttentionGrads res;
  res.attrs = std::move(c.attrs);
  for (const GradientField& f : gradient_fields()) {
    Tensor& from = c.*(f.member);
    if (from.ndim() == 0 && from.numel() == 0) continue;
    res.*(f.member) = f.kind == GradientKind::stat ? std::move(from) : cast(from, out);
  }
  return res;
}

}  // namespace

namespace relative_detail {

std::size_t relative_backward_memory_inner(const Shape& q, const Shape& k, const Shape& v,
                                           DType q_dtype, const AttentionOptions& opt,
                                           const AttentionBackwardOptions& bopt) {
  static std::vector<double> stands_for_dS;  // counted, never written
  AttentionOptions o = opt;
  o.dtype = DType::f64;
  AttentionBackwardOptions ib = without_switches(bopt);
  ib.dscore_bias = &stands_for_dS;
  return attention_backward_memory(q, k, v, q_dtype, o, ib);
}

void refuse_relative_gradients(const AttentionBackwardOptions& bopt) {
  const bool none[kNumSwitches] = {};
  refuse_switches(bopt, none);
}

}  // namespace relative_detail

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt, const XlAttention& xl) {
  const char* scheme = "Transformer-XL / XLNet / Funnel";
  refuse_relative(opt, bopt, scheme);
  const bool given[kNumSwitches] = {
      xl.rel_keys != nullptr,      xl.content_bias != nullptr, xl.position_bias != nullptr,
      xl.segment_embed != nullptr, xl.segment_bias != nullptr, xl.rel_kernel != nullptr,
      false,                       false,                      xl.phi != nullptr};
  refuse_switches(bopt, given);
  const std::size_t extra = relative_extra(
      q.shape(), k.shape(), v.shape(), q.dtype(), opt,
      {xl.rel_keys, xl.content_bias, xl.position_bias, xl.segment_embed, xl.segment_bias,
       xl.rel_kernel, xl.phi, xl.pi, xl.psi, xl.omega});
  require_budget(q, k, v, opt, bopt, extra, scheme);
  const XlInputs in = xl_inputs(q, k, opt, xl);
  std::vector<double> dS;
  AttentionGrads c;
  {
    const Tensor bias = xl_score_bias(q, k, opt, xl);
    c = inner_backward(q, k, v, grad_output, opt, bopt, bias, in.scale, extra, dS);
  }
  XlGrads t = xl_grads(in, dS);
  dS = {};
  const Geo& g = in.g;
  AttentionGrads res = finish(c, q, opt, g.axes, t.dq, t.dk);
  const DType out = opt.dtype.value_or(q.dtype());
  if (bopt.drel_keys) {
    res.drel_keys = in.w ? as_tensor(t.dembed, xl.rel_keys->shape(), out)
                         : as_tensor(rows_first(t.dr, in.r.batched ? g.b : 1, g.hq, in.r.rows,
                                                g.d),
                                     xl.rel_keys->shape(), out);
  }
  if (bopt.drel_kernel) res.drel_kernel = as_tensor(t.dw, xl.rel_kernel->shape(), out);
  if (bopt.dfactorized) {
    res.dphi = as_tensor(t.dphi, xl.phi->shape(), out);
    res.dpi = as_tensor(t.dpi, xl.pi->shape(), out);
    res.dpsi = as_tensor(t.dpsi, xl.psi->shape(), out);
    res.domega = as_tensor(t.domega, xl.omega->shape(), out);
  }
  if (bopt.dcontent_bias) res.dcontent_bias = as_tensor(t.du, xl.content_bias->shape(), out);
  if (bopt.dposition_bias) res.dposition_bias = as_tensor(t.dvb, xl.position_bias->shape(), out);
  if (bopt.dsegment_bias) res.dsegment_bias = as_tensor(t.dsb, xl.segment_bias->shape(), out);
  if (bopt.dsegment_embed) {
    res.dsegment_embed =
        as_tensor(rows_first(t.dse, 1, g.hq, 2, g.d), xl.segment_embed->shape(), out);
  }
  xl_attrs(in, res.attrs);
  return res;
}

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt,
                                  const DebertaAttention& deb) {
  const char* scheme = "DeBERTa";
  refuse_relative(opt, bopt, scheme);
  const bool given[kNumSwitches] = {false, false, false, false, false, false,
                                    deb.pos_key != nullptr, deb.pos_query != nullptr, false};
  refuse_switches(bopt, given);
  const std::size_t extra = relative_extra(q.shape(), k.shape(), v.shape(), q.dtype(), opt,
                                           {deb.pos_key, deb.pos_query});
  require_budget(q, k, v, opt, bopt, extra, scheme);
  const DebertaInputs in = deberta_inputs(q, k, opt, deb);
  std::vector<double> dS;
  AttentionGrads c;
  {
    const Tensor bias = deberta_score_bias(q, k, opt, deb);
    c = inner_backward(q, k, v, grad_output, opt, bopt, bias, in.scale, extra, dS);
  }
  DebertaGrads t = deberta_grads(in, dS);
  dS = {};
  const Geo& g = in.g;
  AttentionGrads res = finish(c, q, opt, g.axes, t.dq, t.dk);
  const DType out = opt.dtype.value_or(q.dtype());
  if (bopt.dpos_key) {
    res.dpos_key = as_tensor(rows_first(t.dpk, 1, g.hq, in.pk.rows, g.d), deb.pos_key->shape(), out);
  }
  if (bopt.dpos_query) {
    res.dpos_query =
        as_tensor(rows_first(t.dpq, 1, g.hq, in.pq.rows, g.d), deb.pos_query->shape(), out);
  }
  deberta_attrs(in, res.attrs);
  return res;
}

std::size_t attention_backward_memory(const Shape& q, const Shape& k, const Shape& v,
                                      DType q_dtype, const AttentionOptions& opt,
                                      const AttentionBackwardOptions& bopt,
                                      const XlAttention& xl) {
  return add_sat(relative_backward_memory_inner(q, k, v, q_dtype, opt, bopt),
                 relative_extra(q, k, v, q_dtype, opt,
                                {xl.rel_keys, xl.content_bias, xl.position_bias,
                                 xl.segment_embed, xl.segment_bias, xl.rel_kernel, xl.phi,
                                 xl.pi, xl.psi, xl.omega}));
}

std::size_t attention_backward_memory(const Shape& q, const Shape& k, const Shape& v,
                                      DType q_dtype, const AttentionOptions& opt,
                                      const AttentionBackwardOptions& bopt,
                                      const DebertaAttention& deb) {
  return add_sat(relative_backward_memory_inner(q, k, v, q_dtype, opt, bopt),
                 relative_extra(q, k, v, q_dtype, opt, {deb.pos_key, deb.pos_query}));
}

}  // namespace posenc
