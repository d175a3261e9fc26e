// HF's eager attention in the model dtype T (see attention_hf.hpp):
//   w = matmul(q, k^T) * scaling; w = w + mask; w = softmax(w, -1, dtype=float32).to(T);
//   out = matmul(w, v)
// Element-wise steps are torch's: bf16 and f16 operations compute in float32 and round
// to T, a Python scalar meets a bf16/f16 tensor as a value of T, the additive mask
// holds 0 or finfo(T).min, and the float32 softmax is torch's vectorised kernel
// (row maximum, exp(x - max) through SLEEF, a sum in torch's lane order, one
// reciprocal, a product). The two matmuls follow torch's bmm (see model_matmul): bit for
// bit except for bf16 and f16 above 400 multiply-adds, where torch's oneDNN kernel sums
// in its own order (the man page gives the measured bound).
#pragma GCC optimize("fp-contract=off")

#include "ops/attention_hf.hpp"

#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "encodings/torch_cpu.hpp"
#include "ops/attention_mask.hpp"
#include "ops/axis_strides.hpp"
#include "ops/blas_threads.hpp"
#include "posenc/error.hpp"

namespace posenc::attention_detail {

namespace {

// Values of the model dtype T, held in float64 (exact for every T).
struct ModelType {
  DType t;
  // One rounding to T.
  double round(double x) const {
    switch (t) {
      case DType::f32:
        return static_cast<float>(x);
      case DType::bf16:
        return bf16_to_float(double_to_bf16(x));
      case DType::f16:
        return half_to_float(double_to_half(x));
      default:
        return x;
    }
  }
  // An element-wise torch operation on T values whose float32 (f64: float64) result
  // is `r`.
  double op(float r) const { return round(r); }
  bool is64() const { return t == DType::f64; }
  double mul(double a, double b) const {
    return is64() ? a * b : op(static_cast<float>(a) * static_cast<float>(b));
  }
  double add(double a, double b) const {
    return is64() ? a + b : op(static_cast<float>(a) + static_cast<float>(b));
  }
  // A Python float scalar as the operand of a T tensor operation: float32 for f32, and
  // T(float(x)) for bf16 and f16 (c10's conversions go through float).
  double scalar(double x) const { return is64() ? x : round(static_cast<float>(x)); }
  // torch.finfo(T).min
  double min() const {
    switch (t) {
      case DType::f32:
        return -std::numeric_limits<float>::max();
      case DType::bf16:
        return -3.3895313892515355e38;
      case DType::f16:
        return -65504.0;
      default:
        return -std::numeric_limits<double>::max();
    }
  }
};

// torch's vec::reduce_all for + over float32 (AVX2): eight lane sums, the partial last
// vector added into the first lanes, then the lanes combined pairwise (l, l+4), (l, l+2),
// (l, l+1); fewer than eight elements are summed in order.
float torch_sum(const float* x, std::size_t n) {
  if (n < 8) {
    float acc = x[0];
    for (std::size_t i = 1; i < n; ++i) acc = acc + x[i];
    return acc;
  }
  float acc[8];
  for (std::size_t l = 0; l < 8; ++l) acc[l] = x[l];
  std::size_t d = 8;
  for (; d < n - n % 8; d += 8) {
    for (std::size_t l = 0; l < 8; ++l) acc[l] = acc[l] + x[d + l];
  }
  for (std::size_t l = 0; d + l < n; ++l) acc[l] = acc[l] + x[d + l];
  float a[4];
  for (std::size_t l = 0; l < 4; ++l) a[l] = acc[l] + acc[l + 4];
  const float b0 = a[0] + a[2], b1 = a[1] + a[3];
  return b0 + b1;
}

// torch.softmax(x, -1, dtype=float32) on one row (_vec_softmax_lastdim).
void torch_softmax(float* x, std::size_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(x[i]) || std::isnan(m)) {
      m = std::numeric_limits<float>::quiet_NaN();
    } else if (x[i] > m) {
      m = x[i];
    }
  }
  for (std::size_t i = 0; i < n; ++i) x[i] = x[i] - m;
  torch_cpu::exp(x, x, n);
  const float inv = 1.0f / torch_sum(x, n);
  for (std::size_t i = 0; i < n; ++i) x[i] = x[i] * inv;
}

