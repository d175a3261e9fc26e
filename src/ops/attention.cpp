// attention(): options checked (attention_geometry), the run chosen (in memory through
// the blocked kernel, attention_kernel; streamed, attention_io; or HF's eager
// arithmetic, attention_hf) and its parameters recorded with the outputs.
#include "posenc/ops/attention.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>

#include "io/slab.hpp"
#include "ops/attention_clipped.hpp"
#include "ops/attention_fa.hpp"
#include "ops/attention_geometry.hpp"
#include "ops/attention_hf.hpp"
#include "ops/attention_io.hpp"
#include "ops/attention_kernel.hpp"
#include "ops/attention_timing.hpp"
#include "ops/attention_varlen.hpp"
#include "ops/blas_threads.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"

namespace posenc {

using namespace attention_detail;

std::string attention_emit_name(AttentionEmit e) {
  switch (e) {
    case AttentionEmit::logits:
      return "logits";
    case AttentionEmit::probs:
      return "probs";
    case AttentionEmit::output:
      return "output";
    case AttentionEmit::lse:
      return "lse";
  }
  return "?";
}

// The arithmetic is f64 whatever the inputs are: a golden fixture is exact without an
// option; f32 is asked for, for speed.
DType attention_arith(const AttentionOptions& opt) {
  return opt.precision.value_or(Precision::f64) == Precision::f64 ? DType::f64 : DType::f32;
}

std::vector<AttentionEmit> parse_attention_emit(const std::string& list, bool has_v) {
  std::vector<AttentionEmit> out;
  if (list.empty()) {
    out.push_back(AttentionEmit::probs);
    if (has_v) out.push_back(AttentionEmit::output);
    return out;
  }
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string name = list.substr(pos, comma - pos);
    AttentionEmit e;
    if (name == "logits") {
      e = AttentionEmit::logits;
    } else if (name == "probs") {
      e = AttentionEmit::probs;
    } else if (name == "output") {
      e = AttentionEmit::output;
    } else if (name == "lse") {
      e = AttentionEmit::lse;
    } else {
      throw UsageError(fmt::format(
          "emit: unknown tensor '{}' (expected a comma list of logits, probs, output, lse)",
          name));
    }
    if (e == AttentionEmit::output && !has_v) {
      throw UsageError("emit: output needs values (-v)");
    }
    // Named twice is a slip (one output reference per tensor would not line up).
    if (std::find(out.begin(), out.end(), e) != out.end()) {
      throw UsageError(fmt::format("emit {}: '{}' is named twice", list, name));
    }
    out.push_back(e);
    pos = comma + 1;
  }
  return out;
}

const Tensor& AttentionResult::get(AttentionEmit e) const {
  switch (e) {
    case AttentionEmit::logits:
      return logits;
    case AttentionEmit::probs:
      return probs;
    case AttentionEmit::output:
      return output;
    case AttentionEmit::lse:
      return lse;
  }
  return output;
}

