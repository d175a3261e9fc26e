// Attention's geometry (attention_geometry.hpp): shapes and options checked, block
// sizes, memory.
#include "ops/attention_geometry.hpp"

#include <xtensor/xstrides.hpp>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

#include "ops/attention_clipped.hpp"
#include "ops/attention_decomposed.hpp"
#include "ops/attention_gate.hpp"
#include "ops/attention_global.hpp"
#include "ops/attention_timing.hpp"
#include "ops/widen.hpp"
#include "posenc/encodings/arith.hpp"

namespace posenc::attention_detail {

namespace {

// numpy's broadcasting rule, by xtensor: `from` broadcasts to `to` without growing it.
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  xt::svector<std::size_t> out(to.begin(), to.end());
  try {
    xt::broadcast_shape(from, out);
  } catch (const xt::broadcast_error&) {
    return false;
  }
  return std::equal(out.begin(), out.end(), to.begin());
}

}  // namespace

std::string resolve_letters(const std::string& user, std::size_t rank) {
  std::string axes = user;
  if (axes.empty()) {
    if (rank == 4) {
      axes = "bhsd";
    } else if (rank == 3) {
      axes = "bsd";
    } else if (rank == 2) {
      axes = "sd";
    } else {
      throw InputError(fmt::format(
          "q: expected a tensor of rank 2 (sd), 3 (bsd) or 4 (bhsd), got rank {}", rank));
    }
  }
  if (axes.size() != rank) {
    throw UsageError(
        fmt::format("axes {}: {} letters for a tensor of rank {}", axes, axes.size(), rank));
  }
  for (std::size_t i = 0; i < axes.size(); ++i) {
    char c = axes[i];
    if (std::string("bhsd").find(c) == std::string::npos || axes.find(c) != i) {
      throw UsageError(fmt::format("axes {}: letters must be distinct, from b, h, s, d", axes));
    }
  }
  if (axes.find('s') == std::string::npos || axes.find('d') == std::string::npos) {
    throw UsageError(fmt::format("axes {}: attention needs axes s and d", axes));
  }
  return axes;
}

void require_grad_output(const Tensor& grad_output, const Shape& output_shape) {
  if (!is_float(grad_output.dtype())) {
    throw InputError(fmt::format("grad_output: dtype {} is not a float type",
                                 dtype_name(grad_output.dtype())));
  }
  if (grad_output.shape() != output_shape) {
    throw InputError(fmt::format("grad_output: shape {} is not the output's {}",
                                 shape_str(grad_output.shape()), shape_str(output_shape)));
  }
}

void require_gradient_budget(std::size_t need, std::size_t max_memory) {
  if (max_memory && need > max_memory) {
    throw InputError(fmt::format("gradients would need {} > max_memory {}", bytes_str(need),
                                 bytes_str(max_memory)));
  }
}

void require_float(DType t, const char* what) {
  if (!is_float(t)) {
    throw InputError(fmt::format("{}: expected a float tensor, got {}", what, dtype_name(t)));
  }
}

InputError nonfinite_input(const char* what) {
  return InputError(
      fmt::format("{}: contains NaN or Inf (use allow_nonfinite to compute with it anyway)", what));
}

// NaN or Inf in an input would silently poison whole rows of the result.
// K and V may be null (streamed: checked chunk by chunk).
void require_finite(const Tensor& q, const Tensor* k, const Tensor* v,
                    const AttentionOptions& opt) {
  const std::pair<const Tensor*, const char*> strict[] = {
      {&q, "q"}, {k, "k"}, {v, "v"}, {opt.relative_k, "relative_k"},
      {opt.relative_v, "relative_v"}, {opt.t5_bias, "t5_bias"}, {opt.score_bias, "score_bias"},
      {opt.rel_pos_h, "rel_pos_h"}, {opt.rel_pos_w, "rel_pos_w"}, {opt.gate_input, "gate_input"},
      {opt.gate_weight, "gate_weight"}, {opt.gate_bias, "gate_bias"},
      {opt.gate_const, "gate_const"}, {opt.clipped_bias, "clipped_bias"},
      {opt.relative_proj, "relative_proj"}, {opt.per_dim_scale, "per_dim_scale"},
      {opt.global_k, "global_k"}, {opt.global_v, "global_v"}, {opt.global_bias, "global_bias"}};
  for (const auto& [t, what] : strict) {
    if (t && t->has_nonfinite()) throw nonfinite_input(what);
  }
  const std::pair<const Tensor*, const char*> masks[] = {{opt.mask, "mask"},
                                                         {opt.sinks, "sinks"}};
  for (const auto& [t, what] : masks) {
    if (t && t->has_nonfinite(/*allow_neg_inf=*/true)) {
      throw InputError(fmt::format(
          "{}: contains NaN or +Inf (-inf is allowed; use allow_nonfinite to compute with "
          "it anyway)",
          what));
    }
  }
}

