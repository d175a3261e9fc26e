// RopeApplier / apply_rope against a direct float64 evaluation of the rotation, the
// kernel variants against each other, and the error classes.

#include <omp.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../../src/ops/rope_kernel.hpp"
#include "kernel_variants.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc {
namespace {

RopeFreqs make_freqs(RopeStyle style, int d, int r, double base = 10000.0, double af = 1.0) {
  RopeFreqs f;
  f.style = style;
  f.head_dim = d;
  f.rotary_dim = r;
  f.attention_factor = af;
  for (int i = 0; i < r / 2; ++i) f.inv_freq.push_back(std::pow(base, -2.0 * i / r));
  return f;
}

Tensor random_tensor(DType t, Shape s, unsigned seed) {
  Tensor x(t, std::move(s));
  std::mt19937 g(seed);
  std::normal_distribution<double> n(0, 1);
  for (std::size_t i = 0; i < x.numel(); ++i) x.set(i, n(g));
  return x;
}

// y[s, :] for a [S, D] tensor at positions p(s), written from the definition.
double expected(const Tensor& x, std::size_t s, std::size_t k, std::int64_t p,
                const RopeFreqs& f) {
  const std::size_t D = static_cast<std::size_t>(f.head_dim);
  const std::size_t R = static_cast<std::size_t>(f.rotary_dim), h = R / 2;
  if (k >= R) return x.get(s * D + k);
  std::size_t j, a, b;
  if (f.style == RopeStyle::neox) {
    j = k % h, a = j, b = j + h;
  } else {
    j = k / 2, a = 2 * j, b = 2 * j + 1;
  }
  const double th = static_cast<double>(p) * f.inv_freq[j];
  const double xa = x.get(s * D + a), xb = x.get(s * D + b);
  // Each product rounded on its own (volatile: no fused multiply-add, whatever the flags).
  const volatile double p1 = k == a ? xa * std::cos(th) : xb * std::cos(th);
  const volatile double p2 = k == a ? xb * std::sin(th) : xa * std::sin(th);
  const double v = k == a ? p1 - p2 : p1 + p2;
  return v * f.attention_factor;
}

TEST(RopeAxes, DefaultsAndErrors) {
  EXPECT_EQ(resolve_axes("", 2, "x").letters, "sd");
  EXPECT_EQ(resolve_axes("", 3, "x").letters, "bsd");
  EXPECT_EQ(resolve_axes("", 4, "x").letters, "bhsd");
  EXPECT_EQ(resolve_axes("bshd", 4, "x").index('h'), 2);
  EXPECT_THROW(resolve_axes("bxsd", 4, "x"), UsageError);
  EXPECT_THROW(resolve_axes("bssd", 4, "x"), UsageError);
  EXPECT_THROW(resolve_axes("bhs", 3, "x"), UsageError);
  EXPECT_THROW(resolve_axes("bsd", 4, "x"), InputError);
  EXPECT_THROW(resolve_axes("", 5, "x"), InputError);
}

TEST(RopeApply, MatchesDefinitionF64BothStylesPartial) {
  for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
    for (int r : {16, 10}) {
      const RopeFreqs f = make_freqs(st, 16, r, 10000.0, 1.25);
      const Tensor x = random_tensor(DType::f64, {7, 16}, 3);
      Positions pos;
      pos.start = 5;
      const Tensor y = apply_rope(x, Axes{"sd"}, f, pos, {}, DType::f64);
      for (std::size_t s = 0; s < 7; ++s) {
        for (std::size_t k = 0; k < 16; ++k) {
          EXPECT_NEAR(y.get(s * 16 + k), expected(x, s, k, 5 + static_cast<std::int64_t>(s), f),
                      1e-13);
        }
      }
    }
  }
}

TEST(RopeApply, InverseRoundTrip) {
  const RopeFreqs f = make_freqs(RopeStyle::gptj, 8, 8, 10000.0, 1.5);
  const Tensor x = random_tensor(DType::f64, {2, 9, 8}, 4);
  RopeApplyOptions inv;
  inv.inverse = true;
  const Tensor y = apply_rope(x, Axes{"bsd"}, f, {}, {}, DType::f64);
  const Tensor z = apply_rope(y, Axes{"bsd"}, f, {}, inv, DType::f64);
  for (std::size_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(z.get(i), x.get(i), 1e-14);
}

TEST(RopeApply, LayoutsAgree) {
  // The same data as bhsd, as bshd (transposed copy) and as bhds (d not last).
  const RopeFreqs f = make_freqs(RopeStyle::neox, 6, 4);
  const std::size_t B = 2, H = 3, S = 5, D = 6;
  const Tensor x = random_tensor(DType::f32, {B, H, S, D}, 5);
  Tensor xs(DType::f32, {B, S, H, D}), xd(DType::f32, {B, H, D, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t s = 0; s < S; ++s)
        for (std::size_t d = 0; d < D; ++d) {
          const double v = x.get(((b * H + h) * S + s) * D + d);
          xs.set(((b * S + s) * H + h) * D + d, v);
          xd.set(((b * H + h) * D + d) * S + s, v);
        }
  // Named defaults: GCC 12 warns (-Wmaybe-uninitialized, falsely) on three `{}` Positions
  // temporaries in one function.
  const Positions pos;
  const RopeApplyOptions apply;
  const Tensor y = apply_rope(x, Axes{"bhsd"}, f, pos, apply, DType::f32);
  const Tensor ys = apply_rope(xs, Axes{"bshd"}, f, pos, apply, DType::f32);
  const Tensor yd = apply_rope(xd, Axes{"bhds"}, f, pos, apply, DType::f32);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t s = 0; s < S; ++s)
        for (std::size_t d = 0; d < D; ++d) {
          const double v = y.get(((b * H + h) * S + s) * D + d);
          EXPECT_EQ(ys.get(((b * S + s) * H + h) * D + d), v);
          EXPECT_EQ(yd.get(((b * H + h) * D + d) * S + s), v);
        }
}

TEST(RopeApply, SlabsAndThreadsGiveSameBytes) {
  const RopeFreqs f = make_freqs(RopeStyle::gptj, 32, 24);
  const Tensor x = random_tensor(DType::f32, {40, 3, 32}, 6);  // s h d
  Positions pos;
  pos.cu_seqlens = {0, 7, 7, 30, 40};
  RopeApplier whole({40, 3, 32}, DType::f32, Axes{"shd"}, f, pos, {}, DType::f16, "x");
  Tensor a(DType::f16, {40, 3, 32}), b(DType::f16, {40, 3, 32});
  omp_set_num_threads(2);
  whole.rows(x.bytes(), a.bytes(), 0, 40);
  omp_set_num_threads(1);
  RopeApplier slabs({40, 3, 32}, DType::f32, Axes{"shd"}, f, pos, {}, DType::f16, "x");
  const std::size_t row = whole.in_row_bytes(), orow = whole.out_row_bytes();
  for (std::size_t first = 0; first < 40; first += 6) {
    const std::size_t n = std::min<std::size_t>(6, 40 - first);
    slabs.rows(x.bytes() + first * row, b.bytes() + first * orow, first, n);
  }
  omp_set_num_threads(2);
  EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), a.nbytes()), 0);
}

