// The comparison (ops/compare.hpp) against references written from the definitions:
// numpy.isclose per element (NaN equal only with equal_nan, an infinity equal only to
// itself), first occurrences by a plain scan, and ULP distances by counting
// representable values (std::nextafter steps; the sorted list of all halves).
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>
#include <xtensor/xadapt.hpp>

#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/io/write_fields.hpp"
#include "posenc/ops/compare.hpp"
#include "posenc/ops/compare_fields.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(CompareRule, DefaultsFollowTheLessPreciseType) {
  EXPECT_EQ(comparison_type(DType::f32, DType::f64), DType::f32);
  EXPECT_EQ(comparison_type(DType::f16, DType::bf16), DType::bf16);
  EXPECT_EQ(comparison_type(DType::i32, DType::f16), DType::f16);
  EXPECT_EQ(comparison_type(DType::i32, DType::u8), std::nullopt);
  EXPECT_EQ(default_tolerances(DType::f32), std::make_pair(1.3e-6, 1e-5));
  EXPECT_EQ(default_tolerances(DType::bf16), std::make_pair(1.6e-2, 1e-5));
  EXPECT_EQ(default_tolerances(std::nullopt), std::make_pair(0.0, 0.0));
  CompareRule r = make_compare_rule(DType::f64, DType::f64, {std::nullopt, 0.5, 3, true});
  EXPECT_EQ(r.rtol, 1e-7);
  EXPECT_EQ(r.atol, 0.5);
  EXPECT_TRUE(r.tolerance_explicit && r.equal_nan);
  EXPECT_EQ(r.max_ulp, 3u);
  EXPECT_FALSE(make_compare_rule(DType::f64, DType::f64, {}).tolerance_explicit);
  EXPECT_THROW(make_compare_rule(DType::f32, DType::f32, {-1.0, std::nullopt, std::nullopt, false}),
               UsageError);
  EXPECT_THROW(make_compare_rule(DType::f32, DType::f32, {std::nullopt, kNaN, std::nullopt, false}),
               UsageError);
}

// What both front ends state of the rule: which tests decide, and the ULPs' type.
TEST(CompareRule, StatesWhichTestsDecideAndTheUlpType) {
  CompareRule r = make_compare_rule(DType::bf16, DType::f32, {});
  EXPECT_TRUE(r.tolerances_apply());
  EXPECT_EQ(r.ulp_type_name(), "bf16");
  r = make_compare_rule(DType::f32, DType::f32, {std::nullopt, std::nullopt, 2, false});
  EXPECT_FALSE(r.tolerances_apply());  // a ULP bound given alone decides alone
  r = make_compare_rule(DType::f32, DType::f32, {1e-3, std::nullopt, 2, false});
  EXPECT_TRUE(r.tolerances_apply());  // with a tolerance given, either test suffices
  EXPECT_EQ(make_compare_rule(DType::i32, DType::u8, {}).ulp_type_name(), "integer");
  EXPECT_EQ(make_compare_rule(DType::f8e5m2, DType::f32, {}).ulp_type_name(), "float8_e5m2");
}

// The declared ranges' messages, which the command line and Python say after their own
// name for the field (compare_fields.hpp, io/write_fields.hpp).
TEST(CompareRule, DeclaredRangesGiveTheLibrarysMessages) {
  const auto message = [](auto f) {
    try {
      f();
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { make_compare_rule(DType::f32, DType::f32, {-1.0, {}, {}, false}); }),
            "rtol: must be a finite number >= 0, got -1");
  EXPECT_EQ(message([] { validate(BaselineRule{-0.5, {}}); }),
            "factor: must be a finite number >= 0, got -0.5");
  WriteOptions w;
  w.compression = 10;
  EXPECT_EQ(message([&w] { validate(w); }), "compression: must be from 0 to 9, got 10");
  Field ulp = field("max_ulp", "").at_least(0);
  EXPECT_EQ(range_error(ulp, std::int64_t{-1}), "must be at least 0, got -1");
  EXPECT_EQ(range_error(ulp, std::uint64_t{1} << 63), "");  // beyond int64: no bound above
}