namespace {

// `name_nonfinite`: K and V are checked as the kernel reads them (run_widening).
template <class T>
AttentionResult run(const Tensor& q, const Tensor& k, const Tensor* v, const Geometry& g,
                    const AttentionOptions& opt,
                    const std::function<void()>* name_nonfinite = nullptr) {
  Plan<T> P;
  plan(P, g, opt, v != nullptr);
  Tensor hq_, hk_, hv_;
  P.q = make_view<T>(q, g.axes, hq_);
  AttentionResult res = allocate(P, q.shape(), take_output_sink(g, q.shape(), opt));
  const std::size_t nq = (g.sq + P.bl.q - 1) / P.bl.q;
  const std::size_t nthreads = thread_count(g.b * g.hq * nq, g.threads);
  OneBlasThread one_blas;
  if (g.sq > 0 && run_widening(P, k, v, nq, nthreads, name_nonfinite)) return res;
  P.k = make_view<T>(k, g.axes, hk_);
  if (v) P.v = make_view<T>(*v, g.axes, hv_);
  if (g.sq > 0) {
    const std::size_t gs = heads_per_item(g, nq, nthreads);
    std::vector<std::vector<Scratch<T>>> scratch(nthreads, std::vector<Scratch<T>>(gs));
    for_items(g.b * (g.hq / gs) * nq, nthreads, [&](std::size_t it, std::size_t t) {
      auto [b, h0, q0] = item_at(g, P.bl, nq, it, gs);
      run_items<T>(P, scratch[t], b, h0, q0);
    });
  }
  return res;
}

std::string causal_name(CausalAlign c) {
  switch (c) {
    case CausalAlign::none:
      return "none";
    case CausalAlign::bottom_right:
      return "bottom-right";
    case CausalAlign::top_left:
      return "top-left";
  }
  return "?";
}

std::string alibi_name(AlibiVariant v) {
  switch (v) {
    case AlibiVariant::causal:
      return "causal";
    case AlibiVariant::symmetric:
      return "symmetric";
    case AlibiVariant::fairseq:
      return "fairseq";
    case AlibiVariant::bottom_right:
      return "bottom-right";
  }
  return "?";
}

// --arith: the framework's own attention (attention_hf.cpp).
AttentionResult run_framework(const Tensor& q, const Tensor& k, const Tensor* v, const Geometry& g,
                              const AttentionOptions& opt) {
  if (opt.arith != Arith::hf) {
    throw UsageError(
        fmt::format("--arith {}: only hf and exact compute attention", arith_name(opt.arith)));
  }
  attention_detail::HfShape h;
  h.axes = g.axes;
  h.b = g.b, h.hq = g.hq, h.hk = g.hk, h.sq = g.sq, h.sk = g.sk, h.d = g.d, h.dv = g.dv;
  h.emit_logits = g.emit_logits, h.emit_probs = g.emit_probs, h.emit_output = g.emit_output;
  h.emit_lse = g.emit_lse;
  h.logits_shape = g.logits_shape();
  h.out = g.out;
  return attention_detail::attention_hf(q, k, v, opt, h);
}

}  // namespace

std::pair<std::size_t, std::string> attention_memory(const Shape& q, const Shape& k, const Shape* v,
                                                     DType q_dtype, const AttentionOptions& opt,
                                                     std::optional<DType> k_dtype,
                                                     std::optional<DType> v_dtype) {
  if (is_varlen(opt)) return varlen_memory(q, k, v, q_dtype, opt);
  Geometry g = check(q, k, v, q_dtype, opt);
  return memory_of(g, q, k, v, q_dtype, opt, k_dtype, v_dtype);
}

