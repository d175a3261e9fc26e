#pragma once
/// \file
/// Applying RoPE to tensors with named axes.
///
/// The rotation is reduced to data once (`RopeApplier`): for every token a row of a
/// cos/sin table (one row per distinct position, in the working precision, already
/// multiplied by the attention factor and with the sign of sin set for `--inverse`),
/// and one kernel chosen for the pair layout and dtypes. The hot loop then walks the
/// vectors along d, rotating pairs (neox: (j, j + R/2); gptj: (2j, 2j + 1)) and copying
/// dims R..D through. Each output element depends only on its own input vector and
/// table row, so results do not depend on the thread count or on how rows are split
/// into slabs (streaming gives the same bytes as the in-memory path).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/rope_layout.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// Axis letters of a tensor: b (batch), h (heads), s (sequence), d (head dim).
/// Every letter at most once; s and d are required for RoPE.
struct Axes {
  std::string letters;  ///< e.g. "bhsd", "bshd", "sd"
  int index(char c) const;  ///< position of c, or -1
};

/// Default axes by rank (reference PyTorch code): 4 → bhsd, 3 → bsd, 2 → sd.
/// Validates user axes against the rank; throws UsageError/InputError otherwise.
/// `user` empty means the default. Unknown or duplicate letters, or missing s/d, are a
/// UsageError naming `--axes`; a letter count that does not match the rank of the
/// tensor `what` is an InputError naming `what` and its rank.
Axes resolve_axes(const std::string& user, std::size_t rank, const std::string& what);

/// The arithmetic of posenc's own RoPE (--precision; a framework's is Arith).
enum class Precision {
  f64,  ///< angles, cos, sin and the rotation in float64, rounded once on output
  f32   ///< the float64 frequency rounded to float32, everything after in float32
};

}  // namespace posenc

