#include "posenc/tensor.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dtype_visit.hpp"
#include "posenc/error.hpp"
#include "posenc/fp8.hpp"
#include "posenc/ops/cast.hpp"

namespace posenc {

std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::i8: case DType::u8: case DType::b1: case DType::f8e4m3fn: case DType::f8e5m2:
      return 1;
    case DType::f16: case DType::bf16: case DType::i16: case DType::u16: return 2;
    case DType::f32: case DType::i32: case DType::u32: return 4;
    case DType::f64: case DType::i64: case DType::u64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i8: return "i8";
    case DType::i16: return "i16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::u16: return "u16";
    case DType::u32: return "u32";
    case DType::u64: return "u64";
    case DType::b1: return "bool";
    case DType::f8e4m3fn: return "float8_e4m3fn";
    case DType::f8e5m2: return "float8_e5m2";
  }
  return "?";
}

DType parse_dtype(std::string_view name, std::string_view what) {
  struct Alias {
    std::string_view name;
    DType type;
  };
  static constexpr Alias kAliases[] = {
      {"f16", DType::f16},     {"float16", DType::f16},  {"half", DType::f16},
      {"bf16", DType::bf16},   {"bfloat16", DType::bf16}, {"f32", DType::f32},
      {"float32", DType::f32}, {"float", DType::f32},    {"f64", DType::f64},
      {"float64", DType::f64}, {"double", DType::f64},   {"i8", DType::i8},
      {"int8", DType::i8},     {"i16", DType::i16},      {"int16", DType::i16},
      {"i32", DType::i32},     {"int32", DType::i32},    {"i64", DType::i64},
      {"int64", DType::i64},   {"u8", DType::u8},        {"uint8", DType::u8},
      {"u16", DType::u16},     {"uint16", DType::u16},   {"u32", DType::u32},
      {"uint32", DType::u32},  {"u64", DType::u64},      {"uint64", DType::u64},
      {"bool", DType::b1},     {"b1", DType::b1},
      {"float8_e4m3fn", DType::f8e4m3fn}, {"e4m3fn", DType::f8e4m3fn},
      {"f8e4m3fn", DType::f8e4m3fn},      {"float8_e5m2", DType::f8e5m2},
      {"e5m2", DType::f8e5m2},            {"f8e5m2", DType::f8e5m2},
  };
  for (const auto& a : kAliases) {
    if (a.name == name) return a.type;
  }
  throw UsageError(fmt::format("{}: unknown dtype '{}' (expected f64, f32, f16, bf16, "
                               "i8..i64, u8..u64, bool, float8_e4m3fn or float8_e5m2)",
                               what, name));
}

bool is_float(DType t) noexcept {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64 || is_fp8(t);
}
bool is_fp8(DType t) noexcept { return t == DType::f8e4m3fn || t == DType::f8e5m2; }
bool is_integer(DType t) noexcept { return !is_float(t) && t != DType::b1; }

std::string shape_str(const Shape& s) {
  if (s.size() == 1) return fmt::format("({},)", s[0]);
  return fmt::format("({})", fmt::join(s, ", "));
}

std::string bytes_str(std::size_t bytes) {
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = static_cast<double>(bytes) / 1024;
  std::size_t u = 0;
  while (x >= 1024 && u + 1 < std::size(units)) x /= 1024, ++u;
  return fmt::format("{:.1f} {}", x, units[u]);
}

std::size_t checked_numel(const Shape& s, std::size_t itemsize, std::string_view what) {
  std::size_t n = 1;
  for (std::size_t d : s) {
    if (__builtin_mul_overflow(n, d, &n)) {
      throw InputError(fmt::format("{}: shape {} is too large", what, shape_str(s)));
    }
  }
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(n, itemsize, &bytes) ||
      bytes > static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max())) {
    throw InputError(fmt::format("{}: shape {} is too large", what, shape_str(s)));
  }
  return n;
}

// --- half / bfloat16 ------------------------------------------------------------

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rounds a finite double to the nearest binary16 (ties to even) by scaling into the
// integer range of the target's significand: exact, no double rounding.
std::uint16_t round_to_half_bits(double d) {
  std::uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  double a = std::fabs(d);
  if (std::isnan(d)) return static_cast<std::uint16_t>(sign | 0x7e00);
  if (a >= 65520.0) return static_cast<std::uint16_t>(sign | 0x7c00);  // rounds to inf
  if (a < std::ldexp(1.0, -14)) {
    // Subnormal: units of 2^-24.
    double q = std::nearbyint(std::ldexp(a, 24));  // default rounding: ties to even
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(q));
  }
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;    // a in [2^exp, 2^(exp+1))
  double q = std::nearbyint(std::ldexp(a, 10 - exp));  // in [1024, 2048]
  if (q >= 2048.0) {
    q /= 2;
    ++exp;
  }
  if (exp > 15) return static_cast<std::uint16_t>(sign | 0x7c00);
  auto mant = static_cast<std::uint16_t>(static_cast<unsigned>(q) - 1024u);
  return static_cast<std::uint16_t>(sign | ((exp + 15) << 10) | mant);
}

