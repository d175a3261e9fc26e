// Streaming tables to a sink, block by block, lines in parallel.

#include "posenc/encodings/table.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace posenc {

namespace {
template <class I>
void to_int(const double* s, std::size_t n, void* d) {
  I* o = static_cast<I*>(d);
  for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<I>(s[i]);
}
}  // namespace

void convert_values(const double* src, std::size_t n, DType dtype, void* dst) {
  switch (dtype) {
    case DType::f64: std::copy(src, src + n, static_cast<double*>(dst)); return;
    case DType::f32: {
      float* o = static_cast<float*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<float>(src[i]);
      return;
    }
    case DType::f16: {
      auto* o = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = double_to_half(src[i]);
      return;
    }
    case DType::bf16: {
      auto* o = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = double_to_bf16(src[i]);
      return;
    }
    case DType::i8: to_int<std::int8_t>(src, n, dst); return;
    case DType::i16: to_int<std::int16_t>(src, n, dst); return;
    case DType::i32: to_int<std::int32_t>(src, n, dst); return;
    case DType::i64: to_int<std::int64_t>(src, n, dst); return;
    case DType::u8: to_int<std::uint8_t>(src, n, dst); return;
    case DType::u16: to_int<std::uint16_t>(src, n, dst); return;
    case DType::u32: to_int<std::uint32_t>(src, n, dst); return;
    case DType::u64: to_int<std::uint64_t>(src, n, dst); return;
    case DType::b1: {
      auto* o = static_cast<std::uint8_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = src[i] != 0.0 ? 1 : 0;
      return;
    }
  }
}

void write_table(const TableSpec& t, DType dtype, TensorSink& sink, std::size_t block_bytes) {
  const std::size_t item = dtype_size(dtype);
  const std::size_t line_len = t.shape.back();
  const std::size_t rows = t.shape[0];
  std::size_t lines_per_row = 1;
  for (std::size_t k = 1; k + 1 < t.shape.size(); ++k) lines_per_row *= t.shape[k];
  if (t.shape.size() == 1) {
    // A vector is one line; its "rows" are its elements.
    std::vector<double> v(line_len);
    t.line(0, v.data());
    std::vector<std::byte> out(line_len * item);
    convert_values(v.data(), line_len, dtype, out.data());
    sink.write_rows(out.data(), rows);
    return;
  }
  const std::size_t row_bytes = lines_per_row * line_len * item;
  const std::size_t block_rows =
      std::max<std::size_t>(1, std::min(rows, block_bytes / std::max<std::size_t>(row_bytes, 1)));
  std::vector<std::byte> out(block_rows * row_bytes);
  for (std::size_t first = 0; first < rows; first += block_rows) {
    const std::size_t count = std::min(block_rows, rows - first);
    const auto lines = static_cast<std::int64_t>(count * lines_per_row);
    const std::size_t line0 = first * lines_per_row;
#pragma omp parallel
    {
      std::vector<double> buf(line_len);
#pragma omp for schedule(static)
      for (std::int64_t l = 0; l < lines; ++l) {
        t.line(line0 + static_cast<std::size_t>(l), buf.data());
        convert_values(buf.data(), line_len, dtype,
                       out.data() + static_cast<std::size_t>(l) * line_len * item);
      }
    }
    sink.write_rows(out.data(), count);
  }
}

}  // namespace posenc
