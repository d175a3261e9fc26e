// The slab pipeline's choice of transforming threads (ops/slab_pipeline.hpp): an
// I/O-bound stream transforms on the cores the reader and writer leave, a stream whose
// transform takes far longer than its I/O gets every thread it may use; the bytes
// written are the same either way.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "../../src/ops/slab_pipeline.hpp"

namespace posenc {
namespace {

constexpr std::size_t kRowBytes = 64;

/// Rows of kRowBytes bytes, byte i of row r = (r + i) mod 251; read in slabs.
class MemorySource : public TensorSource {
 public:
  explicit MemorySource(std::size_t rows) {
    info_.dtype = DType::u8;
    info_.shape = {rows, kRowBytes};
  }
  const TensorInfo& info() const override { return info_; }
  void read_rows(std::size_t first, std::size_t count, void* dst) override {
    auto* d = static_cast<unsigned char*>(dst);
    for (std::size_t r = first; r < first + count; ++r) {
      for (std::size_t i = 0; i < kRowBytes; ++i) *d++ = static_cast<unsigned char>((r + i) % 251);
    }
  }
  bool seekable() const override { return true; }
  void read_slab(std::size_t, std::size_t first, std::size_t count, void* dst) override {
    read_rows(first, count, dst);
  }

 private:
  TensorInfo info_;
};

/// Collects what is written; each slab takes `delay` of wall time (a slow disk).
class MemorySink : public TensorSink {
 public:
  explicit MemorySink(std::chrono::microseconds delay) : delay_(delay) {}
  void write_rows(const void* src, std::size_t count) override {
    const auto* s = static_cast<const unsigned char*>(src);
    bytes.insert(bytes.end(), s, s + count * kRowBytes);
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
  }
  void write_slab(std::size_t, const void* src, std::size_t count) override {
    write_rows(src, count);
  }
  void commit() override {}
  std::vector<unsigned char> bytes;

 private:
  std::chrono::microseconds delay_;
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Streams `slabs` slabs of 4 rows through a transform that adds 1 to every byte after
/// spinning `cpu_per_slab` seconds of CPU time, with `threads` allowed; returns the
/// OpenMP thread count each slab was transformed with and checks the bytes written.
std::vector<int> stream(std::size_t slabs, double cpu_per_slab,
                        std::chrono::microseconds write_delay, int threads) {
  const std::size_t rows = 4 * slabs;
  MemorySource src(rows);
  MemorySink sink(write_delay);
  std::vector<int> used;
  detail::SlabOp op;
  op.in_row_bytes = op.out_row_bytes = kRowBytes;
  op.total_rows = rows;
  op.table_bytes = [](std::size_t) { return std::size_t{0}; };
  op.rows = [&](const std::byte* in, std::byte* out, std::size_t, std::size_t n) {
    used.push_back(omp_get_max_threads());
    const double t0 = thread_cpu_seconds();
    while (thread_cpu_seconds() - t0 < cpu_per_slab) {
    }
    for (std::size_t i = 0; i < n * kRowBytes; ++i) {
      out[i] = static_cast<std::byte>(static_cast<unsigned char>(in[i]) + 1);
    }
  };
  detail::SlabPlan plan;
  plan.rows = 4;
  plan.depth = 2;
  detail::stream_slabs(src, sink, 1, op, plan, false, threads, {});
  std::vector<unsigned char> expected;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t i = 0; i < kRowBytes; ++i) {
      expected.push_back(static_cast<unsigned char>((r + i) % 251 + 1));
    }
  }
  EXPECT_TRUE(sink.bytes == expected) << "the bytes written differ from the transform's";
  return used;
}

// Writing takes 2 ms a slab, transforming next to nothing: the transform keeps to the
// cores the reader and writer leave (one on a machine of two), whatever the cap.
TEST(SlabPipeline, IoBoundTransformLeavesTheIoThreadsTheirCores) {
  const int procs = omp_get_num_procs();
  const int cap = procs + 2;
  const std::vector<int> used = stream(40, 0.0, std::chrono::microseconds(2000), cap);
  ASSERT_EQ(used.size(), 40u);
  const int expected = std::max(1, procs - 2);
  for (std::size_t i = 0; i < used.size(); ++i) EXPECT_EQ(used[i], expected) << "slab " << i;
}

// Transforming takes 4 ms of CPU a slab, reading and writing microseconds: once the
// pipeline has measured that, the transform gets every allowed thread. (On a machine
// with as many cores as the cap allows plus two, it has them from the start.)
TEST(SlabPipeline, ComputeBoundTransformGetsEveryThread) {
  const int cap = omp_get_num_procs() + 1;
  const std::vector<int> used = stream(48, 0.004, std::chrono::microseconds(0), cap);
  ASSERT_EQ(used.size(), 48u);
  EXPECT_EQ(used.back(), cap);
  for (int t : used) EXPECT_TRUE(t == cap || t == std::max(1, omp_get_num_procs() - 2)) << t;
}

// With one thread allowed, one thread transforms throughout.
TEST(SlabPipeline, OneThreadStaysOne) {
  const std::vector<int> used = stream(24, 0.001, std::chrono::microseconds(0), 1);
  for (int t : used) EXPECT_EQ(t, 1);
}

}  // namespace
}  // namespace posenc
