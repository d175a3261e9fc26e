// Attention's I/O plumbing (attention_io.hpp): outputs allocated or streamed to a sink,
// and the out-of-core run over K and V in chunks or in their mapped files.
#include "ops/attention_io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "io/slab.hpp"
#include "ops/blas_threads.hpp"
#include "ops/widen.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"

namespace posenc::attention_detail {

// The sink AttentionOptions::output_sink gives for the output, when the output is
// emitted in rows that an item holds contiguously (d last, s before it) and the sink
// takes positional writes; null otherwise (the output is then kept in memory).
TensorSink* take_output_sink(const Geometry& g, const Shape& q_shape, const AttentionOptions& opt) {
  if (!g.emit_output || !opt.output_sink) return nullptr;
  const Shape os = g.output_shape(q_shape);
  const Strides st = strides_of(os, g.axes);
  if (st.d != 1 || st.s != static_cast<std::ptrdiff_t>(g.dv)) return nullptr;
  TensorSink* sink = opt.output_sink(TensorInfo{g.out, os, {}, {}});
  return sink && sink->writes_at() ? sink : nullptr;
}

// The emitted tensors (the output only when no sink takes it), allocated, and P's
// pointers to them.
template <class T>
AttentionResult allocate(Plan<T>& P, const Shape& q_shape, TensorSink* out_sink) {
  const Geometry& g = P.g;
  AttentionResult res;
  if (g.emit_logits) res.logits = Tensor(g.out, g.scores_shape()), P.logits = res.logits.bytes();
  if (g.emit_probs) res.probs = Tensor(g.out, g.scores_shape()), P.probs = res.probs.bytes();
  if (g.emit_output) {
    const Shape os = g.output_shape(q_shape);
    P.out_st = strides_of(os, g.axes);
    if (out_sink) {
      P.out_sink = out_sink;
      res.output_streamed = true;
    } else {
      res.output = Tensor(g.out, os);
      P.out = res.output.bytes();
    }
  }
  if (g.emit_lse) res.lse = Tensor(g.lse, g.lse_shape()), P.lse = res.lse.bytes();
  return res;
}

// K and V read block by block are read in pieces of this many bytes (see run_in_place).
constexpr std::size_t kReadPiece = std::size_t{256} << 10;

std::size_t read_buffers(const Geometry& g, std::size_t key_block) {
  const std::size_t ts = dtype_size(g.compute);
  return add_sat(mul_sat(mul_sat(key_block, g.d + g.dv), ts), 2 * kReadPiece);
}

StreamMemory stream_memory(const Geometry& g, const TensorInfo& q, const TensorInfo& k,
                           const TensorInfo* v, const AttentionOptions& opt,
                           bool output_in_memory) {
  const std::size_t ts = dtype_size(g.compute), os = dtype_size(g.out);
  const bool d_last = g.axes.back() == 'd';
  const std::size_t rows = mul_sat(mul_sat(g.b, g.hq), g.sq);
  Blocks bl = blocks_for(g, opt);
  StreamMemory m;
  std::size_t f = 0;
  if (g.emit_output && output_in_memory) f = add_sat(f, mul_sat(mul_sat(rows, g.dv), os));
  if (g.emit_lse) f = add_sat(f, mul_sat(rows, dtype_size(g.lse)));
  const std::size_t qn = checked_numel(q.shape, 1, "q");
  f = add_sat(f, mul_sat(qn, dtype_size(q.dtype)));
  if (q.dtype != g.compute || !d_last) f = add_sat(f, mul_sat(qn, ts));
  // Per-row state of every work item: output accumulator, max, sum, key range, and the
  // Shaw and decomposed terms.
  f = add_sat(f, mul_sat(rows, (g.dv + 1 + 2 * g.rel_rows + g.dec_cols) * ts + 8 + 16));
  f = add_sat(f, plan_bytes(g, opt));
  // One worker's score tiles (see Geometry::threads), and where a head's rows are strided
  // (h between s and d, as bshd) its contiguous copies of a Q block and a K or V block
  // for BLAS (gemm in attention_kernel.cpp).
  m.tile = mul_sat(bl.q, bl.k + g.global) * ts;
  if (g.axes.find('h') > g.axes.find('s')) {
    const std::size_t copies = add_sat(mul_sat(bl.q, g.d),
                                       mul_sat(bl.k + g.global, std::max(g.d, g.dv)));
    m.tile = add_sat(m.tile, mul_sat(copies, ts));
  }
  m.fixed = add_sat(f, m.tile);
  auto per = [&](const TensorInfo& t, std::size_t width) {
    std::size_t bytes = dtype_size(t.dtype) + (t.dtype != g.compute || !d_last ? ts : 0);
    return mul_sat(mul_sat(mul_sat(g.b, g.hk), width), bytes);
  };
  m.per_key = per(k, g.d);
  if (v) m.per_key = add_sat(m.per_key, per(*v, g.dv));
  return m;
}

namespace {

// Calls f(first element, count) for the ranges of the C-order data that hold entries
// [c0, c0 + n) along axis `s_axis` of a tensor of `shape`: one per index of the axes
// before it.
template <class F>
void axis_ranges(const Shape& shape, std::size_t s_axis, std::size_t c0, std::size_t n, F&& f) {
  std::size_t outer = 1, inner = 1;
  for (std::size_t ax = 0; ax < s_axis; ++ax) outer *= shape[ax];
  for (std::size_t ax = s_axis + 1; ax < shape.size(); ++ax) inner *= shape[ax];
  for (std::size_t o = 0; o < outer; ++o) f((o * shape[s_axis] + c0) * inner, n * inner);
}

// Keys [c0, c0 + n) of a tensor along its axis `s_axis` into `t`, which is reused when
// the shape repeats.
void read_keys(TensorSource& src, std::size_t s_axis, std::size_t c0, std::size_t n, Tensor& t) {
  const TensorInfo& info = src.info();
  Shape cs = info.shape;
  cs[s_axis] = n;
  if (t.shape() != cs || t.dtype() != info.dtype) {
    t = Tensor();  // free the last chunk before allocating the next
    t = Tensor(info.dtype, cs);
  }
  std::byte* dst = t.bytes();
  const std::size_t item = dtype_size(info.dtype);
  axis_ranges(info.shape, s_axis, c0, n, [&](std::size_t first, std::size_t count) {
    src.read_elements(first, count, dst);
    dst += count * item;
  });
}

// Q, K or V used in place, in the page cache, when its source maps its file (an NPY file
// in C order and native byte order, a contiguous HDF5 dataset) and it is already in the
// compute dtype with d last: no copy. `base` is null otherwise.
template <class T>
struct MappedInput {
  const T* base = nullptr;
  Strides st;
  /// The view of entries from c0 on along s.
  View<T> view(std::size_t c0 = 0) const {
    return {base + static_cast<std::ptrdiff_t>(c0) * st.s, st.b, st.h, st.s};
  }
};

template <class T>
MappedInput<T> mapped_input(TensorSource& src, const Geometry& g) {
  MappedInput<T> m;
  const TensorInfo& info = src.info();
  if (info.dtype != dtype_of<T>() || g.axes.back() != 'd') return m;
  m.base = reinterpret_cast<const T*>(src.mapped_data());  // aligned to the element size
  m.st = strides_of(info.shape, g.axes);
  return m;
}

// K or V used in place of its mapped file for the run in place: stored in T and used as
// it is, or stored as f16 or bf16 and widened one key block at a time into the worker's
// buffer, while the block is in the cache for the product (no copy of the whole tensor,
// no pass of its own). Widening is exact, so the bits are those of a run on the tensor
// converted first. `base` is null when the file is not mapped or the dtype is another.
// Or K or V read from its file instead (`reader`, with `base` null): each key block read
// with positional reads (TensorSource::read_raw) into the worker's block buffer, or
// into its byte buffer and widened from there; only where a head's rows are contiguous
// (bhsd), so a block is one read. The same blocks hold the same values either way.
struct MappedKV {
  const std::byte* base = nullptr;
  TensorSource* reader = nullptr;
  DType dtype = DType::f32;
  Strides st;
  std::size_t width = 0;  // d or dv
  const std::int64_t* rows = nullptr;  // KeyRows: entry b's key j is row rows[b * sk + j]
  bool usable() const { return base != nullptr || reader != nullptr; }
};

// K or V of `dtype` and `shape` at `base` (a mapped file, or a tensor in memory) as a
// MappedKV, when it can be used in place.
template <class T>
MappedKV mapped_kv(const std::byte* base, DType dtype, const Shape& shape, const Geometry& g,
                   std::size_t width) {
  MappedKV m;
  if (!kv_in_place(g, dtype)) return m;  // g.compute is T
  m.base = base;
  m.dtype = dtype;
  m.st = strides_of(shape, g.axes);
  m.width = width;
  return m;
}

// K or V used in its mapping where the budget holds all of K and V (ways.map), else read
// block by block (MappedKV::reader) where the budget holds the workers' block buffers
// (ways.read): each worker reads its blocks as it needs them, in place of chunks read by
// one thread and passed over again (decode, sk 65,536 of 8 heads, --max-memory 64M, on
// ext4: f32 63 ms of CPU against 110 in chunks, f16 50 against 210), else neither
// (chunks). The mapping is kept where the budget allows it, on tmpfs too: reading costs
// a copy into the block buffers, which on Linux 6.18 costs more than mapping even
// tmpfs's 4 KiB pages (f32 decode 105 ms of CPU read against 98 mapped on tmpfs, 64
// against 56 on ext4; f16 and bf16 alike or worse: bench/README.md).
// POSENC_KV_IO=map or =read forces one way: `map` never reads (the mapping, or chunks
// under a budget that does not hold it), `read` reads wherever ways.read allows. For
// tests of every path and for measurements, not a user setting (any other value is
// ignored).
template <class T>
MappedKV mapped_kv(TensorSource& src, const Geometry& g, std::size_t width, KvWays ways) {
  const char* force = std::getenv("POSENC_KV_IO");
  const bool never = force && std::strcmp(force, "map") == 0;
  const bool always = force && std::strcmp(force, "read") == 0;
  const bool read = !never && (always || !ways.map);
  if (ways.read && read && src.raw_reads()) {
    MappedKV m = mapped_kv<T>(nullptr, src.info().dtype, src.info().shape, g, width);
    if (m.width == width && m.st.s == static_cast<std::ptrdiff_t>(width)) {
      m.reader = &src;
      return m;
    }
  }
  if (!ways.map) return {};
  return mapped_kv<T>(src.mapped_data(), src.info().dtype, src.info().shape, g, width);
}

// Whether entries [c0, c0 + n) along axis `s_axis` of a mapped tensor are all finite,
// its ranges checked by the worker threads.
template <class T>
bool ranges_finite(const T* base, const Shape& shape, std::size_t s_axis, std::size_t c0,
                   std::size_t n) {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  axis_ranges(shape, s_axis, c0, n,
              [&](std::size_t first, std::size_t count) { ranges.emplace_back(first, count); });
  std::atomic<bool> finite{true};
  for_items(ranges.size(), thread_count(ranges.size()), [&](std::size_t i, std::size_t) {
    if (!all_finite(base + ranges[i].first, ranges[i].second)) finite = false;
  });
  return finite;
}

// Whether keys [j0, j0 + n) of batch b, head h of a K or V view (rows of `width`) are
// finite.
template <class T>
bool keys_finite(const View<T>& x, std::size_t b, std::size_t h, std::size_t j0, std::size_t n,
                 std::size_t width) {
  const T* p = x.p + b * x.b + h * x.h + j0 * x.s;
  if (x.s == static_cast<std::ptrdiff_t>(width)) return all_finite(p, n * width);
  for (std::size_t j = 0; j < n; ++j) {
    if (!all_finite(p + j * x.s, width)) return false;
  }
  return true;
}

struct NonFiniteKeys {};

// n keys stored as `from` (f16, bf16, or f32 under f64 arithmetic) widened exactly into
// dst; returns whether all are finite, found on the way as detail::widen finds it.
template <class T>
bool widen_keys(DType from, const std::byte* src, T* dst, std::size_t n) {
  if constexpr (std::is_same_v<T, double>) {
    if (from == DType::f32) return widen_f32(reinterpret_cast<const float*>(src), dst, n);
  }
  return detail::widen(from, src, dst, n);
}

// K and V used in place in their mapped files (P.k, P.v): each work item (when decoding,
// the query heads of one KV head: heads_per_item) walks its own key blocks from first
// to last, begins, folds and stores without waiting for the
// others, and its scratch is its thread's. A key block of a KV head is checked finite
// by the first item that uses it, while it is in the cache for the product, so K and V
// are read once; blocks no row sees are neither read nor checked. Its pages leave the
// process's resident memory (not the page cache) once the last item that uses it is
// done, where a head's keys are contiguous (bhsd). Items compute as in the chunked run:
// the same blocks in the same order, so the same bits. (Decode, sq 1 and sk 65,536 of
// 8 heads: 21.7 ms against 38.6 ms chunked, peak RSS 55 MiB.)
//
// In memory (`name` given), every block is checked, the blocks no row sees once the
// items are done, and a failure is named by `name` (the caller's order of its inputs)
// instead of the search below.
template <class T>
void run_in_place(const Plan<T>& P, const MappedKV& km, const MappedKV* vm, bool check,
                  std::size_t nq, std::size_t nthreads, bool mapped,
                  const std::function<void()>* name = nullptr) {
  const Geometry& g = P.g;
  const std::size_t gs = heads_per_item(g, nq, nthreads);  // query heads an item
  const std::size_t items = g.b * (g.hq / gs) * nq;
  const std::size_t kB = std::max<std::size_t>(P.bl.k, 1);
  const std::size_t nblk = (g.sk + kB - 1) / kB;
  const std::size_t group = g.hq / g.hk;
  const bool has_v = vm != nullptr;
  auto at = [&](std::size_t it) { return item_at(g, P.bl, nq, it, gs); };
  auto slot = [&](std::size_t b, std::size_t h, std::size_t blk) {
    return (b * g.hk + h / group) * nblk + blk;
  };
  // Per (batch, KV head, key block): the items yet to use it, and whether it was checked.
  const std::size_t nslots = g.b * g.hk * nblk;
  std::unique_ptr<std::atomic<std::uint32_t>[]> left(new std::atomic<std::uint32_t>[nslots]());
  std::unique_ptr<std::atomic<bool>[]> checked(new std::atomic<bool>[nslots]());
  std::vector<bool> used(nslots);
  for (std::size_t it = 0; it < items; ++it) {
    auto [b, h, q0] = at(it);
    auto [lo, hi] = item_key_range(P, b, q0);
    if (lo > hi) continue;
    for (std::size_t blk = static_cast<std::size_t>(lo) / kB;
         blk <= static_cast<std::size_t>(hi) / kB; ++blk) {
      left[slot(b, h, blk)].fetch_add(1, std::memory_order_relaxed);
      used[slot(b, h, blk)] = true;
    }
  }
  // The stored rows of block `blk` of batch b, query head h, and their number.
  auto rows_of = [&](const MappedKV& m, std::size_t b, std::size_t h, std::size_t blk) {
    const std::size_t j0 = blk * kB;
    const std::ptrdiff_t off = b * m.st.b + (h / group) * m.st.h + j0 * m.st.s;
    return std::pair<const std::byte*, std::size_t>{m.base + off * dtype_size(m.dtype),
                                                    std::min(kB, g.sk - j0)};
  };
  // The block as a view of T from its first key on: in place, or widened into `buf`,
  // or read into `buf` (or into `raw`, then widened into `buf`). Widening finds whether
  // the keys are finite on the way; `finite` (when given) gets it, and for keys in place
  // or read as they are checks them.
  auto block = [&](const MappedKV& m, std::size_t b, std::size_t h, std::size_t blk,
                   std::vector<T>& buf, std::vector<std::byte>& raw, bool* finite) -> View<T> {
    if (m.reader) {  // a head's rows contiguous: the block is one range of the data
      const std::size_t j0 = blk * kB, n = std::min(kB, g.sk - j0);
      const std::size_t es = dtype_size(m.dtype), count = n * m.width;
      const std::size_t off =
          static_cast<std::size_t>(b * m.st.b + (h / group) * m.st.h + j0 * m.st.s) * es;
      buf.resize(count);
      // In pieces of kReadPiece bytes, each checked (or widened) while it is in the L2
      // cache: a whole block of K and one of V (and their f16 bytes) do not fit L2.
      const std::size_t per = kReadPiece / es;
      const bool same = m.dtype == dtype_of<T>();
      if (!same) raw.resize(std::min(count, per) * es);
      bool all = true;
      for (std::size_t at = 0; at < count; at += per) {
        const std::size_t k = std::min(per, count - at);
        if (same) {
          m.reader->read_raw(off + at * es, k * es, buf.data() + at);
          if (finite) all &= all_finite(buf.data() + at, k);
        } else {
          m.reader->read_raw(off + at * es, k * es, raw.data());
          all &= widen_keys(m.dtype, raw.data(), buf.data() + at, k);
        }
      }
      if (finite) *finite = all;
      return {buf.data(), 0, 0, static_cast<std::ptrdiff_t>(m.width)};
    }
    if (m.rows) {  // a KV cache's rows (KeyRows), gathered as they are widened
      const std::size_t j0 = blk * kB, n = std::min(kB, g.sk - j0);
      const std::size_t es = dtype_size(m.dtype);
      const std::int64_t* r = m.rows + b * g.sk + j0;
      const std::byte* head = m.base + static_cast<std::size_t>((h / group) * m.st.h) * es;
      buf.resize(n * m.width);
      bool all = true;
      for (std::size_t j = 0; j < n; ++j) {
        T* dst = buf.data() + j * m.width;
        if (r[j] < 0) {
          std::fill(dst, dst + m.width, T(0));
          continue;
        }
        const std::byte* p = head + static_cast<std::size_t>(r[j] * m.st.s) * es;
        if (m.dtype == dtype_of<T>()) {
          std::memcpy(dst, p, m.width * sizeof(T));
          if (finite) all &= all_finite(dst, m.width);
        } else if (m.dtype == DType::f64) {
          // f64 caches under f32 arithmetic: rounded once, as the in-memory run's astype.
          const double* x = reinterpret_cast<const double*>(p);
          for (std::size_t c = 0; c < m.width; ++c) dst[c] = static_cast<T>(x[c]);
          if (finite) all &= all_finite(dst, m.width);
        } else {
          all &= widen_keys(m.dtype, p, dst, m.width);
        }
      }
      if (finite) *finite = all;
      return {buf.data(), 0, 0, static_cast<std::ptrdiff_t>(m.width), true};
    }
    auto [p, n] = rows_of(m, b, h, blk);
    if (m.dtype == dtype_of<T>()) {
      const View<T> x{reinterpret_cast<const T*>(p), 0, 0, m.st.s};
      if (finite) *finite = keys_finite(x, 0, 0, 0, n, m.width);
      return x;
    }
    buf.resize(n * m.width);
    const std::size_t es = dtype_size(m.dtype);
    bool all = true;
    if (m.st.s == static_cast<std::ptrdiff_t>(m.width)) {  // rows contiguous: one call
      all = widen_keys(m.dtype, p, buf.data(), n * m.width);
    } else {
      for (std::size_t j = 0; j < n; ++j) {
        all &= widen_keys(m.dtype, p + j * m.st.s * es, buf.data() + j * m.width, m.width);
      }
    }
    if (finite) *finite = all;
    return {buf.data(), 0, 0, static_cast<std::ptrdiff_t>(m.width),
            m.st.s != static_cast<std::ptrdiff_t>(m.width)};
  };
  auto finite = [&](const MappedKV& m, std::size_t b, std::size_t h, std::size_t blk,
                    std::vector<T>& buf, std::vector<std::byte>& raw) {
    bool ok = true;
    block(m, b, h, blk, buf, raw, &ok);
    return ok;
  };
  // Released in spans of at least kReleaseBytes: each release interrupts the other
  // cores to flush their TLBs (releasing every 512 KiB block of a 512 MiB decode cost
  // 20% of its time).
  static constexpr std::size_t kReleaseBytes = std::size_t{8} << 20;
  struct Span {
    const std::byte *lo = nullptr, *hi = nullptr;
    void add(const std::byte* p, std::size_t n) {
      if (p != hi) flush(), lo = p;
      hi = p + n;
      if (static_cast<std::size_t>(hi - lo) >= kReleaseBytes) flush();
    }
    void flush() {
      if (hi != lo) io_detail::release_mapped(lo, static_cast<std::size_t>(hi - lo));
      lo = hi = nullptr;
    }
  };
  std::vector<std::array<Span, 2>> spans(nthreads);  // K, V per thread
  auto release = [&](Span& span, const MappedKV& m, std::size_t b, std::size_t h, std::size_t blk) {
    if (!mapped || m.reader) return;  // a tensor in memory stays as it is; reads map nothing
    if (m.st.s != static_cast<std::ptrdiff_t>(m.width)) return;  // rows of heads interleaved
    auto [p, n] = rows_of(m, b, h, blk);
    span.add(p, n * m.width * dtype_size(m.dtype));
  };
  std::vector<std::vector<Scratch<T>>> scratch(nthreads, std::vector<Scratch<T>>(gs));
  std::vector<std::array<std::vector<T>, 2>> widened(nthreads);  // K, V per thread
  std::vector<std::array<std::vector<std::byte>, 2>> raws(nthreads);  // K, V bytes read
  // Decoding with rows of a head's keys contiguous (bhsd) folds in tiles (fold_tiled):
  // each tile of K and V is read, checked or widened once for the item's query heads,
  // while it is in the L1 cache.
  auto tileable = [&](const MappedKV& m) {
    return !m.rows && m.st.s == static_cast<std::ptrdiff_t>(m.width);
  };
  const bool tiles = tileable(km) && (!has_v || (tileable(*vm) && g.emit_output));
  // The tiles of block `blk` of K or V: views of the block read whole (m.reader), of its
  // rows in place, or widened a tile at a time into `buf`; each checked finite when
  // `check_tiles` (NonFiniteKeys otherwise).
  auto key_tiles = [&](const MappedKV& m, std::size_t b, std::size_t h, std::size_t blk,
                       std::vector<T>& buf, std::vector<std::byte>& raw,
                       bool check_tiles) -> KeyTiles<T> {
    const std::size_t j0 = blk * kB, width = m.width;
    if (m.reader) {
      bool ok = true;
      const T* p = block(m, b, h, blk, buf, raw, check_tiles ? &ok : nullptr).p;
      if (!ok) throw NonFiniteKeys{};
      return [p, j0, width](std::size_t j, std::size_t) { return p + (j - j0) * width; };
    }
    const std::byte* p = rows_of(m, b, h, blk).first;
    const std::size_t row = width * dtype_size(m.dtype);
    if (m.dtype == dtype_of<T>()) {
      return [p, j0, row, width, check_tiles](std::size_t j, std::size_t n) {
        const T* x = reinterpret_cast<const T*>(p + (j - j0) * row);
        if (check_tiles && !all_finite(x, n * width)) throw NonFiniteKeys{};
        return x;
      };
    }
    buf.resize(kKeyTile * width);
    return [p, j0, row, width, check_tiles, &buf, dtype = m.dtype](std::size_t j, std::size_t n) {
      if (!widen_keys(dtype, p + (j - j0) * row, buf.data(), n * width) && check_tiles) {
        throw NonFiniteKeys{};
      }
      return static_cast<const T*>(buf.data());
    };
  };
  // f16 K or V in place (not read into a buffer) for the kernels that widen in registers
  // under f32 arithmetic (fold_tiled, HalfTiles), each tile checked finite when
  // `check_tiles`: no pass that widens each tile into a buffer first.
  auto half_tiles = [&](const MappedKV& m, std::size_t b, std::size_t h, std::size_t blk,
                        bool check_tiles) -> std::optional<HalfTiles> {
    if (!std::is_same_v<T, float> || m.dtype != DType::f16 || m.reader || !half_tiles_fused()) {
      return std::nullopt;
    }
    const std::size_t j0 = blk * kB, width = m.width;
    const auto* p = reinterpret_cast<const std::uint16_t*>(rows_of(m, b, h, blk).first);
    return HalfTiles([p, j0, width, check_tiles](std::size_t j, std::size_t n) {
      const std::uint16_t* x = p + (j - j0) * width;
      if (check_tiles && !half_finite(x, n * width)) throw NonFiniteKeys{};
      return x;
    });
  };
  try {
    for_items(items, nthreads, [&](std::size_t it, std::size_t t) {
      auto [b, h, q0] = at(it);
      std::vector<Scratch<T>>& ws = scratch[t];
      for (std::size_t i = 0; i < gs; ++i) item_begin(P, ws[i], b, h + i, q0);
      const Scratch<T>& w = ws[0];  // the keys seen do not depend on the head
      const bool tiled = tiles && folds_tiled(P, item_rows(P, b, q0));
      if (w.lo_min <= w.hi_max) {
        for (std::size_t blk = static_cast<std::size_t>(w.lo_min) / kB;
             blk <= static_cast<std::size_t>(w.hi_max) / kB; ++blk) {
          const std::size_t sl = slot(b, h, blk);
          const bool check_now = check && !checked[sl].load(std::memory_order_acquire);
          if (tiled) {
            const std::size_t j0 = blk * kB, nb = std::min(kB, g.sk - j0);
            const std::int64_t b0 = static_cast<std::int64_t>(j0);
            const auto [a, e] = keys_seen(w, 0, 1, b0, b0 + static_cast<std::int64_t>(nb));
            // Keys of the block the row does not see are checked apart, the block whole.
            const bool whole = a == b0 && e == b0 + static_cast<std::int64_t>(nb) - 1;
            if (check_now && !whole &&
                (!finite(km, b, h, blk, widened[t][0], raws[t][0]) ||
                 (has_v && !finite(*vm, b, h, blk, widened[t][1], raws[t][1])))) {
              throw NonFiniteKeys{};
            }
            if (a <= e) {
              const bool check_tiles = check_now && whole;
              const KeyTiles<T> kt =
                  key_tiles(km, b, h, blk, widened[t][0], raws[t][0], check_tiles);
              const KeyTiles<T> vt =
                  has_v ? key_tiles(*vm, b, h, blk, widened[t][1], raws[t][1], check_tiles)
                        : KeyTiles<T>{};
              const std::optional<HalfTiles> hk = half_tiles(km, b, h, blk, check_tiles);
              const std::optional<HalfTiles> hv =
                  has_v ? half_tiles(*vm, b, h, blk, check_tiles) : std::nullopt;
              fold_tiled(P, ws.data(), gs, b, h, q0, static_cast<std::size_t>(a),
                         static_cast<std::size_t>(e), kt, has_v ? &vt : nullptr,
                         hk ? &*hk : nullptr, hv ? &*hv : nullptr);
            }
            if (check_now) checked[sl].store(true, std::memory_order_release);
            if (left[sl].fetch_sub(1, std::memory_order_acq_rel) == 1) {
              release(spans[t][0], km, b, h, blk);
              if (has_v) release(spans[t][1], *vm, b, h, blk);
            }
            continue;
          }
          bool k_ok = true, v_ok = true;
          const View<T> K =
              block(km, b, h, blk, widened[t][0], raws[t][0], check_now ? &k_ok : nullptr);
          const View<T> V = has_v ? block(*vm, b, h, blk, widened[t][1], raws[t][1],
                                          check_now && k_ok ? &v_ok : nullptr)
                                  : View<T>{};
          if (check_now) {
            if (!k_ok || !v_ok) throw NonFiniteKeys{};
            checked[sl].store(true, std::memory_order_release);
          }
          const std::size_t j0 = blk * kB;
          for (std::size_t i = 0; i < gs; ++i) {
            item_keys(P, ws[i], ws[i].s, K, V, j0, b, h + i, q0, j0, std::min(j0 + kB, g.sk));
          }
          if (left[sl].fetch_sub(1, std::memory_order_acq_rel) == 1) {
            release(spans[t][0], km, b, h, blk);
            if (has_v) release(spans[t][1], *vm, b, h, blk);
          }
        }
      }
      for (std::size_t i = 0; i < gs; ++i) item_end(P, ws[i], ws[i].s, b, h + i, q0);
    });
    if (check && name) {
      // The blocks no row sees, which no item read.
      std::vector<std::size_t> rest;
      for (std::size_t sl = 0; sl < nslots; ++sl) {
        if (!used[sl]) rest.push_back(sl);
      }
      std::vector<std::vector<T>> bufs(nthreads);
      std::vector<std::vector<std::byte>> rbufs(nthreads);
      for_items(rest.size(), std::min(nthreads, std::max<std::size_t>(rest.size(), 1)),
                [&](std::size_t i, std::size_t t) {
                  const std::size_t sl = rest[i], blk = sl % nblk, bh = sl / nblk;
                  const std::size_t b = bh / g.hk, h = bh % g.hk * group;
                  if (!finite(km, b, h, blk, bufs[t], rbufs[t]) ||
                      (has_v && !finite(*vm, b, h, blk, bufs[t], rbufs[t]))) {
                    throw NonFiniteKeys{};
                  }
                });
    }
  } catch (...) {
    if (check && name) {
      (*name)();
      try {
        throw;
      } catch (const NonFiniteKeys&) {
        throw std::logic_error("attention: non-finite keys not found again");
      }
    }
    // NaN or Inf in K or V is named before any other failure (an overflow another item
    // met first), and the same whichever thread got there first: the first key block, in
    // key order, of any KV head that some item reads, K before V (as the chunked run
    // does with chunks of one block).
    if (!check) throw;
    std::vector<T> buf;
    std::vector<std::byte> raw;
    for (std::size_t blk = 0; blk < nblk; ++blk) {
      for (const bool keys : {true, false}) {
        for (std::size_t b = 0; b < g.b; ++b) {
          for (std::size_t h = 0; h < g.hq; h += group) {
            if (!used[slot(b, h, blk)]) continue;
            if (keys && !finite(km, b, h, blk, buf, raw)) throw nonfinite_input("k");
            if (!keys && has_v && !finite(*vm, b, h, blk, buf, raw)) throw nonfinite_input("v");
          }
        }
      }
    }
    try {
      throw;
    } catch (const NonFiniteKeys&) {
      throw std::logic_error("attention: non-finite keys not found again");
    }
  }
}

}  // namespace

template <class T>
AttentionResult run_streamed(TensorSource& qs, TensorSource& ks, TensorSource* vs,
                             const Geometry& g, const AttentionOptions& opt, std::size_t chunk,
                             KvWays ways, TensorSink* out_sink) {
  // Q in place when its file is mapped, else read whole.
  const MappedInput<T> qm = mapped_input<T>(qs, g);
  Tensor qt, hq_;
  if (qm.base == nullptr) qt = read_all_rows(qs);
  if (!opt.allow_nonfinite) {
    require_finite(qt, nullptr, nullptr, opt);  // (qt is empty when Q is mapped)
    const std::size_t q_axis = g.axes.find('s');
    if (qm.base != nullptr && !ranges_finite(qm.base, qs.info().shape, q_axis, 0, g.sq)) {
      throw nonfinite_input("q");
    }
  }
  Plan<T> P;
  plan(P, g, opt, vs != nullptr);
  P.q = qm.base ? qm.view() : make_view<T>(qt, g.axes, hq_);
  AttentionResult res = allocate(P, qs.info().shape, out_sink);
  const std::size_t nq = (g.sq + P.bl.q - 1) / P.bl.q;
  const std::size_t items = g.b * g.hq * nq;
  if (g.sq == 0) return res;
  OneBlasThread one_blas;
  const std::size_t nthreads = thread_count(items, g.threads);
  const bool map_kv = ways.map;
  const MappedKV kp = mapped_kv<T>(ks, g, g.d, ways);
  const MappedKV vp = vs ? mapped_kv<T>(*vs, g, g.dv, ways) : MappedKV{};
  if (kp.usable() && (vs == nullptr || vp.usable())) {
    run_in_place(P, kp, vs ? &vp : nullptr, !opt.allow_nonfinite, nq, nthreads, true);
    return res;
  }
  const MappedInput<T> km = map_kv ? mapped_input<T>(ks, g) : MappedInput<T>{};
  const MappedInput<T> vm = map_kv && vs ? mapped_input<T>(*vs, g) : MappedInput<T>{};
  std::vector<Scratch<T>> state(items);
  std::vector<std::vector<T>> tiles(nthreads);
  auto at = [&](std::size_t it) { return item_at(g, P.bl, nq, it); };
  for_items(items, nthreads, [&](std::size_t it, std::size_t) {
    auto [b, h, q0] = at(it);
    item_begin(P, state[it], b, h, q0);
  });
  // Chunks that no row may see are not read.
  std::int64_t need_lo = static_cast<std::int64_t>(g.sk), need_hi = -1;
  for (const Scratch<T>& w : state) {
    if (w.lo_min <= w.hi_max) {
      need_lo = std::min(need_lo, w.lo_min), need_hi = std::max(need_hi, w.hi_max);
    }
  }
  const std::size_t s_axis = g.axes.find('s');
  Tensor kc, vc, kh, vh;
  for (std::size_t c0 = 0; c0 < g.sk; c0 += chunk) {
    const std::size_t n = std::min(chunk, g.sk - c0);
    if (static_cast<std::int64_t>(c0 + n) <= need_lo || static_cast<std::int64_t>(c0) > need_hi) {
      continue;
    }
    // The chunk of K or V: in place in the mapping, or read into `c`.
    auto keys = [&](TensorSource& src, const MappedInput<T>& m, Tensor& c, Tensor& holder,
                    const char* what) {
      if (m.base == nullptr) {
        read_keys(src, s_axis, c0, n, c);
        if (!opt.allow_nonfinite && c.numel() && c.has_nonfinite()) throw nonfinite_input(what);
        return make_view<T>(c, g.axes, holder);
      }
      if (!opt.allow_nonfinite && !ranges_finite(m.base, src.info().shape, s_axis, c0, n)) {
        throw nonfinite_input(what);
      }
      return m.view(c0);
    };
    const View<T> K = keys(ks, km, kc, kh, "k");
    const View<T> V = vs ? keys(*vs, vm, vc, vh, "v") : View<T>{};
    for_items(items, nthreads, [&](std::size_t it, std::size_t t) {
      auto [b, h, q0] = at(it);
      item_keys(P, state[it], tiles[t], K, V, c0, b, h, q0, c0, c0 + n);
    });
    // Mapped pages done with leave the process's resident memory (not the page cache).
    for (auto [src, m] : {std::pair<TensorSource*, const MappedInput<T>*>{&ks, &km}, {vs, &vm}}) {
      if (m->base == nullptr) continue;
      axis_ranges(src->info().shape, s_axis, c0, n, [&](std::size_t first, std::size_t count) {
        io_detail::release_mapped(reinterpret_cast<const std::byte*>(m->base + first),
                                  count * sizeof(T));
      });
    }
  }
  for_items(items, nthreads, [&](std::size_t it, std::size_t t) {
    auto [b, h, q0] = at(it);
    item_end(P, state[it], tiles[t], b, h, q0);
    state[it] = Scratch<T>();
  });
  return res;
}

const KeyRows*& key_rows() {
  thread_local const KeyRows* rows = nullptr;
  return rows;
}

template <class T>
bool run_widening(const Plan<T>& P, const Tensor& k, const Tensor* v, std::size_t nq,
                  std::size_t nthreads, const std::function<void()>* name_nonfinite) {
  const Geometry& g = P.g;
  if (const KeyRows* kr = key_rows()) {
    // A KV cache: always read through its rows (the tensors only carry the shapes).
    MappedKV km, vm;
    km.base = kr->k, km.dtype = k.dtype(), km.st = strides_of(k.shape(), g.axes);
    km.width = g.d, km.rows = kr->rows;
    if (v) {
      vm.base = kr->v, vm.dtype = v->dtype(), vm.st = strides_of(v->shape(), g.axes);
      vm.width = g.dv, vm.rows = kr->rows;
    }
    run_in_place(P, km, v ? &vm : nullptr, name_nonfinite != nullptr, nq, nthreads, false,
                 name_nonfinite ? &kr->name : nullptr);
    return true;
  }
  const bool widens = k.dtype() != dtype_of<T>() || (v && v->dtype() != dtype_of<T>());
  const MappedKV km = mapped_kv<T>(k.bytes(), k.dtype(), k.shape(), g, g.d);
  const MappedKV vm = v ? mapped_kv<T>(v->bytes(), v->dtype(), v->shape(), g, g.dv) : MappedKV{};
  // Checked as they are read: K and V in the arithmetic's type run in place too (the
  // same blocks in the same order as run_items, so the same bits).
  if (!(widens || name_nonfinite) || km.base == nullptr || (v && vm.base == nullptr)) return false;
  run_in_place(P, km, v ? &vm : nullptr, name_nonfinite != nullptr, nq, nthreads, false,
               name_nonfinite);
  return true;
}

template bool run_widening<float>(const Plan<float>&, const Tensor&, const Tensor*, std::size_t,
                                  std::size_t, const std::function<void()>*);
template bool run_widening<double>(const Plan<double>&, const Tensor&, const Tensor*,
                                   std::size_t, std::size_t, const std::function<void()>*);
template AttentionResult allocate<float>(Plan<float>&, const Shape&, TensorSink*);
template AttentionResult allocate<double>(Plan<double>&, const Shape&, TensorSink*);
template AttentionResult run_streamed<float>(TensorSource&, TensorSource&, TensorSource*,
                                             const Geometry&, const AttentionOptions&, std::size_t,
                                             KvWays, TensorSink*);
template AttentionResult run_streamed<double>(TensorSource&, TensorSource&, TensorSource*,
                                              const Geometry&, const AttentionOptions&, std::size_t,
                                              KvWays, TensorSink*);

AttentionResult run_in_memory(
    TensorSource& q, TensorSource& k, TensorSource* v, const AttentionOptions& opt,
    std::size_t work, const std::string& names,
    const std::function<AttentionResult(const Tensor&, const Tensor&, const Tensor*,
                                        const AttentionOptions&)>& run) {
  const TensorInfo &qi = q.info(), &ki = k.info();
  const TensorInfo* vi = v ? &v->info() : nullptr;
  std::size_t need = work;
  for (const TensorInfo* t : {&qi, &ki, vi}) {
    if (!t) continue;
    need = add_sat(need, mul_sat(checked_numel(t->shape, 1, "attention"), dtype_size(t->dtype)));
  }
  if (opt.max_memory && need > opt.max_memory) {
    throw InputError(fmt::format(
        "{} would need {} with the inputs (Q {}, K {}{}) > --max-memory {}", names,
        bytes_str(need), shape_str(qi.shape), shape_str(ki.shape),
        vi ? ", V " + shape_str(vi->shape) : std::string(), bytes_str(opt.max_memory)));
  }
  Tensor qt = read_all_rows(q), kt = read_all_rows(k);
  std::optional<Tensor> vt;
  if (v) vt = read_all_rows(*v);
  // Checked above, with the inputs; what is left of the budget bounds the workers.
  AttentionOptions rest = opt;
  if (opt.max_memory) rest.max_memory = opt.max_memory - (need - work);
  return run(qt, kt, vt ? &*vt : nullptr, rest);
}

}  // namespace posenc::attention_detail
