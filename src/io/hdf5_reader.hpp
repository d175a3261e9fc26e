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
