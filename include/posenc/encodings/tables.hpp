#pragma once
/// \file
/// The tables of `posenc table` as library requests. A request (one struct per kind,
/// its members named as the command's options) is reduced to a `Table`: the TableSpec
/// (shape and a function computing each line in float64), the parameters to record
/// with it, and the default HDF5 dataset name. `write_table` (table.hpp) streams a
/// Table to any sink in bounded memory; `evaluate_table` computes it into an xtensor.
///
/// Errors name the request member involved ("positions: must be at least 1"), never a
/// command-line option.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "posenc/encodings/bias.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/table.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc {

/// A table described, not yet computed.
struct Table {
  TableSpec spec;            ///< shape and the function computing each line
  Attrs attrs;               ///< parameters used, recorded with the output
  std::string dataset;       ///< default HDF5 dataset name, e.g. "/rope_cos_sin"
  bool integral = false;     ///< the values are integers (index tables)
  std::int64_t max_value = 0;  ///< integral tables: the largest value held
  std::int64_t min_value = 0;  ///< integral tables: the smallest value held
};

/// The element type a table is written as by default: f32 for real tables, i64 for
/// index tables.
DType default_table_dtype(const Table& t);

/// Throws UsageError ("dtype: ...") unless `dtype` can hold the table: a float type for
/// real tables; for index tables an integer type holding `min_value` and `max_value`, or
/// f32/f64.
void check_table_dtype(const Table& t, DType dtype);

/// The type `t` is written as: the dtype named `name` (parsed naming `what`; empty:
/// default_table_dtype), checked to hold the table (check_table_dtype) and the table's
/// size to be addressable (checked_numel). What the command and the Python module both
/// ask of a table before computing it.
DType table_dtype(const Table& t, const std::string& name, const std::string& what);

/// Computes the whole table in float64 (lines in parallel; the values do not depend on
/// the thread count). Memory: the whole table; stream large ones with write_table.
xt::xarray<double> evaluate_table(const Table& t);

// --- requests ---------------------------------------------------------------------

/// `posenc table sinusoidal`: --positions, --dim, --base, --start, --layout.
struct SinusoidalRequest {
  std::int64_t positions = 0;  ///< N >= 1
  int dim = 0;                 ///< D, even
  double base = 10000.0;       ///< B of the frequencies w_i = 1 / B^(2i/D), > 0
  std::int64_t start = 0;      ///< first position, >= 0
  SinusoidalLayout layout = SinusoidalLayout::interleaved;  ///< sin/cos order along D
};
/// Vaswani's table [N, D]: PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i).
Table sinusoidal_table(const SinusoidalRequest& r);

/// What a RoPE table holds. cos_sin is [2, ..., W] (cos then sin); cos_sin_cache is
/// vLLM's [..., R] = cat(cos_half, sin_half).
enum class RopeEmit { inv_freq, angles, cos, sin, cos_sin, cos_sin_cache };
/// inv-freq | angles | cos | sin | cos-sin | cos-sin-cache (UsageError naming "emit").
RopeEmit parse_rope_emit(const std::string& s);
/// "inv_freq", "angles", "cos", "sin", "cos_sin", "cos_sin_cache": the name of the
/// table (its default dataset name without the "rope_" prefix).
std::string rope_emit_name(RopeEmit e);

/// `posenc table rope`: the ROPE OPTIONS (in `rope`), --positions, --start,
/// --position-ids, --cu-seqlens, --emit, --half-width, --inverse, --precision.
struct RopeTableRequest {
  /// The variant. `rope.seq_len` 0 means one past the largest position of the table.
  RopeParams rope;
  /// Number of positions N (start, start + 1, ...). Needed unless `where` holds ids or
  /// packed sequences (then it must match them when given) or emit is inv_freq.
  std::optional<std::int64_t> positions;
  /// start, explicit ids (any shape: the table gets that shape plus the line axis) or
  /// cu_seqlens (positions restart at each boundary). `start` cannot go with ids.
  Positions where;
  RopeEmit emit = RopeEmit::cos_sin;  ///< which table (one per request)
  /// The tables a front end writes (`--emit cos,sin`), each computed with `emit` set to it.
  std::vector<RopeEmit> emits{RopeEmit::cos_sin};
  bool half = false;     ///< lines of R/2 (one per frequency, flash-attn) instead of R
  bool inverse = false;  ///< sin (and angles) negated: the table of R^T
  /// f32: float32 angles fp32(position) * fp32(inv_freq) rounded to fp32; cos/sin then
  /// evaluated exactly on those angles. (A framework's bits: `rope.arith`.)
  Precision precision = Precision::f64;
};
/// inv_freq [R/2]; angles, cos, sin [N, W]; cos_sin [2, N, W]; cos_sin_cache [N, R]
/// with W = R (full, in the style's pair layout) or R/2 (half). With ids of shape
/// [b, s] the table is [b, s, W] (and [2, b, s, W]).
Table rope_table(const RopeTableRequest& r);