Shape attention_scores_shape(const Shape& q, const Shape& k, DType q_dtype,
                             const AttentionOptions& opt) {
  if (is_varlen(opt)) {
    throw UsageError(
        "cu_seqlens_q: the varlen form has no scores (the sequences' scores differ in shape)");
  }
  AttentionOptions scores_only = opt;
  scores_only.emit = {AttentionEmit::logits};
  scores_only.relative_v = nullptr;  // belongs with V
  scores_only.global_v = nullptr;  // belongs with V
  return check(q, k, nullptr, q_dtype, scores_only).scores_shape();
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v,
                          const AttentionOptions& opt) {
  // One run per sequence first: qv and the descales are cut by sequence there, and each
  // run takes the FlashAttention features below on its own lengths.
  if (is_varlen(opt)) return attention_varlen(q, k, v, opt);
  // qv, the descales, p_dtype, the FlashAttention baseline: attention_fa.cpp.
  if (fa_extras(opt)) return attention_fa(q, k, v, opt);
  require_float(q.dtype(), "q");
  require_float(k.dtype(), "k");
  if (v) require_float(v->dtype(), "v");
  Geometry g = check(q.shape(), k.shape(), v ? &v->shape() : nullptr, q.dtype(), opt);
  auto [need, names] = memory_of(g, q.shape(), k.shape(), v ? &v->shape() : nullptr, q.dtype(), opt,
                                 k.dtype(), v ? std::optional(v->dtype()) : std::nullopt);
  if (opt.max_memory && need > opt.max_memory) {
    throw InputError(fmt::format("{} would need {} > max_memory {}", names, bytes_str(need),
                                 bytes_str(opt.max_memory)));
  }
  g.threads = workers_within(opt.max_memory, need, worker_tiles(g, opt));
  // K and V used in place by the kernel are checked for NaN and Inf as it first reads each
  // key block (widened, or in the cache for the product), on every worker, not in a pass
  // of their own (a third of a decode's time); any failure is named as the check up
  // front would name it (the inputs in their order), so the refusals are the same.
  const bool kv_on_read = !opt.allow_nonfinite && opt.arith == Arith::exact &&
                          !opt.per_dim_scale && !opt.relative_proj && g.sq > 0 &&
                          kv_in_place(g, k.dtype()) && (!v || kv_in_place(g, v->dtype()));
  const std::function<void()> name_nonfinite = [&] { require_finite(q, &k, v, opt); };
  if (kv_on_read) {
    try {
      require_finite(q, nullptr, nullptr, opt);
    } catch (const InputError&) {
      name_nonfinite();
      throw;
    }
  } else if (!opt.allow_nonfinite) {
    require_finite(q, &k, v, opt);
  }
  if (opt.arith == Arith::exact && (opt.per_dim_scale || opt.relative_proj)) {
    // Gemma-3n audio: the scaled queries and the projected relative keys as data.
    TimingInputs t;
    timing_inputs(t, q, g, opt);
    AttentionResult res = attention(t.q.numel() ? t.q : q, k, v, t.opt);
    if (opt.per_dim_scale) res.attrs.push_back({"per_dim_scale", 1LL});
    if (opt.relative_proj) res.attrs.push_back({"relative_proj", 1LL});
    return res;
  }
  const std::function<void()>* name = kv_on_read ? &name_nonfinite : nullptr;
  AttentionResult res;
  try {
    res = opt.arith != Arith::exact ? run_framework(q, k, v, g, opt)
          : g.compute == DType::f64 ? run<double>(q, k, v, g, opt, name)
                                    : run<float>(q, k, v, g, opt, name);
  } catch (...) {
    if (kv_on_read) name_nonfinite();  // NaN or Inf in K or V comes before other failures
    throw;
  }
  record(res, g, opt, q.dtype());
  return res;
}

namespace {

// A tensor held in memory as a source whose data are in place (as a mapped file's).
class HeldSource final : public TensorSource {
 public:
  explicit HeldSource(const Tensor& t) : t_(t) {
    info_.dtype = t.dtype();
    info_.shape = t.shape();
  }
  const TensorInfo& info() const override { return info_; }
  bool seekable() const override { return true; }
  void read_rows(std::size_t first, std::size_t count, void* dst) override {
    const std::size_t rows = t_.shape().empty() ? 1 : t_.shape()[0];
    const std::size_t row = rows ? t_.nbytes() / rows : 0;
    if (first > rows || count > rows - first) {
      throw std::logic_error("HeldSource: rows outside the tensor");
    }
    if (count) std::memcpy(dst, t_.bytes() + first * row, count * row);
  }
  const std::byte* mapped_data() override { return t_.bytes(); }

