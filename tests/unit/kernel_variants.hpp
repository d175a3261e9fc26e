#pragma once
// The RoPE kernel variants a unit test exercises: every variant this CPU runs, or only the
// one POSENC_ROPE_ISA names when it is set (as the binary does), so that a run with
// POSENC_ROPE_ISA=avx2 checks what an AVX2-only machine would. Tests that find no
// variant to run skip with a message starting "SKIP:", which the CI script lists.

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../src/ops/rope_kernel.hpp"

namespace posenc::test {

using FindKernel = rope_detail::KernelFn (*)(DType, DType, Precision, RopeStyle);

struct KernelVariant {
  const char* name;
  FindKernel find;
  bool runs;          ///< this CPU has the instructions
  const char* needs;  ///< the CPU features it needs
};

inline std::vector<KernelVariant> all_kernel_variants() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return {
      {"base", &rope_detail::base::find_kernel, true, "nothing"},
      {"avx2", &rope_detail::avx2::find_kernel,
       __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"), "avx2, f16c"},
      {"avx512", &rope_detail::avx512::find_kernel, avx512, "avx512f/bw/vl/dq"},
      {"avx512fp16", &rope_detail::avx512fp16::find_kernel,
       avx512 && __builtin_cpu_supports("avx512fp16"), "avx512f/bw/vl/dq, avx512fp16"},
  };
}

/// Whether `v` is tested in this run; if not, `why` says why.
inline bool variant_selected(const KernelVariant& v, std::string& why) {
  const char* only = std::getenv("POSENC_ROPE_ISA");
  if (only != nullptr && std::strcmp(only, v.name) != 0) {
    why = std::string("POSENC_ROPE_ISA=") + only + " selects one variant";
    return false;
  }
  if (!v.runs) {
    why = std::string("needs ") + v.needs + ", which this CPU does not have";
    return false;
  }
  return true;
}

/// The selected variants among those named in `names` (all when empty); `skipped` gets
/// one "SKIP: ..." line per variant left out.
inline std::vector<KernelVariant> selected_variants(const std::vector<std::string>& names,
                                                    std::string& skipped) {
  std::vector<KernelVariant> out;
  for (const KernelVariant& v : all_kernel_variants()) {
    bool wanted = names.empty();
    for (const std::string& n : names) wanted = wanted || n == v.name;
    if (!wanted) continue;
    std::string why;
    if (variant_selected(v, why)) {
      out.push_back(v);
    } else {
      skipped += std::string("SKIP: RoPE kernel ") + v.name + " not tested: " + why + "\n";
    }
  }
  return out;
}

}  // namespace posenc::test
