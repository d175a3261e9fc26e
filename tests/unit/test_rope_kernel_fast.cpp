// The AVX-512 RoPE fast paths (f32/f16/bf16 data, float64 arithmetic, widths that are
// multiples of 16; with and without AVX512-FP16 conversions) against the float64
// definition rounded once and against the base kernel, byte for byte: streamed and plain
// stores, aligned and unaligned outputs, partial rotary, both styles, f16 ties, --precision
// f32 against the base kernel, and NaN/Inf detection in the rotated part and the tail.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/rope_kernel.hpp"
#include "kernel_variants.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

struct Case {
  std::size_t d, r;
};

/// Bytes with room to place data at a chosen offset from a 64-byte boundary.
struct Placed {
  std::vector<std::uint8_t> raw;
  std::byte* p;
  Placed(std::size_t bytes, std::size_t misalign) : raw(bytes + 128) {
    const auto a = reinterpret_cast<std::uintptr_t>(raw.data());
    p = reinterpret_cast<std::byte*>(raw.data() + ((64 - a % 64) % 64) + misalign);
  }
};

using Find = test::FindKernel;

/// Why AVX-512 variants are left out of this run ("SKIP: ..." lines; empty if none is).
const std::string& fast_skipped() {
  static const std::string why = [] {
    std::string s;
    test::selected_variants({"avx512", "avx512fp16"}, s);
    return s;
  }();
  return why;
}

/// The AVX-512 variants this run tests, by name (the others are reported once on stdout).
const std::vector<std::pair<const char*, Find>>& fast_variants() {
  static const std::vector<std::pair<const char*, Find>> v = [] {
    std::string skipped;
    std::vector<std::pair<const char*, Find>> r;
    for (const auto& k : test::selected_variants({"avx512", "avx512fp16"}, skipped)) {
      r.emplace_back(k.name, k.find);
    }
    std::cout << skipped;
    return r;
  }();
  return v;
}

/// Arguments for n contiguous vectors of width d in x, vector v on table row rowidx[v].
rope_detail::KernelArgs flat_args(const Tensor& x, std::size_t n, std::size_t d, std::size_t r,
                                  const std::vector<std::int32_t>& rowidx, const void* table,
                                  std::size_t block) {
  rope_detail::KernelArgs a;
  a.src = x.bytes();
  a.n2 = n;
  a.st2 = static_cast<std::ptrdiff_t>(d);
  a.t2 = 1;
  a.head_dim = d;
  a.rotary_dim = r;
  a.rowidx = rowidx.data();
  a.table = table;
  a.block2 = block;
  return a;
}

