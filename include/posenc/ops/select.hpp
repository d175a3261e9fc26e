#pragma once
/// \file
/// numpy slicing ("0,:,:4", "1:-1:2", "...,::-3", "1,[1,100],0") for any tensor:
/// parsing, resolving against a shape by numpy's rules, and the selected elements
/// (zero-copy xtensor strided views when no index list is involved).
///
///     SliceSpec spec = parse_slice("0, ::-1, 2:");
///     Selection sel = resolve_selection(spec, {3, 4, 5});   // result shape (4, 3)
///     auto v = select_view(xt::adapt(ptr, n, xt::no_ownership(), shape), sel);
///
/// Index lists (`[1,100]`) are outer indexing: each list picks entries of its own axis
/// independently of the others, as `a[np.ix_(...)]` does, so `"[0,2],[1,3]"` on a
/// (3, 4) tensor has shape (2, 2). (numpy's own `a[[0,2],[1,3]]` pairs the lists
/// instead; with one list the two rules agree.)
///
/// Every index computation is overflow-free for any int64 start, stop and step (numpy's
/// PySlice_AdjustIndices clamping), so a resolved selection only names elements inside
/// the tensor.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <xtensor/xstrided_view.hpp>

#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// One comma-separated entry of a slicing expression.
struct SliceItem {
  /// What the entry is.
  enum class Kind : std::uint8_t {
    index,     ///< an integer: the axis is dropped
    range,     ///< a:b:c (or ':')
    ellipsis,  ///< ...: as many full ranges as needed
    list       ///< [i, j, ...]: these entries of the axis
  };
  Kind kind = Kind::range;            ///< which of the forms below holds
  std::int64_t index = 0;             ///< Kind::index; negative counts from the end
  std::optional<std::int64_t> start;  ///< Kind::range; nullopt when omitted
  std::optional<std::int64_t> stop;   ///< Kind::range; nullopt when omitted
  std::int64_t step = 1;              ///< Kind::range; never 0
  std::vector<std::int64_t> list;     ///< Kind::list; negative counts from the end
};

/// A parsed slicing expression; `text` (as written, for messages) may be empty when
/// the items were built in code.
struct SliceSpec {
  std::string text;              ///< as written
  std::vector<SliceItem> items;  ///< one per comma-separated entry
};

/// Parses a slicing expression: comma-separated entries, each an integer, `a:b`, `a:b:c`
/// (any part may be omitted, negative values count from the end), a bracketed list of
/// integers `[i,j,...]` (outer indexing, possibly empty, repeats allowed) or one `...`;
/// brackets around the whole text and blanks are ignored (so `[1,100]` is two integer
/// entries, and a list on the first axis alone is written `[[1,100]]`); an empty text
/// selects everything. Range bounds and steps beyond int64 saturate, as CPython's do.
/// Throws UsageError ("slice '<text>': ...") for bad syntax, a step of 0, more than one
/// `...`, nested or unbalanced brackets, or an integer index outside int64.
SliceSpec parse_slice(std::string_view text);

/// What a selection takes along one source axis: `size` entries start, start + step, ...
/// or, for an index list that is not evenly spaced, the entries of `indices`.
struct AxisSelection {
  std::size_t start = 0;  ///< first source index (0 when size is 0)
  std::int64_t step = 1;  ///< 1 when size <= 1; otherwise |step| < the axis extent
  std::size_t size = 0;   ///< number of entries taken
  bool drop = false;      ///< an integer index: the axis is not in the result
  /// Source indices in order when they are not start + k * step (an index list with
  /// uneven spacing or repeats; then size == indices.size() >= 2); otherwise empty.
  std::vector<std::size_t> indices;

  /// The source index of the k-th entry taken (k < size).
  std::size_t at(std::size_t k) const {
    if (!indices.empty()) return indices[k];
    return static_cast<std::size_t>(static_cast<std::int64_t>(start) +
                                    static_cast<std::int64_t>(k) * step);
  }
};

/// A slicing expression resolved against a shape.
struct Selection {
  Shape source;                     ///< the shape it was resolved against
  std::vector<AxisSelection> axes;  ///< one per source axis
  Shape shape;                      ///< result shape (dropped axes removed)
  std::size_t numel = 0;            ///< elements in the result
};

/// Resolves `spec` against `shape` as numpy does: `...` (or missing trailing entries)
/// takes whole axes, ranges clamp to the axis as Python's slice.indices, integers (and
/// every entry of a list) must lie in [-n, n). An evenly spaced list resolves to the
/// range it equals. Throws InputError ("slice '<text>': ...") when more entries than
/// axes are given, an index is out of range, or an axis extent exceeds int64.
Selection resolve_selection(const SliceSpec& spec, const Shape& shape);

/// The selection of everything: the identity on `shape`.
Selection select_all(const Shape& shape);

/// Whether some axis of `sel` takes an uneven index list (AxisSelection::indices), which
/// a strided view cannot express.
bool has_index_list(const Selection& sel);

/// The slices that `xt::strided_view` needs to view `sel` over a container of shape
/// `sel.source`; std::invalid_argument when `sel` holds an index list. The bounds are
/// already resolved here: xtensor 0.24's own range normalisation differs from numpy for
/// some empty ranges (it gives `a[8:-1:-1]` an extent of 2^64 - 1 where numpy gives 0),
/// so it only ever sees in-range values.
xt::xstrided_slice_vector strided_slices(const Selection& sel);

/// A zero-copy xtensor view of `sel` over `e`, an xtensor expression (container,
/// adaptor or view) of shape `sel.source`; `sel` must not hold an index list (use
/// `select` for those).
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

/// Where element `flat` (C order) of the selection's result lies in the source: its
/// multi-index in `sel.source` (dropped axes at their fixed index).
std::vector<std::size_t> source_index(const Selection& sel, std::size_t flat);

/// Default bytes read per slab by `read_selection`.
constexpr std::size_t kSelectSlabBytes = std::size_t{16} << 20;

/// Called with the next `count` selected elements, C order of the selection, the
/// source dtype in native byte order; `data` is valid during the call only.
using SelectedBlock = std::function<void(const std::byte* data, std::size_t count)>;

/// Reads the elements `sel` (resolved against src.info().shape) selects from `src`,
/// slab by slab along the first axis whose extent is not 1, reading only the entries of
/// that axis the selection takes, and hands them to `f` in order. Every call covers
/// whole entries of the result's first axis whose extent is not 1 (`slab_axis` of
/// `sel.shape`), so the blocks can go straight to a TensorSink; an empty selection
/// makes no call. Memory stays near two slabs of about
/// `slab_bytes`. Streams (stdin) need a selection that does not go backwards along that
/// axis. Throws InputError naming the source on short or malformed data.
void read_selection(TensorSource& src, const Selection& sel, const SelectedBlock& f,
                    std::size_t slab_bytes = kSelectSlabBytes);

}  // namespace posenc
