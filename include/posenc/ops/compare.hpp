#pragma once
/// \file
/// Element-wise comparison of a tensor A with a reference B, as `posenc compare` does:
/// numpy.isclose's test |a - b| <= atol + rtol * |b| and/or a bound on the distance in
/// units in the last place, with the largest absolute, relative and ULP differences
/// (and where they first occur), mismatch and NaN counts.
///
/// NaN semantics: a NaN on one side only is a mismatch; NaN on both sides matches only
/// with `equal_nan`; NaN pairs count towards no difference. An infinity matches only
/// the same infinity, and an unequal pair with an infinity has absolute and relative
/// difference +Inf. Values are compared in float64 (every stored dtype converts
/// exactly, except 64-bit integers beyond 2^53).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "posenc/io/ref.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// What the caller asks for; unset tolerances take defaults by dtype.
struct CompareOptions {
  std::optional<double> rtol, atol;
  std::optional<std::uint64_t> max_ulp;  ///< match when the ULP distance is at most this
  bool equal_nan = false;
};

/// The rule in force, with every default resolved.
struct CompareRule {
  double rtol = 0, atol = 0;
  std::optional<std::uint64_t> max_ulp;
  /// With max_ulp: whether rtol/atol were given, so that either test suffices;
  /// otherwise the ULP bound alone decides.
  bool tolerance_explicit = false;
  bool equal_nan = false;
  std::optional<DType> ulp_type;  ///< the type ULPs count in; nullopt: integers (ULP 1)
};

/// The type both sides are compared in for ULPs and default tolerances: the less
/// precise float type of the two (bf16 < f16 < f32 < f64), the float one when only one
/// is a float, nullopt when neither is.
std::optional<DType> comparison_type(DType a, DType b);

/// torch.testing.assert_close's defaults for `t` as {rtol, atol}: f64 1e-7/1e-7, f32
/// 1.3e-6/1e-5, f16 1e-3/1e-5, bf16 1.6e-2/1e-5; 0/0 (exact) for integers (nullopt).
std::pair<double, double> default_tolerances(std::optional<DType> t);

/// The rule for comparing a tensor of dtype `a` with a reference of dtype `b`. Throws
/// UsageError ("compare: ...") for a negative or NaN tolerance.
CompareRule make_compare_rule(DType a, DType b, const CompareOptions& opt);

/// Distance between a and b in units in the last place of `t` (both rounded to `t`
/// first), as numpy.testing's nulp_diff: adjacent floats are 1 apart, +0 and -0 are 0
/// apart, and the count crosses zero. For integers (nullopt) |a - b|, saturating.
/// Neither may be NaN.
std::uint64_t ulp_distance(double a, double b, std::optional<DType> t);

/// A largest difference and where it first occurs, with both values there.
struct DiffAt {
  double value = 0;
  std::optional<std::size_t> index;  ///< flat (C order); nullopt when nothing compared
  double a = 0, b = 0;
};

/// The outcome of a comparison. Flat indices count the compared elements in C order
/// (of the selections when a slice was given); `index_in_a` turns one into A's own
/// coordinates.
struct CompareResult {
  CompareRule rule;
  Shape shape_a, shape_b;     ///< the tensors' shapes
  Selection sel_a, sel_b;     ///< what was compared of each (everything without a slice)
  bool shapes_equal = false;  ///< the compared shapes (sel_a.shape, sel_b.shape) agree
  std::size_t total = 0;      ///< elements compared (0 when the shapes differ)
  std::size_t mismatches = 0;
  std::optional<std::size_t> first_mismatch;  ///< flat index
  DiffAt max_abs, max_rel;                    ///< over pairs without NaN
  std::optional<std::uint64_t> max_ulp;       ///< over pairs without NaN
  std::optional<std::size_t> max_ulp_index;
  std::size_t nan_a = 0, nan_b = 0;
  std::size_t nan_mismatches = 0;  ///< NaN on exactly one side
  bool match() const { return shapes_equal && mismatches == 0; }
  /// The multi-index in A (its source coordinates) of compared element `flat`.
  std::vector<std::size_t> index_in_a(std::size_t flat) const { return source_index(sel_a, flat); }
};

/// Compares blocks of values in order; the result does not depend on the blocks.
class Comparator {
 public:
  explicit Comparator(const CompareRule& rule);

  /// Compares the next values of A (`a`) and B (`b`, the same size), continuing the
  /// flat index. Blocks of a few thousand values are fastest: the temporaries of the
  /// element-wise tests then stay in cache.
  void add(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b);

  /// The result so far (shapes are the caller's to fill in).
  const CompareResult& result() const { return r_; }

 private:
  using Block = xt::xtensor<double, 1>;
  void offer_differences(const Block& a, const Block& b, std::size_t first, bool all_finite);
  void offer_ulp(std::uint64_t ulps, std::size_t index);
  void count_mismatches(const Block& a, const Block& b, std::size_t first, bool all_finite);

  CompareResult r_;
  // Per-block temporaries, kept to reuse their memory.
  xt::xtensor<bool, 1> finite_, number_, ok_;
  xt::xtensor<double, 1> abs_, rel_;
  xt::xtensor<std::uint64_t, 1> ulp_;
};

/// Default bytes read per slab and side when streaming.
constexpr std::size_t kCompareSlabBytes = std::size_t{16} << 20;

/// Compares the tensor `a` reads with the reference `b` reads, streaming both in slabs
/// along the first axis whose extent is not 1 (memory: two slabs of about
/// `slab_bytes`). Different shapes give a result with `shapes_equal` false and no data
/// read. Throws InputError naming the source on short or malformed data, UsageError
/// for a bad tolerance.
CompareResult compare(TensorSource& a, TensorSource& b, const CompareOptions& opt,
                      std::size_t slab_bytes = kCompareSlabBytes);

/// The same for the parts `slice` selects of each (the same slicing, resolved against
/// each one's shape; only the selected entries are read): the selections are compared
/// when their shapes agree, and flat indices count the selection (see
/// CompareResult::index_in_a). A slice that does not fit a shape is an InputError
/// ("A: slice '...': ..." or "B: ...").
CompareResult compare(TensorSource& a, TensorSource& b, const CompareOptions& opt,
                      const SliceSpec& slice, std::size_t slab_bytes = kCompareSlabBytes);

/// The same for tensors in memory.
CompareResult compare(const Tensor& a, const Tensor& b, const CompareOptions& opt,
                      const SliceSpec& slice = {});

}  // namespace posenc
