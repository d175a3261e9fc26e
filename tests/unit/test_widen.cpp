// f16 and bf16 widened to float (ops/widen.hpp): every variant this CPU runs, on every
// one of the 65,536 bit patterns, at lengths and offsets that reach each vector loop's
// tail, bit for bit against the values written out here from the formats' definitions
// (sign, exponent, mantissa; NaN payloads kept, signalling ones left signalling), and
// whether a range holds Inf or NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../src/ops/widen.hpp"
#include "posenc/ops/cast.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The float of half bit pattern h, from IEEE 754's binary16 definition.
std::uint32_t half_reference(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return (sign << 31) | 0x7f800000u | (mant << 13);
  const double mag = exp == 0 ? std::ldexp(static_cast<double>(mant), -24)
                              : std::ldexp(1024.0 + mant, static_cast<int>(exp) - 25);
  return bits(static_cast<float>(sign ? -mag : mag));  // exact: 11 bits of mantissa
}

std::uint32_t bf16_reference(std::uint16_t h) { return static_cast<std::uint32_t>(h) << 16; }

struct Variant {
  const char* name;
  widen_detail::WidenFn f16, bf16;
  bool runs;
};

std::vector<Variant> variants(std::string& skipped) {
  __builtin_cpu_init();
  const std::vector<Variant> all = {
      {"base", &widen_detail::base::f16, &widen_detail::base::bf16, true},
      {"avx2", &widen_detail::avx2::f16, &widen_detail::avx2::bf16,
       __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")},
      {"avx512", &widen_detail::avx512::f16, &widen_detail::avx512::bf16,
       __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")},
  };
  std::vector<Variant> out;
  for (const Variant& v : all) {
    if (v.runs) {
      out.push_back(v);
    } else {
      skipped += std::string("SKIP: widen variant ") + v.name + " not tested: this CPU lacks it\n";
    }
  }
  return out;
}

std::vector<std::uint16_t> every_pattern() {
  std::vector<std::uint16_t> v(65536);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

void check_variant(widen_detail::WidenFn fn, std::uint32_t (*ref)(std::uint16_t),
                   const char* what) {
  const std::vector<std::uint16_t> all = every_pattern();
  std::vector<float> out(all.size());
  EXPECT_FALSE(fn(all.data(), out.data(), all.size())) << what << ": Inf and NaN not seen";
  for (std::size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(bits(out[i]), ref(all[i])) << what << " of 0x" << std::hex << all[i];
  }
  // Finite ranges say so: every pattern below the first Inf of each sign.
  EXPECT_TRUE(fn(all.data(), out.data(), 0x7b00)) << what;
  EXPECT_TRUE(fn(all.data() + 0x8000, out.data(), 0x7b00)) << what;
  // Lengths 0..40 from offsets 0..17: every tail of the 8- and 16-wide loops; the float
  // past the end stays untouched.
  // From below f16's Inf (0x7c00) and below bf16's (0x7f80): finite, Inf and NaN alike.
  for (const std::size_t start : {0x7bf0, 0x7f70}) {
    for (std::size_t off = 0; off < 18; ++off) {
      for (std::size_t n = 0; n <= 40; ++n) {
        std::vector<float> dst(n + 1, -7.0f);
        const std::uint16_t* src = all.data() + start + off;
        const bool finite = fn(src, dst.data(), n);
        bool want_finite = true;
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(bits(dst[i]), ref(src[i])) << what << " n " << n << " offset " << off;
          want_finite = want_finite && (ref(src[i]) & 0x7f800000u) != 0x7f800000u;
        }
        ASSERT_EQ(finite, want_finite) << what << " n " << n << " offset " << off;
        ASSERT_EQ(dst[n], -7.0f) << what << " wrote past n " << n;
      }
    }
  }
}

TEST(Widen, EveryVariantEveryPatternBitForBit) {
  std::string skipped;
  for (const Variant& v : variants(skipped)) {
    check_variant(v.f16, &half_reference, (std::string(v.name) + " f16").c_str());
    check_variant(v.bf16, &bf16_reference, (std::string(v.name) + " bf16").c_str());
  }
  if (!skipped.empty()) std::printf("%s", skipped.c_str());
}

TEST(Widen, CastUsesTheChosenVariantExactly) {
  const std::vector<std::uint16_t> all = every_pattern();
  for (const DType from : {DType::f16, DType::bf16}) {
    Tensor t(from, {all.size()});
    std::memcpy(t.bytes(), all.data(), all.size() * 2);
    const Tensor f = cast(t, DType::f32), d = cast(t, DType::f64);
    for (std::size_t i = 0; i < all.size(); ++i) {
      const std::uint32_t want =
          from == DType::f16 ? half_reference(all[i]) : bf16_reference(all[i]);
      ASSERT_EQ(bits(f.data<float>()[i]), want) << widen_detail::widen_isa() << " " << i;
      const double x = d.data<double>()[i];
      if (std::isnan(x)) {
        float back;
        std::memcpy(&back, &want, 4);
        ASSERT_TRUE(std::isnan(back)) << i;
      } else {
        ASSERT_EQ(x, static_cast<double>(f.data<float>()[i])) << i;
      }
    }
  }
}

}  // namespace
}  // namespace posenc
