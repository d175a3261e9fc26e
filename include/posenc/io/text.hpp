#pragma once
/// \file
/// Text encodings of tensors: CSV/TSV (1-D or 2-D), JSON
/// (`{"shape": [...], "dtype": "...", "data": [...]}` plus recorded parameters) and
/// a readable aligned table (`--to text`). Floats are written shortest round-trip
/// (fmt `{}`); NaN/Inf as `nan`, `inf`, `-inf` in CSV/TSV/text and as the strings
/// "NaN", "Infinity", "-Infinity" in JSON. These are pure functions: the caller
/// writes the bytes (atomically) and reads the file.

#include <string>
#include <string_view>

#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// The full file content of `t` in `fmt` (csv, tsv, json or text). CSV/TSV accept
/// rank 0-2 (a UsageError names the shape otherwise); json and text accept any rank.
std::string encode_text(Format fmt, const Tensor& t, const Attrs& attrs = {});

/// Parses CSV/TSV (rank 1 when one column or one row... see implementation notes) or
/// JSON content into a tensor (f64 unless JSON names a dtype). Throws InputError
/// naming `what` with the line and column of the problem.
Tensor decode_text(Format fmt, std::string_view content, const std::string& what);

}  // namespace posenc
