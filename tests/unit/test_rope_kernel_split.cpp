// The f16 -> f16 and bf16 -> bf16 RoPE path that computes in float32 from a split table
// (KernelArgs::split; the proof is in src/ops/rope_kernel_impl.inc) against the float64
// definition rounded once, computed here element by element (double products and sum,
// then double_to_half / double_to_bf16), on every kernel variant this CPU runs. The
// variants without AVX-512 ignore the split table, so they are held to the same bytes.
//
// Which path produced a group is made visible by giving the kernel a float64 table that
// differs from the one the split was made from: a group that falls back follows the
// float64 table, one that does not follows the split.

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

const std::vector<test::KernelVariant>& variants() {
  static const std::vector<test::KernelVariant> v = [] {
    std::string skipped;
    auto r = test::selected_variants({}, skipped);
    std::cout << skipped;
    return r;
  }();
  return v;
}

bool has_avx512(const std::string& name) { return name == "avx512" || name == "avx512fp16"; }

std::uint16_t round_to(DType t, double v) {
  return t == DType::f16 ? double_to_half(v) : double_to_bf16(v);
}
double widen(DType t, std::uint16_t h) {
  return t == DType::f16 ? half_to_float(h) : bf16_to_float(h);
}

/// The float64 definition, rounded once: n vectors of width d, vector v on table row
/// rowidx[v] (R/2 cos then R/2 sin).
std::vector<std::uint16_t> reference(DType t, const std::vector<std::uint16_t>& x, std::size_t n,
                                     std::size_t d, std::size_t r, RopeStyle st,
                                     const std::vector<double>& table,
                                     const std::vector<std::int32_t>& rowidx) {
  std::vector<std::uint16_t> y(x.size());
  const std::size_t half = r / 2;
  for (std::size_t v = 0; v < n; ++v) {
    const double* c = table.data() + static_cast<std::size_t>(rowidx[v]) * r;
    const std::uint16_t* xv = x.data() + v * d;
    for (std::size_t k = 0; k < d; ++k) {
      if (k >= r) {
        y[v * d + k] = round_to(t, widen(t, xv[k]));
        continue;
      }
      const bool nx = st == RopeStyle::neox;
      const std::size_t j = nx ? k % half : k / 2;
      const std::size_t ia = nx ? j : 2 * j, ib = nx ? j + half : 2 * j + 1;
      const double a = widen(t, xv[ia]), b = widen(t, xv[ib]);
      // Separate statements: each product and the sum rounded to double (no FMA).
      const double p = k == ia ? a * c[j] : b * c[j];
      const double q = k == ia ? b * c[half + j] : a * c[half + j];
      const double sum = k == ia ? p - q : p + q;
      y[v * d + k] = round_to(t, sum);
    }
  }
  return y;
}

struct Output {
  std::vector<std::uint16_t> y;
  bool bad = false;
};

Output run(const test::KernelVariant& kv, DType t, const std::vector<std::uint16_t>& x, std::size_t n,
        std::size_t d, std::size_t r, RopeStyle st, const std::vector<double>& table,
        const std::vector<float>* split, const std::vector<std::int32_t>& rowidx,
        bool stream = false) {
  // Room to align the output to 64 bytes, so that streamed stores are taken.
  std::vector<std::uint16_t> buf(x.size() + 64);
  auto* out = buf.data();
  while (reinterpret_cast<std::uintptr_t>(out) % 64 != 0) ++out;
  rope_detail::KernelArgs a;
  a.src = x.data();
  a.dst = out;
  a.n2 = n;
  a.st2 = static_cast<std::ptrdiff_t>(d);
  a.t2 = 1;
  a.head_dim = d;
  a.rotary_dim = r;
  a.rowidx = rowidx.data();
  a.table = table.data();
  a.split = split != nullptr ? split->data() : nullptr;
  a.block2 = 7;
  a.stream = stream;
  Output res;
  res.bad = kv.find(t, t, Precision::f64, st)(a);
  res.y.assign(out, out + x.size());
  return res;
}

