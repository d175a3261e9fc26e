// Streaming tables to a sink, block by block, lines in parallel.

#include "posenc/encodings/table.hpp"

#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <cstdint>
#include <exception>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "ops/widen.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/cast.hpp"

namespace posenc {

namespace {

// The first value of a line that a table may not hold, or npos.
std::size_t bad_value(const double* v, std::size_t n, bool allow_neg_inf) {
  for (std::size_t i = 0; i < n; ++i) {
    const bool neg_inf = v[i] == -std::numeric_limits<double>::infinity();
    if (!std::isfinite(v[i]) && !(allow_neg_inf && neg_inf)) return i;
  }
  return static_cast<std::size_t>(-1);
}

[[noreturn]] void refuse(const TableSpec& t, std::size_t line, std::size_t col, double v) {
  // The multi-index of the value: the line's indices over all axes but the last.
  std::vector<std::size_t> idx(t.shape.size());
  idx.back() = col;
  for (std::size_t a = t.shape.size() - 1; a-- > 0;) {
    idx[a] = t.shape[a] == 0 ? 0 : line % t.shape[a];
    line = t.shape[a] == 0 ? 0 : line / t.shape[a];
  }
  std::string at;
  for (std::size_t k = 0; k < idx.size(); ++k) at += (k ? ", " : "") + std::to_string(idx[k]);
  throw UsageError(fmt::format("the parameters give {} at index ({}) of the table; check the "
                               "options (and --hf-config) for values out of range",
                               v, at));
}

// Computes line `l` into `buf` and checks it.
void compute_line(const TableSpec& t, std::size_t l, double* buf) {
  t.line(l, buf);
  const std::size_t n = t.shape.back();
  const std::size_t bad = bad_value(buf, n, t.allow_neg_inf);
  if (bad < n) refuse(t, l, bad, buf[bad]);
}

template <class I>
void to_int(const double* s, std::size_t n, void* d) {
  I* o = static_cast<I*>(d);
  for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<I>(s[i]);
}
}  // namespace

void convert_values(const double* src, std::size_t n, DType dtype, void* dst) {
  switch (dtype) {
    case DType::f64:
      std::copy(src, src + n, static_cast<double*>(dst));
      return;
    case DType::f32: {
      float* o = static_cast<float*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<float>(src[i]);
      return;
    }
    case DType::f16:
    case DType::bf16:
      // double_to_half / double_to_bf16, vectorised (element by element, an f16 add of
      // 256 MiB took ten times as long as the f32 one).
      detail::narrow(DType::f64, src, dtype, dst, n);
      return;
    case DType::f8e4m3fn:
    case DType::f8e5m2:
      cast(reinterpret_cast<const std::byte*>(src), DType::f64, static_cast<std::byte*>(dst),
           dtype, n);
      return;
    case DType::i8:
      to_int<std::int8_t>(src, n, dst);
      return;
    case DType::i16:
      to_int<std::int16_t>(src, n, dst);
      return;
    case DType::i32:
      to_int<std::int32_t>(src, n, dst);
      return;
    case DType::i64:
      to_int<std::int64_t>(src, n, dst);
      return;
    case DType::u8:
      to_int<std::uint8_t>(src, n, dst);
      return;
    case DType::u16:
      to_int<std::uint16_t>(src, n, dst);
      return;
    case DType::u32:
      to_int<std::uint32_t>(src, n, dst);
      return;
    case DType::u64:
      to_int<std::uint64_t>(src, n, dst);
      return;
    case DType::b1: {
      auto* o = static_cast<std::uint8_t*>(dst);
      for (std::size_t i = 0; i < n; ++i) o[i] = src[i] != 0.0 ? 1 : 0;
      return;
    }
  }
}

TableSpec table_part(const TableSpec& t, const Part& p, std::size_t axis) {
  const auto [first, last] = part_range(p, t.shape.at(axis));
  TableSpec part = t;
  part.shape[axis] = last - first;
  if (axis + 1 < t.shape.size()) {
    // Leading extents are 1, so the whole's line index is the part's plus the lines
    // before `first`.
    std::size_t lines_per_entry = 1;
    for (std::size_t k = axis + 1; k + 1 < t.shape.size(); ++k) lines_per_entry *= t.shape[k];
    const std::size_t skip = first * lines_per_entry;
    part.line = [line = t.line, skip](std::size_t l, double* out) { line(l + skip, out); };
  } else {
    // The cut runs along the line itself: compute it whole, keep the share.
    const std::size_t len = t.shape.back();
    part.line = [line = t.line, len, first = first, last = last](std::size_t l, double* out) {
      std::vector<double> full(len);
      line(l, full.data());
      std::copy(full.begin() + static_cast<std::ptrdiff_t>(first),
                full.begin() + static_cast<std::ptrdiff_t>(last), out);
    };
  }
  return part;
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
    compute_line(t, 0, v.data());
    std::vector<std::byte> out(line_len * item);
    convert_values(v.data(), line_len, dtype, out.data());
    sink.write_rows(out.data(), rows);
    return;
  }
  const std::size_t row_bytes = lines_per_row * line_len * item;
  const std::size_t row_lines = lines_per_row;

