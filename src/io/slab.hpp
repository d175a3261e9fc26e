#pragma once
// Internal to the I/O sources and sinks: the arithmetic of slabs along an axis whose
// leading axes all have extent 1 (TensorSource::read_slab, TensorSink::write_slab).

#include <cstddef>
#include <cstdint>
#include <string>

#include "posenc/tensor.hpp"

namespace posenc::io_detail {

/// Extent of `axis` (1 for rank 0).
std::size_t slab_extent(const Shape& shape, std::size_t axis);

/// Throws std::logic_error unless `axis` is an axis of `shape` (0 for rank 0) and every
/// axis before it has extent 1.
void check_slab_axis(const Shape& shape, std::size_t axis);

/// Bytes of one entry along `axis` (C order): later extents times `itemsize`.
std::size_t slab_entry_bytes(const Shape& shape, std::size_t axis, std::size_t itemsize);

/// `count` entries along a valid `axis` expressed as entries along slab_axis(shape):
/// an axis before it has extent 1, so one of its entries is the whole tensor.
std::size_t slab_units(const Shape& shape, std::size_t axis, std::size_t count);

/// A read-only shared mapping of bytes [offset, offset + bytes) of an open file: the page
/// cache itself, advised sequential, registered with guard_mapped_input (a file that
/// shrinks while mapped ends posenc with one line naming `what`). Empty when `offset` is
/// not a multiple of `align` (the element size: the kernels load whole elements, and an
/// HDF5 dataset or a crafted NPY header may start anywhere), when the file is not a
/// regular file holding the whole range, or when it cannot be mapped.
class MappedFileRange {
 public:
  MappedFileRange() = default;
  MappedFileRange(int fd, std::uint64_t offset, std::size_t bytes, std::size_t align,
                  const std::string& what);
  ~MappedFileRange();
  MappedFileRange(MappedFileRange&& o) noexcept;
  MappedFileRange& operator=(MappedFileRange&& o) noexcept;
  MappedFileRange(const MappedFileRange&) = delete;
  MappedFileRange& operator=(const MappedFileRange&) = delete;
  bool empty() const { return base_ == nullptr; }
  /// The byte at `offset`.
  const std::byte* data() const { return static_cast<const std::byte*>(base_) + skip_; }

 private:
  void* base_ = nullptr;
  std::size_t len_ = 0, skip_ = 0;
  int guard_ = -1;
};

/// Reads file bytes [at, at + n) of `fd` into `dst` with pread (thread-safe), retrying
/// EINTR and short reads. A file that ends first is an InputError naming `what`: "truncated
/// data: expected `data_bytes` bytes, got M" (M: the data bytes the file holds, counted
/// from `data_at`, where the data begin); a read error is an InputError with the
/// system's message.
void pread_full(int fd, std::uint64_t at, void* dst, std::size_t n, const std::string& what,
                std::uint64_t data_at, std::uint64_t data_bytes);

/// The error of a file `fd` that ended at byte `reached` before the `data_bytes` of data
/// that start at `data_at`: an InputError whose byte count is what the file holds now
/// (several readers may meet the end, and the message must not depend on which did first).
[[noreturn]] void throw_truncated(int fd, const std::string& what, std::uint64_t data_at,
                                  std::uint64_t data_bytes, std::uint64_t reached);

/// Drops the page-table entries of the whole pages of [p, p + n) in a read-only file
/// mapping once they have been used: the pages stay in the page cache, but the
/// process's resident memory stays at what it is working on however large the file (a
/// later touch would simply map them again).
void release_mapped(const std::byte* p, std::size_t n);

}  // namespace posenc::io_detail