TEST(RopeKernelFast, MatchesDefinitionAndBaseKernel) {
  if (fast_variants().empty()) GTEST_SKIP() << fast_skipped();
  const std::size_t S = 37, H = 3;
  for (const Case cs : {Case{128, 128}, Case{64, 32}, Case{48, 32}, Case{32, 16}}) {
    const std::size_t D = cs.d, R = cs.r, half = R / 2;
    // Table rows for S positions; heads share a row (bshd-like loop: s outer, h inner).
    std::vector<double> table(S * R);
    std::vector<std::int32_t> rowidx(S);
    for (std::size_t s = 0; s < S; ++s) {
      rowidx[s] = static_cast<std::int32_t>(S - 1 - s);  // rows out of order on purpose
      for (std::size_t j = 0; j < half; ++j) {
        const double th = static_cast<double>(S - 1 - s) * 3.1 * std::pow(1e4, -2.0 * j / R);
        table[(S - 1 - s) * R + j] = 1.25 * std::cos(th);
        table[(S - 1 - s) * R + half + j] = 1.25 * std::sin(th);
      }
    }
    for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
      for (DType in : {DType::f32, DType::f16, DType::bf16}) {
        // Magnitudes across the f16 range, its subnormals and overflow; for bf16 inputs
        // across the bf16 range, into the f32 subnormals and up to f16/f32 overflow.
        Tensor x(in, {S, H, D});
        std::mt19937 g(static_cast<unsigned>(D * 7 + R));
        const bool wide = in == DType::bf16;
        std::uniform_real_distribution<double> e(wide ? -140 : -26, wide ? 128 : 16), m(-1, 1);
        for (std::size_t i = 0; i < x.numel(); ++i) x.set(i, m(g) * std::exp2(e(g)));
        for (DType out : {DType::f32, DType::f16, DType::bf16}) {
          Tensor want(out, {S, H, D});
          for (std::size_t s = 0; s < S; ++s) {
            const double* c = table.data() + static_cast<std::size_t>(rowidx[s]) * R;
            for (std::size_t h = 0; h < H; ++h) {
              const std::size_t o = (s * H + h) * D;
              for (std::size_t k = 0; k < D; ++k) {
                double v = x.get(o + k);
                if (k < R) {
                  const bool nx = st == RopeStyle::neox;
                  const std::size_t j = nx ? k % half : k / 2;
                  const std::size_t ia = nx ? j : 2 * j, ib = nx ? j + half : 2 * j + 1;
                  const double xa = x.get(o + ia), xb = x.get(o + ib);
                  v = k == ia ? xa * c[j] - xb * c[half + j] : xb * c[j] + xa * c[half + j];
                }
                want.set(o + k, v);
              }
            }
          }
          rope_detail::KernelArgs a;
          a.src = x.bytes();
          a.n1 = S;
          a.n2 = H;
          a.st1 = static_cast<std::ptrdiff_t>(H * D);
          a.st2 = static_cast<std::ptrdiff_t>(D);
          a.t1 = 1;
          a.head_dim = D;
          a.rotary_dim = R;
          a.rowidx = rowidx.data();
          a.table = table.data();
          a.block2 = H;
          const std::size_t nbytes = want.nbytes();
          Placed ref(nbytes, 0);
          a.dst = ref.p;
          rope_detail::base::find_kernel(in, out, Precision::f64, st)(a);
          for (const auto& [isa, find] : fast_variants()) {
            for (bool stream : {false, true}) {
              for (std::size_t mis : {0u, 4u}) {
                Placed y(nbytes, mis);
                a.dst = y.p;
                a.stream = stream;
                EXPECT_FALSE(find(in, out, Precision::f64, st)(a));
                const std::string what =
                    std::string(isa) + " D=" + std::to_string(D) + " R=" + std::to_string(R) +
                    (st == RopeStyle::neox ? " neox " : " gptj ") + std::string(dtype_name(in)) +
                    "->" + std::string(dtype_name(out)) + (stream ? " stream" : "") +
                    " misalign " + std::to_string(mis);
                EXPECT_EQ(std::memcmp(y.p, want.bytes(), nbytes), 0) << what;
                EXPECT_EQ(std::memcmp(y.p, ref.p, nbytes), 0) << what;
              }
            }
          }
          // --precision f32 (f32 table and arithmetic): the same bytes as the base kernel.
          const std::vector<float> table32(table.begin(), table.end());
          a.table = table32.data();
          a.stream = false;
          a.dst = ref.p;
          rope_detail::base::find_kernel(in, out, Precision::f32, st)(a);
          for (const auto& [isa, find] : fast_variants()) {
            for (bool stream : {false, true}) {
              Placed y(nbytes, 0);
              a.dst = y.p;
              a.stream = stream;
              EXPECT_FALSE(find(in, out, Precision::f32, st)(a));
              EXPECT_EQ(std::memcmp(y.p, ref.p, nbytes), 0)
                  << isa << " f32 precision D=" << D << " R=" << R << " stream " << stream;
            }
          }
          a.table = table.data();
        }
      }
    }
  }
}