std::vector<float> split_of(const std::vector<double>& table, std::size_t rows, std::size_t r,
                            RopeStyle st) {
  std::vector<float> s(rows * rope_detail::split_row_floats(r, st));
  EXPECT_TRUE(rope_detail::build_split_table(table.data(), rows, r, st, s.data()));
  return s;
}

/// Table rows: RoPE angles at many positions (with an attention factor on some), plus
/// rows that make exact ties and near ties (c = 1, s = +-2^-k times 1, 1 + 2^-40 or
/// 1 - 2^-40), c = s (total cancellation for equal inputs), and s = 0.
std::vector<double> make_table(std::size_t rows, std::size_t r, std::mt19937& g) {
  const std::size_t half = r / 2;
  std::vector<double> t(rows * r);
  std::uniform_int_distribution<int> pos(0, 1 << 20);
  for (std::size_t row = 0; row < rows; ++row) {
    double* c = t.data() + row * r;
    const std::size_t kind = row % 8;
    const double p = pos(g);
    const double af = kind == 1 ? 1.25 : (kind == 2 ? 1 / 1.25 : 1.0);
    for (std::size_t j = 0; j < half; ++j) {
      const double th = p * std::pow(1e4, -2.0 * static_cast<double>(j) / static_cast<double>(r));
      c[j] = af * std::cos(th);
      c[half + j] = af * std::sin(th);
      if (kind == 3 || kind == 4) {
        const double nudge = (row / 8) % 3 == 1 ? 1 + 0x1p-40 : ((row / 8) % 3 == 2 ? 1 - 0x1p-40 : 1.0);
        c[j] = 1.0;
        c[half + j] = (j % 2 ? -1.0 : 1.0) * std::ldexp(nudge, -1 - static_cast<int>((j + row) % 18));
      } else if (kind == 5) {
        c[j] = std::sqrt(0.5);
        c[half + j] = std::sqrt(0.5);
      } else if (kind == 6) {
        c[j] = 1.0;
        c[half + j] = 0.0;
      }
    }
  }
  return t;
}

/// Inputs of every kind the proof treats: magnitudes across the format's range,
/// subnormals, zeros, powers of two (exact ties with the tie rows), pairs set up to
/// cancel, and (for bf16) values past the 2^64 input limit.
std::vector<std::uint16_t> make_inputs(DType t, std::size_t n, std::size_t d, std::mt19937& g) {
  std::vector<std::uint16_t> x(n * d);
  std::uniform_real_distribution<double> m(-1, 1);
  std::uniform_int_distribution<int> kind(0, 9);
  const double emin = t == DType::f16 ? -26 : -130, emax = t == DType::f16 ? 16 : 100;
  std::uniform_real_distribution<double> e(emin, emax), enarrow(-6, 4);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const int k = kind(g);
    double v;
    if (k == 0) {
      v = 0.0;
    } else if (k == 1) {
      v = std::ldexp(m(g) < 0 ? -1.0 : 1.0, static_cast<int>(enarrow(g)));
    } else if (k <= 4) {
      v = m(g) * std::exp2(e(g));
    } else {
      v = m(g) * std::exp2(enarrow(g));
    }
    x[i] = round_to(t, v);
  }
  // Some vectors whose pairs are equal or nearly so: with the c = s rows they cancel.
  for (std::size_t v = 0; v < n; v += 5) {
    for (std::size_t k = 0; k + 1 < d; k += 2) {
      x[v * d + k + 1] = static_cast<std::uint16_t>(x[v * d + k] + (k % 4 == 0 ? 0 : 1));
    }
  }
  // And vectors whose halves are equal (the neox pairs (j, j + D/2) when R = D).
  for (std::size_t v = 1; v < n; v += 5) {
    for (std::size_t k = 0; k < d / 2; ++k) x[v * d + d / 2 + k] = x[v * d + k];
  }
  return x;
}

