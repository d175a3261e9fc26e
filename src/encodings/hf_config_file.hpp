#pragma once
// Reading a HF config.json into a json_doc (internal to the library: hf_config.cpp and
// rope_ids_config.cpp). A config.json is a few kilobytes; anything far larger (16 MiB),
// or nested deeper than `max_depth`, is refused before it is parsed. nlohmann's parser is
// iterative, but a document tens of thousands of levels deep would overflow the stack of
// any recursive walk (a copy, a comparison), so none is ever built, and the config is
// never copied.

#include <cstddef>
#include <string>

#include "io/json_doc.hpp"

namespace posenc {

inline constexpr std::size_t kMaxConfigBytes = std::size_t{16} << 20;

/// Reads and parses `path` into `doc`. Throws InputError naming the file when it cannot
/// be read, is larger than kMaxConfigBytes, nests deeper than `max_depth` or is not JSON.
void read_hf_config_file(const std::string& path, json_doc::JsonDoc& doc, int max_depth);

}  // namespace posenc
