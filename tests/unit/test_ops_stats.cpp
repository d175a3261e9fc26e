// Statistics (ops/stats.hpp) against an independent computation: counts and extremes
// by a plain scan, sum, mean and std two-pass in __float128 over all finite values at
// once. The streaming entry points are checked against the same on the selection.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>
#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>

#include "posenc/io/ref.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/ops/stats.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

__extension__ typedef __float128 Quad;  // GCC: 113-bit significand, exact enough here
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The reference: one plain pass for counts and first extremes, then __float128.
TensorStats reference_stats(const std::vector<double>& v) {
  TensorStats s;
  s.count = v.size();
  Quad sum = 0;
  double lo = kInf, hi = -kInf;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    if (std::isnan(x)) {
      ++s.nan;
    } else if (std::isinf(x)) {
      ++(x > 0 ? s.posinf : s.neginf);
    } else {
      ++s.finite;
      s.zeros += x == 0;
      sum += x;
      if (x < lo) lo = x, s.argmin = i;
      if (x > hi) hi = x, s.argmax = i;
      s.absmax = i == 0 || std::isnan(s.absmax) ? std::fabs(x) : std::max(s.absmax, std::fabs(x));
    }
  }
  if (s.finite == 0) return s;
  const Quad mean = sum / s.finite;
  Quad m2 = 0;
  for (double x : v) {
    if (std::isfinite(x)) m2 += (x - mean) * (x - mean);
  }
  s.min = lo;
  s.max = hi;
  s.sum = static_cast<double>(sum);
  s.mean = static_cast<double>(mean);
  s.std = std::sqrt(static_cast<double>(m2 / s.finite));
  return s;
}

void expect_stats(const TensorStats& got, const TensorStats& want, double rtol) {
  EXPECT_EQ(got.count, want.count);
  EXPECT_EQ(got.finite, want.finite);
  EXPECT_EQ(got.nan, want.nan);
  EXPECT_EQ(got.posinf, want.posinf);
  EXPECT_EQ(got.neginf, want.neginf);
  EXPECT_EQ(got.zeros, want.zeros);
  if (want.finite == 0) {
    EXPECT_TRUE(std::isnan(got.min) && std::isnan(got.mean) && std::isnan(got.std));
    return;
  }
  EXPECT_EQ(got.min, want.min);
  EXPECT_EQ(got.max, want.max);
  EXPECT_EQ(got.argmin, want.argmin);
  EXPECT_EQ(got.argmax, want.argmax);
  EXPECT_EQ(got.absmax, want.absmax);
  EXPECT_NEAR(got.sum, want.sum, rtol * std::fabs(want.sum) + 1e-300);
  EXPECT_NEAR(got.mean, want.mean, rtol * std::fabs(want.mean) + 1e-300);
  EXPECT_NEAR(got.std, want.std, rtol * want.std + 1e-300);
}

TensorStats accumulate(const std::vector<double>& v, std::size_t block) {
  StatsAccumulator acc;
  for (std::size_t i = 0; i < v.size(); i += block) {
    const std::size_t n = std::min(block, v.size() - i);
    acc.add(xt::adapt(v.data() + i, n, xt::no_ownership(), std::array<std::size_t, 1>{n}));
  }
  return acc.result();
}

TEST(Stats, MatchAQuadPrecisionReferenceInAnyBlocks) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  for (double offset : {0.0, 1e6, -3e9}) {
    std::vector<double> v(50000);
    for (double& x : v) x = offset + 1e3 * normal(rng);  // a large mean: cancellation
    for (std::size_t i = 0; i < v.size(); i += 997) v[i] = kNaN;
    v[5] = kInf, v[77] = -kInf, v[78] = -kInf, v[100] = 0.0, v[101] = -0.0;
    const TensorStats want = reference_stats(v);
    for (std::size_t block :
         {std::size_t{1} << 20, std::size_t{8192}, std::size_t{1000}, std::size_t{7}}) {
      SCOPED_TRACE(block);
      expect_stats(accumulate(v, block), want, 1e-14);
    }
  }
}

TEST(Stats, FirstExtremesAcrossBlocksAndSignedZeros) {
  const std::vector<double> v = {1, 0, -0.0, 0, 1, kNaN, 1};
  for (std::size_t block : {1, 2, 3, 7}) {
    const TensorStats s = accumulate(v, block);
    EXPECT_EQ(s.argmin, 1u);  // 0 first; -0 is not below it
    EXPECT_EQ(s.argmax, 0u);
    EXPECT_EQ(s.zeros, 3u);
    EXPECT_FALSE(std::signbit(s.min));
    EXPECT_EQ(s.absmax, 1.0);
  }
}