std::size_t mismatches(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

TEST(RopeKernelSplit, SplitTableHoldsTheFloat32Pairs) {
  const std::size_t R = 8, half = 4;
  std::vector<double> t = {0.1, -0.7, 1.0, 3.9, 0.3, -0.2, 0.0, 1e-30};
  for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
    std::vector<float> s(rope_detail::split_row_floats(R, st));
    ASSERT_TRUE(rope_detail::build_split_table(t.data(), 1, R, st, s.data()));
    for (std::size_t j = 0; j < R; ++j) {
      const auto v1 = static_cast<float>(t[j]);
      const auto v2 = static_cast<float>(t[j] - static_cast<double>(v1));
      const bool sine = j >= half;
      const std::size_t k = sine ? j - half : j;
      if (st == RopeStyle::neox) {
        EXPECT_EQ(s[j], v1);
        EXPECT_EQ(s[R + j], v2);
      } else {
        const std::size_t at = (sine ? R : 0) + 2 * k;
        EXPECT_EQ(s[at], v1);
        EXPECT_EQ(s[at + 1], sine ? -v1 : v1);
        EXPECT_EQ(s[2 * R + at], v2);
        EXPECT_EQ(s[2 * R + at + 1], sine ? -v2 : v2);
      }
      // The pair holds v to 2^-48 relative.
      EXPECT_LE(std::fabs(t[j] - static_cast<double>(v1) - static_cast<double>(v2)),
                0x1p-48 * std::fabs(t[j]));
    }
  }
  // Out of the range the proof covers: refused.
  for (double v : {4.5, -5.0, static_cast<double>(INFINITY), static_cast<double>(NAN)}) {
    std::vector<double> u = t;
    u[3] = v;
    std::vector<float> s(rope_detail::split_row_floats(R, RopeStyle::neox));
    EXPECT_FALSE(rope_detail::build_split_table(u.data(), 1, R, RopeStyle::neox, s.data())) << v;
  }
}

TEST(RopeKernelSplit, MatchesFloat64DefinitionOnEveryVariant) {
  struct Shape {
    std::size_t d, r;
  };
  for (DType t : {DType::f16, DType::bf16}) {
    for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
      for (const Shape sh : {Shape{128, 128}, Shape{64, 32}, Shape{48, 32}, Shape{96, 64}}) {
        std::mt19937 g(static_cast<unsigned>(sh.d * 31 + sh.r + (t == DType::f16 ? 0 : 7) +
                                             (st == RopeStyle::neox ? 0 : 3)));
        const std::size_t n = 3000, rows = 96;
        const std::vector<double> table = make_table(rows, sh.r, g);
        const std::vector<float> split = split_of(table, rows, sh.r, st);
        std::vector<std::int32_t> rowidx(n);
        std::uniform_int_distribution<int> rr(0, static_cast<int>(rows) - 1);
        for (auto& i : rowidx) i = rr(g);
        const std::vector<std::uint16_t> x = make_inputs(t, n, sh.d, g);
        const std::vector<std::uint16_t> want = reference(t, x, n, sh.d, sh.r, st, table, rowidx);
        for (const auto& kv : variants()) {
          for (bool stream : {false, true}) {
            const std::string what = std::string(kv.name) + " " + std::string(dtype_name(t)) +
                                     (st == RopeStyle::neox ? " neox" : " gptj") + " D=" +
                                     std::to_string(sh.d) + " R=" + std::to_string(sh.r) +
                                     (stream ? " stream" : "");
            const Output with = run(kv, t, x, n, sh.d, sh.r, st, table, &split, rowidx, stream);
            EXPECT_FALSE(with.bad) << what;
            EXPECT_EQ(mismatches(with.y, want), 0u) << what;
            const Output without = run(kv, t, x, n, sh.d, sh.r, st, table, nullptr, rowidx, stream);
            EXPECT_EQ(mismatches(without.y, want), 0u) << what << " (no split table)";
          }
        }
      }
    }
  }
}

