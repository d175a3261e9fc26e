#pragma once
// Internal: large buffers in 2 MiB pages where the kernel gives them on request
// (transparent huge pages in madvise mode). A buffer faulted in 4 KiB pages as it is
// first written costs more system time than the writes themselves on a VM: a 64 MiB RoPE
// table took 16,385 page faults, most of the call that built it.

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace posenc::detail {

/// Asks for huge pages over the whole 2 MiB pages inside [p, p + bytes); a no-op where the
/// system has no such advice.
inline void advise_huge_pages(void* p, std::size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t lo = (at + kHuge - 1) & ~(kHuge - 1), hi = (at + bytes) & ~(kHuge - 1);
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace posenc::detail
