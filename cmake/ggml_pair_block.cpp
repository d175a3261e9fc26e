// Probe of the build (CMakeLists.txt, POSENC_GGML_PAIR_BLOCK): ggml's rotate_pairs
// (ggml-cpu/ops.cpp) in its f32 normal-mode form, compiled as ggml's CPU backend is by
// default (GCC -O3 -march=native, contraction on). GCC vectorises the loop and fuses
// the first product of each pair there, but not in the scalar rest; how many pairs the
// smallest vector step takes depends on the machine's tuning (4 with a scalar rest of
// up to 3 pairs, or 2 where the rest is vectorised too). Prints that number B: pair j
// of a row of h pairs is fused when j < h - h % B. Exits 1 when no B fits.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

template <typename T>
static void rotate_pairs(const int64_t n, const int64_t n_offset, const float* cache,
                         const T* src_data, T* dst_data, const int scale = 2) {
  for (int64_t i0 = 0; i0 < n; i0 += 2) {
    const int64_t ic = i0 / scale;
    const float cos_theta = cache[i0 + 0];
    const float sin_theta = cache[i0 + 1];
    const T* const src = src_data + ic;
    T* dst = dst_data + ic;
    const float x0 = src[0];
    const float x1 = src[n_offset];
    dst[0] = x0 * cos_theta - x1 * sin_theta;
    dst[n_offset] = x0 * sin_theta + x1 * cos_theta;
  }
}

__attribute__((noinline)) static void normal(int64_t n, const float* cache, const float* src,
                                             float* dst) {
  rotate_pairs<float>(n, 1, cache, src, dst, 1);
}

int main() {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal_dist;
  const int max_half = 67;
  // fused[h][j]: 1 fused, 0 not, -1 not told apart yet.
  std::vector<std::vector<int>> fused(max_half + 1);
  for (int h = 1; h <= max_half; ++h) {
    fused[h].assign(h, -1);
    std::vector<float> cache(2 * h), src(2 * h), dst(2 * h);
    for (int trial = 0; trial < 64; ++trial) {
      for (auto& v : cache) v = normal_dist(gen);
      for (auto& v : src) v = 3 * normal_dist(gen);
      normal(2 * h, cache.data(), src.data(), dst.data());
      for (int j = 0; j < h; ++j) {
        const float c = cache[2 * j], s = cache[2 * j + 1], x0 = src[2 * j], x1 = src[2 * j + 1];
        volatile float p0 = x0 * c, p1 = x1 * s;  // rounded products, not contracted
        const float plain = p0 - p1, fma = std::fma(x0, c, -static_cast<float>(p1));
        if (plain == fma) continue;
        const int seen = dst[2 * j] == fma ? 1 : dst[2 * j] == plain ? 0 : -2;
        if (seen == -2) return 1;
        if (fused[h][j] == -1) fused[h][j] = seen;
        if (fused[h][j] != seen) return 1;
      }
    }
  }
  for (int b : {1, 2, 4, 8, 16, 32}) {
    bool fits = true;
    for (int h = 1; h <= max_half && fits; ++h) {
      for (int j = 0; j < h && fits; ++j) {
        fits = fused[h][j] == -1 || fused[h][j] == (j < h - h % b ? 1 : 0);
      }
    }
    if (fits) {
      std::printf("%d\n", b);
      return 0;
    }
  }
  return 1;
}
