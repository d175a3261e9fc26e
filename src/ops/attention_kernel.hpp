#pragma once
// Attention's blocked kernel, shared by the in-memory and the streamed runs: the views
// of Q, K and V, the plan of a run (Plan: masks, score terms, outputs), a work item's
// running online-softmax state (Scratch) and the three steps of a work item
// (item_begin, item_keys, item_end, in attention_kernel.cpp), and the plain threads
// that run the items. Internal to the library.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <omp.h>

#include "ops/attention_decomposed.hpp"
#include "ops/attention_geometry.hpp"
#include "ops/attention_global.hpp"
#include "ops/attention_mask.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/ops/cast.hpp"

namespace posenc::attention_detail {

// Whether every value is finite, on the bits (all-ones exponent), so the loop vectorises
// (AVX-512 and AVX2 clones, in attention_kernel.cpp: K and V are checked as they are
// first read, at the speed of the cache they were just read into).
bool all_finite(const float* p, std::size_t n);
// f32 keys widened to f64 (the default arithmetic's K and V blocks), exactly; whether all
// are finite, found on the way (AVX-512 and AVX2 clones, as all_finite).
bool widen_f32(const float* src, double* dst, std::size_t n);
inline bool all_finite(const double* p, std::size_t n) {
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    bad |= static_cast<std::uint64_t>(
        (__builtin_bit_cast(std::uint64_t, p[i]) & 0x7ff0000000000000ull) ==
        0x7ff0000000000000ull);
  }
  return bad == 0;
}

// exp(x) for x <= 0 (scores minus their row maximum), written so that GCC vectorises
// the loop: Cephes' expf polynomial (max error about 1 ulp) with a 2^n scaling built
// from the exponent bits; below -87 (where expf is subnormal or 0) the result is 0,
// so masked (-inf) scores give exactly 0.
// (In a header for the forward and backward kernels; the files that use it are compiled
// without contracting a * b + c, so every clone rounds alike.)
inline float exp_nonpositive(float x) {
  // The clamp and the final zeroing are integer selects on the bits (negative floats
  // order like their bits as unsigned), which GCC vectorises under -ftrapping-math.
  const std::uint32_t xb = __builtin_bit_cast(std::uint32_t, x);
  const std::uint32_t lim = __builtin_bit_cast(std::uint32_t, -87.0f);
  const std::uint32_t keep = xb > lim ? 0u : ~0u;
  const float xc = __builtin_bit_cast(float, (xb & keep) | (lim & ~keep));
  const float shifter = 12582912.0f;  // 1.5 * 2^23: rounds to an integer in the mantissa
  const float t = xc * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  const std::int32_t ni =
      __builtin_bit_cast(std::int32_t, t) - __builtin_bit_cast(std::int32_t, shifter);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float scale = __builtin_bit_cast(float, (ni + 127) << 23);
  return __builtin_bit_cast(float, __builtin_bit_cast(std::uint32_t, y * scale) & keep);
}

// KV caches (attention_cache.cpp): the keys and values of entry b are rows of a cache
// (contiguous or paged) gathered as the kernel reads each key block, instead of a copy of
// them all. While a KeyRows is set on the calling thread, the in-memory run reads K and V
// through it: key j of entry b is cache row rows[b * sk + j] (-1: a row of zeros), a row
// being hk * width elements from `k` (`v`); the K and V tensors given to attention only
// carry the shapes [b, sk, hk, d]. `name` names NaN or Inf in the keys read.
struct KeyRows {
  const std::byte* k = nullptr;
  const std::byte* v = nullptr;
  const std::int64_t* rows = nullptr;
  std::function<void()> name;
};
// The calling thread's KeyRows, or null (attention_io.cpp).
const KeyRows*& key_rows();

// ---------------------------------------------------------------------------------
// The engine.

template <class T>
struct View {
  const T* p = nullptr;
  std::ptrdiff_t b = 0, h = 0, s = 0;  // element strides; d is contiguous
  // Contiguous rows widened from a layout whose rows are strided (bshd): the products
  // take the path they take on strided rows, so the bits are the same.
  bool strided = false;
};

template <class T>
constexpr DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::f64;
}

