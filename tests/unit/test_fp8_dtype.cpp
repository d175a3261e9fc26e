// The fp8 dtypes as tensor dtypes: names, casts of every code (fp8 -> f32/f64 is the
// widening the attention kernels read through), the non-finite scan and fp8 ULP distances. Values are
// checked against fp8_to_float / fp8_from_float (tests/python/test_fp8.py checks those
// against a reference written from the formats' definition).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "posenc/error.hpp"
#include "posenc/fp8.hpp"
#include "posenc/ops/cast.hpp"
#include "posenc/ops/compare.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

struct Case {
  DType dtype;
  Fp8Format format;
};
const Case kCases[] = {{DType::f8e4m3fn, Fp8Format::e4m3fn}, {DType::f8e5m2, Fp8Format::e5m2}};

Tensor all_codes(DType d) {
  Tensor t(d, {256});
  for (unsigned c = 0; c < 256; ++c) t.data<std::uint8_t>()[c] = static_cast<std::uint8_t>(c);
  return t;
}

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return std::signbit(a) == std::signbit(b);
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

TEST(Fp8Dtype, NamesAndAliases) {
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::f8e4m3fn);
  EXPECT_EQ(parse_dtype("e4m3fn"), DType::f8e4m3fn);
  EXPECT_EQ(parse_dtype("float8_e5m2"), DType::f8e5m2);
  EXPECT_EQ(parse_dtype("e5m2"), DType::f8e5m2);
  EXPECT_EQ(dtype_name(DType::f8e4m3fn), "float8_e4m3fn");
  EXPECT_EQ(dtype_size(DType::f8e5m2), 1u);
  EXPECT_TRUE(is_float(DType::f8e5m2) && is_fp8(DType::f8e5m2) && !is_integer(DType::f8e5m2));
  EXPECT_THROW(parse_dtype("float8_e4m3"), UsageError);
}

TEST(Fp8Dtype, CastsOfEveryCode) {
  for (const Case& k : kCases) {
    const Tensor codes = all_codes(k.dtype);
    const Tensor f = cast(codes, DType::f32), d = cast(codes, DType::f64);
    for (unsigned c = 0; c < 256; ++c) {
      const float want = fp8_to_float(static_cast<std::uint8_t>(c), k.format);
      EXPECT_TRUE(same_bits(f.data<float>()[c], want)) << c;
      EXPECT_TRUE(same_bits(static_cast<float>(d.data<double>()[c]), want)) << c;
      EXPECT_TRUE(same_bits(static_cast<float>(codes.get(c)), want)) << c;
    }
    // Back to fp8: every code but the NaNs is itself; NaNs become 0x7f with their sign.
    for (DType from : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      const Tensor back = cast(cast(codes, from), k.dtype);
      for (unsigned c = 0; c < 256; ++c) {
        const auto code = static_cast<std::uint8_t>(c);
        const std::uint8_t want = fp8_is_nan(code, k.format) ? (c & 0x80) | 0x7f : code;
        EXPECT_EQ(back.data<std::uint8_t>()[c], want) << dtype_name(from) << " " << c;
      }
    }
    // Tensor::set rounds as torch does (through float32).
    Tensor one(k.dtype, {1});
    one.set(0, 1e9);
    EXPECT_EQ(one.data<std::uint8_t>()[0], k.format == Fp8Format::e4m3fn ? 0x7f : 0x7c);
  }
}

TEST(Fp8Dtype, NonFiniteCodes) {
  for (const Case& k : kCases) {
    std::vector<std::uint8_t> finite;
    for (unsigned c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      if (std::isfinite(fp8_to_float(code, k.format))) finite.push_back(code);
    }
    EXPECT_EQ(finite.size(), k.format == Fp8Format::e4m3fn ? 254u : 248u);
    EXPECT_TRUE(all_codes(k.dtype).has_nonfinite());
    Tensor fin(k.dtype, {finite.size()});
    std::memcpy(fin.bytes(), finite.data(), finite.size());
    EXPECT_FALSE(fin.has_nonfinite());
  }
  // e5m2's -inf (0xfc) is let through where -inf is a mask value; e4m3fn has none.
  Tensor m(DType::f8e5m2, {2});
  m.data<std::uint8_t>()[0] = 0xfc;
  m.data<std::uint8_t>()[1] = 0x3c;
  EXPECT_TRUE(m.has_nonfinite());
  EXPECT_FALSE(m.has_nonfinite(/*allow_neg_inf=*/true));
}

TEST(Fp8Dtype, UlpDistancesCountCodes) {
  for (const Case& k : kCases) {
    const float a = fp8_to_float(0x38, k.format), b = fp8_to_float(0x3a, k.format);
    EXPECT_EQ(ulp_distance(a, b, k.dtype), 2u);
    const float tiny = fp8_to_float(0x01, k.format);
    EXPECT_EQ(ulp_distance(tiny, -tiny, k.dtype), 2u);
    EXPECT_EQ(ulp_distance(0.0, -0.0, k.dtype), 0u);
  }
  EXPECT_EQ(comparison_type(DType::f32, DType::f8e4m3fn), DType::f8e4m3fn);
  EXPECT_EQ(comparison_type(DType::f8e4m3fn, DType::f8e5m2), DType::f8e5m2);
}

}  // namespace
}  // namespace posenc
