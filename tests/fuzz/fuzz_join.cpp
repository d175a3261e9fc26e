// Fuzzes `join`'s reading of part attributes, which come from files anyone may have
// written: the input makes one to four parts, each a small shape and attributes whose
// names are the part attributes or others and whose values are any type (integers and
// reals from raw bytes: NaN, 2^62, negative, fractional; lists of any length; text).
// Contract: join_detail::check_recorded_parts throws only InputError, in time and memory
// independent of the counts the attributes claim; what it accepts is a whole: the parts
// in order have indices 0..N-1, each the shape and offset its index implies, and their
// extents along the axis add up to the whole's.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "io/join_records.hpp"
#include "posenc/error.hpp"
#include "posenc/io/part.hpp"

namespace {

using posenc::fuzz::expect;

using posenc::fuzz::Bytes;

// A count that is usually small (and so often consistent), sometimes anything.
double count(Bytes& b) {
  const std::uint8_t k = b.byte();
  if (k < 200) return k % 5;
  if (k < 230) return static_cast<double>(static_cast<std::int64_t>(b.u64()));
  return b.real();
}

posenc::AttrValue value(Bytes& b) {
  switch (b.byte() % 5) {
    case 0: {  // an integer attribute: small, or any 64-bit value
      const std::uint8_t k = b.byte();
      return k < 200 ? static_cast<long long>(k % 5) : static_cast<long long>(b.u64());
    }
    case 1:
      return count(b);
    case 2: {
      std::vector<double> v;
      for (int len = b.byte() % 5; len > 0; --len) v.push_back(count(b));
      return v;
    }
    case 3:
      return std::string(1 + b.byte() % 4, static_cast<char>(b.byte()));
    default:
      return static_cast<long long>(b.byte() % 4);
  }
}

const char* const kNames[] = {posenc::kPartIndexAttr, posenc::kPartCountAttr,
                              posenc::kPartAxisAttr,  posenc::kPartOffsetAttr,
                              posenc::kPartTotalShapeAttr, "rope_theta", "part_inputs"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes b{data, size};
  std::vector<posenc::join_detail::RecordedPart> parts(1 + b.byte() % 4);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto& p = parts[i];
    p.name = "p" + std::to_string(i) + ".h5:/x";
    for (int r = 1 + b.byte() % 3; r > 0; --r) p.info.shape.push_back(b.byte() % 9);
    for (int a = b.byte() % 10; a > 0; --a) {
      p.info.attrs.push_back({kNames[b.byte() % 7], value(b)});
    }
  }
  posenc::join_detail::RecordedWhole w;
  try {
    w = posenc::join_detail::check_recorded_parts(parts);
  } catch (const posenc::InputError&) {
    return 0;
  }
  expect(w.order.size() == parts.size() && w.axis < w.shape.size(), "a whole without parts");
  const posenc::Part first{0, parts.size()};
  std::size_t along = 0;
  for (std::size_t i = 0; i < w.order.size(); ++i) {
    const auto& p = parts.at(w.order[i]);
    const posenc::Part part{i, first.count};
    expect(p.info.shape == posenc::part_shape(part, w.shape, w.axis), "a part of another shape");
    along += p.info.shape[w.axis];
  }
  expect(along == w.shape[w.axis], "the parts do not add up to the whole");
  return 0;
}
