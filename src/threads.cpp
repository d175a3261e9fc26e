// How many worker threads a process can start (see threads.hpp).
#include "posenc/threads.hpp"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace posenc {

namespace {

// The probe threads wait here until every one that could start has started, so that
// they exist at the same time, as OpenMP's team does.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
};

extern "C" void* wait_at_gate(void* arg) {
  auto* gate = static_cast<Gate*>(arg);
  std::unique_lock<std::mutex> lock(gate->m);
  gate->cv.wait(lock, [gate] { return gate->open; });
  return nullptr;
}

// The stack size libgomp gives its workers: OMP_STACKSIZE (GOMP_STACKSIZE) when set,
// in KiB by default or with a B, K, M or G suffix; else the threads' default (0).
std::size_t openmp_stack_bytes() {
  const char* env = std::getenv("OMP_STACKSIZE");
  if (env == nullptr) env = std::getenv("GOMP_STACKSIZE");
  if (env == nullptr) return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(env, &end, 10);
  std::size_t unit = 1024;
  switch (end != nullptr ? *end : '\0') {
    case 'b':
    case 'B':
      unit = 1;
      break;
    case 'm':
    case 'M':
      unit = std::size_t{1} << 20;
      break;
    case 'g':
    case 'G':
      unit = std::size_t{1} << 30;
      break;
    default:
      break;
  }
  return v > (std::size_t{1} << 40) / unit ? 0 : static_cast<std::size_t>(v) * unit;
}

}  // namespace

int startable_threads(int requested) {
  requested = std::clamp(requested, 1, kMaxThreads);
  if (requested == 1) return 1;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (const std::size_t stack = openmp_stack_bytes(); stack > 0) {
    pthread_attr_setstacksize(&attr, stack);
  }
  Gate gate;
  std::vector<pthread_t> started;
  started.reserve(static_cast<std::size_t>(requested - 1));
  for (int i = 1; i < requested; ++i) {
    pthread_t t;
    if (pthread_create(&t, &attr, wait_at_gate, &gate) != 0) break;
    started.push_back(t);
  }
  pthread_attr_destroy(&attr);
  {
    std::lock_guard<std::mutex> lock(gate.m);
    gate.open = true;
  }
  gate.cv.notify_all();
  for (pthread_t t : started) pthread_join(t, nullptr);
  return static_cast<int>(started.size()) + 1;
}

int set_worker_threads(int requested) {
  requested = std::clamp(requested, 1, kMaxThreads);
  int n = startable_threads(requested);
  if (n < requested) n = std::max(1, n / 2);
  omp_set_num_threads(n);
  if (n > 1) {
    // libgomp keeps a team's threads for the regions that follow.
#pragma omp parallel
    { (void)0; }
  }
  return n;
}

}  // namespace posenc
