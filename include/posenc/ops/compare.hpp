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
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>

#include "posenc/io/ref.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// How the dims of a head-dim axis of extent D form the pairs a rotation mixes (as the
/// RoPE styles): neox pairs (j, j + R/2), gptj pairs (2j, 2j + 1), for dims below the
/// rotary dim R; the dims R..D-1 pass through and count as the pairs (R + 2k, R + 2k + 1),
/// numbered R/2 + k.
enum class PairStyle { neox, gptj };

/// One axis of a breakdown of the errors: source axis `axis` of A, or with `pairs` the
/// dimension pairs of that axis.
struct ByAxis {
  std::size_t axis = 0;  ///< the source axis of A (0-based)
  bool pairs = false;    ///< group that axis's dims into rotation pairs (PairStyle)
  /// Same axis, same grouping.
  bool operator==(const ByAxis& o) const { return axis == o.axis && pairs == o.pairs; }
};

/// Where the errors are, besides how large: statistics per group of indices along any
/// number of axes (`--by h,s,d`: one group per (head, position, dim)), and the worst
/// elements.
struct CompareLocate {
  std::vector<ByAxis> by;  ///< distinct axes, any number; empty: no breakdown
  PairStyle pairs = PairStyle::neox;      ///< how a `pairs` axis forms its pairs
  std::optional<std::size_t> rotary_dim;  ///< for `pairs`; default: the whole axis
  std::size_t top = 0;                    ///< the `top` worst elements (0: none)
};

/// Limits of CompareLocate: rows of a breakdown (groups) and the worst elements kept.
constexpr std::size_t kMaxByRows = std::size_t{1} << 22;  ///< rows of a breakdown
constexpr std::size_t kMaxTop = 1'000'000;                ///< worst elements kept

/// What the caller asks for; unset tolerances take defaults by dtype.
struct CompareOptions {
  std::optional<double> rtol;            ///< relative tolerance; unset: by dtype
  std::optional<double> atol;            ///< absolute tolerance; unset: by dtype
  std::optional<std::uint64_t> max_ulp;  ///< match when the ULP distance is at most this
  bool equal_nan = false;                ///< NaN on both sides matches
  CompareLocate locate = {};             ///< where the errors are (breakdown, worst)
};

/// The rule in force, with every default resolved.
struct CompareRule {
  double rtol = 0;                       ///< relative tolerance in force
  double atol = 0;                       ///< absolute tolerance in force
  std::optional<std::uint64_t> max_ulp;  ///< the ULP bound, if any
  /// With max_ulp: whether rtol/atol were given, so that either test suffices;
  /// otherwise the ULP bound alone decides.
  bool tolerance_explicit = false;
  bool equal_nan = false;         ///< NaN on both sides matches
  std::optional<DType> ulp_type;  ///< the type ULPs count in; nullopt: integers (ULP 1)
  /// Whether rtol and atol take part in the verdict: a ULP bound given alone decides alone.
  bool tolerances_apply() const { return !max_ulp || tolerance_explicit; }
  /// The type ULPs count in as both front ends name it: its dtype name, or "integer".
  std::string ulp_type_name() const {
    return ulp_type ? std::string(dtype_name(*ulp_type)) : std::string("integer");
  }
};

/// The type both sides are compared in for ULPs and default tolerances: the less
/// precise float type of the two (bf16 < f16 < f32 < f64), the float one when only one
/// is a float, nullopt when neither is.
std::optional<DType> comparison_type(DType a, DType b);

/// torch.testing.assert_close's defaults for `t` as {rtol, atol}: f64 1e-7/1e-7, f32
/// 1.3e-6/1e-5, f16 1e-3/1e-5, bf16 1.6e-2/1e-5; fp8 the format's epsilon and 1e-5
/// (float8_e4m3fn 0.125, float8_e5m2 0.25); 0/0 (exact) for integers (nullopt).
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
  double value = 0;                  ///< the difference
  std::optional<std::size_t> index;  ///< flat (C order); nullopt when nothing compared
  double a = 0;                      ///< A's value there
  double b = 0;                      ///< B's value there
};

/// The tolerance ratio of a pair: how far it is from matching under `rule`, the
/// quantity `--top` ranks by and the breakdown's max_tol_ratio. For numpy.isclose's
/// test |a - b| / (atol + rtol |b|); for the ULP bound alone ulps / max_ulp; with both
/// (either suffices) the smaller of the two. x / 0 is +Inf for x > 0 and 0 for x = 0;
/// a NaN on one side only, or an unequal pair with an infinity, is +Inf; NaN on both
/// sides is 0 with equal_nan (+Inf without); the same infinity on both sides is 0. The
/// pair is a mismatch exactly when the ratio exceeds 1.
double tol_ratio(double a, double b, const CompareRule& rule);

/// The statistics of one group of a breakdown. max_abs, max_rel and max_ulp are over
/// pairs without NaN, as CompareResult's (-1 / any_ulp false when the group has none);
/// max_tol_ratio is over every pair, so a group with a mismatch has one above 1.
struct GroupStats {
  std::size_t count = 0;       ///< elements in the group
  std::size_t mismatches = 0;  ///< of them, mismatches
  double max_abs = -1;         ///< largest |a - b|; -1: nothing offered yet
  double max_rel = -1;         ///< largest |a - b| / |b|; -1: nothing offered yet
  double max_tol_ratio = -1;   ///< largest tol_ratio(); -1: nothing offered yet
  std::uint64_t max_ulp = 0;   ///< largest ULP distance (with any_ulp)
  bool any_ulp = false;        ///< some pair had a ULP distance
};

