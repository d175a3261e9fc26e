// attention_backward(): the gradients of attention recomputed tile by tile from the
// forward's lse (FlashAttention-2's backward, without its atomics): work items are
// (batch, KV head); each walks the key tiles in order and, for each, the query heads of
// the group and their query tiles in order, accumulating dk and dv of the key tile and
// the dq of every query row of the item. Each item owns the rows it writes and adds its
// tiles in a fixed order, so the bytes depend on the tile sizes (fixed by the shapes)
// and nothing else. The masks, the key ranges and the score terms are the forward's
// plan (attention_terms: the one KeyRules value of attention_mask, the mask copy, the
// ALiBi slopes, the sinks).
#include "posenc/ops/attention_backward.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>
#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>

#include "io/slab.hpp"
#include "ops/attention_backward_global.hpp"
#include "ops/attention_clipped.hpp"
#include "ops/attention_decomposed.hpp"
#include "ops/attention_fa.hpp"
#include "ops/attention_gate.hpp"
#include "ops/attention_geometry.hpp"
#include "ops/attention_kernel.hpp"
#include "ops/attention_relative_terms.hpp"
#include "ops/attention_timing.hpp"
#include "ops/attention_varlen.hpp"
#include "ops/blas_threads.hpp"
#include "ops/huge_pages.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/bias.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/ops/cast.hpp"

namespace posenc {

using namespace attention_detail;

namespace {

// C (m x n, contiguous) = alpha op(A) op(B) + beta C with op(A) m x k, op(B) k x n; rows
// of A and B `lda`, `ldb` apart (copied into contiguous rows when they are not: the
// adaptors of xtensor-blas are row-major and dense). Single-threaded BLAS (OneBlasThread).
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
          const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c) {
  const std::size_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const std::size_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  thread_local std::vector<T> a_copy, b_copy;
  auto dense = [](const T* p, std::size_t rows, std::size_t cols, std::size_t ld,
                  std::vector<T>& buf) {
    if (ld == cols) return p;
    if (buf.size() < rows * cols) buf.resize(rows * cols);
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(p + r * ld, cols, buf.data() + r * cols);
    return static_cast<const T*>(buf.data());
  };
  a = dense(a, a_rows, a_cols, lda, a_copy);
  b = dense(b, b_rows, b_cols, ldb, b_copy);
  auto A = xt::adapt(a, a_rows * a_cols, xt::no_ownership(),
                     std::array<std::size_t, 2>{a_rows, a_cols});
  auto B = xt::adapt(b, b_rows * b_cols, xt::no_ownership(),
                     std::array<std::size_t, 2>{b_rows, b_cols});
  auto C = xt::adapt(c, m * n, xt::no_ownership(), std::array<std::size_t, 2>{m, n});
  xt::blas::gemm(A, B, C, trans_a, trans_b, alpha, beta);
}

// The options the backward cannot honour, refused by name (never ignored).
void refuse_unsupported(const AttentionOptions& opt, const AttentionBackwardOptions& bopt) {
  auto no = [](bool set, const char* what) {
    if (set) {
      throw UsageError(fmt::format("gradients: {} is not supported by the backward pass", what));
    }
  };
  no(opt.arith != Arith::exact, "--arith other than exact");
  no(opt.masked_rows == MaskedRows::nan, "--masked-rows nan");
  no(opt.q_descale != nullptr || opt.k_descale != nullptr || opt.v_descale != nullptr,
     "--q-descale/--k-descale/--v-descale (FlashAttention-3's fp8 path is forward only)");
  no(opt.k_scale != 0 || opt.v_scale != 0, "k_scale/v_scale (the fp8 scales are forward only)");
  no(!opt.p_dtype.empty(), "--p-dtype");
  no(opt.fa_baseline, "--arith fa-baseline");
  if (bopt.dt5_bias && !opt.t5_bias) throw UsageError("gradients: dt5_bias needs --t5-bias");
  refuse_global_gradients(opt, bopt);  // dglobal_* without the side keys
  if (bopt.drelative_k && !opt.relative_k) {
    throw UsageError("gradients: drelative_k needs --relative-k");
  }
  if (bopt.drelative_v && !opt.relative_v) {
    throw UsageError("gradients: drelative_v needs --relative-v");
  }
  if (bopt.dgate && !opt.gate_input) throw UsageError("gradients: dgate_* need --wavlm-gate");
  if (bopt.dclipped_bias && !opt.clipped_bias) {
    throw UsageError("gradients: dclipped_bias needs --clipped-bias");
  }
  if ((bopt.drel_pos_h || bopt.drel_pos_w) && !opt.rel_pos_h) {
    throw UsageError(fmt::format("gradients: {} needs --decomposed-rel-pos",
                                 bopt.drel_pos_h ? "drel_pos_h" : "drel_pos_w"));
  }
  if (bopt.dper_dim_scale && !opt.per_dim_scale) {
    throw UsageError("gradients: dper_dim_scale needs --per-dim-scale");
  }
  if (bopt.drelative_proj && !opt.relative_proj) {
    throw UsageError("gradients: drelative_proj needs --relative-proj");
  }
  if (bopt.dbias && !(opt.mask && is_float(opt.mask->dtype()))) {
    throw UsageError("gradients: dbias needs a float (additive) --mask");
  }
}

// softmax_d = rowsum(dO o O) in float64, taken from the forward's float64 output rows as
// its items store them (positional writes), instead of from an O held whole: the 8 bytes
// an element of O, their page faults (each costly in a VM) and a pass over them were a
// large part of an f32 backward's time beside its products. Each row is summed as the loop over a whole O sums it, so the bits
// are the same. For an output whose rows (b, h, s) follow each other in that order, d
// last: entry `first` of O is then row first / dv, and dO (O's shape) has the same entries.
class SoftmaxDSink final : public TensorSink {
 public:
  SoftmaxDSink(const Tensor& grad_output, std::size_t dv, double* D)
      : dO_(grad_output), dv_(dv), D_(D) {}
  bool writes_at() const override { return true; }
  void write_rows(const void*, std::size_t) override {
    throw std::logic_error("softmax_d: the forward's rows come by positional writes");
  }
  void write_at(std::size_t first, const void* src, std::size_t count) override {
    if (dv_ == 0) return;  // D stays 0
    const double* o = static_cast<const double*>(src);
    const float* dO32 = dO_.dtype() == DType::f32 ? dO_.data<float>() : nullptr;
    for (std::size_t r = 0; r < count / dv_; ++r) {
      const std::size_t base = first + r * dv_;
      const double* orow = o + r * dv_;
      double sum = 0;
      if (dO32) {
        for (std::size_t cc = 0; cc < dv_; ++cc) {
          sum += static_cast<double>(dO32[base + cc]) * orow[cc];
        }
      } else {
        for (std::size_t cc = 0; cc < dv_; ++cc) sum += dO_.get(base + cc) * orow[cc];
      }
      D_[base / dv_] = sum;
    }
  }
  void commit() override {}