Geometry check(const Shape& qs, const Shape& ks, const Shape* vs, DType q_dtype,
               const AttentionOptions& opt) {
  Geometry g;
  g.axes = resolve_letters(opt.axes, qs.size());
  if (ks.size() != qs.size()) {
    throw InputError(fmt::format("k: shape {} has rank {}, q {} has rank {}", shape_str(ks),
                                 ks.size(), shape_str(qs), qs.size()));
  }
  if (vs && vs->size() != qs.size()) {
    throw InputError(fmt::format("v: shape {} has rank {}, q {} has rank {}", shape_str(*vs),
                                 vs->size(), shape_str(qs), qs.size()));
  }
  const std::string& a = g.axes;
  g.has_b = a.find('b') != std::string::npos;
  g.has_h = a.find('h') != std::string::npos;
  g.b = axis_size(qs, a, 'b');
  g.hq = axis_size(qs, a, 'h');
  g.sq = axis_size(qs, a, 's');
  g.d = axis_size(qs, a, 'd');
  g.hk = axis_size(ks, a, 'h');
  g.sk = axis_size(ks, a, 's');
  if (axis_size(ks, a, 'b') != g.b) {
    throw InputError(fmt::format("k: batch {} of shape {} differs from q's {} ({})",
                                 axis_size(ks, a, 'b'), shape_str(ks), g.b, shape_str(qs)));
  }
  if (axis_size(ks, a, 'd') != g.d) {
    throw InputError(fmt::format("k: head dim {} of shape {} differs from q's {} ({})",
                                 axis_size(ks, a, 'd'), shape_str(ks), g.d, shape_str(qs)));
  }
  if (g.hk == 0 || g.hq % g.hk != 0) {
    throw InputError(fmt::format("k: {} heads (shape {}) do not divide q's {} heads ({})", g.hk,
                                 shape_str(ks), g.hq, shape_str(qs)));
  }
  // No keys is allowed (FlashAttention's empty sequences): every row is empty, output 0
  // and lse -inf (NaN under MaskedRows::nan).
  if (g.d == 0) {
    throw InputError(fmt::format("k: empty head dim in shape {}", shape_str(ks)));
  }
  if (vs) {
    if (axis_size(*vs, a, 'b') != g.b || axis_size(*vs, a, 'h') != g.hk ||
        axis_size(*vs, a, 's') != g.sk) {
      throw InputError(
          fmt::format("v: shape {} does not match k {} in batch, heads or length (axes {})",
                      shape_str(*vs), shape_str(ks), a));
    }
    g.dv = axis_size(*vs, a, 'd');
  }
  // Arithmetic and output types.
  g.compute = attention_arith(opt);
  // fp8 Q: bf16 outputs, as FlashAttention-3's fp8 forward returns them.
  g.out = opt.dtype.value_or(is_fp8(q_dtype) ? DType::bf16 : q_dtype);
  if (!is_float(g.out) || is_fp8(g.out)) {
    throw UsageError(fmt::format("dtype {}: attention outputs are floats (f64, f32, f16, bf16)",
                                 dtype_name(g.out)));
  }
  g.lse = g.out == DType::f64 ? DType::f64 : DType::f32;
  g.emit = opt.emit.empty() ? parse_attention_emit("", vs != nullptr) : opt.emit;
  for (auto e : g.emit) {
    if (e == AttentionEmit::logits) g.emit_logits = true;
    if (e == AttentionEmit::probs) g.emit_probs = true;
    if (e == AttentionEmit::output) g.emit_output = true;
    if (e == AttentionEmit::lse) g.emit_lse = true;
  }
  if (g.emit_output && !vs) throw UsageError("emit: output needs values (-v)");
  // Option values.
  if (!(opt.scale >= 0) || std::isinf(opt.scale)) {
    throw UsageError(fmt::format("scale {}: must be a positive number", opt.scale));
  }
  if (!(opt.softcap >= 0) || std::isinf(opt.softcap)) {
    throw UsageError(fmt::format("softcap {}: must be a positive number", opt.softcap));
  }
  if (opt.window_left < -1 || opt.window_right < -1) {
    throw UsageError(fmt::format("window {},{}: sides must be >= 0, or -1 for unbounded",
                                 opt.window_left, opt.window_right));
  }
  if (opt.alibi && !(opt.alibi_max_bias > 0)) {
    throw UsageError(fmt::format("alibi_max_bias {}: must be positive", opt.alibi_max_bias));
  }
  if (opt.sliding_window < 0 || opt.chunk_size < 0) {
    throw UsageError(fmt::format("sliding_window/chunk_size: must be >= 0, got {} and {}",
                                 opt.sliding_window, opt.chunk_size));
  }
  if (opt.sink_tokens < 0) {
    throw UsageError(fmt::format("sink_tokens {}: must be >= 0", opt.sink_tokens));
  }
  if (opt.sink_tokens > static_cast<std::int64_t>(g.sk)) {
    throw InputError(fmt::format("sink_tokens {}: more sink tokens than the {} keys",
                                 opt.sink_tokens, g.sk));
  }
  if (!std::isfinite(opt.temperature_scale) ||
      (opt.temperature_scale != 0 && !(opt.temperature_floor > 0))) {
    throw UsageError(
        fmt::format("temperature_scale/temperature_floor: need a finite scale and "
                    "a positive floor, got {} and {}",
                    opt.temperature_scale, opt.temperature_floor));
  }
  if (!std::isfinite(opt.llama4_scaling_beta) ||
      (opt.llama4_scaling_beta != 0 && opt.llama4_scaling_period <= 0)) {
    throw UsageError(
        fmt::format("llama4_scaling_beta/llama4_scaling_period: need a finite beta and a "
                    "positive period, got {} and {}",
                    opt.llama4_scaling_beta, opt.llama4_scaling_period));
  }
  if (opt.llama4_scaling_beta != 0 && opt.temperature_scale != 0) {
    // A config's side named as its key: the caller's other one is what cannot be honoured.
    for (auto [field, other] : {std::pair{"temperature_scale", "llama4_scaling_beta"},
                                std::pair{"llama4_scaling_beta", "temperature_scale"}}) {
      if (const ValueSource* s = opt.sources.find(field)) {
        throw UsageError(fmt::format("{}: '{}' scales the queries already; no model scales them "
                                     "by {} too",
                                     s->file, s->key, other));
      }
    }
    throw UsageError(
        "llama4_scaling_beta and temperature_scale: no model scales its queries both ways; "
        "give one");
  }
  // Side tensors: shapes checked here so nothing big is allocated for a bad input.
  if (!opt.cu_seqlens.empty()) {
    if (g.sq != g.sk) {
      throw InputError(fmt::format(
          "cu_seqlens: packed sequences need as many queries as keys (got {} and {})", g.sq,
          g.sk));
    }
    check_cu_seqlens(opt.cu_seqlens, g.sk, "cu_seqlens");
  }
  if (opt.key_lengths) {
    const Tensor& t = *opt.key_lengths;
    if (!is_integer(t.dtype()) || t.ndim() != 1 || t.numel() != g.b) {
      throw InputError(
          fmt::format("key_lengths: expected {} integers (shape ({},)), got {} of shape {}", g.b,
                      g.b, dtype_name(t.dtype()), shape_str(t.shape())));
    }
    for (std::size_t i = 0; i < t.numel(); ++i) {
      double len = t.get(i);
      if (len < 0 || len > static_cast<double>(g.sk)) {
        throw InputError(
            fmt::format("key_lengths: length {} of batch {} is outside [0, {}]", len, i, g.sk));
      }
    }
  }
  for (auto [t, what, limit] : {std::tuple{opt.seqused_q, "seqused_q", g.sq},
                                 std::tuple{opt.seqused_k, "seqused_k", g.sk}}) {
    if (!t) continue;
    if (!is_integer(t->dtype()) || t->ndim() != 1 || t->numel() != g.b) {
      throw InputError(fmt::format("{}: expected {} integers (shape ({},)), got {} of shape {}",
                                   what, g.b, g.b, dtype_name(t->dtype()),
                                   shape_str(t->shape())));
    }
    for (std::size_t i = 0; i < t->numel(); ++i) {
      const double len = t->get(i);
      if (len < 0 || len > static_cast<double>(limit)) {
        throw InputError(fmt::format("{}: length {} of batch {} is outside [0, {}]", what, len,
                                     i, limit));
      }
    }
  }
  if (opt.seqused_q || opt.seqused_k) {
    // Terms by position would need each entry's own offset: refused rather than misaligned.
    const char* which = opt.seqused_q ? "seqused_q" : "seqused_k";
    const std::pair<bool, const char*> no[] = {
        {opt.key_lengths != nullptr, "key_lengths (seqused_k is the aligned form)"},
        {!opt.cu_seqlens.empty(), "cu_seqlens"},
        {opt.t5_bias != nullptr, "t5_bias"},
        {opt.clipped_bias != nullptr, "clipped_bias"},
        {opt.relative_k != nullptr || opt.relative_v != nullptr || opt.relative_proj != nullptr,
         "relative_k/relative_v/relative_proj"},
        {opt.rel_pos_h != nullptr, "decomposed_rel_pos"},
        {opt.global_k != nullptr, "global_kv"},
        {opt.score_bias != nullptr, "relative score terms"},
        {opt.temperature_scale != 0 || opt.llama4_scaling_beta != 0,
         "attn_temperature/llama4_scaling"},
        {opt.arith != Arith::exact, "arith hf"}};
    for (const auto& [bad, name] : no) {
      if (bad) {
        throw UsageError(fmt::format("{}: not with {} (each entry's own alignment)", which, name));
      }
    }
  }
  if (opt.mask && !broadcasts_to(opt.mask->shape(), g.logits_shape())) {
    throw InputError(fmt::format("mask: shape {} does not broadcast to the scores' shape {}",
                                 shape_str(opt.mask->shape()), shape_str(g.logits_shape())));
  }
  if (opt.sinks) {
    const Tensor& t = *opt.sinks;
    require_float(t.dtype(), "sinks");
    if (t.ndim() != 1 || t.numel() != g.hq) {
      throw InputError(fmt::format("sinks: expected shape ({},) (one per query head), got {}",
                                   g.hq, shape_str(t.shape())));
    }
  }
  if (opt.alibi_slopes) {
    // FlashAttention's alibi_slopes: (nheads,) or (batch, nheads).
    const Tensor& t = *opt.alibi_slopes;
    require_float(t.dtype(), "alibi_slopes");
    const bool ok = (t.ndim() == 1 && t.shape()[0] == g.hq) ||
                    (t.ndim() == 2 && t.shape()[0] == g.b && t.shape()[1] == g.hq);
    if (!ok) {
      throw InputError(fmt::format("alibi_slopes: expected shape ({},) or ({}, {}) ([hq] or "
                                   "[b, hq]), got {}",
                                   g.hq, g.b, g.hq, shape_str(t.shape())));
    }
    if (!opt.allow_nonfinite && t.has_nonfinite()) throw nonfinite_input("alibi_slopes");
  }
  if (opt.t5_bias) {
    const Tensor& t = *opt.t5_bias;
    require_float(t.dtype(), "t5_bias");
    if (opt.t5_buckets < 2 || opt.t5_max_distance < 2) {
      throw UsageError(fmt::format("t5_buckets {} / t5_max_distance {}: must be >= 2",
                                   opt.t5_buckets, opt.t5_max_distance));
    }
    if (t.ndim() != 2 || t.shape()[0] != static_cast<std::size_t>(opt.t5_buckets) ||
        t.shape()[1] != g.hq) {
      throw InputError(fmt::format("t5_bias: expected shape ({}, {}) ([buckets, heads]), got {}",
                                   opt.t5_buckets, g.hq, shape_str(t.shape())));
    }
  }
  if (opt.score_bias) {
    require_float(opt.score_bias->dtype(), "score_bias");
    if (opt.score_bias->shape() != g.logits_shape()) {
      throw InputError(fmt::format("score_bias: expected the scores' shape {}, got {}",
                                   shape_str(g.logits_shape()),
                                   shape_str(opt.score_bias->shape())));
    }
  }
  if (opt.relative_v && !vs) throw UsageError("relative_v needs values (-v)");
  for (const Tensor* t : {opt.relative_k, opt.relative_v}) {
    if (!t) continue;
    const char* what = t == opt.relative_k ? "relative_k" : "relative_v";
    require_float(t->dtype(), what);
    std::size_t width = t == opt.relative_k ? g.d : g.dv;
    // A window whose sides are both -1 takes them from the rows (2M+1: M, M).
    std::optional<RelativeWindow> win = opt.relative_window;
    const bool sides_from_rows = win && win->left < 0 && win->right < 0;
    if (win && !sides_from_rows && opt.max_distance >= 0) {
      throw UsageError(
          "max_distance: cannot be combined with relative_window (its left and right)");
    }
    if (win && !sides_from_rows &&
        (win->left < 0 || win->right < 0 || win->left > (std::int64_t{1} << 30) ||
         win->right > (std::int64_t{1} << 30))) {
      throw UsageError(fmt::format("relative_window: left {} and right {} must be from 0 to 2^30",
                                   win->left, win->right));
    }
    const bool symmetric = !win || sides_from_rows;
    // relative_k may hold a table per query head (Gemma-3n audio).
    const bool per_head = t == opt.relative_k && t->ndim() == 3;
    const bool shape_ok = per_head ? t->shape()[1] == g.hq && t->shape()[2] == width
                                   : t->ndim() == 2 && t->shape()[1] == width;
    if (!shape_ok || (symmetric && t->shape()[0] % 2 != 1)) {
      const std::string rows_text = symmetric ? std::string("2M+1") : std::to_string(win->rows());
      throw InputError(
          per_head ? fmt::format("{}: expected shape ({}, {}, {}) ([rows, heads, d]), got {}",
                                 what, rows_text, g.hq, width, shape_str(t->shape()))
                   : fmt::format("{}: expected shape ({}, {}), got {}", what, rows_text, width,
                                 shape_str(t->shape())));
    }
    if (per_head) g.rel_k_per_head = true;
    std::size_t rows = t->shape()[0];
    if (!symmetric && rows != static_cast<std::size_t>(win->rows())) {
      throw InputError(fmt::format("{}: {} rows, but left {} and right {} need {}", what, rows,
                                   win->left, win->right, win->rows()));
    }
    if (opt.max_distance >= 0 && rows != static_cast<std::size_t>(2 * opt.max_distance + 1)) {
      throw InputError(fmt::format("{}: {} rows, but max_distance {} needs {}", what, rows,
                                   opt.max_distance, 2 * opt.max_distance + 1));
    }
    if (g.rel_rows && rows != g.rel_rows) {
      throw InputError(
          fmt::format("relative_k and relative_v: {} and {} rows differ", g.rel_rows, rows));
    }
    g.rel_rows = rows;
    const auto m = static_cast<std::int64_t>((rows - 1) / 2);
    g.window = win.value_or(RelativeWindow{m, m, false, false});
    if (sides_from_rows) g.window.left = g.window.right = m;
  }
  check_decomposed(g, opt);
  check_gate(g, opt);
  check_clipped(g, opt);
  check_timing(g, opt);
  check_global(g, vs, opt);
  return g;
}

