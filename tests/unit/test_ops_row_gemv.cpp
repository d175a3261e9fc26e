// One-row f32 and f64 products of attention's kernel (src/ops/row_gemv.hpp): against a
// float64 (for f64: long double) reference within a bound, and, where OpenBLAS runs its
// Haswell kernels (whose arithmetic posenc's own loops reproduce, so that decode gives
// the bits the BLAS call gave), bit for bit against cblas_sgemv and cblas_dgemv, for
// every shape class the loops take apart: d and dv with and without the 4- and 8-element
// first steps (f32) and the partial blocks of rows (f64), key counts with tails.
#include <cblas.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../src/ops/row_gemv.hpp"

namespace posenc::attention_detail {
namespace {

// Whether the BLAS is OpenBLAS running its Haswell (or Zen) kernels.
bool openblas_haswell() {
  using Fn = char* (*)();
  auto f = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!f) return false;
  const std::string core = f();
  return core == "Haswell" || core == "Zen" || core == "haswell" || core == "zen";
}

std::vector<float> randn(std::size_t n, std::mt19937& g) {
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (auto& x : v) x = dist(g);
  return v;
}

TEST(RowGemv, ScoresAndSumsMatchFloat64AndOpenBlasBits) {
  const bool bits = openblas_haswell();
  std::mt19937 gen(7);
  for (std::size_t d : {4u, 8u, 12u, 16u, 20u, 28u, 64u, 100u, 128u, 3u, 130u}) {
    for (std::size_t n : {1u, 3u, 4u, 7u, 8u, 9u, 13u, 16u, 31u, 64u}) {
      const std::vector<float> q = randn(d, gen), k = randn(n * d, gen), p = randn(n, gen),
                               o0 = randn(d, gen);
      const float alpha = 0.125f;
      std::vector<float> s(n), sb(n), o = o0, ob = o0;
      row_scores_f32(q.data(), k.data(), n, d, alpha, s.data());
      row_values_f32(p.data(), k.data(), n, d, o.data());
      for (std::size_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (std::size_t e = 0; e < d; ++e) {
          ref += static_cast<double>(q[e]) * k[j * d + e];
          mag += std::abs(static_cast<double>(q[e]) * k[j * d + e]);
        }
        EXPECT_NEAR(s[j], alpha * ref, 1e-6 * alpha * (mag + 1)) << "d " << d << " n " << n;
      }
      for (std::size_t c = 0; c < d; ++c) {
        double ref = o0[c], mag = std::abs(o0[c]);
        for (std::size_t j = 0; j < n; ++j) {
          ref += static_cast<double>(p[j]) * k[j * d + c];
          mag += std::abs(static_cast<double>(p[j]) * k[j * d + c]);
        }
        EXPECT_NEAR(o[c], ref, 1e-6 * (mag + 1)) << "d " << d << " n " << n;
      }
      if (!bits) continue;
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), static_cast<int>(d), alpha,
                  k.data(), static_cast<int>(d), q.data(), 1, 0.0f, sb.data(), 1);
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(n), static_cast<int>(d), 1.0f,
                  k.data(), static_cast<int>(d), p.data(), 1, 1.0f, ob.data(), 1);
      EXPECT_EQ(std::memcmp(s.data(), sb.data(), n * sizeof(float)), 0) << "d " << d << " n " << n;
      EXPECT_EQ(std::memcmp(o.data(), ob.data(), d * sizeof(float)), 0) << "d " << d << " n " << n;
    }
  }
}

TEST(RowGemv, Float64ScoresAndSumsMatchLongDoubleAndOpenBlasBits) {
  const bool bits = openblas_haswell();
  std::mt19937 gen(11);
  std::normal_distribution<double> dist;
  auto randn64 = [&](std::size_t n) {
    std::vector<double> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
  };
  const double u = std::ldexp(1.0, -53);
  for (std::size_t d : {4u, 8u, 12u, 16u, 20u, 28u, 36u, 64u, 68u, 100u, 128u, 200u, 3u, 130u}) {
    for (std::size_t n : {1u, 3u, 4u, 5u, 7u, 8u, 9u, 12u, 13u, 16u, 31u, 64u}) {
      const std::vector<double> q = randn64(d), k = randn64(n * d), p = randn64(n),
                                o0 = randn64(d);
      const double alpha = 0.0883883476483184;
      std::vector<double> s(n), sb(n), o = o0, ob = o0;
      row_scores_f64(q.data(), k.data(), n, d, alpha, s.data());
      row_values_f64(p.data(), k.data(), n, d, o.data());
      // Bounds: (terms + 2) units of roundoff of the sum of magnitudes.
      for (std::size_t j = 0; j < n; ++j) {
        long double ref = 0, mag = 0;
        for (std::size_t e = 0; e < d; ++e) {
          ref += static_cast<long double>(q[e]) * k[j * d + e];
          mag += std::abs(static_cast<long double>(q[e]) * k[j * d + e]);
        }
        EXPECT_NEAR(s[j], static_cast<double>(alpha * ref),
                    (d + 2) * u * alpha * static_cast<double>(mag))
            << "d " << d << " n " << n;
      }
      for (std::size_t c = 0; c < d; ++c) {
        long double ref = o0[c], mag = std::abs(o0[c]);
        for (std::size_t j = 0; j < n; ++j) {
          ref += static_cast<long double>(p[j]) * k[j * d + c];
          mag += std::abs(static_cast<long double>(p[j]) * k[j * d + c]);
        }
        EXPECT_NEAR(o[c], static_cast<double>(ref), (n + 2) * u * static_cast<double>(mag))
            << "d " << d << " n " << n;
      }
      if (!bits) continue;
      cblas_dgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), static_cast<int>(d), alpha,
                  k.data(), static_cast<int>(d), q.data(), 1, 0.0, sb.data(), 1);
      cblas_dgemv(CblasRowMajor, CblasTrans, static_cast<int>(n), static_cast<int>(d), 1.0,
                  k.data(), static_cast<int>(d), p.data(), 1, 1.0, ob.data(), 1);
      EXPECT_EQ(std::memcmp(s.data(), sb.data(), n * sizeof(double)), 0)
          << "d " << d << " n " << n;
      EXPECT_EQ(std::memcmp(o.data(), ob.data(), d * sizeof(double)), 0)
          << "d " << d << " n " << n;
    }
  }
}