 private:
  const Tensor& dO_;
  std::size_t dv_;
  double* D_;
};

// A fresh gradient in 2 MiB pages where the kernel gives them (advise_huge_pages).
void prefer_huge_pages(Tensor& t) { detail::advise_huge_pages(t.bytes(), t.nbytes()); }

struct Tiles {
  std::size_t q = 0, k = 0;
};

Tiles tiles_for(const Geometry& g, const AttentionBackwardOptions& bopt) {
  // The products are d deep (64 to 256) and the tile sides: in f32, 256 x 256 tiles give
  // OpenBLAS's kernels longer runs (about a tenth less CPU time than 128 x 128 at d 128) and
  // the two score-sized tiles of a worker (512 KiB) stay within the L2 cache; in f64,
  // 128 x 128 for the same bytes.
  const std::size_t side = g.compute == DType::f32 ? 256 : 128;
  Tiles t;
  t.q = bopt.query_tile ? bopt.query_tile : side;
  t.k = bopt.key_tile ? bopt.key_tile : side;
  t.q = std::max<std::size_t>(1, std::min(t.q, std::max<std::size_t>(g.sq, 1)));
  t.k = std::max<std::size_t>(1, std::min(t.k, std::max<std::size_t>(g.sk, 1)));
  return t;
}

// A worker's tiles: scores (then probabilities), dP (then dS'), and the accumulators of
// one item (dk and dv of a key tile, dq of the group's heads).
std::size_t tile_bytes(const Geometry& g, const Tiles& t, bool dbias) {
  const std::size_t ts = dtype_size(g.compute);
  std::size_t n = mul_sat(t.q * t.k, (dbias ? 3 : 2) * ts);
  n = add_sat(n, mul_sat(mul_sat(g.hq / g.hk, g.sq), g.d * ts));  // the item's dq
  n = add_sat(n, mul_sat(t.k, (g.d + g.dv) * ts));
  // The decomposed terms of the item's queries and their gradients by key row and column.
  n = add_sat(n, mul_sat(mul_sat(g.hq / g.hk, g.sq), mul_sat(g.dec_cols, 2 * ts)));
  // Strided rows (bshd) copied for BLAS.
  return add_sat(n, mul_sat(std::max(t.q, t.k), (g.d + g.dv) * ts));
}

// Everything the items read.
template <class T>
struct Ctx {
  Plan<T> P;  // the forward's plan: rules, masks, ALiBi, sinks, scale, soft-cap
  Tiles t;
  View<T> q, k, v, dO;
  std::vector<double> lse, D;  // [b][hq][sq]
  bool want_dbias = false;
  std::vector<T> dsb;  // dS over [b][hq][sq][sk] for dbias
  // The gradient of opt.score_bias (dS through the soft-cap) [b][hq][sq][sk], in float64
  // (bopt.dscore_bias); each entry written by the one item that sees it.
  double* dscore = nullptr;
  // dS summed by key-minus-query distance [b][hq][sq + sk - 1] (index j - pos + sk - 1),
  // for the T5 table's gradient; each row belongs to one item.
  std::vector<double> dt5;
  // dk and dv: held in AttentionGrads, or written to sinks as their key tiles complete
  // (positional writes), or not wanted; K and V released tile by tile (file mappings).
  TensorSink *dk_sink = nullptr, *dv_sink = nullptr;
  bool keep_dk = true, keep_dv = true, release_kv = false;
  Shape k_shape, v_shape;
  // K and V of a narrower float dtype used in place (release_kv): each key tile widened
  // into the worker's buffers (exact), instead of a converted copy of the whole tensors.
  const std::byte *k_raw = nullptr, *v_raw = nullptr;
  DType k_dtype = DType::f32, v_dtype = DType::f32;
  // Shaw's tables: each item's sums of their gradients ([items][P.rel_k.size()] and
  // [items][R dv]), added over the items in order at the end.
  std::vector<T> drk, drv;
  // The decomposed tables: each item's sums of the resized tables' gradients
  // ([items][rh.size()], [items][rw.size()]), added over the items in order at the end.
  std::vector<double> drh, drw;
  // WavLM's gate: the gradient of each row's factor [b][hq][sq] (each row one item's).
  std::vector<double> dgate;
  GlobalGrads<T> global;  // LongT5's side keys (attention_backward_global)
};

// exp(x) in f32 lanes for x a score minus its row's lse (at most a rounding above 0): the
// forward's exp_nonpositive, with a NaN score kept NaN (as expf), whatever its sign bit.
inline float exp_lanes(float x) { return x != x ? x : exp_nonpositive(x); }

// A row's keys seen with no term but the scale: s <- P = exp(s - lse), dp <- dS = P (dP - D).
// The clones round alike (the file is compiled without contracting a * b + c).
__attribute__((target_clones("avx512f", "avx2", "default"), noinline)) void probs_ds(
    float* s, float* dp, std::size_t n, float lse, float D) {
  for (std::size_t j = 0; j < n; ++j) {
    const float p = exp_lanes(s[j] - lse);
    s[j] = p;
    dp[j] = p * (dp[j] - D);
  }
}
void probs_ds(double* s, double* dp, std::size_t n, double lse, double D) {
  for (std::size_t j = 0; j < n; ++j) {
    const double p = std::exp(s[j] - lse);
    s[j] = p;
    dp[j] = p * (dp[j] - D);
  }
}

// The probabilities and dS' of query rows [q0, q0 + qn) of head h against keys
// [j0, j0 + kn): s <- P, dp <- dS' (dS through the soft-cap and the temperature), and dS
// into c.dsb. False when no row sees a key of the tile (nothing computed).
template <class T>
bool tile(Ctx<T>& c, std::vector<T>& s, std::vector<T>& dp, std::size_t bi, std::size_t h,
          std::size_t q0, std::size_t qn, std::size_t j0, std::size_t kn, bool write_dbias,
          std::vector<T>& G, std::vector<T>& H, const T* kp, std::size_t ks, const T* vp,
          std::size_t vs, const T* decq, T* gdec) {
  const Plan<T>& P = c.P;
  const Geometry& g = P.g;
  const std::int64_t j0i = static_cast<std::int64_t>(j0), j1i = j0i + static_cast<std::int64_t>(kn);
  bool any = false;
  for (std::size_t r = 0; r < qn && !any; ++r) {
    auto [lo, hi] = P.rules.range(bi, static_cast<std::int64_t>(q0 + r));  // the envelope
    any = lo <= hi && hi >= j0i && lo < j1i;
  }
  if (!any) return false;
  const T* qp = c.q.p + bi * c.q.b + h * c.q.h + q0 * c.q.s;
  const T* op = c.dO.p + bi * c.dO.b + h * c.dO.h + q0 * c.dO.s;
  if (s.size() < qn * kn) s.resize(qn * kn);
  if (dp.size() < qn * kn) dp.resize(qn * kn);
  gemm(false, true, qn, kn, g.d, P.scale, qp, c.q.s, kp, ks, T(0), s.data());
  gemm(false, true, qn, kn, g.dv, T(1), op, c.dO.s, vp, vs, T(0), dp.data());
  // Shaw's tables: scale q_i.rk[r] joins the score and dO_i.rv[r] the row's dP at
  // r = rel_index of the pair; G and H gather dS' and P by r for the tables' gradients.
  thread_local std::vector<T> qr, orv;
  if (P.R) {
    qr.resize(qn * P.R);
    gemm(false, true, qn, P.R, g.d, P.scale, qp, c.q.s, P.rel_k.data() + h * P.rel_k_head, g.d,
         T(0), qr.data());
    orv.assign(qn * P.R, T(0));
    if (!P.rel_v.empty()) {
      gemm(false, true, qn, P.R, g.dv, T(1), op, c.dO.s, P.rel_v.data(), g.dv, T(0), orv.data());
    }
    G.assign(qn * P.R, T(0));
    H.assign(qn * P.R, T(0));
  }
  const std::int64_t sq = static_cast<std::int64_t>(g.sq), sk = static_cast<std::int64_t>(g.sk);
  const double slope = P.alibi ? P.slopes[bi * P.slope_b + h] : 0.0;
  const std::int64_t alibi_sk = sq + P.rules.offset(bi);  // the entry's own k_len
  // Scores with no term but the scale take the fused pass over the keys a row sees.
  const bool plain = !P.has_keep_mask && !P.has_add_mask && !P.alibi && !(P.softcap > 0) &&
                     !P.rules.scales_queries() && !write_dbias && P.t5.empty() && !P.R &&
                     !P.dec.on() && !P.bias;
  const std::size_t ndist = g.sq + g.sk - 1;
  const T* t5row = P.t5.empty() ? nullptr : P.t5.data() + h * ndist;
  double* d5row = c.dt5.empty() ? nullptr : c.dt5.data() + (bi * g.hq + h) * ndist;
  const T* gate = P.t5_gate.empty() ? nullptr : P.t5_gate.data() + (bi * g.hq + h) * g.sq;
  double* dgate = c.dgate.empty() ? nullptr : c.dgate.data() + (bi * g.hq + h) * g.sq;
  for (std::size_t r = 0; r < qn; ++r) {
    const std::int64_t i = static_cast<std::int64_t>(q0 + r);
    const std::size_t row = (bi * g.hq + h) * g.sq + q0 + r;
    const double lse = c.lse[row];
    const T D = static_cast<T>(c.D[row]);
    const KeySpan span = P.rules.span(bi, i);
    T* sr = s.data() + r * kn;
    T* dr = dp.data() + r * kn;
    // A row without keys has lse -inf; a NaN lse (a given one, or NaN inputs allowed)
    // is no such row: it propagates, as in autograd.
    if (plain && !span.has_sink()) {
      const std::int64_t a = lse != -kInf ? std::clamp(span.lo, j0i, j1i) : j0i;
      const std::int64_t e = lse != -kInf ? std::clamp(span.hi + 1, a, j1i) : j0i;
      const std::size_t na = static_cast<std::size_t>(a - j0i), ne = static_cast<std::size_t>(e - j0i);
      std::fill(sr, sr + na, T(0)), std::fill(dr, dr + na, T(0));
      std::fill(sr + ne, sr + kn, T(0)), std::fill(dr + ne, dr + kn, T(0));
      probs_ds(sr + na, dr + na, ne - na, static_cast<T>(lse), D);
      continue;
    }
    const T temp = static_cast<T>(P.rules.temperature(i + P.off));
    const std::ptrdiff_t mbase = bi * P.m_b + h * P.m_h + i * P.m_i;
    T* br = write_dbias ? c.dsb.data() + row * g.sk + j0 : nullptr;
    const T* sbr = P.bias ? P.bias + row * g.sk : nullptr;  // the score term, by key
    double* dsbr = c.dscore ? c.dscore + row * g.sk : nullptr;
    const std::int64_t dshift = sk - 1 - (i + P.off);  // distance index = j + dshift
    // SAM's terms of the row (kh by key row, then kw by key column) and their gradients.
    const std::size_t dcols = P.dec.cols(), dkh = P.dec.kh, dkw = P.dec.kw;
    const T* decr = decq ? decq + r * dcols : nullptr;
    T* gdr = decq ? gdec + r * dcols : nullptr;
    // WavLM's factor of the row's T5 term (1 without a gate: 1 * t is t, bit for bit).
    const T gate5 = gate ? gate[i] : T(1);
    double dgate5 = 0;
    for (std::size_t jj = 0; jj < kn; ++jj) {
      const std::int64_t j = j0i + static_cast<std::int64_t>(jj);
      bool seen = span.sees(j) && lse != -kInf;
      if (seen && P.has_keep_mask) seen = P.keep_mask[mbase + j * P.m_j] != 0;
      if (!seen) {
        sr[jj] = T(0), dr[jj] = T(0);
        if (br) br[jj] = T(0);
        continue;
      }
      // The forward's score, element operation by element operation (attention_kernel's
      // item_keys), and its derivative with respect to scale q.k.
      T x = sr[jj], f = T(1), dpv = dr[jj];
      // As the forward adds them, first: (scale q.k + rel_h) + rel_w.
      const auto ju = static_cast<std::size_t>(j);
      if (decr) x = x + decr[ju / dkw] + decr[dkh + ju % dkw];
      const std::size_t rel = P.R ? static_cast<std::size_t>(P.rel_index[j + dshift]) : 0;
      if (P.R) x += qr[r * P.R + rel], dpv += orv[r * P.R + rel];
      if (P.rules.scales_queries()) x *= temp, f = temp;
      // The score term joins after the temperature, before the soft-cap (item_keys): its
      // gradient is dS through the soft-cap alone.
      T fcap = T(1);
      if (sbr) x += sbr[ju];
      if (P.softcap > 0) {
        const T th = std::tanh(x / P.softcap);
        x = P.softcap * th;
        fcap = T(1) - th * th;
        f *= fcap;
      }
      if (P.alibi) x += static_cast<T>(alibi_bias(*P.alibi, slope, i, j, sq, alibi_sk));
      if (t5row) x += gate5 * t5row[j + dshift];
      if (P.has_add_mask) x += P.add_mask[mbase + j * P.m_j];
      const T p = std::exp(x - static_cast<T>(lse));
      const T ds = p * (dpv - D);
      sr[jj] = p;
      dr[jj] = ds * f;
      if (P.R) G[r * P.R + rel] += ds * f, H[r * P.R + rel] += p;
      if (gdr) gdr[ju / dkw] += ds * f, gdr[dkh + ju % dkw] += ds * f;
      if (br) br[jj] = ds;
      if (dsbr) dsbr[ju] = static_cast<double>(ds * fcap);
      // The T5 term is added after the soft-cap and the temperature: its gradient is dS
      // (times the gate's factor), the factor's dS times the T5 term.
      if (d5row) d5row[j + dshift] += static_cast<double>(ds) * static_cast<double>(gate5);
      if (dgate) dgate5 += static_cast<double>(ds) * static_cast<double>(t5row[j + dshift]);
    }
    if (dgate) dgate[i] += dgate5;
  }
  return true;
}

// Stores an accumulator [rows, n] (contiguous) as rows r0.. of (batch, head) of `out`
// (strides `st` of its axes), each value rounded once.
template <class T>
void store_rows(Tensor& out, const Strides& st, std::size_t bi, std::size_t h, std::size_t r0,
                std::size_t rows, std::size_t n, const T* acc) {
  if (st.d == 1 && (out.dtype() == DType::f32 || out.dtype() == DType::f64)) {
    // Rows in place: the same conversions as below, in loops that vectorise (out's
    // dtype and data pointer read once, not at every element).
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t base = bi * st.b + h * st.h + (r0 + r) * st.s;
      const T* a = acc + r * n;
      if (out.dtype() == DType::f32) {
        float* o = out.data<float>() + base;
        for (std::size_t c = 0; c < n; ++c) o[c] = static_cast<float>(a[c]);
      } else {
        double* o = out.data<double>() + base;
        for (std::size_t c = 0; c < n; ++c) o[c] = static_cast<double>(a[c]);
      }
    }
    return;
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t base = bi * st.b + h * st.h + (r0 + r) * st.s;
    const T* a = acc + r * n;
    if (out.dtype() == DType::f32 || out.dtype() == DType::f64) {
      // Rounded once by the conversion (T is f32 or f64).
      for (std::size_t c = 0; c < n; ++c) {
        if (out.dtype() == DType::f32) {
          out.data<float>()[base + c * st.d] = static_cast<float>(a[c]);
        } else {
          out.data<double>()[base + c * st.d] = static_cast<double>(a[c]);
        }
      }
      continue;
    }
    for (std::size_t c = 0; c < n; ++c) out.set(base + c * st.d, static_cast<double>(a[c]));
  }
}

