#pragma once
// Internal to the HDF5 reader: libhdf5 calls in this process (hdf5.cpp), used by the
// sandbox child (hdf5_sandbox.cpp) and by the benchmark that measures the sandbox.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "posenc/io/ref.hpp"

namespace posenc::hdf5_detail {

/// "/a/b" from "a/b", "/a//b/", ...; "" stays "".
std::string normalize_name(const std::string& name);

/// Seconds from the environment variable `name` (decimal, `lo` to 86400), or `fallback`
/// when it is unset or empty. UsageError naming the variable otherwise.
int env_seconds(const char* name, int fallback, int lo);

/// Why libhdf5 cannot be used in this process, or "" if it can. The posenc executable
/// loads libhdf5 on first use (src/shim/hdf5.cpp) and this loads it; the library as
/// installed links libhdf5, and this is always "".
std::string hdf5_unavailable();

/// Address space a sandbox child may use beyond what it inherited from the parent.
constexpr std::size_t kSandboxHeadroom = std::size_t{1} << 30;

/// Held by a thread while it calls libhdf5 in this process (every entry point of the
/// HDF5 writer takes one through init_hdf5); nested scopes in one thread count once, and
/// in a forked child it does nothing. fork_for_libhdf5 waits until no other thread holds
/// one, and new scopes wait for a fork in progress.
class Hdf5CallScope {
 public:
  Hdf5CallScope();
  ~Hdf5CallScope();
  Hdf5CallScope(const Hdf5CallScope&) = delete;
  Hdf5CallScope& operator=(const Hdf5CallScope&) = delete;
};

/// Sets the calling thread's Hdf5CallScope aside while it waits for something (a child,
/// a lock another thread holds) outside libhdf5, so that other threads can fork
/// meanwhile.
class Hdf5CallPause {
 public:
  Hdf5CallPause();
  ~Hdf5CallPause();
  Hdf5CallPause(const Hdf5CallPause&) = delete;
  Hdf5CallPause& operator=(const Hdf5CallPause&) = delete;

 private:
  int depth_;
};

/// fork(2) at a moment when no thread of this process is inside libhdf5: libhdf5 (built
/// thread-safe) holds a global lock during each call, and a child forked meanwhile would
/// inherit it locked by a thread that does not exist there and wait for ever (the
/// watchdog's "did not finish" after POSENC_HDF5_TIMEOUT seconds), or inherit state
/// another thread was changing. The calling thread's own scope is set aside meanwhile.
pid_t fork_for_libhdf5();

/// In a forked child, first thing: closes every descriptor but 0, 1, 2 and `keep` (the
/// child's end of its pipe or socket to the parent). The files it works on it opens by
/// name.
void close_inherited_fds(int keep);

/// Everything a forked child changes about itself before libhdf5 touches a file: it dies
/// with its parent and by plain signals (no inherited handlers, no sanitizer hooks), its
/// stdout/stderr go to /dev/null (POSENC_HDF5_DEBUG keeps them), no core files, an
/// address-space limit (not in AddressSanitizer builds), and no file writes unless
/// `may_write`. Shared by the reader's child (hdf5_sandbox.cpp) and the appender's
/// (hdf5_append.cpp).
void enter_sandbox_child(pid_t parent, bool may_write);

/// One dataset opened with libhdf5 in the calling process.
class DatasetReader {
 public:
  virtual ~DatasetReader() = default;
  virtual const TensorInfo& info() const = 0;
  /// Elements [first, first + count) in C order into `dst` (info().dtype, native byte
  /// order). Throws InputError.
  virtual void read_flat(std::size_t first, std::size_t count, void* dst) = 0;
  /// Where the dataset's bytes start in its file when they are info().dtype's C-order,
  /// native-byte-order bytes as they are (contiguous storage, allocated, no filters, the
  /// file type equal to the memory type), so that they can be mapped, with the device and
  /// inode of the file libhdf5 has open; `offset` is kNotRaw otherwise.
  static constexpr std::uint64_t kNotRaw = ~std::uint64_t{0};
  struct RawBytes {
    std::uint64_t offset = kNotRaw, dev = 0, ino = 0;
  };
  virtual RawBytes raw_bytes() const { return {}; }
};

/// Opens `ref.dataset` of `ref.path` (validated as open_hdf5_source describes); reads
/// the attributes only when `attrs`. Throws InputError.
std::unique_ptr<DatasetReader> open_dataset(const TensorRef& ref, bool attrs);

/// The datasets of a file, as list_hdf5_datasets.
std::vector<std::string> list_datasets(const std::string& path);

/// A TensorSource over `r` in this process: no sandbox (benchmarks only).
std::unique_ptr<TensorSource> in_process_source(std::unique_ptr<DatasetReader> r);

}  // namespace posenc::hdf5_detail