// torch.matmul for one (batch, head) as torch 1.13's bmm runs it on the CPU:
// C[m, n] = sum_k A[m, k] B[k, n], with B given as rows [n, k] when `trans_b`; the result
// rounded to T. Below 400 multiply-adds torch loops itself, accumulating each element
// in order in T (each product and sum a T operation); above, f32 and f64 go to BLAS (OpenBLAS sgemm
// / dgemm, called row-major as torch calls it), and bf16 / f16 to oneDNN, whose order posenc does
// not reproduce: there the product is the float64 dot rounded once to T. W is the working type
// (float, double for f64); BLAS must not run inside an OpenMP region, so this is called from serial
// code.
template <class W>
void model_matmul(const ModelType& mt, bool trans_b, std::size_t m, std::size_t n, std::size_t k,
                  const W* a, const W* b, W* c) {
  const std::ptrdiff_t sb_k = trans_b ? 1 : static_cast<std::ptrdiff_t>(n);
  const std::ptrdiff_t sb_n = trans_b ? static_cast<std::ptrdiff_t>(k) : 1;
  const bool blas = m * n * k >= 400 && (mt.t == DType::f32 || mt.t == DType::f64);
  if (blas) {
    // The same sgemm / dgemm call torch makes, through xtensor-blas (contiguous
    // row-major adaptors, no copies).
    using Shape2 = std::array<std::size_t, 2>;
    const auto A = xt::adapt(a, m * k, xt::no_ownership(), Shape2{m, k});
    const auto B = xt::adapt(b, n * k, xt::no_ownership(), trans_b ? Shape2{n, k} : Shape2{k, n});
    auto C = xt::adapt(c, m * n, xt::no_ownership(), Shape2{m, n});
    xt::blas::gemm(A, B, C, false, trans_b, W(1), W(0));
    return;
  }
  const bool in_order = m * n * k < 400;
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(m * n); ++r) {
    const std::size_t i = static_cast<std::size_t>(r) / n, j = static_cast<std::size_t>(r) % n;
    const W* ar = a + i * k;
    const W* bc = b + static_cast<std::ptrdiff_t>(j) * sb_n;
    if (in_order) {
      double acc = 0;
      for (std::size_t t = 0; t < k; ++t) {
        acc = mt.add(acc, mt.mul(ar[t], bc[static_cast<std::ptrdiff_t>(t) * sb_k]));
      }
      c[r] = static_cast<W>(acc);
    } else {
      double acc = 0;
      for (std::size_t t = 0; t < k; ++t) {
        acc += static_cast<double>(ar[t]) *
               static_cast<double>(bc[static_cast<std::ptrdiff_t>(t) * sb_k]);
      }
      c[r] = static_cast<W>(mt.round(acc));
    }
  }
}