namespace posenc {

/// Largest position posenc rotates by: 2^53, beyond which float64 (the precision of
/// the angles) no longer holds every integer, and well inside int64 so that no sum of
/// a start and a length can overflow. Larger positions are an error.
inline constexpr std::int64_t kMaxPosition = std::int64_t{1} << 53;

/// Where each token sits. Exactly one of the forms is used:
/// - `ids` empty and `cu_seqlens` empty: positions start, start+1, ... along s;
/// - `ids` with `ids_shape` [s] or [b, s] (any integer dtype converted to int64; a
///   leading 1 broadcasts over b), or [n, s] / [n, b, s] for a layout with n coordinate
///   axes (M-RoPE: 3); `start` is added to every id;
/// - `coords` with `coords_shape` in the same shapes: real coordinates (DINOv3's patch
///   centres, LightGlue's keypoints), used as given;
/// - `grid`: coordinates generated for a grid of tokens (CoordGrid);
/// - `angles` with `angles_shape` [s, R/2] or [b, s, R/2]: the angles themselves (a
///   model whose angles are learned), in radians, replacing coordinates and frequencies;
/// - `cu_seqlens` [n+1] boundaries along s: positions restart at 0 (+ start) per
///   packed sequence.
///
/// Two additions combine with the integer forms (start, ids, cu_seqlens):
/// - `seqlen_offsets` [b] (or one per packed sequence with `cu_seqlens`): flash-attn's
///   per-entry offsets (`seqlen_offsets`, `rotary_seqlens`); token s of entry b sits at
///   start + seqlen_offsets[b] + s;
/// - `table_cos`/`table_sin` with `table_shape` [rows, R/2] or [rows, R]: the caller's
///   cos/sin tables (flash-attn's rotary_cos/rotary_sin, HF's cos/sin), values widened
///   exactly to float64; the token at position p takes row p as given, instead of the
///   cos and sin of angles computed from frequencies.
struct Positions {
  std::int64_t start = 0;                ///< first position, or added to every id (--start)
  std::vector<std::int64_t> ids;         ///< explicit positions, C order (--position-ids)
  Shape ids_shape;                       ///< the shape of `ids`
  std::vector<double> coords;            ///< real coordinates, C order (--position-ids)
  Shape coords_shape;                    ///< the shape of `coords`
  CoordGrid grid;                        ///< generated coordinates (--coords)
  std::vector<double> angles;            ///< explicit angles, C order (--angles)
  Shape angles_shape;                    ///< the shape of `angles`
  std::vector<std::int64_t> cu_seqlens;  ///< packed-sequence boundaries (--cu-seqlens)
  Shape cu_seqlens_shape;                ///< the shape of `cu_seqlens` as given
  std::string ids_what = "position_ids";    ///< names the source in messages
  std::string cu_what = "cu_seqlens";       ///< names the source in messages
  std::string angles_what = "angles";       ///< names the source in messages
  std::vector<std::int64_t> seqlen_offsets;  ///< per-entry offsets (--seqlen-offsets)
  Shape seqlen_offsets_shape;                ///< the shape of `seqlen_offsets` as given
  std::string offsets_what = "seqlen_offsets";  ///< names the source in messages
  std::vector<double> table_cos;  ///< the caller's cos table, C order (--cos)
  std::vector<double> table_sin;  ///< the caller's sin table, C order (--sin)
  Shape table_shape;              ///< [rows, R/2] or [rows, R], shared by both tables
  Shape sin_shape;                ///< the sin table's shape as given (check_positions)
  DType table_dtype = DType::f64;  ///< the tables' own type (for RopeApplyOptions::torch_ops)
  std::optional<DType> sin_dtype;  ///< the sin table's type, when given: cos's (check_positions)
  std::string cos_what = "cos";   ///< names the source in messages
  std::string sin_what = "sin";   ///< names the source in messages
};

/// Checks the position tensors as a front end hands them over, before any input is read,
/// in the same words for the command line and Python: position ids of rank 1 to 3, none
/// negative nor beyond 2^53 after `start`; coordinates of rank 1 to 3; cu_seqlens 1-D from
/// 0, non-decreasing and within 2^53 after `start`; seqlen_offsets 1-D; cos and sin 2-D
/// and of one shape. A tensor is checked when given (values or a shape), named by its
/// `*_what`; the first position is spelled `start` as the caller spells it ("--start").
/// Throws InputError. What fits the input (its s, b, R) RopeApplier checks.
void check_positions(const Positions& pos, const std::string& start = "start");

/// Throws InputError (naming `what`) unless `cu` is a list of packed-sequence
/// boundaries for `length` tokens: at least two values, non-decreasing, from 0 to
/// `length` (flash-attn's cu_seqlens).
void check_cu_seqlens(const std::vector<std::int64_t>& cu, std::size_t length,
                      const std::string& what);

/// How apply_rope and RopeApplier rotate (the options of `posenc rope` besides the
/// frequencies and positions).
struct RopeApplyOptions {
  bool inverse = false;                  ///< apply the inverse rotation
  Precision precision = Precision::f64;  ///< arithmetic of angles and rotation
  bool allow_nonfinite = false;          ///< otherwise NaN/Inf input is an InputError
  /// Axial 2-D RoPE over an H x W grid of tokens in row-major order (0 = off). The
  /// rotary dims are split in two blocks of R/4 pairs (x then y, or y then x with
  /// `grid_yx`), each block using the R/4 frequencies of a rotary width R/2 (the
  /// `table rope2d` frequencies base^(-4j/R)); token t sits at x = t % W, y = t / W.
  std::int64_t grid_h = 0;
  std::int64_t grid_w = 0;  ///< W of the grid (grid_h is H)
  bool grid_yx = false;     ///< the y block first (--order yx)
  /// M-RoPE sections (t, h, w) in frequency pairs, summing to rotary_dim / 2
  /// (Qwen2-VL: chunked over the R/2 frequencies, the same chunks in both halves).
  /// Empty: the sections of the RopeFreqs (from a HF config), if any.
  std::vector<int> mrope_section;
  /// With `mrope_section`: Qwen3-VL's interleaved assignment (RopeParams::mrope_section).
  bool mrope_interleaved = false;
  /// Axial 2-D RoPE with explicit coordinates: `Positions::ids` of shape [2, s] or
  /// [2, b, s] give each token's two coordinates (Qwen2-VL's vision (h, w) ids); row 0
  /// drives the first R/4 pairs and row 1 the next, with the frequencies of the grid
  /// form. Positions are used as given (no start).
  bool grid_ids = false;
  /// The variant as data (posenc/encodings/rope_layout.hpp): frequency assignment over
  /// coordinate axes and pairing, resolved against the RopeFreqs of each input. Plain
  /// (the default): plain RoPE, or the preset the options above select (grid,
  /// grid_ids: axial; mrope_section: sections or interleaved); not combined with them.
  RopeLayoutSpec layout;
  /// With the caller's cos/sin tables: flash-attn's apply_rotary_emb_torch bit for bit,
  /// x * cos + rotate_half(x) * sin with each product and the sum rounded to the type
  /// torch computes them in (the promotion of the input's and the tables' types; f16, bf16
  /// and f32 operations in float32 then rounded, as torch's CPU kernels do), instead of
  /// one rounding of the exact result.
  bool torch_ops = false;
};

/// Rotates every vector along axis d of `x` by its position along axis s and returns
/// the result as `out_dtype`. Throws InputError for inconsistent shapes (head dim not
/// matching `f.head_dim`, positions not matching s, negative positions, non-finite
/// values unless allowed).
Tensor apply_rope(const Tensor& x, const Axes& axes, const RopeFreqs& f,
                  const Positions& pos, const RopeApplyOptions& opt, DType out_dtype);

/// The RoPE variant for a tensor of `shape` (axes `axes`, named `what` in messages):
/// `params(head_dim)` with the head dimension of axis d, its `seq_len` (when 0) filled in
/// from the positions (the largest position used plus one: ids, the longest packed
/// sequence, the grid side, or start + s), reduced by compute_rope_freqs. An odd head
/// dimension with no rotary width asked for is an InputError naming `what`, and so is
/// one beyond int. What `posenc rope` and the Python module do for each input.
RopeFreqs rope_freqs_for(const Shape& shape, const Axes& axes,
                         const std::function<RopeParams(int head_dim)>& params,
                         const Positions& pos, const RopeApplyOptions& apply,
                         const std::string& what);

/// The element type `apply_rope` writes for `--dtype same`: the input float type, bf16
/// for fp8 inputs (as FlashAttention-3's fp8 attention outputs), or f64 for integer and
/// bool inputs (as numpy promotes int * float64).
DType rope_default_out_dtype(DType in);

/// The RoPE kernel variant this process runs: "avx512fp16", "avx512", "avx2" or "base".
/// It is the widest the CPU supports, or the one the environment variable
/// POSENC_ROPE_ISA names when the CPU supports that one (tests and benchmarks use it to
/// run every variant). Throws UsageError when POSENC_ROPE_ISA holds another value.
const char* rope_kernel_variant();

/// RoPE prepared for one tensor geometry, applied slab by slab (rows along axis 0), so
/// that inputs larger than memory can be streamed. Construction validates everything
/// that can be checked without the data (axes against shape, head dim, rotary dim,
/// positions, grid, sections); `rows` checks the values (non-finite) as it goes.
class RopeApplier {
 public:
  /// `what` names the tensor in messages (its reference text). "Rows" below are the
  /// entries along `slab_axis` (axis 0 unless given); every axis before it must have
  /// extent 1 (a UsageError otherwise), so that e.g. [1, s, h, d] is processed in slabs
  /// along s with the positions of those tokens.
  RopeApplier(const Shape& shape, DType in_dtype, const Axes& axes, const RopeFreqs& f,
              const Positions& pos, const RopeApplyOptions& opt, DType out_dtype,
              std::string what, std::size_t slab_axis = 0);
  ~RopeApplier();
  RopeApplier(const RopeApplier&) = delete;
  RopeApplier& operator=(const RopeApplier&) = delete;

