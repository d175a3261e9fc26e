#pragma once
/// \file
/// A strict NPY reader and an np.save-compatible writer.
///
/// Our own rather than xtensor 0.24's xnpy.hpp, which is unsafe on bad input: it reads
/// the header length through signed chars, does not check the shape product for
/// overflow, returns uninitialised memory for truncated data, has no float16, byte
/// swapping or format 3.0, and does not check its writes.
///
/// Reading treats files as untrusted: the magic, version (1.0, 2.0, 3.0), header length
/// (capped before anything is allocated), dict grammar (exactly `descr`,
/// `fortran_order`, `shape` in any order), dtype and shape are validated, the shape
/// product and byte size are overflow-checked, and short or over-long data are errors.
/// Nothing is ever unpickled. Big-endian data are byte-swapped and Fortran-ordered data
/// transposed to C order.
///
/// Writing produces the exact bytes of numpy 1.24's `np.save` for C-ordered arrays
/// (version 1.0, or 2.0 when the header exceeds 65535 bytes; 64-byte alignment; the
/// growth-axis padding). NPY has no bfloat16 type: writing bf16 is a UsageError.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// Largest header (the dict text after HEADER_LEN) the reader accepts. numpy itself
/// refuses more than 10000 characters unless told otherwise; posenc allows up to
/// 1 MiB so that very high-rank arrays written as NPY 2.0 still load, while a lying
/// HEADER_LEN cannot force a large allocation.
inline constexpr std::size_t kNpyMaxHeaderLen = std::size_t{1} << 20;

/// A source of bytes that may deliver fewer bytes than asked (pipes, sockets).
class ByteReader {
 public:
  virtual ~ByteReader() = default;
  /// Reads up to `n` bytes into `dst`; returns how many (0 only at end of data).
  /// Throws InputError on a read error.
  virtual std::size_t read_some(void* dst, std::size_t n) = 0;
};

/// Reads from a file descriptor (retrying EINTR). Does not own the descriptor.
class FdReader final : public ByteReader {
 public:
  /// Reads `fd`; `what` names it in messages.
  FdReader(int fd, std::string what) : fd_(fd), what_(std::move(what)) {}
  std::size_t read_some(void* dst, std::size_t n) override;

 private:
  int fd_;
  std::string what_;
};

/// Reads exactly `n` bytes, looping over short reads; returns the count actually read
/// (less than `n` only at end of data).
std::size_t read_full(ByteReader& r, void* dst, std::size_t n);

/// What an NPY header says.
struct NpyHeader {
  int major = 1;                ///< format version: 1, 2 or 3
  int minor = 0;                ///< format minor version (0)
  DType dtype = DType::f32;     ///< the element type `descr` names
  std::string descr;            ///< as written, e.g. "<f4"
  bool swap = false;            ///< stored in the other byte order than this machine's
  bool fortran_order = false;   ///< stored in Fortran (column-major) order
  Shape shape;                  ///< extents as written
  std::size_t numel = 0;        ///< element count of `shape`
  std::size_t data_bytes = 0;   ///< numel times the element size
  std::size_t data_offset = 0;  ///< bytes before the data (magic + length + header)
};

/// Reads and validates the magic, version and header from `r`, leaving `r` at the
/// first data byte. `what` names the input in messages ("x.npy: ..."). When
/// `file_size` is known (regular files) the header length and the data size are
/// checked against it before any allocation: a short file gives "truncated data:
/// expected N bytes, got M" and extra bytes give "unexpected N trailing bytes".
NpyHeader read_npy_header(ByteReader& r, const std::string& what,
                          std::optional<std::uint64_t> file_size = std::nullopt);

/// Parses the dict text of an NPY header (the part after HEADER_LEN). Exposed for tests.
NpyHeader parse_npy_dict(const std::string& text, const std::string& what);

/// The descr numpy writes for `t` on this machine ("<f4", "|u1", "|b1"). Throws
/// UsageError for bf16 (NPY has no bfloat16), naming `what`.
std::string npy_descr(DType t, const std::string& what);

/// The complete header bytes (magic through the final newline) np.save writes for a
/// C-ordered array of `dtype` and `shape`. Throws UsageError for bf16.
std::string npy_header_bytes(DType dtype, const Shape& shape, const std::string& what);

/// Reads every row of `src` into one tensor. Streams (NPY on a pipe) are read in
/// pieces of 64 MiB first and the tensor is allocated only when all data have
/// arrived, so a header claiming a huge size on a short pipe gives "truncated data"
/// rather than a huge allocation.
Tensor read_all_rows(TensorSource& src);

/// Reads a whole NPY tensor from `r` (data in C order, native byte order), then checks
/// that nothing follows the data.
Tensor read_npy(ByteReader& r, const std::string& what);

/// Opens an NPY file (or "-" for standard input) as a row source. Regular files are
/// read with positioned reads straight into the caller's buffer; standard input and
/// pipes are read forward only.
std::unique_ptr<TensorSource> open_npy_source(const std::string& path, const std::string& what);

/// A row source over an arbitrary byte stream (forward only). Used for stdin and in
/// tests with readers that deliver short reads.
std::unique_ptr<TensorSource> open_npy_stream(std::unique_ptr<ByteReader> r,
                                              const std::string& what);

/// Reverses the byte order of `count` elements of `size` bytes at `p` in place.
void byteswap_elements(void* p, std::size_t count, std::size_t size) noexcept;

}  // namespace posenc
