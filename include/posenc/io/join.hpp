#pragma once
/// \file
/// Assembling the parts of a `--part I/N` job into one tensor (`posenc join`).
///
/// HDF5 parts carry their share (io/part.hpp attributes) and may be given in any order;
/// they must all be parts of the same run: the same whole (count, axis, total shape,
/// dtype) and the same recorded parameters (every attribute but part_index and
/// part_offset: base, --emit, --start, style, ...), each index 0..N-1 exactly once,
/// each with the shape and offset its index implies.
/// Parts without part attributes (NPY files, or HDF5 datasets written without --part)
/// are taken in the order given and concatenated along `axis`; every other extent and
/// the dtype must agree. Nothing records their order or number, so only the same file
/// given twice is caught, and the result carries a warning. The two kinds cannot be mixed.
///
/// The output is a copy (any format) or, for HDF5 parts and an HDF5 output, a virtual
/// dataset over the part files. An HDF5 output may be an existing file (the whole is
/// added to it), also one of the part files when it names another dataset. Nothing is
/// written when a check fails.

#include <cstddef>
#include <string>
#include <vector>

#include "posenc/io/ref.hpp"

namespace posenc {

/// `posenc join`: the parts, -o, the output options, --virtual, --axis.
struct JoinRequest {
  std::vector<TensorRef> parts;  ///< the part tensors, in any order when they are HDF5
  TensorRef output;              ///< where the whole goes
  WriteOptions write;            ///< how the output is written
  /// An HDF5 virtual dataset over the part files instead of a copy.
  bool virtual_dataset = false;
  /// The axis along which parts without part attributes are concatenated.
  std::size_t axis = 0;
};

/// What join_parts assembled (for `posenc -v`).
struct JoinResult {
  Shape shape;               ///< the whole's shape
  DType dtype = DType::f32;  ///< its dtype
  std::size_t axis = 0;      ///< the axis the parts were joined along
  std::size_t parts = 0;     ///< how many parts
  /// What could not be checked (one line each, for stderr).
  std::vector<std::string> warnings;
};

/// Checks the parts and writes the whole. InputError for parts that do not make one
/// whole (naming the part and what is wrong: for parts of different runs, the first
/// attribute that differs), UsageError for an impossible request (--virtual without
/// HDF5, an output that would replace a part), OutputError when the output cannot be
/// written.
JoinResult join_parts(const JoinRequest& r);

}  // namespace posenc