// Distance by walking representable floats from a to b.
std::uint64_t nextafter_steps(float a, float b) {
  std::uint64_t n = 0;
  while (a != b || std::signbit(a) != std::signbit(b)) {
    if (a == 0 && b == 0) break;  // +0 and -0 are one point
    a = std::nextafter(a, b);
    ++n;
  }
  return n;
}

TEST(Ulp, CountsRepresentableValuesBetween) {
  std::mt19937_64 rng(4);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> walk(-300, 300);
  for (int i = 0; i < 2000; ++i) {
    float a = normal(rng) * (i % 3 == 0 ? 1e-38f : 10.f), b = a;
    for (int s = walk(rng); s != 0; s += s > 0 ? -1 : 1) {
      b = std::nextafter(b, s > 0 ? kInf : -kInf);
    }
    EXPECT_EQ(ulp_distance(a, b, DType::f32), nextafter_steps(a, b)) << a << " " << b;
  }
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(ulp_distance(-tiny, tiny, DType::f32), 2u);
  EXPECT_EQ(ulp_distance(0.0, -0.0, DType::f32), 0u);
  EXPECT_EQ(ulp_distance(1.0, std::nextafter(1.0, 2.0), DType::f64), 1u);
  // Both sides are rounded to the type first: 1 + 2^-30 is 1 in float.
  EXPECT_EQ(ulp_distance(1.0, 1.0 + std::ldexp(1.0, -30), DType::f32), 0u);
  EXPECT_EQ(ulp_distance(-kInf, kInf, DType::f64), 2 * std::uint64_t{0x7ff0000000000000});
  EXPECT_EQ(ulp_distance(5, 9, std::nullopt), 4u);
  EXPECT_EQ(ulp_distance(-1e300, 1e300, std::nullopt), std::numeric_limits<std::uint64_t>::max());
}

TEST(Ulp, HalfDistancesArePositionsInTheSortedHalves) {
  std::vector<float> halves;  // every non-NaN half once (-0 and +0 as one value)
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    if (!std::isnan(f) && h != 0x8000) halves.push_back(f);
  }
  std::sort(halves.begin(), halves.end());
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<std::size_t> pick(0, halves.size() - 1);
  for (int i = 0; i < 5000; ++i) {
    const std::size_t x = pick(rng), y = i % 2 ? pick(rng) : std::min(x + i % 7, halves.size() - 1);
    EXPECT_EQ(ulp_distance(halves[x], halves[y], DType::f16), x > y ? x - y : y - x);
  }
}

// numpy.isclose for one pair.
bool isclose(double a, double b, double rtol, double atol, bool equal_nan) {
  if (std::isnan(a) || std::isnan(b)) return equal_nan && std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}

CompareResult run_blocks(const std::vector<double>& a, const std::vector<double>& b,
                         const CompareRule& rule, std::size_t block) {
  Comparator c(rule);
  for (std::size_t i = 0; i < a.size(); i += block) {
    const std::size_t n = std::min(block, a.size() - i);
    const std::array<std::size_t, 1> shape{n};
    c.add(xt::adapt(a.data() + i, n, xt::no_ownership(), shape),
          xt::adapt(b.data() + i, n, xt::no_ownership(), shape));
  }
  return c.result();
}