// Stores an accumulator as store_rows does, to a sink by positional writes (each
// row of n values contiguous: d is the last axis), each value rounded once.
template <class T>
void store_sink(TensorSink& sink, DType out, const Strides& st, std::size_t bi, std::size_t h,
                std::size_t r0, std::size_t rows, std::size_t n, const T* acc) {
  thread_local std::vector<std::byte> buf;
  const bool whole = static_cast<std::size_t>(st.s) == n;  // the rows follow each other
  const std::size_t per = whole ? rows * n : n;
  buf.resize(per * dtype_size(out));
  for (std::size_t r = 0; r < rows; r += whole ? rows : 1) {
    cast(reinterpret_cast<const std::byte*>(acc + r * n), dtype_of<T>(), buf.data(), out, per);
    const std::ptrdiff_t first = static_cast<std::ptrdiff_t>(bi) * st.b +
                                 static_cast<std::ptrdiff_t>(h) * st.h +
                                 static_cast<std::ptrdiff_t>(r0 + r) * st.s;
    sink.write_at(static_cast<std::size_t>(first), buf.data(), per);
  }
}

// The decomposed term's gradients of an item (heads h0.. of the group, gdec and dq
// [group][sq][.]): q_i's gains sum over its key rows c of gdec[i][c] Rh[ih(i, c)] plus
// the same by key columns, summed in float64 over the item's terms in order; the
// resized tables' sums of gdec[i][c] q_i by table row, for the item.
template <class T>
void add_decomposed(Ctx<T>& c, const T* gdec, T* dq, std::size_t it, std::size_t bi,
                    std::size_t h0, std::size_t group) {
  const Geometry& g = c.P.g;
  const Decomposed& dec = c.P.dec;
  const std::size_t cols = dec.cols(), d = g.d, kh = dec.kh, kw = dec.kw;
  double* drh = c.drh.empty() ? nullptr : c.drh.data() + it * dec.rh.size();
  double* drw = c.drw.empty() ? nullptr : c.drw.data() + it * dec.rw.size();
  std::vector<double> acc(d);
  for (std::size_t hh = 0; hh < group; ++hh)
    for (std::size_t i = 0; i < g.sq; ++i) {
      const T* gr = gdec + (hh * g.sq + i) * cols;
      const T* qi = c.q.p + bi * c.q.b + (h0 + hh) * c.q.h + i * c.q.s;
      const std::int32_t* ih = dec.ih.data() + (i / dec.qw) * kh;
      const std::int32_t* iw = dec.iw.data() + (i % dec.qw) * kw;
      std::fill(acc.begin(), acc.end(), 0.0);
      auto term = [&](const std::vector<double>& table, double* dtable, std::int32_t row, T gv) {
        const double gd = static_cast<double>(gv);
        const double* t = table.data() + static_cast<std::size_t>(row) * d;
        for (std::size_t x = 0; x < d; ++x) acc[x] += gd * t[x];
        if (dtable) {
          double* dt = dtable + static_cast<std::size_t>(row) * d;
          for (std::size_t x = 0; x < d; ++x) dt[x] += gd * static_cast<double>(qi[x]);
        }
      };
      for (std::size_t k = 0; k < kh; ++k) term(dec.rh, drh, ih[k], gr[k]);
      for (std::size_t k = 0; k < kw; ++k) term(dec.rw, drw, iw[k], gr[kh + k]);
      T* dqi = dq + (hh * g.sq + i) * d;
      for (std::size_t x = 0; x < d; ++x) dqi[x] += static_cast<T>(acc[x]);
    }
}

