// Picks the widest RoPE kernel variant this CPU runs.
#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "ops/rope_kernel.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/printable.hpp"

namespace posenc::rope_detail {

namespace {
enum class Isa { base, avx2, avx512, avx512fp16 };

Isa detect() {
  __builtin_cpu_init();
  const char* forced = std::getenv("POSENC_ROPE_ISA");
  if (forced != nullptr && *forced == '\0') forced = nullptr;  // set but empty: unset
  if (forced != nullptr) {
    bool known = false;
    for (const char* name : {"base", "avx2", "avx512", "avx512fp16"}) {
      known = known || std::strcmp(forced, name) == 0;
    }
    // A misspelt variant would silently run another one and mislead a comparison.
    if (!known) {
      throw UsageError(fmt::format(
          "POSENC_ROPE_ISA: unknown kernel variant '{}' (expected base, avx2, avx512 or "
          "avx512fp16)",
          printable(forced)));
    }
    if (std::strcmp(forced, "base") == 0) return Isa::base;
    if (std::strcmp(forced, "avx2") == 0 && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("f16c")) {
      return Isa::avx2;  // the variant converts f16 with F16C
    }
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    const bool force512 = forced != nullptr && std::strcmp(forced, "avx512") == 0;
    return __builtin_cpu_supports("avx512fp16") && !force512 ? Isa::avx512fp16 : Isa::avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return Isa::avx2;
  return Isa::base;
}

Isa isa() {
  static const Isa chosen = detect();
  return chosen;
}
}  // namespace

KernelFn find_kernel(DType in, DType out, Precision p, RopeStyle style) {
  switch (isa()) {
    case Isa::avx512fp16: return avx512fp16::find_kernel(in, out, p, style);
    case Isa::avx512: return avx512::find_kernel(in, out, p, style);
    case Isa::avx2: return avx2::find_kernel(in, out, p, style);
    default: return base::find_kernel(in, out, p, style);
  }
}

bool split_table_wanted(DType in, DType out, Precision p) {
  const Isa v = isa();
  return (v == Isa::avx512 || v == Isa::avx512fp16) && in == out &&
         (in == DType::f16 || in == DType::bf16) && p == Precision::f64;
}

bool build_split_table(const double* table, std::size_t rows, std::size_t rotary_dim,
                       RopeStyle style, float* out) {
  const std::size_t half = rotary_dim / 2;
  const std::size_t width = split_row_floats(rotary_dim, style);
  const bool gptj = style == RopeStyle::gptj;
  int ok = 1;
#pragma omp parallel for schedule(static) reduction(& : ok) if (rows * rotary_dim >= kParallelElements)
  for (std::ptrdiff_t r = 0; r < static_cast<std::ptrdiff_t>(rows); ++r) {
    const double* t = table + static_cast<std::size_t>(r) * rotary_dim;
    float* o = out + static_cast<std::size_t>(r) * width;
    for (std::size_t j = 0; j < rotary_dim; ++j) {
      const double v = t[j];
      // NaN fails the comparison too.
      if (!(std::fabs(v) <= kSplitTableMax)) ok = 0;
      const auto v1 = static_cast<float>(v);
      const auto v2 = static_cast<float>(v - static_cast<double>(v1));  // exact difference
      const bool sine = j >= half;
      const std::size_t k = sine ? j - half : j;  // pair index
      if (gptj) {
        // [C1 | S1 | C2 | S2], each R wide: pair k at 2k and 2k + 1.
        const std::size_t at = (sine ? rotary_dim : 0) + 2 * k;
        const float sign = sine ? -1.0f : 1.0f;
        o[at] = v1;
        o[at + 1] = sign * v1;
        o[2 * rotary_dim + at] = v2;
        o[2 * rotary_dim + at + 1] = sign * v2;
      } else {
        // [c1 | s1 | c2 | s2], each R/2 wide.
        o[j] = v1;
        o[rotary_dim + j] = v2;
      }
    }
  }
  return ok != 0;
}

const char* kernel_isa() {
  switch (isa()) {
    case Isa::avx512fp16: return "avx512fp16";
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    default: return "base";
  }
}

}  // namespace posenc::rope_detail

namespace posenc {
const char* rope_kernel_variant() { return rope_detail::kernel_isa(); }
}  // namespace posenc
