#include "shim/shim.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

namespace posenc::shim {

void* open_library(const char* soname, const char* package, std::string* error) {
  // Never closed: both libraries keep global state for the life of the process. Bound
  // lazily, as a linked library is: binding all of libhdf5's dependencies (curl,
  // gnutls, krb5, ...) up front made loading it a quarter slower.
  void* lib = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) {
    *error = fmt::format("{} cannot be loaded (Debian package {})", soname, package);
  }
  return lib;
}

void* symbol(void* lib, const char* soname, const char* name, std::string* error) {
  void* p = dlsym(lib, name);
  if (p == nullptr) *error = fmt::format("{} has no symbol {}", soname, name);
  return p;
}

}  // namespace posenc::shim
