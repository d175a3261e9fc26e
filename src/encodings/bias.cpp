// ALiBi slopes and biases, Shaw relative indices and T5 buckets
// (reference/rope-landscape.md §6, §7).

#include "posenc/encodings/bias.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "posenc/error.hpp"

namespace posenc {

std::vector<double> alibi_slopes(int heads, double max_bias) {
  if (heads <= 0) throw UsageError(fmt::format("heads: must be positive, got {}", heads));
  // Models have tens of heads; millions are a typo, and a slope vector of 2^31 would
  // be 16 GiB.
  if (heads > kMaxAlibiHeads) {
    throw UsageError(fmt::format("heads: at most {} heads, got {}", kMaxAlibiHeads, heads));
  }
  if (!(max_bias > 0.0) || !std::isfinite(max_bias)) {
    throw UsageError(fmt::format("max_bias: must be a positive number, got {}", max_bias));
  }
  // Press's get_slopes: the n' = 2^floor(log2 n) geometric slopes 2^(-8(h+1)/n'), then
  // for the remaining heads every other slope of the 2n' sequence,
  // 2^(-8(2k+1)/(2n')). ggml's max_bias replaces the 8.
  // In 64 bits: doubling an int past 2^30 overflows and never ends the loop.
  std::int64_t n2 = 1;
  while (n2 * 2 <= heads) n2 *= 2;
  std::vector<double> s(static_cast<std::size_t>(heads));
  for (int h = 0; h < heads; ++h) {
    const double n = static_cast<double>(n2);
    double e = h < n2 ? max_bias * (h + 1) / n : (max_bias / 2.0) * (2.0 * (h - n) + 1.0) / n;
    s[static_cast<std::size_t>(h)] = std::exp2(-e);
  }
  return s;
}

double alibi_bias(AlibiVariant v, double slope, std::int64_t i, std::int64_t j, std::int64_t q_len,
                  std::int64_t k_len) {
  switch (v) {
    case AlibiVariant::causal:
      return -slope * static_cast<double>(i - j);
    case AlibiVariant::symmetric:
      return -slope * static_cast<double>(std::llabs(i - j));
    case AlibiVariant::fairseq:
      return slope * static_cast<double>(j);
    case AlibiVariant::bottom_right:
      return -slope * static_cast<double>(std::llabs(i + k_len - q_len - j));
  }
  return 0.0;
}

std::int64_t RelativeWindow::index(std::int64_t i, std::int64_t j) const {
  const std::int64_t d = q_minus_k ? i - j : j - i;
  if (zero_beyond && (d < -left || d > right)) return -1;
  return std::clamp(d, -left, right) + left;
}

std::int64_t relative_index(std::int64_t i, std::int64_t j, std::int64_t max_distance,
                            bool q_minus_k) {
  return RelativeWindow{max_distance, max_distance, q_minus_k, false}.index(i, j);
}

std::int64_t t5_bucket(std::int64_t relative_position, bool bidirectional, int num_buckets,
                       int max_distance) {
  std::int64_t bucket = 0;
  std::int64_t rp = relative_position;
  if (bidirectional) {
    num_buckets /= 2;
    if (rp > 0) bucket += num_buckets;
    rp = rp < 0 ? -rp : rp;
  } else {
    rp = rp < 0 ? -rp : 0;
  }
  const int max_exact = num_buckets / 2;
  if (max_exact < 1 || max_distance <= max_exact) {
    throw UsageError(fmt::format(
        "buckets/max_distance: need at least {} buckets and max_distance above {}",
        bidirectional ? 4 : 2, max_exact));
  }
  if (rp < max_exact) return bucket + rp;
  // HF computes the logarithmic part in float32 (relative_position.float()); doing the
  // same keeps bucket boundaries identical to the model's.
  float x = std::log(static_cast<float>(rp) / static_cast<float>(max_exact)) /
            static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact)) *
            static_cast<float>(num_buckets - max_exact);
  std::int64_t large = max_exact + static_cast<std::int64_t>(x);
  large = std::min<std::int64_t>(large, num_buckets - 1);
  return bucket + large;
}

}  // namespace posenc