// Block sizes depend on the shapes only (never on the thread count), so the rounding
// is the same whatever -j says.
Blocks blocks_for(const Geometry& g, const AttentionOptions& opt) {
  std::size_t tsize = dtype_size(g.compute);
  Blocks bl;
  if (g.materialise()) {
    bl.k = g.sk;  // one block: the row is complete before it is normalised
    std::size_t q = (std::size_t{16} << 20) / std::max<std::size_t>(1, g.sk * tsize);
    bl.q = std::clamp<std::size_t>(q, 1, 128);
  } else {
    bl.k = opt.key_block ? opt.key_block : 1024;
    bl.q = 256;
  }
  if (opt.query_block) bl.q = opt.query_block;
  bl.q = std::min(bl.q, std::max<std::size_t>(g.sq, 1));
  bl.k = std::min(bl.k, g.sk);
  return bl;
}

// The score tiles and per-row work memory of one worker thread, in bytes.
std::size_t heads_per_item(const Geometry& g, std::size_t nq, std::size_t threads) {
  const std::size_t group = g.hk > 0 ? g.hq / g.hk : 1;
  if (g.sq > kGroupRows || group <= 1) return 1;
  for (std::size_t gs = group; gs > 1; --gs) {
    if (group % gs == 0 && g.b * (g.hq / gs) * nq >= threads) return gs;
  }
  return 1;
}