// A view of x in type T with contiguous d, converting or transposing into `holder`
// when needed. A conversion reuses the holder's buffer when it has x's shape already
// (the chunks of a streamed run): a new buffer per chunk kept the heap at 90 MiB
// resident under a 32 MiB --max-memory.
template <class T>
View<T> make_view(const Tensor& x, const std::string& axes, Tensor& holder) {
  const Tensor* src = &x;
  if (x.dtype() != dtype_of<T>()) {
    if (holder.dtype() != dtype_of<T>() || holder.shape() != x.shape()) {
      holder = Tensor(dtype_of<T>(), x.shape());
    }
    cast(x.bytes(), x.dtype(), holder.bytes(), dtype_of<T>(), x.numel());
    src = &holder;
  }
  Strides st = strides_of(src->shape(), axes);
  std::size_t dsize = axis_size(src->shape(), axes, 'd');
  if (st.d != 1 && dsize > 1) {
    // d is not the last axis: copy into b, h, s, d order for BLAS.
    std::size_t nb = axis_size(src->shape(), axes, 'b'), nh = axis_size(src->shape(), axes, 'h'),
                ns = axis_size(src->shape(), axes, 's');
    Tensor t(dtype_of<T>(), Shape{nb, nh, ns, dsize});
    const T* in = src->data<T>();
    T* out = t.data<T>();
    for (std::size_t b = 0; b < nb; ++b)
      for (std::size_t h = 0; h < nh; ++h)
        for (std::size_t s = 0; s < ns; ++s)
          for (std::size_t c = 0; c < dsize; ++c)
            *out++ = in[b * st.b + h * st.h + s * st.s + c * st.d];
    holder = std::move(t);
    src = &holder;
    return {src->data<T>(), static_cast<std::ptrdiff_t>(nh * ns * dsize),
            static_cast<std::ptrdiff_t>(ns * dsize), static_cast<std::ptrdiff_t>(dsize)};
  }
  return {src->data<T>(), st.b, st.h, st.s};
}

// Everything a work item reads; built once, shared read-only by the threads.
template <class T>
struct Plan {
  Geometry g;
  Blocks bl;
  View<T> q, k, v;
  bool has_v = false;
  T scale = 1;
  T softcap = 0;
  std::int64_t off = 0;  // query i sits at position i + off
  KeyRules rules;  // which keys each query sees, and the temperature
  // Masks and biases.
  bool has_add_mask = false, has_keep_mask = false;
  std::vector<T> add_mask;
  std::vector<std::uint8_t> keep_mask;
  std::ptrdiff_t m_b = 0, m_h = 0, m_i = 0, m_j = 0;
  std::optional<AlibiVariant> alibi;
  std::vector<double> slopes;  // [hq], or [b][hq] (alibi_slopes per entry)
  std::size_t slope_b = 0;      // slopes' stride between entries
  // [hq][sq + sk - 1] bias by distance j - qpos + sk - 1: T5's buckets or Phi-4
  // audio's clipped distances gathered
  std::vector<T> t5;
  std::vector<T> t5_gate;  // WavLM's factor of the t5 row [b][hq][sq], or empty
  std::vector<T> sinks;
  std::vector<std::int32_t> rel_index;  // by distance, as t5
  std::vector<T> rel_k, rel_v;          // [R, d] (per head: [hq][R][d]), [R, dv]
  std::size_t rel_k_head = 0;           // rel_k's stride between heads; 0 = one table
  std::size_t R = 0;
  Decomposed dec;            // SAM decomposed relative positions (attention_decomposed)
  GlobalKeys<T> global;      // LongT5's side keys (attention_global), folded in by item_end
  const T* bias = nullptr;   // score_bias [b][hq][sq][sk], or null
  std::vector<T> bias_copy;  // score_bias converted to T when its type differs
  MaskedRows masked_rows = MaskedRows::zero;
  // Inputs were checked finite: a non-finite score is then an overflow of T, which must
  // not pass for a masked (-inf) or poisoned (NaN) score.
  bool check_overflow = false;
  // Outputs.
  std::byte* logits = nullptr;
  std::byte* probs = nullptr;
  std::byte* out = nullptr;
  Strides out_st;
  TensorSink* out_sink = nullptr;  // instead of `out`: rows written as items end
  std::byte* lse = nullptr;
  bool per_element() const {
    return softcap > 0 || alibi || !t5.empty() || has_add_mask || has_keep_mask || R > 0 ||
           bias || rules.scales_queries() || dec.on();
  }
};

