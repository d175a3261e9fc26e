#pragma once
// Test inputs: a tensor of standard normal values from a fixed seed.

#include <random>
#include <utility>

#include "posenc/tensor.hpp"

namespace posenc {

inline Tensor random_tensor(Shape shape, unsigned seed, DType dt = DType::f64) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  Tensor t(dt, std::move(shape));
  for (std::size_t i = 0; i < t.numel(); ++i) t.set(i, nd(gen));
  return t;
}

}  // namespace posenc