std::size_t worker_tiles(const Geometry& g, const AttentionOptions& opt) {
  const Blocks bl = blocks_for(g, opt);
  const std::size_t heads = g.sq <= kGroupRows && g.hk > 0 ? g.hq / g.hk : 1;
  return mul_sat(mul_sat(bl.q, bl.k + g.dv + 2 * g.rel_rows + g.dec_cols + g.global + 4) *
                     dtype_size(g.compute),
                 heads);
}

bool kv_in_place(const Geometry& g, DType t) {
  return g.axes.back() == 'd' &&
         (t == g.compute || detail::widens(t) || (t == DType::f32 && g.compute == DType::f64));
}

namespace {

// Whether an in-memory run holds a whole copy of K or V stored as `of`: make_view
// reorders when d is not the last axis and converts a dtype other than the arithmetic
// type, unless K and V are both used in place (run_widening). Unknown dtypes: the worst
// case, a copy.
bool kv_copied(const Geometry& g, bool has_v, std::optional<DType> k, std::optional<DType> v,
               std::optional<DType> of) {
  if (!k || (has_v && !v)) return true;
  const bool in_place = kv_in_place(g, *k) && (!has_v || kv_in_place(g, *v));
  return g.axes.back() != 'd' || (*of != g.compute && !in_place);
}

}  // namespace

