// RoPE for attention: positions of queries and keys with the KV-cache alignment. Kept
// apart from attention.cpp so the attention core links without the RoPE kernels.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "posenc/error.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_backward.hpp"
#include "posenc/ops/cast.hpp"

namespace posenc {

namespace {

// The last `keep` entries along the last axis of ids (shape ids_shape).
Positions last_ids(const Positions& pos, std::size_t keep) {
  Positions out = pos;
  std::size_t len = pos.ids_shape.back();
  std::size_t rows = len ? pos.ids.size() / len : 0;
  out.ids.clear();
  out.ids.reserve(rows * keep);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = len - keep; j < len; ++j) out.ids.push_back(pos.ids[r * len + j]);
  }
  out.ids_shape.back() = keep;
  return out;
}

}  // namespace

std::pair<Tensor, Tensor> rope_for_attention(const Tensor& q, const Tensor& k, const Axes& axes,
                                             const RopeFreqs& f, const Positions& pos,
                                             const RopeApplyOptions& opt, DType out) {
  auto s_of = [&axes](const Tensor& t) {
    auto i = axes.letters.find('s');
    return i == std::string::npos ? std::size_t{1} : t.shape()[i];
  };
  const std::size_t sq = s_of(q), sk = s_of(k);
  Positions pk = pos, pq = pos;
  if (!pos.cu_seqlens.empty() && sq != sk) {
    throw UsageError(fmt::format(
        "cu_seqlens: packed sequences need as many queries as keys (got {} and {})", sq, sk));
  }
  if (!pos.ids.empty()) {
    if (pos.ids_shape.empty() || pos.ids_shape.back() != sk) {
      throw InputError(fmt::format(
          "position_ids: shape {} does not end in the key length {} (queries take the last "
          "{})",
          shape_str(pos.ids_shape), sk, sq));
    }
    if (sq > sk) {
      throw InputError(fmt::format("position_ids: {} queries but only {} key positions", sq, sk));
    }
    pq = last_ids(pos, sq);
  } else if (pos.cu_seqlens.empty()) {
    pq.start = pos.start + static_cast<std::int64_t>(sk) - static_cast<std::int64_t>(sq);
    if (pq.start < 0) {
      throw InputError(
          fmt::format("rope: {} queries and {} keys put the first query at position {} (< 0); "
                      "give a start position",
                      sq, sk, pq.start));
    }
  }
  Tensor qr = apply_rope(q, axes, f, pq, opt, out);
  Tensor kr = apply_rope(k, axes, f, pk, opt, out);
  return {std::move(qr), std::move(kr)};
}