  if (row_bytes >= block_bytes) {
    // Rows larger than a block (e.g. [2, N, R] or [H, Q, K]): one row at a time, its lines
    // in parallel, so memory stays at one row.
    std::vector<std::byte> out(row_bytes);
    for (std::size_t r = 0; r < rows; ++r) {
      const auto lines = static_cast<std::int64_t>(row_lines);
      // No exception may leave an OpenMP region: the first bad line is noted and
      // recomputed (and refused) after it.
      std::atomic<std::size_t> bad_line{static_cast<std::size_t>(-1)};
#pragma omp parallel
      {
        std::vector<double> buf(line_len);
#pragma omp for schedule(static)
        for (std::int64_t l = 0; l < lines; ++l) {
          const std::size_t line = r * row_lines + static_cast<std::size_t>(l);
          t.line(line, buf.data());
          if (bad_value(buf.data(), line_len, t.allow_neg_inf) < line_len) {
            std::size_t cur = bad_line.load();
            while (line < cur && !bad_line.compare_exchange_weak(cur, line)) {
            }
          }
          convert_values(buf.data(), line_len, dtype,
                         out.data() + static_cast<std::size_t>(l) * line_len * item);
        }
      }
      if (bad_line.load() != static_cast<std::size_t>(-1)) {
        std::vector<double> buf(line_len);
        compute_line(t, bad_line.load(), buf.data());
      }
      sink.write_rows(out.data(), 1);
    }
    return;
  }

  // Many small rows: a pipeline. Each thread takes the next block of rows, computes it
  // into one of a ring of buffers, and whichever thread finds the oldest block complete
  // writes it (in order) while the others keep computing. Waiting is on a condition
  // variable, not a spinning barrier, so a busy machine does not burn time in barriers.
  const std::size_t block_rows = std::max<std::size_t>(1, std::min(rows, block_bytes / row_bytes));
  const std::size_t nblocks = (rows + block_rows - 1) / block_rows;
  const std::size_t threads = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
  const std::size_t slots = std::min(nblocks, 2 * threads + 1);
  std::vector<std::vector<std::byte>> buf(slots);
  std::vector<std::size_t> ready(slots, 0);  // block id + 1 held complete in the slot
  std::mutex m;
  std::condition_variable cv;
  std::size_t next_block = 0, written = 0;
  bool writing = false, abort = false;
  std::exception_ptr err;

#pragma omp parallel num_threads(static_cast <int>(std::min(threads, nblocks)))
  {
    std::vector<double> line(line_len);
    for (;;) {
      std::size_t b = 0;
      {
        std::unique_lock<std::mutex> lk(m);
        if (abort || next_block >= nblocks) break;
        b = next_block++;
        cv.wait(lk, [&] { return abort || written + slots > b; });
        if (abort) break;
      }
      const std::size_t slot = b % slots;
      const std::size_t first = b * block_rows;
      const std::size_t count = std::min(block_rows, rows - first);
      try {
        std::vector<std::byte>& out = buf[slot];
        if (out.size() < count * row_bytes) out.resize(block_rows * row_bytes);
        const std::size_t line0 = first * row_lines;
        for (std::size_t l = 0; l < count * row_lines; ++l) {
          compute_line(t, line0 + l, line.data());
          convert_values(line.data(), line_len, dtype, out.data() + l * line_len * item);
        }
      } catch (...) {
        std::lock_guard<std::mutex> lk(m);
        if (!err) err = std::current_exception();
        abort = true;
        cv.notify_all();
        break;
      }
      std::unique_lock<std::mutex> lk(m);
      ready[slot] = b + 1;
      if (writing) continue;
      writing = true;
      while (!abort && written < nblocks && ready[written % slots] == written + 1) {
        const std::size_t w = written;
        const std::size_t wcount = std::min(block_rows, rows - w * block_rows);
        lk.unlock();
        try {
          sink.write_rows(buf[w % slots].data(), wcount);
        } catch (...) {
          lk.lock();
          if (!err) err = std::current_exception();
          abort = true;
          break;
        }
        lk.lock();
        ++written;
        cv.notify_all();
      }
      writing = false;
      cv.notify_all();
    }
  }
  if (err) std::rethrow_exception(err);
}

namespace {

// A sink writing a table's rows into a Tensor, one after the other.
class MemorySink final : public TensorSink {
 public:
  explicit MemorySink(Tensor& t)
      : t_(t),
        row_bytes_(t.ndim() == 0 || t.shape()[0] == 0 ? t.nbytes() : t.nbytes() / t.shape()[0]) {}
  void write_rows(const void* src, std::size_t count) override {
    if (count * row_bytes_ == 0) return;  // an empty table's pointers may be null
    std::memcpy(t_.bytes() + at_, src, count * row_bytes_);
    at_ += count * row_bytes_;
  }
  void commit() override {}

 private:
  Tensor& t_;
  std::size_t row_bytes_;
  std::size_t at_ = 0;
};

}  // namespace

Tensor table_tensor(const TableSpec& t, DType dtype) {
  Tensor values(dtype, t.shape);
  MemorySink sink(values);
  write_table(t, dtype, sink, std::size_t{8} << 20);
  return values;
}

}  // namespace posenc
