#pragma once
// Slabs for the streaming reductions (stats, compare): the same loop serves a
// TensorSource (each slab read into one reused buffer) and a Tensor in memory (a
// pointer into it, no copy).
#include <cstddef>
#include <functional>

#include <fmt/format.h>

#include "posenc/error.hpp"

#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc::detail {

/// Returns the bytes of `count` entries from `first` along `axis` (every axis before
/// it has extent 1, so they are one C-ordered block), valid until the next call.
using FetchSlab =
    std::function<const std::byte*(std::size_t axis, std::size_t first, std::size_t count)>;

/// Bytes of one entry along `axis` of a C-ordered tensor of `shape`.
inline std::size_t entry_bytes(const Shape& shape, std::size_t axis, DType t) {
  std::size_t bytes = dtype_size(t);
  for (std::size_t ax = axis + 1; ax < shape.size(); ++ax) bytes *= shape[ax];
  return bytes;
}

/// Reads slabs from `src` into `slab` (grown as needed).
inline FetchSlab fetch_from(TensorSource& src, Buffer& slab) {
  std::size_t next = 0;  // entries before this one have gone by on a stream
  return [&src, &slab, next](std::size_t axis, std::size_t first, std::size_t count) mutable {
    const TensorInfo& info = src.info();
    if (!src.seekable() && first < next) {
      throw InputError(fmt::format(
          "the input is a stream, read forward only, but the selection goes back to entry {} "
          "of axis {} after entry {}: put the index list in increasing order, or save the "
          "input to a file first",
          first, axis, next - 1));
    }
    next = first + count;
    const std::size_t bytes = count * entry_bytes(info.shape, axis, info.dtype);
    // A slab is at least one entry along `axis`; a header may claim entries of any
    // size, so none larger than this is allocated before its data is seen.
    constexpr std::size_t kMaxSlab = std::size_t{1} << 30;
    if (bytes > kMaxSlab) {
      throw InputError(fmt::format(
          "one entry along axis {} holds {}, more than the {} read at once (select part of "
          "it with a slice)",
          axis, bytes_str(bytes), bytes_str(kMaxSlab)));
    }
    if (slab.size() < bytes) slab = Buffer(bytes);
    src.read_slab(axis, first, count, slab.data());
    return static_cast<const std::byte*>(slab.data());
  };
}

/// Points into `t`.
inline FetchSlab fetch_from(const Tensor& t) {
  return [&t](std::size_t axis, std::size_t first, std::size_t) {
    return t.bytes() + first * entry_bytes(t.shape(), axis, t.dtype());
  };
}

inline TensorInfo info_of(const Tensor& t) {
  TensorInfo info;
  info.dtype = t.dtype();
  info.shape = t.shape();
  return info;
}

}  // namespace posenc::detail
