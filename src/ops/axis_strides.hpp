#pragma once
// Element strides of a C-ordered tensor by axis letter. Internal to the library.

#include <cstddef>
#include <string>

#include "posenc/tensor.hpp"

namespace posenc {

struct AxisStrides {
  std::ptrdiff_t b = 0, h = 0, s = 0, d = 0;
};

/// The element stride of each axis letter of `axes` (b, h, s, d) in a C-ordered tensor of
/// `shape`; letters absent from `axes` get 0.
inline AxisStrides axis_strides(const Shape& shape, const std::string& axes) {
  AxisStrides st;
  std::ptrdiff_t stride = 1;
  for (std::size_t i = axes.size(); i-- > 0;) {
    switch (axes[i]) {
      case 'b':
        st.b = stride;
        break;
      case 'h':
        st.h = stride;
        break;
      case 's':
        st.s = stride;
        break;
      case 'd':
        st.d = stride;
        break;
    }
    stride *= static_cast<std::ptrdiff_t>(shape[i]);
  }
  return st;
}

}  // namespace posenc
