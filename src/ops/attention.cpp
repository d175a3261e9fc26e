#include "posenc/ops/attention.hpp"

#include <xtensor-blas/xblas.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xstrides.hpp>
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>

#include "io/slab.hpp"
#include "ops/attention_hf.hpp"
#include "ops/attention_mask.hpp"
#include "ops/axis_strides.hpp"
#include "ops/blas_threads.hpp"
#include "ops/row_max.hpp"
#include "ops/widen.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"


namespace posenc {

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


constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------
// Shapes

using Strides = AxisStrides;
using attention_detail::key_rules;
using attention_detail::KeyRules;
Strides strides_of(const Shape& shape, const std::string& axes) {
  return axis_strides(shape, axes);
}

std::size_t axis_size(const Shape& shape, const std::string& axes, char c) {
  auto i = axes.find(c);
  return i == std::string::npos ? 1 : shape[i];
}

struct Geometry {
  std::string axes;
  std::size_t b = 1, hq = 1, hk = 1, sq = 0, sk = 0, d = 0, dv = 0;
  bool has_b = false, has_h = false;
  std::size_t rel_rows = 0;  // rows of the Shaw tables, 0 if none
  RelativeWindow window;     // their window (symmetric M, M by default)
  DType compute = DType::f32;
  DType out = DType::f32;
  DType lse = DType::f32;
  bool emit_logits = false, emit_probs = false, emit_output = false, emit_lse = false;
  std::vector<AttentionEmit> emit;
  // Worker threads, each with its own tiles: 0 = every OpenMP thread. A --max-memory
  // budget counts one worker's tiles and runs more only where it has room for theirs,
  // so whether a run fits does not depend on the thread count (the bits never do).
  std::size_t threads = 0;
  bool materialise() const { return emit_logits || emit_probs; }
  Shape logits_shape() const {
    Shape s;
    if (has_b) s.push_back(b);
    if (has_h) s.push_back(hq);
    s.push_back(sq);
    s.push_back(sk);
    return s;
  }
  Shape lse_shape() const {
    Shape s = logits_shape();
    s.pop_back();
    return s;
  }
  /// Q's shape with d replaced by dv.
  Shape output_shape(const Shape& q) const {
    Shape s = q;
    s[axes.find('d')] = dv;
    return s;
  }
};

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
      {opt.relative_v, "relative_v"}, {opt.t5_bias, "t5_bias"}, {opt.score_bias, "score_bias"}};
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
  if (g.d == 0 || g.sk == 0) {
    throw InputError(fmt::format("k: empty head dim or sequence in shape {}", shape_str(ks)));
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
  if (opt.precision) {
    g.compute = *opt.precision == Precision::f64 ? DType::f64 : DType::f32;
  } else {
    g.compute = q_dtype == DType::f64 ? DType::f64 : DType::f32;
  }
  g.out = opt.dtype.value_or(q_dtype);
  if (!is_float(g.out)) {
    throw UsageError(fmt::format("dtype {}: attention outputs are floats (f64, f32, f16, bf16)",
                                 dtype_name(g.out)));
  }
  g.lse = g.compute;
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
    if (t->ndim() != 2 || t->shape()[1] != width || (symmetric && t->shape()[0] % 2 != 1)) {
      throw InputError(fmt::format("{}: expected shape ({}, {}), got {}", what,
                                   symmetric ? std::string("2M+1") : std::to_string(win->rows()),
                                   width, shape_str(t->shape())));
    }
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
  return g;
}

struct Blocks {
  std::size_t q = 0, k = 0;
};

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

std::size_t mul_sat(std::size_t a, std::size_t b) {
  std::size_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::numeric_limits<std::size_t>::max();
  return r;
}
std::size_t add_sat(std::size_t a, std::size_t b) {
  std::size_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::numeric_limits<std::size_t>::max();
  return r;
}

// The score tiles and per-row work memory of one worker thread, in bytes.
std::size_t worker_tiles(const Geometry& g, const AttentionOptions& opt) {
  const Blocks bl = blocks_for(g, opt);
  return mul_sat(bl.q, bl.k + g.dv + 2 * g.rel_rows + 4) * dtype_size(g.compute);
}

std::pair<std::size_t, std::string> memory_of(const Geometry& g, const Shape& qs, const Shape& ks,
                                              const Shape* vs, DType q_dtype,
                                              const AttentionOptions& opt) {
  std::size_t ts = dtype_size(g.compute);
  std::size_t os = dtype_size(g.out);
  std::size_t scores = mul_sat(mul_sat(mul_sat(g.b, g.hq), g.sq), g.sk);
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
  need = add_sat(need, mul_sat(numel(ks), ts));  // worst case: K converted
  if (vs) need = add_sat(need, mul_sat(numel(*vs), ts));
  // One worker's tiles (see Geometry::threads).
  need = add_sat(need, worker_tiles(g, opt));
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


// ---------------------------------------------------------------------------------
// BLAS, single-threaded per call (see the file comment of attention.hpp), through
// xtensor-blas. Blocks whose rows are contiguous (the default bhsd layout, every tile)
// are zero-copy row-major adaptors; a block with a longer row stride (bshd inputs) is a
// strided adaptor, which xtensor-blas evaluates into a contiguous copy first (O(rows *
// cols) next to the O(m * n * k) product). C is a contiguous m x n tile.

// (The adaptor's element count is rows * cols, as xtensor requires of strided adaptors;
// the elements lie within rows * ld.)
template <class T>
auto matrix(const T* p, std::size_t rows, std::size_t cols, std::size_t ld) {
  return xt::adapt(p, rows * cols, xt::no_ownership(), std::array<std::size_t, 2>{rows, cols},
                   std::array<std::ptrdiff_t, 2>{static_cast<std::ptrdiff_t>(ld), 1});
}

template <class T>
void gemm(bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, bool b_strided = false) {
  const std::size_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  if (m == 1 && ldb == b_cols && !b_strided) {
    // One query row (decoding): a matrix-vector product reads B once, where sgemm would
    // first copy it into its packed layout. (Strided B, as from bshd inputs, takes the
    // gemm path, which evaluates it into a contiguous copy; so does B marked
    // `b_strided`, a contiguous copy of strided rows made by the caller.)
    auto x = xt::adapt(a, k, xt::no_ownership(), std::array<std::size_t, 1>{k});
    auto y = xt::adapt(c, n, xt::no_ownership(), std::array<std::size_t, 1>{n});
    xt::blas::gemv(xt::adapt(b, b_rows * b_cols, xt::no_ownership(),
                             std::array<std::size_t, 2>{b_rows, b_cols}),
                   x, y, !trans_b, alpha, beta);
    return;
  }
  auto out = xt::adapt(c, m * n, xt::no_ownership(), std::array<std::size_t, 2>{m, n});
  auto with_b = [&](const auto& A) {
    if (ldb == b_cols) {
      xt::blas::gemm(A, xt::adapt(b, b_rows * b_cols, xt::no_ownership(),
                                  std::array<std::size_t, 2>{b_rows, b_cols}),
                     out, false, trans_b, alpha, beta);
    } else {
      xt::blas::gemm(A, matrix(b, b_rows, b_cols, ldb), out, false, trans_b, alpha, beta);
    }
  };
  if (lda == k) {
    with_b(xt::adapt(a, m * k, xt::no_ownership(), std::array<std::size_t, 2>{m, k}));
  } else {
    with_b(matrix(a, m, k, lda));
  }
}

// ---------------------------------------------------------------------------------
// exp

// exp(x) for x <= 0 (scores minus their row maximum), written so that GCC vectorises
// the loop: Cephes' expf polynomial (max error about 1 ulp) with a 2^n scaling built
// from the exponent bits; below -87 (where expf is subnormal or 0) the result is 0,
// so masked (-inf) scores give exactly 0.
inline float exp_nonpositive(float x) {
  // The clamp and the final zeroing are integer selects on the bits (negative floats
  // order like their bits as unsigned), which GCC vectorises under -ftrapping-math.
  const std::uint32_t xb = __builtin_bit_cast(std::uint32_t, x);
  const std::uint32_t lim = __builtin_bit_cast(std::uint32_t, -87.0f);
  const std::uint32_t keep = xb > lim ? 0u : ~0u;
  const float xc = __builtin_bit_cast(float, (xb & keep) | (lim & ~keep));
  const float shifter = 12582912.0f;  // 1.5 * 2^23: rounds to an integer in the mantissa
  const float t = xc * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  const std::int32_t ni =
      __builtin_bit_cast(std::int32_t, t) - __builtin_bit_cast(std::int32_t, shifter);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float scale = __builtin_bit_cast(float, (ni + 127) << 23);
  return __builtin_bit_cast(float, __builtin_bit_cast(std::uint32_t, y * scale) & keep);
}

// p[j] = exp(s[j] - m) in place; returns the sum in double (NaN if a score is NaN;
// `may_nan` false skips that check when the scores are known finite). One pass: the
// exponentials go into 16 f32 lanes summed over chunks of up to 1024, the chunks added
// in f64, and the last n % 16 one by one in f64
// (a fixed order, so the result does not depend on anything but the data).
// AVX-512 and AVX2 clones: the same per-lane arithmetic (attention.cpp is compiled with
// -ffp-contract=off: no FMA), so the bits do not depend on the machine's vector width.
__attribute__((target_clones("avx512f", "avx2", "default"), noinline)) double exp_shift_sum(
    float* s, std::size_t n, float m, bool may_nan) {
  if (may_nan) {
    int nans = 0;
    for (std::size_t j = 0; j < n; ++j) nans += s[j] != s[j];
    if (nans) return std::numeric_limits<double>::quiet_NaN();
  }
  constexpr std::size_t kLanes = 16, kChunk = 1024;
  double sum = 0;
  std::size_t j = 0;
  const std::size_t whole = n / kLanes * kLanes;
  for (; j < whole; j += kChunk) {
    const std::size_t len = std::min(kChunk, whole - j);
    float acc[kLanes] = {};
    for (std::size_t c = 0; c < len; c += kLanes) {
      for (std::size_t l = 0; l < kLanes; ++l) {
        const float e = exp_nonpositive(s[j + c + l] - m);
        s[j + c + l] = e;
        acc[l] += e;
      }
    }
    for (std::size_t l = 0; l < kLanes; ++l) sum += acc[l];
  }
  j = whole;
  for (; j < n; ++j) {
    const float e = exp_nonpositive(s[j] - m);
    s[j] = e;
    sum += e;
  }
  return sum;
}

// Whether every value is finite, on the bits (all-ones exponent), so the loop vectorises.
inline bool all_finite(const float* p, std::size_t n) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bad |= static_cast<std::uint32_t>((__builtin_bit_cast(std::uint32_t, p[i]) & 0x7f800000u) ==
                                      0x7f800000u);
  }
  return bad == 0;
}
inline bool all_finite(const double* p, std::size_t n) {
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bad |= static_cast<std::uint64_t>(
        (__builtin_bit_cast(std::uint64_t, p[i]) & 0x7ff0000000000000ull) ==
        0x7ff0000000000000ull);
  }
  return bad == 0;
}

