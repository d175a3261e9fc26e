// f16 and bf16 widened to float (ops/widen.hpp): every variant this CPU runs, on every
// one of the 65,536 bit patterns, at lengths and offsets that reach each vector loop's
// tail, bit for bit against the values written out here from the formats' definitions
// (sign, exponent, mantissa; NaN payloads kept, signalling ones left signalling), and
// whether a range holds Inf or NaN. And floats and doubles narrowed to f16 and bf16:
// every variant against double_to_half / double_to_bf16 on every value of the target
// format, the midpoints between neighbours and the values an ulp or a float's rounding
// away from them (where rounding twice would go wrong), subnormals, overflow, NaN
// payloads and random bit patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
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
  widen_detail::NarrowF32Fn f32_f16, f32_bf16;
  widen_detail::NarrowF64Fn f64_f16, f64_bf16;
  bool runs;
};

std::vector<Variant> variants(std::string& skipped) {
  __builtin_cpu_init();
  namespace w = widen_detail;
  const std::vector<Variant> all = {
      {"base", &w::base::f16, &w::base::bf16, &w::base::f32_to_f16, &w::base::f32_to_bf16,
       &w::base::f64_to_f16, &w::base::f64_to_bf16, true},
      {"avx2", &w::avx2::f16, &w::avx2::bf16, &w::avx2::f32_to_f16, &w::avx2::f32_to_bf16,
       &w::avx2::f64_to_f16, &w::base::f64_to_bf16,
       __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")},
      {"avx512", &w::avx512::f16, &w::avx512::bf16, &w::avx512::f32_to_f16, &w::avx512::f32_to_bf16,
       &w::avx512::f64_to_f16, &w::avx512::f64_to_bf16,
       __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl")},
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

std::uint64_t bits64(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
double double_of(std::uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Doubles that test a rounding to f16 (bf16 when `bf16`): every finite value of the
/// format, each midpoint between neighbours and the doubles 1 ulp and 2^-30 relative
/// away from it (2^-30 is below half a float's ulp, so rounding through float first
/// would make those ties), the overflow threshold and its neighbours, subnormals of
/// double and float, zeros, infinities, NaNs with payloads, and random bit patterns.
std::vector<double> rounding_cases(bool bf16) {
  std::vector<double> v;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float a = bf16 ? bf16_to_float(static_cast<std::uint16_t>(h))
                         : half_to_float(static_cast<std::uint16_t>(h));
    const float b = bf16 ? bf16_to_float(static_cast<std::uint16_t>(h + 1))
                         : half_to_float(static_cast<std::uint16_t>(h + 1));
    v.push_back(a);
    if (!std::isfinite(a) || !std::isfinite(b) || std::signbit(a) != std::signbit(b)) continue;
    const double mid = (static_cast<double>(a) + b) / 2;  // exact
    for (const double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300 * mid),
                           mid * (1 + 0x1p-30), mid * (1 - 0x1p-30)}) {
      v.push_back(x);
    }
  }
  const double top = bf16 ? 0x1.fep127 : 65520.0;  // halfway past the largest finite
  for (const double x : {top, std::nextafter(top, 0.0), std::nextafter(top, 1e308), 1e300,
                         1e-300, 4.9e-324, 0x1p-126, 0x1p-149, 0x1.8p-150, 0x1p-150,
                         0x1p-25, 0x1.000001p-25, 0x1p-24, 0x1.8p-24, 0.0, HUGE_VAL,
                         double_of(0x7ff8000000000000), double_of(0x7ff0000000000001),
                         double_of(0x7ff4000000000000), double_of(0x7ff00000deadbeef)}) {
    v.push_back(x);
    v.push_back(-x);
  }
  std::mt19937_64 g(bf16 ? 7 : 11);
  for (int i = 0; i < 200000; ++i) v.push_back(double_of(g()));
  // Random doubles in the format's own range, where the roundings are not trivial.
  std::uniform_real_distribution<double> e(bf16 ? -140.0 : -26.0, bf16 ? 129.0 : 17.0);
  for (int i = 0; i < 200000; ++i) v.push_back((g() & 1 ? 1 : -1) * std::exp2(e(g)));
  return v;
}

void check_narrow(const Variant& nv, bool bf16) {
  const std::vector<double> d = rounding_cases(bf16);
  std::vector<float> f(d.size());
  for (std::size_t i = 0; i < d.size(); ++i) f[i] = static_cast<float>(d[i]);
  // Floats too: the random bit patterns, NaN payloads included.
  std::mt19937 g(3);
  for (int i = 0; i < 200000; ++i) f.push_back(float_of(static_cast<std::uint32_t>(g())));
  auto (*ref)(double) = bf16 ? &double_to_bf16 : &double_to_half;
  const std::string what = std::string(nv.name) + (bf16 ? " bf16" : " f16");
  std::vector<std::uint16_t> out(std::max(d.size(), f.size()));
  (bf16 ? nv.f64_bf16 : nv.f64_f16)(d.data(), out.data(), d.size());
  for (std::size_t i = 0; i < d.size(); ++i) {
    ASSERT_EQ(out[i], ref(d[i])) << what << " of double 0x" << std::hex << bits64(d[i]);
  }
  (bf16 ? nv.f32_bf16 : nv.f32_f16)(f.data(), out.data(), f.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(out[i], ref(f[i])) << what << " of float 0x" << std::hex << bits(f[i]);
  }
  // Lengths 0..40 from offsets 0..17: every tail; the element past the end untouched.
  for (std::size_t off = 0; off < 18; ++off) {
    for (std::size_t n = 0; n <= 40; ++n) {
      std::vector<std::uint16_t> a(n + 1, 0x1234), b(n + 1, 0x1234);
      (bf16 ? nv.f64_bf16 : nv.f64_f16)(d.data() + off, a.data(), n);
      (bf16 ? nv.f32_bf16 : nv.f32_f16)(f.data() + off, b.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(a[i], ref(d[off + i])) << what << " n " << n << " offset " << off;
        ASSERT_EQ(b[i], ref(f[off + i])) << what << " n " << n << " offset " << off;
      }
      ASSERT_EQ(a[n], 0x1234) << what << " wrote past n " << n;
      ASSERT_EQ(b[n], 0x1234) << what << " wrote past n " << n;
    }
  }
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

TEST(Narrow, EveryVariantRoundsOnceAsTheScalarCode) {
  std::string skipped;
  for (const Variant& v : variants(skipped)) {
    check_narrow(v, false);
    check_narrow(v, true);
  }
  if (!skipped.empty()) std::printf("%s", skipped.c_str());
}

TEST(Narrow, ScalarRoundingMatchesTheDefinition) {
  // double_to_half / double_to_bf16, the reference above, against the formats' own
  // values: each double rounds to the nearer of the two neighbours around it (even on a
  // tie), computed here from the neighbours' exact values.
  for (const bool bf16 : {false, true}) {
    std::mt19937_64 g(5);
    std::uniform_real_distribution<double> e(bf16 ? -126.0 : -14.0, bf16 ? 127.0 : 15.0);
    for (int i = 0; i < 100000; ++i) {
      const double x = std::exp2(e(g));
      const std::uint16_t h = bf16 ? double_to_bf16(x) : double_to_half(x);
      auto value = [&](std::uint16_t b) {
        return static_cast<double>(bf16 ? bf16_to_float(b) : half_to_float(b));
      };
      const double got = value(h);
      const double below = value(static_cast<std::uint16_t>(h - 1)),
                   above = value(static_cast<std::uint16_t>(h + 1));
      ASSERT_LE(std::abs(x - got), std::abs(x - below)) << x;
      ASSERT_LE(std::abs(x - got), std::abs(x - above)) << x;
      if (std::abs(x - got) == std::abs(x - below) || std::abs(x - got) == std::abs(x - above)) {
        ASSERT_EQ(h & 1, 0) << "tie not to even: " << x;
      }
    }
  }
}

TEST(Narrow, CastRoundsOnce) {
  const std::vector<double> d = rounding_cases(false);
  Tensor t(DType::f64, {d.size()});
  std::memcpy(t.bytes(), d.data(), d.size() * 8);
  const Tensor f32 = cast(t, DType::f32);
  for (const DType to : {DType::f16, DType::bf16}) {
    const Tensor a = cast(t, to), b = cast(f32, to);
    auto (*ref)(double) = to == DType::bf16 ? &double_to_bf16 : &double_to_half;
    for (std::size_t i = 0; i < d.size(); ++i) {
      ASSERT_EQ(a.data<std::uint16_t>()[i], ref(d[i])) << widen_detail::widen_isa() << " " << i;
      ASSERT_EQ(b.data<std::uint16_t>()[i], ref(f32.data<float>()[i])) << i;
    }
  }
}

}  // namespace
}  // namespace posenc