std::pair<std::size_t, std::string> memory_of(const Geometry& g, const Shape& qs, const Shape& ks,
                                              const Shape* vs, DType q_dtype,
                                              const AttentionOptions& opt,
                                              std::optional<DType> k_dtype,
                                              std::optional<DType> v_dtype) {
  std::size_t ts = dtype_size(g.compute);
  std::size_t os = dtype_size(g.out);
  std::size_t scores = mul_sat(mul_sat(mul_sat(g.b, g.hq), g.sq), g.cols());
  std::size_t need = 0;
  std::string names;
  auto add_name = [&names](const char* n) {
    names += names.empty() ? n : std::string(" and ") + n;
  };
  if (g.emit_logits) need = add_sat(need, mul_sat(scores, os)), add_name("logits");
  if (g.emit_probs) need = add_sat(need, mul_sat(scores, os)), add_name("probs");
  if (g.emit_output) need = add_sat(need, mul_sat(mul_sat(mul_sat(g.b, g.hq), g.sq), g.dv) * os);
  if (g.emit_lse) need = add_sat(need, mul_sat(mul_sat(g.b, g.hq), g.sq) * dtype_size(g.lse));
  // Converted copies of the inputs (f16 → f32, RoPE'd copies are the caller's).
  auto numel = [](const Shape& s) {
    std::size_t n = 1;
    for (auto d : s) n = mul_sat(n, d);
    return n;
  };
  if (q_dtype != g.compute) need = add_sat(need, mul_sat(numel(qs), ts));
  const bool has_v = vs != nullptr;
  if (kv_copied(g, has_v, k_dtype, v_dtype, k_dtype)) need = add_sat(need, mul_sat(numel(ks), ts));
  if (has_v && kv_copied(g, has_v, k_dtype, v_dtype, v_dtype)) {
    need = add_sat(need, mul_sat(numel(*vs), ts));
  }
  // One worker's tiles (see Geometry::threads), and the score terms.
  need = add_sat(need, worker_tiles(g, opt));
  need = add_sat(need, plan_bytes(g, opt));
  if (names.empty()) names = "attention";
  return {need, names};
}

// The workers a budget of `budget` bytes runs when `need` bytes include one worker's
// `tile` bytes: every OpenMP thread when there is no budget or room for all.
std::size_t workers_within(std::size_t budget, std::size_t need, std::size_t tile) {
  const auto all = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
  if (budget == 0 || need >= budget) return budget == 0 ? 0 : 1;
  return std::min(all, 1 + (budget - need) / std::max<std::size_t>(tile, 1));
}

}  // namespace posenc::attention_detail
