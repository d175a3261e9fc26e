// Text encodings of tensors: CSV/TSV, JSON and a readable table.
//
// Floats are written as the shortest text that reads back as the same value of the
// stored type: f32 is formatted as a float (not widened to double first, which would
// print 0.1f as 0.10000000149011612), f64 as a double. f16/bf16 values are formatted
// as the float32 that holds them exactly, so any reader (f32, f64, f16) gets the
// stored value back. Integers are written as integers (all 64 bits).

#include "posenc/io/text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "io/json_doc.hpp"
#include "posenc/error.hpp"

namespace posenc {
namespace {

constexpr std::size_t kMaxRank = 8;
// The largest JSON tensor read (decode_json).
constexpr std::size_t kMaxJsonTensorBytes = std::size_t{32} << 20;
// Like numpy's print threshold: larger tensors are summarised in the text table.
constexpr std::size_t kTableThreshold = 1000;
constexpr std::size_t kTableEdge = 3;
// The widest line a readable table of a 1-D tensor prints before it wraps.
constexpr std::size_t kTableWidth = 80;

enum class Style { csv, json, table };

template <class T>
std::string float_text(T v, Style style) {
  if (std::isnan(v)) return style == Style::json ? "\"NaN\"" : "nan";
  if (std::isinf(v)) {
    if (style == Style::json) return v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
    return v > 0 ? "inf" : "-inf";
  }
  // JSON readers take "-0" for the integer 0: negative zero keeps its sign as "-0.0",
  // as Python's json writes it.
  if (style == Style::json && v == 0 && std::signbit(v)) return "-0.0";
  return fmt::format("{}", v);
}

std::string element_text(const Tensor& t, std::size_t i, Style style) {
  const std::byte* p = t.bytes();
  switch (t.dtype()) {
    case DType::f16:
    case DType::bf16:
    case DType::f8e4m3fn:
    case DType::f8e5m2:
      return float_text(static_cast<float>(t.get(i)), style);
    case DType::f32:
      return float_text(reinterpret_cast<const float*>(p)[i], style);
    case DType::f64:
      return float_text(reinterpret_cast<const double*>(p)[i], style);
    case DType::i8:
      return fmt::format("{}", reinterpret_cast<const std::int8_t*>(p)[i]);
    case DType::i16:
      return fmt::format("{}", reinterpret_cast<const std::int16_t*>(p)[i]);
    case DType::i32:
      return fmt::format("{}", reinterpret_cast<const std::int32_t*>(p)[i]);
    case DType::i64:
      return fmt::format("{}", reinterpret_cast<const std::int64_t*>(p)[i]);
    case DType::u8:
      return fmt::format("{}", reinterpret_cast<const std::uint8_t*>(p)[i]);
    case DType::u16:
      return fmt::format("{}", reinterpret_cast<const std::uint16_t*>(p)[i]);
    case DType::u32:
      return fmt::format("{}", reinterpret_cast<const std::uint32_t*>(p)[i]);
    case DType::u64:
      return fmt::format("{}", reinterpret_cast<const std::uint64_t*>(p)[i]);
    case DType::b1: {
      bool b = reinterpret_cast<const std::uint8_t*>(p)[i] != 0;
      if (style == Style::csv) return b ? "1" : "0";
      return b ? "true" : "false";
    }
  }
  return "?";
}

// --- CSV / TSV -------------------------------------------------------------------

std::string encode_csv(const Tensor& t, char sep) {
  if (t.ndim() > 2) {
    throw UsageError(
        fmt::format("{} holds 1-D or 2-D tensors, got shape {} (use json, text, npy or h5)",
                    sep == ',' ? "CSV" : "TSV", shape_str(t.shape())));
  }
  std::string out;
  if (t.ndim() <= 1) {
    for (std::size_t i = 0; i < t.numel(); ++i) {
      out += element_text(t, i, Style::csv);
      out += '\n';
    }
    return out;
  }
  std::size_t rows = t.shape()[0], cols = t.shape()[1];
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) {
      if (c > 0) out += sep;
      out += element_text(t, r * cols + c, Style::csv);
    }
    out += '\n';
  }
  return out;
}

// --- JSON ----------------------------------------------------------------------

std::string json_string(const std::string& s) { return nlohmann::json(s).dump(); }

std::string json_number(double v) { return float_text(v, Style::json); }