TEST(Stats, NoFiniteValues) {
  const TensorStats s = accumulate({kNaN, kInf, -kInf, kNaN}, 3);
  expect_stats(s, reference_stats({kNaN, kInf, -kInf, kNaN}), 0);
  EXPECT_EQ((s.nan + s.posinf + s.neginf), 4u);
  EXPECT_EQ(accumulate({}, 4).count, 0u);
}

class Summarize : public ::testing::Test {
 protected:
  void TearDown() override { std::remove(path_.c_str()); }
  /// `t` written to an NPY file and opened as a source.
  std::unique_ptr<TensorSource> source(const Tensor& t) {
    write_tensor(parse_ref(path_), t);
    return open_source(parse_ref(path_));
  }
  std::string path_ =
      ::testing::TempDir() + "posenc_stats_test_" + std::to_string(::getpid()) + ".npy";
};

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = t.get(i);
  return v;
}

TEST_F(Summarize, SelectionsStreamedInSlabsEqualTheSelectedValues) {
  std::mt19937_64 rng(8);
  std::normal_distribution<double> normal;
  Tensor t(DType::f32, {1, 37, 5, 8});  // streams along axis 1 (axis 0 has extent 1)
  for (std::size_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(normal(rng));
  t.data<float>()[333] = std::numeric_limits<float>::quiet_NaN();
  auto src = source(t);
  for (const char* text :
       {"", "0, 3:30:4, ::-2, 1:7", "..., ::-3", "0, -1, 2", "0,::-5,1:,0", "0, 40:, 1"}) {
    SCOPED_TRACE(text);
    const Selection sel = resolve_selection(parse_slice(text), t.shape());
    const Tensor want = select(t, sel);
    const TensorStats ref = reference_stats(values_of(want));
    // 200 bytes per slab: one entry (160 bytes) at a time, so many slabs and batches.
    for (std::size_t slab : {std::size_t{200}, std::size_t{1000}, kStatsSlabBytes}) {
      const SelectionSummary mem = summarize(t, sel, 7, slab);
      const SelectionSummary file = summarize(*src, sel, 7, slab);
      expect_stats(mem.stats, ref, 1e-14);
      // The same blocks whatever the storage, so the same bits.
      EXPECT_EQ(std::memcmp(&mem.stats.mean, &file.stats.mean, sizeof(double)), 0);
      EXPECT_EQ(std::memcmp(&mem.stats.std, &file.stats.std, sizeof(double)), 0);
      ASSERT_EQ(mem.head.numel(), std::min<std::size_t>(7, want.numel()));
      EXPECT_EQ(std::memcmp(mem.head.bytes(), want.bytes(), mem.head.nbytes()), 0);
      EXPECT_EQ(std::memcmp(file.head.bytes(), want.bytes(), file.head.nbytes()), 0);
    }
  }
  EXPECT_THROW(summarize(t, select_all({37, 5, 8}), 1), std::invalid_argument);
}

TEST_F(Summarize, StorageTypesConvertAsTensorGet) {
  // f16/bf16 through posenc's converters, bool as 0/1 for any nonzero byte, 64-bit
  // integers as the nearest double; the head keeps the stored bytes.
  Tensor h(DType::f16, {4});
  const float hv[] = {1.5f, -65504.f, 0.f, 3.140625f};
  for (int i = 0; i < 4; ++i) h.data<std::uint16_t>()[i] = float_to_half(hv[i]);
  Tensor b(DType::b1, {5});
  const std::uint8_t bv[] = {0, 1, 2, 255, 0};
  std::memcpy(b.bytes(), bv, 5);
  Tensor u(DType::u64, {2});
  u.data<std::uint64_t>()[0] = (std::uint64_t{1} << 60) + 1;
  u.data<std::uint64_t>()[1] = 3;
  for (const Tensor* t : {&h, &b, &u}) {
    const SelectionSummary s = summarize(*t, select_all(t->shape()), 10);
    expect_stats(s.stats, reference_stats(values_of(*t)), 1e-15);
    EXPECT_EQ(std::memcmp(s.head.bytes(), t->bytes(), t->nbytes()), 0);
  }
  EXPECT_EQ(summarize(b, select_all({5}), 0).stats.sum, 3.0);
  Tensor scalar(DType::f64, {});
  scalar.data<double>()[0] = -2.5;
  auto src = source(scalar);
  const SelectionSummary s = summarize(*src, select_all({}), 10);
  EXPECT_EQ(s.stats.count, 1u);
  EXPECT_EQ(s.stats.min, -2.5);
  EXPECT_EQ(s.head.get(0), -2.5);
}

}  // namespace
}  // namespace posenc
