// Fuzzes the NPY reader: the same bytes as a regular file (positioned reads, sizes
// checked against the file) and as a stream that delivers short reads (the pattern
// taken from the input's first byte). Contract: only InputError, and the two paths
// agree: both fail, or both give the same dtype, shape and bytes, whole and in slabs.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "fuzz_util.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"

namespace {

using posenc::fuzz::expect;
using posenc::fuzz::finding;

// Serves the bytes a few at a time, in a pattern cycling through `steps`, like a pipe.
class ShortReader final : public posenc::ByteReader {
 public:
  ShortReader(const std::uint8_t* p, std::size_t n, std::uint8_t pattern)
      : p_(p), n_(n), pattern_(pattern) {}
  std::size_t read_some(void* dst, std::size_t want) override {
    static constexpr std::size_t kSteps[8] = {1, 3, 7, 64, 4096, 2, 5, 1u << 20};
    const std::size_t step = kSteps[(pattern_ + calls_++) % 8];
    const std::size_t k = std::min({want, n_ - at_, step});
    std::memcpy(dst, p_ + at_, k);
    at_ += k;
    return k;
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_, at_ = 0, calls_ = 0;
  std::uint8_t pattern_;
};

struct Outcome {
  bool ok = false;
  posenc::Tensor t;
};

// The whole tensor, then (from a fresh source) the same bytes read as slabs along the
// slab axis in pieces of `piece` entries.
Outcome read(std::unique_ptr<posenc::TensorSource> (*open)(const std::uint8_t*, std::size_t,
                                                           std::uint8_t),
             const std::uint8_t* p, std::size_t n, std::uint8_t pattern) {
  Outcome o;
  try {
    auto src = open(p, n, pattern);
    o.t = posenc::read_all_rows(*src);
    const posenc::TensorInfo& info = src->info();
    expect(o.t.shape() == info.shape && o.t.dtype() == info.dtype, "tensor differs from header");

    auto again = open(p, n, pattern);
    const posenc::Shape& s = info.shape;
    const std::size_t axis = posenc::slab_axis(s);
    const std::size_t entries = s.empty() ? 1 : s[axis];
    const std::size_t entry = entries == 0 ? 0 : o.t.nbytes() / entries;
    const std::size_t piece = 1 + pattern % 3;
    std::string buf(o.t.nbytes(), '\0');
    for (std::size_t first = 0; entry > 0 && first < entries; first += piece) {
      const std::size_t count = std::min(piece, entries - first);
      again->read_slab(axis, first, count, buf.data() + first * entry);
    }
    expect(std::memcmp(buf.data(), o.t.bytes(), buf.size()) == 0, "slabs differ from the whole");
    o.ok = true;
  } catch (const posenc::InputError&) {
  } catch (const std::bad_alloc&) {
    finding("allocation failed: a size was taken from the header before the data");
  }
  return o;
}

std::unique_ptr<posenc::TensorSource> open_stream(const std::uint8_t* p, std::size_t n,
                                                  std::uint8_t pattern) {
  return posenc::open_npy_stream(std::make_unique<ShortReader>(p, n, pattern), "stream");
}

std::unique_ptr<posenc::TensorSource> open_file(const std::uint8_t* p, std::size_t n,
                                                std::uint8_t) {
  return posenc::open_npy_source(posenc::fuzz::temp_file(".npy", p, n), "file");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t pattern = data[0];
  const std::uint8_t* p = data + 1;
  const std::size_t n = size - 1;
  Outcome file = read(open_file, p, n, pattern);
  Outcome stream = read(open_stream, p, n, pattern);
  expect(file.ok == stream.ok, "file and stream readers disagree on validity");
  if (file.ok) {
    expect(file.t.dtype() == stream.t.dtype() && file.t.shape() == stream.t.shape(),
           "file and stream readers disagree on dtype or shape");
    expect(std::memcmp(file.t.bytes(), stream.t.bytes(), file.t.nbytes()) == 0,
           "file and stream readers disagree on the data");
  }
  return 0;
}