template <class T>
void run(Ctx<T>& c, AttentionGrads& out, std::size_t workers) {
  const Geometry& g = c.P.g;
  const Tiles t = c.t;
  const DType out_dtype = out.dq.dtype();
  const Strides qst = strides_of(out.dq.shape(), g.axes), kst = strides_of(c.k_shape, g.axes),
                vst = strides_of(c.v_shape, g.axes);
  OneBlasThread one_blas;
  // Items (batch, KV head): each key tile in order, the group's query heads and their
  // query tiles in order within it. P and dS' of a tile serve dk, dv and dq (five
  // products a tile, FlashAttention-2's count); dq of the group's heads is accumulated in
  // the item, over the key tiles in order.
  const std::size_t group = g.hq / g.hk;
  const std::size_t n = g.b * g.hk;
  struct Work {
    std::vector<T> s, dp, dk, dv, dq, G, H, kb, vb, decq, gdec;
  };
  const Decomposed& dec = c.P.dec;
  const std::size_t dcols = dec.on() ? dec.cols() : 0;
  std::vector<Work> work(thread_count(n, workers));
  for_items(n, work.size(), [&](std::size_t it, std::size_t w) {
    Work& W = work[w];
    const std::size_t bi = it / g.hk, kvh = it % g.hk;
    W.dq.assign(group * g.sq * g.d, T(0));
    if (dcols) {  // each query's terms once, as the forward's item_begin computes them
      W.decq.resize(group * g.sq * dcols);
      W.gdec.assign(group * g.sq * dcols, T(0));
      for (std::size_t hh = 0; hh < group; ++hh)
        for (std::size_t i = 0; i < g.sq; ++i) {
          dec.row(c.q.p + bi * c.q.b + (kvh * group + hh) * c.q.h + i * c.q.s, i,
                  W.decq.data() + (hh * g.sq + i) * dcols);
        }
    }
    for (std::size_t j0 = 0; j0 < g.sk; j0 += t.k) {
      const std::size_t kn = std::min(t.k, g.sk - j0);
      const T* kp;
      const T* vp;
      std::size_t ks, vs;
      const std::byte *k_at = nullptr, *v_at = nullptr;  // the stored rows, when widened
      if (c.k_raw) {  // heads contiguous (bhsd): the tile's rows are one run each
        const Strides kr = strides_of(c.k_shape, g.axes), vr = strides_of(c.v_shape, g.axes);
        k_at = c.k_raw + (bi * kr.b + kvh * kr.h + j0 * kr.s) * dtype_size(c.k_dtype);
        v_at = c.v_raw + (bi * vr.b + kvh * vr.h + j0 * vr.s) * dtype_size(c.v_dtype);
        W.kb.resize(kn * g.d);
        W.vb.resize(kn * g.dv);
        cast(k_at, c.k_dtype, reinterpret_cast<std::byte*>(W.kb.data()), dtype_of<T>(), kn * g.d);
        cast(v_at, c.v_dtype, reinterpret_cast<std::byte*>(W.vb.data()), dtype_of<T>(),
             kn * g.dv);
        kp = W.kb.data(), vp = W.vb.data(), ks = g.d, vs = g.dv;
      } else {
        kp = c.k.p + bi * c.k.b + kvh * c.k.h + j0 * c.k.s;
        vp = c.v.p + bi * c.v.b + kvh * c.v.h + j0 * c.v.s;
        ks = static_cast<std::size_t>(c.k.s), vs = static_cast<std::size_t>(c.v.s);
      }
      W.dk.assign(kn * g.d, T(0));
      W.dv.assign(kn * g.dv, T(0));
      for (std::size_t hh = 0; hh < group; ++hh) {
        const std::size_t h = kvh * group + hh;
        for (std::size_t q0 = 0; q0 < g.sq; q0 += t.q) {
          const std::size_t qn = std::min(t.q, g.sq - q0);
          const std::size_t dofs = (hh * g.sq + q0) * dcols;
          if (!tile(c, W.s, W.dp, bi, h, q0, qn, j0, kn, c.want_dbias, W.G, W.H, kp, ks, vp,
                    vs, dcols ? W.decq.data() + dofs : nullptr,
                    dcols ? W.gdec.data() + dofs : nullptr)) {
            continue;
          }
          const T* qp = c.q.p + bi * c.q.b + h * c.q.h + q0 * c.q.s;
          const T* op = c.dO.p + bi * c.dO.b + h * c.dO.h + q0 * c.dO.s;
          if (c.P.R) {  // Shaw's tables: dq += scale G rk; drk += scale G^T q; drv += H^T dO
            const std::size_t R = c.P.R;
            const T* rk = c.P.rel_k.data() + h * c.P.rel_k_head;
            gemm(false, false, qn, g.d, R, c.P.scale, W.G.data(), R, rk, g.d, T(1),
                 W.dq.data() + (hh * g.sq + q0) * g.d);
            if (!c.drk.empty()) {
              T* acc = c.drk.data() + it * c.P.rel_k.size() + h * c.P.rel_k_head;
              gemm(true, false, R, g.d, qn, c.P.scale, W.G.data(), R, qp, c.q.s, T(1), acc);
            }
            if (!c.drv.empty()) {
              T* acc = c.drv.data() + it * R * g.dv;
              gemm(true, false, R, g.dv, qn, T(1), W.H.data(), R, op, c.dO.s, T(1), acc);
            }
          }
          gemm(true, false, kn, g.dv, qn, T(1), W.s.data(), kn, op, c.dO.s, T(1), W.dv.data());
          gemm(true, false, kn, g.d, qn, c.P.scale, W.dp.data(), kn, qp, c.q.s, T(1),
               W.dk.data());
          gemm(false, false, qn, g.d, kn, c.P.scale, W.dp.data(), kn, kp, ks, T(1),
               W.dq.data() + (hh * g.sq + q0) * g.d);
        }
      }
      if (c.dk_sink) {
        store_sink(*c.dk_sink, out_dtype, kst, bi, kvh, j0, kn, g.d, W.dk.data());
      } else if (c.keep_dk) {
        store_rows(out.dk, kst, bi, kvh, j0, kn, g.d, W.dk.data());
      }
      if (c.dv_sink) {
        store_sink(*c.dv_sink, out_dtype, vst, bi, kvh, j0, kn, g.dv, W.dv.data());
      } else if (c.keep_dv) {
        store_rows(out.dv, vst, bi, kvh, j0, kn, g.dv, W.dv.data());
      }
      if (c.release_kv) {  // this item is the last to use the tile (heads contiguous)
        if (!k_at) k_at = reinterpret_cast<const std::byte*>(kp);
        if (!v_at) v_at = reinterpret_cast<const std::byte*>(vp);
        io_detail::release_mapped(k_at, kn * g.d * dtype_size(c.k_raw ? c.k_dtype : dtype_of<T>()));
        io_detail::release_mapped(v_at, kn * g.dv * dtype_size(c.v_raw ? c.v_dtype : dtype_of<T>()));
      }
    }
    if (c.global.on) {  // the side columns, after the key tiles
      c.global.item(c.P, c.q, c.dO, c.lse.data(), c.D.data(), bi, kvh, W.dq.data());
    }
    if (dcols) add_decomposed(c, W.gdec.data(), W.dq.data(), it, bi, kvh * group, group);
    for (std::size_t hh = 0; hh < group; ++hh) {
      store_rows(out.dq, qst, bi, kvh * group + hh, 0, g.sq, g.d,
                 W.dq.data() + hh * g.sq * g.d);
    }
  });
}

AttentionOptions forward_options(const AttentionOptions& opt) {
  AttentionOptions f = opt;
  f.emit = {AttentionEmit::output, AttentionEmit::lse};
  f.dtype = DType::f64;
  f.output_sink = nullptr;
  f.max_memory = 0;  // counted by attention_backward_memory
  return f;
}

}  // namespace

