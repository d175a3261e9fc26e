// Fuzzes the text decoders (CSV, TSV, JSON; the first input byte picks one) with a
// decode -> encode -> decode check: whatever decodes must encode and decode again to the
// same dtype, shape and values (bit for bit, -0.0 included; NaN as NaN). The readable
// table encoding must not fail either. Contract: only InputError from decoding.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "posenc/error.hpp"
#include "posenc/io/text.hpp"

namespace {

using posenc::fuzz::expect;

bool same_values(const posenc::Tensor& a, const posenc::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const std::size_t item = posenc::dtype_size(a.dtype());
  for (std::size_t i = 0; i < a.numel(); ++i) {
    if (posenc::is_float(a.dtype()) && std::isnan(a.get(i))) {
      if (!std::isnan(b.get(i))) return false;
      continue;
    }
    if (std::memcmp(a.bytes() + i * item, b.bytes() + i * item, item) != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  constexpr posenc::Format kFormats[3] = {posenc::Format::csv, posenc::Format::tsv,
                                          posenc::Format::json};
  const posenc::Format fmt = kFormats[data[0] % 3];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  posenc::Tensor t;
  try {
    t = posenc::decode_text(fmt, text, "input");
  } catch (const posenc::InputError&) {
    return 0;
  } catch (const std::bad_alloc&) {
    posenc::fuzz::finding("allocation failed: a size was taken from the text before the data");
  }
  // Every value decoded is kept by a round trip through the same format.
  const std::string encoded = posenc::encode_text(fmt, t);
  posenc::Tensor back;
  try {
    back = posenc::decode_text(fmt, encoded, "re-encoded");
  } catch (const posenc::InputError& e) {
    posenc::fuzz::finding(std::string("the encoding does not decode: ") + e.what());
  }
  expect(same_values(t, back), "decode -> encode -> decode changed the tensor");
  posenc::encode_text(posenc::Format::text, t);
  if (t.ndim() <= 2) posenc::encode_text(posenc::Format::csv, t);
  return 0;
}
