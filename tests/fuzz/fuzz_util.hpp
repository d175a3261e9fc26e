#pragma once
// Shared by the fuzz harnesses: how a harness reports a finding (anything but the
// documented errors), and a temporary file for parsers that read paths.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace posenc::fuzz {

/// A finding: the input broke a contract. Prints why and aborts, so libFuzzer (or the
/// corpus replay) saves and reports the input.
[[noreturn]] inline void finding(const std::string& why) {
  std::fprintf(stderr, "fuzz finding: %s\n", why.c_str());
  std::abort();
}

inline void expect(bool ok, const std::string& why) {
  if (!ok) finding(why);
}

/// Reads a fuzz input front to back (x86-64: little-endian); past its end every read
/// gives zeros.
struct Bytes {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t byte() { return n ? (--n, *p++) : 0; }
  std::uint64_t u64() {  // little-endian, as numpy's '<u8' writes it
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }
  double real() {  // the bytes of a little-endian double ('<f8')
    const std::uint64_t u = u64();
    double v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }
};

/// A file of this process holding `bytes` (rewritten on each call), for parsers that
/// take a path. Removed when the process exits.
inline std::string temp_file(const std::string& suffix, const std::uint8_t* bytes, std::size_t n) {
  static std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/posenc-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) finding("cannot create a temporary folder");
    static std::string keep = tmpl;
    std::atexit([] { std::system(("rm -rf '" + keep + "'").c_str()); });
    return tmpl;
  }();
  const std::string path = dir + "/input" + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (n > 0 && std::fwrite(bytes, 1, n, f) != n) || std::fclose(f) != 0) {
    finding("cannot write the temporary input");
  }
  return path;
}

}  // namespace posenc::fuzz