TEST(Comparator, MatchesIscloseAndFirstOccurrences) {
  std::mt19937_64 rng(6);
  std::normal_distribution<double> normal;
  std::vector<double> a(20000), b(20000);
  for (std::size_t i = 0; i < a.size(); ++i) {
    b[i] = normal(rng) * 10;
    a[i] = b[i] + normal(rng) * 1e-4;
  }
  const double specials[] = {kNaN, kInf, -kInf, 0.0, -0.0};
  for (std::size_t i = 0; i < 600; ++i) {
    const std::size_t k = (i * 7919) % a.size();
    (i % 2 ? a : b)[k] = specials[i % 5];
    if (i % 3 == 0) a[k] = b[k];  // NaN-NaN, equal infinities, zeros
  }
  for (double rtol : {0.0, 1e-5}) {
    for (double atol : {0.0, 2e-4}) {
      for (bool equal_nan : {false, true}) {
        CompareRule rule = make_compare_rule(DType::f64, DType::f64, {rtol, atol, {}, equal_nan});
        std::size_t mismatches = 0, nan_a = 0, nan_b = 0, one_nan = 0;
        std::optional<std::size_t> first, at_abs, at_ulp;
        double max_abs = -1;
        std::uint64_t max_ulp = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
          const bool ok = isclose(a[i], b[i], rtol, atol, equal_nan);
          mismatches += !ok;
          if (!ok && !first) first = i;
          nan_a += std::isnan(a[i]);
          nan_b += std::isnan(b[i]);
          one_nan += std::isnan(a[i]) != std::isnan(b[i]);
          if (std::isnan(a[i]) || std::isnan(b[i])) continue;
          // An infinity offers +Inf when unequal, nothing when equal.
          if ((std::isinf(a[i]) || std::isinf(b[i])) && a[i] == b[i]) continue;
          const double d = std::fabs(a[i] - b[i]);
          if (d > max_abs) max_abs = d, at_abs = i;
        }
        for (std::size_t i = 0; i < a.size(); ++i) {
          if (std::isnan(a[i]) || std::isnan(b[i])) continue;
          const std::uint64_t u = ulp_distance(a[i], b[i], DType::f64);
          if (!at_ulp || u > max_ulp) max_ulp = u, at_ulp = i;
        }
        for (std::size_t block : {std::size_t{20000}, std::size_t{4096}, std::size_t{333}}) {
          const CompareResult r = run_blocks(a, b, rule, block);
          EXPECT_EQ(r.total, a.size());
          EXPECT_EQ(r.mismatches, mismatches);
          EXPECT_EQ(r.first_mismatch, first);
          EXPECT_EQ(r.nan_mismatches, one_nan);
          EXPECT_EQ(r.nan_a, nan_a);
          EXPECT_EQ(r.nan_b, nan_b);
          EXPECT_EQ(r.max_abs.value, max_abs);  // +Inf: an unequal infinity
          EXPECT_EQ(r.max_abs.index, at_abs);
          EXPECT_EQ(r.max_ulp, max_ulp);
          EXPECT_EQ(r.max_ulp_index, at_ulp);
          EXPECT_FALSE(r.match());
        }
      }
    }
  }
}