/// Runs the AVX-512 variants with a float64 table of zeros behind a real split table:
/// groups that fall back come out as zeros, groups that do not follow the split.
/// Returns, per group of 16 pairs (neox) or 8 pairs (gptj), whether it fell back.
std::vector<bool> fell_back(const test::KernelVariant& kv, DType t,
                            const std::vector<std::uint16_t>& x, std::size_t n, std::size_t d,
                            std::size_t r, RopeStyle st, const std::vector<double>& table,
                            const std::vector<std::int32_t>& rowidx, std::size_t& wrong) {
  const std::size_t rows = table.size() / r;
  const std::vector<float> split = split_of(table, rows, r, st);
  const std::vector<double> zeros(table.size(), 0.0);
  const Output got = run(kv, t, x, n, d, r, st, zeros, &split, rowidx);
  const std::vector<std::uint16_t> want = reference(t, x, n, d, r, st, table, rowidx);
  const std::size_t half = r / 2;
  const std::size_t pairs = st == RopeStyle::neox ? 16 : 8;
  std::vector<bool> fb;
  wrong = 0;
  for (std::size_t v = 0; v < n; ++v) {
    for (std::size_t j0 = 0; j0 < half; j0 += pairs) {
      bool zero = true, exact = true;
      for (std::size_t j = j0; j < j0 + pairs; ++j) {
        for (std::size_t k : st == RopeStyle::neox ? std::vector<std::size_t>{j, j + half}
                                                   : std::vector<std::size_t>{2 * j, 2 * j + 1}) {
          const std::size_t i = v * d + k;
          zero = zero && (got.y[i] & 0x7fff) == 0;
          exact = exact && got.y[i] == want[i];
        }
      }
      fb.push_back(zero && !exact);
      // A group that did not fall back must be the float64 result exactly.
      wrong += !zero && !exact;
    }
  }
  return fb;
}

