#pragma once
// From a run-time DType to typed xtensor code: `visit_dtype(t, f)` calls
// f(DTypeTag<D>{}) with D the compile-time dtype, so one template handles all 15.
// `storage_t<D>` is the C++ type a Tensor stores (uint16_t for f16/bf16, uint8_t for
// bool and fp8) and `as_double<D>(raw)` the lazy xtensor expression of the values as doubles,
// converted exactly as Tensor::get does; `saturate_to<I>` the float -> integer rule.
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <xtensor/xoperation.hpp>
#include <xtensor/xvectorize.hpp>

#include "posenc/fp8.hpp"
#include "posenc/tensor.hpp"

namespace posenc::detail {

template <DType D>
using DTypeTag = std::integral_constant<DType, D>;

template <DType D>
struct StorageOf;
// clang-format off
template <> struct StorageOf<DType::f16> { using type = std::uint16_t; };
template <> struct StorageOf<DType::bf16> { using type = std::uint16_t; };
template <> struct StorageOf<DType::f32> { using type = float; };
template <> struct StorageOf<DType::f64> { using type = double; };
template <> struct StorageOf<DType::i8> { using type = std::int8_t; };
template <> struct StorageOf<DType::i16> { using type = std::int16_t; };
template <> struct StorageOf<DType::i32> { using type = std::int32_t; };
template <> struct StorageOf<DType::i64> { using type = std::int64_t; };
template <> struct StorageOf<DType::u8> { using type = std::uint8_t; };
template <> struct StorageOf<DType::u16> { using type = std::uint16_t; };
template <> struct StorageOf<DType::u32> { using type = std::uint32_t; };
template <> struct StorageOf<DType::u64> { using type = std::uint64_t; };
template <> struct StorageOf<DType::b1> { using type = std::uint8_t; };
template <> struct StorageOf<DType::f8e4m3fn> { using type = std::uint8_t; };
template <> struct StorageOf<DType::f8e5m2> { using type = std::uint8_t; };
// clang-format on

template <DType D>
using storage_t = typename StorageOf<D>::type;

template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f16:
      return f(DTypeTag<DType::f16>{});
    case DType::bf16:
      return f(DTypeTag<DType::bf16>{});
    case DType::f32:
      return f(DTypeTag<DType::f32>{});
    case DType::f64:
      return f(DTypeTag<DType::f64>{});
    case DType::i8:
      return f(DTypeTag<DType::i8>{});
    case DType::i16:
      return f(DTypeTag<DType::i16>{});
    case DType::i32:
      return f(DTypeTag<DType::i32>{});
    case DType::i64:
      return f(DTypeTag<DType::i64>{});
    case DType::u8:
      return f(DTypeTag<DType::u8>{});
    case DType::u16:
      return f(DTypeTag<DType::u16>{});
    case DType::u32:
      return f(DTypeTag<DType::u32>{});
    case DType::u64:
      return f(DTypeTag<DType::u64>{});
    case DType::b1:
      return f(DTypeTag<DType::b1>{});
    case DType::f8e4m3fn:
      return f(DTypeTag<DType::f8e4m3fn>{});
    case DType::f8e5m2:
      return f(DTypeTag<DType::f8e5m2>{});
  }
  throw std::logic_error("unknown dtype");
}

/// The values of `raw` (an expression of storage_t<D>) as doubles, lazily.
template <DType D, class E>
auto as_double(E&& raw) {
  if constexpr (D == DType::f16) {
    return xt::vectorize([](std::uint16_t h) { return static_cast<double>(half_to_float(h)); })(
        std::forward<E>(raw));
  } else if constexpr (D == DType::bf16) {
    return xt::vectorize([](std::uint16_t h) { return static_cast<double>(bf16_to_float(h)); })(
        std::forward<E>(raw));
  } else if constexpr (D == DType::f8e4m3fn || D == DType::f8e5m2) {
    const float* table =
        fp8_table(D == DType::f8e4m3fn ? Fp8Format::e4m3fn : Fp8Format::e5m2);
    return xt::vectorize([table](std::uint8_t c) { return static_cast<double>(table[c]); })(
        std::forward<E>(raw));
  } else if constexpr (D == DType::b1) {
    // A stored bool byte other than 0 is true (numpy reads any nonzero byte as True).
    return xt::cast<double>(xt::not_equal(std::forward<E>(raw), std::uint8_t{0}));
  } else {
    return xt::cast<double>(std::forward<E>(raw));
  }
}

/// Float -> integer as numpy's astype for in-range values: truncation toward zero.
/// NaN gives 0 and out-of-range values saturate, where numpy's result is undefined
/// behaviour of the C cast.
template <class I>
I saturate_to(double v) noexcept {
  if (std::isnan(v)) return 0;
  const double t = std::trunc(v);
  if (t <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (t >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(t);
}

}  // namespace posenc::detail