TEST(Comparator, FiniteBlocksMatchAPlainScanWithTies) {
  // Blocks without NaN or infinities take one fused pass; these values tie often (a
  // grid of eighths), so every maximum has several first-occurrence candidates, in every
  // ULP type and rule. One NaN pair in the middle sends its block down the masked path,
  // and the two paths must agree on what is first.
  std::mt19937_64 rng(8);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> step(-2, 2);
  std::vector<double> a(30000), b(30000);
  for (std::size_t i = 0; i < a.size(); ++i) {
    b[i] = std::round(normal(rng) * 64) / 8;
    a[i] = b[i] + step(rng) / 8.0;
  }
  for (const bool with_nan : {false, true}) {
    std::vector<double> x = a;
    if (with_nan) x[15000] = kNaN;
    for (const DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i32}) {
      for (const CompareOptions& o :
           {CompareOptions{}, CompareOptions{std::nullopt, std::nullopt, 2},
            CompareOptions{0.0, 0.1, 1}, CompareOptions{0.01, 0.0, std::nullopt}}) {
        const CompareRule rule = make_compare_rule(t, t, o);
        std::size_t mismatches = 0;
        std::optional<std::size_t> first, at_abs, at_rel, at_ulp;
        double max_abs = -1, max_rel = -1;
        std::uint64_t max_ulp = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
          if (std::isnan(x[i])) {
            ++mismatches;
            if (!first) first = i;
            continue;
          }
          const double d = std::fabs(x[i] - b[i]);
          const double rel = b[i] != 0 ? d / std::fabs(b[i]) : (d == 0 ? 0 : kInf);
          const std::uint64_t u = ulp_distance(x[i], b[i], rule.ulp_type);
          const bool tol = d <= rule.atol + rule.rtol * std::fabs(b[i]);
          const bool ok =
              rule.max_ulp ? u <= *rule.max_ulp || (rule.tolerance_explicit && tol) : tol;
          if (!ok && !first) first = i;
          mismatches += !ok;
          if (d > max_abs) max_abs = d, at_abs = i;
          if (rel > max_rel) max_rel = rel, at_rel = i;
          if (!at_ulp || u > max_ulp) max_ulp = u, at_ulp = i;
        }
        for (std::size_t block : {std::size_t{8192}, std::size_t{1000}, std::size_t{7}}) {
          const CompareResult r = run_blocks(x, b, rule, block);
          const std::string what = std::string(dtype_name(t)) + " block " + std::to_string(block);
          EXPECT_EQ(r.mismatches, mismatches) << what;
          EXPECT_EQ(r.first_mismatch, first) << what;
          EXPECT_EQ(r.max_abs.value, max_abs) << what;
          EXPECT_EQ(r.max_abs.index, at_abs) << what;
          EXPECT_EQ(r.max_abs.a, x[*at_abs]) << what;
          EXPECT_EQ(r.max_rel.value, max_rel) << what;
          EXPECT_EQ(r.max_rel.index, at_rel) << what;
          EXPECT_EQ(r.max_ulp, max_ulp) << what;
          EXPECT_EQ(r.max_ulp_index, at_ulp) << what;
        }
      }
    }
  }
}

TEST(Comparator, LargestDifferenceKeepsTheFirstAndBothValues) {
  const std::vector<double> b = {1.0, 4.0, 0.0, 2.0, 0.0};
  const std::vector<double> a = {1.5, 3.5, 0.0, 2.5, 1e-9};
  for (std::size_t block : {1, 2, 5}) {
    const CompareResult r = run_blocks(a, b, make_compare_rule(DType::f64, DType::f64, {}), block);
    EXPECT_EQ(r.max_abs.value, 0.5);
    EXPECT_EQ(r.max_abs.index, 0u);
    EXPECT_EQ((r.max_abs.a), 1.5);
    EXPECT_EQ((r.max_abs.b), 1.0);
    EXPECT_EQ(r.max_rel.value, kInf);  // 1e-9 against 0
    EXPECT_EQ(r.max_rel.index, 4u);
    EXPECT_EQ(r.mismatches, 3u);  // 1e-9 against 0 is within the default atol 1e-7
  }
  // Nothing but NaN pairs: no difference at all.
  const CompareResult r =
      run_blocks({kNaN, kNaN}, {kNaN, 1.0}, make_compare_rule(DType::f64, DType::f64, {}), 1);
  EXPECT_FALSE(r.max_abs.index || r.max_ulp);
  EXPECT_EQ(r.nan_mismatches, 1u);
  Comparator empty(make_compare_rule(DType::f32, DType::f32, {}));
  empty.add(xt::xtensor<double, 1>::from_shape({0}), xt::xtensor<double, 1>::from_shape({0}));
  EXPECT_TRUE(empty.result().match());
  EXPECT_EQ(empty.result().total, 0u);
}

TEST(Comparator, UlpBoundAloneOrWithTolerances) {
  const float one_up = std::nextafter(1.0f, 2.0f);
  const std::vector<double> a = {1e-30, 1.0, one_up};
  const std::vector<double> b = {-1e-30, one_up,
                                 std::nextafter(std::nextafter(one_up, 2.0f), 2.0f)};
  auto mismatches = [&](CompareOptions o) {
    return run_blocks(a, b, make_compare_rule(DType::f32, DType::f32, o), 3).mismatches;
  };
  EXPECT_EQ(mismatches({std::nullopt, std::nullopt, 1}), 2u);  // 1e-30 vs -1e-30; 2 ulps
  EXPECT_EQ(mismatches({std::nullopt, std::nullopt, 2}), 1u);
  EXPECT_EQ(mismatches({0.0, 1e-20, 1}), 1u);  // either test suffices
  EXPECT_EQ(mismatches({0.0, 0.0, std::nullopt}), 3u);
}

