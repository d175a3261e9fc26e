// Where the HDF5 sandbox loads libhdf5 (src/io/hdf5_sandbox.cpp forks a child for each
// file it reads): the cost of one fork + libhdf5 initialisation + exit when the child
// dlopen()s libhdf5 itself, against a child forked from a parent that loaded it once.
// The two are timed alternately, each from its own process (a parent that has loaded
// the library cannot fork a child without it).
// Usage: bench_fork_load [reps] (default 300)

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifndef POSENC_HDF5_SONAME
#define POSENC_HDF5_SONAME "libhdf5_serial.so.103"
#endif

namespace {

using Clock = std::chrono::steady_clock;

void* load() {
  void* lib = dlopen(POSENC_HDF5_SONAME, RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "%s\n", dlerror());
    std::exit(1);
  }
  return lib;
}

void init(void* lib) {
  auto h5open = reinterpret_cast<int (*)()>(dlsym(lib, "H5open"));
  if (h5open == nullptr || h5open() < 0) std::_Exit(2);
}

// Forks a child that initialises libhdf5 (loading it first if `lib` is null), waits for
// it: milliseconds.
double cycle(void* lib) {
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    init(lib != nullptr ? lib : load());
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::exit(1);
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 300;
  // A helper that never loads libhdf5 times the "child loads" cycles on request.
  int req[2], ans[2];
  if (pipe(req) != 0 || pipe(ans) != 0) return 1;
  if (fork() == 0) {
    close(req[1]);
    close(ans[0]);
    char c;
    while (read(req[0], &c, 1) == 1) {
      const double ms = cycle(nullptr);
      if (write(ans[1], &ms, sizeof ms) != sizeof ms) _exit(1);
    }
    _exit(0);
  }
  close(req[0]);
  close(ans[1]);
  const auto t0 = Clock::now();
  void* lib = load();
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<double> child_loads, parent_loaded;
  for (int i = 0; i < reps; ++i) {
    char c = 'x';
    double ms = 0;
    if (write(req[1], &c, 1) != 1 || read(ans[0], &ms, sizeof ms) != sizeof ms) return 1;
    child_loads.push_back(ms);
    parent_loaded.push_back(cycle(lib));
  }
  close(req[1]);
  wait(nullptr);
  std::printf("%d reps, median ms per fork + H5open + exit\n", reps);
  std::printf("  child loads libhdf5:          %.3f\n", median(child_loads));
  std::printf("  parent loaded it before fork: %.3f\n", median(parent_loaded));
  std::printf("  (the parent's one load: %.3f ms)\n", load_ms);
  return 0;
}
