#pragma once
// Attention's geometry: the axes and sizes of Q, K and V, the options checked against
// them (every side tensor's shape, every option's range), the block sizes, and the
// memory a run needs. Internal to the library (attention.cpp, attention_kernel.cpp,
// attention_io.cpp).

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ops/attention_mask.hpp"
#include "ops/axis_strides.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/attention.hpp"

namespace posenc::attention_detail {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------
// Shapes

using Strides = AxisStrides;
inline Strides strides_of(const Shape& shape, const std::string& axes) {
  return axis_strides(shape, axes);
}

inline std::size_t axis_size(const Shape& shape, const std::string& axes, char c) {
  auto i = axes.find(c);
  return i == std::string::npos ? 1 : shape[i];
}

struct Geometry {
  std::string axes;
  std::size_t b = 1, hq = 1, hk = 1, sq = 0, sk = 0, d = 0, dv = 0;
  bool has_b = false, has_h = false;
  std::size_t rel_rows = 0;  // rows of the Shaw tables, 0 if none
  RelativeWindow window;     // their window (symmetric M, M by default)
  bool rel_k_per_head = false;  // relative_k [rows, hq, d] (or relative_proj)
  std::size_t dec_cols = 0;  // key rows + key columns of the decomposed term, 0 if none
  std::size_t global = 0;    // LongT5 side keys after the sk keys (attention_global), 0 if none
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
  /// Columns of the emitted logits and probs: the keys, then the side keys.
  std::size_t cols() const { return sk + global; }
  /// The emitted logits' and probs' shape: logits_shape() with cols() columns.
  Shape scores_shape() const {
    Shape s = logits_shape();
    s.back() = cols();
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

struct Blocks {
  std::size_t q = 0, k = 0;
};

inline std::size_t mul_sat(std::size_t a, std::size_t b) {
  std::size_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::numeric_limits<std::size_t>::max();
  return r;
}
inline std::size_t add_sat(std::size_t a, std::size_t b) {
  std::size_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::numeric_limits<std::size_t>::max();
  return r;
}

/// Throws InputError unless `t` is a float dtype.
void require_float(DType t, const char* what);
/// The error for NaN or Inf in input `what`.
InputError nonfinite_input(const char* what);
/// Throws InputError unless dO is a float tensor of the output's shape.
void require_grad_output(const Tensor& grad_output, const Shape& output_shape);
/// Throws InputError when the gradients' `need` bytes exceed `max_memory` (0: no limit).
void require_gradient_budget(std::size_t need, std::size_t max_memory);
// NaN or Inf in an input would silently poison whole rows of the result.
// K and V may be null (streamed: checked chunk by chunk).
void require_finite(const Tensor& q, const Tensor* k, const Tensor* v,
                    const AttentionOptions& opt);
/// The geometry of Q, K (and V) of these shapes under `opt`, every option checked.
Geometry check(const Shape& qs, const Shape& ks, const Shape* vs, DType q_dtype,
               const AttentionOptions& opt);
/// The parameters a run of this geometry used (scale, axes, masks, terms, precision, ...),
/// added to res.attrs to be recorded with its outputs: attention()'s, and the backward's
/// when the caller gives the forward (attention.cpp).
void record(AttentionResult& res, const Geometry& g, const AttentionOptions& opt, DType q_dtype);

// Block sizes depend on the shapes only (never on the thread count), so the rounding
// is the same whatever -j says.
Blocks blocks_for(const Geometry& g, const AttentionOptions& opt);

// Decoding (at most kGroupRows query rows): the query heads of one KV head share work
// items, each key block folded into every head's rows in turn while it is in the cache,
// instead of each head reading all of K and V (8 times the bytes at 8:1 GQA). Each head
// folds the same blocks in the same order as in an item of its own: the same bits.
constexpr std::size_t kGroupRows = 16;

// Query heads per work item: 1, or when decoding the largest divisor of hq / hk that
// leaves at least `threads` items (of `nq` query blocks each head) for the workers.
std::size_t heads_per_item(const Geometry& g, std::size_t nq, std::size_t threads);

// The score tiles and per-row work memory of one worker thread, in bytes (for as many
// heads as an item may hold).
std::size_t worker_tiles(const Geometry& g, const AttentionOptions& opt);
/// The bytes the plan of a run holds besides Q, K, V and the tiles: a mask's copy, the
/// T5 or clipped bias gathered by distance, WavLM's gate factors, the Shaw tables, the
/// sinks, a converted score bias and LongT5's side keys (attention_terms.cpp, beside
/// plan()).
std::size_t plan_bytes(const Geometry& g, const AttentionOptions& opt);
/// Whether K or V stored as `t` is used as it is stored, read or widened one key block at
/// a time (d last; the arithmetic type, f16 or bf16, or f32 under f64 arithmetic), rather
/// than converted whole.
bool kv_in_place(const Geometry& g, DType t);
/// The memory an in-memory run needs, and the names of what takes it. K and V count as
/// whole converted copies unless their stored dtypes are given (see kv_copied).
std::pair<std::size_t, std::string> memory_of(const Geometry& g, const Shape& qs, const Shape& ks,
                                              const Shape* vs, DType q_dtype,
                                              const AttentionOptions& opt,
                                              std::optional<DType> k_dtype = std::nullopt,
                                              std::optional<DType> v_dtype = std::nullopt);

// The workers a budget of `budget` bytes runs when `need` bytes include one worker's
// `tile` bytes: every OpenMP thread when there is no budget or room for all.
std::size_t workers_within(std::size_t budget, std::size_t need, std::size_t tile);

}  // namespace posenc::attention_detail