/// Statistics per group of indices along the CompareLocate::by axes: groups in C order
/// over the axes, the last fastest (with n_k entries on axis k, the group of entries
/// (e_1, ..., e_m) is row ((e_1 n_2 + e_2) n_3 + ...) n_m + e_m). An axis of the
/// breakdown counts the entries a --slice takes of it (one for an axis the slice
/// fixes), and `coords` gives each one's index in A (or the pair index).
struct CompareBreakdown {
  std::vector<ByAxis> axes;                      ///< the CompareLocate::by axes
  std::vector<std::vector<std::size_t>> coords;  ///< per axis: A's index of each entry
  std::vector<GroupStats> groups;                ///< one per row, C order over the axes
};

/// One of the worst elements.
struct WorstElement {
  std::size_t flat = 0;  ///< flat index among the compared elements (see index_in_a)
  double a = 0;          ///< A's value
  double b = 0;          ///< B's value
  double tol_ratio = 0;  ///< see tol_ratio()
  bool mismatch = false;  ///< the pair fails the rule
};

/// The outcome of a comparison. Flat indices count the compared elements in C order
/// (of the selections when a slice was given); `index_in_a` turns one into A's own
/// coordinates.
struct CompareResult {
  CompareRule rule;           ///< the rule applied
  Shape shape_a;              ///< A's shape
  Shape shape_b;              ///< B's shape
  Selection sel_a;            ///< what was compared of A (everything without a slice)
  Selection sel_b;            ///< what was compared of B
  bool shapes_equal = false;  ///< the compared shapes (sel_a.shape, sel_b.shape) agree
  std::size_t total = 0;      ///< elements compared (0 when the shapes differ)
  std::size_t mismatches = 0;                 ///< elements failing the rule
  std::optional<std::size_t> first_mismatch;  ///< flat index
  DiffAt max_abs;                             ///< largest |a - b|, pairs without NaN
  DiffAt max_rel;                             ///< largest |a - b| / |b|, pairs without NaN
  std::optional<std::uint64_t> max_ulp;       ///< over pairs without NaN
  std::optional<std::size_t> max_ulp_index;   ///< flat index of max_ulp
  std::size_t nan_a = 0;                      ///< NaNs in A's compared elements
  std::size_t nan_b = 0;                      ///< NaNs in B's compared elements
  std::size_t nan_mismatches = 0;             ///< NaN on exactly one side
  std::optional<CompareBreakdown> breakdown;  ///< with CompareLocate::by
  /// With CompareLocate::top: the worst elements, worst first: by tol_ratio, then by
  /// |a - b| (NaN as +Inf), then by index; ties at the end of the list are cut in index
  /// order, so the list is the same however the values were read.
  std::vector<WorstElement> worst;
  /// The shapes agree and nothing mismatches (exit status 0).
  bool match() const { return shapes_equal && mismatches == 0; }
  /// The multi-index in A (its source coordinates) of compared element `flat`.
  std::vector<std::size_t> index_in_a(std::size_t flat) const { return source_index(sel_a, flat); }
};

/// Compares blocks of values in order; the result does not depend on the blocks.
class Comparator {
 public:
  /// Compares under `rule`, without locating the errors.
  explicit Comparator(const CompareRule& rule);
  /// Also locates the errors as `locate` asks, for the compared elements `sel` (of A)
  /// describes. Throws InputError for an axis outside A or pairs the axis cannot form
  /// (an odd extent or rotary dim, or a slice that takes part of the axis), UsageError
  /// for a repeated axis, a breakdown of more than kMaxByRows rows, or a top above
  /// kMaxTop.
  Comparator(const CompareRule& rule, const CompareLocate& locate, const Selection& sel);
  ~Comparator();                                  ///< frees the locator
  Comparator(Comparator&&) noexcept;              ///< moves the state
  Comparator& operator=(Comparator&&) noexcept;  ///< moves the state

  /// Compares the next values of A (`a`) and B (`b`, the same size), continuing the
  /// flat index. Blocks of a few thousand values are fastest: the temporaries of the
  /// element-wise tests then stay in cache.
  void add(const xt::xtensor<double, 1>& a, const xt::xtensor<double, 1>& b);

  /// The result so far (shapes are the caller's to fill in).
  CompareResult result() const&;
  /// The same, moving the breakdown out rather than copying it.
  CompareResult result() &&;

 private:
  struct Locator;
  using Block = xt::xtensor<double, 1>;
  /// The block's part of the result when it holds no NaN or infinity (else false, and
  /// nothing of the result changed).
  bool add_finite(const Block& a, const Block& b, std::size_t first);
  void offer_differences(const Block& a, const Block& b, std::size_t first);
  void offer_ulp(std::uint64_t ulps, std::size_t index);
  void count_mismatches(const Block& a, const Block& b, std::size_t first);
  void tol_ratios(const Block& a, const Block& b, bool all_finite);
  void locate(const Block& a, const Block& b, std::size_t first, bool all_finite);

  CompareResult r_;
  std::unique_ptr<Locator> loc_;  ///< null without CompareLocate
  // Per-block temporaries, kept to reuse their memory.
  xt::xtensor<bool, 1> finite_, number_, ok_;
  xt::xtensor<double, 1> abs_, rel_, ratio_;
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