std::uint16_t round_to_bf16_bits(double d) {
  if (std::isnan(d)) return std::signbit(d) ? 0xffc0 : 0x7fc0;
  std::uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  double a = std::fabs(d);
  // Largest finite bf16 is (2 - 2^-7) * 2^127; halfway to 2^128 rounds to inf.
  if (a >= std::ldexp(2.0 - std::ldexp(1.0, -8), 127)) return sign | 0x7f80;
  if (a < std::ldexp(1.0, -126)) {
    double q = std::nearbyint(std::ldexp(a, 133));  // subnormal units of 2^-133
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(q));
  }
  int e;
  std::frexp(a, &e);
  int exp = e - 1;
  double q = std::nearbyint(std::ldexp(a, 7 - exp));  // in [128, 256]
  if (q >= 256.0) {
    q /= 2;
    ++exp;
  }
  if (exp > 127) return sign | 0x7f80;
  auto mant = static_cast<std::uint16_t>(static_cast<unsigned>(q) - 128u);
  return static_cast<std::uint16_t>(sign | ((exp + 127) << 7) | mant);
}

}  // namespace

std::uint16_t double_to_half(double d) noexcept { return round_to_half_bits(d); }
std::uint16_t double_to_bf16(double d) noexcept { return round_to_bf16_bits(d); }
// A float is exactly representable as a double, so rounding it once from double is
// the correctly rounded float -> half conversion.
std::uint16_t float_to_half(float f) noexcept { return round_to_half_bits(f); }