// Largest score of a row (lane-wise so it vectorises; NaNs are found by exp_shift_sum).
template <class T>
inline T row_max(const T* s, std::size_t n) {
  constexpr std::size_t kLanes = 16;
  T acc[kLanes];
  for (auto& a : acc) a = -std::numeric_limits<T>::infinity();
  std::size_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) acc[l] = s[j + l] > acc[l] ? s[j + l] : acc[l];
  T m = -std::numeric_limits<T>::infinity();
  for (std::size_t l = 0; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

// The largest float score of a row and whether all are finite: ops/row_max.hpp.
using row_max_detail::row_max_finite;
inline double row_max_finite(const double* s, std::size_t n, bool& finite) {
  finite = all_finite(s, n);
  return row_max(s, n);
}

inline double exp_shift_sum(double* s, std::size_t n, double m, bool) {
  double sum = 0;
  for (std::size_t j = 0; j < n; ++j) {
    double e = std::exp(s[j] - m);
    s[j] = e;
    sum += e;
  }
  return sum;
}

// ---------------------------------------------------------------------------------
// Storing rows in the output dtype.

template <class T>
void store(DType dt, std::byte* base, std::size_t offset, std::ptrdiff_t stride, const T* src,
           std::size_t n, T mul) {
  switch (dt) {
    case DType::f32: {
      float* p = reinterpret_cast<float*>(base) + offset;
      for (std::size_t j = 0; j < n; ++j) p[j * stride] = static_cast<float>(src[j] * mul);
      break;
    }
    case DType::f64: {
      double* p = reinterpret_cast<double*>(base) + offset;
      for (std::size_t j = 0; j < n; ++j) p[j * stride] = static_cast<double>(src[j] * mul);
      break;
    }
    case DType::f16: {
      auto* p = reinterpret_cast<std::uint16_t*>(base) + offset;
      for (std::size_t j = 0; j < n; ++j) {
        p[j * stride] = std::is_same_v<T, double> ? double_to_half(src[j] * mul)
                                                  : float_to_half(static_cast<float>(src[j] * mul));
      }
      break;
    }
    case DType::bf16: {
      auto* p = reinterpret_cast<std::uint16_t*>(base) + offset;
      for (std::size_t j = 0; j < n; ++j) {
        p[j * stride] = std::is_same_v<T, double> ? double_to_bf16(src[j] * mul)
                                                  : float_to_bf16(static_cast<float>(src[j] * mul));
      }
      break;
    }
    default:
      break;
  }
}

template <class T>
void fill(DType dt, std::byte* base, std::size_t offset, std::ptrdiff_t stride, std::size_t n,
          double v) {
  T one = 1;
  std::vector<T> tmp(n, static_cast<T>(v));
  store<T>(dt, base, offset, stride, tmp.data(), n, one);
}

// ---------------------------------------------------------------------------------
// The engine.

template <class T>
struct View {
  const T* p = nullptr;
  std::ptrdiff_t b = 0, h = 0, s = 0;  // element strides; d is contiguous
  // Contiguous rows widened from a layout whose rows are strided (bshd): the products
  // take the path they take on strided rows, so the bits are the same.
  bool strided = false;
};

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::f64;
}

// A view of x in type T with contiguous d, converting or transposing into `holder`
// when needed.
template <class T>
View<T> make_view(const Tensor& x, const std::string& axes, Tensor& holder) {
  const Tensor* src = &x;
  if (x.dtype() != dtype_of<T>()) {
    holder = x.astype(dtype_of<T>());
    src = &holder;
  }
  Strides st = strides_of(src->shape(), axes);
  std::size_t dsize = axis_size(src->shape(), axes, 'd');
  if (st.d != 1 && dsize > 1) {
    // d is not the last axis: copy into b, h, s, d order for BLAS.
    std::size_t nb = axis_size(src->shape(), axes, 'b'), nh = axis_size(src->shape(), axes, 'h'),
                ns = axis_size(src->shape(), axes, 's');
    Tensor t(dtype_of<T>(), Shape{nb, nh, ns, dsize});
    const T* in = src->data<T>();
    T* out = t.data<T>();
    for (std::size_t b = 0; b < nb; ++b)
      for (std::size_t h = 0; h < nh; ++h)
        for (std::size_t s = 0; s < ns; ++s)
          for (std::size_t c = 0; c < dsize; ++c)
            *out++ = in[b * st.b + h * st.h + s * st.s + c * st.d];
    holder = std::move(t);
    src = &holder;
    return {src->data<T>(), static_cast<std::ptrdiff_t>(nh * ns * dsize),
            static_cast<std::ptrdiff_t>(ns * dsize), static_cast<std::ptrdiff_t>(dsize)};
  }
  return {src->data<T>(), st.b, st.h, st.s};
}

