// FlashAttention-3's test-suite features (attention_fa.hpp), after attention_ref in
// FlashAttention's hopper/test_util.py:
// - descales: q = (q.float() * q_descale).to(q.dtype) (q_descale repeated over the group,
//   qv likewise), k and v by theirs; under the upcast reference q.dtype is float32 already.
//   vLLM's per-tensor k_scale and v_scale are k_descale and v_descale filled with them.
// - qv: scores += (qv * scale) . v^T, scale 1/sqrt(d + dv). The exact path attends with
//   Q||qv over K||V, the same sum of products in one dot product.
// - p_dtype (intermediate_dtype): P.to(dtype).to(P.dtype) before P.V.
// - fa_baseline: upcast=False, reorder_ops=True, each op rounded to the input dtype.
#pragma GCC optimize("fp-contract=off")

#include "ops/attention_fa.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/attention_geometry.hpp"
#include "ops/attention_mask.hpp"
#include "posenc/error.hpp"
#include "posenc/fp8.hpp"
#include "posenc/ops/attention_fields.hpp"

namespace posenc::attention_detail {

namespace {

// One rounding to `t` the way torch converts: float64 values go through float32 first
// (c10's Half, BFloat16 and the float8 types are built from float), so a GPU op's float32
// result rounded to t is round(t, that float).
enum class Narrow { f64, f32, f16, bf16, e4m3fn, e5m2 };

Narrow narrow_of(DType t) {
  switch (t) {
    case DType::f16:
      return Narrow::f16;
    case DType::bf16:
      return Narrow::bf16;
    case DType::f32:
      return Narrow::f32;
    default:
      return Narrow::f64;
  }
}

Narrow parse_p_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return Narrow::f32;
  if (s == "f16" || s == "float16") return Narrow::f16;
  if (s == "bf16" || s == "bfloat16") return Narrow::bf16;
  if (s == "e4m3fn" || s == "float8_e4m3fn") return Narrow::e4m3fn;
  if (s == "e5m2" || s == "float8_e5m2") return Narrow::e5m2;
  throw UsageError(
      fmt::format("p_dtype {}: expected f32, f16, bf16, e4m3fn or e5m2", s));
}

double narrow(double x, Narrow n) {
  switch (n) {
    case Narrow::f64:
      return x;
    case Narrow::f32:
      return static_cast<float>(x);
    case Narrow::f16:
      return half_to_float(float_to_half(static_cast<float>(x)));
    case Narrow::bf16:
      return bf16_to_float(float_to_bf16(static_cast<float>(x)));
    case Narrow::e4m3fn:
      return fp8_to_float(fp8_from_float(static_cast<float>(x), Fp8Format::e4m3fn),
                          Fp8Format::e4m3fn);
    case Narrow::e5m2:
      return fp8_to_float(fp8_from_float(static_cast<float>(x), Fp8Format::e5m2),
                          Fp8Format::e5m2);
  }
  return x;
}

// The logical (b, h, s, c) walk of a tensor in `axes` order (absent axes of size 1).
struct Walk {
  std::size_t nb = 1, nh = 1, ns = 1, nc = 1;
  AxisStrides st;
  Walk(const Shape& shape, const std::string& axes) : st(axis_strides(shape, axes)) {
    nb = axis_size(shape, axes, 'b');
    nh = axis_size(shape, axes, 'h');
    ns = axis_size(shape, axes, 's');
    nc = axis_size(shape, axes, 'd');
  }
  std::size_t at(std::size_t b, std::size_t h, std::size_t s, std::size_t c) const {
    return static_cast<std::size_t>(static_cast<std::ptrdiff_t>(b) * st.b +
                                    static_cast<std::ptrdiff_t>(h) * st.h +
                                    static_cast<std::ptrdiff_t>(s) * st.s +
                                    static_cast<std::ptrdiff_t>(c) * st.d);
  }
};

// x * descale[b, h / group] computed in float32, as a tensor of `to` (float32 under the
// upcast reference, the input dtype under the baseline).
Tensor descaled(const Tensor& x, const Tensor& ds, const std::string& axes, std::size_t group,
                DType to) {
  Tensor out(to, x.shape());
  const Walk w(x.shape(), axes);
  const std::size_t hk = ds.shape()[1];
  for (std::size_t b = 0; b < w.nb; ++b) {
    for (std::size_t h = 0; h < w.nh; ++h) {
      const float f = static_cast<float>(ds.get(b * hk + h / group));
      for (std::size_t s = 0; s < w.ns; ++s) {
        for (std::size_t c = 0; c < w.nc; ++c) {
          const std::size_t i = w.at(b, h, s, c);
          out.set(i, static_cast<float>(x.get(i)) * f);
        }
      }
    }
  }
  return out;
}

}  // namespace