// Decode takes the query heads of a KV group together (each key row loaded once for up to
// four heads): every head's scores the same bits as that head's alone.
template <class T, class Heads, class One>
void check_heads(Heads heads, One one, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<T> dist;
  for (std::size_t d : {4u, 12u, 20u, 64u, 100u, 128u, 3u}) {
    for (std::size_t n : {1u, 4u, 7u, 8u, 13u, 64u}) {
      for (std::size_t gs = 1; gs <= 4; ++gs) {
        std::vector<T> q(gs * d), k(n * d), s(gs * n), alone(n);
        for (auto& x : q) x = dist(gen);
        for (auto& x : k) x = dist(gen);
        const T* qp[4];
        T* sp[4];
        for (std::size_t i = 0; i < gs; ++i) qp[i] = q.data() + i * d, sp[i] = s.data() + i * n;
        heads(qp, gs, k.data(), n, d, T(0.125), sp);
        for (std::size_t i = 0; i < gs; ++i) {
          one(qp[i], k.data(), n, d, T(0.125), alone.data());
          EXPECT_EQ(std::memcmp(sp[i], alone.data(), n * sizeof(T)), 0)
              << "d " << d << " n " << n << " heads " << gs << " head " << i;
        }
      }
    }
  }
}

TEST(RowGemv, ScoresOfSeveralHeadsAreEachHeadsBits) {
  check_heads<double>(row_scores_heads_f64, row_scores_f64, 5);
  check_heads<float>(row_scores_heads_f32, row_scores_f32, 6);
}

// The softmax pass's AVX-512 loop against the lane loop it replaces where the CPU has
// AVX-512F, bit for bit: the exponentials and their sum, for rows with and without a
// tail of n % 16, scores from 0 down past the -87 where the result is zeroed (the
// subnormal results just above it included), -inf (masked keys), -0 and subnormal
// differences, several row maxima.
TEST(RowExp, Avx512LoopGivesTheLaneLoopsBits) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512F";
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> depth(-100.0f, 0.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {-0.0f, 0.0f, -inf, -87.0f, -86.99999f, -87.00001f, -87.3365f,
                            -88.0f, -103.9f, -1e-40f, -1e-30f, -0.5f, -1.0f, -0.34657359f};
  for (std::size_t n : {0, 1, 15, 16, 17, 100, 1024, 1037, 4096}) {
    for (float m : {0.0f, 3.25f, -2.5f, 80.0f}) {
      std::vector<float> s(n);
      for (std::size_t j = 0; j < n; ++j) {
        s[j] = j % 7 == 3 ? specials[j % std::size(specials)] : depth(gen);
        s[j] = s[j] == -inf ? s[j] : s[j] + m;  // scores <= m, s - m spread as above
        if (s[j] > m) s[j] = m;
      }
      std::vector<float> wide = s, lanes = s;
      const double sum_wide = row_exp_f32(wide.data(), n, m, true);
      const double sum_lanes = row_exp_f32(lanes.data(), n, m, false);
      SCOPED_TRACE("n " + std::to_string(n) + " m " + std::to_string(m));
      EXPECT_EQ(std::memcmp(&sum_wide, &sum_lanes, sizeof(double)), 0);
      for (std::size_t j = 0; j < n; ++j) {
        std::uint32_t a, b;
        std::memcpy(&a, &wide[j], 4);
        std::memcpy(&b, &lanes[j], 4);
        ASSERT_EQ(a, b) << "score " << j << " = " << s[j];
      }
    }
  }
}

}  // namespace
}  // namespace posenc::attention_detail
