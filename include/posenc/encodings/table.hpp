#pragma once
/// \file
/// Streaming an encoding table to a TensorSink: the table is described by its shape and
/// a function computing one line (a vector along the last axis) in float64; lines are
/// computed in parallel a block of axis-0 rows at a time, converted to the output dtype
/// and written, so memory stays bounded by the block size however long the table is.

#include <cstddef>
#include <functional>

#include "posenc/io/part.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// A table's shape and how to compute each line of it (in any order, in parallel).
struct TableSpec {
  Shape shape;  ///< rank >= 1; the last axis is the line
  /// Fills line `line` (flat index over all axes but the last; 0 for a rank-1 table)
  /// with shape.back() float64 values. Called concurrently from several threads.
  std::function<void(std::size_t line, double* out)> line;
  /// -inf is a value of this table (a mask); NaN and other infinities never are.
  bool allow_neg_inf = false;
};

/// Share `p` of table `t` cut along `axis` (every axis before which has extent 1; see
/// io/part.hpp): the same values as the whole table's entries there, computed alone.
TableSpec table_part(const TableSpec& t, const Part& p, std::size_t axis);

/// Converts `n` float64 values to `dtype` (floats round to nearest even, once;
/// integers must be exactly representable, which the table kinds guarantee).
void convert_values(const double* src, std::size_t n, DType dtype, void* dst);

/// Computes `t` block by block (about `block_bytes` of output each, at least one axis-0
/// row) and writes it to `sink` as `dtype`. Does not commit the sink. Each element is
/// computed independently, so the result does not depend on the thread count. A value
/// that is NaN or infinite (other than an allowed -inf) is a UsageError naming its
/// index, thrown before the block holding it is written: parameters that make NaN
/// give an error, never data.
void write_table(const TableSpec& t, DType dtype, TensorSink& sink,
                 std::size_t block_bytes = std::size_t{1} << 20);

/// The table `t` in memory as `dtype`, computed as write_table computes it (in blocks of
/// about 8 MiB, each line in float64 rounded once).
Tensor table_tensor(const TableSpec& t, DType dtype);

}  // namespace posenc
