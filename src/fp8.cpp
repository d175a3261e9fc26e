// fp8 conversions (posenc/fp8.hpp), written from the formats' definition: the value is
// scaled to a whole number of its quantum (a power of two, so exactly), rounded to nearest
// even there, and the code assembled from the rounded value.

#include "posenc/fp8.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "posenc/error.hpp"

namespace posenc {

namespace {

struct Layout {
  int mant;        // mantissa bits
  int bias;        // exponent bias
  double largest;  // largest finite value
  std::uint8_t overflow;  // code (without sign) of a rounding beyond `largest`
  std::uint8_t infinity;  // code of an infinite input
};

Layout layout(Fp8Format f) {
  if (f == Fp8Format::e4m3fn) return {3, 7, 448.0, 0x7f, 0x7f};
  return {2, 15, 57344.0, 0x7c, 0x7c};
}

}  // namespace

std::string_view fp8_format_name(Fp8Format f) noexcept {
  return f == Fp8Format::e4m3fn ? "e4m3fn" : "e5m2";
}

Fp8Format parse_fp8_format(std::string_view name, std::string_view what) {
  if (name == "e4m3fn" || name == "float8_e4m3fn") return Fp8Format::e4m3fn;
  if (name == "e5m2" || name == "float8_e5m2") return Fp8Format::e5m2;
  throw UsageError(std::string(what) + ": expected e4m3fn or e5m2, got '" + std::string(name) +
                   "'");
}

std::uint8_t fp8_from_float(float x, Fp8Format f) noexcept {
  const Layout l = layout(f);
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<std::uint8_t>(sign | 0x7f);
  if (std::isinf(x)) return static_cast<std::uint8_t>(sign | l.infinity);
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0.0) return sign;
  // The binade of a (2^e <= a < 2^(e+1)), not below the subnormals' (emin = 1 - bias).
  const int emin = 1 - l.bias;
  int e = std::ilogb(a);
  if (e < emin) e = emin;
  // a in units of the quantum 2^(e - mant): exact (a power-of-two scaling of a float32),
  // then rounded to nearest even (the default rounding mode of nearbyint).
  const int qexp = e - l.mant;
  double q = std::nearbyint(std::ldexp(a, -qexp));
  const double value = std::ldexp(q, qexp);
  if (value > l.largest) return static_cast<std::uint8_t>(sign | l.overflow);
  // Rounding up to 2^(mant+1) quanta moves to the next binade.
  if (q >= std::ldexp(1.0, l.mant + 1)) {
    q /= 2;
    ++e;
  }
  const auto qi = static_cast<unsigned>(q);
  unsigned exp_field = 0, mant_field = qi;
  if (qi >= (1u << l.mant)) {  // normal: the leading 1 is implicit
    exp_field = static_cast<unsigned>(e + l.bias);
    mant_field = qi - (1u << l.mant);
  }
  return static_cast<std::uint8_t>(sign | (exp_field << l.mant) | mant_field);
}

std::uint8_t fp8_from_double(double x, Fp8Format f) noexcept {
  return fp8_from_float(static_cast<float>(x), f);
}

bool fp8_is_nan(std::uint8_t code, Fp8Format f) noexcept {
  const unsigned m = code & 0x7fu;
  return f == Fp8Format::e4m3fn ? m == 0x7f : m > 0x7c;
}

float fp8_to_float(std::uint8_t code, Fp8Format f) noexcept {
  const Layout l = layout(f);
  const bool neg = (code & 0x80) != 0;
  const unsigned exp_field = (code & 0x7fu) >> l.mant;
  const unsigned mant_field = code & ((1u << l.mant) - 1);
  float v = 0;
  if (fp8_is_nan(code, f)) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (f == Fp8Format::e5m2 && exp_field == 31) {
    v = std::numeric_limits<float>::infinity();
  } else if (exp_field == 0) {
    v = static_cast<float>(std::ldexp(static_cast<double>(mant_field), 1 - l.bias - l.mant));
  } else {
    v = static_cast<float>(std::ldexp(static_cast<double>(mant_field + (1u << l.mant)),
                                      static_cast<int>(exp_field) - l.bias - l.mant));
  }
  return neg ? -v : v;
}

const float* fp8_table(Fp8Format f) noexcept {
  struct Tables {
    float v[2][256];
    Tables() {
      for (unsigned c = 0; c < 256; ++c) {
        v[0][c] = fp8_to_float(static_cast<std::uint8_t>(c), Fp8Format::e4m3fn);
        v[1][c] = fp8_to_float(static_cast<std::uint8_t>(c), Fp8Format::e5m2);
      }
    }
  };
  static const Tables t;
  return t.v[f == Fp8Format::e4m3fn ? 0 : 1];
}

}  // namespace posenc
