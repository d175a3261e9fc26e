// What the HDF5 sandbox costs: a 256 MiB f32 dataset (contiguous, and chunked with gzip
// level 1) read whole into one buffer in this process (libhdf5 called directly) and
// through the sandbox (a forked child reading into shared memory, the parent copying
// out), alternately, `--reps` times each. Reports the median times and their ratio,
// and names the CPU. The file is written first to a temporary folder (or --dir) and
// read warm from the page cache.
//
//   build-bench/bench/hdf5/bench_hdf5_sandbox [--reps 7] [--dir /tmp]

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "io/hdf5_reader.hpp"
#include "posenc/io/hdf5.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/tensor.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

void write_dataset(const std::string& path, int compression) {
  const posenc::Shape shape{1024, 65536};  // 64 Mi f32 values = 256 MiB
  posenc::WriteOptions opt;
  opt.compression = compression;
  posenc::Hdf5FileWriter w(path, opt);
  auto sink = w.dataset("/x", posenc::TensorInfo{posenc::DType::f32, shape, "", {}});
  std::vector<float> row(shape[1]);
  std::uint32_t state = 12345;
  for (std::size_t r = 0; r < shape[0]; ++r) {
    // Smooth values with noise: compressible like real activations, not trivially.
    for (std::size_t c = 0; c < row.size(); ++c) {
      state = state * 1664525u + 1013904223u;
      row[c] = static_cast<float>(r) * 0.01f + static_cast<float>(state >> 20) * 1e-4f;
    }
    sink->write_rows(row.data(), 1);
  }
  sink->commit();
  w.commit();
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void compare(const std::string& path, const char* label, int reps) {
  posenc::TensorRef ref{path + ":/x", path, "/x", posenc::Format::hdf5, {}};
  std::vector<double> direct, sandbox;
  float check_direct = 0, check_sandbox = 0;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    {
      auto src =
          posenc::hdf5_detail::in_process_source(posenc::hdf5_detail::open_dataset(ref, false));
      posenc::Tensor t = posenc::read_all_rows(*src);
      check_direct = t.data<float>()[t.numel() - 1];
    }
    direct.push_back(seconds_since(t0));
    t0 = Clock::now();
    {
      auto src = posenc::open_hdf5_source(ref);
      posenc::Tensor t = posenc::read_all_rows(*src);
      check_sandbox = t.data<float>()[t.numel() - 1];
    }
    sandbox.push_back(seconds_since(t0));
  }
  if (check_direct != check_sandbox) {
    std::fprintf(stderr, "the two reads differ\n");
    std::exit(1);
  }
  const double d = median(direct), s = median(sandbox);
  std::printf("%-24s in-process %7.1f ms   sandbox %7.1f ms   ratio %.3f   (+%.1f ms)\n", label,
              d * 1e3, s * 1e3, s / d, (s - d) * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--dir") == 0) dir = argv[i + 1];
  }
  std::string tmpl = dir + "/posenc-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return 1;
  std::printf("CPU: %s, %ld cores; 256 MiB f32 [1024, 65536], median of %d alternating reads\n",
              cpu_name().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN), reps);
  const std::string contiguous = tmpl + "/contiguous.h5", gzip = tmpl + "/gzip1.h5";
  write_dataset(contiguous, 0);
  write_dataset(gzip, 1);
  compare(contiguous, "contiguous", reps);
  compare(gzip, "chunked, shuffle, gzip 1", reps);
  std::remove(contiguous.c_str());
  std::remove(gzip.c_str());
  ::rmdir(tmpl.c_str());
  return 0;
}