template <class T>
struct Scratch {
  std::vector<T> s, o, qr, bucket, m;
  std::vector<T> dec;  // the rows' decomposed terms, Decomposed::cols() per row
  // The rows' side-key probabilities (unnormalised), and the factor their key-block
  // exponentials took when the side keys raised the row maximum (attention_global).
  std::vector<T> side, side_alpha;
  std::vector<std::byte> out_rows;  // an item's output rows, for Plan::out_sink
  std::vector<double> l;
  std::vector<std::int64_t> lo, hi;
  std::vector<std::int64_t> slo, shi;  // the rows' sink tokens (KeySpan), or none
  std::int64_t lo_min = 0, hi_max = -1;  // keys any row may see
};

// The keys [lo_min, hi_max] any row of the item from query q0 sees (hi_max < 0: none),
// and each row's window [lo, hi] and sink tokens [slo, shi] (KeySpan) when they are
// given.
template <class T>
std::pair<std::int64_t, std::int64_t> item_key_range(const Plan<T>& P, std::size_t bi,
                                                     std::size_t q0, std::int64_t* lo = nullptr,
                                                     std::int64_t* hi = nullptr,
                                                     std::int64_t* slo = nullptr,
                                                     std::int64_t* shi = nullptr) {
  const std::size_t qn = std::min(P.bl.q, P.g.sq - q0);
  std::int64_t lo_min = static_cast<std::int64_t>(P.g.sk), hi_max = -1;
  for (std::size_t r = 0; r < qn; ++r) {
    const KeySpan k = P.rules.span(bi, static_cast<std::int64_t>(q0 + r));
    if (lo) lo[r] = k.lo, hi[r] = k.hi;
    if (slo) slo[r] = k.sink_lo, shi[r] = k.sink_hi;
    if (k.lo <= k.hi) lo_min = std::min(lo_min, k.first()), hi_max = std::max(hi_max, k.hi);
  }
  return {lo_min, hi_max};
}

// A work item is (batch, query head, query block). Its rows' running softmax state
// lives in a Scratch: item_begin sets it up, item_keys folds in key blocks (in order,
// each block of P.bl.k keys from a multiple of P.bl.k), item_end normalises and
// stores. Whether the keys come in one piece (in memory) or in chunks (streamed from
// a file), the blocks and so the bits are the same.
template <class T>
void item_begin(const Plan<T>& P, Scratch<T>& w, std::size_t bi, std::size_t hi_q,
                std::size_t q0);

// Rows of an item cut to their own keys within a block when the ranges of its rows
// differ (see item_keys).
constexpr std::size_t kRowGroup = 64;

// Key blocks [j_begin, j_end) of the item; K and V view the keys from c0 on (all of
// them in memory, or the chunk read last).
template <class T>
void item_keys(const Plan<T>& P, Scratch<T>& w, std::vector<T>& tile, const View<T>& K,
               const View<T>& V, std::size_t c0, std::size_t bi, std::size_t hi_q,
               std::size_t q0, std::size_t j_begin, std::size_t j_end);

// Normalises the item's rows and stores them, after folding in the side keys of
// P.global; `tile` holds the whole score rows when probs are materialised.
template <class T>
void item_end(const Plan<T>& P, Scratch<T>& w, const std::vector<T>& tile, std::size_t bi,
              std::size_t hi_q, std::size_t q0);

// Decoding (one query row): the keys are taken kKeyTile at a time, a tile staying in the
// L1 cache while the query heads of its KV head take their products with it (fold_tiled),
// instead of each head reading a whole key block (512 KiB of f32 at d 128, which with V's
// does not fit the L2 cache), and f16 or bf16 keys are widened a tile at a time. Every
// one-row product is computed in such tiles, from the first key folded, on every path,
// so the bits do not depend on the path; with OpenBLAS's gemv (tiles of a multiple of 8
// keys; a sum over V in tiles only where dv is a multiple of 4) they are those of one
// product over the whole block.
constexpr std::size_t kKeyTile = 64;

// Keys [a, e] of block [b0, b1) that rows [r0, r1) of an item see (a > e: none); the
// edges of the block no row sees are cut off (item_keys).
template <class T>
std::pair<std::int64_t, std::int64_t> keys_seen(const Scratch<T>& w, std::size_t r0, std::size_t r1,
                                                std::int64_t b0, std::int64_t b1);