namespace {

std::size_t plain_memory(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                         const AttentionOptions& opt, const AttentionBackwardOptions& bopt) {
  const AttentionOptions f = forward_options(opt);
  const Geometry g = check(q, k, &v, q_dtype, f);
  const std::size_t ts = dtype_size(g.compute);
  const DType out = opt.dtype.value_or(q_dtype);
  // The forward (O, lse, work), unless the caller ran it.
  std::size_t n = bopt.forward_output ? 0 : memory_of(g, q, k, &v, q_dtype, f).first;
  const std::size_t nq = mul_sat(mul_sat(g.b * g.hq, g.sq), g.d),
                    nk = mul_sat(mul_sat(g.b * g.hk, g.sk), g.d),
                    nv = mul_sat(mul_sat(g.b * g.hk, g.sk), g.dv),
                    no = mul_sat(mul_sat(g.b * g.hq, g.sq), g.dv),
                    rows = mul_sat(g.b * g.hq, g.sq);
  // Q, K, V and dO in the arithmetic type (converted or transposed copies; K and V not
  // when used in place of their mappings), O transposed.
  const std::size_t nkv = bopt.release_kv ? 0 : add_sat(nk, nv);
  n = add_sat(n, mul_sat(add_sat(add_sat(nq, nkv), no), ts));
  n = add_sat(n, mul_sat(no, 8));
  n = add_sat(n, mul_sat(rows, 16));  // lse and D in float64
  // The gradients (dk and dv not when written as they complete), softmax_d and lse.
  n = add_sat(n, mul_sat(bopt.sink ? nq : add_sat(add_sat(nq, nk), nv), dtype_size(out)));
  n = add_sat(n, mul_sat(rows, 16));
  n = add_sat(n, plan_bytes(g, f));
  if (bopt.dbias) {
    n = add_sat(n, mul_sat(mul_sat(rows, g.sk), ts));
    if (opt.mask) n = add_sat(n, mul_sat(opt.mask->numel(), 8 + dtype_size(out)));
  }
  if (bopt.dscore_bias) n = add_sat(n, mul_sat(mul_sat(rows, g.sk), 8));  // its gradient
  if (bopt.dgate && opt.gate_input) {  // the factors' gradients, the gate's
    n = add_sat(n, mul_sat(rows, 8));
    for (const Tensor* t : {opt.gate_input, opt.gate_weight, opt.gate_bias, opt.gate_const}) {
      n = add_sat(n, mul_sat(t->numel(), 8 + dtype_size(out)));
    }
  }
  for (auto [want, table] : {std::pair{bopt.dt5_bias, opt.t5_bias},
                             std::pair{bopt.dclipped_bias, opt.clipped_bias}}) {
    if (!want || !table) continue;  // the sums by distance, the table's gradient
    n = add_sat(n, mul_sat(mul_sat(g.b * g.hq, g.sq + g.sk), 8));
    n = add_sat(n, mul_sat(table->numel(), 8 + dtype_size(out)));
  }
  const bool key_grid = opt.key_grid_h || opt.key_grid_w;
  const std::size_t kgh = key_grid ? opt.key_grid_h : opt.grid_h,
                    kgw = key_grid ? opt.key_grid_w : opt.grid_w;
  for (auto [want, table, qn, kn] : {std::tuple{bopt.drel_pos_h, opt.rel_pos_h, opt.grid_h, kgh},
                                     std::tuple{bopt.drel_pos_w, opt.rel_pos_w, opt.grid_w, kgw}}) {
    if (!want || !table) continue;
    // The items' sums of the resized table, their total, the table's gradient.
    const std::size_t rows = 2 * std::max(qn, kn);  // the resized rows and one
    n = add_sat(n, mul_sat(mul_sat(g.b * g.hk + 2, rows), g.d * 8));
    n = add_sat(n, mul_sat(table->numel(), 8 + dtype_size(out)));
  }
  if (g.rel_rows && (bopt.drelative_k || bopt.drelative_v)) {  // the items' sums, the tables
    const std::size_t R = g.rel_rows + 1, items = g.b * g.hk;
    const std::size_t nk = mul_sat(R * g.d, g.rel_k_per_head ? g.hq : 1);
    n = add_sat(n, mul_sat(mul_sat(items, add_sat(nk, R * g.dv)), ts));
    n = add_sat(n, mul_sat(add_sat(nk, R * g.dv), 8 + dtype_size(out)));
  }
  if (g.rel_rows) n = add_sat(n, mul_sat(mul_sat(tiles_for(g, bopt).q, g.rel_rows + 1), 4 * ts));
  n = add_sat(n, global_backward_bytes(g, opt, bopt, out));  // LongT5's side keys
  return add_sat(n, tile_bytes(g, tiles_for(g, bopt), bopt.dbias));
}

AttentionGrads backward_plain(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& grad_output, const AttentionOptions& opt,
                              const AttentionBackwardOptions& bopt) {
  refuse_unsupported(opt, bopt);
  require_float(q.dtype(), "q");
  require_float(k.dtype(), "k");
  require_float(v.dtype(), "v");
  if (is_fp8(q.dtype()) || is_fp8(k.dtype()) || is_fp8(v.dtype())) {
    throw UsageError("gradients: q, k and v in fp8 are not supported (as in FlashAttention-3, "
                     "whose fp8 path is forward only); widen them with posenc convert");
  }
  const AttentionOptions f = forward_options(opt);
  const Geometry g = check(q.shape(), k.shape(), &v.shape(), q.dtype(), f);
  const Shape o_shape = g.output_shape(q.shape());
  require_grad_output(grad_output, o_shape);
  const std::size_t need = plain_memory(q.shape(), k.shape(), v.shape(), q.dtype(), opt, bopt);
  require_gradient_budget(need, opt.max_memory);
  const Tiles t = tiles_for(g, bopt);
  const std::size_t workers =
      workers_within(opt.max_memory, need, tile_bytes(g, t, bopt.dbias));

  const std::size_t rows = g.b * g.hq * g.sq;
  std::vector<double> D;
  std::optional<SoftmaxDSink> d_sink;
  AttentionResult fwd;
  if (bopt.forward_output && bopt.forward_lse) {
    const Shape o_shape = g.output_shape(q.shape());
    if (bopt.forward_output->dtype() != DType::f64 || bopt.forward_output->shape() != o_shape ||
        bopt.forward_lse->shape() != g.lse_shape()) {
      throw std::invalid_argument(
          "attention_backward: forward_output must be float64 of the output's shape, "
          "forward_lse of the lse's");
    }
    fwd.output = Tensor::borrow(DType::f64, o_shape,
                                const_cast<std::byte*>(bopt.forward_output->bytes()));
    fwd.lse = Tensor::borrow(bopt.forward_lse->dtype(), bopt.forward_lse->shape(),
                             const_cast<std::byte*>(bopt.forward_lse->bytes()));
    record(fwd, g, f, q.dtype());  // what the forward would have recorded
  } else {
    // softmax_d from the forward's rows as they are stored (SoftmaxDSink), where O's rows
    // follow each other in b, h, s order; otherwise (or where the forward keeps O whole:
    // output_streamed false) from O below.
    const Strides os = strides_of(o_shape, g.axes);
    if (os.d == 1 && os.s == static_cast<std::ptrdiff_t>(g.dv) &&
        (g.hq == 1 || os.h == static_cast<std::ptrdiff_t>(g.sq * g.dv)) &&
        (g.b == 1 || os.b == static_cast<std::ptrdiff_t>(g.hq * g.sq * g.dv))) {
      D.assign(rows, 0.0);
      d_sink.emplace(grad_output, g.dv, D.data());
      AttentionOptions fs = f;
      fs.output_sink = [&](const TensorInfo& info) -> TensorSink* {
        return info.dtype == DType::f64 ? &*d_sink : nullptr;  // SoftmaxDSink reads f64 rows
      };
      fwd = attention(q, k, &v, fs);
    } else {
      fwd = attention(q, k, &v, f);
    }
  }
  AttentionGrads res;
  res.attrs = fwd.attrs;
  const DType out = opt.dtype.value_or(q.dtype());
  TensorSink *dk_sink = nullptr, *dv_sink = nullptr;
  if (bopt.sink) {
    if (g.axes.back() != 'd') {
      throw UsageError("gradients: dk and dv written as they complete need d as the last axis");
    }
    TensorInfo info;
    info.dtype = out;
    info.shape = k.shape();
    dk_sink = bopt.sink("dk", info);
    info.shape = v.shape();
    dv_sink = bopt.sink("dv", info);
    for (TensorSink* s : {dk_sink, dv_sink}) {
      if (s && !s->writes_at()) {
        throw std::invalid_argument("attention_backward: the sinks must take positional writes");
      }
    }
  }
  res.dq = Tensor(out, q.shape());
  prefer_huge_pages(res.dq);
  if (!bopt.sink) {
    res.dk = Tensor(out, k.shape());
    res.dv = Tensor(out, v.shape());
    prefer_huge_pages(res.dk);
    prefer_huge_pages(res.dv);
  }

  // softmax_d = rowsum(dO o O), in float64 (O is the forward's float64 result), unless
  // SoftmaxDSink took it from the forward's rows.
  if (!fwd.output_streamed) {
    D.assign(rows, 0.0);
    const Strides os = strides_of(o_shape, g.axes);
    const float* dO32 = grad_output.dtype() == DType::f32 ? grad_output.data<float>() : nullptr;
    const double* o64 = fwd.output.data<double>();  // the forward's output is float64
    for (std::size_t bi = 0; bi < g.b; ++bi)
      for (std::size_t h = 0; h < g.hq; ++h)
        for (std::size_t i = 0; i < g.sq; ++i) {
          const std::size_t base = bi * os.b + h * os.h + i * os.s;
          double sum = 0;
          if (dO32) {  // the common case without Tensor::get's dispatch per element
            for (std::size_t cc = 0; cc < g.dv; ++cc) {
              sum += static_cast<double>(dO32[base + cc * os.d]) * o64[base + cc * os.d];
            }
          } else {
            for (std::size_t cc = 0; cc < g.dv; ++cc) {
              sum += grad_output.get(base + cc * os.d) * fwd.output.get(base + cc * os.d);
            }
          }
          D[(bi * g.hq + h) * g.sq + i] = sum;
        }
  }
  std::vector<double> lse(rows);
  for (std::size_t i = 0; i < rows; ++i) lse[i] = fwd.lse.get(i);
  fwd.output = Tensor();
  res.softmax_d = Tensor(g.lse, g.lse_shape());
  res.lse = Tensor(g.lse, g.lse_shape());
  for (std::size_t i = 0; i < rows; ++i) {
    res.softmax_d.set(i, D[i]);
    res.lse.set(i, lse[i]);
  }

  auto go = [&](auto tag) {
    using T = decltype(tag);
    Ctx<T> c;
    plan(c.P, g, f, true);
    c.t = t;
    Tensor hq_, hk_, hv_, ho_;
    c.q = make_view<T>(q, g.axes, hq_);
    // Mapped K and V narrower than T (f16, bf16; f32 under f64), heads contiguous: widened
    // a key tile at a time rather than converted whole.
    const bool heads_first = g.axes.find('h') < g.axes.find('s') && g.axes.back() == 'd';
    auto narrower = [](DType t) {
      return t == dtype_of<T>() ||
             (is_float(t) && !is_fp8(t) && dtype_size(t) < dtype_size(dtype_of<T>()));
    };
    const bool widen = bopt.release_kv && heads_first && narrower(k.dtype()) &&
                       narrower(v.dtype()) &&
                       (k.dtype() != dtype_of<T>() || v.dtype() != dtype_of<T>());
    if (widen) {
      c.k_raw = k.bytes(), c.v_raw = v.bytes();
      c.k_dtype = k.dtype(), c.v_dtype = v.dtype();
    } else {
      c.k = make_view<T>(k, g.axes, hk_);
      c.v = make_view<T>(v, g.axes, hv_);
    }
    c.dO = make_view<T>(grad_output, g.axes, ho_);
    c.lse = std::move(lse);
    c.D = std::move(D);
    c.want_dbias = bopt.dbias;
    if (bopt.dscore_bias) {
      if (!opt.score_bias) {
        throw std::invalid_argument("attention_backward: dscore_bias needs opt.score_bias");
      }
      bopt.dscore_bias->assign(rows * g.sk, 0.0);
      c.dscore = bopt.dscore_bias->data();
    }
    c.dk_sink = dk_sink, c.dv_sink = dv_sink;
    c.keep_dk = c.keep_dv = !bopt.sink;
    // Only K and V used in place (no converted copy), a head's keys contiguous.
    c.release_kv = bopt.release_kv && heads_first &&
                   (widen || (static_cast<const void*>(c.k.p) == k.bytes() &&
                              static_cast<const void*>(c.v.p) == v.bytes()));
    c.k_shape = k.shape(), c.v_shape = v.shape();
    if (bopt.dbias) c.dsb.assign(rows * g.sk, T(0));
    if (bopt.dt5_bias || bopt.dclipped_bias) c.dt5.assign(g.b * g.hq * (g.sq + g.sk - 1), 0.0);
    if (bopt.dgate) c.dgate.assign(rows, 0.0);
    if (bopt.drel_pos_h) c.drh.assign(g.b * g.hk * c.P.dec.rh.size(), 0.0);
    if (bopt.drel_pos_w) c.drw.assign(g.b * g.hk * c.P.dec.rw.size(), 0.0);
    if (bopt.drelative_k) c.drk.assign(g.b * g.hk * c.P.rel_k.size(), T(0));
    if (bopt.drelative_v) c.drv.assign(g.b * g.hk * c.P.R * g.dv, T(0));
    c.global.init(c.P, bopt);
    run(c, res, workers);
    c.global.results(c.P, opt, out, res);  // LongT5's side keys
    if (bopt.dbias) {
      // dS summed over the axes the mask is broadcast along, in one fixed order.
      std::vector<double> acc(opt.mask->numel(), 0.0);
      const Plan<T>& P = c.P;
      for (std::size_t bi = 0; bi < g.b; ++bi)
        for (std::size_t h = 0; h < g.hq; ++h)
          for (std::size_t i = 0; i < g.sq; ++i) {
            const std::ptrdiff_t mbase = bi * P.m_b + h * P.m_h + i * P.m_i;
            const T* dr = c.dsb.data() + ((bi * g.hq + h) * g.sq + i) * g.sk;
            for (std::size_t j = 0; j < g.sk; ++j) acc[mbase + j * P.m_j] += dr[j];
          }
      res.dbias = Tensor(out, opt.mask->shape());
      for (std::size_t i = 0; i < acc.size(); ++i) res.dbias.set(i, acc[i]);
    }
    if (bopt.dt5_bias) {
      // d table[bucket, h] = the sum of dS over the pairs whose distance falls in the
      // bucket: the per-distance sums added bucket by bucket, batch then distance order.
      const std::size_t ndist = g.sq + g.sk - 1;
      const std::int64_t dmin = -(static_cast<std::int64_t>(g.sk) - 1);
      std::vector<double> acc(opt.t5_bias->numel(), 0.0);  // [buckets, hq]
      for (std::size_t bi = 0; bi < g.b; ++bi)
        for (std::size_t di = 0; di < ndist; ++di) {
          const std::int64_t bucket = t5_bucket(dmin + static_cast<std::int64_t>(di),
                                                opt.t5_bidirectional, opt.t5_buckets,
                                                opt.t5_max_distance);
          for (std::size_t h = 0; h < g.hq; ++h) {
            acc[static_cast<std::size_t>(bucket) * g.hq + h] += c.dt5[(bi * g.hq + h) * ndist + di];
          }
        }
      res.dt5_bias = Tensor(out, opt.t5_bias->shape());
      for (std::size_t i = 0; i < acc.size(); ++i) res.dt5_bias.set(i, acc[i]);
    }
    if (bopt.dgate) {
      GateGrads d = gate_grads(g, opt, c.dgate);
      for (auto [from, like, to] :
           {std::tuple{&d.input, opt.gate_input, &res.dgate_input},
            std::tuple{&d.weight, opt.gate_weight, &res.dgate_weight},
            std::tuple{&d.bias, opt.gate_bias, &res.dgate_bias},
            std::tuple{&d.constant, opt.gate_const, &res.dgate_const}}) {
        *to = Tensor(out, like->shape());
        for (std::size_t i = 0; i < from->size(); ++i) to->set(i, (*from)[i]);
      }
    }
    if (bopt.dclipped_bias) {
      // d table[row, h] = the sum of dS over the pairs whose clipped distance takes the
      // row, as dt5_bias by bucket: batch then distance order.
      const std::size_t ndist = g.sq + g.sk - 1;
      const std::int64_t dmin = -(static_cast<std::int64_t>(g.sk) - 1);
      const std::int64_t m = clipped_distance(opt);
      std::vector<double> acc(opt.clipped_bias->numel(), 0.0);  // [rows, hq]
      for (std::size_t bi = 0; bi < g.b; ++bi)
        for (std::size_t di = 0; di < ndist; ++di) {
          const auto row = static_cast<std::size_t>(
              clipped_row(dmin + static_cast<std::int64_t>(di), m, opt.clipped_symmetric));
          for (std::size_t h = 0; h < g.hq; ++h) {
            acc[row * g.hq + h] += c.dt5[(bi * g.hq + h) * ndist + di];
          }
        }
      res.dclipped_bias = Tensor(out, opt.clipped_bias->shape());
      for (std::size_t i = 0; i < acc.size(); ++i) res.dclipped_bias.set(i, acc[i]);
    }
    for (auto [want, items, table, to] :
         {std::tuple{bopt.drel_pos_h, &c.drh, opt.rel_pos_h, &res.drel_pos_h},
          std::tuple{bopt.drel_pos_w, &c.drw, opt.rel_pos_w, &res.drel_pos_w}}) {
      if (!want) continue;
      // The items' sums added in item order, then taken back through the resize.
      const std::size_t n = items->size() / (g.b * g.hk);
      std::vector<double> acc(n, 0.0);
      for (std::size_t it = 0; it < g.b * g.hk; ++it)
        for (std::size_t i = 0; i < n; ++i) acc[i] += (*items)[it * n + i];
      const std::vector<double> grad = resized_grad(acc, table->shape()[0], g.d);
      *to = Tensor(out, table->shape());
      for (std::size_t i = 0; i < grad.size(); ++i) to->set(i, grad[i]);
    }
    if (bopt.drelative_k || bopt.drelative_v) {
      // The items' sums added in item order; the zero row (zero_beyond) has none to give.
      const std::size_t items = g.b * g.hk, R = c.P.R, rows = g.rel_rows;
      if (bopt.drelative_k) {
        const std::size_t n = c.P.rel_k.size();
        std::vector<double> acc(n, 0.0);
        for (std::size_t it = 0; it < items; ++it)
          for (std::size_t i = 0; i < n; ++i) acc[i] += c.drk[it * n + i];
        res.drelative_k = Tensor(out, opt.relative_k->shape());
        if (c.P.rel_k_head) {  // [hq][R][d] to [rows, hq, d]
          for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t h = 0; h < g.hq; ++h)
              for (std::size_t x = 0; x < g.d; ++x) {
                res.drelative_k.set((r * g.hq + h) * g.d + x,
                                    acc[h * c.P.rel_k_head + r * g.d + x]);
              }
        } else {
          for (std::size_t i = 0; i < rows * g.d; ++i) res.drelative_k.set(i, acc[i]);
        }
      }
      if (bopt.drelative_v) {
        std::vector<double> acc(R * g.dv, 0.0);
        for (std::size_t it = 0; it < items; ++it)
          for (std::size_t i = 0; i < R * g.dv; ++i) acc[i] += c.drv[it * R * g.dv + i];
        res.drelative_v = Tensor(out, opt.relative_v->shape());
        for (std::size_t i = 0; i < rows * g.dv; ++i) res.drelative_v.set(i, acc[i]);
      }
    }
    if (opt.sinks) {
      // dL/dsink_h = -sum over b, i of p_sink D, p_sink = exp(sink_h - lse).
      res.dsinks = Tensor(out, opt.sinks->shape());
      for (std::size_t h = 0; h < g.hq; ++h) {
        const double sink = opt.sinks->get(h);
        double sum = 0;
        for (std::size_t bi = 0; bi < g.b; ++bi)
          for (std::size_t i = 0; i < g.sq; ++i) {
            const std::size_t row = (bi * g.hq + h) * g.sq + i;
            if (c.lse[row] == -kInf || sink == -kInf) continue;
            sum -= std::exp(sink - c.lse[row]) * c.D[row];
          }
        res.dsinks.set(h, sum);
      }
    }
  };
  if (g.compute == DType::f64) {
    go(double{});
  } else {
    go(float{});
  }
  res.attrs.push_back({"gradients", 1LL});
  return res;
}

