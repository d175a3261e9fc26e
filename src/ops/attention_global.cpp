// LongT5's transient-global side keys (attention_global.hpp): options checked, block
// ids, segments and the bias by block distance.
#include "ops/attention_global.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ops/attention_kernel.hpp"
#include "posenc/encodings/bias.hpp"
#include "posenc/encodings/longt5_global.hpp"
#include "posenc/error.hpp"

namespace posenc::attention_detail {

namespace {

// The mask's axes, aligned right with the scores' [b?, h?, sq, sk]: the extent of the
// one that lands on the scores' axis `from_right` (0 = keys), 1 when it has none.
std::size_t mask_extent(const Shape& m, std::size_t from_right) {
  return from_right < m.size() ? m[m.size() - 1 - from_right] : 1;
}

}  // namespace

void check_global(Geometry& g, const Shape* vs, const AttentionOptions& opt) {
  if (!opt.global_k) {
    if (opt.global_v || opt.global_bias || opt.global_block_size != 0) {
      throw UsageError("global_v/global_bias/global_block_size: need global_k (--global-kv)");
    }
    return;
  }
  if (opt.global_block_size < 1 || opt.global_block_size > (std::int64_t{1} << 31)) {
    throw UsageError(fmt::format("global_block_size {}: must be from 1 to 2^31",
                                 opt.global_block_size));
  }
  if (vs && !opt.global_v) throw UsageError("global_k: with values (-v) give global_v too");
  if (!vs && opt.global_v) throw UsageError("global_v: needs values (-v)");
  if (!opt.cu_seqlens.empty()) {
    throw UsageError("global_k: not with cu_seqlens (global blocks span one sequence)");
  }
  if (opt.softcap > 0 || opt.temperature_scale != 0 || opt.llama4_scaling_beta != 0) {
    throw UsageError(
        "global_k: not with softcap, attn-temperature or llama4-scaling (LongT5 has none)");
  }
  if (g.sq != g.sk) {
    throw InputError(fmt::format(
        "global_k: transient-global attention is self-attention: as many queries as keys "
        "(got {} and {})",
        g.sq, g.sk));
  }
  const std::size_t n = g.sk / static_cast<std::size_t>(opt.global_block_size);
  auto expect = [&](const Tensor& t, const char* what, std::size_t width) {
    require_float(t.dtype(), what);
    const Shape& s = t.shape();
    const std::string& a = g.axes;
    if (s.size() != a.size() || axis_size(s, a, 'b') != g.b || axis_size(s, a, 'h') != g.hk ||
        axis_size(s, a, 's') != n || axis_size(s, a, 'd') != width) {
      Shape want;
      for (char c : a) {
        want.push_back(c == 'b' ? g.b : c == 'h' ? g.hk : c == 's' ? n : width);
      }
      throw InputError(fmt::format(
          "{}: expected shape {} (axes {}: {} global blocks of {} in {} keys), got {}", what,
          shape_str(want), a, n, opt.global_block_size, g.sk, shape_str(s)));
    }
  };
  expect(*opt.global_k, "global_k", g.d);
  if (opt.global_v) expect(*opt.global_v, "global_v", g.dv);
  if (opt.global_bias) {
    const Tensor& t = *opt.global_bias;
    require_float(t.dtype(), "global_bias");
    if (opt.t5_buckets < 2 || opt.t5_max_distance < 2) {
      throw UsageError(fmt::format("t5_buckets {} / t5_max_distance {}: must be >= 2",
                                   opt.t5_buckets, opt.t5_max_distance));
    }
    if (t.ndim() != 2 || t.shape()[0] != static_cast<std::size_t>(opt.t5_buckets) ||
        t.shape()[1] != g.hq) {
      throw InputError(
          fmt::format("global_bias: expected shape ({}, {}) ([buckets, heads]), got {}",
                      opt.t5_buckets, g.hq, shape_str(t.shape())));
    }
  }
  if (opt.mask) {
    // Padding is a property of tokens: a mask over keys alone says which they are.
    const Shape& m = opt.mask->shape();
    if (is_float(opt.mask->dtype()) || mask_extent(m, 1) != 1 ||
        (g.has_h && mask_extent(m, 2) != 1)) {
      throw InputError(fmt::format(
          "mask: with global_k the mask marks padding tokens: a boolean or integer mask over "
          "keys alone ([b, 1, 1, sk]), got {} of shape {}",
          dtype_name(opt.mask->dtype()), shape_str(m)));
    }
  }
  g.global = n;
}

template <class T>
GlobalKeys<T> GlobalKeys<T>::from(const Geometry& g, const AttentionOptions& opt) {
  GlobalKeys<T> G;
  if (!g.global) return G;
  const std::size_t n = G.n = g.global, s = g.sk;
  Tensor holder;
  auto copy = [&](const Tensor& x, std::size_t width, std::vector<T>& to) {
    const View<T> view = make_view<T>(x, g.axes, holder);
    to.resize(g.b * g.hk * n * width);
    T* out = to.data();
    for (std::size_t b = 0; b < g.b; ++b)
      for (std::size_t h = 0; h < g.hk; ++h)
        for (std::size_t j = 0; j < n; ++j, out += width)
          std::copy_n(view.p + b * view.b + h * view.h + j * view.s, width, out);
  };
  copy(*opt.global_k, g.d, G.k);
  if (opt.global_v) copy(*opt.global_v, g.dv, G.v);
  // Padding: key lengths and a mask over keys (checked by check_global).
  G.valid.assign(g.b * s, 1);
  for (std::size_t b = 0; b < g.b; ++b) {
    const auto len = opt.key_lengths ? static_cast<std::size_t>(opt.key_lengths->get(b)) : s;
    for (std::size_t j = len; j < s; ++j) G.valid[b * s + j] = 0;
  }
  if (opt.mask) {
    const Shape& m = opt.mask->shape();
    const std::size_t mb = g.has_b ? mask_extent(m, g.has_h ? 3 : 2) : 1;
    for (std::size_t b = 0; b < g.b; ++b)
      for (std::size_t j = 0; j < s; ++j)
        if (opt.mask->get((mb > 1 ? b * m.back() : 0) + (m.empty() || m.back() == 1 ? 0 : j)) ==
            0.0) {
          G.valid[b * s + j] = 0;
        }
  }
  G.ids.resize(g.b * s);
  G.seg.resize(g.b * n);
  for (std::size_t b = 0; b < g.b; ++b) {
    longt5_global_block_ids(G.valid.data() + b * s, s, opt.global_block_size,
                            G.ids.data() + b * s, G.seg.data() + b * n);
  }
  if (opt.global_bias) {
    // g - block(i) runs from -(n - 1) (block n - 1) to n (padding, block -1).
    const std::vector<T> emb = to_vector<T>(*opt.global_bias);  // [buckets, hq]
    G.bias.resize(g.hq * 2 * n);
    for (std::size_t di = 0; di < 2 * n; ++di) {
      const std::int64_t rel = static_cast<std::int64_t>(di) - static_cast<std::int64_t>(n - 1);
      const std::int64_t bucket =
          t5_bucket(rel, opt.t5_bidirectional, opt.t5_buckets, opt.t5_max_distance);
      for (std::size_t h = 0; h < g.hq; ++h) {
        G.bias[h * 2 * n + di] = emb[static_cast<std::size_t>(bucket) * g.hq + h];
      }
    }
  }
  return G;
}

template struct GlobalKeys<float>;
template struct GlobalKeys<double>;

}  // namespace posenc::attention_detail