/// `posenc table rope2d`: --height, --width, --dim, --base, --order, --style, --emit,
/// --half-width.
struct Rope2dRequest {
  std::int64_t height = 0;  ///< grid rows H >= 1 (tokens in row-major order)
  std::int64_t width = 0;   ///< grid columns W >= 1
  int dim = 0;              ///< D, a multiple of 4
  double base = 100.0;      ///< frequencies base^(-4j/D), j < D/4 (RoPE-ViT's 100)
  bool y_first = false;     ///< the y block takes the first R/4 pairs (--order yx)
  RopeStyle style = RopeStyle::gptj;  ///< pair layout of a line
  RopeEmit emit = RopeEmit::cos_sin;  ///< which table
  /// The tables a front end writes (`--emit cos,sin`), each computed with `emit` set to it.
  std::vector<RopeEmit> emits{RopeEmit::cos_sin};
  bool half = false;                  ///< lines of D/2 (one per frequency) instead of D
};
/// Axial 2-D RoPE for an H x W grid: inv_freq [D/4], otherwise as rope_table with
/// H * W rows.
Table rope2d_table(const Rope2dRequest& r);

/// ALiBi tables: the slopes [H], or bias matrices [H, Q, K] (the causal forms hold -inf
/// above the diagonal: the bias including the causal mask).
enum class AlibiTable { slopes, causal, symmetric, fairseq, bottom_right };
AlibiTable parse_alibi_table(const std::string& s);  ///< slopes|causal|symmetric|fairseq|bottom-right
/// "slopes", "causal", "symmetric", "fairseq", "bottom-right".
std::string alibi_table_name(AlibiTable v);
/// `posenc table alibi`: --heads, --q-len, --k-len, --variant, --max-bias.
struct AlibiRequest {
  int heads = 0;                       ///< H >= 1
  std::optional<std::int64_t> q_len;   ///< Q; unset: k_len (either gives the other)
  std::optional<std::int64_t> k_len;   ///< K; unset: q_len
  std::optional<AlibiTable> variant;   ///< default: slopes without lengths, causal with
  double max_bias = 8.0;               ///< slopes 2^(-max_bias (h+1) / H), > 0
};
/// The slopes [H] (Press et al.'s get_slopes, also for H not a power of two) or a bias
/// matrix [H, Q, K] of the variant (see AlibiTable).
Table alibi_table(const AlibiRequest& r);

/// `posenc table relative`: --q-len, --k-len, --max-distance, --left, --right, --sign,
/// --beyond, --embeddings.
struct RelativeRequest {
  std::optional<std::int64_t> q_len;  ///< Q; unset: k_len (either gives the other)
  std::optional<std::int64_t> k_len;  ///< K; unset: q_len
  /// M, 0 to 2^52: the window on both sides; needed unless left and right are given.
  std::int64_t max_distance = -1;
  std::optional<std::int64_t> left;   ///< L (0 to 2^52); default M
  std::optional<std::int64_t> right;  ///< R (0 to 2^52); default M
  bool q_minus_k = false;             ///< i - j instead of j - i
  bool zero_beyond = false;           ///< outside the window: -1 (a zero row), not the edge
  /// A learned table [L + R + 1, dim] (distance_embedding, pe_k, emb_rel_k): the table
  /// is then its rows gathered, [Q, K, dim], zero where the index is -1.
  std::optional<xt::xarray<double>> embeddings;
};
/// The window of a request (RelativeWindow, bias.hpp), checked (UsageError).
RelativeWindow relative_window(const RelativeRequest& r);
/// The relative index [Q, K] of the window (clip(j - i, -L, R) + L by default), or the
/// embeddings gathered [Q, K, dim].
Table relative_table(const RelativeRequest& r);

/// `posenc table t5-bucket`: --q-len, --k-len, --buckets, --max-distance,
/// --bidirectional / --causal.
struct T5BucketRequest {
  std::optional<std::int64_t> q_len;  ///< Q; unset: k_len (either gives the other)
  std::optional<std::int64_t> k_len;  ///< K; unset: q_len
  int buckets = 32;                   ///< HF num_buckets, > 0
  std::int64_t max_distance = 128;    ///< HF max_distance, > 0: farther distances share a bucket
  bool bidirectional = true;          ///< encoder buckets; false: decoder (causal) buckets
};
/// HF T5's _relative_position_bucket of j - i, [Q, K].
Table t5_bucket_table(const T5BucketRequest& r);

}  // namespace posenc
