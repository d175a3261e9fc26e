// dtype conversion (ops/cast.hpp) against numpy's astype rules written out: integers
// wrap modulo 2^bits (computed here in uint64), integer -> float rounds once (an
// exactly known case that float64 would double-round), float -> integer truncates.
// tests/cli/test_convert_astype.py checks the command against numpy itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "posenc/ops/cast.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

template <class T>
Tensor tensor_of(DType t, const std::vector<T>& v) {
  Tensor x(t, {v.size()});
  std::memcpy(x.bytes(), v.data(), v.size() * sizeof(T));
  return x;
}

template <class T>
std::vector<T> values(const Tensor& t) {
  std::vector<T> v(t.numel());
  std::memcpy(v.data(), t.bytes(), t.nbytes());
  return v;
}

// The low `bits` bits of v, read as a signed or unsigned integer: numpy's astype
// between integer types.
std::int64_t wrap(std::uint64_t v, int bits, bool is_signed) {
  const std::uint64_t low = bits == 64 ? v : v & ((std::uint64_t{1} << bits) - 1);
  if (!is_signed || bits == 64 || (low >> (bits - 1)) == 0) return static_cast<std::int64_t>(low);
  return static_cast<std::int64_t>(low) - (std::int64_t{1} << bits);
}

TEST(Cast, IntegersWrapModuloTwoToTheBits) {
  const std::vector<std::int64_t> v = {0,
                                       1,
                                       -1,
                                       127,
                                       128,
                                       255,
                                       256,
                                       300,
                                       -129,
                                       65535,
                                       -32769,
                                       std::numeric_limits<std::int64_t>::min(),
                                       std::numeric_limits<std::int64_t>::max(),
                                       0x123456789abcdef};
  const Tensor src = tensor_of(DType::i64, v);
  struct Target {
    DType t;
    int bits;
    bool is_signed;
  };
  for (Target to :
       {Target{DType::i8, 8, true}, Target{DType::u8, 8, false}, Target{DType::i16, 16, true},
        Target{DType::u16, 16, false}, Target{DType::i32, 32, true}, Target{DType::u32, 32, false},
        Target{DType::u64, 64, false}}) {
    const Tensor out = cast(src, to.t);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::int64_t want = wrap(static_cast<std::uint64_t>(v[i]), to.bits, to.is_signed);
      if (to.t == DType::u64) {
        EXPECT_EQ(out.data<std::uint64_t>()[i], static_cast<std::uint64_t>(v[i]));
      } else {
        EXPECT_EQ(static_cast<std::int64_t>(out.get(i)), want) << dtype_name(to.t) << " " << v[i];
      }
    }
  }
  // 64-bit values survive exactly (they went through float64 before).
  const Tensor big = tensor_of(
      DType::u64, std::vector<std::uint64_t>{(std::uint64_t{1} << 60) + 1, ~std::uint64_t{0}});
  EXPECT_EQ(values<std::int64_t>(cast(big, DType::i64)),
            (std::vector<std::int64_t>{(std::int64_t{1} << 60) + 1, -1}));
}

TEST(Cast, IntegerToFloatRoundsOnce) {
  // 2^60 + 2^36 + 1 lies just above the midpoint of two floats (spacing 2^37 there):
  // it rounds up. Through float64 the +1 is lost first and the tie rounds to even.
  const std::int64_t v = (std::int64_t{1} << 60) + (std::int64_t{1} << 36) + 1;
  const Tensor f = cast(tensor_of(DType::i64, std::vector<std::int64_t>{v, -v}), DType::f32);
  EXPECT_EQ(f.data<float>()[0], std::ldexp(1.0f, 60) + std::ldexp(1.0f, 37));
  EXPECT_EQ(f.data<float>()[1], -(std::ldexp(1.0f, 60) + std::ldexp(1.0f, 37)));
  EXPECT_EQ(
      cast(tensor_of(DType::u64, std::vector<std::uint64_t>{~std::uint64_t{0}}), DType::f64).get(0),
      std::ldexp(1.0, 64));
}

