// The plan of an attention run (attention_kernel.hpp's Plan) from the options: the
// masks, and the score terms the kernel adds element by element (Shaw's relative keys
// and values, SAM's decomposed relative positions, ALiBi, T5's bucketed bias and
// WavLM's gate on it, Phi-4-multimodal audio's clipped-distance bias, LongT5's side
// keys, sinks, a score bias, soft-capping).
#include <xtensor/xstrides.hpp>
#include <fmt/format.h>

#include <cmath>

#include "ops/attention_clipped.hpp"
#include "ops/attention_gate.hpp"
#include "ops/attention_kernel.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/error.hpp"

namespace posenc::attention_detail {

// Everything but the Q, K and V views; `has_v` says whether values are given.
template <class T>
void plan(Plan<T>& P, const Geometry& g, const AttentionOptions& opt, bool has_v) {
  P.g = g;
  P.bl = blocks_for(g, opt);
  P.has_v = has_v;
  double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(g.d));
  P.scale = static_cast<T>(scale);
  P.softcap = static_cast<T>(opt.softcap);
  P.off = static_cast<std::int64_t>(g.sk) - static_cast<std::int64_t>(g.sq);
  P.rules = key_rules(opt, g.sq, g.sk);
  P.masked_rows = opt.masked_rows;
  P.check_overflow = !opt.allow_nonfinite;
  if (opt.mask) {
    const Tensor& m = *opt.mask;
    // Broadcast strides over (b, h, i, j) of the scores: the mask's own strides (xtensor
    // gives axes of extent 1 stride 0) aligned right, 0 for the axes it lacks.
    const auto mshape = xt::svector<std::size_t>(m.shape().begin(), m.shape().end());
    xt::svector<std::ptrdiff_t> mst(mshape.size());
    xt::compute_strides(mshape, xt::layout_type::row_major, mst);
    std::vector<std::ptrdiff_t> st(g.logits_shape().size(), 0);
    std::copy(mst.begin(), mst.end(), st.end() - static_cast<std::ptrdiff_t>(mst.size()));
    std::size_t t = 0;
    if (g.has_b) P.m_b = st[t++];
    if (g.has_h) P.m_h = st[t++];
    P.m_i = st[t++];
    P.m_j = st[t++];
    if (is_float(m.dtype())) {
      P.has_add_mask = true;
      P.add_mask = to_vector<T>(m);
    } else {
      P.has_keep_mask = true;
      P.keep_mask.resize(m.numel());
      for (std::size_t i = 0; i < m.numel(); ++i) P.keep_mask[i] = m.get(i) != 0.0;
    }
  }
  if (opt.alibi || opt.alibi_slopes) {
    P.alibi = alibi_form(opt);
    if (opt.alibi_slopes) {
      P.slopes = to_vector<double>(*opt.alibi_slopes);
      if (opt.alibi_slopes->ndim() == 2) P.slope_b = g.hq;
    } else {
      P.slopes = alibi_slopes(static_cast<int>(g.hq), opt.alibi_max_bias);
    }
    // Falcon adds the bias before the scale: scale (q.k + b) = scale q.k + (scale m) f.
    if (opt.alibi_before_scale) {
      for (double& m : P.slopes) m *= scale;
    }
  }
  const std::size_t ndist = g.sq + g.sk - 1;
  const std::int64_t dmin = -(static_cast<std::int64_t>(g.sk) - 1);  // j - qpos at index 0
  if (opt.t5_bias) {
    std::vector<T> emb = to_vector<T>(*opt.t5_bias);  // [buckets, hq]
    P.t5.resize(g.hq * ndist);
    for (std::size_t di = 0; di < ndist; ++di) {
      std::int64_t bucket = t5_bucket(dmin + static_cast<std::int64_t>(di), opt.t5_bidirectional,
                                      opt.t5_buckets, opt.t5_max_distance);
      if (bucket < 0 || bucket >= opt.t5_buckets) {
        throw InputError(fmt::format("t5_bias: bucket {} out of range", bucket));
      }
      for (std::size_t h = 0; h < g.hq; ++h) P.t5[h * ndist + di] = emb[bucket * g.hq + h];
    }
  }
  if (opt.clipped_bias) {
    const std::vector<T> emb = to_vector<T>(*opt.clipped_bias);  // [rows, hq]
    const std::int64_t m = clipped_distance(opt);
    P.t5.resize(g.hq * ndist);
    for (std::size_t di = 0; di < ndist; ++di) {
      const auto row = static_cast<std::size_t>(
          clipped_row(dmin + static_cast<std::int64_t>(di), m, opt.clipped_symmetric));
      for (std::size_t h = 0; h < g.hq; ++h) P.t5[h * ndist + di] = emb[row * g.hq + h];
    }
  }
  for (double f : gate_factors(g, opt)) P.t5_gate.push_back(static_cast<T>(f));
  if (g.rel_rows) {
    // Outside a zero_beyond window a pair takes one more row of zeros (index -1 of the
    // window): the kernel gathers and scatters as for any row.
    const bool zero_row = g.window.zero_beyond;
    P.R = g.rel_rows + (zero_row ? 1 : 0);
    P.rel_index.resize(ndist);
    for (std::size_t di = 0; di < ndist; ++di) {
      const std::int64_t row = g.window.index(0, dmin + static_cast<std::int64_t>(di));
      P.rel_index[di] = static_cast<std::int32_t>(row < 0 ? g.rel_rows : row);
    }
    if (opt.relative_k && g.rel_k_per_head) {
      // [rows, hq, d] to one [R, d] table per head, each with its zero row.
      const std::vector<T> t = to_vector<T>(*opt.relative_k);
      P.rel_k_head = P.R * g.d;
      P.rel_k.assign(g.hq * P.rel_k_head, T(0));
      for (std::size_t r = 0; r < g.rel_rows; ++r)
        for (std::size_t h = 0; h < g.hq; ++h)
          std::copy_n(t.data() + (r * g.hq + h) * g.d, g.d,
                      P.rel_k.data() + h * P.rel_k_head + r * g.d);
    } else if (opt.relative_k) {
      P.rel_k = to_vector<T>(*opt.relative_k);
      if (zero_row) P.rel_k.resize(P.R * g.d, T(0));
    } else {
      P.rel_k.assign(P.R * g.d, T(0));  // only values are relative: q.0 adds nothing
    }
    if (opt.relative_v) {
      P.rel_v = to_vector<T>(*opt.relative_v);
      if (zero_row) P.rel_v.resize(P.R * g.dv, T(0));
    }
  }
  P.dec = Decomposed::from(g, opt);
  P.global = GlobalKeys<T>::from(g, opt);
  if (opt.sinks) P.sinks = to_vector<T>(*opt.sinks);
  if (opt.score_bias) {
    if (opt.score_bias->dtype() == dtype_of<T>()) {
      P.bias = opt.score_bias->data<T>();
    } else {
      P.bias_copy = to_vector<T>(*opt.score_bias);
      P.bias = P.bias_copy.data();
    }
  }
}