void refuse_options(const AttentionOptions& opt, const HfShape& g) {
  auto no = [](bool set, const char* what) {
    if (set) throw UsageError(fmt::format("--arith hf: HF's eager attention has no {}", what));
  };
  // A field a config set is named as that file's key, not as the option it stands for.
  auto from_config = [&opt](bool set, const char* field, const char* what) {
    const ValueSource* s = opt.sources.find(field);
    if (set && s != nullptr) {
      throw UsageError(fmt::format(
          "--arith hf: HF's eager attention has no {} ({}: '{}'; use --arith exact)", what,
          s->file, s->key));
    }
  };
  from_config(opt.alibi.has_value(), "alibi", "ALiBi");
  from_config(opt.softcap > 0, "softcap", "soft-capping");
  no(opt.alibi.has_value(), "--alibi");
  no(opt.alibi_slopes != nullptr, "--alibi-slopes");
  no(opt.t5_bias != nullptr, "--t5-bias");
  no(opt.gate_input != nullptr, "--wavlm-gate");
  no(opt.clipped_bias != nullptr, "--clipped-bias");
  no(opt.relative_k != nullptr || opt.relative_v != nullptr, "--relative-k/--relative-v");
  no(opt.relative_proj != nullptr, "--relative-proj (Gemma-3n audio: use --arith exact)");
  no(opt.per_dim_scale != nullptr, "--per-dim-scale (Gemma-3n audio: use --arith exact)");
  no(opt.softcap > 0, "--softcap");
  no(opt.rel_pos_h != nullptr || opt.rel_pos_w != nullptr,
     "--decomposed-rel-pos (SAM's terms: use --arith exact)");
  no(opt.score_bias != nullptr,
     "relative score terms (--rel-keys, --factorized, --pos-key/--pos-query)");
  no(opt.sinks != nullptr, "--sinks");
  no(opt.global_k != nullptr, "--global-kv (LongT5's side keys: use --arith exact)");
  no(g.emit_lse, "lse output");
  no(opt.masked_rows != MaskedRows::zero,
     "--masked-rows (fully masked rows give what its "
     "arithmetic gives)");
  no(opt.precision.has_value(), "--precision (it computes in the model dtype)");
}

// The additive mask entry for (b, h, i, j): finfo(T).min where the mask rules (the ones
// the exact path applies: attention_mask.hpp) or a boolean mask remove the key, else the
// float --mask value in T (0 without one).
class Mask {
 public:
  Mask(const AttentionOptions& opt, const HfShape& g, const ModelType& mt)
      : rules_(key_rules(opt, g.sq, g.sk)), min_(mt.min()) {
    if (opt.mask) {
      const Tensor& m = *opt.mask;
      Shape target = g.logits_shape;
      // Broadcast strides over (b, h, i, j), numpy rules (shapes checked by attention()).
      std::ptrdiff_t stride = 1;
      std::vector<std::ptrdiff_t> st(target.size(), 0);
      for (std::size_t a = 0; a < m.ndim(); ++a) {
        const std::size_t md = m.ndim() - 1 - a, td = target.size() - 1 - a;
        st[td] = m.shape()[md] == 1 ? 0 : stride;
        stride *= static_cast<std::ptrdiff_t>(m.shape()[md]);
      }
      std::size_t t = 0;
      if (g.axes.find('b') != std::string::npos) mb_ = st[t++];
      if (g.axes.find('h') != std::string::npos) mh_ = st[t++];
      mi_ = st[t++];
      mj_ = st[t++];
      additive_ = is_float(m.dtype());
      values_.resize(m.numel());
      for (std::size_t i = 0; i < m.numel(); ++i) {
        values_[i] = additive_ ? mt.round(m.get(i)) : (m.get(i) != 0.0 ? 1.0 : 0.0);
      }
    }
  }

  const KeyRules& rules() const { return rules_; }

  double at(std::size_t b, std::size_t h, std::int64_t i, std::int64_t j) const {
    bool keep = rules_.span(b, i).sees(j);
    double add = 0.0;
    if (!values_.empty()) {
      const double v = values_[static_cast<std::size_t>(static_cast<std::ptrdiff_t>(b) * mb_ +
                                                        static_cast<std::ptrdiff_t>(h) * mh_ +
                                                        i * mi_ + j * mj_)];
      if (additive_) {
        add = v;
      } else {
        keep = keep && v != 0.0;
      }
    }
    return keep ? add : min_;
  }

 private:
  KeyRules rules_;
  double min_;
  bool additive_ = false;
  std::vector<double> values_;
  std::ptrdiff_t mb_ = 0, mh_ = 0, mi_ = 0, mj_ = 0;
};