// a||b along the d axis (f64 when their dtypes differ: both widen exactly).
Tensor concat_d(const Tensor& a0, const Tensor& b0, const std::string& axes) {
  const bool same = a0.dtype() == b0.dtype();
  const Tensor a = same ? Tensor() : a0.astype(DType::f64);
  const Tensor b = same ? Tensor() : b0.astype(DType::f64);
  const Tensor& x = same ? a0 : a;
  const Tensor& y = same ? b0 : b;
  const std::size_t ax = axes.find('d');
  Shape shape = x.shape();
  shape[ax] = x.shape()[ax] + y.shape()[ax];
  Tensor out(x.dtype(), shape);
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < ax; ++i) outer *= shape[i];
  for (std::size_t i = ax + 1; i < shape.size(); ++i) inner *= shape[i];
  const std::size_t item = dtype_size(x.dtype());
  const std::size_t xa = x.shape()[ax] * inner * item, ya = y.shape()[ax] * inner * item;
  std::byte* o = out.bytes();
  for (std::size_t r = 0; r < outer; ++r) {
    if (xa) std::memcpy(o, x.bytes() + r * xa, xa);
    if (ya) std::memcpy(o + xa, y.bytes() + r * ya, ya);
    o += xa + ya;
  }
  return out;
}

namespace {

std::size_t bytes_of(const Shape& s, DType t) {
  return mul_sat(checked_numel(s, 1, "attention"), dtype_size(t));
}

void need_budget(std::size_t max_memory, std::size_t need, const char* what) {
  if (max_memory && need > max_memory) {
    throw InputError(fmt::format("{} would need {} > max_memory {}", what, bytes_str(need),
                                 bytes_str(max_memory)));
  }
}

// k_scale and v_scale (0: none): positive and finite as float32, the type of the
// descales they fill; not with the descales of their operand (check_kv_scales, the rule
// the front ends check, here in the library's names).
void check_scales(const Tensor* v, const AttentionOptions& opt) {
  const std::pair<double, const char*> scales[] = {{opt.k_scale, "k_scale"},
                                                   {opt.v_scale, "v_scale"}};
  for (const auto& [s, name] : scales) {
    if (s == 0) continue;
    if (!(s > 0) || !std::isfinite(s)) {
      throw UsageError(fmt::format("{} {}: must be a positive number", name, s));
    }
    const float f = static_cast<float>(s);
    if (f == 0 || std::isinf(f)) {
      throw UsageError(fmt::format("{} {}: must be a float32 from {} to {} (the scale is float32, "
                                   "as the descales are)",
                                   name, s, std::numeric_limits<float>::denorm_min(),
                                   std::numeric_limits<float>::max()));
    }
  }
  if (opt.v_scale != 0 && !v) throw UsageError("v_scale: needs V");
  const auto gave = [&opt](const std::string& n) {
    return (n == "k_scale" && opt.k_scale != 0) || (n == "v_scale" && opt.v_scale != 0) ||
           (n == "k_descale" && opt.k_descale) || (n == "v_descale" && opt.v_descale);
  };
  check_kv_scales(Caller{gave, [](const std::string& n) { return n; }, nullptr});
}

// Shapes and values of qv and the descales; the options they cannot go with.
void check_fa(const Tensor& q, const Tensor& k, const Tensor* v, const Geometry& g,
              const AttentionOptions& opt) {
  if (opt.arith != Arith::exact) {
    throw UsageError(
        "qv, the descales, k_scale/v_scale, p_dtype and the FlashAttention baseline: not under "
        "--arith hf");
  }
  check_scales(v, opt);
  if (opt.qv) {
    if (!v) throw UsageError("qv: needs V (its term is qv . v)");
    if (opt.relative_k || opt.relative_proj || opt.per_dim_scale || opt.rel_pos_h ||
        opt.global_k) {
      throw UsageError(
          "qv: not with relative_k, relative_proj, per_dim_scale, decomposed relative "
          "positions or global_k (terms that need the head dimension d)");
    }
    const Shape want = g.output_shape(q.shape());
    if (opt.qv->shape() != want) {
      throw InputError(fmt::format("qv: shape {} must be Q's with dv, {}",
                                   shape_str(opt.qv->shape()), shape_str(want)));
    }
    if (!is_float(opt.qv->dtype())) {
      throw InputError(fmt::format("qv: dtype {} is not a float type",
                                   dtype_name(opt.qv->dtype())));
    }
    if (!opt.allow_nonfinite && opt.qv->has_nonfinite()) throw nonfinite_input("qv");
  }
  const std::pair<const Tensor*, const char*> ds[] = {
      {opt.q_descale, "q_descale"}, {opt.k_descale, "k_descale"}, {opt.v_descale, "v_descale"}};
  for (const auto& [t, what] : ds) {
    if (!t) continue;
    if (t == opt.v_descale && !v) throw UsageError("v_descale: needs V");
    const Shape want{g.b, g.hk};
    if (t->shape() != want) {
      throw InputError(fmt::format("{}: shape {} must be [b, hk] = {}", what,
                                   shape_str(t->shape()), shape_str(want)));
    }
    if (!is_float(t->dtype())) {
      throw InputError(fmt::format("{}: dtype {} is not a float type", what,
                                   dtype_name(t->dtype())));
    }
    for (std::size_t i = 0; i < t->numel(); ++i) {
      const double x = t->get(i);
      if (!(x > 0) || !std::isfinite(x)) {
        throw InputError(fmt::format("{}: entry {} is {}; descales must be finite and positive",
                                     what, i, x));
      }
    }
  }
  if (!opt.p_dtype.empty()) {
    parse_p_dtype(opt.p_dtype);
    if (!g.emit_output) throw UsageError("p_dtype: rounds P before P.V; emit output");
  }
  (void)k;
}

// ---------------------------------------------------------------------------------
// attention_ref's PyTorch baseline (upcast=False, reorder_ops=True).

void check_baseline(const Tensor& q, const Tensor& k, const Tensor* v,
                    const AttentionOptions& opt) {
  auto no = [](bool given, const char* what) {
    if (given) {
      throw UsageError(fmt::format(
          "--arith fa-baseline: not with {} (FlashAttention's attention_ref has no such term)",
          what));
    }
  };
  no(opt.mask != nullptr, "--mask");
  no(opt.alibi.has_value(), "--alibi");
  no(opt.alibi_slopes != nullptr, "--alibi-slopes");
  no(opt.t5_bias || opt.clipped_bias || opt.global_k, "a relative bias");
  no(opt.relative_k || opt.relative_v || opt.relative_proj || opt.per_dim_scale ||
         opt.rel_pos_h || opt.score_bias,
     "relative position terms");
  no(opt.sinks != nullptr, "--sinks");
  no(opt.temperature_scale != 0 || opt.llama4_scaling_beta != 0, "query scaling");
  no(opt.sliding_window > 0, "--sliding-window (give --window)");
  no(opt.masked_rows != MaskedRows::zero, "--masked-rows nan");
  no(opt.precision.has_value(), "--precision (it computes in Q's dtype)");
  for (const Tensor* t : {&k, v, opt.qv}) {
    if (t && t->dtype() != q.dtype()) {
      throw InputError(fmt::format(
          "--arith fa-baseline: K, V and qv must have Q's dtype {} (got {})",
          dtype_name(q.dtype()), dtype_name(t->dtype())));
    }
  }
}

// Q, K, V and qv with the descales applied (attention_ref): each product in float32,
// stored as float32 (the upcast reference, `keep_dtype` false) or rounded back to the
// input's dtype (the baseline). Inputs without a descale are used as they are.
struct Descaled {
  Descaled() = default;
  Descaled(const Descaled&) = delete;  // the pointers may point at its own copies
  Descaled& operator=(const Descaled&) = delete;
  Tensor qd, kd, vd, qvd;  // the copies made
  const Tensor *q, *k, *v, *qv;
  std::size_t bytes = 0;  // of the copies
};

// A per-tensor scale as the descales [b, hk] it stands for, float32 as FlashAttention's.
Tensor filled(const Geometry& g, double scale) {
  Tensor t(DType::f32, Shape{g.b, g.hk});
  std::fill_n(t.data<float>(), t.numel(), static_cast<float>(scale));
  return t;
}

void descale_all(Descaled& d, const Tensor& q0, const Tensor& k0, const Tensor* v0,
                 const Geometry& g, const AttentionOptions& opt, bool keep_dtype) {
  d.q = &q0;
  d.k = &k0;
  d.v = v0;
  d.qv = opt.qv;
  auto apply = [&](const Tensor& x, const Tensor& ds, std::size_t group, Tensor& copy,
                   const Tensor*& slot) {
    copy = descaled(x, ds, g.axes, group, keep_dtype ? x.dtype() : DType::f32);
    slot = &copy;
    d.bytes = add_sat(d.bytes, copy.nbytes());
  };
  if (opt.q_descale) {
    apply(q0, *opt.q_descale, g.hq / g.hk, d.qd, d.q);
    if (opt.qv) apply(*opt.qv, *opt.q_descale, g.hq / g.hk, d.qvd, d.qv);
  }
  if (opt.k_descale) apply(k0, *opt.k_descale, 1, d.kd, d.k);
  if (opt.k_scale > 0) apply(k0, filled(g, opt.k_scale), 1, d.kd, d.k);
  if (opt.v_descale && v0) apply(*v0, *opt.v_descale, 1, d.vd, d.v);
  if (opt.v_scale > 0 && v0) apply(*v0, filled(g, opt.v_scale), 1, d.vd, d.v);
}

AttentionResult baseline(const Tensor& q0, const Tensor& k0, const Tensor* v0, const Geometry& g,
                         const AttentionOptions& opt) {
  check_baseline(q0, k0, v0, opt);
  const Narrow T = narrow_of(q0.dtype());
  const std::size_t group = g.hq / g.hk;
  // The descales, rounded back to the input dtype.
  Descaled d;
  descale_all(d, q0, k0, v0, g, opt, true);
  const Tensor *q = d.q, *k = d.k, *v = d.v, *qv = d.qv;
  const Narrow P = opt.p_dtype.empty() ? T : parse_p_dtype(opt.p_dtype);
  const double scale =
      opt.scale > 0 ? opt.scale
                    : 1.0 / std::sqrt(static_cast<double>(g.d + (qv ? g.dv : 0)));
  const float fscale = static_cast<float>(scale);
  const float fcap = static_cast<float>(opt.softcap);
  const float finv = opt.softcap > 0 ? 1.0f / fcap : 0.0f;

  AttentionResult res;
  if (g.emit_logits) res.logits = Tensor(g.out, g.logits_shape());
  if (g.emit_probs) res.probs = Tensor(g.out, g.logits_shape());
  if (g.emit_output) res.output = Tensor(g.out, g.output_shape(q0.shape()));
  if (g.emit_lse) res.lse = Tensor(g.lse, g.lse_shape());
  const std::size_t per_thread = mul_sat(g.sk, g.d + g.dv + 3) * sizeof(double);
  const std::size_t nthreads = std::max<std::size_t>(
      1, std::min<std::size_t>(static_cast<std::size_t>(omp_get_max_threads()), g.b * g.hq));
  std::size_t need = mul_sat(per_thread, nthreads);
  for (const Tensor* t : {&res.logits, &res.probs, &res.output, &res.lse}) {
    need = add_sat(need, t->nbytes());
  }
  need_budget(opt.max_memory, need, "the FlashAttention baseline");

  const Walk wq(q->shape(), g.axes), wk(k->shape(), g.axes);
  const Walk wv(v ? v->shape() : Shape(q->shape().size(), 1), g.axes);
  const Walk wo(g.output_shape(q0.shape()), g.axes);  // the output's and qv's layout
  const KeyRules rules = key_rules(opt, g.sq, g.sk);
  const std::size_t S = g.sk;
  // Element (b, h, i, j) of the scores' [b?, h?, sq, sk] layout.
  auto score_at = [&](std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    return ((b * g.hq + h) * g.sq + i) * S + j;
  };
  auto lse_at = [&](std::size_t b, std::size_t h, std::size_t i) {
    return (b * g.hq + h) * g.sq + i;
  };
  const double ninf = -std::numeric_limits<double>::infinity();
  const std::ptrdiff_t items = static_cast<std::ptrdiff_t>(g.b * g.hq);
#pragma omp parallel for schedule(dynamic, 1) num_threads(static_cast<int>(nthreads))
  for (std::ptrdiff_t it = 0; it < items; ++it) {
    const std::size_t b = static_cast<std::size_t>(it) / g.hq;
    const std::size_t h = static_cast<std::size_t>(it) % g.hq, kh = h / group;
    // k * scale rounded to T, and V, for this head's keys.
    std::vector<double> ks(S * g.d), vv(v ? S * g.dv : 0), s(S), p(S);
    for (std::size_t j = 0; j < S; ++j) {
      for (std::size_t c = 0; c < g.d; ++c) {
        ks[j * g.d + c] =
            narrow(static_cast<float>(k->get(wk.at(b, kh, j, c))) * fscale, T);
      }
      for (std::size_t c = 0; v && c < g.dv; ++c) vv[j * g.dv + c] = v->get(wv.at(b, kh, j, c));
    }
    std::vector<double> qrow(g.d), qvrow(qv ? g.dv : 0);
    for (std::size_t i = 0; i < g.sq; ++i) {
      for (std::size_t c = 0; c < g.d; ++c) qrow[c] = q->get(wq.at(b, h, i, c));
      for (std::size_t c = 0; qv && c < g.dv; ++c) {
        qvrow[c] = narrow(static_cast<float>(qv->get(wo.at(b, h, i, c))) * fscale, T);
      }
      const KeySpan span = rules.span(b, static_cast<std::int64_t>(i));
      double m = ninf;
      for (std::size_t j = 0; j < S; ++j) {
        // einsum: an exact-order-free sum, rounded to float32 (the GEMM's accumulator)
        // and then to T.
        double acc = 0;
        for (std::size_t c = 0; c < g.d; ++c) acc += qrow[c] * ks[j * g.d + c];
        double x = narrow(static_cast<float>(acc), T);
        if (qv) {
          double t = 0;
          for (std::size_t c = 0; c < g.dv; ++c) t += qvrow[c] * vv[j * g.dv + c];
          t = narrow(static_cast<float>(t), T);
          x = narrow(static_cast<float>(x) + static_cast<float>(t), T);
        }
        if (opt.softcap > 0) {
          // scores / softcap: CUDA divides by a scalar as a product with its float
          // reciprocal.
          x = narrow(static_cast<float>(x) * finv, T);
          x = narrow(static_cast<float>(std::tanh(static_cast<double>(static_cast<float>(x)))),
                     T);
          x = narrow(static_cast<float>(x) * fcap, T);
        }
        if (!span.sees(static_cast<std::int64_t>(j))) x = ninf;
        s[j] = x;
        m = std::max(m, x);
      }
      double sum = 0;
      if (m != ninf) {
        for (std::size_t j = 0; j < S; ++j) sum += std::exp(s[j] - m);
      }
      for (std::size_t j = 0; j < S; ++j) {
        p[j] = m == ninf ? 0.0 : narrow(static_cast<float>(std::exp(s[j] - m) / sum), T);
      }
      if (g.emit_logits) {
        for (std::size_t j = 0; j < S; ++j) res.logits.set(score_at(b, h, i, j), s[j]);
      }
      if (g.emit_probs) {
        for (std::size_t j = 0; j < S; ++j) res.probs.set(score_at(b, h, i, j), p[j]);
      }
      if (g.emit_lse) {
        res.lse.set(lse_at(b, h, i), m == ninf ? ninf : m + std::log(sum));
      }
      if (g.emit_output) {
        if (P != T) {
          for (std::size_t j = 0; j < S; ++j) p[j] = narrow(narrow(p[j], P), T);
        }
        for (std::size_t c = 0; c < g.dv; ++c) {
          double acc = 0;
          for (std::size_t j = 0; j < S; ++j) acc += p[j] * vv[j * g.dv + c];
          res.output.set(wo.at(b, h, i, c), narrow(static_cast<float>(acc), T));
        }
      }
    }
  }
  res.attrs.push_back({"scale", scale});
  res.attrs.push_back({"axes", g.axes});
  res.attrs.push_back({"softcap", opt.softcap});
  res.attrs.push_back({"precision", std::string(dtype_name(q0.dtype()))});
  res.attrs.push_back({"arith", std::string("fa-baseline")});
  return res;
}

// ---------------------------------------------------------------------------------
// The exact path: the inputs prepared, the blocked kernel, P.V from the rounded P.

AttentionResult exact(const Tensor& q0, const Tensor& k0, const Tensor* v0, const Geometry& g,
                      const AttentionOptions& opt) {
  const std::size_t group = g.hq / g.hk;
  AttentionOptions inner = opt;
  inner.qv = inner.q_descale = inner.k_descale = inner.v_descale = nullptr;
  inner.k_scale = inner.v_scale = 0;
  inner.p_dtype.clear();
  inner.dtype = g.out;
  // attention_ref's upcast reference: the products stay float32.
  Descaled d;
  descale_all(d, q0, k0, v0, g, opt, false);
  const Tensor *q = d.q, *k = d.k, *v = d.v, *qv = d.qv;
  std::size_t extra = d.bytes;  // the prepared copies, counted against the budget
  Tensor qc, kc;
  if (qv) {
    const auto cat_bytes = [&](const Tensor& a, const Tensor& b) {
      Shape s = a.shape();
      s[g.axes.find('d')] += b.shape()[g.axes.find('d')];
      return bytes_of(s, a.dtype() == b.dtype() ? a.dtype() : DType::f64);
    };
    extra = add_sat(extra, add_sat(cat_bytes(*q, *qv), cat_bytes(*k, *v)));
    need_budget(opt.max_memory, extra, "qv's concatenated Q||qv and K||V");
    qc = concat_d(*q, *qv, g.axes);
    kc = concat_d(*k, *v, g.axes);
    q = &qc;
    k = &kc;
  }
  if (opt.p_dtype.empty()) {
    need_budget(opt.max_memory, extra, "the descaled copies");
    if (opt.max_memory) inner.max_memory = opt.max_memory - extra;
    AttentionResult res = attention(*q, *k, v, inner);
    return res;
  }
  // P rounded: the probabilities at the arithmetic's precision, then P.V here.
  const Narrow P = parse_p_dtype(opt.p_dtype);
  const DType arith = attention_arith(opt);
  inner.dtype = arith;
  inner.output_sink = nullptr;
  inner.emit = {AttentionEmit::probs};
  if (g.emit_logits) inner.emit.push_back(AttentionEmit::logits);
  if (g.emit_lse) inner.emit.push_back(AttentionEmit::lse);
  const Shape out_shape = g.output_shape(q0.shape());
  extra = add_sat(extra, bytes_of(out_shape, g.out));
  need_budget(opt.max_memory, extra, "p_dtype's output and the prepared copies");
  if (opt.max_memory) inner.max_memory = opt.max_memory - extra;
  AttentionResult res = attention(*q, *k, v, inner);
  Tensor out(g.out, out_shape);
  const Walk wv(v->shape(), g.axes), wo(out_shape, g.axes);
  const std::size_t S = g.sk;
  const Tensor& probs = res.probs;
  const std::ptrdiff_t items = static_cast<std::ptrdiff_t>(g.b * g.hq);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::ptrdiff_t it = 0; it < items; ++it) {
    const std::size_t b = static_cast<std::size_t>(it) / g.hq;
    const std::size_t h = static_cast<std::size_t>(it) % g.hq, kh = h / group;
    std::vector<double> p(S), acc(g.dv), vv(S * g.dv);  // this head's V, gathered once
    for (std::size_t j = 0; j < S; ++j) {
      for (std::size_t c = 0; c < g.dv; ++c) vv[j * g.dv + c] = v->get(wv.at(b, kh, j, c));
    }
    for (std::size_t i = 0; i < g.sq; ++i) {
      const std::size_t row = ((b * g.hq + h) * g.sq + i) * S;
      for (std::size_t j = 0; j < S; ++j) p[j] = narrow(probs.get(row + j), P);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::size_t j = 0; j < S; ++j) {
        if (p[j] == 0) continue;
        for (std::size_t c = 0; c < g.dv; ++c) acc[c] += p[j] * vv[j * g.dv + c];
      }
      for (std::size_t c = 0; c < g.dv; ++c) out.set(wo.at(b, h, i, c), acc[c]);
    }
  }
  res.output = std::move(out);
  res.probs = g.emit_probs ? res.probs.astype(g.out) : Tensor();
  if (g.emit_logits) res.logits = res.logits.astype(g.out);
  if (g.emit_lse) res.lse = res.lse.astype(g.lse);
  res.output_streamed = false;
  return res;
}

}  // namespace

