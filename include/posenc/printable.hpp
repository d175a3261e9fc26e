#pragma once
/// \file
/// Text that came from a file (dataset and attribute names, attribute values, CSV
/// cells, HDF5 messages) made safe to show on a terminal. Used wherever posenc prints
/// such text: the error line, `inspect`, figure titles and labels.

#include <string>
#include <string_view>

namespace posenc {

/// `text` with every character that a terminal would act on written as an escape:
/// C0 controls and DEL as `\xNN` (ESC is `\x1b`), C1 controls (U+0080..U+009F) and the
/// bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069)
/// as `\uNNNN`, and bytes that are not part of valid UTF-8 as `\xNN`. Everything else,
/// backslashes included, is unchanged, so text without such characters reads as it is.
std::string printable(std::string_view text);

}  // namespace posenc
