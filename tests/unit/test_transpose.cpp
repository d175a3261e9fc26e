// transpose_matrices (src/ops/transpose.cpp): the register-block path and the one-by-one
// path against an index formula, for every element size, shapes that are no multiple of a
// block or tile, and one to many matrices.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../../src/ops/transpose.hpp"

namespace {

std::vector<std::byte> pattern(std::size_t n) {
  std::vector<std::byte> v(n);
  std::uint32_t x = 12345;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return v;
}

TEST(Transpose, EveryElementSizeAndShape) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2");
  if (!avx2) std::puts("SKIP: the register-block path needs avx2, which this CPU does not have");
  for (std::size_t es : {1, 2, 3, 4, 8}) {
    for (auto [outer, rows, cols] :
         {std::array<std::size_t, 3>{1, 1, 1}, {1, 8, 8}, {2, 4, 4}, {1, 7, 9}, {3, 33, 65},
          {2, 128, 2048}, {1, 2048, 128}, {4, 40, 1000}, {1, 0, 5}}) {
      const std::size_t n = outer * rows * cols * es;
      const std::vector<std::byte> src = pattern(n);
      std::vector<std::byte> want(n);
      for (std::size_t o = 0; o < outer; ++o) {
        for (std::size_t r = 0; r < rows; ++r) {
          for (std::size_t c = 0; c < cols; ++c) {
            std::memcpy(&want[((o * cols + c) * rows + r) * es], &src[((o * rows + r) * cols + c) * es],
                        es);
          }
        }
      }
      for (bool simd : {false, true}) {
        if (simd && !avx2) continue;
        std::vector<std::byte> got(n, std::byte{0});
        posenc::detail::transpose_matrices(src.data(), got.data(), outer, rows, cols, es, simd);
        EXPECT_EQ(got, want) << "es " << es << " outer " << outer << " rows " << rows << " cols "
                             << cols << (simd ? " blocks" : " one by one");
      }
    }
  }
}

}  // namespace