std::size_t plan_bytes(const Geometry& g, const AttentionOptions& opt) {
  const std::size_t ts = dtype_size(g.compute);
  auto numel = [](const Tensor* t) { return t ? t->numel() : std::size_t{0}; };
  std::size_t n = 0;
  if (opt.mask) n = mul_sat(numel(opt.mask), is_float(opt.mask->dtype()) ? ts : 1);
  const std::size_t ndist = add_sat(g.sq, g.sk);
  if (opt.t5_bias || opt.clipped_bias) {
    // The table's copy and its rows gathered by distance.
    n = add_sat(n, mul_sat(add_sat(numel(opt.t5_bias) + numel(opt.clipped_bias),
                                   mul_sat(g.hq, ndist)),
                           ts));
  }
  // gate_factors' float64 values, then their copy in the working type.
  if (opt.gate_input) n = add_sat(n, mul_sat(mul_sat(mul_sat(g.b, g.hq), g.sq), 8 + ts));
  if (g.rel_rows) {
    // A per-head relative_k holds hq tables (each with its zero row).
    const std::size_t kd = g.rel_k_per_head ? mul_sat(g.hq, g.d) : g.d;
    n = add_sat(n, mul_sat(mul_sat(g.rel_rows + 1, add_sat(kd, g.dv)), ts));
    n = add_sat(n, mul_sat(ndist, sizeof(std::int32_t)));
  }
  // Gemma-3n's inputs (attention_timing): the scaled copy of Q, the float64 table.
  if (opt.per_dim_scale) n = add_sat(n, mul_sat(mul_sat(mul_sat(g.b, g.hq), g.sq), g.d * ts));
  if (opt.relative_proj) n = add_sat(n, mul_sat(mul_sat(g.rel_rows, g.hq * g.d), 8));
  n = add_sat(n, mul_sat(numel(opt.sinks), ts));
  if (opt.score_bias && opt.score_bias->dtype() != g.compute) {
    n = add_sat(n, mul_sat(numel(opt.score_bias), ts));
  }
  if (g.global) {
    // LongT5's side keys and values in T, their bias by distance, block ids and masks.
    n = add_sat(n, mul_sat(mul_sat(mul_sat(g.b, g.hk), g.global), mul_sat(g.d + g.dv, ts)));
    n = add_sat(n, mul_sat(mul_sat(g.hq, 2 * g.global), ts));
    n = add_sat(n, mul_sat(mul_sat(g.b, g.sk + g.global), 6));
  }
  return n;
}

template void plan<float>(Plan<float>&, const Geometry&, const AttentionOptions&, bool);
template void plan<double>(Plan<double>&, const Geometry&, const AttentionOptions&, bool);

}  // namespace posenc::attention_detail