// Everything a work item reads; built once, shared read-only by the threads.
template <class T>
struct Plan {
  Geometry g;
  Blocks bl;
  View<T> q, k, v;
  bool has_v = false;
  T scale = 1;
  T softcap = 0;
  std::int64_t off = 0;  // query i sits at position i + off
  KeyRules rules;  // which keys each query sees, and the temperature
  // Masks and biases.
  bool has_add_mask = false, has_keep_mask = false;
  std::vector<T> add_mask;
  std::vector<std::uint8_t> keep_mask;
  std::ptrdiff_t m_b = 0, m_h = 0, m_i = 0, m_j = 0;
  std::optional<AlibiVariant> alibi;
  std::vector<double> slopes;
  std::vector<T> t5;  // [hq][sq + sk - 1] bias by distance j - qpos + sk - 1
  std::vector<T> sinks;
  std::vector<std::int32_t> rel_index;  // by distance, as t5
  std::vector<T> rel_k, rel_v;          // [R, d], [R, dv]
  std::size_t R = 0;
  const T* bias = nullptr;   // score_bias [b][hq][sq][sk], or null
  std::vector<T> bias_copy;  // score_bias converted to T when its type differs
  MaskedRows masked_rows = MaskedRows::zero;
  // Inputs were checked finite: a non-finite score is then an overflow of T, which must
  // not pass for a masked (-inf) or poisoned (NaN) score.
  bool check_overflow = false;
  // Outputs.
  std::byte* logits = nullptr;
  std::byte* probs = nullptr;
  std::byte* out = nullptr;
  Strides out_st;
  TensorSink* out_sink = nullptr;  // instead of `out`: rows written as items end
  std::byte* lse = nullptr;
  bool per_element() const {
    return softcap > 0 || alibi || !t5.empty() || has_add_mask || has_keep_mask || R > 0 ||
           bias || rules.scales_queries();
  }
};

template <class T>
struct Scratch {
  std::vector<T> s, o, qr, bucket, m;
  std::vector<std::byte> out_rows;  // an item's output rows, for Plan::out_sink
  std::vector<double> l;
  std::vector<std::int64_t> lo, hi;
  std::int64_t lo_min = 0, hi_max = -1;  // keys any row may see
};

template <class T>
[[noreturn]] void overflow(std::size_t b, std::size_t h, std::size_t q0) {
  throw InputError(fmt::format(
      "attention scores overflow {} for finite inputs (batch {}, head {}, queries from {}): "
      "|scale * q.k| plus biases exceeds {:g}; compute in f64 with --precision f64",
      std::is_same_v<T, float> ? "f32" : "f64", b, h, q0, std::numeric_limits<T>::max()));
}

// The keys [lo, hi] query row i of batch bi may see (attention_mask.hpp).
template <class T>
std::pair<std::int64_t, std::int64_t> row_key_range(const Plan<T>& P, std::size_t bi,
                                                    std::int64_t i) {
  return P.rules.range(bi, i);
}

// The keys [lo_min, hi_max] any row of the item from query q0 sees (hi_max < 0: none),
// and each row's range into lo and hi when they are given.
template <class T>
std::pair<std::int64_t, std::int64_t> item_key_range(const Plan<T>& P, std::size_t bi,
                                                     std::size_t q0, std::int64_t* lo = nullptr,
                                                     std::int64_t* hi = nullptr) {
  const std::size_t qn = std::min(P.bl.q, P.g.sq - q0);
  std::int64_t lo_min = static_cast<std::int64_t>(P.g.sk), hi_max = -1;
  for (std::size_t r = 0; r < qn; ++r) {
    auto [a, e] = row_key_range(P, bi, static_cast<std::int64_t>(q0 + r));
    if (lo) lo[r] = a, hi[r] = e;
    if (a <= e) lo_min = std::min(lo_min, a), hi_max = std::max(hi_max, e);
  }
  return {lo_min, hi_max};
}

// A work item is (batch, query head, query block). Its rows' running softmax state
// lives in a Scratch: item_begin sets it up, item_keys folds in key blocks (in order,
// each block of P.bl.k keys from a multiple of P.bl.k), item_end normalises and
// stores. Whether the keys come in one piece (in memory) or in chunks (streamed from
// a file), the blocks and so the bits are the same.
template <class T>
void item_begin(const Plan<T>& P, Scratch<T>& w, std::size_t bi, std::size_t hi_q,
                std::size_t q0) {
  const Geometry& g = P.g;
  const std::size_t qn = std::min(P.bl.q, g.sq - q0);
  const T* qp = P.q.p + bi * P.q.b + hi_q * P.q.h + q0 * P.q.s;
  const bool need_v = P.has_v && g.emit_output;
  const std::size_t dv = g.dv;
  const T neg_inf = -std::numeric_limits<T>::infinity();

  w.m.assign(qn, neg_inf);
  w.l.assign(qn, 0.0);
  if (need_v) w.o.assign(qn * dv, T(0));
  if (P.R) {
    w.qr.resize(qn * P.R);
    gemm(true, qn, P.R, g.d, P.scale, qp, P.q.s, P.rel_k.data(), g.d, T(0), w.qr.data());
    if (need_v && !P.rel_v.empty()) w.bucket.assign(qn * P.R, T(0));
  }
  if (!P.sinks.empty()) {
    T sink = P.sinks[hi_q];
    if (sink > neg_inf) {
      std::fill(w.m.begin(), w.m.end(), sink);
      std::fill(w.l.begin(), w.l.end(), 1.0);  // exp(sink - sink)
    }
  }
  w.lo.resize(qn);
  w.hi.resize(qn);
  std::tie(w.lo_min, w.hi_max) = item_key_range(P, bi, q0, w.lo.data(), w.hi.data());
}

// Rows of an item cut to their own keys within a block when the ranges of its rows
// differ (see item_keys).
constexpr std::size_t kRowGroup = 64;