bool fa_extras(const AttentionOptions& opt) {
  return opt.qv || opt.q_descale || opt.k_descale || opt.v_descale || opt.k_scale != 0 ||
         opt.v_scale != 0 || !opt.p_dtype.empty() || opt.fa_baseline;
}

AttentionResult attention_fa(const Tensor& q, const Tensor& k, const Tensor* v,
                             const AttentionOptions& opt) {
  require_float(q.dtype(), "q");
  require_float(k.dtype(), "k");
  if (v) require_float(v->dtype(), "v");
  AttentionOptions plain = opt;
  plain.qv = plain.q_descale = plain.k_descale = plain.v_descale = nullptr;
  plain.k_scale = plain.v_scale = 0;
  plain.p_dtype.clear();
  plain.fa_baseline = false;
  const Geometry g = check(q.shape(), k.shape(), v ? &v->shape() : nullptr, q.dtype(), plain);
  check_fa(q, k, v, g, opt);
  AttentionResult res;
  if (opt.fa_baseline) {
    if (!opt.allow_nonfinite) require_finite(q, &k, v, plain);
    res = baseline(q, k, v, g, opt);
  } else {
    res = exact(q, k, v, g, opt);
  }
  if (opt.qv) res.attrs.push_back({"qv", 1LL});
  if (opt.q_descale) res.attrs.push_back({"q_descale", 1LL});
  if (opt.k_descale) res.attrs.push_back({"k_descale", 1LL});
  if (opt.v_descale) res.attrs.push_back({"v_descale", 1LL});
  if (opt.k_scale != 0) res.attrs.push_back({"k_scale", opt.k_scale});
  if (opt.v_scale != 0) res.attrs.push_back({"v_scale", opt.v_scale});
  if (!opt.p_dtype.empty()) res.attrs.push_back({"p_dtype", opt.p_dtype});
  return res;
}

}  // namespace posenc::attention_detail
