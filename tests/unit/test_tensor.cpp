// The Tensor type and the f16/bf16 conversions (checked against exhaustive
// properties, not stored values: every half round-trips, and rounding picks the
// nearer neighbour with ties to even).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "posenc/error.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

TEST(Half, EveryFiniteHalfRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    auto bits = static_cast<std::uint16_t>(h);
    float f = half_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
      continue;
    }
    EXPECT_EQ(float_to_half(f), bits) << h;
    EXPECT_EQ(double_to_half(f), bits) << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even gives 1.
  EXPECT_EQ(double_to_half(1.0 + std::ldexp(1.0, -11)), 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even).
  EXPECT_EQ(double_to_half(1.0 + 3 * std::ldexp(1.0, -11)), 0x3c02);
  // Just above halfway rounds up: no double rounding through float.
  EXPECT_EQ(double_to_half(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01);
  EXPECT_EQ(double_to_half(65504.0), 0x7bff);
  EXPECT_EQ(double_to_half(65519.99), 0x7bff);
  EXPECT_EQ(double_to_half(65520.0), 0x7c00);
  EXPECT_EQ(double_to_half(-std::numeric_limits<double>::infinity()), 0xfc00);
  EXPECT_EQ(double_to_half(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(double_to_half(std::ldexp(1.0, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(double_to_half(-0.0), 0x8000);
}

TEST(BFloat16, EveryBf16RoundTripsAndTiesToEven) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    auto bits = static_cast<std::uint16_t>(h);
    float f = bf16_to_float(bits);
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_bf16(f), bits) << h;
    EXPECT_EQ(double_to_bf16(f), bits) << h;
  }
  EXPECT_EQ(double_to_bf16(1.0 + std::ldexp(1.0, -8)), 0x3f80);
  EXPECT_EQ(double_to_bf16(1.0 + 3 * std::ldexp(1.0, -8)), 0x3f82);
  EXPECT_EQ(double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3f81);
}

TEST(BFloat16, EveryNaNBecomesTheQuietNaNOfItsSign) {
  // Every float NaN (both signs, every payload, signalling or quiet), from float and
  // from double alike: the one rule of every narrowing to bf16.
  for (std::uint32_t m = 1; m < 0x800000u; m += 97) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      float f;
      const std::uint32_t u = sign | 0x7f800000u | m;
      std::memcpy(&f, &u, 4);
      const std::uint16_t want = sign != 0 ? 0xffc0 : 0x7fc0;
      ASSERT_EQ(float_to_bf16(f), want) << std::hex << u;
      ASSERT_EQ(double_to_bf16(static_cast<double>(f)), want) << std::hex << u;
    }
  }
}

TEST(Tensor, CheckedNumelRefusesOverflow) {
  EXPECT_THROW(checked_numel({std::size_t{1} << 62, 4}, 4, "x"), InputError);
  EXPECT_THROW(checked_numel({std::size_t{1} << 40, std::size_t{1} << 40}, 1, "x"), InputError);
  EXPECT_EQ(checked_numel({3, 0, 5}, 8, "x"), 0u);
  EXPECT_EQ(checked_numel({}, 8, "x"), 1u);
}

TEST(Tensor, AstypeRoundsAndTruncates) {
  Tensor t(DType::f64, {4});
  t.set(0, 1.5);
  t.set(1, -2.7);
  t.set(2, 1e10);
  t.set(3, std::nan(""));
  Tensor i = t.astype(DType::i32);
  EXPECT_EQ(i.data<std::int32_t>()[0], 1);
  EXPECT_EQ(i.data<std::int32_t>()[1], -2);
  EXPECT_EQ(i.data<std::int32_t>()[2], std::numeric_limits<std::int32_t>::max());
  Tensor f = t.astype(DType::f32);
  EXPECT_EQ(f.data<float>()[1], -2.7f);
  EXPECT_TRUE(std::isnan(f.data<float>()[3]));
  EXPECT_EQ(shape_str({3}), "(3,)");
  EXPECT_EQ(shape_str({2, 3}), "(2, 3)");
}

TEST(Tensor, BorrowReadsTheCallersMemoryAndLeavesItAlone) {
  std::vector<float> data = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  {
    Tensor t = Tensor::borrow(DType::f32, {2, 3}, data.data());
    EXPECT_EQ(t.data<float>(), data.data());
    EXPECT_EQ(t.numel(), 6u);
    EXPECT_EQ(t.get(4), 5.0);
    Tensor moved = std::move(t);  // still borrowed: nothing freed at either end
    EXPECT_EQ(moved.data<float>(), data.data());
    const Tensor copy = moved.astype(DType::f64);  // an owned copy
    EXPECT_NE(copy.bytes(), moved.bytes());
    EXPECT_EQ(copy.get(5), 6.0);
  }
  EXPECT_EQ(data[5], 6.0f);  // the vector's memory outlives the tensors, untouched
  EXPECT_THROW(Tensor::borrow(DType::f64, {SIZE_MAX / 4, 4}, data.data()), InputError);
}

}  // namespace
}  // namespace posenc
