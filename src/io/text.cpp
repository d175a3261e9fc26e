// Text encodings of tensors (early version: not implemented yet).
#include "posenc/io/text.hpp"

#include "posenc/error.hpp"

namespace posenc {

std::string encode_text(Format, const Tensor&, const Attrs&) {
  throw UsageError("text output not supported yet");
}

Tensor decode_text(Format, std::string_view, const std::string& what) {
  throw InputError(what + ": text input not supported yet");
}

}  // namespace posenc