// Key blocks [j_begin, j_end) of the item; K and V view the keys from c0 on (all of
// them in memory, or the chunk read last).
template <class T>
void item_keys(const Plan<T>& P, Scratch<T>& w, std::vector<T>& tile, const View<T>& K,
               const View<T>& V, std::size_t c0, std::size_t bi, std::size_t hi_q,
               std::size_t q0, std::size_t j_begin, std::size_t j_end) {
  const Geometry& g = P.g;
  const std::size_t qn = std::min(P.bl.q, g.sq - q0);
  const std::size_t kvh = hi_q / (g.hq / g.hk);
  const T* qp = P.q.p + bi * P.q.b + hi_q * P.q.h + q0 * P.q.s;
  const T* kp = K.p + bi * K.b + kvh * K.h;
  const T* vp = V.p ? V.p + bi * V.b + kvh * V.h : nullptr;
  const bool need_v = vp && g.emit_output;
  const std::size_t kB = P.bl.k;
  const std::size_t dv = g.dv;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::int64_t sk = static_cast<std::int64_t>(g.sk);
  const std::int64_t sq = static_cast<std::int64_t>(g.sq);
  if (tile.size() < qn * kB) tile.resize(qn * kB);
  const std::size_t ndist = g.sq + g.sk - 1;
  const T* t5row = P.t5.empty() ? nullptr : P.t5.data() + hi_q * ndist;
  const double slope = P.alibi ? P.slopes[hi_q] : 0.0;

  // Rows [r0, r1) of the item against keys [j0, j0 + n) of the block: the scores, the
  // online softmax update and the product with V.
  auto fold = [&](std::size_t r0, std::size_t r1, std::size_t j0, std::size_t n) {
    const std::size_t rows = r1 - r0;
    const std::int64_t j0i = static_cast<std::int64_t>(j0);
    T* S = tile.data() + r0 * n;  // (fits: r0 * n + rows * n <= qn * kB)
    gemm(true, rows, n, g.d, P.scale, qp + r0 * P.q.s, P.q.s, kp + (j0 - c0) * K.s, K.s, T(0),
         S, K.strided);
    // Overflow check: over the whole tile before the biases (a soft-cap would hide an
    // infinite product), else row by row over the keys the row sees, with its maximum.
    const bool per_element = P.per_element();
    if (P.check_overflow && per_element && !all_finite(S, rows * n)) overflow<T>(bi, hi_q, q0);
    for (std::size_t r = r0; r < r1; ++r) {
      T* s = S + (r - r0) * n;
      const std::int64_t i = static_cast<std::int64_t>(q0 + r);
      const std::int64_t qpos = i + P.off;
      if (per_element) {
        const T* qr = P.R ? w.qr.data() + r * P.R : nullptr;
        const T* br = P.bias ? P.bias + ((bi * g.hq + hi_q) * g.sq + q0 + r) * g.sk : nullptr;
        const std::int64_t dshift = sk - 1 - qpos;  // distance index = j + dshift
        std::ptrdiff_t mbase = bi * P.m_b + hi_q * P.m_h + i * P.m_i;
        const T temp = static_cast<T>(P.rules.temperature(qpos));
        for (std::size_t jj = 0; jj < n; ++jj) {
          const std::int64_t j = j0i + static_cast<std::int64_t>(jj);
          T x = s[jj];
          if (qr) x += qr[P.rel_index[j + dshift]];
          if (P.rules.scales_queries()) x *= temp;
          if (br) x += br[j];
          if (P.softcap > 0) x = P.softcap * std::tanh(x / P.softcap);
          if (P.alibi) x += static_cast<T>(alibi_bias(*P.alibi, slope, i, j, sq, sk));
          if (t5row) x += t5row[j + dshift];
          if (P.check_overflow && !(std::abs(x) <= std::numeric_limits<T>::max())) {
            overflow<T>(bi, hi_q, q0);
          }
          if (P.has_add_mask) x += P.add_mask[mbase + j * P.m_j];
          if (P.has_keep_mask && !P.keep_mask[mbase + j * P.m_j]) x = neg_inf;
          s[jj] = x;
        }
      }
      // Range masks: keys [a, e) of the block are seen.
      const std::int64_t lo = w.lo[r] - j0i, hi = w.hi[r] - j0i;
      std::size_t a = 0, e = 0;
      if (!(lo > hi || hi < 0 || lo >= static_cast<std::int64_t>(n))) {
        a = static_cast<std::size_t>(std::max<std::int64_t>(lo, 0));
        e = static_cast<std::size_t>(std::min<std::int64_t>(hi + 1, static_cast<std::int64_t>(n)));
      }
      // The maximum over the seen keys (the masked ones are -inf).
      T mt = neg_inf;
      if (a < e) {
        bool finite = true;
        mt = row_max_finite(s + a, e - a, finite);
        if (P.check_overflow && !per_element && !finite) overflow<T>(bi, hi_q, q0);
      }
      std::fill(s, s + a, neg_inf);
      std::fill(s + e, s + n, neg_inf);
      if (P.logits) {
        store<T>(g.out, P.logits, ((bi * g.hq + hi_q) * g.sq + q0 + r) * g.sk + j0, 1, s, n, T(1));
      }
      // Online softmax update.
      const T m_old = w.m[r];
      const T m_new = std::max(m_old, mt);
      if (m_new == neg_inf) {
        // Every score so far is -inf or NaN (row_max skips NaN): a NaN must still
        // poison the row, not make it look fully masked.
        if (std::any_of(s, s + n, [](T x) { return x != x; })) {
          w.l[r] = std::numeric_limits<double>::quiet_NaN();
        }
        std::fill(s, s + n, T(0));
        continue;
      }
      const double alpha = m_old == neg_inf ? 0.0 : std::exp(static_cast<double>(m_old - m_new));
      // Scores checked finite cannot be NaN; masked ones are -inf and give 0.
      const double sum = exp_shift_sum(s, n, m_new, !P.check_overflow);
      w.l[r] = w.l[r] * alpha + sum;
      w.m[r] = m_new;
      if (alpha != 1.0) {
        if (need_v) {
          T a = static_cast<T>(alpha);
          for (std::size_t c = 0; c < dv; ++c) w.o[r * dv + c] *= a;
        }
        if (!w.bucket.empty()) {
          T a = static_cast<T>(alpha);
          for (std::size_t c = 0; c < P.R; ++c) w.bucket[r * P.R + c] *= a;
        }
      }
      if (!w.bucket.empty()) {
        const std::int64_t dshift = sk - 1 - qpos;
        T* bk = w.bucket.data() + r * P.R;
        for (std::size_t jj = 0; jj < n; ++jj) {
          bk[P.rel_index[j0i + static_cast<std::int64_t>(jj) + dshift]] += s[jj];
        }
      }
    }
    if (need_v) {
      gemm(false, rows, dv, n, T(1), S, n, vp + (j0 - c0) * V.s, V.s, T(1), w.o.data() + r0 * dv,
           V.strided);
    }
  };

  for (std::size_t jb = j_begin; jb < j_end; jb += kB) {
    const std::size_t nb = std::min(kB, j_end - jb);
    if (g.materialise()) {
      fold(0, qn, jb, nb);  // logits and probs need every -inf
      continue;
    }
    // Only the keys some row sees: a block no row of the item sees is skipped, the
    // edges of one seen in part (the causal diagonal, window edges, padding) are cut
    // off, for each group of kRowGroup rows on its own when their ranges differ, so
    // that at most a kRowGroup-wide triangle of the causal diagonal is computed and
    // masked (a 256 x 256 triangle was 6% of the FLOPs of a causal run at s 4096).
    const std::int64_t b0 = static_cast<std::int64_t>(jb), b1 = b0 + static_cast<std::int64_t>(nb);
    auto cut = [&](std::size_t r0, std::size_t r1) {
      std::int64_t a = b1, e = b0 - 1;
      for (std::size_t r = r0; r < r1; ++r) {
        if (w.lo[r] > w.hi[r]) continue;
        a = std::min(a, std::max(b0, w.lo[r]));
        e = std::max(e, std::min(b1 - 1, w.hi[r]));
      }
      return std::pair<std::int64_t, std::int64_t>{a, e};
    };
    const auto whole = cut(0, qn);
    if (whole.first > whole.second) continue;
    bool same = true;
    for (std::size_t r0 = 0; r0 < qn && same; r0 += kRowGroup) {
      same = cut(r0, std::min(qn, r0 + kRowGroup)) == whole;
    }
    for (std::size_t r0 = 0; r0 < qn; r0 += same ? qn : kRowGroup) {
      const std::size_t r1 = same ? qn : std::min(qn, r0 + kRowGroup);
      const auto [a, e] = same ? whole : cut(r0, r1);
      if (a <= e) fold(r0, r1, static_cast<std::size_t>(a), static_cast<std::size_t>(e - a + 1));
    }
  }
}

// Normalises the item's rows and stores them; `tile` holds the whole score rows when
// probs are materialised.
template <class T>
void item_end(const Plan<T>& P, Scratch<T>& w, const std::vector<T>& tile, std::size_t bi,
              std::size_t hi_q, std::size_t q0) {
  const Geometry& g = P.g;
  const std::size_t qn = std::min(P.bl.q, g.sq - q0);
  const bool need_v = P.has_v && g.emit_output;
  const std::size_t dv = g.dv;
  if (need_v && !w.bucket.empty()) {
    gemm(false, qn, dv, P.R, T(1), w.bucket.data(), P.R, P.rel_v.data(), dv, T(1), w.o.data());
  }
  // Normalise and store: into the output, or into out_rows for the sink (rows of an
  // item are then contiguous: out_st.s == dv).
  const std::size_t out0 = bi * P.out_st.b + hi_q * P.out_st.h + q0 * P.out_st.s;
  std::byte* out = P.out;
  std::size_t out_at = out0;
  if (P.out_sink) {
    w.out_rows.resize(qn * dv * dtype_size(g.out));
    out = w.out_rows.data();
    out_at = 0;
  }
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (std::size_t r = 0; r < qn; ++r) {
    const std::size_t row = (bi * g.hq + hi_q) * g.sq + q0 + r;
    const double l = w.l[r];
    const bool empty = !(l > 0) && !std::isnan(l);
    T inv = empty ? T(0) : static_cast<T>(1.0 / l);
    if (empty && P.masked_rows == MaskedRows::nan) inv = nan;
    if (P.probs) {
      const T* s = tile.data() + r * g.sk;  // one block when probs are materialised
      if (empty) {
        fill<T>(g.out, P.probs, row * g.sk, 1, g.sk, static_cast<double>(inv));
      } else {
        store<T>(g.out, P.probs, row * g.sk, 1, s, g.sk, inv);
      }
    }
    if (out) {
      const std::size_t off = out_at + r * P.out_st.s;
      if (empty) {
        fill<T>(g.out, out, off, P.out_st.d, dv, static_cast<double>(inv));
      } else {
        store<T>(g.out, out, off, P.out_st.d, w.o.data() + r * dv, dv, inv);
      }
    }
    if (P.lse) {
      double v = empty ? -kInf : static_cast<double>(w.m[r]) + std::log(l);
      if (g.lse == DType::f64) {
        reinterpret_cast<double*>(P.lse)[row] = v;
      } else {
        reinterpret_cast<float*>(P.lse)[row] = static_cast<float>(v);
      }
    }
  }
  if (P.out_sink) P.out_sink->write_at(out0, out, qn * dv);
}