TEST(RopeApply, F16OutputIsCorrectlyRoundedInEveryKernelVariant) {
  // Random vectors with large and tiny magnitudes (f16 subnormals, overflow to Inf).
  const std::size_t N = 4096, D = 16;
  Tensor x(DType::f64, {N, D});
  std::mt19937 g(7);
  std::uniform_real_distribution<double> e(-30, 17), m(-1, 1);
  for (std::size_t i = 0; i < x.numel(); ++i) x.set(i, m(g) * std::exp2(e(g)));
  std::string skipped;
  const std::vector<test::KernelVariant> variants = test::selected_variants({}, skipped);
  std::cout << skipped;
  for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
    const RopeFreqs f = make_freqs(st, 16, 12);
    std::vector<double> table(N * 12);
    std::vector<std::int32_t> rowidx(N);
    for (std::size_t s = 0; s < N; ++s) {
      rowidx[s] = static_cast<std::int32_t>(s);
      for (std::size_t j = 0; j < 6; ++j) {
        table[s * 12 + j] = std::cos(static_cast<double>(s) * f.inv_freq[j]);
        table[s * 12 + 6 + j] = std::sin(static_cast<double>(s) * f.inv_freq[j]);
      }
    }
    rope_detail::KernelArgs a;
    a.src = x.bytes();
    a.n2 = N;
    a.st2 = D;
    a.t2 = 1;
    a.head_dim = D;
    a.rotary_dim = 12;
    a.rowidx = rowidx.data();
    a.table = table.data();
    a.block2 = 64;
    Tensor want(DType::f16, {N, D});
    for (std::size_t s = 0; s < N; ++s) {
      for (std::size_t k = 0; k < D; ++k) {
        // The kernel's own arithmetic order, in double, rounded once.
        want.set(s * D + k, expected(x, s, k, static_cast<std::int64_t>(s), f));
      }
    }
    for (const test::KernelVariant& v : variants) {
      for (bool stream : {false, true}) {
        Tensor y(DType::f16, {N, D});
        a.dst = y.bytes();
        a.stream = stream;
        v.find(DType::f64, DType::f16, Precision::f64, st)(a);
        // The same float64 operations as `expected` (no variant fuses multiply-adds), so
        // every element must match.
        std::size_t off = 0;
        for (std::size_t i = 0; i < y.numel(); ++i) {
          if (y.data<std::uint16_t>()[i] != want.data<std::uint16_t>()[i]) ++off;
        }
        EXPECT_EQ(off, 0u) << v.name << (st == RopeStyle::neox ? " neox" : " gptj")
                           << (stream ? " streamed" : "");
      }
    }
  }
}

TEST(RopeApply, RefusesBadInput) {
  const RopeFreqs f = make_freqs(RopeStyle::neox, 8, 8);
  Tensor x = random_tensor(DType::f32, {4, 8}, 8);
  x.set(13, std::nan(""));
  // Named values, not {} temporaries: GCC 12 warns (-Wmaybe-uninitialized) on an
  // aggregate of vectors built inside EXPECT_THROW's try block.
  const Positions none;
  const RopeApplyOptions plain;
  EXPECT_THROW(apply_rope(x, Axes{"sd"}, f, none, plain, DType::f32), InputError);
  RopeApplyOptions allow;
  allow.allow_nonfinite = true;
  EXPECT_NO_THROW(apply_rope(x, Axes{"sd"}, f, none, allow, DType::f32));
  Positions bad;
  bad.ids = {0, 1, 2};
  bad.ids_shape = {3};
  EXPECT_THROW(apply_rope(x, Axes{"sd"}, f, bad, allow, DType::f32), InputError);
  bad.ids = {0, 1, -2, 3};
  bad.ids_shape = {4};
  EXPECT_THROW(apply_rope(x, Axes{"sd"}, f, bad, allow, DType::f32), InputError);
  EXPECT_THROW(apply_rope(x, Axes{"sd"}, make_freqs(RopeStyle::neox, 6, 6), none, allow,
                          DType::f32),
               InputError);
  RopeApplyOptions grid;
  grid.grid_h = 3;
  grid.grid_w = 3;
  EXPECT_THROW(apply_rope(x, Axes{"sd"}, f, none, grid, DType::f32), InputError);
}

}  // namespace
}  // namespace posenc
