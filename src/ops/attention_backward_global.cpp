// The backward of LongT5's transient-global side keys (attention_backward_global.hpp).
#include "ops/attention_backward_global.hpp"

#include <cmath>
#include <cstdint>

#include "posenc/encodings/bias.hpp"
#include "posenc/error.hpp"

namespace posenc::attention_detail {

void refuse_global_gradients(const AttentionOptions& opt, const AttentionBackwardOptions& bopt) {
  if (bopt.dglobal_kv && !opt.global_k) {
    throw UsageError("gradients: dglobal_k and dglobal_v need --global-kv");
  }
  if (bopt.dglobal_bias && !opt.global_bias) {
    throw UsageError("gradients: dglobal_bias needs --global-bias");
  }
}

std::size_t global_backward_bytes(const Geometry& g, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt, DType out) {
  if (!g.global) return 0;
  std::size_t n = 0;
  if (bopt.dglobal_kv && opt.global_k) {
    const std::size_t rows = mul_sat(g.b * g.hk, g.global);
    n = add_sat(n, mul_sat(rows, mul_sat(g.d + g.dv, dtype_size(g.compute) + dtype_size(out))));
  }
  if (bopt.dglobal_bias && opt.global_bias) {
    n = add_sat(n, mul_sat(mul_sat(g.b * g.hq, 2 * g.global), 8));
    n = add_sat(n, mul_sat(opt.global_bias->numel(), 8 + dtype_size(out)));
  }
  return n;
}

template <class T>
void GlobalGrads<T>::init(const Plan<T>& P, const AttentionBackwardOptions& bopt) {
  const Geometry& g = P.g;
  on = P.global.on();
  if (!on) return;
  const std::size_t n = P.global.n;
  if (bopt.dglobal_kv) {
    dk.assign(g.b * g.hk * n * g.d, T(0));
    dv.assign(g.b * g.hk * n * g.dv, T(0));
  }
  if (bopt.dglobal_bias) bias.assign(g.b * g.hq * 2 * n, 0.0);
}

template <class T>
void GlobalGrads<T>::item(const Plan<T>& P, const View<T>& q, const View<T>& dO,
                          const double* lse, const double* D, std::size_t bi, std::size_t kvh,
                          T* dq) {
  const Geometry& g = P.g;
  const GlobalKeys<T>& G = P.global;
  const std::size_t n = G.n, d = g.d, dw = g.dv, group = g.hq / g.hk;
  const T* kg = G.k.data() + (bi * g.hk + kvh) * n * d;
  const T* vg = G.v.empty() ? nullptr : G.v.data() + (bi * g.hk + kvh) * n * dw;
  T* dkg = dk.empty() ? nullptr : dk.data() + (bi * g.hk + kvh) * n * d;
  T* dvg = dv.empty() ? nullptr : dv.data() + (bi * g.hk + kvh) * n * dw;
  for (std::size_t hh = 0; hh < group; ++hh) {
    const std::size_t h = kvh * group + hh;
    const T* brow = G.bias.empty() ? nullptr : G.bias.data() + h * 2 * n;
    double* dbrow = bias.empty() ? nullptr : bias.data() + (bi * g.hq + h) * 2 * n;
    for (std::size_t i = 0; i < g.sq; ++i) {
      const std::size_t row = (bi * g.hq + h) * g.sq + i;
      if (lse[row] == -kInf) continue;  // the row sees no key (NaN propagates)
      const T l = static_cast<T>(lse[row]), Dr = static_cast<T>(D[row]);
      const T* qi = q.p + bi * q.b + h * q.h + i * q.s;
      const T* oi = dO.p + bi * dO.b + h * dO.h + i * dO.s;
      T* dqi = dq + (hh * g.sq + i) * d;
      const std::size_t tok = bi * g.sq + i;
      // Index of g - block(i) in the bias: g - block + n - 1.
      const std::int64_t shift = static_cast<std::int64_t>(n) - 1 - G.ids[tok];
      for (std::size_t c = 0; c < n; ++c) {
        if (G.seg[bi * n + c] != G.valid[tok]) continue;  // HF's side mask
        const T* kc = kg + c * d;
        T x = 0;
        for (std::size_t e = 0; e < d; ++e) x += qi[e] * kc[e];
        x *= P.scale;
        const std::size_t di = static_cast<std::size_t>(static_cast<std::int64_t>(c) + shift);
        if (brow) x += brow[di];
        const T p = std::exp(x - l);
        T dp = 0;
        if (vg) {
          const T* vc = vg + c * dw;
          for (std::size_t e = 0; e < dw; ++e) dp += oi[e] * vc[e];
        }
        const T ds = p * (dp - Dr);
        const T sds = P.scale * ds;
        for (std::size_t e = 0; e < d; ++e) dqi[e] += sds * kc[e];
        if (dkg) {
          T* dkc = dkg + c * d;
          for (std::size_t e = 0; e < d; ++e) dkc[e] += sds * qi[e];
          T* dvc = dvg + c * dw;
          for (std::size_t e = 0; e < dw; ++e) dvc[e] += p * oi[e];
        }
        if (dbrow) dbrow[di] += static_cast<double>(ds);
      }
    }
  }
}

template <class T>
void GlobalGrads<T>::results(const Plan<T>& P, const AttentionOptions& opt, DType out,
                             AttentionGrads& res) const {
  const Geometry& g = P.g;
  const std::size_t n = P.global.n;
  auto store = [&](const std::vector<T>& from, const Tensor& like, std::size_t width,
                   Tensor& to) {  // [b][hk][n][width] into like's shape and axes
    to = Tensor(out, like.shape());
    const Strides st = strides_of(like.shape(), g.axes);
    const T* a = from.data();
    for (std::size_t b = 0; b < g.b; ++b)
      for (std::size_t h = 0; h < g.hk; ++h)
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t e = 0; e < width; ++e, ++a) {
            to.set(b * st.b + h * st.h + j * st.s + e * st.d, static_cast<double>(*a));
          }
  };
  if (!dk.empty()) {
    store(dk, *opt.global_k, g.d, res.dglobal_k);
    if (opt.global_v) store(dv, *opt.global_v, g.dv, res.dglobal_v);
  }
  if (!bias.empty()) {
    // d table[bucket, h] = the sum of dS over the pairs whose block distance g - block(i)
    // falls in the bucket: batch then distance order, as dt5_bias.
    std::vector<double> acc(opt.global_bias->numel(), 0.0);  // [buckets, hq]
    for (std::size_t bi = 0; bi < g.b; ++bi)
      for (std::size_t di = 0; di < 2 * n; ++di) {
        const std::int64_t rel =
            static_cast<std::int64_t>(di) - static_cast<std::int64_t>(n) + 1;
        const auto bucket = static_cast<std::size_t>(
            t5_bucket(rel, opt.t5_bidirectional, opt.t5_buckets, opt.t5_max_distance));
        for (std::size_t h = 0; h < g.hq; ++h) {
          acc[bucket * g.hq + h] += bias[(bi * g.hq + h) * 2 * n + di];
        }
      }
    res.dglobal_bias = Tensor(out, opt.global_bias->shape());
    for (std::size_t i = 0; i < acc.size(); ++i) res.dglobal_bias.set(i, acc[i]);
  }
}

template struct GlobalGrads<float>;
template struct GlobalGrads<double>;

}  // namespace posenc::attention_detail
