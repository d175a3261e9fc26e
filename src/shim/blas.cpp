// OpenBLAS for the posenc executable, loaded on first use (see shim.hpp): only
// attention's matrix products need it, and loading it also starts its thread pool.
//
// To add a function: append X(name, number of parameters) to POSENC_BLAS_FUNCTIONS. The
// types come from the CBLAS header xtensor-blas declares its calls with.

#include <xtensor-blas/xblas_config.hpp>
// (after the configuration above, as xtensor-blas includes it)
#include <xflens/cxxblas/drivers/cblas.h>

#include <mutex>
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

// openblas_set_num_threads is not in the list: its trampoline is written out below.
// clang-format off
#define POSENC_BLAS_FUNCTIONS(X)                                                                   \
  X(cblas_sgemm, 14) X(cblas_dgemm, 14) X(cblas_sgemv, 12) X(cblas_dgemv, 12)                      \
  X(openblas_get_num_threads, 0)
// clang-format on

namespace {

struct Blas {
#define POSENC_MEMBER(name, n) decltype(&::name) name = nullptr;
  POSENC_BLAS_FUNCTIONS(POSENC_MEMBER)
#undef POSENC_MEMBER
  decltype(&::openblas_set_num_threads) openblas_set_num_threads = nullptr;
  std::string error;
};

// A thread count set before the library is loaded (posenc -j N, parsed before the
// command runs): applied when it is.
std::mutex pending_mutex;
int pending_threads = 0;
bool load_tried = false;

Blas load() {
  using posenc::shim::symbol;
  Blas b;
  void* lib = posenc::shim::open_library(POSENC_BLAS_SONAME, POSENC_BLAS_PACKAGE, &b.error);
  if (lib == nullptr) return b;
#define POSENC_BIND(name)                                                                          \
  if (b.error.empty()) {                                                                           \
    b.name = reinterpret_cast<decltype(b.name)>(symbol(lib, POSENC_BLAS_SONAME, #name, &b.error)); \
  }
#define POSENC_BIND_FUNCTION(name, n) POSENC_BIND(name)
  POSENC_BLAS_FUNCTIONS(POSENC_BIND_FUNCTION)
  POSENC_BIND(openblas_set_num_threads)
#undef POSENC_BIND_FUNCTION
#undef POSENC_BIND
  std::lock_guard<std::mutex> lock(pending_mutex);
  if (b.error.empty() && pending_threads > 0) b.openblas_set_num_threads(pending_threads);
  load_tried = true;
  return b;
}

const Blas& loaded() {
  static const Blas b = load();
  return b;
}

const Blas& blas() {
  const Blas& b = loaded();
  if (!b.error.empty()) throw posenc::OutputError("cannot multiply matrices: " + b.error);
  return b;
}

}  // namespace

#define POSENC_TRAMPOLINE(name, n) POSENC_SHIM_TRAMPOLINE(blas, name, n)
POSENC_BLAS_FUNCTIONS(POSENC_TRAMPOLINE)
#undef POSENC_TRAMPOLINE

extern "C" void openblas_set_num_threads(int num_threads) {
  {
    std::lock_guard<std::mutex> lock(pending_mutex);
    if (!load_tried) {
      pending_threads = num_threads;
      return;
    }
  }
  blas().openblas_set_num_threads(num_threads);
}
