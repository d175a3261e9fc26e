#pragma once
/// \file
/// The Tensor type: an owned, C-ordered, native-endian buffer of one DType with a shape.
/// Every file format reads into and writes from it; the numeric code works on typed
/// pointers (`data<T>()`).
///
/// Not an xt::xarray<T>: the element type comes from the file at run time (15 dtypes,
/// f16, bf16 and fp8 among them, which xtensor has no arithmetic type for, and which must
/// round-trip byte for byte), and buffers are 64-byte aligned so the kernels and the
/// streaming pipeline can reuse them for slabs.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace posenc {

/// Element types posenc reads and writes. Floats are computed in f64/f32; f16 and bf16
/// are storage types converted with round-to-nearest-even; f8e4m3fn and f8e5m2 are the
/// 8-bit floats torch.float8_e4m3fn / torch.float8_e5m2 (posenc/fp8.hpp), stored as one
/// byte and converted exactly as torch's `.to()` converts them.
enum class DType : std::uint8_t {
  f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, b1, f8e4m3fn, f8e5m2
};

/// Extents of a tensor's axes, outermost first (C order); empty for a scalar.
using Shape = std::vector<std::size_t>;

/// Bytes per element of `t`.
std::size_t dtype_size(DType t) noexcept;
/// Short name used on the command line and in messages: "f32", "bf16", "i64", "bool";
/// the fp8 types by torch's names, "float8_e4m3fn" and "float8_e5m2".
std::string_view dtype_name(DType t) noexcept;
/// Parses a name from `dtype_name` (also numpy spellings "float32", "float16", "int64",
/// "bool", "bfloat16"; "e4m3fn", "e5m2" for the fp8 types). Throws UsageError naming
/// `what` when unknown.
DType parse_dtype(std::string_view name, std::string_view what = "--dtype");
/// Whether `t` is a floating type: f16, bf16, f32, f64 or an fp8 type.
bool is_float(DType t) noexcept;
bool is_integer(DType t) noexcept;  ///< signed or unsigned integer, not bool
bool is_fp8(DType t) noexcept;      ///< f8e4m3fn or f8e5m2

/// "(2, 3, 4)" as numpy prints shapes.
std::string shape_str(const Shape& s);

/// A byte count for messages in binary units, as --max-memory takes them: "512 bytes",
/// "1.5 KiB", "8.0 GiB".
std::string bytes_str(std::size_t bytes);

/// Number of elements of `s`. Throws InputError naming `what` if the product or its
/// byte size (with `itemsize`) overflows, before anything is allocated.
std::size_t checked_numel(const Shape& s, std::size_t itemsize, std::string_view what);

/// IEEE binary16 / bfloat16 conversions, round to nearest even. Narrowing makes a NaN
/// the quiet NaN of its sign (f16 0x7e00, bf16 0x7fc0; payload dropped); widening is exact.
/// Portable bit manipulation (clang-14 has no _Float16 on x86).
/// f32 → f16 bits, rounded to nearest even (overflow gives infinity).
std::uint16_t float_to_half(float f) noexcept;
/// f16 bits → f32, exact.
float half_to_float(std::uint16_t h) noexcept;
/// f32 → bf16 bits, rounded to nearest even.
std::uint16_t float_to_bf16(float f) noexcept;
/// bf16 bits → f32, exact.
float bf16_to_float(std::uint16_t h) noexcept;
/// f64 → f16 bits rounded once (no double rounding through f32).
std::uint16_t double_to_half(double d) noexcept;
/// f64 → bf16 bits rounded once (no double rounding through f32).
std::uint16_t double_to_bf16(double d) noexcept;

/// A 64-byte aligned, uninitialised byte buffer (large tensors are filled by a read,
/// so zeroing them first would be a wasted pass over memory).
class Buffer {
 public:
  Buffer() = default;
  /// `bytes` uninitialised bytes (std::bad_alloc when they cannot be had).
  explicit Buffer(std::size_t bytes);
  /// `bytes` bytes at `data`, owned elsewhere: not freed by the buffer.
  static Buffer borrow(std::byte* data, std::size_t bytes) noexcept;
  /// The first byte, 64-byte aligned (a borrowed buffer: as aligned as its memory);
  /// nullptr for an empty buffer.
  std::byte* data() noexcept { return ptr_.get(); }
  /// The first byte, 64-byte aligned; nullptr for an empty buffer.
  const std::byte* data() const noexcept { return ptr_.get(); }
  /// The size in bytes.
  std::size_t size() const noexcept { return size_; }

 private:
  struct Free {
    Free() noexcept : owned(true) {}
    explicit Free(bool own) noexcept : owned(own) {}
    bool owned;  ///< false for borrowed memory
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, Free> ptr_;
  std::size_t size_ = 0;
};

/// An owned tensor in C order and native byte order.
class Tensor {
 public:
  Tensor() = default;
  /// Allocates uninitialised storage. Throws InputError if the size overflows.
  Tensor(DType dtype, Shape shape);
  /// A tensor over memory it does not own (C order, native byte order, aligned to the
  /// element size; not necessarily to 64 bytes), such as a caller's array: `data` must
  /// hold the elements and outlive the tensor. The library's functions read their
  /// const Tensor& inputs only, so a borrowed input is never written. Throws InputError
  /// if the size overflows.
  static Tensor borrow(DType dtype, Shape shape, void* data);

  DType dtype() const noexcept { return dtype_; }              ///< element type
  const Shape& shape() const noexcept { return shape_; }       ///< extents, C order
  std::size_t ndim() const noexcept { return shape_.size(); }  ///< rank (0: a scalar)
  std::size_t numel() const noexcept { return numel_; }        ///< element count
  std::size_t nbytes() const noexcept { return numel_ * dtype_size(dtype_); }  ///< data size
  std::byte* bytes() noexcept { return buf_.data(); }                          ///< the raw data
  const std::byte* bytes() const noexcept { return buf_.data(); }              ///< the raw data

  /// Typed access; T must match the storage size of dtype() (uint16_t for f16/bf16,
  /// uint8_t for bool and the fp8 types).
  template <class T>
  T* data() noexcept {
    return reinterpret_cast<T*>(buf_.data());
  }
  /// Typed access, read-only (as data()).
  template <class T>
  const T* data() const noexcept {
    return reinterpret_cast<const T*>(buf_.data());
  }

  /// Changes the shape without moving data (same element count required).
  void reshape(Shape shape);

  /// Element i (flat, C order) converted to double.
  double get(std::size_t i) const noexcept;
  /// Stores v (rounded to the dtype: nearest even for floats, truncation toward zero
  /// for integers as numpy's astype does) at flat index i.
  void set(std::size_t i, double v) noexcept;

  /// A converted copy, as numpy's astype: see posenc::cast (ops/cast.hpp).
  Tensor astype(DType to) const;

  /// Whether a float element is NaN or ±Inf (-Inf not counted when `allow_neg_inf`,
  /// for additive masks). Always false for integer and bool types.
  bool has_nonfinite(bool allow_neg_inf = false) const noexcept;

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  std::size_t numel_ = 0;
  Buffer buf_;
};

}  // namespace posenc
