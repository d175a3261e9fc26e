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
#include <vector>

#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// The full file content of `t` in `fmt` (csv, tsv, json or text). CSV/TSV accept
/// rank 0-2 (a UsageError names the shape otherwise); json and text accept any rank.
std::string encode_text(Format fmt, const Tensor& t, const Attrs& attrs = {});

/// Index labels of a readable table: labels[a][i] is shown for entry i of axis a (for
/// the rows and columns of each grid and the "[i, j, :, :]" headings); an axis without
/// labels (or past the end of `labels`) shows 0, 1, ...
using TableLabels = std::vector<std::vector<std::size_t>>;

/// The readable table of `t` (what encode_text gives for Format::text) with the
/// indices `labels` names, e.g. the source indices of a slice.
std::string encode_table(const Tensor& t, const TableLabels& labels);

/// Parses CSV/TSV or JSON content into a tensor. CSV/TSV give f64: one value per
/// line is shape (n,), otherwise (rows, cols); blank lines and lines starting with
/// '#' are skipped; `nan`, `inf`, `-inf` are accepted. JSON gives the dtype it names
/// (f64 if none) and the shape it declares (or the nesting of "data"). Throws
/// InputError naming `what` with the line and column (CSV) or the element path
/// (JSON) of the problem, and for ragged rows.
Tensor decode_text(Format fmt, std::string_view content, const std::string& what);

/// Element i (flat, C order) as the text formats print it: shortest round-trip for
/// floats (f16/bf16 via the float32 that holds them exactly), integers in full,
/// nan/inf/-inf, true/false.
std::string format_element(const Tensor& t, std::size_t i);

}  // namespace posenc
