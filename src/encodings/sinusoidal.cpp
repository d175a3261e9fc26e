// Vaswani sinusoidal tables and the vectorisable sin/cos kernel.

#include "posenc/encodings/sinusoidal.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

// Above this magnitude the quotient n = round(a * 2/pi) may exceed 2^20 and n * kPio2Hi
// would no longer be exact; libm takes over there.
constexpr double kFastLimit = 1.5e6;
constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
// pi/2 split as 33 + 33 + 53 bits (fdlibm's pio2_1, pio2_2, pio2_2t): with |n| <= 2^20
// both n * kPio2Hi and n * kPio2Mid are exact, and a - n * kPio2Hi is exact by
// Sterbenz's lemma, so the reduced argument carries only the final rounding errors.
constexpr double kPio2Hi = 0x1.921fb544p+0;
constexpr double kPio2Mid = 0x1.0b4611a6p-34;
constexpr double kPio2Lo = 0x1.3198a2e037073p-69;
// 1.5 * 2^52: adding and subtracting it rounds to the nearest integer (ties to even).
constexpr double kRoundMagic = 0x1.8p52;

// fdlibm __kernel_sin / __kernel_cos coefficients, |x| <= pi/4 (error < 1 ulp).
constexpr double kS1 = -1.66666666666666324348e-01, kS2 = 8.33333333332248946124e-03,
                 kS3 = -1.98412698298579493134e-04, kS4 = 2.75573137070700676789e-06,
                 kS5 = -2.50507602534068634195e-08, kS6 = 1.58969099521155010221e-10;
constexpr double kC1 = 4.16666666666666019037e-02, kC2 = -1.38888888888741095749e-03,
                 kC3 = 2.48015872894767294178e-05, kC4 = -2.75573143513906633035e-07,
                 kC5 = 2.08757232129817482790e-09, kC6 = -1.13596475577881948265e-11;

// Cloned for AVX-512/AVX2 with run-time dispatch: the same operations in the same
// order (ISO C++ mode keeps -ffp-contract=off, so no fused multiply-adds), hence the
// same bits on every machine, just wider vectors.
__attribute__((target_clones("avx512f", "avx2", "default"))) void sincos_fast(const double* a,
                                                                              double* so,
                                                                              double* co,
                                                                              std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const double x = a[i];
    const double q = (x * kTwoOverPi + kRoundMagic) - kRoundMagic;
    const int qi = static_cast<int>(q);
    const double r = ((x - q * kPio2Hi) - q * kPio2Mid) - q * kPio2Lo;
    const double z = r * r;
    const double v = z * r;
    const double s = r + v * (kS1 + z * (kS2 + z * (kS3 + z * (kS4 + z * (kS5 + z * kS6)))));
    const double w = z * z;
    const double cr = z * (kC1 + z * (kC2 + z * kC3)) + w * w * (kC4 + z * (kC5 + z * kC6));
    const double hz = 0.5 * z;
    const double one_hz = 1.0 - hz;
    const double c = one_hz + (((1.0 - one_hz) - hz) + z * cr);
    // Quadrant: q = 0: (s, c), 1: (c, -s), 2: (-s, -c), 3: (-c, s).
    const bool swap = (qi & 1) != 0;
    const double ss = swap ? c : s;
    const double cc = swap ? s : c;
    so[i] = (qi & 2) != 0 ? -ss : ss;
    co[i] = ((qi + 1) & 2) != 0 ? -cc : cc;
  }
}

// How many angles need libm: a vectorisable count (a running max has a dependency chain
// that cost as much as the kernel). NaN compares false and is counted.
__attribute__((target_clones("avx512f", "avx2", "default"))) std::int64_t count_large(
    const double* a, std::size_t n) {
  std::int64_t large = 0;
  for (std::size_t i = 0; i < n; ++i) large += (std::fabs(a[i]) < kFastLimit) ? 0 : 1;
  return large;
}

}  // namespace

void sincos_array(const double* angle, double* sin_out, double* cos_out, std::size_t n) {
  if (count_large(angle, n) == 0) {
    sincos_fast(angle, sin_out, cos_out, n);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (std::fabs(angle[i]) < kFastLimit) {
      sincos_fast(angle + i, sin_out + i, cos_out + i, 1);
    } else {
      sin_out[i] = std::sin(angle[i]);
      cos_out[i] = std::cos(angle[i]);
    }
  }
}

std::vector<double> sinusoidal_freqs(int dim, double base) {
  if (dim <= 0 || dim % 2 != 0) {
    throw UsageError(fmt::format(
        "dim: the sinusoidal table needs a positive even dimension (sin/cos pairs), got {}",
        dim));
  }
  if (!(base > 0.0) || !std::isfinite(base)) {
    throw UsageError(fmt::format("base: must be a positive number, got {}", base));
  }
  return default_inv_freq(base, dim);
}

void sinusoidal_row(double p, const std::vector<double>& freqs, SinusoidalLayout layout,
                    double* out) {
  const std::size_t h = freqs.size();
  // Small rows (every realistic dim) stay on the stack.
  constexpr std::size_t kStack = 512;
  double angle_buf[kStack], sin_buf[kStack], cos_buf[kStack];
  std::vector<double> heap;
  double *angle = angle_buf, *s = sin_buf, *c = cos_buf;
  if (h > kStack) {
    heap.resize(3 * h);
    angle = heap.data();
    s = angle + h;
    c = s + h;
  }
  for (std::size_t i = 0; i < h; ++i) angle[i] = p * freqs[i];
    // GCC cannot see that the loop above fills all h angles the call reads.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
  sincos_array(angle, s, c, h);
#pragma GCC diagnostic pop
  if (layout == SinusoidalLayout::interleaved) {
    for (std::size_t i = 0; i < h; ++i) {
      out[2 * i] = s[i];
      out[2 * i + 1] = c[i];
    }
  } else {
    std::copy(s, s + h, out);
    std::copy(c, c + h, out + h);
  }
}

}  // namespace posenc
