#pragma once
// Trampolines: the posenc executable defines the C functions it uses from libhdf5 and
// OpenBLAS itself, each forwarding to the real function, which it finds on the first
// call by dlopen()ing the library (by its soname, found by CMakeLists.txt) and dlsym().
// Commands that never touch an HDF5 file or a matrix product then do not load these
// libraries and the thirty-odd others they pull in (curl, krb5, ldap, gnutls, ...),
// which were most of posenc's start-up time. The library itself (libposenc) is
// unchanged: it calls H5Dread() as usual, and as installed it links the real libraries.
//
// A trampoline's parameter types are taken from the library's own header, through the
// type of the declared function, so they cannot drift from it: the lists in hdf5.cpp
// and blas.cpp give only each function's name and its number of parameters, which a
// static_assert checks. Variadic functions cannot be forwarded this way (none is used).

#include <cstddef>
#include <string>
#include <tuple>

namespace posenc::shim {

template <class F>
struct Signature;

template <class R, class... A>
struct Signature<R (*)(A...)> {
  using Result = R;
  static constexpr std::size_t arity = sizeof...(A);
  template <std::size_t I>
  using Arg = std::tuple_element_t<I, std::tuple<A...>>;
};

/// dlopen()s `soname` (never closed). Returns nullptr and sets `error` if it cannot be
/// loaded; the message names the library and the Debian `package` that provides it.
void* open_library(const char* soname, const char* package, std::string* error);

/// The address of `name` in `lib`; nullptr and `error` set if it is missing.
void* symbol(void* lib, const char* soname, const char* name, std::string* error);

}  // namespace posenc::shim

// Parameter lists "T0 a0, T1 a1, ..." of function `fn`, and the matching argument lists.
#define POSENC_SHIM_A(fn, i) ::posenc::shim::Signature<decltype(&::fn)>::Arg<i>
#define POSENC_SHIM_PARAMS_0(fn)
#define POSENC_SHIM_PARAMS_1(fn) POSENC_SHIM_A(fn, 0) a0
#define POSENC_SHIM_PARAMS_2(fn) POSENC_SHIM_PARAMS_1(fn), POSENC_SHIM_A(fn, 1) a1
#define POSENC_SHIM_PARAMS_3(fn) POSENC_SHIM_PARAMS_2(fn), POSENC_SHIM_A(fn, 2) a2
#define POSENC_SHIM_PARAMS_4(fn) POSENC_SHIM_PARAMS_3(fn), POSENC_SHIM_A(fn, 3) a3
#define POSENC_SHIM_PARAMS_5(fn) POSENC_SHIM_PARAMS_4(fn), POSENC_SHIM_A(fn, 4) a4
#define POSENC_SHIM_PARAMS_6(fn) POSENC_SHIM_PARAMS_5(fn), POSENC_SHIM_A(fn, 5) a5
#define POSENC_SHIM_PARAMS_7(fn) POSENC_SHIM_PARAMS_6(fn), POSENC_SHIM_A(fn, 6) a6
#define POSENC_SHIM_PARAMS_8(fn) POSENC_SHIM_PARAMS_7(fn), POSENC_SHIM_A(fn, 7) a7
#define POSENC_SHIM_PARAMS_9(fn) POSENC_SHIM_PARAMS_8(fn), POSENC_SHIM_A(fn, 8) a8
#define POSENC_SHIM_PARAMS_10(fn) POSENC_SHIM_PARAMS_9(fn), POSENC_SHIM_A(fn, 9) a9
#define POSENC_SHIM_PARAMS_11(fn) POSENC_SHIM_PARAMS_10(fn), POSENC_SHIM_A(fn, 10) a10
#define POSENC_SHIM_PARAMS_12(fn) POSENC_SHIM_PARAMS_11(fn), POSENC_SHIM_A(fn, 11) a11
#define POSENC_SHIM_PARAMS_13(fn) POSENC_SHIM_PARAMS_12(fn), POSENC_SHIM_A(fn, 12) a12
#define POSENC_SHIM_PARAMS_14(fn) POSENC_SHIM_PARAMS_13(fn), POSENC_SHIM_A(fn, 13) a13
#define POSENC_SHIM_ARGS_0
#define POSENC_SHIM_ARGS_1 a0
#define POSENC_SHIM_ARGS_2 POSENC_SHIM_ARGS_1, a1
#define POSENC_SHIM_ARGS_3 POSENC_SHIM_ARGS_2, a2
#define POSENC_SHIM_ARGS_4 POSENC_SHIM_ARGS_3, a3
#define POSENC_SHIM_ARGS_5 POSENC_SHIM_ARGS_4, a4
#define POSENC_SHIM_ARGS_6 POSENC_SHIM_ARGS_5, a5
#define POSENC_SHIM_ARGS_7 POSENC_SHIM_ARGS_6, a6
#define POSENC_SHIM_ARGS_8 POSENC_SHIM_ARGS_7, a7
#define POSENC_SHIM_ARGS_9 POSENC_SHIM_ARGS_8, a8
#define POSENC_SHIM_ARGS_10 POSENC_SHIM_ARGS_9, a9
#define POSENC_SHIM_ARGS_11 POSENC_SHIM_ARGS_10, a10
#define POSENC_SHIM_ARGS_12 POSENC_SHIM_ARGS_11, a11
#define POSENC_SHIM_ARGS_13 POSENC_SHIM_ARGS_12, a12
#define POSENC_SHIM_ARGS_14 POSENC_SHIM_ARGS_13, a13

/// Defines the C function `fn` of `n` parameters as a call through `table().fn`, where
/// `table()` returns the loaded library's function pointers (loading it if need be).
#define POSENC_SHIM_TRAMPOLINE(table, fn, n)                                                     \
  extern "C" ::posenc::shim::Signature<decltype(&::fn)>::Result fn(POSENC_SHIM_PARAMS_##n(fn)) { \
    static_assert(::posenc::shim::Signature<decltype(&::fn)>::arity == n,                        \
                  #fn ": its number of parameters in the shim list is wrong");                   \
    return table().fn(POSENC_SHIM_ARGS_##n);                                                     \
  }