TEST(RopeKernelSplit, UndecidedGroupsFallBackAndTheRestDoNot) {
  std::size_t tested = 0;
  for (const auto& kv : variants()) {
    if (!has_avx512(kv.name)) continue;
    ++tested;
    for (DType t : {DType::f16, DType::bf16}) {
      for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
        const std::size_t d = 64, r = 64, half = 32, n = 256;
        const std::string what = std::string(kv.name) + " " + std::string(dtype_name(t)) +
                                 (st == RopeStyle::neox ? " neox" : " gptj");
        // Ordinary data on real RoPE rows: nearly every group takes the float32 path.
        std::mt19937 g(5);
        std::vector<double> table(64 * r);
        for (std::size_t row = 0; row < 64; ++row) {
          for (std::size_t j = 0; j < half; ++j) {
            const double th = static_cast<double>(row * 37 + 1) * std::pow(1e4, -2.0 * j / r);
            table[row * r + j] = std::cos(th);
            table[row * r + half + j] = std::sin(th);
          }
        }
        std::vector<std::int32_t> rowidx(n);
        for (std::size_t v = 0; v < n; ++v) rowidx[v] = static_cast<std::int32_t>(v % 64);
        std::vector<std::uint16_t> x(n * d);
        std::normal_distribution<double> nd(0, 1);
        for (auto& h : x) h = round_to(t, nd(g));
        std::size_t wrong = 0;
        std::vector<bool> fb = fell_back(kv, t, x, n, d, r, st, table, rowidx, wrong);
        std::size_t nfb = 0;
        for (bool b : fb) nfb += b;
        EXPECT_EQ(wrong, 0u) << what;
        EXPECT_LT(nfb * 10, fb.size()) << what << ": " << nfb << " of " << fb.size()
                                       << " groups fell back";

        // Exact ties (c = 1, s = 2^-k, power-of-two inputs): the float32 value sits on a
        // rounding boundary, every group must fall back and be rounded from float64
        // (the nudged rows, 2^-40 off the tie, would round the wrong way otherwise).
        for (double nudge : {1.0, 1 + 0x1p-40, 1 - 0x1p-40}) {
          std::vector<double> tie(r);
          for (std::size_t j = 0; j < half; ++j) {
            tie[j] = 1.0;
            tie[half + j] = std::ldexp(nudge, t == DType::f16 ? -11 : -8);
          }
          std::vector<std::int32_t> zero_rows(4, 0);
          std::vector<std::uint16_t> xt(4 * d, round_to(t, 1.0));
          fb = fell_back(kv, t, xt, 4, d, r, st, tie, zero_rows, wrong);
          EXPECT_EQ(wrong, 0u) << what << " ties";
          for (std::size_t i = 0; i < fb.size(); ++i) EXPECT_TRUE(fb[i]) << what << " tie group " << i;
        }

        // Results in the f16 subnormal range (a 2^-23, b 2^-24, s = 1/2 nudged: 2.5 ulps of
        // the smallest subnormal, just above the tie) and total cancellation (equal
        // inputs, c = s): below the floor, so they fall back.
        if (t == DType::f16) {
          std::vector<double> sub(r);
          for (std::size_t j = 0; j < half; ++j) {
            sub[j] = 1.0;
            sub[half + j] = -0.5 * (1 + 0x1p-40);
          }
          std::vector<std::int32_t> one(1, 0);
          std::vector<std::uint16_t> xs(d);
          for (std::size_t k = 0; k < d; ++k) {
            const bool first = st == RopeStyle::neox ? k < half : k % 2 == 0;
            xs[k] = double_to_half(first ? 0x1p-23 : 0x1p-24);
          }
          fb = fell_back(kv, t, xs, 1, d, r, st, sub, one, wrong);
          EXPECT_EQ(wrong, 0u) << what << " subnormal";
          for (std::size_t i = 0; i < fb.size(); ++i) EXPECT_TRUE(fb[i]) << what << " subnormal group " << i;
        }
        std::vector<double> same(r, std::sqrt(0.5));
        std::vector<std::int32_t> one(1, 0);
        std::vector<std::uint16_t> xe(d, round_to(t, 0.75));
        fb = fell_back(kv, t, xe, 1, d, r, st, same, one, wrong);
        EXPECT_EQ(wrong, 0u) << what << " cancellation";
        // Only the a c - b s lanes cancel; their groups fall back (gptj: every group).
        std::size_t ncancel = 0;
        for (bool b : fb) ncancel += b;
        EXPECT_EQ(ncancel, fb.size()) << what << " cancellation";
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "SKIP: no AVX-512 kernel variant selected or available";
}

TEST(RopeKernelSplit, NonFiniteInputsReportAndMatchTheFloat64Bytes) {
  const std::size_t d = 64, r = 32, n = 8;
  std::vector<double> table(r);
  for (std::size_t j = 0; j < r / 2; ++j) {
    table[j] = std::cos(0.3 * static_cast<double>(j + 1));
    table[r / 2 + j] = std::sin(0.3 * static_cast<double>(j + 1));
  }
  std::vector<std::int32_t> rowidx(n, 0);
  for (DType t : {DType::f16, DType::bf16}) {
    for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
      const std::vector<float> split = split_of(table, 1, r, st);
      for (std::size_t at : {std::size_t{0}, std::size_t{5}, r - 1, r, d - 1, 3 * d + 17}) {
        // Inf, NaN, a NaN with a payload, and (bf16) a value past the 2^64 input limit.
        for (std::uint16_t bits : {std::uint16_t(t == DType::f16 ? 0x7c00 : 0x7f80),
                                   std::uint16_t(t == DType::f16 ? 0xfe00 : 0xffc0),
                                   std::uint16_t(t == DType::f16 ? 0x7d23 : 0x7f91),
                                   std::uint16_t(t == DType::f16 ? 0x7bff : 0x6000)}) {
          std::vector<std::uint16_t> x(n * d, round_to(t, 0.375));
          x[at] = bits;
          const bool finite = (bits & 0x7fff) < (t == DType::f16 ? 0x7c00 : 0x7f80);
          for (const auto& kv : variants()) {
            // Today's bytes of this variant: the float64 path, without the split table.
            const Output ref = run(kv, t, x, n, d, r, st, table, nullptr, rowidx);
            EXPECT_EQ(ref.bad, !finite);
            const Output got = run(kv, t, x, n, d, r, st, table, &split, rowidx);
            const std::string what = std::string(kv.name) + " " + std::string(dtype_name(t)) +
                                     (st == RopeStyle::neox ? " neox" : " gptj") + " element " +
                                     std::to_string(at) + " bits " + std::to_string(bits);
            EXPECT_EQ(got.bad, !finite) << what;
            EXPECT_EQ(mismatches(got.y, ref.y), 0u) << what;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace posenc