namespace {

// What attention with RoPE settles before rotating: the frequencies, the arithmetic
// type, and the options with axes, output dtype and precision filled in.
struct RopeSetup {
  Axes axes;
  RopeFreqs freqs;
  DType compute;
  AttentionOptions opt;
};

RopeSetup rope_setup(const Tensor& q, const Tensor& k, const Tensor* v, AttentionOptions opt,
                     const AttentionRope& rope) {
  if (opt.cu_seqlens_q || opt.cu_seqlens_k) {
    throw UsageError(
        "cu_seqlens_q: not with rope (FlashAttention's varlen attention rotates nothing)");
  }
  // Positions would follow the padded lengths, not each entry's own alignment.
  if (opt.seqused_q || opt.seqused_k) {
    throw UsageError(fmt::format("{}: not with rope (each entry's own alignment)",
                                 opt.seqused_q ? "seqused_q" : "seqused_k"));
  }
  // Shapes are checked before rotating so errors name Q/K/V, not RoPE.
  attention_memory(q.shape(), k.shape(), v ? &v->shape() : nullptr, q.dtype(), opt);
  const Axes axes = resolve_axes(opt.axes, q.ndim(), "q");
  const std::size_t d = q.shape()[static_cast<std::size_t>(axes.index('d'))];
  const std::size_t sk = k.shape()[static_cast<std::size_t>(axes.index('s'))];
  if (d > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw InputError(fmt::format("q: head dimension {} is too large", d));
  }
  const Positions& pos = rope.positions;
  RopeParams params = rope.params(static_cast<int>(d));
  if (params.rotary_dim == 0 && params.partial == 1.0 && d % 2 != 0) {
    // Nothing asked for an odd width: Q's shape is the problem, not an option.
    throw InputError(fmt::format(
        "q: head dim (axis d) of shape {} is {}, which is odd: RoPE rotates pairs of dims; "
        "rotate the first {} with rotary_dim or a partial rotary factor, or check the axes ({})",
        shape_str(q.shape()), d, d - 1, axes.letters));
  }
  if (params.seq_len == 0) {
    std::int64_t extent = pos.start + static_cast<std::int64_t>(sk);
    for (auto id : pos.ids) extent = std::max<std::int64_t>(extent, id + 1);
    params.seq_len = extent;
  }
  DType compute = attention_arith(opt);
  if (!opt.dtype) opt.dtype = q.dtype();
  if (opt.arith == Arith::exact) {
    opt.precision = compute == DType::f64 ? Precision::f64 : Precision::f32;
  } else {
    compute = q.dtype();  // a framework rotates in the model dtype
  }
  opt.axes = axes.letters;
  return RopeSetup{axes, compute_rope_freqs(params), compute, std::move(opt)};
}

}  // namespace

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v,
                          AttentionOptions opt, const AttentionRope& rope) {
  const RopeSetup r = rope_setup(q, k, v, std::move(opt), rope);
  auto [qr, kr] = rope_for_attention(q, k, r.axes, r.freqs, rope.positions, rope.apply, r.compute);
  return attention(qr, kr, v, r.opt);
}

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& grad_output, AttentionOptions opt,
                                  const AttentionBackwardOptions& bopt,
                                  const AttentionRope& rope) {
  if (opt.arith != Arith::exact) {
    throw UsageError("rope: gradients through RoPE take the exact arithmetic only");
  }
  const RopeSetup r = rope_setup(q, k, &v, std::move(opt), rope);
  auto [qr, kr] = rope_for_attention(q, k, r.axes, r.freqs, rope.positions, rope.apply, r.compute);
  // The gradients stay in the arithmetic type until dq and dk are rotated back, so each
  // is rounded once; the others are rounded here exactly as the backward would.
  AttentionOptions inner = r.opt;
  inner.dtype = r.compute;
  AttentionGrads g = attention_backward(qr, kr, v, grad_output, inner, bopt);
  // The rotation is linear, so the gradient with respect to the unrotated q is the
  // transpose of the map applied to dq, at the same positions. The map is a R on the
  // rotated dims (R a rotation, with any pair permutation; a the attention factor) and
  // the identity on the others; its transpose a R^T is the inverse direction, whose
  // factor is 1/a', with a' = 1/a (to a rounding of a).
  RopeApplyOptions back = rope.apply;
  back.inverse = !back.inverse;
  RopeFreqs transposed = r.freqs;
  transposed.attention_factor = 1.0 / r.freqs.attention_factor;
  auto [dq, dk] =
      rope_for_attention(g.dq, g.dk, r.axes, transposed, rope.positions, back, r.compute);
  const DType out = *r.opt.dtype;
  const DType lse_dtype = out == DType::f64 ? DType::f64 : DType::f32;
  g.dq = cast(dq, out);
  g.dk = cast(dk, out);
  for (const GradientField& f : gradient_fields()) {  // the rest as they are
    Tensor& t = g.*(f.member);
    const bool rotated = &t == &g.dq || &t == &g.dk;
    if (f.kind != GradientKind::stat && !rotated && (t.ndim() > 0 || t.numel() > 0)) {
      t = cast(t, out);
    }
  }
  g.softmax_d = cast(g.softmax_d, lse_dtype);
  g.lse = cast(g.lse, lse_dtype);
  return g;
}

}  // namespace posenc
