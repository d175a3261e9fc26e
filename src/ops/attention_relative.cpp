// Transformer-XL / XLNet and DeBERTa relative attention as additive score terms
// (ops/attention_relative.hpp). The terms are dot products accumulated in float64 in a
// fixed order, one score at a time, spread over OpenMP threads by rows: no BLAS, and
// nothing depends on the thread count.

#include "posenc/ops/attention_relative.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "posenc/encodings/relative_attention.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

// Shapes of Q and K by axis letter, and the arithmetic type of attention.
struct Geo {
  std::size_t b = 1, hq = 1, hk = 1, sq = 0, sk = 0, d = 0;
  bool has_b = false, has_h = false;
  std::string axes;
  DType compute = DType::f32;
  Shape scores;  // [b, hq, sq, sk] with b, h where Q has them
};

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
  if (opt.precision) {
    g.compute = *opt.precision == Precision::f64 ? DType::f64 : DType::f32;
  } else {
    g.compute = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  }
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

// Relative rows [rows, hq, d] (or [rows, d] without h; with `batched`, also
// [rows, b, hq, d]) as float64 [b'][hq][rows][d], b' = b when batched else 1.
// `rows_ok` checks the row count; `rows_text` describes it for the message.
struct RelRows {
  std::vector<double> v;
  std::size_t rows = 0;
  bool batched = false;
  const double* at(std::size_t b, std::size_t h, std::size_t hq, std::size_t row,
                   std::size_t d) const {
    return v.data() + (((batched ? b : 0) * hq + h) * rows + row) * d;
  }
};

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

// Where HF's shift takes score (i, j) from: row and column of the unshifted
// [sq, rlen] matrix, or none (Transformer-XL's zero pad).
struct ShiftSource {
  std::size_t row = 0, col = 0;
  bool zero = false;
};

