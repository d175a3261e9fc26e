// The base variant of widen.hpp and the dispatch.
#include "ops/widen.hpp"

#include <algorithm>
#include <cstring>

#include "ops/rope_kernel.hpp"
#include "posenc/fp8.hpp"

namespace posenc::widen_detail {

namespace base {
bool f16(const std::uint16_t* src, float* dst, std::size_t n) {
  bool special = false;
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = half_to_float(src[i]);
    special |= (src[i] & 0x7c00) == 0x7c00;
  }
  return !special;
}
bool bf16(const std::uint16_t* src, float* dst, std::size_t n) {
  bool special = false;
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = bf16_to_float(src[i]);
    special |= (src[i] & 0x7f80) == 0x7f80;
  }
  return !special;
}
void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = double_to_half(src[i]);
}
void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = double_to_bf16(src[i]);
}
void f64_to_f16(const double* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = double_to_half(src[i]);
}
void f64_to_bf16(const double* src, std::uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = double_to_bf16(src[i]);
}
}  // namespace base

namespace {
struct Chosen {
  WidenFn f16, bf16;
  NarrowF32Fn f32_f16, f32_bf16;
  NarrowF64Fn f64_f16, f64_bf16;
  const char* name;
};

// The RoPE kernels' choice (POSENC_ROPE_ISA or the widest this CPU runs): avx512fp16
// widens with the avx512 variant. The fuzz harnesses (tests/fuzz), built by clang
// without the kernels, take the base variant.
Chosen choose() {
  const Chosen base = {
      &base::f16,         &base::bf16, &base::f32_to_f16, &base::f32_to_bf16, &base::f64_to_f16,
      &base::f64_to_bf16, "base"};
#ifdef POSENC_WIDEN_BASE_ONLY
  return base;
#else
  const char* isa = rope_detail::kernel_isa();
  if (std::strcmp(isa, "base") == 0) return base;
  if (std::strcmp(isa, "avx2") == 0) {
    return {
        &avx2::f16,         &avx2::bf16, &avx2::f32_to_f16, &avx2::f32_to_bf16, &avx2::f64_to_f16,
        &base::f64_to_bf16, "avx2"};
  }
  return {&avx512::f16,
          &avx512::bf16,
          &avx512::f32_to_f16,
          &avx512::f32_to_bf16,
          &avx512::f64_to_f16,
          &avx512::f64_to_bf16,
          "avx512"};
#endif
}

const Chosen& chosen() {
  static const Chosen c = choose();
  return c;
}
}  // namespace

const char* widen_isa() { return chosen().name; }

}  // namespace posenc::widen_detail

namespace posenc::detail {

namespace {
// fp8 through the format's 256-entry table (exact); a NaN or Inf code is one whose
// value is not finite, found in the same pass.
bool widen_fp8(DType from, const std::uint8_t* src, float* dst, std::size_t n) {
  const float* table = fp8_table(from == DType::f8e4m3fn ? Fp8Format::e4m3fn : Fp8Format::e5m2);
  const unsigned m = from == DType::f8e4m3fn ? 0x7fu : 0x7cu;
  unsigned special = 0;
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = table[src[i]];
    special |= static_cast<unsigned>((src[i] & m) == m);
  }
  return special == 0;
}
}  // namespace

bool widen(DType from, const void* src, float* dst, std::size_t n) {
  if (from == DType::f8e4m3fn || from == DType::f8e5m2) {
    return widen_fp8(from, static_cast<const std::uint8_t*>(src), dst, n);
  }
  const auto* s = static_cast<const std::uint16_t*>(src);
  const auto& c = widen_detail::chosen();
  return (from == DType::bf16 ? c.bf16 : c.f16)(s, dst, n);
}

void narrow(DType from, const void* src, DType to, void* dst, std::size_t n) {
  const auto& c = widen_detail::chosen();
  auto* d = static_cast<std::uint16_t*>(dst);
  if (from == DType::f32) {
    (to == DType::bf16 ? c.f32_bf16 : c.f32_f16)(static_cast<const float*>(src), d, n);
  } else {
    (to == DType::bf16 ? c.f64_bf16 : c.f64_f16)(static_cast<const double*>(src), d, n);
  }
}

bool widen(DType from, const void* src, double* dst, std::size_t n) {
  const auto* s = static_cast<const std::byte*>(src);
  const std::size_t es = dtype_size(from);
  constexpr std::size_t kBlock = 1024;
  alignas(64) float buf[kBlock];
  bool finite = true;
  for (std::size_t i = 0; i < n; i += kBlock) {
    const std::size_t m = std::min(kBlock, n - i);
    finite &= widen(from, s + i * es, buf, m);
    std::copy_n(buf, m, dst + i);
  }
  return finite;
}

}  // namespace posenc::detail