 private:
  const Tensor& t_;
  TensorInfo info_;
};

// Gemma-3n audio streamed: Q read whole (or used in place), its scaled copy and the
// per-head relative table made as the run in memory makes them (timing_inputs), then
// the streamed run over K and V with them, so the bits are those of the run in memory.
// The copy of Q and the table count against the budget.
AttentionResult stream_timing(TensorSource& q, TensorSource& k, TensorSource* v,
                              const Geometry& g, const AttentionOptions& opt) {
  const TensorInfo& qi = q.info();
  const std::byte* mapped = q.mapped_data();
  const std::size_t q_bytes = mul_sat(checked_numel(qi.shape, 1, "q"), dtype_size(qi.dtype));
  if (opt.max_memory && !mapped && q_bytes > opt.max_memory) {
    throw InputError(fmt::format("--max-memory {}: too small to hold Q ({}) for {}",
                                 bytes_str(opt.max_memory), shape_str(qi.shape),
                                 opt.per_dim_scale ? "--per-dim-scale" : "--relative-proj"));
  }
  const Tensor qt = mapped ? Tensor::borrow(qi.dtype, qi.shape, const_cast<std::byte*>(mapped))
                           : read_all_rows(q);
  if (!opt.allow_nonfinite) require_finite(qt, nullptr, nullptr, opt);  // Q and the tables
  TimingInputs t;
  timing_inputs(t, qt, g, opt);
  AttentionOptions inner = t.opt;
  if (opt.max_memory) {
    std::size_t held = mul_sat(t.rel_k.numel(), dtype_size(t.rel_k.dtype()));
    if (t.q.numel() && !mapped) held = add_sat(held, q_bytes);  // Q beside its scaled copy
    inner.max_memory = opt.max_memory > held ? opt.max_memory - held : 1;
  }
  HeldSource scaled(t.q.numel() ? t.q : qt);
  AttentionResult res = attention(scaled, k, v, inner);
  if (opt.per_dim_scale) res.attrs.push_back({"per_dim_scale", 1LL});
  if (opt.relative_proj) res.attrs.push_back({"relative_proj", 1LL});
  return res;
}

}  // namespace

