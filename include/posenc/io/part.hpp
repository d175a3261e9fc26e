#pragma once
/// \file
/// Shares of one job (`--part I/N`) and what records them in an output.
///
/// Part I of N (0-based: 0 <= I < N) of an axis of extent R is the contiguous range of
/// entries [floor(I * R / N), floor((I + 1) * R / N)): the N parts cover the axis once,
/// in order, and their sizes differ by at most one (a part may be empty when N > R).
/// The axis is the tensor's first axis whose extent is not 1 (`slab_axis`): b of a
/// 4-D [b, h, s, d] input, s of [1, s, h, d], positions of most tables.
///
/// A part written as HDF5 carries the attributes below, from which `join_parts`
/// assembles the whole; NPY parts carry nothing and are joined in the order given.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// Share I of N of a job (--part I/N).
struct Part {
  std::size_t index = 0;                     ///< I, 0-based
  std::size_t count = 1;                     ///< N; 1 = the whole job
  bool whole() const { return count == 1; }  ///< whether this is the whole job (N = 1)
};

/// Parses "I/N" (0 <= I < N, N >= 1). UsageError naming `what` otherwise.
Part parse_part(const std::string& text, const std::string& what = "part");

/// [first, last) of part `p` of an axis of extent `extent` (see the file comment).
std::pair<std::size_t, std::size_t> part_range(const Part& p, std::size_t extent);

/// Attribute names recorded on a part: part_index, part_count (I and N), part_axis,
/// part_offset (the index of the part's first element in the whole, one entry per
/// axis), part_total_shape (the whole's shape), and part_inputs: the tensors the share
/// was computed from (see input_identity), so that `join` tells the parts of
/// `rope q.npy` from those of `rope k.npy`, whose other attributes agree. Of these only
/// part_index and part_offset differ between the parts of one run.
inline constexpr const char* kPartIndexAttr = "part_index";
inline constexpr const char* kPartCountAttr = "part_count";             ///< see kPartIndexAttr
inline constexpr const char* kPartAxisAttr = "part_axis";               ///< see kPartIndexAttr
inline constexpr const char* kPartOffsetAttr = "part_offset";           ///< see kPartIndexAttr
inline constexpr const char* kPartTotalShapeAttr = "part_total_shape";  ///< see kPartIndexAttr
inline constexpr const char* kPartInputsAttr = "part_inputs";           ///< see kPartIndexAttr

/// Which tensors `inputs` are, independent of how they were spelt: each file's absolute
/// path with symbolic links resolved (as given when it cannot be resolved), then
/// ":/dataset" for HDF5; "-" for standard input; joined by ", " in the order given.
std::string input_identity(const std::vector<TensorRef>& inputs);

/// The attributes above for part `p` of a whole of shape `total` cut along `axis`,
/// computed from `inputs` (part_inputs is left out when there are none: tables).
Attrs part_attrs(const Part& p, const Shape& total, std::size_t axis,
                 const std::vector<TensorRef>& inputs = {});

/// The shape of part `p` of `total` cut along `axis`.
Shape part_shape(const Part& p, const Shape& total, std::size_t axis);

}  // namespace posenc