TEST(RopeKernelFast, RoundsF16TiesAndNearTiesOnce) {
  // c = 1 and s = ±2^-k (k = 11..18, times 1 or 1 + 2^-40) put x0·c - x1·s on, just
  // above and just below the midpoints between f16 values: a second rounding (f64 to
  // f32 to f16) would move some of them.
  if (fast_variants().empty()) GTEST_SKIP() << fast_skipped();
  const std::size_t S = 16, D = 32, R = 32, half = R / 2, N = 64;
  std::vector<double> table(S * R);
  std::vector<std::int32_t> rowidx(N);
  for (std::size_t r = 0; r < S; ++r) {
    for (std::size_t j = 0; j < half; ++j) {
      const double nudge = r % 4 == 1 ? 1 + 0x1p-40 : (r % 4 == 2 ? 1 - 0x1p-40 : 1.0);
      table[r * R + j] = 1.0;
      table[r * R + half + j] =
          (j % 2 ? -1.0 : 1.0) * std::ldexp(nudge, -11 - static_cast<int>((j + r) % 8));
    }
  }
  for (std::size_t v = 0; v < N; ++v) rowidx[v] = static_cast<std::int32_t>(v % S);
  std::mt19937 g(7);
  std::uniform_int_distribution<int> mant(0, 1023), ex(-3, 3), sign(0, 1);
  for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
    Tensor x(DType::f16, {N, D});
    for (std::size_t i = 0; i < x.numel(); ++i) {
      // Half of the values are powers of two, so many sums fall exactly on a midpoint.
      const int m = sign(g) ? 0 : mant(g);
      x.set(i, (sign(g) ? -1.0 : 1.0) * std::ldexp(1.0 + m / 1024.0, ex(g)));
    }
    Tensor want(DType::f16, {N, D});
    for (std::size_t v = 0; v < N; ++v) {
      const double* c = table.data() + static_cast<std::size_t>(rowidx[v]) * R;
      for (std::size_t k = 0; k < D; ++k) {
        const bool nx = st == RopeStyle::neox;
        const std::size_t j = nx ? k % half : k / 2;
        const std::size_t ia = nx ? j : 2 * j, ib = nx ? j + half : 2 * j + 1;
        const double xa = x.get(v * D + ia), xb = x.get(v * D + ib);
        want.set(v * D + k, k == ia ? xa * c[j] - xb * c[half + j] : xb * c[j] + xa * c[half + j]);
      }
    }
    rope_detail::KernelArgs a = flat_args(x, N, D, R, rowidx, table.data(), 8);
    for (const auto& [isa, find] : fast_variants()) {
      Tensor y(DType::f16, {N, D});
      a.dst = y.bytes();
      EXPECT_FALSE(find(DType::f16, DType::f16, Precision::f64, st)(a));
      std::size_t off = 0;
      for (std::size_t i = 0; i < y.numel(); ++i) {
        off += y.data<std::uint16_t>()[i] != want.data<std::uint16_t>()[i];
      }
      EXPECT_EQ(off, 0u) << isa << (st == RopeStyle::neox ? " neox" : " gptj");
    }
  }
}

TEST(RopeKernelFast, ReportsNonFiniteInRotatedPartAndTail) {
  if (fast_variants().empty()) GTEST_SKIP() << fast_skipped();
  const std::size_t S = 4, D = 64, R = 32;
  std::vector<double> table(S * R, 0.5);
  std::vector<std::int32_t> rowidx(S, 0);
  for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
    for (DType in : {DType::f32, DType::f16, DType::bf16}) {
      for (std::size_t bad : {std::size_t{0}, std::size_t{1}, R - 1, R, D - 1, 3 * D + 17}) {
        for (double v : {INFINITY, -INFINITY, NAN}) {
          Tensor x(in, {S, D});
          for (std::size_t i = 0; i < x.numel(); ++i) x.set(i, 0.25);
          Tensor y(in, {S, D});
          rope_detail::KernelArgs a = flat_args(x, S, D, R, rowidx, table.data(), 2);
          a.dst = y.bytes();
          const std::vector<float> table32(table.begin(), table.end());
          for (Precision p : {Precision::f64, Precision::f32}) {
            a.table = p == Precision::f64 ? static_cast<const void*>(table.data())
                                          : static_cast<const void*>(table32.data());
            for (const auto& [isa, find] : fast_variants()) {
              auto k = find(in, in, p, st);
              x.set(bad, 0.25);
              EXPECT_FALSE(k(a)) << isa;
              x.set(bad, v);
              EXPECT_TRUE(k(a)) << isa << " element " << bad;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace posenc