ShiftSource xl_shift(std::size_t sq, std::size_t rlen, std::size_t sk, std::size_t i,
                     std::size_t j) {
  const std::size_t c = sq - i + j;
  if (rlen == sk) {
    // _rel_shift: row i of [sq, rlen + 1] with a zero first column, read in the layout
    // of [rlen + 1, sq] without its first row: c <= rlen stays in row i.
    if (c <= rlen) return {i, c - 1, false};
    const std::size_t c2 = c - rlen - 1;
    if (c2 == 0) return {0, 0, true};
    return {i + 1, c2 - 1, false};
  }
  // rel_shift_bnij: [sq, rlen] read as [rlen, sq] without its first row, as
  // [sq, rlen - 1], first sk columns.
  if (c < rlen) return {i, c, false};
  return {i + 1, c - rlen, false};
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

template <class Terms>
AttentionResult with_terms(const Tensor& q, const Tensor& k, const Tensor* v,
                           const AttentionOptions& user, Terms terms, const char* scheme) {
  AttentionOptions opt = user;
  if (opt.score_bias) {
    throw UsageError(fmt::format("score_bias: {} attention computes its own terms", scheme));
  }
  const Geo g = geometry(q, k, opt);
  auto [need, names] =
      attention_memory(q.shape(), k.shape(), v ? &v->shape() : nullptr, q.dtype(), opt);
  need += terms_bytes(g, q, k);
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

Tensor xl_terms(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                const XlAttention& xl, const Geo& g, double& scale, Attrs& attrs) {
  if (!xl.rel_keys) throw UsageError("rel_keys: Transformer-XL / XLNet attention needs r");
  if (g.sq > g.sk) {
    throw InputError(fmt::format(
        "rel_keys: Transformer-XL / XLNet keys are the memory and the queries, so k_len {} must "
        "be at least q_len {}",
        g.sk, g.sq));
  }
  const RelRows r = rel_rows(
      *xl.rel_keys, "rel_keys", g, opt, /*allow_batched=*/true,
      [&g](std::size_t rows) { return rows >= g.sk; },
      fmt::format("rows = k_len {} (Transformer-XL) or more (XLNet: k_len + q_len = {}, or "
                  "k_len + 1 = {})",
                  g.sk, g.sk + g.sq, g.sk + 1));
  const std::vector<double> u = per_head(xl.content_bias, "content_bias", g, opt);
  const std::vector<double> vb = per_head(xl.position_bias, "position_bias", g, opt);
  const bool seg = xl.segment_ids || xl.segment_embed || xl.segment_bias;
  std::vector<std::int64_t> ids;
  RelRows se;
  std::vector<double> sb;
  if (seg) {
    if (!xl.segment_ids || !xl.segment_embed) {
      throw UsageError("segment_ids/segment_embed: the XLNet segment term needs both");
    }
    ids = segment_ids(*xl.segment_ids, g);
    se = rel_rows(
        *xl.segment_embed, "segment_embed", g, opt, false,
        [](std::size_t rows) { return rows == 2; }, "rows = 2");
    sb = per_head(xl.segment_bias, "segment_bias", g, opt);
  }
  const std::vector<double> qd = bhsd(q, g.axes), kd = bhsd(k, g.axes);
  const std::size_t d = g.d, group = g.hq / g.hk, rlen = r.rows;
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
  scale = scale_of(opt, 1.0 / std::sqrt(static_cast<double>(d)));
  const std::size_t mlen = g.sk - std::min(g.sk, g.sq);
  Tensor out(g.compute, g.scores);
  fill_scores(out, g, [&](std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    const std::size_t bh = b * g.hq + h;
    const ShiftSource src = xl_shift(g.sq, rlen, g.sk, i, j);
    double bd = 0;
    if (!src.zero)
      bd = dot(qrow(b, h, src.row), r.at(b, h, g.hq, src.col, d), d) + vr[bh * rlen + src.col];
    double e = 0;
    if (seg) {
      const bool differ = ids[b * g.sk + mlen + i] != ids[b * g.sk + j];
      e = ef[(bh * g.sq + i) * 2 + (differ ? 1 : 0)];
    }
    return scale * (uk[bh * g.sk + j] + bd + e);
  });
  attrs.push_back({"relative", std::string(rlen == g.sk ? "transfo-xl" : "xlnet")});
  attrs.push_back({"rel_rows", static_cast<long long>(rlen)});
  attrs.push_back({"segment_term", static_cast<long long>(seg)});
  return out;
}

Tensor deberta_terms(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                     const DebertaAttention& deb, const Geo& g, double& scale, Attrs& attrs) {
  check_deberta_buckets(deb.position_buckets, deb.max_relative_positions);
  if (!deb.pos_key && !deb.pos_query) {
    throw UsageError("pos_key/pos_query: DeBERTa attention needs c2p (pos_key) or p2c (pos_query)");
  }
  const std::size_t span = static_cast<std::size_t>(
      deb.position_buckets > 0 ? deb.position_buckets : deb.max_relative_positions);
  const std::string rows_text = fmt::format("rows >= 2 * span = {}", 2 * span);
  auto rows_ok = [span](std::size_t rows) { return rows >= 2 * span; };
  RelRows pk, pq;
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
  scale = scale_of(opt, deberta_default_scale(g.d, terms));
  // Bucket index by distance delta = a - c, a, c < n: clamp(rel + span, 0, 2 span - 1).
  const std::int64_t n = static_cast<std::int64_t>(std::max(g.sq, g.sk));
  std::vector<std::int32_t> index(static_cast<std::size_t>(2 * n - 1));
  for (std::int64_t delta = -(n - 1); delta <= n - 1; ++delta) {
    const std::int64_t rel =
        deberta_relative_position(delta, 0, deb.position_buckets, deb.max_relative_positions);
    index[static_cast<std::size_t>(delta + n - 1)] =
        static_cast<std::int32_t>(std::clamp<std::int64_t>(
            rel + static_cast<std::int64_t>(span), 0, static_cast<std::int64_t>(2 * span) - 1));
  }
  // p2c at (i, j) takes clamp(-rel(j, i) + span, ...): looked up at delta = j - i.
  std::vector<std::int32_t> index_p2c(index.size());
  for (std::int64_t delta = -(n - 1); delta <= n - 1; ++delta) {
    const std::int64_t rel =
        deberta_relative_position(delta, 0, deb.position_buckets, deb.max_relative_positions);
    index_p2c[static_cast<std::size_t>(delta + n - 1)] =
        static_cast<std::int32_t>(std::clamp<std::int64_t>(
            -rel + static_cast<std::int64_t>(span), 0, static_cast<std::int64_t>(2 * span) - 1));
  }
  const std::vector<double> qd = bhsd(q, g.axes), kd = bhsd(k, g.axes);
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
  std::string types = deb.pos_key ? "c2p" : "";
  if (deb.pos_query) types += types.empty() ? "p2c" : ",p2c";
  attrs.push_back({"relative", std::string("deberta")});
  attrs.push_back({"pos_att_type", types});
  attrs.push_back({"position_buckets", static_cast<long long>(deb.position_buckets)});
  attrs.push_back({"max_relative_positions", static_cast<long long>(deb.max_relative_positions)});
  return out;
}

}  // namespace

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
      "Transformer-XL / XLNet");
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
