// The machine's sgemm peak through OpenBLAS, measured in the same run as the attention
// benchmark (machines here are shared and noisy: only side-by-side ratios mean much).
// Usage: sgemm_peak [N=4096] [threads=0 (OpenBLAS default)] [repeats=3] [K=N]
// Prints the best GFLOP/s of `repeats` C = A B products, A N x K and B K x N in f32
// (K chosen by the caller so that one product has the FLOPs of the attention measured),
// by wall time and, second, per CPU second of the process (steadier on a loaded machine).
#include <cblas.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  const int k = argc > 4 ? std::atoi(argv[4]) : n;
  if (threads > 0) openblas_set_num_threads(threads);
  std::vector<float> a(static_cast<std::size_t>(n) * k), b(a.size()),
      c(static_cast<std::size_t>(n) * n);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    b[i] = static_cast<float>((i * 104729) % 1000) / 1000.0f - 0.5f;
  }
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  };
  double best = 0, best_cpu = 0;
  for (int r = 0; r < repeats; ++r) {
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, k, 1.0f, a.data(), k, b.data(), n,
                0.0f, c.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpu_now() - c0;
    const double flop = 2.0 * n * n * static_cast<double>(k);
    if (flop / s / 1e9 > best) best = flop / s / 1e9;
    if (flop / cpu / 1e9 > best_cpu) best_cpu = flop / cpu / 1e9;
  }
  std::printf("%.1f %.1f\n", best, best_cpu);
  return 0;
}