float half_to_float(std::uint16_t h) noexcept {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  std::uint32_t exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

std::uint16_t float_to_bf16(float f) noexcept {
  std::uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7fc0u);  // as double_to_bf16
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

float bf16_to_float(std::uint16_t h) noexcept {
  return float_of(static_cast<std::uint32_t>(h) << 16);
}

// --- Buffer / Tensor ------------------------------------------------------------

void Buffer::Free::operator()(std::byte* p) const noexcept {
  if (owned) std::free(p);
}

Buffer Buffer::borrow(std::byte* data, std::size_t bytes) noexcept {
  Buffer b;
  b.ptr_ = std::unique_ptr<std::byte, Free>(data, Free{false});
  b.size_ = bytes;
  return b;
}

Buffer::Buffer(std::size_t bytes) : size_(bytes) {
  // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a pointer.
  std::size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  ptr_.reset(static_cast<std::byte*>(p));
}

Tensor::Tensor(DType dtype, Shape shape)
    : dtype_(dtype),
      shape_(std::move(shape)),
      numel_(checked_numel(shape_, dtype_size(dtype), "tensor")),
      buf_(numel_ * dtype_size(dtype)) {}

Tensor Tensor::borrow(DType dtype, Shape shape, void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = checked_numel(t.shape_, dtype_size(dtype), "tensor");
  t.buf_ = Buffer::borrow(static_cast<std::byte*>(data), t.numel_ * dtype_size(dtype));
  return t;
}

void Tensor::reshape(Shape shape) {
  if (checked_numel(shape, dtype_size(dtype_), "reshape") != numel_) {
    throw InputError(fmt::format("cannot reshape {} into {}", shape_str(shape_), shape_str(shape)));
  }
  shape_ = std::move(shape);
}

double Tensor::get(std::size_t i) const noexcept {
  const std::byte* p = buf_.data();
  switch (dtype_) {
    case DType::f16: return half_to_float(reinterpret_cast<const std::uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(reinterpret_cast<const std::uint16_t*>(p)[i]);
    case DType::f32: return reinterpret_cast<const float*>(p)[i];
    case DType::f64: return reinterpret_cast<const double*>(p)[i];
    case DType::i8: return reinterpret_cast<const std::int8_t*>(p)[i];
    case DType::i16: return reinterpret_cast<const std::int16_t*>(p)[i];
    case DType::i32: return reinterpret_cast<const std::int32_t*>(p)[i];
    case DType::i64: return static_cast<double>(reinterpret_cast<const std::int64_t*>(p)[i]);
    case DType::u8: return reinterpret_cast<const std::uint8_t*>(p)[i];
    case DType::u16: return reinterpret_cast<const std::uint16_t*>(p)[i];
    case DType::u32: return reinterpret_cast<const std::uint32_t*>(p)[i];
    case DType::u64: return static_cast<double>(reinterpret_cast<const std::uint64_t*>(p)[i]);
    case DType::b1: return reinterpret_cast<const std::uint8_t*>(p)[i] != 0 ? 1.0 : 0.0;
    case DType::f8e4m3fn:
      return fp8_to_float(reinterpret_cast<const std::uint8_t*>(p)[i], Fp8Format::e4m3fn);
    case DType::f8e5m2:
      return fp8_to_float(reinterpret_cast<const std::uint8_t*>(p)[i], Fp8Format::e5m2);
  }
  return 0.0;
}

namespace {
/// Scans the bit patterns: all exponent bits set is NaN or Inf; `neg_inf` is the one
/// pattern let through when allowed. An OR over the whole array, so it vectorises.
template <class U>
bool scan_nonfinite(const std::byte* p, std::size_t n, U exp_mask, U neg_inf, bool allow_neg_inf) {
  const auto* u = reinterpret_cast<const U*>(p);
  unsigned bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bad |= static_cast<unsigned>((u[i] & exp_mask) == exp_mask && !(allow_neg_inf && u[i] == neg_inf));
  }
  return bad != 0;
}
}  // namespace

bool Tensor::has_nonfinite(bool allow_neg_inf) const noexcept {
  const std::byte* p = buf_.data();
  switch (dtype_) {
    case DType::f16:
      return scan_nonfinite<std::uint16_t>(p, numel_, 0x7c00u, 0xfc00u, allow_neg_inf);
    case DType::bf16:
      return scan_nonfinite<std::uint16_t>(p, numel_, 0x7f80u, 0xff80u, allow_neg_inf);
    case DType::f32:
      return scan_nonfinite<std::uint32_t>(p, numel_, 0x7f800000u, 0xff800000u, allow_neg_inf);
    case DType::f64:
      return scan_nonfinite<std::uint64_t>(p, numel_, 0x7ff0000000000000ull,
                                           0xfff0000000000000ull, allow_neg_inf);
    case DType::f8e4m3fn:
    case DType::f8e5m2: {
      // e4m3fn's NaNs are 0x7f/0xff; e5m2's exponent field 31 is Inf or NaN.
      const auto* u = reinterpret_cast<const std::uint8_t*>(p);
      const bool e4 = dtype_ == DType::f8e4m3fn;
      const unsigned m = e4 ? 0x7fu : 0x7cu;
      unsigned bad = 0;
      for (std::size_t i = 0; i < numel_; ++i) {
        bad |= static_cast<unsigned>((u[i] & m) == m && !(allow_neg_inf && !e4 && u[i] == 0xfc));
      }
      return bad != 0;
    }
    default:
      return false;
  }
}

using detail::saturate_to;

void Tensor::set(std::size_t i, double v) noexcept {
  std::byte* p = buf_.data();
  switch (dtype_) {
    case DType::f16: reinterpret_cast<std::uint16_t*>(p)[i] = double_to_half(v); break;
    case DType::bf16: reinterpret_cast<std::uint16_t*>(p)[i] = double_to_bf16(v); break;
    case DType::f32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::f64: reinterpret_cast<double*>(p)[i] = v; break;
    case DType::i8: reinterpret_cast<std::int8_t*>(p)[i] = saturate_to<std::int8_t>(v); break;
    case DType::i16: reinterpret_cast<std::int16_t*>(p)[i] = saturate_to<std::int16_t>(v); break;
    case DType::i32: reinterpret_cast<std::int32_t*>(p)[i] = saturate_to<std::int32_t>(v); break;
    case DType::i64: reinterpret_cast<std::int64_t*>(p)[i] = saturate_to<std::int64_t>(v); break;
    case DType::u8: reinterpret_cast<std::uint8_t*>(p)[i] = saturate_to<std::uint8_t>(v); break;
    case DType::u16: reinterpret_cast<std::uint16_t*>(p)[i] = saturate_to<std::uint16_t>(v); break;
    case DType::u32: reinterpret_cast<std::uint32_t*>(p)[i] = saturate_to<std::uint32_t>(v); break;
    case DType::u64: reinterpret_cast<std::uint64_t*>(p)[i] = saturate_to<std::uint64_t>(v); break;
    case DType::b1: reinterpret_cast<std::uint8_t*>(p)[i] = v != 0.0 ? 1 : 0; break;
    case DType::f8e4m3fn:
      reinterpret_cast<std::uint8_t*>(p)[i] = fp8_from_double(v, Fp8Format::e4m3fn);
      break;
    case DType::f8e5m2:
      reinterpret_cast<std::uint8_t*>(p)[i] = fp8_from_double(v, Fp8Format::e5m2);
      break;
  }
}

Tensor Tensor::astype(DType to) const { return cast(*this, to); }

}  // namespace posenc