  /// Bytes of one row (along the slab axis) of the input.
  std::size_t in_row_bytes() const;
  /// Bytes of one row (along the slab axis) of the output.
  std::size_t out_row_bytes() const;
  /// Rows per slab must be a multiple of this... in practice 1, or all rows when d is
  /// the slab axis (the pairs would straddle slabs).
  std::size_t min_rows() const;
  /// Upper bound of the cos/sin table bytes for a slab of `rows` rows, plus the
  /// per-token positions held for the whole tensor (explicit ids only).
  std::size_t table_bytes(std::size_t rows) const;
  /// The extent of the slab axis: the rows rows() takes in all.
  std::size_t rows_total() const;

  /// Rotates rows [first, first + count) of the slab axis: `src` holds them in the input
  /// dtype (C order), `dst` receives them in the output dtype. Throws InputError
  /// naming the tensor for non-finite values (unless allowed); `dst` is then
  /// unspecified.
  void rows(const void* src, void* dst, std::size_t first, std::size_t count);

  /// How many parts one row can be rotated in, one per entry of the axis after the
  /// slab axis (a [b, h, s, d] row is h parts of [s, d]): that axis's extent, or 1
  /// where a row is not cut (no axis there, d there or on the slab axis, or framework
  /// arithmetic, whose loops span whole rows).
  std::size_t parts() const;
  /// Rotates entries [first, first + count) of the axis after the slab axis within row
  /// `row` (as rows() does for that row; the bytes are those rows() gives): `src` and
  /// `dst` hold just those entries. Streams cut rows larger than their slabs this way.
  /// std::logic_error where parts() is 1 or the range leaves the row.
  void part(const void* src, void* dst, std::size_t row, std::size_t first, std::size_t count);

 private:
  /// rows(), or part() when `sub_count` is not 0.
  void rotate(const void* src, void* dst, std::size_t first, std::size_t count,
              std::size_t sub_first, std::size_t sub_count);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace posenc