// Q's shape with d widened by qv's dv: the concatenated query Q||qv (K||V likewise).
Shape widened(Shape s, const std::string& axes, std::size_t by) {
  s[axes.find('d')] += by;
  return s;
}

// Columns [c0, c0 + n) of t's axis d (of `axes`), in t's dtype.
Tensor slice_d(const Tensor& t, std::size_t c0, std::size_t n, const std::string& axes) {
  const std::size_t ax = axes.find('d');
  Shape shape = t.shape();
  const std::size_t w = shape[ax];
  shape[ax] = n;
  Tensor out(t.dtype(), shape);
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < ax; ++i) outer *= shape[i];
  for (std::size_t i = ax + 1; i < shape.size(); ++i) inner *= shape[i];
  const std::size_t item = dtype_size(t.dtype()), run = n * inner * item;
  for (std::size_t r = 0; r < outer && run; ++r) {
    std::memcpy(out.bytes() + r * run, t.bytes() + (r * w + c0) * inner * item, run);
  }
  return out;
}

// The bytes of qv's concatenated copies (at most: in float64 where the dtypes may differ)
// and of the four gradients in the output dtype.
std::size_t qv_extra_bytes(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                           const AttentionOptions& opt) {
  const DType out = opt.dtype.value_or(q_dtype);
  const DType qc = opt.qv->dtype() == q_dtype ? q_dtype : DType::f64;
  const std::size_t nq = checked_numel(q, 1, "attention"), nk = checked_numel(k, 1, "attention"),
                    nv = checked_numel(v, 1, "attention"), nqv = opt.qv->numel();
  std::size_t n = mul_sat(add_sat(nq, nqv), dtype_size(qc));
  n = add_sat(n, mul_sat(add_sat(nk, nv), 8));
  return add_sat(n, mul_sat(add_sat(add_sat(nq, nqv), add_sat(nk, nv)), dtype_size(out)));
}

AttentionOptions qv_inner(const AttentionOptions& opt) {
  AttentionOptions inner = opt;
  inner.qv = nullptr;
  inner.dtype = DType::f64;  // the parts are added, then rounded once
  return inner;
}

