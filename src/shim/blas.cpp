// OpenBLAS for the posenc executable, loaded on first use (see shim.hpp): only
// attention's matrix products need it.
//
// To add a function: append X(name, number of parameters) to POSENC_BLAS_FUNCTIONS. The
// types come from the CBLAS header xtensor-blas declares its calls with.

#include <xtensor-blas/xblas_config.hpp>
// (after the configuration above, as xtensor-blas includes it)
#include <xflens/cxxblas/drivers/cblas.h>

#include <cstdlib>
#include <string>

#include "ops/blas_threads.hpp"
#include "posenc/error.hpp"
#include "shim/shim.hpp"

#ifndef POSENC_BLAS_SONAME
#define POSENC_BLAS_SONAME "libopenblas.so.0"
#endif
#ifndef POSENC_BLAS_PACKAGE
#define POSENC_BLAS_PACKAGE "libopenblas0"
#endif

// clang-format off
#define POSENC_BLAS_FUNCTIONS(X)                                                                   \
  X(cblas_sgemm, 14) X(cblas_dgemm, 14) X(cblas_sgemv, 12) X(cblas_dgemv, 12)                      \
  X(openblas_get_num_threads, 0) X(openblas_set_num_threads, 1)
// clang-format on

namespace {

struct Blas {
#define POSENC_MEMBER(name, n) decltype(&::name) name = nullptr;
  POSENC_BLAS_FUNCTIONS(POSENC_MEMBER)
#undef POSENC_MEMBER
  std::string error;
};

// OpenBLAS 0.3.21 starts its thread pool when it is loaded, and an idle pool thread
// spins in sched_yield for 2^28 cycles (about 0.1 s) before it sleeps: a core taken
// from posenc's own workers for the first tenth of a second of every run (on 2 cores,
// causal attention at s 4096 took 482 ms of CPU time and 0.24 s with it, 381 ms and
// 0.21 s without).
// posenc calls BLAS on one thread per call (blas_threads.hpp), so it never uses the
// pool: the library is loaded with OPENBLAS_NUM_THREADS=1, which starts none. It is
// loaded on the thread that runs the command, before any worker starts (OneBlasThread
// calls it first), so setting the environment races with nothing.
Blas load() {
  using posenc::shim::symbol;
  Blas b;
  const char* user = std::getenv("OPENBLAS_NUM_THREADS");
  const std::string saved = user ? user : "";
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  void* lib = posenc::shim::open_library(POSENC_BLAS_SONAME, POSENC_BLAS_PACKAGE, &b.error);
  if (user) {
    setenv("OPENBLAS_NUM_THREADS", saved.c_str(), 1);
  } else {
    unsetenv("OPENBLAS_NUM_THREADS");
  }
  if (lib == nullptr) return b;
#define POSENC_BIND(name, n)                                                                       \
  if (b.error.empty()) {                                                                           \
    b.name = reinterpret_cast<decltype(b.name)>(symbol(lib, POSENC_BLAS_SONAME, #name, &b.error)); \
  }
  POSENC_BLAS_FUNCTIONS(POSENC_BIND)
#undef POSENC_BIND
  return b;
}

const Blas& blas() {
  static const Blas b = load();
  if (!b.error.empty()) throw posenc::OutputError("cannot multiply matrices: " + b.error);
  return b;
}

}  // namespace

#define POSENC_TRAMPOLINE(name, n) POSENC_SHIM_TRAMPOLINE(blas, name, n)
POSENC_BLAS_FUNCTIONS(POSENC_TRAMPOLINE)
#undef POSENC_TRAMPOLINE
