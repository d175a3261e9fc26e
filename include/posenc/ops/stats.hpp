#pragma once
/// \file
/// Statistics of tensor values as `posenc inspect` reports them: counts of NaN, ±Inf
/// and zeros, min/max (with the flat index of their first occurrence), absmax, and
/// sum, mean and population std over the finite values. Values stream in blocks, so
/// tensors larger than memory work.
///
///     StatsAccumulator acc;
///     acc.add(xt::cast<double>(block0));   // any 1-D xtensor expression, C order
///     acc.add(xt::cast<double>(block1));
///     TensorStats s = acc.result();

#include <algorithm>
#include <cstddef>
#include <limits>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "posenc/io/ref.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// Statistics of a sequence of values. min, max, absmax, sum, mean and std are over
/// the finite values and NaN when there are none.
struct TensorStats {
  std::size_t count = 0;                                  ///< all values
  std::size_t finite = 0;                                 ///< neither NaN nor ±Inf
  std::size_t nan = 0;                                    ///< NaN values
  std::size_t posinf = 0;                                 ///< +Inf values
  std::size_t neginf = 0;                                 ///< -Inf values
  std::size_t zeros = 0;                                  ///< values equal to 0 (either sign)
  double min = std::numeric_limits<double>::quiet_NaN();  ///< smallest finite value
  double max = std::numeric_limits<double>::quiet_NaN();  ///< largest finite value
  std::size_t argmin = 0;                                 ///< flat index (C order) of the first min
  std::size_t argmax = 0;                                 ///< flat index (C order) of the first max
  double absmax = std::numeric_limits<double>::quiet_NaN();  ///< largest finite |value|
  double sum = std::numeric_limits<double>::quiet_NaN();     ///< sum of the finite values
  double mean = std::numeric_limits<double>::quiet_NaN();    ///< sum / finite
  double std = std::numeric_limits<double>::quiet_NaN();     ///< population (ddof 0)
};

/// Accumulates TensorStats over blocks of values given in order.
///
/// Sum and spread are exact enough to match numpy's pairwise float64 mean/std to about
/// 1e-15 relative: each block is summed in two passes (mean, then squared deviations
/// from it) in long double, and blocks merge with Chan et al.'s update. A naive
/// float64 running sum (or xt::mean of a float32 tensor, which accumulates in
/// float) drifts by O(n·eps); the one-pass textbook variance also cancels
/// catastrophically when the mean is large against the spread. The result depends on
/// how values are split into blocks only through the merge's last-bit rounding.
class StatsAccumulator {
 public:
  /// Adds the next block of values: `values` is a 1-D xtensor expression of doubles
  /// (or anything xt::cast<double> accepts), read twice.
  template <class E>
  void add(const xt::xexpression<E>& values);

  /// The same for `n` values stored as `dtype` at `values` (as Tensor::get reads them);
  /// f16, bf16, f32 and f64 are converted chunk by chunk with plain or vectorised loops.
  void add(DType dtype, const std::byte* values, std::size_t n);

  /// The statistics of everything added so far.
  TensorStats result() const;

 private:
  static constexpr std::size_t kChunk = 8192;  // values converted at a time (L1/L2)

  void scan(const xt::xtensor<double, 1>& chunk);    // counts, extremes, block sum
  void spread(const xt::xtensor<double, 1>& chunk);  // squared deviations
  void merge_block();
  // Adds a block of n values in two passes over chunks; load(lo, hi) puts values
  // [lo, hi) of the block into chunk_.
  template <class Load>
  void add_block(std::size_t n, Load&& load);
  // Values [lo, hi) of those stored as `dtype` at `values` into chunk_.
  void load_chunk(DType dtype, const std::byte* values, std::size_t lo, std::size_t hi);

  xt::xtensor<double, 1> chunk_;
  std::size_t count_ = 0, finite_ = 0, nan_ = 0, posinf_ = 0, neginf_ = 0, zeros_ = 0;
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
  std::size_t argmin_ = 0, argmax_ = 0;
  long double mean_ = 0, m2_ = 0, sum_ = 0;
  // The block being added.
  std::size_t block_finite_ = 0;
  long double block_sum_ = 0, block_mean_ = 0, block_m2_ = 0;
};

template <class Load>
void StatsAccumulator::add_block(std::size_t n, Load&& load) {
  block_finite_ = 0;
  block_sum_ = block_m2_ = 0;
  // Chunks small enough to stay in cache while every statistic passes over them.
  for (std::size_t i = 0; i < n; i += kChunk) {
    load(i, std::min(n, i + kChunk));
    scan(chunk_);
  }
  if (block_finite_ == 0) return;
  block_mean_ = block_sum_ / block_finite_;
  for (std::size_t i = 0; i < n; i += kChunk) {
    load(i, std::min(n, i + kChunk));
    spread(chunk_);
  }
  merge_block();
}

template <class E>
void StatsAccumulator::add(const xt::xexpression<E>& values) {
  const auto& v = values.derived_cast();
  add_block(v.size(), [&](std::size_t lo, std::size_t hi) {
    chunk_ = xt::cast<double>(xt::view(v, xt::range(lo, hi)));
  });
}

/// Default bytes read per slab when streaming.
constexpr std::size_t kStatsSlabBytes = std::size_t{16} << 20;

/// Statistics of a selection and its leading values.
struct SelectionSummary {
  TensorStats stats;  ///< over the whole selection
  Tensor head;        ///< the first selected values (C order of the selection), source dtype, 1-D
};

/// Reads the elements `sel` selects from `src` (resolved against src.info().shape) in
/// slabs of about `slab_bytes` along the first axis whose extent is not 1, reading only
/// the entries of that axis the selection takes; returns their statistics and the
/// first `head` of them (as stored, so f16/bf16 and 64-bit integers stay exact).
/// Memory stays near two slabs whatever the tensor's size. Streams (stdin) need a
/// selection that does not step backwards along that axis. Throws InputError naming
/// the source on short or malformed data.
SelectionSummary summarize(TensorSource& src, const Selection& sel, std::size_t head,
                           std::size_t slab_bytes = kStatsSlabBytes);

/// The same for a tensor in memory (no copy of the data; the same blocks as a file of
/// that shape, so the results are identical).
SelectionSummary summarize(const Tensor& t, const Selection& sel, std::size_t head,
                           std::size_t slab_bytes = kStatsSlabBytes);

}  // namespace posenc