TEST(Cast, FloatToIntegerTruncatesNaNIsZeroBeyondRangeSaturates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x =
      tensor_of(DType::f64, std::vector<double>{2.7, -2.7, -0.5, nan, 1e30, -1e30, 300.5});
  EXPECT_EQ(values<std::int32_t>(cast(x, DType::i32)),
            (std::vector<std::int32_t>{2, -2, 0, 0, std::numeric_limits<std::int32_t>::max(),
                                       std::numeric_limits<std::int32_t>::min(), 300}));
  EXPECT_EQ(values<std::uint8_t>(cast(x, DType::u8)),
            (std::vector<std::uint8_t>{2, 0, 0, 0, 255, 0, 255}));
  const Tensor h = cast(x, DType::f16);  // via f16: 300.5 -> 300.5 exact, then truncated
  EXPECT_EQ(values<std::int16_t>(cast(h, DType::i16))[6], 300);
}

TEST(Cast, BoolIsNonzero) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor f =
      tensor_of(DType::f32, std::vector<float>{0.f, -0.f, static_cast<float>(nan), 0.5f});
  EXPECT_EQ(values<std::uint8_t>(cast(f, DType::b1)), (std::vector<std::uint8_t>{0, 0, 1, 1}));
  const Tensor b = tensor_of(DType::b1, std::vector<std::uint8_t>{0, 2, 1});
  EXPECT_EQ(values<float>(cast(b, DType::f32)), (std::vector<float>{0, 1, 1}));
  EXPECT_EQ(values<std::int8_t>(cast(b, DType::i8)), (std::vector<std::int8_t>{0, 1, 1}));
  EXPECT_EQ(values<std::uint16_t>(cast(b, DType::f16)),
            (std::vector<std::uint16_t>{0, 0x3c00, 0x3c00}));
}

TEST(Cast, HalfAndBfloatUsePosencRounding) {
  std::mt19937_64 rng(2);
  std::normal_distribution<double> normal;
  std::vector<double> v(4000);
  for (double& x : v) x = normal(rng) * std::ldexp(1.0, static_cast<int>(normal(rng) * 8));
  const Tensor d = tensor_of(DType::f64, v);
  const Tensor h = cast(d, DType::f16), b = cast(d, DType::bf16);
  const Tensor f = cast(d, DType::f32);
  const Tensor fb = cast(f, DType::bf16), hf = cast(h, DType::f32);
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(h.data<std::uint16_t>()[i], double_to_half(v[i]));
    EXPECT_EQ(b.data<std::uint16_t>()[i], double_to_bf16(v[i]));
    EXPECT_EQ(fb.data<std::uint16_t>()[i], float_to_bf16(f.data<float>()[i]));
    EXPECT_EQ(hf.data<float>()[i], half_to_float(h.data<std::uint16_t>()[i]));
  }
}

TEST(Cast, SameDtypeCopiesBytesAndAstypeIsCast) {
  const std::uint32_t payload = 0x7fc01234;  // a NaN with a payload
  float f;
  std::memcpy(&f, &payload, 4);
  const Tensor x = tensor_of(DType::f32, std::vector<float>{f, 1.5f});
  const Tensor y = cast(x, DType::f32);
  EXPECT_EQ(std::memcmp(x.bytes(), y.bytes(), x.nbytes()), 0);
  const Tensor i = tensor_of(DType::i64, std::vector<std::int64_t>{300, -1});
  const Tensor a = i.astype(DType::u8), c = cast(i, DType::u8);
  EXPECT_EQ(std::memcmp(a.bytes(), c.bytes(), a.nbytes()), 0);
  EXPECT_EQ(cast(Tensor(DType::f32, {0, 3}), DType::i8).shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace posenc
