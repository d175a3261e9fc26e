#pragma once
// OpenBLAS's thread count held at one for a scope. Internal to the library.

// OpenBLAS's own thread control, declared here: its cblas.h clashes with the one
// xtensor-blas brings.
extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int num_threads);

namespace posenc {

// OpenBLAS is told to use one thread while attention runs and restored afterwards:
// each BLAS call then rounds the same way whichever OpenMP thread makes it and however
// many there are (OpenBLAS 0.3.21 sgemm with 1 and 2 threads differs in the last bit).
class OneBlasThread {
 public:
  OneBlasThread() : saved_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
  ~OneBlasThread() { openblas_set_num_threads(saved_); }
  OneBlasThread(const OneBlasThread&) = delete;
  OneBlasThread& operator=(const OneBlasThread&) = delete;

 private:
  int saved_;
};

}  // namespace posenc