class CompareStreams : public ::testing::Test {
 protected:
  void TearDown() override {
    std::remove(pa_.c_str());
    std::remove(pb_.c_str());
  }
  // (Per process: ctest runs the tests of this fixture at the same time.)
  std::string pa_ = ::testing::TempDir() + "posenc_cmp_a_" + std::to_string(::getpid()) + ".npy";
  std::string pb_ = ::testing::TempDir() + "posenc_cmp_b_" + std::to_string(::getpid()) + ".npy";
};

TEST_F(CompareStreams, SlabsGiveTheInMemoryResult) {
  std::mt19937_64 rng(9);
  std::normal_distribution<double> normal;
  Tensor a(DType::f32, {1, 50, 3, 4}), b(DType::f64, {1, 50, 3, 4});
  for (std::size_t i = 0; i < a.numel(); ++i) {
    b.data<double>()[i] = normal(rng);
    a.data<float>()[i] = static_cast<float>(b.data<double>()[i] * (1 + 1e-6 * normal(rng)));
  }
  a.data<float>()[100] = std::numeric_limits<float>::quiet_NaN();
  write_tensor(parse_ref(pa_), a);
  write_tensor(parse_ref(pb_), b);
  const CompareOptions opt{1e-6, 1e-6, std::nullopt, false};
  const CompareResult mem = compare(a, b, opt);
  for (std::size_t slab : {std::size_t{1}, std::size_t{500}, kCompareSlabBytes}) {
    auto sa = open_source(parse_ref(pa_)), sb = open_source(parse_ref(pb_));
    const CompareResult r = compare(*sa, *sb, opt, slab);
    EXPECT_EQ(r.mismatches, mem.mismatches);
    EXPECT_EQ(r.first_mismatch, mem.first_mismatch);
    EXPECT_EQ(r.max_rel.value, mem.max_rel.value);
    EXPECT_EQ(r.max_rel.index, mem.max_rel.index);
    EXPECT_EQ(r.max_ulp, mem.max_ulp);
    EXPECT_EQ(r.rule.ulp_type, DType::f32);
    EXPECT_EQ(r.nan_a, 1u);
  }
  Tensor c(DType::f32, {50, 12});
  const CompareResult diff = compare(a, c, opt);
  EXPECT_FALSE(diff.shapes_equal || diff.match());
  EXPECT_EQ(diff.total, 0u);
  EXPECT_EQ(diff.shape_b, (Shape{50, 12}));
}

TEST_F(CompareStreams, SlicesCompareTheSameSelectionOfEach) {
  // A (6, 5) against a (4, 5) reference: the first rows of A, picked by an index list.
  Tensor a(DType::f64, {6, 5}), b(DType::f32, {4, 5});
  for (std::size_t i = 0; i < a.numel(); ++i) a.data<double>()[i] = static_cast<double>(i);
  for (std::size_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = static_cast<float>(i);
  b.data<float>()[3 * 5 + 4] += 1;  // row 3, column 4
  b.data<float>()[1 * 5 + 2] += 2;  // row 1, column 2
  write_tensor(parse_ref(pa_), a);
  write_tensor(parse_ref(pb_), b);
  const CompareOptions opt{0.0, 0.0, std::nullopt, false};
  const SliceSpec spec = parse_slice("[3, 0, 1], 2:");
  const CompareResult mem = compare(a, b, opt, spec);
  EXPECT_TRUE(mem.shapes_equal);
  EXPECT_EQ(mem.total, 9u);
  EXPECT_EQ(mem.mismatches, 2u);
  ASSERT_TRUE(mem.first_mismatch && mem.max_abs.index);
  EXPECT_EQ(mem.index_in_a(*mem.first_mismatch), (std::vector<std::size_t>{3, 4}));
  EXPECT_EQ(mem.index_in_a(*mem.max_abs.index), (std::vector<std::size_t>{1, 2}));
  EXPECT_EQ(mem.max_abs.value, 2.0);
  for (std::size_t slab : {std::size_t{1}, std::size_t{60}, kCompareSlabBytes}) {
    auto sa = open_source(parse_ref(pa_)), sb = open_source(parse_ref(pb_));
    const CompareResult r = compare(*sa, *sb, opt, spec, slab);
    EXPECT_EQ(r.mismatches, mem.mismatches) << slab;
    EXPECT_EQ(r.first_mismatch, mem.first_mismatch) << slab;
    EXPECT_EQ(r.max_abs.index, mem.max_abs.index) << slab;
  }
  EXPECT_TRUE(compare(a, b, opt, parse_slice("[0, 2]")).match());
  EXPECT_FALSE(compare(a, b, opt).shapes_equal);
  try {
    compare(a, b, opt, parse_slice("5"));
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "B: slice '5': index 5 is out of range for axis 0 with size 4");
  }
}