// The rows of the item from query q0 that take part in the products (padded rows do not).
template <class T>
std::size_t item_rows(const Plan<T>& P, std::size_t bi, std::size_t q0);

// Whether an item of `rows` rows folds its keys in tiles (fold_tiled): one row, no scores
// materialised, dv a multiple of 4.
template <class T>
bool folds_tiled(const Plan<T>& P, std::size_t rows);

// Keys [j, j + n) (n <= kKeyTile, within one key block) as contiguous rows of T: in
// place, or widened into a buffer that stays valid until the next call.
template <class T>
using KeyTiles = std::function<const T*(std::size_t j, std::size_t n)>;

// Keys [j, j + n) of one key block stored as f16, rows contiguous, in place (checked
// finite as the caller requires): for fold_tiled's kernels that widen in registers.
using HalfTiles = std::function<const std::uint16_t*(std::size_t j, std::size_t n)>;

// Whether fold_tiled takes HalfTiles (under f32 arithmetic): AVX-512 with F16C, the
// variant POSENC_ROPE_ISA selects (avx512); other variants widen tiles into a buffer.
bool half_tiles_fused();
// Whether n f16 values are all finite (AVX-512BW; only where half_tiles_fused()).
bool half_finite(const std::uint16_t* p, std::size_t n);

// Keys [a, e] of one block (those the item's row sees: keys_seen) folded into the one
// row of each of `gs` items (query heads h0, h0 + 1, ... of one KV head, begun by
// item_begin), K and V taken a tile at a time from `k` and `v` (null: no values): every
// head's scores with a tile of K while it is in the cache, the rows' softmax update, then
// every head's sum over each tile of V. The bits of item_keys on the same block. With
// f32 arithmetic, `hk` (`hv`), when given, is the same K (V) as f16 in place, used
// instead of `k` (`v`) where the shapes suit the kernels that widen in registers.
template <class T>
void fold_tiled(const Plan<T>& P, Scratch<T>* ws, std::size_t gs, std::size_t bi, std::size_t h0,
                std::size_t q0, std::size_t a, std::size_t e, const KeyTiles<T>& k,
                const KeyTiles<T>* v, const HalfTiles* hk = nullptr,
                const HalfTiles* hv = nullptr);

/// The items of query heads h0, h0 + 1, ... (one a Scratch of `ws`) over all the keys in
/// memory: item_begin, item_keys block by block, each block for every head in turn,
/// item_end.
template <class T>
void run_items(const Plan<T>& P, std::vector<Scratch<T>>& ws, std::size_t bi, std::size_t h0,
               std::size_t q0);

template <class T>
std::vector<T> to_vector(const Tensor& t) {
  std::vector<T> v(t.numel());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(t.get(i));
  return v;
}

// (attention_terms.cpp)
// Everything but the Q, K and V views; `has_v` says whether values are given.
template <class T>
void plan(Plan<T>& P, const Geometry& g, const AttentionOptions& opt, bool has_v);

// Runs f(item, thread) for items [0, n) on plain threads, not an OpenMP team: BLAS is
// never called inside an OpenMP region. Each item is independent and computed the same
// way by whichever thread takes it, so the schedule cannot change any result. The
// first exception stops the others and is rethrown.
template <class F>
void for_items(std::size_t n, std::size_t nthreads, F&& f) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto worker = [&](std::size_t t) {
    try {
      for (std::size_t it = next++; it < n; it = next++) f(it, t);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < nthreads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// Work item `it` as (batch, query head, first query). The last query blocks come
// first: under a causal mask they see the most keys, and taking the large items first
// leaves the small ones to even out the threads at the end.
// Work item `it` of `gs` query heads each (heads_per_item): its batch, first query
// head and first query row.
inline std::array<std::size_t, 3> item_at(const Geometry& g, const Blocks& bl, std::size_t nq,
                                          std::size_t it, std::size_t gs = 1) {
  const std::size_t groups = g.hq / gs;
  return {it / (nq * groups), (it / nq) % groups * gs, (nq - 1 - it % nq) * bl.q};
}

inline std::size_t thread_count(std::size_t items, std::size_t cap = 0) {
  auto threads = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
  if (cap > 0) threads = std::min(threads, cap);
  return std::max<std::size_t>(1, std::min(items, threads));
}

}  // namespace posenc::attention_detail