// qv: the backward of Q||qv over K||V (the scale's default 1/sqrt(d + dv) is the
// concatenation's own), its gradients split along d and dv's two parts added in float64.
AttentionGrads backward_qv(const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& grad_output, const AttentionOptions& opt,
                           const AttentionBackwardOptions& bopt) {
  refuse_unsupported(opt, bopt);
  if (bopt.sink || bopt.forward_output || bopt.release_kv) {
    // dk and dv are parts of the concatenated key's gradient and dv a sum: held whole.
    throw UsageError("gradients: qv's are computed in memory (no sinks, forward or released K, V)");
  }
  for (const auto& [t, what] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"},
                                {&v, "v"}, {opt.qv, "qv"}}) {
    require_float(t->dtype(), what);
    if (is_fp8(t->dtype())) {
      throw UsageError(fmt::format(
          "gradients: {} in fp8 is not supported (as in FlashAttention-3, whose fp8 path is "
          "forward only); widen it with posenc convert", what));
    }
  }
  AttentionOptions plain = forward_options(opt);
  plain.qv = nullptr;
  const Geometry g = check(q.shape(), k.shape(), &v.shape(), q.dtype(), plain);
  const Shape want = g.output_shape(q.shape());
  if (opt.qv->shape() != want) {
    throw InputError(fmt::format("qv: shape {} must be Q's with dv, {}",
                                 shape_str(opt.qv->shape()), shape_str(want)));
  }
  if (!opt.allow_nonfinite && opt.qv->has_nonfinite()) throw nonfinite_input("qv");
  const std::size_t extra = qv_extra_bytes(q.shape(), k.shape(), v.shape(), q.dtype(), opt);
  const std::size_t need = attention_backward_memory(q.shape(), k.shape(), v.shape(), q.dtype(),
                                                     opt, bopt);
  require_gradient_budget(need, opt.max_memory);
  const Tensor qc = concat_d(q, *opt.qv, g.axes), kc = concat_d(k, v, g.axes);
  AttentionOptions inner = qv_inner(opt);
  if (opt.max_memory) inner.max_memory = std::max<std::size_t>(1, opt.max_memory - extra);
  AttentionGrads c = backward_plain(qc, kc, v, grad_output, inner, bopt);
  const DType out = opt.dtype.value_or(q.dtype());
  AttentionGrads res;
  res.attrs = std::move(c.attrs);
  res.attrs.push_back({"qv", 1LL});
  res.dq = cast(slice_d(c.dq, 0, g.d, g.axes), out);
  res.dqv = cast(slice_d(c.dq, g.d, g.dv, g.axes), out);
  res.dk = cast(slice_d(c.dk, 0, g.d, g.axes), out);
  // V's gradient through P.V and through the scores' qv.v term, added in one fixed order.
  Tensor dv = slice_d(c.dk, g.d, g.dv, g.axes);
  double* a = dv.data<double>();
  const double* b = c.dv.data<double>();
  for (std::size_t i = 0; i < dv.numel(); ++i) a[i] = b[i] + a[i];
  res.dv = cast(dv, out);
  for (auto [from, to] : {std::pair<Tensor*, Tensor*>{&c.dbias, &res.dbias},
                          {&c.dsinks, &res.dsinks},
                          {&c.dt5_bias, &res.dt5_bias},
                          {&c.dclipped_bias, &res.dclipped_bias},
                          {&c.drel_pos_h, &res.drel_pos_h},
                          {&c.drel_pos_w, &res.drel_pos_w}}) {
    if (from->ndim() > 0 || from->numel() > 0) *to = cast(*from, out);
  }
  // float64 as the backward without qv gives them, whatever the output type.
  res.softmax_d = std::move(c.softmax_d);
  res.lse = std::move(c.lse);
  return res;
}

// A sink taking float64 positional writes and passing them on rounded to `out`: the
// rounding cast() gives a held gradient, value by value.
class RoundingSink final : public TensorSink {
 public:
  RoundingSink(TensorSink& to, DType out) : to_(to), out_(out) {}
  bool writes_at() const override { return true; }
  void write_rows(const void*, std::size_t) override {
    throw std::logic_error("RoundingSink: the gradients come by positional writes");
  }
  void write_at(std::size_t first, const void* src, std::size_t count) override {
    thread_local std::vector<std::byte> buf;
    buf.resize(count * dtype_size(out_));
    cast(static_cast<const std::byte*>(src), DType::f64, buf.data(), out_, count);
    to_.write_at(first, buf.data(), count);
  }
  void commit() override {}

 private:
  TensorSink& to_;
  DType out_;
};

// Gemma-3n audio: what the backward of the data attention() makes of per_dim_scale and
// relative_proj (attention_timing: Q scaled per dimension, a per-head relative_k table)
// takes besides, and its options (gradients in float64, rounded once by the chain rule).
AttentionBackwardOptions timing_inner(const AttentionBackwardOptions& bopt) {
  AttentionBackwardOptions ib = bopt;
  ib.dper_dim_scale = ib.drelative_proj = false;
  ib.drelative_k = bopt.drelative_proj;  // the projected table's gradient
  return ib;
}

std::size_t timing_extra_bytes(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                               const AttentionOptions& opt, const AttentionBackwardOptions& bopt) {
  const std::size_t out = dtype_size(opt.dtype.value_or(q_dtype));
  const std::size_t nq = checked_numel(q, 1, "attention"), nk = checked_numel(k, 1, "attention"),
                    nv = checked_numel(v, 1, "attention");
  // The rounded gradients (dk and dv not when written as they complete).
  std::size_t n = mul_sat(bopt.sink ? nq : add_sat(add_sat(nq, nk), nv), out);
  if (opt.per_dim_scale) n = add_sat(n, mul_sat(opt.per_dim_scale->numel(), 8 * 3 + out));
  if (opt.relative_proj) n = add_sat(n, mul_sat(opt.relative_proj->numel(), 8 + out));
  return n;
}

AttentionOptions timing_memory_options(const AttentionOptions& opt) {
  AttentionOptions o = opt;
  o.dtype = DType::f64;  // the inner gradients
  return o;
}

// The gradients through per_dim_scale (q' = q softplus(w) per dimension of d) and
// relative_proj (relative_k[r, h, c] = sum_e proj[h d + c, e] timing(r)[e]): the backward
// of q' and the table, then dq = dq' softplus(w), dw[c] = softplus'(w[c]) sum dq'[., c]
// q[., c] (torch's softplus backward: 1 above the threshold 20, else e^w / (e^w + 1)),
// and the projection's gradient from the table's, all in float64 before one rounding.
AttentionGrads backward_timing(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& grad_output, const AttentionOptions& opt,
                               const AttentionBackwardOptions& bopt) {
  refuse_unsupported(opt, bopt);
  require_float(q.dtype(), "q");
  const Geometry g = check(q.shape(), k.shape(), &v.shape(), q.dtype(), forward_options(opt));
  if (!opt.allow_nonfinite) require_finite(q, nullptr, nullptr, opt);  // and the tables
  const std::size_t need =
      attention_backward_memory(q.shape(), k.shape(), v.shape(), q.dtype(), opt, bopt);
  require_gradient_budget(need, opt.max_memory);
  TimingInputs t;
  timing_inputs(t, q, g, opt);
  AttentionOptions inner = t.opt;
  inner.dtype = DType::f64;
  if (opt.max_memory) {
    const std::size_t extra =
        timing_extra_bytes(q.shape(), k.shape(), v.shape(), q.dtype(), opt, bopt);
    inner.max_memory = std::max<std::size_t>(1, opt.max_memory - std::min(extra, opt.max_memory));
  }
  const DType out = opt.dtype.value_or(q.dtype());
  // dk and dv (no chain rule of their own) to the caller's sinks, each float64 value
  // rounded to the output dtype as they would be held.
  AttentionBackwardOptions ib = timing_inner(bopt);
  std::deque<RoundingSink> rounding;  // stable addresses, whatever the number of sinks
  if (bopt.sink) {
    ib.sink = [&](const std::string& name, const TensorInfo& info) -> TensorSink* {
      TensorInfo to = info;
      to.dtype = out;
      TensorSink* s = bopt.sink(name, to);
      return s ? &rounding.emplace_back(*s, out) : nullptr;
    };
  }
  AttentionGrads c = backward_plain(t.q.numel() ? t.q : q, k, v, grad_output, inner, ib);
  AttentionGrads res;
  res.attrs = std::move(c.attrs);
  if (opt.per_dim_scale) {
    res.attrs.push_back({"per_dim_scale", 1LL});
    const std::size_t da = g.axes.find('d');
    std::size_t inner_n = 1;
    for (std::size_t a = da + 1; a < q.ndim(); ++a) inner_n *= q.shape()[a];
    std::vector<double> factor(g.d), slope(g.d), dw(g.d, 0.0);
    for (std::size_t x = 0; x < g.d; ++x) {
      const double w = opt.per_dim_scale->get(x);
      factor[x] = softplus(w);
      const double z = std::exp(w);
      slope[x] = w > 20.0 ? 1.0 : z / (z + 1.0);
    }
    Tensor& dq = c.dq;  // float64, Q's shape
    double* p = dq.data<double>();
    for (std::size_t i = 0; i < dq.numel(); ++i) {  // in index order: the sums' order is fixed
      const std::size_t x = (i / inner_n) % g.d;
      dw[x] += p[i] * q.get(i);
      p[i] *= factor[x];
    }
    if (bopt.dper_dim_scale) {
      res.dper_dim_scale = Tensor(out, opt.per_dim_scale->shape());
      for (std::size_t x = 0; x < g.d; ++x) res.dper_dim_scale.set(x, dw[x] * slope[x]);
    }
  }
  if (opt.relative_proj) {
    res.attrs.push_back({"relative_proj", 1LL});
    if (bopt.drelative_proj) {
      const std::vector<double> d = relative_proj_grad(g, *opt.relative_proj, c.drelative_k);
      res.drelative_proj = Tensor(out, opt.relative_proj->shape());
      for (std::size_t i = 0; i < d.size(); ++i) res.drelative_proj.set(i, d[i]);
    }
  }
  res.dq = cast(c.dq, out);
  if (!bopt.sink) {
    res.dk = cast(c.dk, out);
    res.dv = cast(c.dv, out);
  }
  for (auto [from, to] : {std::pair<Tensor*, Tensor*>{&c.dbias, &res.dbias},
                          {&c.dsinks, &res.dsinks},
                          {&c.dt5_bias, &res.dt5_bias},
                          {&c.drelative_v, &res.drelative_v},
                          {&c.dclipped_bias, &res.dclipped_bias},
                          {&c.drel_pos_h, &res.drel_pos_h},
                          {&c.drel_pos_w, &res.drel_pos_w},
                          {&c.dgate_input, &res.dgate_input},
                          {&c.dgate_weight, &res.dgate_weight},
                          {&c.dgate_bias, &res.dgate_bias},
                          {&c.dgate_const, &res.dgate_const},
                          {&c.dglobal_k, &res.dglobal_k},
                          {&c.dglobal_v, &res.dglobal_v},
                          {&c.dglobal_bias, &res.dglobal_bias}}) {
    if (from->ndim() > 0 || from->numel() > 0) *to = cast(*from, out);
  }
  res.softmax_d = std::move(c.softmax_d);
  res.lse = std::move(c.lse);
  return res;
}

}  // namespace

