// Picks the widest RoPE kernel variant this CPU runs.
#include <fmt/format.h>

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