std::string json_attr(const AttrValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return json_string(*s);
  if (const auto* d = std::get_if<double>(&v)) return json_number(*d);
  if (const auto* i = std::get_if<long long>(&v)) return fmt::format("{}", *i);
  const auto& vec = std::get<std::vector<double>>(v);
  std::vector<std::string> parts;
  parts.reserve(vec.size());
  for (double d : vec) parts.push_back(json_number(d));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// Innermost lists on one line; outer levels one element per line, indented.
void json_data(const Tensor& t, std::size_t axis, std::size_t offset, std::size_t stride_prod,
               int indent, std::string& out) {
  const Shape& s = t.shape();
  std::size_t n = s[axis];
  std::size_t inner = stride_prod / std::max<std::size_t>(n, 1);
  if (n == 0) inner = 0;
  out += '[';
  if (axis + 1 == s.size()) {
    for (std::size_t i = 0; i < n; ++i) {
      if (i > 0) out += ", ";
      out += element_text(t, offset + i, Style::json);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      if (i > 0) {
        out += ",\n";
        out.append(static_cast<std::size_t>(indent + 1), ' ');
      }
      json_data(t, axis + 1, offset + i * inner, inner, indent + 1, out);
    }
  }
  out += ']';
}

std::string encode_json(const Tensor& t, const Attrs& attrs) {
  std::string out = "{\n";
  out += fmt::format("  \"shape\": [{}],\n", fmt::join(t.shape(), ", "));
  out += fmt::format("  \"dtype\": \"{}\",\n", dtype_name(t.dtype()));
  if (!attrs.empty()) {
    out += "  \"attrs\": {";
    for (std::size_t i = 0; i < attrs.size(); ++i) {
      out += i == 0 ? "\n    " : ",\n    ";
      out += json_string(attrs[i].name) + ": " + json_attr(attrs[i].value);
    }
    out += "\n  },\n";
  }
  out += "  \"data\": ";
  if (t.ndim() == 0) {
    out += element_text(t, 0, Style::json);
  } else {
    json_data(t, 0, 0, t.numel(), 10, out);
  }
  out += "\n}\n";
  return out;
}

// --- readable table --------------------------------------------------------------

/// Indices shown along one axis: all, or the first and last kTableEdge with a gap
/// (marked by npos) between.
std::vector<std::size_t> shown(std::size_t n, bool summarise) {
  std::vector<std::size_t> idx;
  if (!summarise || n <= 2 * kTableEdge) {
    for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  for (std::size_t i = 0; i < kTableEdge; ++i) idx.push_back(i);
  idx.push_back(std::string::npos);
  for (std::size_t i = n - kTableEdge; i < n; ++i) idx.push_back(i);
  return idx;
}

// One 2-D grid (rows x cols of a C-ordered slice at `offset`) with row and column
// indices, right-aligned per column.
void table_grid(const Tensor& t, std::size_t offset, std::size_t rows, std::size_t cols,
                bool summarise, std::string& out, const TableLabels& labels) {
  auto ri = shown(rows, summarise);
  auto ci = shown(cols, summarise);
  constexpr std::size_t kGap = std::string::npos;
  // cells[r][c], with row 0 the header and column 0 the row index.
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> header{""};
  // Labels of the last two axes (one axis for a 1-D tensor, whose rows are its values).
  const std::size_t nd = labels.size();
  const std::vector<std::size_t>* row_label = nd >= 2 ? &labels[nd - 2] : nullptr;
  const std::vector<std::size_t>* col_label = nd >= 1 ? &labels[nd - 1] : nullptr;
  auto label = [](const std::vector<std::size_t>* l, std::size_t i) {
    return l != nullptr && i < l->size() ? (*l)[i] : i;
  };
  for (auto c : ci) header.push_back(c == kGap ? "..." : fmt::format("{}", label(col_label, c)));
  cells.push_back(header);
  for (auto r : ri) {
    std::vector<std::string> row;
    if (r == kGap) {
      row.push_back("...");
      for (std::size_t k = 0; k < ci.size(); ++k) row.push_back(ci[k] == kGap ? "" : "...");
    } else {
      row.push_back(fmt::format("{}", label(row_label, r)));
      for (auto c : ci) {
        row.push_back(c == kGap ? "..." : element_text(t, offset + r * cols + c, Style::table));
      }
    }
    cells.push_back(row);
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& row : cells) {
    for (std::size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size());
  }
  for (const auto& row : cells) {
    std::string line;
    for (std::size_t k = 0; k < row.size(); ++k) {
      if (k > 0) line += "  ";
      if (k == 0) {
        line += row[k];
        line.append(width[k] - row[k].size(), ' ');
      } else {
        line.append(width[k] - row[k].size(), ' ');
        line += row[k];
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
}

// A 1-D tensor: as one row under a header of indices when that fits in kTableWidth
// columns (the grid's "0" row label then means nothing, but keeps it aligned);
// otherwise wrapped, as numpy prints, k values a line, each line led by the index of
// its first value, and the header line says so.
void table_vector(const Tensor& t, bool summarise, std::string& out, const TableLabels& labels) {
  const std::size_t n = t.shape()[0];
  constexpr std::size_t kGap = std::string::npos;
  const auto idx = shown(n, summarise);
  const std::vector<std::size_t>* l = labels.empty() ? nullptr : &labels.back();
  auto label = [l](std::size_t i) { return l != nullptr && i < l->size() ? (*l)[i] : i; };
  std::vector<std::string> cells, heads;
  std::size_t cell_w = 0, one_row = 1;  // one_row: the width of the unwrapped row
  for (auto i : idx) {
    cells.push_back(i == kGap ? "..." : element_text(t, i, Style::table));
    heads.push_back(i == kGap ? "..." : fmt::format("{}", label(i)));
    cell_w = std::max(cell_w, cells.back().size());
    one_row += 2 + std::max(cells.back().size(), heads.back().size());
  }
  if (one_row <= kTableWidth) {
    table_grid(t, 0, 1, n, summarise, out, labels);
    return;
  }
  std::size_t label_w = 3;  // "..."
  for (const auto& h : heads) label_w = std::max(label_w, h.size());
  const std::size_t per_line = std::max<std::size_t>(1, (kTableWidth - label_w) / (cell_w + 2));
  // The header line ends with a newline: reopen it to say how the lines go.
  out.pop_back();
  out += fmt::format(", {} values a line, led by the first one's index\n", per_line);
  for (std::size_t a = 0; a < cells.size(); a += per_line) {
    std::string line = heads[a];
    line.append(label_w - heads[a].size(), ' ');
    for (std::size_t k = a; k < cells.size() && k < a + per_line; ++k) {
      line += "  ";
      line.append(cell_w - cells[k].size(), ' ');
      line += cells[k];
    }
    out += line + '\n';
  }
}

std::string table_text(const Tensor& t, const TableLabels& labels) {
  const Shape& s = t.shape();
  bool summarise = t.numel() > kTableThreshold;
  std::string out = fmt::format("# shape {}, {}", shape_str(s), dtype_name(t.dtype()));
  if (summarise) {
    out += fmt::format(", {} values: showing the first and last {} along each axis", t.numel(),
                       kTableEdge);
  }
  out += '\n';
  if (t.ndim() == 0) {
    out += element_text(t, 0, Style::table) + "\n";
    return out;
  }
  if (t.numel() == 0) {
    out += "(empty)\n";
    return out;
  }
  if (t.ndim() == 1) {
    table_vector(t, summarise, out, labels);
    return out;
  }
  std::size_t rows = s[s.size() - 2], cols = s[s.size() - 1];
  if (t.ndim() == 2) {
    table_grid(t, 0, rows, cols, summarise, out, labels);
    return out;
  }
  // Higher ranks: a grid per leading index tuple, headed like "[i, j, :, :]".
  Shape lead(s.begin(), s.end() - 2);
  std::vector<std::vector<std::size_t>> axes;
  for (auto n : lead) axes.push_back(shown(n, summarise));
  std::vector<std::size_t> pos(lead.size(), 0);
  for (;;) {
    bool gap = false;
    std::size_t offset = 0;
    std::vector<std::string> parts;
    for (std::size_t a = 0; a < lead.size(); ++a) {
      std::size_t v = axes[a][pos[a]];
      if (v == std::string::npos) gap = true;
      parts.push_back(v == std::string::npos                      ? "..."
                      : a < labels.size() && v < labels[a].size() ? fmt::format("{}", labels[a][v])
                                                                  : fmt::format("{}", v));
      offset = offset * lead[a] + (v == std::string::npos ? 0 : v);
    }
    // Print a gap marker once per skipped block (when the innermost skipped axis is
    // the one at the gap and all later positions are at their start).
    if (gap) {
      bool first_of_block = true;
      std::size_t ga = 0;
      for (std::size_t a = 0; a < lead.size(); ++a) {
        if (axes[a][pos[a]] == std::string::npos) {
          ga = a;
          break;
        }
      }
      for (std::size_t a = ga + 1; a < lead.size(); ++a) first_of_block &= pos[a] == 0;
      if (first_of_block) {
        parts.resize(ga + 1);
        out += fmt::format("\n[{}, ...]\n", fmt::join(parts, ", "));
      }
    } else {
      out += fmt::format("\n[{}, :, :]\n", fmt::join(parts, ", "));
      table_grid(t, offset * rows * cols, rows, cols, summarise, out, labels);
    }
    // Next index tuple (odometer over the shown indices).
    std::size_t a = lead.size();
    while (a > 0) {
      --a;
      if (++pos[a] < axes[a].size()) break;
      pos[a] = 0;
      if (a == 0) return out;
    }
  }
}

// --- decoding ------------------------------------------------------------------

bool parse_double(std::string_view s, double& v) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec == std::errc::result_out_of_range) {
    // Overflow reads as ±inf and underflow as ±0, as strtod / numpy do.
    v = std::strtod(std::string(s).c_str(), nullptr);
    return true;
  }
  return ec == std::errc() && p == end;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Whether no field of `line` is a number and some field holds a letter ("pos,dim0").
bool looks_like_header(std::string_view line, char sep) {
  bool letter = false;
  for (std::size_t p = 0; p <= line.size();) {
    std::size_t e = line.find(sep, p);
    if (e == std::string_view::npos) e = line.size();
    std::string_view f = trim(line.substr(p, e - p));
    double v = 0;
    if (!f.empty() && parse_double(f, v)) return false;
    for (char c : f) letter = letter || std::isalpha(static_cast<unsigned char>(c)) != 0;
    p = e + 1;
  }
  return letter;
}

Tensor decode_csv(std::string_view content, char sep, const std::string& what) {
  std::vector<double> values;
  std::size_t cols = 0, rows = 0, first_line = 0;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < content.size()) {
    std::size_t nl = content.find('\n', pos);
    if (nl == std::string_view::npos) nl = content.size();
    std::string_view line = content.substr(pos, nl - pos);
    std::size_t line_start = pos;
    pos = nl + 1;
    ++line_no;
    std::string_view body = trim(line);
    if (body.empty() || body[0] == '#') continue;  // blank lines and numpy-style headers
    std::size_t n = 0;
    std::size_t fpos = 0;
    for (;;) {
      std::size_t fend = line.find(sep, fpos);
      if (fend == std::string_view::npos) fend = line.size();
      std::string_view raw = line.substr(fpos, fend - fpos);
      std::string_view field = trim(raw);
      std::size_t col = fpos + static_cast<std::size_t>(field.data() - raw.data()) + 1;
      ++n;
      double v = 0;
      if (field.empty()) {
        throw InputError(
            fmt::format("{}: line {}, column {}: empty value (field {})", what, line_no, col, n));
      }
      if (!parse_double(field, v)) {
        std::string shown(field.substr(0, 40));
        // Names where the first row of numbers should be: a header (pandas writes one).
        const std::string hint =
            rows == 0 && looks_like_header(line, sep)
                ? "; this looks like a header row: remove it or start it with '#'"
                : "";
        throw InputError(fmt::format("{}: line {}, column {}: '{}' is not a number (field {}){}",
                                     what, line_no, col, shown, n, hint));
      }
      values.push_back(v);
      if (fend == line.size()) break;
      fpos = fend + 1;
    }
    (void)line_start;
    if (rows == 0) {
      cols = n;
      first_line = line_no;
    } else if (n != cols) {
      throw InputError(fmt::format("{}: line {} has {} values, line {} has {} (ragged rows)", what,
                                   line_no, n, first_line, cols));
    }
    ++rows;
  }
  Shape shape = cols <= 1 ? Shape{values.size()} : Shape{rows, cols};
  Tensor t(DType::f64, shape);
  if (!values.empty()) std::memcpy(t.bytes(), values.data(), values.size() * sizeof(double));
  return t;
}

using Json = nlohmann::json;

// Shape of a nested list, checked to be regular.
void json_shape(const Json& j, std::size_t depth, Shape& shape, const std::string& what) {
  if (!j.is_array()) return;
  if (depth >= kMaxRank) {
    throw InputError(fmt::format("{}: \"data\" is nested deeper than {} levels", what, kMaxRank));
  }
  shape.push_back(j.size());
  if (!j.empty()) json_shape(j[0], depth + 1, shape, what);
}

double json_scalar(const Json& j, const std::string& what, const std::string& where) {
  if (j.is_number()) return j.get<double>();
  if (j.is_boolean()) return j.get<bool>() ? 1.0 : 0.0;
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    std::string l = s;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
    if (l == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (l == "infinity" || l == "inf" || l == "+infinity" || l == "+inf") {
      return std::numeric_limits<double>::infinity();
    }
    if (l == "-infinity" || l == "-inf") return -std::numeric_limits<double>::infinity();
    throw InputError(
        fmt::format("{}: {}: string \"{}\" is not a number (only \"NaN\", "
                    "\"Infinity\" and \"-Infinity\" are)",
                    what, where, s.substr(0, 40)));
  }
  throw InputError(fmt::format("{}: {}: expected a number, got {}", what, where, j.type_name()));
}

// Stores one JSON value at flat index i, keeping all 64 bits of integers and
// refusing values the dtype cannot hold.
void json_store(Tensor& t, std::size_t i, const Json& j, const std::string& what,
                const std::string& where) {
  DType d = t.dtype();
  if (is_float(d) || d == DType::b1) {
    t.set(i, json_scalar(j, what, where));
    return;
  }
  auto bad = [&](const std::string& why) {
    return InputError(fmt::format("{}: {}: {} for dtype {}", what, where, why, dtype_name(d)));
  };
  long double v;
  if (j.is_number_unsigned()) {
    v = static_cast<long double>(j.get<std::uint64_t>());
  } else if (j.is_number_integer()) {
    v = static_cast<long double>(j.get<std::int64_t>());
  } else if (j.is_boolean()) {
    v = j.get<bool>() ? 1 : 0;
  } else {
    double x = json_scalar(j, what, where);
    if (!std::isfinite(x) || x != std::floor(x)) throw bad(fmt::format("{} is not an integer", x));
    v = x;
  }
  auto store = [&](auto tag) {
    using T = decltype(tag);
    if (v < static_cast<long double>(std::numeric_limits<T>::min()) ||
        v > static_cast<long double>(std::numeric_limits<T>::max())) {
      throw bad("value out of range");
    }
    T x;
    if (j.is_number_unsigned()) {
      x = static_cast<T>(j.get<std::uint64_t>());
    } else if (j.is_number_integer()) {
      x = static_cast<T>(j.get<std::int64_t>());
    } else {
      x = static_cast<T>(v);
    }
    t.data<T>()[i] = x;
  };
  switch (d) {
    case DType::i8:
      store(std::int8_t{});
      break;
    case DType::i16:
      store(std::int16_t{});
      break;
    case DType::i32:
      store(std::int32_t{});
      break;
    case DType::i64:
      store(std::int64_t{});
      break;
    case DType::u8:
      store(std::uint8_t{});
      break;
    case DType::u16:
      store(std::uint16_t{});
      break;
    case DType::u32:
      store(std::uint32_t{});
      break;
    case DType::u64:
      store(std::uint64_t{});
      break;
    default:
      break;
  }
}

// Stores the values of `j` into `t` in C order, checking the nesting against `s` (the
// shape of `t`); with `t` null, only checks.
void json_fill(Tensor* t, const Shape& s, const Json& j, std::size_t axis, std::size_t& i,
               std::string where, const std::string& what) {
  if (axis == s.size()) {
    if (j.is_array()) {
      throw InputError(
          fmt::format("{}: \"data\"{}: nesting deeper than shape {}", what, where, shape_str(s)));
    }
    if (t) json_store(*t, i, j, what, "\"data\"" + where);
    ++i;
    return;
  }
  if (!j.is_array() || j.size() != s[axis]) {
    throw InputError(fmt::format(
        "{}: \"data\"{}: expected a list of {} (shape {}), got {}", what, where, s[axis],
        shape_str(s),
        j.is_array() ? fmt::format("a list of {}", j.size()) : std::string(j.type_name())));
  }
  for (std::size_t k = 0; k < j.size(); ++k) {
    json_fill(t, s, j[k], axis + 1, i, fmt::format("{}[{}]", where, k), what);
  }
}

Tensor decode_json(std::string_view content, const std::string& what) {
  // The parsed document takes 10 to 28 times the text's size: a JSON tensor is for
  // small data (NPY and HDF5 are for the rest), and a large one is refused unparsed.
  if (content.size() > kMaxJsonTensorBytes) {
    throw InputError(
        fmt::format("{}: a JSON tensor of {} bytes is larger than the {} MiB posenc "
                    "reads as JSON (use NPY or HDF5)",
                    what, content.size(), kMaxJsonTensorBytes >> 20));
  }
  // The value nested deepest is a scalar of a rank-8 "data" in an object: any deeper
  // document is refused as it is read, before a DOM of it exists.
  json_doc::JsonDoc parsed;
  try {
    json_doc::parse(content, parsed, static_cast<int>(kMaxRank) + 2, [&what]() {
      throw InputError(fmt::format("{}: \"data\" is nested deeper than {} levels", what, kMaxRank));
    });
  } catch (const Json::exception& e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1,
    // column 5: syntax error ..." — keep the part after the bracketed id. Numbers
    // beyond a double (1e400) are out_of_range errors, just as malformed.
    std::string m = e.what();
    auto close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
    throw InputError(fmt::format("{}: invalid JSON: {}", what, m));
  }
  const Json& doc = parsed.root;
  const Json* data = &doc;
  DType dtype = DType::f64;
  std::optional<Shape> declared;
  if (doc.is_object()) {
    auto it = doc.find("data");
    if (it == doc.end()) throw InputError(what + ": JSON object has no \"data\"");
    data = &*it;
    if (auto d = doc.find("dtype"); d != doc.end()) {
      if (!d->is_string()) throw InputError(what + ": \"dtype\" must be a string");
      try {
        dtype = parse_dtype(d->get<std::string>(), "\"dtype\"");
      } catch (const UsageError& e) {
        throw InputError(fmt::format("{}: {}", what, e.what()));
      }
    }
    if (auto s = doc.find("shape"); s != doc.end()) {
      if (!s->is_array() || s->size() > kMaxRank) {
        throw InputError(
            fmt::format("{}: \"shape\" must be a list of at most {} sizes", what, kMaxRank));
      }
      Shape sh;
      for (const auto& d : *s) {
        if (!d.is_number_unsigned()) {
          throw InputError(what + ": \"shape\" must hold non-negative integers");
        }
        sh.push_back(d.get<std::size_t>());
      }
      declared = sh;
    }
  } else if (!doc.is_array() && !doc.is_number()) {
    throw InputError(fmt::format("{}: expected a JSON object with \"data\" or a list, got {}", what,
                                 doc.type_name()));
  }
  Shape nested;
  json_shape(*data, 0, nested, what);
  Shape shape = declared ? *declared : nested;
  std::size_t n = checked_numel(shape, dtype_size(dtype), what);
  // The values must be there before the tensor is allocated: a declared or nested
  // shape cannot make posenc allocate more than the document holds.
  const bool flat = declared && nested.size() == 1 && shape.size() != 1 && data->size() == n;
  std::size_t counted = 0;
  if (!flat) json_fill(nullptr, shape, *data, 0, counted, "", what);
  Tensor t(dtype, shape);
  std::size_t i = 0;
  if (flat) {
    // A flat list with an explicit shape (C order).
    for (const auto& v : *data) json_store(t, i, v, what, fmt::format("\"data\"[{}]", i)), ++i;
  } else {
    json_fill(&t, shape, *data, 0, i, "", what);
  }
  return t;
}

}  // namespace

std::string encode_table(const Tensor& t, const TableLabels& labels) {
  return table_text(t, labels);
}

std::string encode_text(Format fmt, const Tensor& t, const Attrs& attrs) {
  switch (fmt) {
    case Format::csv:
      return encode_csv(t, ',');
    case Format::tsv:
      return encode_csv(t, '\t');
    case Format::json:
      return encode_json(t, attrs);
    case Format::text:
      return table_text(t, {});
    default:
      throw UsageError("encode_text: not a text format");
  }
}

Tensor decode_text(Format fmt, std::string_view content, const std::string& what) {
  switch (fmt) {
    case Format::csv:
      return decode_csv(content, ',', what);
    case Format::tsv:
      return decode_csv(content, '\t', what);
    case Format::json:
      return decode_json(content, what);
    default:
      throw InputError(
          fmt::format("{}: this format is written for people and cannot be read "
                      "back (use csv, tsv or json)",
                      what));
  }
}

std::string format_element(const Tensor& t, std::size_t i) {
  return element_text(t, i, Style::table);
}

}  // namespace posenc