template <class T>
void run_item(const Plan<T>& P, Scratch<T>& w, std::size_t bi, std::size_t hi_q, std::size_t q0) {
  item_begin(P, w, bi, hi_q, q0);
  item_keys(P, w, w.s, P.k, P.v, 0, bi, hi_q, q0, 0, P.g.sk);
  item_end(P, w, w.s, bi, hi_q, q0);
}

template <class T>
std::vector<T> to_vector(const Tensor& t) {
  std::vector<T> v(t.numel());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(t.get(i));
  return v;
}

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
  if (opt.alibi) {
    P.alibi = opt.alibi;
    P.slopes = alibi_slopes(static_cast<int>(g.hq), opt.alibi_max_bias);
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
    if (opt.relative_k) {
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

// The sink AttentionOptions::output_sink gives for the output, when the output is
// emitted in rows that an item holds contiguously (d last, s before it) and the sink
// takes positional writes; null otherwise (the output is then kept in memory).
TensorSink* take_output_sink(const Geometry& g, const Shape& q_shape, const AttentionOptions& opt) {
  if (!g.emit_output || !opt.output_sink) return nullptr;
  const Shape os = g.output_shape(q_shape);
  const Strides st = strides_of(os, g.axes);
  if (st.d != 1 || st.s != static_cast<std::ptrdiff_t>(g.dv)) return nullptr;
  TensorSink* sink = opt.output_sink(TensorInfo{g.out, os, {}, {}});
  return sink && sink->writes_at() ? sink : nullptr;
}

// The emitted tensors (the output only when no sink takes it), allocated, and P's
// pointers to them.
template <class T>
AttentionResult allocate(Plan<T>& P, const Shape& q_shape, TensorSink* out_sink) {
  const Geometry& g = P.g;
  AttentionResult res;
  if (g.emit_logits) res.logits = Tensor(g.out, g.logits_shape()), P.logits = res.logits.bytes();
  if (g.emit_probs) res.probs = Tensor(g.out, g.logits_shape()), P.probs = res.probs.bytes();
  if (g.emit_output) {
    const Shape os = g.output_shape(q_shape);
    P.out_st = strides_of(os, g.axes);
    if (out_sink) {
      P.out_sink = out_sink;
      res.output_streamed = true;
    } else {
      res.output = Tensor(g.out, os);
      P.out = res.output.bytes();
    }
  }
  if (g.emit_lse) res.lse = Tensor(g.lse, g.lse_shape()), P.lse = res.lse.bytes();
  return res;
}

// Runs f(item, thread) for items [0, n) on plain threads, not an OpenMP team: BLAS is
// never called inside an OpenMP region. Each item is independent and computed the same
// way by whichever thread takes it, so the schedule cannot change any result. The
// first exception stops the others and is rethrown.
template <class F>
void for_items(std::size_t n, std::size_t nthreads, F&& f) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&](std::size_t t) {
    try {
      for (std::size_t it = next++; it < n; it = next++) f(it, t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// Work item `it` as (batch, query head, first query). The last query blocks come
// first: under a causal mask they see the most keys, and taking the large items first
// leaves the small ones to even out the threads at the end.
std::array<std::size_t, 3> item_at(const Geometry& g, const Blocks& bl, std::size_t nq,
                                   std::size_t it) {
  return {it / (nq * g.hq), (it / nq) % g.hq, (nq - 1 - it % nq) * bl.q};
}

std::size_t thread_count(std::size_t items, std::size_t cap = 0) {
  auto threads = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
  if (cap > 0) threads = std::min(threads, cap);
  return std::max<std::size_t>(1, std::min(items, threads));
}

template <class T>
AttentionResult run(const Tensor& q, const Tensor& k, const Tensor* v, const Geometry& g,
                    const AttentionOptions& opt) {
  Plan<T> P;
  plan(P, g, opt, v != nullptr);
  Tensor hq_, hk_, hv_;
  P.q = make_view<T>(q, g.axes, hq_);
  P.k = make_view<T>(k, g.axes, hk_);
  if (v) P.v = make_view<T>(*v, g.axes, hv_);
  AttentionResult res = allocate(P, q.shape(), take_output_sink(g, q.shape(), opt));
  const std::size_t nq = (g.sq + P.bl.q - 1) / P.bl.q;
  const std::size_t items = g.b * g.hq * nq;
  if (g.sq > 0) {
    OneBlasThread one_blas;
    const std::size_t nthreads = thread_count(items, g.threads);
    std::vector<Scratch<T>> scratch(nthreads);
    for_items(items, nthreads, [&](std::size_t it, std::size_t t) {
      auto [b, h, q0] = item_at(g, P.bl, nq, it);
      run_item<T>(P, scratch[t], b, h, q0);
    });
  }
  return res;
}

// ---------------------------------------------------------------------------------
// Out of core: K and V read in chunks of whole key blocks.

// What a streamed run holds besides the K and V chunks, and what each key of a chunk
// adds (its raw bytes plus a converted copy when the type or the layout differs).
struct StreamMemory {
  std::size_t fixed = 0, per_key = 0;
  std::size_t tile = 0;  // one more worker's tiles
};

StreamMemory stream_memory(const Geometry& g, const TensorInfo& q, const TensorInfo& k,
                           const TensorInfo* v, const AttentionOptions& opt,
                           bool output_in_memory) {
  const std::size_t ts = dtype_size(g.compute), os = dtype_size(g.out);
  const bool d_last = g.axes.back() == 'd';
  const std::size_t rows = mul_sat(mul_sat(g.b, g.hq), g.sq);
  Blocks bl = blocks_for(g, opt);
  StreamMemory m;
  std::size_t f = 0;
  if (g.emit_output && output_in_memory) f = add_sat(f, mul_sat(mul_sat(rows, g.dv), os));
  if (g.emit_lse) f = add_sat(f, mul_sat(rows, dtype_size(g.lse)));
  const std::size_t qn = checked_numel(q.shape, 1, "q");
  f = add_sat(f, mul_sat(qn, dtype_size(q.dtype)));
  if (q.dtype != g.compute || !d_last) f = add_sat(f, mul_sat(qn, ts));
  // Per-row state of every work item: output accumulator, max, sum, key range, and the
  // Shaw terms.
  f = add_sat(f, mul_sat(rows, (g.dv + 1 + 2 * g.rel_rows) * ts + 8 + 16));
  // One worker's score tiles (see Geometry::threads).
  m.tile = mul_sat(bl.q, bl.k) * ts;
  m.fixed = add_sat(f, m.tile);
  auto per = [&](const TensorInfo& t, std::size_t width) {
    std::size_t bytes = dtype_size(t.dtype) + (t.dtype != g.compute || !d_last ? ts : 0);
    return mul_sat(mul_sat(mul_sat(g.b, g.hk), width), bytes);
  };
  m.per_key = per(k, g.d);
  if (v) m.per_key = add_sat(m.per_key, per(*v, g.dv));
  return m;
}

// Calls f(first element, count) for the ranges of the C-order data that hold entries
// [c0, c0 + n) along axis `s_axis` of a tensor of `shape`: one per index of the axes
// before it.
template <class F>
void axis_ranges(const Shape& shape, std::size_t s_axis, std::size_t c0, std::size_t n, F&& f) {
  std::size_t outer = 1, inner = 1;
  for (std::size_t ax = 0; ax < s_axis; ++ax) outer *= shape[ax];
  for (std::size_t ax = s_axis + 1; ax < shape.size(); ++ax) inner *= shape[ax];
  for (std::size_t o = 0; o < outer; ++o) f((o * shape[s_axis] + c0) * inner, n * inner);
}

// Keys [c0, c0 + n) of a tensor along its axis `s_axis` into `t`, which is reused when
// the shape repeats.
void read_keys(TensorSource& src, std::size_t s_axis, std::size_t c0, std::size_t n, Tensor& t) {
  const TensorInfo& info = src.info();
  Shape cs = info.shape;
  cs[s_axis] = n;
  if (t.shape() != cs || t.dtype() != info.dtype) {
    t = Tensor();  // free the last chunk before allocating the next
    t = Tensor(info.dtype, cs);
  }
  std::byte* dst = t.bytes();
  const std::size_t item = dtype_size(info.dtype);
  axis_ranges(info.shape, s_axis, c0, n, [&](std::size_t first, std::size_t count) {
    src.read_elements(first, count, dst);
    dst += count * item;
  });
}

// Q, K or V used in place, in the page cache, when its source maps its file (an NPY file
// in C order and native byte order, a contiguous HDF5 dataset) and it is already in the
// compute dtype with d last: no copy. `base` is null otherwise.
template <class T>
struct MappedInput {
  const T* base = nullptr;
  Strides st;
  /// The view of entries from c0 on along s.
  View<T> view(std::size_t c0 = 0) const {
    return {base + static_cast<std::ptrdiff_t>(c0) * st.s, st.b, st.h, st.s};
  }
};

template <class T>
MappedInput<T> mapped_input(TensorSource& src, const Geometry& g) {
  MappedInput<T> m;
  const TensorInfo& info = src.info();
  if (info.dtype != dtype_of<T>() || g.axes.back() != 'd') return m;
  m.base = reinterpret_cast<const T*>(src.mapped_data());  // aligned to the element size
  m.st = strides_of(info.shape, g.axes);
  return m;
}

// K or V used in place of its mapped file for the run in place: stored in T and used as
// it is, or stored as f16 or bf16 and widened one key block at a time into the worker's
// buffer, while the block is in the cache for the product (no copy of the whole tensor,
// no pass of its own). Widening is exact, so the bits are those of a run on the tensor
// converted first. `base` is null when the file is not mapped or the dtype is another.
struct MappedKV {
  const std::byte* base = nullptr;
  DType dtype = DType::f32;
  Strides st;
  std::size_t width = 0;  // d or dv
};

template <class T>
MappedKV mapped_kv(TensorSource& src, const Geometry& g, std::size_t width) {
  MappedKV m;
  const TensorInfo& info = src.info();
  if (g.axes.back() != 'd' || (info.dtype != dtype_of<T>() && !detail::widens(info.dtype))) {
    return m;
  }
  m.base = src.mapped_data();
  m.dtype = info.dtype;
  m.st = strides_of(info.shape, g.axes);
  m.width = width;
  return m;
}

// Whether entries [c0, c0 + n) along axis `s_axis` of a mapped tensor are all finite,
// its ranges checked by the worker threads.
template <class T>
bool ranges_finite(const T* base, const Shape& shape, std::size_t s_axis, std::size_t c0,
                   std::size_t n) {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  axis_ranges(shape, s_axis, c0, n,
              [&](std::size_t first, std::size_t count) { ranges.emplace_back(first, count); });
  std::atomic<bool> finite{true};
  for_items(ranges.size(), thread_count(ranges.size()), [&](std::size_t i, std::size_t) {
    if (!all_finite(base + ranges[i].first, ranges[i].second)) finite = false;
  });
  return finite;
}

// Whether keys [j0, j0 + n) of batch b, head h of a K or V view (rows of `width`) are
// finite.
template <class T>
bool keys_finite(const View<T>& x, std::size_t b, std::size_t h, std::size_t j0, std::size_t n,
                 std::size_t width) {
  const T* p = x.p + b * x.b + h * x.h + j0 * x.s;
  if (x.s == static_cast<std::ptrdiff_t>(width)) return all_finite(p, n * width);
  for (std::size_t j = 0; j < n; ++j) {
    if (!all_finite(p + j * x.s, width)) return false;
  }
  return true;
}

struct NonFiniteKeys {};

// K and V used in place in their mapped files (P.k, P.v): each work item walks its own
// key blocks from first to last, begins, folds and stores without waiting for the
// others, and its scratch is its thread's. A key block of a KV head is checked finite
// by the first item that uses it, while it is in the cache for the product, so K and V
// are read once; blocks no row sees are neither read nor checked. Its pages leave the
// process's resident memory (not the page cache) once the last item that uses it is
// done, where a head's keys are contiguous (bhsd). Items compute as in the chunked run:
// the same blocks in the same order, so the same bits. (Decode, sq 1 and sk 65,536 of
// 8 heads: 21.7 ms against 38.6 ms chunked, peak RSS 55 MiB.)
template <class T>
void run_in_place(const Plan<T>& P, const MappedKV& km, const MappedKV* vm, bool check,
                  std::size_t nq, std::size_t nthreads) {
  const Geometry& g = P.g;
  const std::size_t items = g.b * g.hq * nq;
  const std::size_t kB = std::max<std::size_t>(P.bl.k, 1);
  const std::size_t nblk = (g.sk + kB - 1) / kB;
  const std::size_t group = g.hq / g.hk;
  const bool has_v = vm != nullptr;
  auto at = [&](std::size_t it) { return item_at(g, P.bl, nq, it); };
  auto slot = [&](std::size_t b, std::size_t h, std::size_t blk) {
    return (b * g.hk + h / group) * nblk + blk;
  };
  // Per (batch, KV head, key block): the items yet to use it, and whether it was checked.
  const std::size_t nslots = g.b * g.hk * nblk;
  std::unique_ptr<std::atomic<std::uint32_t>[]> left(new std::atomic<std::uint32_t>[nslots]());
  std::unique_ptr<std::atomic<bool>[]> checked(new std::atomic<bool>[nslots]());
  std::vector<bool> used(nslots);
  for (std::size_t it = 0; it < items; ++it) {
    auto [b, h, q0] = at(it);
    auto [lo, hi] = item_key_range(P, b, q0);
    if (lo > hi) continue;
    for (std::size_t blk = static_cast<std::size_t>(lo) / kB;
         blk <= static_cast<std::size_t>(hi) / kB; ++blk) {
      left[slot(b, h, blk)].fetch_add(1, std::memory_order_relaxed);
      used[slot(b, h, blk)] = true;
    }
  }
  // The stored rows of block `blk` of batch b, query head h, and their number.
  auto rows_of = [&](const MappedKV& m, std::size_t b, std::size_t h, std::size_t blk) {
    const std::size_t j0 = blk * kB;
    const std::ptrdiff_t off = b * m.st.b + (h / group) * m.st.h + j0 * m.st.s;
    return std::pair<const std::byte*, std::size_t>{m.base + off * dtype_size(m.dtype),
                                                    std::min(kB, g.sk - j0)};
  };
  // The block as a view of T from its first key on: in place, or widened into `buf`.
  // Widening finds whether the keys are finite on the way; `finite` (when given) gets
  // it, and for keys in place checks them.
  auto block = [&](const MappedKV& m, std::size_t b, std::size_t h, std::size_t blk,
                   std::vector<T>& buf, bool* finite) -> View<T> {
    auto [p, n] = rows_of(m, b, h, blk);
    if (m.dtype == dtype_of<T>()) {
      const View<T> x{reinterpret_cast<const T*>(p), 0, 0, m.st.s};
      if (finite) *finite = keys_finite(x, 0, 0, 0, n, m.width);
      return x;
    }
    buf.resize(n * m.width);
    const std::size_t es = dtype_size(m.dtype);
    bool all = true;
    if (m.st.s == static_cast<std::ptrdiff_t>(m.width)) {  // rows contiguous: one call
      all = detail::widen(m.dtype, p, buf.data(), n * m.width);
    } else {
      for (std::size_t j = 0; j < n; ++j) {
        all &= detail::widen(m.dtype, p + j * m.st.s * es, buf.data() + j * m.width, m.width);
      }
    }
    if (finite) *finite = all;
    return {buf.data(), 0, 0, static_cast<std::ptrdiff_t>(m.width),
            m.st.s != static_cast<std::ptrdiff_t>(m.width)};
  };
  auto finite = [&](const MappedKV& m, std::size_t b, std::size_t h, std::size_t blk,
                    std::vector<T>& buf) {
    bool ok = true;
    block(m, b, h, blk, buf, &ok);
    return ok;
  };
  // Released in spans of at least kReleaseBytes: each release interrupts the other
  // cores to flush their TLBs (releasing every 512 KiB block of a 512 MiB decode cost
  // 20% of its time).
  static constexpr std::size_t kReleaseBytes = std::size_t{8} << 20;
  struct Span {
    const std::byte *lo = nullptr, *hi = nullptr;
    void add(const std::byte* p, std::size_t n) {
      if (p != hi) flush(), lo = p;
      hi = p + n;
      if (static_cast<std::size_t>(hi - lo) >= kReleaseBytes) flush();
    }
    void flush() {
      if (hi != lo) io_detail::release_mapped(lo, static_cast<std::size_t>(hi - lo));
      lo = hi = nullptr;
    }
  };
  std::vector<std::array<Span, 2>> spans(nthreads);  // K, V per thread
  auto release = [&](Span& span, const MappedKV& m, std::size_t b, std::size_t h,
                     std::size_t blk) {
    if (m.st.s != static_cast<std::ptrdiff_t>(m.width)) return;  // rows of heads interleaved
    auto [p, n] = rows_of(m, b, h, blk);
    span.add(p, n * m.width * dtype_size(m.dtype));
  };
  std::vector<Scratch<T>> scratch(nthreads);
  std::vector<std::array<std::vector<T>, 2>> widened(nthreads);  // K, V per thread
  try {
    for_items(items, nthreads, [&](std::size_t it, std::size_t t) {
      auto [b, h, q0] = at(it);
      Scratch<T>& w = scratch[t];
      item_begin(P, w, b, h, q0);
      if (w.lo_min <= w.hi_max) {
        for (std::size_t blk = static_cast<std::size_t>(w.lo_min) / kB;
             blk <= static_cast<std::size_t>(w.hi_max) / kB; ++blk) {
          const std::size_t sl = slot(b, h, blk);
          const bool check_now = check && !checked[sl].load(std::memory_order_acquire);
          bool k_ok = true, v_ok = true;
          const View<T> K = block(km, b, h, blk, widened[t][0], check_now ? &k_ok : nullptr);
          const View<T> V = has_v ? block(*vm, b, h, blk, widened[t][1],
                                          check_now && k_ok ? &v_ok : nullptr)
                                  : View<T>{};
          if (check_now) {
            if (!k_ok || !v_ok) throw NonFiniteKeys{};
            checked[sl].store(true, std::memory_order_release);
          }
          const std::size_t j0 = blk * kB;
          item_keys(P, w, w.s, K, V, j0, b, h, q0, j0, std::min(j0 + kB, g.sk));
          if (left[sl].fetch_sub(1, std::memory_order_acq_rel) == 1) {
            release(spans[t][0], km, b, h, blk);
            if (has_v) release(spans[t][1], *vm, b, h, blk);
          }
        }
      }
      item_end(P, w, w.s, b, h, q0);
    });
  } catch (...) {
    // NaN or Inf in K or V is named before any other failure (an overflow another item
    // met first), and the same whichever thread got there first: the first key block, in
    // key order, of any KV head that some item reads, K before V (as the chunked run
    // does with chunks of one block).
    if (!check) throw;
    std::vector<T> buf;
    for (std::size_t blk = 0; blk < nblk; ++blk) {
      for (const bool keys : {true, false}) {
        for (std::size_t b = 0; b < g.b; ++b) {
          for (std::size_t h = 0; h < g.hq; h += group) {
            if (!used[slot(b, h, blk)]) continue;
            if (keys && !finite(km, b, h, blk, buf)) throw nonfinite_input("k");
            if (!keys && has_v && !finite(*vm, b, h, blk, buf)) throw nonfinite_input("v");
          }
        }
      }
    }
    try {
      throw;
    } catch (const NonFiniteKeys&) {
      throw std::logic_error("attention: non-finite keys not found again");
    }
  }
}

template <class T>
AttentionResult run_streamed(TensorSource& qs, TensorSource& ks, TensorSource* vs,
                             const Geometry& g, const AttentionOptions& opt, std::size_t chunk,
                             bool map_kv, TensorSink* out_sink) {
  // Q in place when its file is mapped, else read whole.
  const MappedInput<T> qm = mapped_input<T>(qs, g);
  Tensor qt, hq_;
  if (qm.base == nullptr) qt = read_all_rows(qs);
  if (!opt.allow_nonfinite) {
    require_finite(qt, nullptr, nullptr, opt);  // (qt is empty when Q is mapped)
    const std::size_t q_axis = g.axes.find('s');
    if (qm.base != nullptr && !ranges_finite(qm.base, qs.info().shape, q_axis, 0, g.sq)) {
      throw nonfinite_input("q");
    }
  }
  Plan<T> P;
  plan(P, g, opt, vs != nullptr);
  P.q = qm.base ? qm.view() : make_view<T>(qt, g.axes, hq_);
  AttentionResult res = allocate(P, qs.info().shape, out_sink);
  const std::size_t nq = (g.sq + P.bl.q - 1) / P.bl.q;
  const std::size_t items = g.b * g.hq * nq;
  if (g.sq == 0) return res;
  OneBlasThread one_blas;
  const std::size_t nthreads = thread_count(items, g.threads);
  const MappedKV kp = map_kv ? mapped_kv<T>(ks, g, g.d) : MappedKV{};
  const MappedKV vp = map_kv && vs ? mapped_kv<T>(*vs, g, g.dv) : MappedKV{};
  if (kp.base != nullptr && (vs == nullptr || vp.base != nullptr)) {
    run_in_place(P, kp, vs ? &vp : nullptr, !opt.allow_nonfinite, nq, nthreads);
    return res;
  }
  const MappedInput<T> km = map_kv ? mapped_input<T>(ks, g) : MappedInput<T>{};
  const MappedInput<T> vm = map_kv && vs ? mapped_input<T>(*vs, g) : MappedInput<T>{};
  std::vector<Scratch<T>> state(items);
  std::vector<std::vector<T>> tiles(nthreads);
  auto at = [&](std::size_t it) { return item_at(g, P.bl, nq, it); };
  for_items(items, nthreads, [&](std::size_t it, std::size_t) {
    auto [b, h, q0] = at(it);
    item_begin(P, state[it], b, h, q0);
  });
  // Chunks that no row may see are not read.
  std::int64_t need_lo = static_cast<std::int64_t>(g.sk), need_hi = -1;
  for (const Scratch<T>& w : state) {
    if (w.lo_min <= w.hi_max) {
      need_lo = std::min(need_lo, w.lo_min), need_hi = std::max(need_hi, w.hi_max);
    }
  }
  const std::size_t s_axis = g.axes.find('s');
  Tensor kc, vc, kh, vh;
  for (std::size_t c0 = 0; c0 < g.sk; c0 += chunk) {
    const std::size_t n = std::min(chunk, g.sk - c0);
    if (static_cast<std::int64_t>(c0 + n) <= need_lo || static_cast<std::int64_t>(c0) > need_hi) {
      continue;
    }
    // The chunk of K or V: in place in the mapping, or read into `c`.
    auto keys = [&](TensorSource& src, const MappedInput<T>& m, Tensor& c, Tensor& holder,
                    const char* what) {
      if (m.base == nullptr) {
        read_keys(src, s_axis, c0, n, c);
        if (!opt.allow_nonfinite && c.numel() && c.has_nonfinite()) throw nonfinite_input(what);
        return make_view<T>(c, g.axes, holder);
      }
      if (!opt.allow_nonfinite && !ranges_finite(m.base, src.info().shape, s_axis, c0, n)) {
        throw nonfinite_input(what);
      }
      return m.view(c0);
    };
    const View<T> K = keys(ks, km, kc, kh, "k");
    const View<T> V = vs ? keys(*vs, vm, vc, vh, "v") : View<T>{};
    for_items(items, nthreads, [&](std::size_t it, std::size_t t) {
      auto [b, h, q0] = at(it);
      item_keys(P, state[it], tiles[t], K, V, c0, b, h, q0, c0, c0 + n);
    });
    // Mapped pages done with leave the process's resident memory (not the page cache).
    for (auto [src, m] : {std::pair<TensorSource*, const MappedInput<T>*>{&ks, &km}, {vs, &vm}}) {
      if (m->base == nullptr) continue;
      axis_ranges(src->info().shape, s_axis, c0, n, [&](std::size_t first, std::size_t count) {
        io_detail::release_mapped(reinterpret_cast<const std::byte*>(m->base + first),
                                  count * sizeof(T));
      });
    }
  }
  for_items(items, nthreads, [&](std::size_t it, std::size_t t) {
    auto [b, h, q0] = at(it);
    item_end(P, state[it], tiles[t], b, h, q0);
    state[it] = Scratch<T>();
  });
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

// The parameters used, for recording with the outputs.
void record(AttentionResult& res, const Geometry& g, const AttentionOptions& opt, DType q_dtype);

}  // namespace

std::pair<std::size_t, std::string> attention_memory(const Shape& q, const Shape& k, const Shape* v,
                                                     DType q_dtype, const AttentionOptions& opt) {
  Geometry g = check(q, k, v, q_dtype, opt);
  return memory_of(g, q, k, v, q_dtype, opt);
}

Shape attention_scores_shape(const Shape& q, const Shape& k, DType q_dtype,
                             const AttentionOptions& opt) {
  AttentionOptions scores_only = opt;
  scores_only.emit = {AttentionEmit::logits};
  scores_only.relative_v = nullptr;  // belongs with V
  return check(q, k, nullptr, q_dtype, scores_only).logits_shape();
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor* v,
                          const AttentionOptions& opt) {
  require_float(q.dtype(), "q");
  require_float(k.dtype(), "k");
  if (v) require_float(v->dtype(), "v");
  Geometry g = check(q.shape(), k.shape(), v ? &v->shape() : nullptr, q.dtype(), opt);
  auto [need, names] =
      memory_of(g, q.shape(), k.shape(), v ? &v->shape() : nullptr, q.dtype(), opt);
  if (opt.max_memory && need > opt.max_memory) {
    throw InputError(fmt::format("{} would need {} > max_memory {}", names, bytes_str(need),
                                 bytes_str(opt.max_memory)));
  }
  g.threads = workers_within(opt.max_memory, need, worker_tiles(g, opt));
  if (!opt.allow_nonfinite) require_finite(q, &k, v, opt);
  AttentionResult res = opt.arith != Arith::exact ? run_framework(q, k, v, g, opt)
                        : g.compute == DType::f64 ? run<double>(q, k, v, g, opt)
                                                  : run<float>(q, k, v, g, opt);
  record(res, g, opt, q.dtype());
  return res;
}

AttentionResult attention(TensorSource& q, TensorSource& k, TensorSource* v,
                          const AttentionOptions& opt) {
  const TensorInfo &qi = q.info(), &ki = k.info();
  const TensorInfo* vi = v ? &v->info() : nullptr;
  require_float(qi.dtype, "q");
  require_float(ki.dtype, "k");
  if (vi) require_float(vi->dtype, "v");
  Geometry g = check(qi.shape, ki.shape, vi ? &vi->shape : nullptr, qi.dtype, opt);
  const bool streams = !g.materialise() && opt.arith == Arith::exact && k.seekable() &&
                       (!v || v->seekable());
  if (!streams) {
    // Everything in memory: the inputs count against the budget too.
    auto [need, names] =
        memory_of(g, qi.shape, ki.shape, vi ? &vi->shape : nullptr, qi.dtype, opt);
    const std::size_t work_need = need;
    for (const TensorInfo* t : {&qi, &ki, vi}) {
      if (!t) continue;
      need = add_sat(need, mul_sat(checked_numel(t->shape, 1, "attention"), dtype_size(t->dtype)));
    }
    if (opt.max_memory && need > opt.max_memory) {
      throw InputError(fmt::format(
          "{} would need {} with the inputs (Q {}, K {}{}) > --max-memory {}", names,
          bytes_str(need), shape_str(qi.shape), shape_str(ki.shape),
          vi ? ", V " + shape_str(vi->shape) : std::string(), bytes_str(opt.max_memory)));
    }
    Tensor qt = read_all_rows(q), kt = read_all_rows(k);
    std::optional<Tensor> vt;
    if (v) vt = read_all_rows(*v);
    // Checked above, with the inputs; what is left of the budget bounds the workers.
    AttentionOptions rest = opt;
    if (opt.max_memory) rest.max_memory = opt.max_memory - (need - work_need);
    return attention(qt, kt, vt ? &*vt : nullptr, rest);
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
  // K or V stored as f16 or bf16 is widened one key block at a time, by each worker.
  std::size_t widen_row = 0;
  if (ki.dtype != g.compute) widen_row = g.d;
  if (vi && vi->dtype != g.compute) widen_row += g.dv;
  tiles = add_sat(tiles, mul_sat(mul_sat(std::max<std::size_t>(g.threads, 1), kB),
                                 widen_row * dtype_size(g.compute)));
  const bool map_kv =
      opt.max_memory == 0 || add_sat(add_sat(m.fixed, tiles), kv_bytes) <= opt.max_memory;
  AttentionResult res = g.compute == DType::f64
                            ? run_streamed<double>(q, k, v, g, opt, chunk, map_kv, out_sink)
                            : run_streamed<float>(q, k, v, g, opt, chunk, map_kv, out_sink);
  record(res, g, opt, qi.dtype);
  return res;
}

namespace {

void record(AttentionResult& res, const Geometry& g, const AttentionOptions& opt, DType q_dtype) {
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
  if (opt.temperature_scale != 0) {
    a.push_back({"temperature_scale", opt.temperature_scale});
    a.push_back({"temperature_floor", opt.temperature_floor});
  }
  if (opt.llama4_scaling_beta != 0) {
    a.push_back({"llama4_scaling_beta", opt.llama4_scaling_beta});
    a.push_back({"llama4_scaling_period", static_cast<long long>(opt.llama4_scaling_period)});
  }
  if (opt.alibi_before_scale) a.push_back({"alibi_before_scale", 1LL});
  a.push_back({"alibi", opt.alibi ? alibi_name(*opt.alibi) : std::string("none")});
  if (opt.alibi) a.push_back({"alibi_max_bias", opt.alibi_max_bias});
  if (opt.t5_bias) {
    a.push_back({"t5_buckets", static_cast<long long>(opt.t5_buckets)});
    a.push_back({"t5_max_distance", static_cast<long long>(opt.t5_max_distance)});
    a.push_back({"t5_bidirectional", static_cast<long long>(opt.t5_bidirectional)});
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
  a.push_back({"sinks", static_cast<long long>(opt.sinks != nullptr)});
  if (!opt.cu_seqlens.empty()) {
    a.push_back({"packed_sequences", static_cast<long long>(opt.cu_seqlens.size() - 1)});
  }
  a.push_back({"masked_rows", std::string(opt.masked_rows == MaskedRows::zero ? "zero" : "nan")});
  a.push_back(
      {"precision", std::string(dtype_name(opt.arith == Arith::exact ? g.compute : q_dtype))});
  a.push_back({"arith", arith_name(opt.arith)});
}

}  // namespace

}  // namespace posenc
