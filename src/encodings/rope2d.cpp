// Axial 2-D RoPE angles (RoPE-ViT axial form; reference/rope-landscape.md §8).

#include "posenc/encodings/rope2d.hpp"

#include <fmt/format.h>

#include <cmath>

#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"

namespace posenc {

std::vector<double> rope2d_freqs(int dim, double base) {
  if (dim <= 0 || dim % 4 != 0) {
    throw UsageError(fmt::format(
        "dim: 2-D RoPE needs a positive multiple of 4 (D/4 frequencies per axis), got {}", dim));
  }
  if (!(base > 0.0) || !std::isfinite(base)) {
    throw UsageError(fmt::format("base: must be a positive number, got {}", base));
  }
  // The seed's exponent arange(0, D, 4)[:D/4] / D equals 2k / (D/2) exactly (one
  // division of the same rational), so these are the default frequencies of width D/2.
  return default_inv_freq(base, dim / 2);
}

void rope2d_angles(std::int64_t idx, std::int64_t width, const std::vector<double>& freqs,
                   bool y_first, double* out) {
  const double x = static_cast<double>(idx % width);
  const double y = static_cast<double>(idx / width);
  const std::size_t q = freqs.size();
  double* first = out;
  double* second = out + q;
  const double a = y_first ? y : x;
  const double b = y_first ? x : y;
  for (std::size_t k = 0; k < q; ++k) {
    first[k] = a * freqs[k];
    second[k] = b * freqs[k];
  }
}

}  // namespace posenc