AttentionResult attention(TensorSource& q, TensorSource& k, TensorSource* v,
                          const AttentionOptions& opt) {
  if (is_varlen(opt)) return attention_varlen(q, k, v, opt);  // read whole, one run per sequence
  const TensorInfo &qi = q.info(), &ki = k.info();
  const TensorInfo* vi = v ? &v->info() : nullptr;
  require_float(qi.dtype, "q");
  require_float(ki.dtype, "k");
  if (vi) require_float(vi->dtype, "v");
  Geometry g = check(qi.shape, ki.shape, vi ? &vi->shape : nullptr, qi.dtype, opt);
  const bool streams = !g.materialise() && opt.arith == Arith::exact && k.seekable() &&
                       (!v || v->seekable()) &&
                       g.sk > 0 &&  // no keys: nothing to stream, every row empty
                       !fa_extras(opt);  // qv, descales, p_dtype: prepared in memory
  // Gemma-3n's scaled queries and projected table are made from Q, then K and V stream.
  if (streams && (opt.per_dim_scale || opt.relative_proj)) return stream_timing(q, k, v, g, opt);
  if (!streams) {
    // Everything in memory: the inputs count against the budget too.
    auto [need, names] = memory_of(g, qi.shape, ki.shape, vi ? &vi->shape : nullptr, qi.dtype, opt,
                                   ki.dtype, vi ? std::optional(vi->dtype) : std::nullopt);
    return run_in_memory(q, k, v, opt, need, names,
                         [](const Tensor& qt, const Tensor& kt, const Tensor* vt,
                            const AttentionOptions& o) { return attention(qt, kt, vt, o); });
  }
  // Streamed: as many whole key blocks per chunk as the budget allows.
  // An output that goes to the sink as it is computed takes no memory.
  TensorSink* out_sink = take_output_sink(g, qi.shape, opt);
  const StreamMemory m = stream_memory(g, qi, ki, vi, opt, out_sink == nullptr);
  const std::size_t kB = blocks_for(g, opt).k;
  // At most about 16 MiB of K and V per chunk even when the budget allows more: the
  // chunk buffers are reused (no page faults for all of K and V), and a chunk just read
  // is still in the last-level cache when the blocks use it. Bits do not depend on it.
  constexpr std::size_t kChunkBytes = std::size_t{16} << 20;
  std::size_t chunk =
      std::min(g.sk, std::max<std::size_t>(1, kChunkBytes / std::max<std::size_t>(m.per_key, 1) /
                                                  kB) * kB);
  if (opt.max_memory) {
    const std::size_t one = add_sat(m.fixed, mul_sat(m.per_key, kB));
    if (one > opt.max_memory) {
      throw InputError(fmt::format(
          "--max-memory {}: too small to stream K and V: one block of {} keys needs {} with "
          "the outputs, Q and work memory (Q {}, K {}{})",
          bytes_str(opt.max_memory), kB, bytes_str(one), shape_str(qi.shape),
          shape_str(ki.shape), vi ? ", V " + shape_str(vi->shape) : std::string()));
    }
    // As many workers as have room for their tiles beside one key block, then the
    // chunk from what is left.
    g.threads = workers_within(opt.max_memory, one, m.tile);
    const std::size_t fixed = add_sat(m.fixed, mul_sat(g.threads - 1, m.tile));
    const std::size_t keys = (opt.max_memory - fixed) / std::max<std::size_t>(m.per_key, 1);
    chunk = std::min(chunk, std::max(kB, keys / kB * kB));
  }
  // K and V are used in place of a mapped file only when all of them fit the budget:
  // the kernel maps a file's pages in folios of up to 2 MiB, so the pages resident at
  // once are not bounded by the chunk (78 MiB for a 64 MiB budget and 512 MiB of K and
  // V, against 29 MiB copying chunks).
  std::size_t kv_bytes = mul_sat(checked_numel(ki.shape, 1, "k"), dtype_size(ki.dtype));
  if (vi) {
    kv_bytes = add_sat(kv_bytes, mul_sat(checked_numel(vi->shape, 1, "v"), dtype_size(vi->dtype)));
  }
  std::size_t tiles = mul_sat(g.threads > 0 ? g.threads - 1 : 0, m.tile);
  // K or V stored as f16 or bf16 (or f32 under f64 arithmetic) is widened one key block at a
  // time, by each worker.
  std::size_t widen_row = 0;
  if (ki.dtype != g.compute) widen_row = g.d;
  if (vi && vi->dtype != g.compute) widen_row += g.dv;
  tiles = add_sat(tiles, mul_sat(mul_sat(std::max<std::size_t>(g.threads, 1), kB),
                                 widen_row * dtype_size(g.compute)));
  KvWays ways;
  ways.map = opt.max_memory == 0 || add_sat(add_sat(m.fixed, tiles), kv_bytes) <= opt.max_memory;
  // Read block by block, each worker holds a block of K and of V and the pieces read.
  const std::size_t workers = std::max<std::size_t>(g.threads, 1);
  ways.read =
      opt.max_memory == 0 || add_sat(add_sat(m.fixed, mul_sat(workers - 1, m.tile)),
                                     mul_sat(workers, read_buffers(g, kB))) <= opt.max_memory;
  AttentionResult res = g.compute == DType::f64
                            ? run_streamed<double>(q, k, v, g, opt, chunk, ways, out_sink)
                            : run_streamed<float>(q, k, v, g, opt, chunk, ways, out_sink);
  record(res, g, opt, qi.dtype);
  return res;
}

