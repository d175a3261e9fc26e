#include "plot/graphics_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <string>

#include "posenc/error.hpp"

namespace posenc::plot_detail {

namespace {

// The libraries posenc was built against (their sonames, from CMakeLists.txt).
#ifndef POSENC_PLPLOT_SONAME
#define POSENC_PLPLOT_SONAME "libplplot.so.17"
#endif
#ifndef POSENC_CAIRO_SONAME
#define POSENC_CAIRO_SONAME "libcairo.so.2"
#endif

void* open_library(const char* soname, const char* package) {
  // Never closed: both keep global state (fonts, drivers) for the life of the process.
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    throw OutputError(fmt::format("cannot draw images: {} cannot be loaded (Debian package {})",
                                  soname, package));
  }
  return h;
}

template <class Fn>
void bind(void* lib, const char* lib_name, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr) {
    throw OutputError(fmt::format("cannot draw images: {} has no function {}", lib_name, name));
  }
}

GraphicsApi load() {
  GraphicsApi api;
  void* pl = open_library(POSENC_PLPLOT_SONAME, "libplplot17");
  void* ca = open_library(POSENC_CAIRO_SONAME, "libcairo2");
#define POSENC_BIND_PL(name) bind(pl, POSENC_PLPLOT_SONAME, #name, api.name);
#define POSENC_BIND_CA(name) bind(ca, POSENC_CAIRO_SONAME, #name, api.name);
  POSENC_PLPLOT_FUNCTIONS(POSENC_BIND_PL)
  POSENC_CAIRO_FUNCTIONS(POSENC_BIND_CA)
#undef POSENC_BIND_PL
#undef POSENC_BIND_CA
  return api;
}

}  // namespace

const GraphicsApi& gfx() {
  static std::mutex m;
  static GraphicsApi api;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(m);
  if (!loaded) {
    api = load();  // a failure leaves `loaded` false: the next call reports it again
    loaded = true;
  }
  return api;
}

}  // namespace posenc::plot_detail
