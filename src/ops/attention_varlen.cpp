// FlashAttention's varlen form (attention_varlen.hpp): the packed rows of each sequence
// are borrowed as tensors of their own and computed by attention() as a run of their
// own, so that the alignments, windows, chunks, sink tokens and biases by position of
// every rule posenc knows follow the sequence's lengths (FlashAttention's sk_b - sq_b)
// without a second statement of them, and a sequence's rows are the bytes of its run.
#include "ops/attention_varlen.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "ops/attention_geometry.hpp"
#include "ops/attention_io.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/ops/cast.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc::attention_detail {

namespace {

// A run cut into its sequences: the boundaries, the rows used, the per-sequence options.
struct Varlen {
  std::vector<std::int64_t> cq, ck;  // boundaries [n + 1]
  std::vector<std::int64_t> uq, uk;  // rows used of each sequence [n]
  std::size_t n = 0;
  std::string axes;
  AttentionOptions sub;  // one sequence's options
  std::vector<AttentionEmit> emit;
  DType out = DType::f32, lse = DType::f32;
  bool has_h = false;
  std::size_t hq = 1;
};

std::size_t row_elems(const Shape& s) {
  std::size_t e = 1;
  for (std::size_t i = 1; i < s.size(); ++i) e *= s[i];
  return e;
}

Shape with_rows(Shape s, std::size_t rows) {
  s[0] = rows;
  return s;
}

// Rows [row0, row0 + rows) of t (C order, rows along the first axis), borrowed.
Tensor rows_of(const Tensor& t, std::int64_t row0, std::int64_t rows) {
  const std::size_t row = row_elems(t.shape()) * dtype_size(t.dtype());
  return Tensor::borrow(t.dtype(), with_rows(t.shape(), static_cast<std::size_t>(rows)),
                        const_cast<std::byte*>(t.bytes()) + static_cast<std::size_t>(row0) * row);
}

std::vector<std::int64_t> boundaries(const Tensor& t, const char* what, std::size_t total) {
  if (t.dtype() != DType::i32 && t.dtype() != DType::i64) {
    throw InputError(
        fmt::format("{}: expected int32 or int64 boundaries, got {}", what, dtype_name(t.dtype())));
  }
  if (t.ndim() != 1 || t.numel() == 0) {
    throw InputError(fmt::format("{}: expected a 1-D list of n + 1 boundaries, got shape {}", what,
                                 shape_str(t.shape())));
  }
  std::vector<std::int64_t> c(t.numel());
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<std::int64_t>(t.get(i));
  if (c[0] != 0) throw InputError(fmt::format("{}: must start at 0, got {}", what, c[0]));
  for (std::size_t i = 1; i < c.size(); ++i) {
    if (c[i] < c[i - 1]) {
      throw InputError(fmt::format("{}: boundaries must not decrease ({} after {}, at {})", what,
                                   c[i], c[i - 1], i));
    }
  }
  if (c.back() != static_cast<std::int64_t>(total)) {
    throw InputError(
        fmt::format("{}: ends at {}, but the packed tensor has {} rows", what, c.back(), total));
  }
  return c;
}

std::vector<std::int64_t> used(const Tensor* t, const char* what,
                               const std::vector<std::int64_t>& c) {
  const std::size_t n = c.size() - 1;
  std::vector<std::int64_t> u(n);
  for (std::size_t b = 0; b < n; ++b) u[b] = c[b + 1] - c[b];
  if (!t) return u;
  if (!is_integer(t->dtype()) || t->ndim() != 1 || t->numel() != n) {
    throw InputError(fmt::format("{}: expected {} integers (one per sequence), got {} of shape {}",
                                 what, n, dtype_name(t->dtype()), shape_str(t->shape())));
  }
  for (std::size_t b = 0; b < n; ++b) {
    const double x = t->get(b);
    if (!(x >= 0) || x > static_cast<double>(u[b])) {
      throw InputError(
          fmt::format("{}: length {} of sequence {} is outside [0, {}]", what, x, b, u[b]));
    }
    u[b] = static_cast<std::int64_t>(x);
  }
  return u;
}

Varlen prepare(const Shape& qs, const Shape& ks, const Shape* vs, DType q_dtype,
               const AttentionOptions& opt) {
  if (!opt.cu_seqlens_q || !opt.cu_seqlens_k) {
    throw UsageError(fmt::format("{}: needs {} too (the varlen form has both)",
                                 opt.cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k",
                                 opt.cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q"));
  }
  // Tensors over the batch or the whole packed rows cannot follow each sequence.
  const std::pair<bool, const char*> no[] = {
      {!opt.cu_seqlens.empty(), "cu_seqlens (HF's packed form; this is FlashAttention's)"},
      {opt.key_lengths != nullptr, "key_lengths (seqused_k is the per-sequence form)"},
      {opt.mask != nullptr, "mask"},
      {opt.score_bias != nullptr, "relative score terms"},
      {opt.global_k != nullptr, "global_kv"},
      {opt.gate_input != nullptr, "wavlm_gate"},
      {opt.rel_pos_h != nullptr, "decomposed_rel_pos"},
      {opt.arith != Arith::exact, "arith hf (exact arithmetic per sequence)"}};
  for (const auto& [bad, name] : no) {
    if (bad) throw UsageError(fmt::format("cu_seqlens_q: not with {}", name));
  }
  Varlen L;
  L.emit = opt.emit;
  if (L.emit.empty()) L.emit = {vs ? AttentionEmit::output : AttentionEmit::lse};
  for (AttentionEmit e : L.emit) {
    if (e == AttentionEmit::logits || e == AttentionEmit::probs) {
      throw UsageError(
          fmt::format("emit: {} not with cu_seqlens_q (the sequences' scores "
                      "differ in shape; emit output and lse)",
                      attention_emit_name(e)));
    }
    if (e == AttentionEmit::output && !vs) throw UsageError("emit: output needs values (-v)");
  }
  if (qs.size() != 2 && qs.size() != 3) {
    throw InputError(
        fmt::format("q: expected packed [total_q, hq, d] (or [total_q, d]) for "
                    "cu_seqlens_q, got shape {}",
                    shape_str(qs)));
  }
  L.axes = opt.axes.empty() ? (qs.size() == 3 ? "shd" : "sd")
                            : resolve_axes(opt.axes, qs.size(), "q").letters;
  if (L.axes.find('b') != std::string::npos || L.axes[0] != 's') {
    throw UsageError(
        fmt::format("axes {}: cu_seqlens_q packs the sequences along s, the first "
                    "axis, without b (shd, FlashAttention's thd)",
                    L.axes));
  }
  for (const auto& [s, what] : {std::pair{&ks, "k"}, std::pair{vs, "v"}}) {
    if (s && s->size() != qs.size()) {
      throw InputError(
          fmt::format("{}: expected rank {} as q, got shape {}", what, qs.size(), shape_str(*s)));
    }
  }
  if (vs && (*vs)[0] != ks[0]) {
    throw InputError(fmt::format("v: {} rows, k has {} (shape {} against {})", (*vs)[0], ks[0],
                                 shape_str(*vs), shape_str(ks)));
  }
  L.cq = boundaries(*opt.cu_seqlens_q, "cu_seqlens_q", qs[0]);
  L.ck = boundaries(*opt.cu_seqlens_k, "cu_seqlens_k", ks[0]);
  if (L.cq.size() != L.ck.size()) {
    throw InputError(fmt::format("cu_seqlens_k: {} sequences, cu_seqlens_q has {}", L.ck.size() - 1,
                                 L.cq.size() - 1));
  }
  L.n = L.cq.size() - 1;
  L.uq = used(opt.seqused_q, "seqused_q", L.cq);
  L.uk = used(opt.seqused_k, "seqused_k", L.ck);
  if (opt.qv && (opt.qv->ndim() != qs.size() || opt.qv->shape()[0] != qs[0])) {
    throw InputError(fmt::format("qv: expected packed rows as q ({} of them), got shape {}", qs[0],
                                 shape_str(opt.qv->shape())));
  }
  for (const auto& [t, what] :
       {std::pair{opt.q_descale, "q_descale"}, std::pair{opt.k_descale, "k_descale"},
        std::pair{opt.v_descale, "v_descale"}}) {
    if (t && (t->ndim() != 2 || t->shape()[0] != L.n)) {
      throw InputError(fmt::format("{}: expected one row per sequence, [{}, hk], got shape {}",
                                   what, L.n, shape_str(t->shape())));
    }
  }
  if (const Tensor* t = opt.alibi_slopes; t && t->ndim() == 2 && t->shape()[0] != L.n) {
    throw InputError(fmt::format("alibi_slopes: expected [hq] or one row per sequence, "
                                 "[{}, hq], got shape {}",
                                 L.n, shape_str(t->shape())));
  }
  L.sub = opt;
  L.sub.cu_seqlens_q = L.sub.cu_seqlens_k = nullptr;
  L.sub.seqused_q = L.sub.seqused_k = nullptr;
  L.sub.axes = L.axes;
  L.sub.emit = L.emit;
  L.sub.output_sink = nullptr;
  L.out = opt.dtype.value_or(q_dtype);
  L.lse = L.out == DType::f64 ? DType::f64 : DType::f32;
  L.has_h = L.axes.find('h') != std::string::npos;
  if (L.has_h) L.hq = qs[L.axes.find('h')];
  return L;
}

// Sequence b's options: its own sink tokens (FlashAttention's are the first of each
// sequence's keys, so at most its own), its rows of qv, its row of the fp8 descales.
struct SeqOptions {
  AttentionOptions opt;
  std::optional<Tensor> qv, descale[3], slopes;
};

void seq_options(SeqOptions& so, const Varlen& L, const AttentionOptions& opt, std::size_t b) {
  so.opt = L.sub;
  so.opt.sink_tokens = std::min<std::int64_t>(opt.sink_tokens, L.uk[b]);
  if (opt.qv) {
    so.qv = rows_of(*opt.qv, L.cq[b], L.uq[b]);
    so.opt.qv = &*so.qv;
  }
  const Tensor* AttentionOptions::*ds[] = {
      &AttentionOptions::q_descale, &AttentionOptions::k_descale, &AttentionOptions::v_descale};
  for (int i = 0; i < 3; ++i) {
    if (!(opt.*ds[i])) continue;
    so.descale[i] = rows_of(*(opt.*ds[i]), static_cast<std::int64_t>(b), 1);
    so.opt.*ds[i] = &*so.descale[i];
  }
  if (opt.alibi_slopes && opt.alibi_slopes->ndim() == 2) {
    so.slopes = rows_of(*opt.alibi_slopes, static_cast<std::int64_t>(b), 1);
    so.opt.alibi_slopes = &*so.slopes;
  }
}

// Sequence b's used rows of Q, K and V (and of dO: Q's rows), borrowed, and its options:
// what each run of the forward and of the backward is given.
struct Sequence {
  std::int64_t nq = 0, nk = 0;
  std::optional<Tensor> q, k, v, dO;
  SeqOptions so;
};

void borrow_sequence(Sequence& s, const Varlen& L, const AttentionOptions& opt, std::size_t b,
                     const Tensor& q, const Tensor& k, const Tensor* v, const Tensor* dO) {
  s.nq = L.uq[b], s.nk = L.uk[b];
  s.q = rows_of(q, L.cq[b], s.nq);
  s.k = rows_of(k, L.ck[b], s.nk);
  if (v) s.v = rows_of(*v, L.ck[b], s.nk);
  if (dO) s.dO = rows_of(*dO, L.cq[b], s.nq);
  seq_options(s.so, L, opt, b);
}

// The packed outputs' bytes.
std::size_t packed_bytes(const Varlen& L, const Shape& qs, const Shape* vs) {
  std::size_t bytes = 0;
  for (AttentionEmit e : L.emit) {
    if (e == AttentionEmit::output) {
      bytes += qs[0] * row_elems(qs) / qs.back() * vs->back() * dtype_size(L.out);
    } else {
      bytes += qs[0] * L.hq * dtype_size(L.lse);
    }
  }
  return bytes;
}

}  // namespace

std::pair<std::size_t, std::string> varlen_memory(const Shape& q, const Shape& k, const Shape* v,
                                                  DType q_dtype, const AttentionOptions& opt) {
  const Varlen L = prepare(q, k, v, q_dtype, opt);
  std::pair<std::size_t, std::string> most{0, ""};
  for (std::size_t b = 0; b < L.n; ++b) {
    const Shape vb = v ? with_rows(*v, L.uk[b]) : Shape{};
    SeqOptions so;
    seq_options(so, L, opt, b);
    auto m = attention_memory(with_rows(q, L.uq[b]), with_rows(k, L.uk[b]), v ? &vb : nullptr,
                              q_dtype, so.opt);
    if (m.first > most.first) most = m;
  }
  most.first += packed_bytes(L, q, v);
  most.second = most.second.empty()
                    ? "the packed outputs"
                    : "the packed outputs and the largest sequence's " + most.second;
  return most;
}

AttentionResult attention_varlen(const Tensor& q, const Tensor& k, const Tensor* v,
                                 const AttentionOptions& opt) {
  Varlen L = prepare(q.shape(), k.shape(), v ? &v->shape() : nullptr, q.dtype(), opt);
  const std::size_t packed = packed_bytes(L, q.shape(), v ? &v->shape() : nullptr);
  if (opt.max_memory) {
    if (packed > opt.max_memory) {
      throw InputError(fmt::format("the packed outputs would need {} > max_memory {}",
                                   bytes_str(packed), bytes_str(opt.max_memory)));
    }
    L.sub.max_memory = opt.max_memory - packed;
  }
  const std::size_t total_q = q.shape()[0];
  AttentionResult res;
  const bool nan_rows = opt.masked_rows == MaskedRows::nan;
  const bool emit_output =
      std::find(L.emit.begin(), L.emit.end(), AttentionEmit::output) != L.emit.end();
  const bool emit_lse = std::find(L.emit.begin(), L.emit.end(), AttentionEmit::lse) != L.emit.end();
  // The packed outputs take the dtypes the runs give (lse is f32 under the FlashAttention
  // baseline whatever the output is): allocated with the first run.
  bool allocated = false;
  auto allocate = [&](DType out, DType lse) {
    allocated = true;
    if (emit_output) {
      Shape s = q.shape();
      s.back() = v->shape().back();
      res.output = Tensor(out, s);
      // Query rows past seqused_q are fully masked rows: 0 (NaN under MaskedRows::nan).
      std::memset(res.output.bytes(), 0, res.output.nbytes());
      for (std::size_t i = 0; nan_rows && i < res.output.numel(); ++i) {
        res.output.set(i, std::numeric_limits<double>::quiet_NaN());
      }
    }
    if (emit_lse) {
      res.lse = L.has_h ? Tensor(lse, Shape{L.hq, total_q}) : Tensor(lse, Shape{total_q});
      for (std::size_t i = 0; i < res.lse.numel(); ++i) {
        res.lse.set(i, -std::numeric_limits<double>::infinity());
      }
    }
  };
  bool recorded = false;
  for (std::size_t b = 0; b < L.n; ++b) {
    const std::int64_t nq = L.uq[b];
    // A sequence without queries has no rows; the last run still gives the dtypes and
    // records the parameters when no other did.
    if (nq == 0 && (recorded || b + 1 < L.n)) continue;
    Sequence seq;
    borrow_sequence(seq, L, opt, b, q, k, v, nullptr);
    AttentionResult r = attention(*seq.q, *seq.k, seq.v ? &*seq.v : nullptr, seq.so.opt);
    if (!recorded) res.attrs = std::move(r.attrs), recorded = true;
    if (!allocated)
      allocate(emit_output ? r.output.dtype() : L.out, emit_lse ? r.lse.dtype() : L.lse);
    if (nq == 0) continue;
    const auto q0 = static_cast<std::size_t>(L.cq[b]);
    if (emit_output) {
      const std::size_t row = row_elems(res.output.shape()) * dtype_size(res.output.dtype());
      std::memcpy(res.output.bytes() + q0 * row, r.output.bytes(), r.output.nbytes());
    }
    if (emit_lse) {
      const std::size_t size = dtype_size(res.lse.dtype());
      const std::size_t rows = static_cast<std::size_t>(nq) * size;
      for (std::size_t h = 0; h < L.hq; ++h) {
        std::memcpy(res.lse.bytes() + (h * total_q + q0) * size, r.lse.bytes() + h * rows, rows);
      }
    }
  }
  if (!allocated) allocate(L.out, L.lse);  // no sequences
  if (!recorded) res.attrs.push_back({"scale", opt.scale});
  res.attrs.push_back({"varlen_sequences", static_cast<long long>(L.n)});
  if (opt.seqused_q) res.attrs.push_back({"seqused_q", 1LL});
  if (opt.seqused_k) res.attrs.push_back({"seqused_k", 1LL});
  return res;
}

AttentionResult attention_varlen(TensorSource& q, TensorSource& k, TensorSource* v,
                                 const AttentionOptions& opt) {
  const TensorInfo &qi = q.info(), &ki = k.info();
  const TensorInfo* vi = v ? &v->info() : nullptr;
  auto [need, names] = varlen_memory(qi.shape, ki.shape, vi ? &vi->shape : nullptr, qi.dtype, opt);
  return run_in_memory(q, k, v, opt, need, names,
                       [](const Tensor& qt, const Tensor& kt, const Tensor* vt,
                          const AttentionOptions& o) { return attention_varlen(qt, kt, vt, o); });
}

namespace {

// The backward's options checked against the varlen form: what it cannot cut by sequence.
void refuse_backward(const AttentionBackwardOptions& bopt) {
  if (bopt.sink || bopt.forward_output || bopt.forward_lse || bopt.release_kv) {
    throw UsageError(
        "gradients: cu_seqlens_q: not streamed (no sinks, given forward or released K, V; "
        "each sequence is computed in memory)");
  }
}

// The packed gradients in float64 and their rounded copies, softmax_d and lse likewise.
std::size_t varlen_backward_packed(const Varlen& L, const Shape& q, const Shape& k,
                                   const Shape& v, const AttentionOptions& opt) {
  Shape o = q;
  o.back() = v.back();
  const std::size_t nq = checked_numel(q, 1, "attention"), nk = checked_numel(k, 1, "attention"),
                    nv = checked_numel(v, 1, "attention"), no = checked_numel(o, 1, "attention");
  std::size_t n = mul_sat(add_sat(add_sat(nq, nk), add_sat(nv, opt.qv ? no : 0)), 8 + 8);
  return add_sat(n, mul_sat(mul_sat(q[0], L.hq), 2 * (8 + 8)));
}

}  // namespace

std::size_t varlen_backward_memory(const Shape& q, const Shape& k, const Shape& v, DType q_dtype,
                                   const AttentionOptions& opt,
                                   const AttentionBackwardOptions& bopt) {
  refuse_backward(bopt);
  const Varlen L = prepare(q, k, &v, q_dtype, opt);
  std::size_t most = 0;
  for (std::size_t b = 0; b < L.n; ++b) {
    SeqOptions so;
    seq_options(so, L, opt, b);
    so.opt.dtype = DType::f64;
    most = std::max(most, attention_backward_memory(with_rows(q, L.uq[b]), with_rows(k, L.uk[b]),
                                                    with_rows(v, L.uk[b]), q_dtype, so.opt, bopt));
  }
  return add_sat(most, varlen_backward_packed(L, q, k, v, opt));
}

AttentionGrads attention_varlen_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& grad_output, const AttentionOptions& opt,
                                         const AttentionBackwardOptions& bopt) {
  refuse_backward(bopt);
  Varlen L = prepare(q.shape(), k.shape(), &v.shape(), q.dtype(), opt);
  Shape o_shape = q.shape();
  o_shape.back() = v.shape().back();
  require_grad_output(grad_output, o_shape);
  const std::size_t need =
      varlen_backward_memory(q.shape(), k.shape(), v.shape(), q.dtype(), opt, bopt);
  require_gradient_budget(need, opt.max_memory);
  // Each sequence's gradients in float64, rounded once here: its rows are the bytes of a
  // run on that sequence alone, and the parameters' gradients are sums over sequences.
  L.sub.dtype = DType::f64;
  if (opt.max_memory) {  // what the packed gradients leave bounds each run's workers
    const std::size_t packed = varlen_backward_packed(L, q.shape(), k.shape(), v.shape(), opt);
    L.sub.max_memory = std::max<std::size_t>(1, opt.max_memory - std::min(packed, opt.max_memory));
  }
  const std::size_t total_q = q.shape()[0];
  const Shape lse_shape = L.has_h ? Shape{L.hq, total_q} : Shape{total_q};
  AttentionGrads acc;  // float64; rows of unused and empty sequences stay 0 (lse -inf)
  auto zeros = [](const Shape& s) {
    Tensor t(DType::f64, s);
    std::memset(t.bytes(), 0, t.nbytes());
    return t;
  };
  acc.dq = zeros(q.shape()), acc.dk = zeros(k.shape()), acc.dv = zeros(v.shape());
  if (opt.qv) acc.dqv = zeros(opt.qv->shape());
  acc.softmax_d = zeros(lse_shape);
  acc.lse = zeros(lse_shape);
  for (std::size_t i = 0; i < acc.lse.numel(); ++i) {
    acc.lse.data<double>()[i] = -std::numeric_limits<double>::infinity();
  }
  bool recorded = false;
  for (std::size_t b = 0; b < L.n; ++b) {
    Sequence seq;
    borrow_sequence(seq, L, opt, b, q, k, &v, &grad_output);
    // A sequence without queries has no gradient: its keys' rows stay 0.
    if (seq.nq == 0 && (recorded || b + 1 < L.n)) continue;
    AttentionGrads r = attention_backward(*seq.q, *seq.k, *seq.v, *seq.dO, seq.so.opt, bopt);
    if (!recorded) acc.attrs = std::move(r.attrs), recorded = true;
    if (seq.nq == 0) continue;
    auto put = [](Tensor& to, const Tensor& from, std::int64_t row0) {
      const std::size_t row = row_elems(to.shape()) * 8;
      std::memcpy(to.bytes() + static_cast<std::size_t>(row0) * row, from.bytes(), from.nbytes());
    };
    put(acc.dq, r.dq, L.cq[b]);
    put(acc.dk, r.dk, L.ck[b]);
    put(acc.dv, r.dv, L.ck[b]);
    if (opt.qv) put(acc.dqv, r.dqv, L.cq[b]);
    const std::size_t rows = static_cast<std::size_t>(seq.nq) * 8;
    const auto q0 = static_cast<std::size_t>(L.cq[b]);
    for (std::size_t h = 0; h < L.hq; ++h) {
      std::memcpy(acc.softmax_d.bytes() + (h * total_q + q0) * 8, r.softmax_d.bytes() + h * rows,
                  rows);
      std::memcpy(acc.lse.bytes() + (h * total_q + q0) * 8, r.lse.bytes() + h * rows, rows);
    }
    for (const GradientField& f : gradient_fields()) {  // parameters': summed in order
      if (f.kind != GradientKind::parameter) continue;
      const Tensor& from = r.*(f.member);
      if (from.numel() == 0) continue;
      Tensor& to = acc.*(f.member);
      if (to.numel() == 0) to = zeros(from.shape());
      for (std::size_t i = 0; i < from.numel(); ++i) to.data<double>()[i] += from.data<double>()[i];
    }
  }
  if (!recorded) acc.attrs.push_back({"scale", opt.scale});
  const DType out = opt.dtype.value_or(q.dtype());
  AttentionGrads res;
  res.attrs = std::move(acc.attrs);
  res.attrs.push_back({"gradients", 1LL});
  res.attrs.push_back({"varlen_sequences", static_cast<long long>(L.n)});
  if (opt.seqused_q) res.attrs.push_back({"seqused_q", 1LL});
  if (opt.seqused_k) res.attrs.push_back({"seqused_k", 1LL});
  for (const GradientField& f : gradient_fields()) {  // all but softmax_d and lse
    const Tensor& t = acc.*(f.member);
    if (f.kind != GradientKind::stat && (t.numel() > 0 || t.ndim() > 0)) {
      res.*(f.member) = cast(t, out);
    }
  }
  // Sinks with no sequence run: their gradient is 0.
  if (opt.sinks && res.dsinks.numel() == 0) res.dsinks = cast(zeros(opt.sinks->shape()), out);
  // softmax_d and lse stay float64, as a run on one sequence gives them.
  res.softmax_d = std::move(acc.softmax_d);
  res.lse = std::move(acc.lse);
  return res;
}

}  // namespace posenc::attention_detail
