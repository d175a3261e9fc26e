#pragma once
/// \file
/// numpy basic slicing of stored tensors ("0,:,:4", "1:-1:2", "...,0"), read without
/// loading the whole tensor: `inspect --slice` and `plot --slice` select with it.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// A slice expression resolved against a shape: the indices taken on every axis (in
/// selection order) and which axes remain in the result (integers drop their axis).
struct Selection {
  std::vector<std::vector<std::size_t>> idx;  ///< per source axis
  std::vector<bool> keep;                     ///< axis kept in the result
  Shape shape;                                ///< result shape
  std::size_t numel = 1;
};

/// Checks the syntax of `text` (one entry per axis: integers, a:b, a:b:c with negative
/// values allowed, ':' and at most one '...'; optional surrounding brackets). Throws
/// UsageError naming `--slice` for malformed expressions and a zero step.
void check_slice(const std::string& text);

/// Resolves `text` against `shape` by Python's rules: slices clamp to the axis, missing
/// trailing axes are whole, an integer out of range or more axes than `shape` has is an
/// InputError naming the axis and its size. An empty `text` selects everything.
Selection resolve_slice(const std::string& text, const Shape& shape);

/// Reads the selected elements of `src` in C order of the selection, in blocks of about
/// 16 MiB of source rows: calls `block(values, first)` with a 1-D tensor of the source
/// dtype holding the selected elements with flat indices [first, first + n). Only the
/// rows (along the first axis whose extent is not 1) that the selection touches are
/// read. Errors of the source propagate (InputError naming `what`).
void read_selection(TensorSource& src, const Selection& sel, const std::string& what,
                    const std::function<void(const Tensor&, std::size_t)>& block);

/// The whole selection as one tensor of `sel.shape` in the source dtype.
Tensor read_selection(TensorSource& src, const Selection& sel, const std::string& what);

}  // namespace posenc
