#pragma once
/// \file
/// Applying RoPE to tensors with named axes.

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/encodings/rope.hpp"
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
Axes resolve_axes(const std::string& user, std::size_t rank, const std::string& what);

enum class Precision { f64, f32 };

}  // namespace posenc

namespace posenc {

/// Where each token sits. Exactly one of the forms is used:
/// - `ids` empty and `cu_seqlens` empty: positions start, start+1, ... along s;
/// - `ids` with `ids_shape` [s] or [b, s] (any integer dtype converted to int64),
///   or [3, s] / [3, b, s] for M-RoPE sections;
/// - `cu_seqlens` [n+1] boundaries along s: positions restart at 0 (+ start) per
///   packed sequence.
struct Positions {
  std::int64_t start = 0;
  std::vector<std::int64_t> ids;
  Shape ids_shape;
  std::vector<std::int64_t> cu_seqlens;
};

struct RopeApplyOptions {
  bool inverse = false;                  ///< apply R^T
  Precision precision = Precision::f64;  ///< arithmetic of angles and rotation
  bool allow_nonfinite = false;          ///< otherwise NaN/Inf input is an InputError
  /// Axial 2-D RoPE over an H x W grid of tokens in row-major order (0 = off).
  std::int64_t grid_h = 0, grid_w = 0;
  /// M-RoPE sections (t, h, w) in frequency pairs, summing to rotary_dim / 2.
  std::vector<int> mrope_section;
};

/// Rotates every vector along axis d of `x` by its position along axis s and returns
/// the result as `out_dtype`. Throws InputError for inconsistent shapes (head dim not
/// matching `f.head_dim`, positions not matching s, negative positions, non-finite
/// values unless allowed).
Tensor apply_rope(const Tensor& x, const Axes& axes, const RopeFreqs& f,
                  const Positions& pos, const RopeApplyOptions& opt, DType out_dtype);

}  // namespace posenc