// The per-query factors as HF computes them, one per query, in float32 (torch's log and
// log1p: SLEEF); the query is then multiplied by its factor, a float32 product (float64
// for f64 models) rounded to T.
// - Llama4TextAttention's temperature tuning: attn_scales = log1p(floor((cache_position
//   .float() + 1.0) / floor_scale)) * attn_scale + 1.0, and query_states = (query_states
//   * attn_scales).to(dtype).
// - Ministral3Attention's _get_llama_4_attn_scale: 1 + beta * log(1 + floor(cache_position
//   / original_max_position_embeddings)) (an int64 tensor over a Python int: a float32
//   true division), then .to(query_states.dtype) before the product: the factor itself
//   is rounded to T.
std::vector<float> query_scales(const KeyRules& r, std::size_t sq, const ModelType& mt) {
  std::vector<float> t(sq);
  if (r.l4_beta != 0) {
    const float period = static_cast<float>(r.l4_period);
    for (std::size_t i = 0; i < sq; ++i) {
      const float pos = static_cast<float>(static_cast<std::int64_t>(i) + r.off);
      t[i] = 1.0f + std::floor(pos / period);
    }
    torch_cpu::log(t.data(), t.data(), sq);
    const float beta = static_cast<float>(r.l4_beta);
    for (float& x : t) x = static_cast<float>(mt.round(1.0f + beta * x));
    return t;
  }
  if (r.temp_scale == 0) return t;
  const float floor_scale = static_cast<float>(r.temp_floor);
  for (std::size_t i = 0; i < sq; ++i) {
    const float pos = static_cast<float>(static_cast<std::int64_t>(i) + r.off);
    t[i] = std::floor((pos + 1.0f) / floor_scale);
  }
  torch_cpu::log1p(t.data(), t.data(), sq);
  const float attn_scale = static_cast<float>(r.temp_scale);
  for (float& x : t) x = x * attn_scale + 1.0f;
  return t;
}

void store(Tensor& t, std::size_t i, double v) {
  switch (t.dtype()) {
    case DType::f16:
      t.data<std::uint16_t>()[i] = double_to_half(v);
      break;
    case DType::bf16:
      t.data<std::uint16_t>()[i] = double_to_bf16(v);
      break;
    case DType::f32:
      t.data<float>()[i] = static_cast<float>(v);
      break;
    default:
      t.data<double>()[i] = v;
      break;
  }
}

}  // namespace

