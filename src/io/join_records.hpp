#pragma once
// Internal to the library: the check of recorded part attributes that `posenc join`
// applies (join.cpp), as a function of the attributes alone, for the fuzz harness.

#include <cstddef>
#include <string>
#include <vector>

#include "posenc/io/ref.hpp"

namespace posenc::join_detail {

struct RecordedPart {
  std::string name;  ///< how messages name the part
  TensorInfo info;   ///< its shape and attributes
};

struct RecordedWhole {
  Shape shape;
  std::size_t axis = 0;
  std::vector<std::size_t> order;  ///< the parts by index: order[i] is part i
};

/// The whole that parts with part attributes (io/part.hpp) make, checked as join checks
/// them: each part's attributes range-checked and consistent with its shape, all parts
/// of one count, axis, total shape and run (every other attribute equal), each index
/// once, none missing. InputError naming the part otherwise.
RecordedWhole check_recorded_parts(const std::vector<RecordedPart>& parts);

}  // namespace posenc::join_detail
