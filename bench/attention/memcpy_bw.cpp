// memcpy bandwidth of this machine, the bound of decode attention (sq = 1: every key and
// value is read once for a few FLOPs each). Usage: memcpy_bw [MiB=256] [repeats=5]
// Prints the best GB/s (bytes copied per second) of `repeats` one-thread memcpy calls.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::size_t n = mib << 20;
  std::vector<char> a(n, 1), b(n, 2);  // touched: no page faults in the timing
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (n / s / 1e9 > best) best = n / s / 1e9;
    a[r % n] = b[(r * 7) % n];
  }
  std::printf("%.2f\n", best);
  return 0;
}