void attention_detail::record(AttentionResult& res, const Geometry& g,
                              const AttentionOptions& opt, DType q_dtype) {
  double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(g.d));
  Attrs& a = res.attrs;
  a.push_back({"scale", scale});
  a.push_back({"axes", g.axes});
  a.push_back({"causal", causal_name(opt.causal)});
  a.push_back({"window", std::vector<double>{static_cast<double>(opt.window_left),
                                             static_cast<double>(opt.window_right)}});
  a.push_back({"softcap", opt.softcap});
  if (opt.sliding_window > 0)
    a.push_back({"sliding_window", static_cast<long long>(opt.sliding_window)});
  if (opt.chunk_size > 0) a.push_back({"chunk_size", static_cast<long long>(opt.chunk_size)});
  if (opt.sink_tokens > 0) a.push_back({"sink_tokens", static_cast<long long>(opt.sink_tokens)});
  if (opt.temperature_scale != 0) {
    a.push_back({"temperature_scale", opt.temperature_scale});
    a.push_back({"temperature_floor", opt.temperature_floor});
  }
  if (opt.llama4_scaling_beta != 0) {
    a.push_back({"llama4_scaling_beta", opt.llama4_scaling_beta});
    a.push_back({"llama4_scaling_period", static_cast<long long>(opt.llama4_scaling_period)});
  }
  if (opt.alibi_before_scale) a.push_back({"alibi_before_scale", 1LL});
  const bool alibi = opt.alibi || opt.alibi_slopes;
  a.push_back({"alibi", alibi ? alibi_name(attention_detail::alibi_form(opt)) : "none"});
  if (opt.alibi_slopes) a.push_back({"alibi_slopes", 1LL});
  else if (opt.alibi) a.push_back({"alibi_max_bias", opt.alibi_max_bias});
  if (opt.t5_bias) {
    a.push_back({"t5_buckets", static_cast<long long>(opt.t5_buckets)});
    a.push_back({"t5_max_distance", static_cast<long long>(opt.t5_max_distance)});
    a.push_back({"t5_bidirectional", static_cast<long long>(opt.t5_bidirectional)});
    if (opt.gate_input) a.push_back({"wavlm_gate", 1LL});
  }
  if (opt.clipped_bias) {
    a.push_back({"clipped_max_distance", static_cast<long long>(clipped_distance(opt))});
    a.push_back({"clipped_symmetric", static_cast<long long>(opt.clipped_symmetric)});
  }
  if (g.rel_rows) {
    if (g.window.left == g.window.right) {
      a.push_back({"max_distance", static_cast<long long>(g.window.left)});
    }
    a.push_back({"relative_left", static_cast<long long>(g.window.left)});
    a.push_back({"relative_right", static_cast<long long>(g.window.right)});
    a.push_back({"relative_sign", std::string(g.window.q_minus_k ? "q-k" : "k-q")});
    a.push_back({"relative_beyond", std::string(g.window.zero_beyond ? "zero" : "clamp")});
  }
  if (g.dec_cols) {
    const bool kg = opt.key_grid_h > 0;
    a.push_back({"grid", std::vector<double>{static_cast<double>(opt.grid_h),
                                             static_cast<double>(opt.grid_w)}});
    a.push_back({"key_grid",
                 std::vector<double>{static_cast<double>(kg ? opt.key_grid_h : opt.grid_h),
                                     static_cast<double>(kg ? opt.key_grid_w : opt.grid_w)}});
  }
  if (g.global) {
    a.push_back({"global_block_size", static_cast<long long>(opt.global_block_size)});
    a.push_back({"global_blocks", static_cast<long long>(g.global)});
    a.push_back({"global_bias", static_cast<long long>(opt.global_bias != nullptr)});
    if (opt.global_bias && !opt.t5_bias) {
      a.push_back({"t5_buckets", static_cast<long long>(opt.t5_buckets)});
      a.push_back({"t5_max_distance", static_cast<long long>(opt.t5_max_distance)});
      a.push_back({"t5_bidirectional", static_cast<long long>(opt.t5_bidirectional)});
    }
  }
  a.push_back({"sinks", static_cast<long long>(opt.sinks != nullptr)});
  if (!opt.cu_seqlens.empty()) {
    a.push_back({"packed_sequences", static_cast<long long>(opt.cu_seqlens.size() - 1)});
  }
  a.push_back({"masked_rows", std::string(opt.masked_rows == MaskedRows::zero ? "zero" : "nan")});
  a.push_back(
      {"precision", std::string(dtype_name(opt.arith == Arith::exact ? g.compute : q_dtype))});
  a.push_back({"arith", arith_name(opt.arith)});
}

}  // namespace posenc