std::size_t attention_backward_memory(const Shape& q, const Shape& k, const Shape& v,
                                      DType q_dtype, const AttentionOptions& opt,
                                      const AttentionBackwardOptions& bopt) {
  if (is_varlen(opt)) return varlen_backward_memory(q, k, v, q_dtype, opt, bopt);  // per sequence
  if (opt.per_dim_scale || opt.relative_proj) {
    return add_sat(plain_memory(q, k, v, q_dtype, timing_memory_options(opt), timing_inner(bopt)),
                   timing_extra_bytes(q, k, v, q_dtype, opt, bopt));
  }
  if (!opt.qv) return plain_memory(q, k, v, q_dtype, opt, bopt);
  AttentionOptions plain = forward_options(opt);
  plain.qv = nullptr;
  const Geometry g = check(q, k, &v, q_dtype, plain);
  const DType qc = opt.qv->dtype() == q_dtype ? q_dtype : DType::f64;
  const std::size_t inner =
      plain_memory(widened(q, g.axes, g.dv), widened(k, g.axes, g.dv), v, qc, qv_inner(opt), bopt);
  return add_sat(inner, qv_extra_bytes(q, k, v, q_dtype, opt));
}

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, const AttentionOptions& opt,
                                  const AttentionBackwardOptions& bopt) {
  relative_detail::refuse_relative_gradients(bopt);  // their tensors come with XlAttention, ...
  if (is_varlen(opt)) return attention_varlen_backward(q, k, v, grad_output, opt, bopt);
  if (opt.per_dim_scale || opt.relative_proj) {
    return backward_timing(q, k, v, grad_output, opt, bopt);
  }
  return opt.qv ? backward_qv(q, k, v, grad_output, opt, bopt)
                : backward_plain(q, k, v, grad_output, opt, bopt);
}

void check_forward_given(bool relative_terms, const Caller& c) {
  const std::string o = c.term("forward_output"), lse = c.term("forward_lse");
  if (!c.gave("forward_output") && !c.gave("forward_lse")) return;
  if (c.gave("forward_output") != c.gave("forward_lse")) {
    throw UsageError(fmt::format("{}: needs {} (FlashAttention's out and softmax_lse go together)",
                                 c.gave("forward_output") ? o : lse,
                                 c.gave("forward_output") ? lse : o));
  }
  if (!c.gave("grad_output")) {
    throw UsageError(fmt::format("{}/{}: need {} (the forward of a backward pass)", o, lse,
                                 c.term("grad_output")));
  }
  const char* own = c.gave("qv") ? "qv"
                    : c.gave("cu_seqlens_q") ? "cu_seqlens_q"
                    : c.gave("cu_seqlens_k") ? "cu_seqlens_k"
                                             : nullptr;
  if (own || relative_terms) {
    throw UsageError(fmt::format(
        "{}: not with {} (its backward runs a forward of its own)", o,
        own ? c.term(own) : "the Transformer-XL / XLNet / Funnel or DeBERTa terms"));
  }
}

void check_forward_shapes(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                          const AttentionOptions& opt, const TensorInfo& o,
                          const TensorInfo& lse, const Caller& c) {
  const Geometry g = check(q, k, &v, q_dtype, forward_options(opt));
  const Shape o_shape = g.output_shape(q);
  if (!is_float(o.dtype)) {
    throw InputError(fmt::format("{}: dtype {} is not a float type", c.term("forward_output"),
                                 dtype_name(o.dtype)));
  }
  if (o.shape != o_shape) {
    throw InputError(fmt::format("{}: shape {} is not the output's {}", c.term("forward_output"),
                                 shape_str(o.shape), shape_str(o_shape)));
  }
  if (lse.dtype != DType::f32 && lse.dtype != DType::f64) {
    throw InputError(fmt::format("{}: dtype {} is not f32 or f64", c.term("forward_lse"),
                                 dtype_name(lse.dtype)));
  }
  if (lse.shape != g.lse_shape()) {
    throw InputError(fmt::format("{}: shape {} is not the lse's {}", c.term("forward_lse"),
                                 shape_str(lse.shape), shape_str(g.lse_shape())));
  }
}

const std::vector<GradientField>& gradient_fields() {
  using G = AttentionGrads;
  using B = AttentionBackwardOptions;
  using K = GradientKind;
  static const std::vector<GradientField> fields = {
      {"dq", &G::dq, nullptr, K::rows},
      {"dk", &G::dk, nullptr, K::rows},
      {"dv", &G::dv, nullptr, K::rows},
      {"softmax_d", &G::softmax_d, nullptr, K::stat},
      {"lse", &G::lse, nullptr, K::stat},
      {"dbias", &G::dbias, &B::dbias, K::parameter},
      {"dsinks", &G::dsinks, nullptr, K::parameter},
      {"dt5_bias", &G::dt5_bias, &B::dt5_bias, K::parameter},
      {"dqv", &G::dqv, nullptr, K::rows},
      {"drelative_k", &G::drelative_k, &B::drelative_k, K::parameter},
      {"drelative_v", &G::drelative_v, &B::drelative_v, K::parameter},
      {"drel_keys", &G::drel_keys, &B::drel_keys, K::parameter},
      {"dcontent_bias", &G::dcontent_bias, &B::dcontent_bias, K::parameter},
      {"dposition_bias", &G::dposition_bias, &B::dposition_bias, K::parameter},
      {"dsegment_embed", &G::dsegment_embed, &B::dsegment_embed, K::parameter},
      {"dsegment_bias", &G::dsegment_bias, &B::dsegment_bias, K::parameter},
      {"drel_kernel", &G::drel_kernel, &B::drel_kernel, K::parameter},
      {"dpos_key", &G::dpos_key, &B::dpos_key, K::parameter},
      {"dpos_query", &G::dpos_query, &B::dpos_query, K::parameter},
      {"dphi", &G::dphi, &B::dfactorized, K::parameter},
      {"dpi", &G::dpi, &B::dfactorized, K::parameter},
      {"dpsi", &G::dpsi, &B::dfactorized, K::parameter},
      {"domega", &G::domega, &B::dfactorized, K::parameter},
      {"dclipped_bias", &G::dclipped_bias, &B::dclipped_bias, K::parameter},
      {"drel_pos_h", &G::drel_pos_h, &B::drel_pos_h, K::parameter},
      {"drel_pos_w", &G::drel_pos_w, &B::drel_pos_w, K::parameter},
      {"dper_dim_scale", &G::dper_dim_scale, &B::dper_dim_scale, K::parameter},
      {"drelative_proj", &G::drelative_proj, &B::drelative_proj, K::parameter},
      {"dgate_input", &G::dgate_input, &B::dgate, K::rows},
      {"dgate_weight", &G::dgate_weight, &B::dgate, K::parameter},
      {"dgate_bias", &G::dgate_bias, &B::dgate, K::parameter},
      {"dgate_const", &G::dgate_const, &B::dgate, K::parameter},
      {"dglobal_k", &G::dglobal_k, &B::dglobal_kv, K::rows},
      {"dglobal_v", &G::dglobal_v, &B::dglobal_kv, K::rows},
      {"dglobal_bias", &G::dglobal_bias, &B::dglobal_bias, K::parameter},
  };
  return fields;
}

const GradientField* find_gradient(const std::string& name) {
  for (const GradientField& f : gradient_fields()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

std::string gradient_names() {
  std::string out;
  for (const GradientField& f : gradient_fields())
    out += (out.empty() ? "" : ", ") + std::string(f.name);
  return out;
}

AttentionBackwardOptions gradients_wanted(const std::vector<std::string>& names,
                                          AttentionBackwardOptions bopt) {
  for (const std::string& n : names) {
    const GradientField* f = find_gradient(n);
    if (f != nullptr && f->wanted != nullptr) bopt.*(f->wanted) = true;
  }
  return bopt;
}

Tensor& AttentionGrads::named(const std::string& name) {
  const GradientField* f = find_gradient(name);
  if (f == nullptr) throw std::out_of_range("AttentionGrads: no tensor named " + name);
  return this->*(f->member);
}

}  // namespace posenc