namespace {

// Copies the [s, d] block of (b, h) from x (working type, axes `axes`) into `out`.
template <class W>
void block(const Tensor& x, const std::string& axes, std::size_t b, std::size_t h,
           std::vector<W>& out) {
  const AxisStrides st = axis_strides(x.shape(), axes);
  const std::size_t ns = x.shape()[axes.find('s')], nd = x.shape()[axes.find('d')];
  out.resize(ns * nd);
  const W* p = x.data<W>() + b * st.b + h * st.h;
  for (std::size_t s = 0; s < ns; ++s) {
    for (std::size_t c = 0; c < nd; ++c) out[s * nd + c] = p[s * st.s + c * st.d];
  }
}

template <class W>
AttentionResult run_hf(const Tensor& q, const Tensor& k, const Tensor* v,
                       const AttentionOptions& opt, const HfShape& g) {
  if (is_fp8(q.dtype()) || is_fp8(k.dtype()) || (v && is_fp8(v->dtype()))) {
    throw UsageError("--arith hf: torch has no fp8 attention arithmetic; fp8 inputs take the "
                     "default arithmetic");
  }
  const ModelType mt{q.dtype()};
  const DType wt = std::is_same_v<W, float> ? DType::f32 : DType::f64;
  const Tensor qw = q.astype(wt), kw = k.astype(wt);
  const Tensor vw = v ? v->astype(wt) : Tensor();
  // HF: self.scaling = head_dim ** -0.5 (a Python float), or the caller's scale.
  const double scaling =
      mt.scalar(opt.scale > 0 ? opt.scale : std::pow(static_cast<double>(g.d), -0.5));
  const Mask mask(opt, g, mt);
  const std::vector<float> temp = query_scales(mask.rules(), g.sq, mt);

  AttentionResult res;
  if (g.emit_logits) res.logits = Tensor(g.out, g.logits_shape);
  if (g.emit_probs) res.probs = Tensor(g.out, g.logits_shape);
  Shape os = q.shape();
  os[g.axes.find('d')] = g.dv;
  AxisStrides so;
  if (g.emit_output) {
    res.output = Tensor(g.out, os);
    so = axis_strides(os, g.axes);
  }
  std::vector<W> qb, kb, vb, sc(g.sq * g.sk), ob(g.sq * g.dv);
  OneBlasThread one_blas;
  for (std::size_t b = 0; b < g.b; ++b) {
    for (std::size_t h = 0; h < g.hq; ++h) {
      const std::size_t kh = h / (g.hq / g.hk);  // repeat_kv
      block(qw, g.axes, b, h, qb);
      if (mask.rules().scales_queries()) {
        for (std::size_t i = 0; i < g.sq; ++i) {
          for (std::size_t c = 0; c < g.d; ++c) {
            W& x = qb[i * g.d + c];
            x = static_cast<W>(mt.is64() ? static_cast<double>(x) * temp[i]
                                         : mt.op(static_cast<float>(x) * temp[i]));
          }
        }
      }
      block(kw, g.axes, b, kh, kb);
      model_matmul(mt, true, g.sq, g.sk, g.d, qb.data(), kb.data(), sc.data());
      const std::size_t row0 = (b * g.hq + h) * g.sq;
#pragma omp parallel
      {
        std::vector<float> p(g.sk);
#pragma omp for schedule(static)
        for (std::ptrdiff_t ii = 0; ii < static_cast<std::ptrdiff_t>(g.sq); ++ii) {
          const auto i = static_cast<std::size_t>(ii);
          W* w = sc.data() + i * g.sk;
          for (std::size_t j = 0; j < g.sk; ++j) {
            double s = mt.mul(static_cast<double>(w[j]), scaling);
            s = mt.add(s,
                       mask.at(b, h, static_cast<std::int64_t>(i), static_cast<std::int64_t>(j)));
            if (g.emit_logits) store(res.logits, (row0 + i) * g.sk + j, s);
            p[j] = static_cast<float>(s);  // softmax(..., dtype=float32) converts first
          }
          torch_softmax(p.data(), g.sk);
          for (std::size_t j = 0; j < g.sk; ++j) {
            w[j] = static_cast<W>(mt.round(p[j]));  // .to(query.dtype)
            if (g.emit_probs) store(res.probs, (row0 + i) * g.sk + j, static_cast<double>(w[j]));
          }
        }
      }
      if (!g.emit_output) continue;
      block(vw, g.axes, b, kh, vb);
      model_matmul(mt, false, g.sq, g.dv, g.sk, sc.data(), vb.data(), ob.data());
      for (std::size_t i = 0; i < g.sq; ++i) {
        for (std::size_t c = 0; c < g.dv; ++c) {
          store(res.output, b * so.b + h * so.h + i * so.s + c * so.d,
                static_cast<double>(ob[i * g.dv + c]));
        }
      }
    }
  }
  return res;
}

}  // namespace

AttentionResult attention_hf(const Tensor& q, const Tensor& k, const Tensor* v,
                             const AttentionOptions& opt, const HfShape& g) {
  refuse_options(opt, g);
  torch_cpu::require("--arith hf");
  if (k.dtype() != q.dtype() || (v && v->dtype() != q.dtype())) {
    throw InputError(fmt::format(
        "--arith hf: q, k and v must share the model dtype (got {}, {}{}{})", dtype_name(q.dtype()),
        dtype_name(k.dtype()), v ? ", " : "", v ? dtype_name(v->dtype()) : ""));
  }
  return q.dtype() == DType::f64 ? run_hf<double>(q, k, v, opt, g) : run_hf<float>(q, k, v, opt, g);
}

}  // namespace posenc::attention_detail