TEST_F(CompareStreams, BreakdownOverThreeAxesIsCOrderOverTheirGroups) {
  // (2, 3, 5, 6) with --by h,s,d order reversed (axes 3, 1, 2) and a pair axis, sliced:
  // every group's count and mismatches against a scan over multi-indices.
  const Shape shape{2, 3, 5, 6};
  Tensor a(DType::f64, shape), b(DType::f64, shape);
  for (std::size_t i = 0; i < a.numel(); ++i) {
    b.data<double>()[i] = static_cast<double>(i % 7);
    a.data<double>()[i] = b.data<double>()[i] + (i % 11 == 3 ? 1.0 : 0.0);
  }
  write_tensor(parse_ref(pa_), a);
  write_tensor(parse_ref(pb_), b);
  CompareOptions opt{0.0, 0.0, std::nullopt, false};
  opt.locate.by = {{3, true}, {1, false}, {2, false}};  // pair, h, s
  const SliceSpec spec = parse_slice(":, 1:, ::2");     // h 1, 2; s 0, 2, 4
  const std::vector<std::size_t> hs{1, 2}, ss{0, 2, 4};
  std::vector<std::size_t> count(3 * 2 * 3), bad(3 * 2 * 3);
  for (std::size_t i = 0; i < a.numel(); ++i) {
    const auto idx = unravel_index(i, shape);
    if (idx[1] == 0 || idx[2] % 2) continue;
    const std::size_t g = ((idx[3] % 3) * 2 + (idx[1] - 1)) * 3 + idx[2] / 2;  // neox pairs
    ++count[g];
    bad[g] += a.data<double>()[i] != b.data<double>()[i];
  }
  for (std::size_t slab : {std::size_t{1}, std::size_t{100}, kCompareSlabBytes}) {
    auto sa = open_source(parse_ref(pa_)), sb = open_source(parse_ref(pb_));
    const CompareResult r = compare(*sa, *sb, opt, spec, slab);
    ASSERT_TRUE(r.breakdown);
    EXPECT_EQ(r.breakdown->coords, (std::vector<std::vector<std::size_t>>{{0, 1, 2}, hs, ss}));
    ASSERT_EQ(r.breakdown->groups.size(), count.size());
    for (std::size_t g = 0; g < count.size(); ++g) {
      EXPECT_EQ(r.breakdown->groups[g].count, count[g]) << g << " slab " << slab;
      EXPECT_EQ(r.breakdown->groups[g].mismatches, bad[g]) << g << " slab " << slab;
    }
  }
  opt.locate.by = {{0, false}, {1, false}, {2, false}, {3, false}};  // one group per element
  const CompareResult all = compare(a, b, opt);
  ASSERT_EQ(all.breakdown->groups.size(), a.numel());
  for (std::size_t i = 0; i < a.numel(); ++i) {
    EXPECT_EQ(all.breakdown->groups[i].mismatches, i % 11 == 3 ? 1u : 0u) << i;
  }
}

}  // namespace
}  // namespace posenc
