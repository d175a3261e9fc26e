#pragma once
/// \file
/// numpy basic slicing ("0,:,:4", "1:-1:2", "...,::-3") for any tensor: parsing,
/// resolving against a shape by numpy's rules, and zero-copy xtensor strided views of
/// the result.
///
///     SliceSpec spec = parse_slice("0, ::-1, 2:");
///     Selection sel = resolve_selection(spec, {3, 4, 5});   // result shape (4, 3)
///     auto v = select_view(xt::adapt(ptr, n, xt::no_ownership(), shape), sel);
///
/// Every index computation is overflow-free for any int64 start, stop and step (numpy's
/// PySlice_AdjustIndices clamping), so a resolved selection only names elements inside
/// the tensor.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <xtensor/xstrided_view.hpp>

#include "posenc/tensor.hpp"

namespace posenc {

/// One comma-separated entry of a slicing expression.
struct SliceItem {
  enum class Kind : std::uint8_t { index, range, ellipsis };
  Kind kind = Kind::range;
  std::int64_t index = 0;                   ///< Kind::index; negative counts from the end
  std::optional<std::int64_t> start, stop;  ///< Kind::range; nullopt when omitted
  std::int64_t step = 1;                    ///< Kind::range; never 0
};

/// A parsed slicing expression; `text` (as written, for messages) may be empty when
/// the items were built in code.
struct SliceSpec {
  std::string text;
  std::vector<SliceItem> items;
};

/// Parses numpy basic slicing: comma-separated entries, each an integer, `a:b`, `a:b:c`
/// (any part may be omitted, negative values count from the end) or one `...`;
/// surrounding brackets and blanks are ignored; an empty text selects everything.
/// Range bounds and steps beyond int64 saturate, as CPython's do. Throws UsageError
/// ("slice '<text>': ...") for bad syntax, a step of 0, more than one `...`, or an
/// integer index outside int64.
SliceSpec parse_slice(std::string_view text);

/// What a selection takes along one source axis: `size` entries start, start + step, ...
struct AxisSelection {
  std::size_t start = 0;  ///< first source index (0 when size is 0)
  std::int64_t step = 1;  ///< 1 when size <= 1; otherwise |step| < the axis extent
  std::size_t size = 0;   ///< number of entries taken
  bool drop = false;      ///< an integer index: the axis is not in the result
};

/// A slicing expression resolved against a shape.
struct Selection {
  Shape source;                     ///< the shape it was resolved against
  std::vector<AxisSelection> axes;  ///< one per source axis
  Shape shape;                      ///< result shape (dropped axes removed)
  std::size_t numel = 0;            ///< elements in the result
};

/// Resolves `spec` against `shape` as numpy does: `...` (or missing trailing entries)
/// takes whole axes, ranges clamp to the axis as Python's slice.indices, integers must
/// lie in [-n, n). Throws InputError ("slice '<text>': ...") when more entries than
/// axes are given, an integer index is out of range, or an axis extent exceeds int64.
Selection resolve_selection(const SliceSpec& spec, const Shape& shape);

/// The selection of everything: the identity on `shape`.
Selection select_all(const Shape& shape);

/// The slices that `xt::strided_view` needs to view `sel` over a container of shape
/// `sel.source`. The bounds are already resolved here: xtensor 0.24's own range
/// normalisation differs from numpy for some empty ranges (it gives `a[8:-1:-1]` an
/// extent of 2^64 - 1 where numpy gives 0), so it only ever sees in-range values.
xt::xstrided_slice_vector strided_slices(const Selection& sel);

/// A zero-copy xtensor view of `sel` over `e`, an xtensor expression (container,
/// adaptor or view) of shape `sel.source`.
template <class E>
auto select_view(E&& e, const Selection& sel) {
  return xt::strided_view(std::forward<E>(e), strided_slices(sel));
}

/// The selected elements of `t` as a new C-ordered tensor of the same dtype (bytes
/// copied as stored, so f16/bf16, NaN payloads and 64-bit integers are exact).
/// Throws std::invalid_argument if `sel` was resolved against another shape.
Tensor select(const Tensor& t, const Selection& sel);

/// Where the selected elements of `sel` lie when they are one contiguous run of the
/// C-ordered source: the offset (in elements) of the first one; nullopt otherwise.
std::optional<std::size_t> contiguous_offset(const Selection& sel);

/// The multi-index (C order) of flat position `flat` in `shape`, as numpy.unravel_index.
std::vector<std::size_t> unravel_index(std::size_t flat, const Shape& shape);

}  // namespace posenc
