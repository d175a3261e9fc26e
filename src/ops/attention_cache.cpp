// attention_kvcache (posenc/ops/attention_cache.hpp): FlashAttention's KV-cache step.
// Every input is checked before the cache is touched; the new keys are rotated (the
// caller-table RoPE of ops/rope) and stored; then attention runs with seqused_k = n_b, the
// per-entry alignment FlashAttention's masks use, reading each entry's keys from its cache
// rows or pages as the kernel widens each key block (KeyRows, attention_kernel.hpp): no
// copy of the cache is made. A paged cache and a contiguous one holding the same tokens
// are read through the same row lists, so they give the same bits.
#include "posenc/ops/attention_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <limits>
#include <string>
#include <vector>

#include "ops/attention_kernel.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc {

namespace {

// The values of a [n] integer tensor `t` (named `what`), each in [lo, hi].
std::vector<std::int64_t> ints(const Tensor& t, const char* what, std::size_t n, std::int64_t lo,
                               std::int64_t hi, const char* range) {
  if (!is_integer(t.dtype())) {
    throw InputError(fmt::format("{}: expected an integer tensor, got {}", what,
                                 dtype_name(t.dtype())));
  }
  if (t.ndim() != 1 || t.shape()[0] != n) {
    throw InputError(fmt::format("{}: expected shape [{}] (one per batch entry), got {}", what, n,
                                 shape_str(t.shape())));
  }
  std::vector<std::int64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = t.get(i);
    if (!(x >= static_cast<double>(lo) && x <= static_cast<double>(hi))) {
      throw InputError(fmt::format("{}: value {} of entry {} is out of range ({})", what, x, i,
                                   range));
    }
    v[i] = static_cast<std::int64_t>(x);
  }
  return v;
}

void require_rank4(const Tensor& t, const char* what, const char* shape) {
  if (!is_float(t.dtype())) {
    throw InputError(fmt::format("{}: expected a float tensor, got {}", what,
                                 dtype_name(t.dtype())));
  }
  if (t.ndim() != 4) {
    throw InputError(fmt::format("{}: expected shape {}, got {}", what, shape,
                                 shape_str(t.shape())));
  }
}

// Where logical token t of an entry lives: the element offset of its row (hk * width
// values) in the cache.
struct Rows {
  const std::int64_t* pages = nullptr;  // the entry's page-table row, or null
  std::size_t page_size = 0;
  std::size_t row0 = 0;  // contiguous: the first token's row index
  std::size_t at(std::size_t t) const {
    return pages ? static_cast<std::size_t>(pages[t / page_size]) * page_size + t % page_size
                 : row0 + t;
  }
};

}  // namespace

AttentionResult attention_kvcache(const Tensor& q, Tensor& k_cache, Tensor& v_cache,
                                  const KvCacheOptions& kv, const AttentionOptions& opt) {
  // Options first.
  if (!opt.axes.empty() && opt.axes != "bshd") {
    throw UsageError(fmt::format("axes {}: the KV cache takes FlashAttention's layout, bshd",
                                 opt.axes));
  }
  if (opt.arith != Arith::exact) {
    throw UsageError(fmt::format("arith {}: the KV cache is computed by posenc's exact "
                                 "arithmetic only",
                                 arith_name(opt.arith)));
  }
  for (AttentionEmit e : opt.emit) {
    if (e == AttentionEmit::logits || e == AttentionEmit::probs) {
      throw UsageError(fmt::format("emit {}: the KV cache gives output and lse only",
                                   attention_emit_name(e)));
    }
  }
  for (const auto& [given, name] :
       {std::pair{opt.seqused_q != nullptr, "seqused_q"},
        std::pair{opt.seqused_k != nullptr, "seqused_k (cache_seqlens gives the lengths)"},
        std::pair{opt.key_lengths != nullptr, "key_lengths (cache_seqlens gives the lengths)"},
        std::pair{opt.mask != nullptr, "mask"},
        std::pair{!opt.cu_seqlens.empty(), "cu_seqlens"},
        std::pair{opt.cu_seqlens_q != nullptr || opt.cu_seqlens_k != nullptr,
                  "cu_seqlens_q/cu_seqlens_k (varlen)"},
        std::pair{opt.causal == CausalAlign::top_left, "causal top-left"},
        // Read K and V whole (P.V, the baseline), where the KV step gives the kernel cache
        // rows: refused, not computed on zeros. (qv and the descales: gathered below.)
        std::pair{!opt.p_dtype.empty(), "p_dtype"},
        std::pair{opt.fa_baseline, "arith fa-baseline"},
        // Terms by position, which would need each entry's own alignment.
        std::pair{opt.t5_bias != nullptr, "t5_bias"},
        std::pair{opt.clipped_bias != nullptr, "clipped_bias"},
        std::pair{opt.relative_k != nullptr || opt.relative_v != nullptr ||
                      opt.relative_proj != nullptr,
                  "relative_k/relative_v/relative_proj"},
        std::pair{opt.rel_pos_h != nullptr, "decomposed_rel_pos"},
        std::pair{opt.global_k != nullptr, "global_kv"},
        std::pair{opt.score_bias != nullptr, "relative score terms"},
        std::pair{opt.temperature_scale != 0, "attn_temperature"},
        std::pair{opt.llama4_scaling_beta != 0, "llama4_scaling"}}) {
    if (given) throw UsageError(fmt::format("{}: not with a KV cache", name));
  }
  if ((kv.k_new == nullptr) != (kv.v_new == nullptr)) {
    throw UsageError(kv.k_new ? "k_new: needs v_new" : "v_new: needs k_new");
  }
  if ((kv.rotary_cos == nullptr) != (kv.rotary_sin == nullptr)) {
    throw UsageError(kv.rotary_cos ? "rotary_cos: needs rotary_sin" : "rotary_sin: needs rotary_cos");
  }
  const bool has_new = kv.k_new != nullptr;
  if (kv.rotary_cos && !has_new) {
    throw UsageError("rotary_cos: rotates the new keys; needs k_new and v_new");
  }
  if (kv.rotary_seqlens && !kv.rotary_cos) {
    throw UsageError("rotary_seqlens: needs rotary_cos and rotary_sin");
  }
  if (kv.cu_seqlens_k_new && !has_new) {
    throw UsageError("cu_seqlens_k_new: packs the new keys; needs k_new and v_new");
  }
  if (has_new && !kv.cache_seqlens) {
    throw UsageError("k_new: needs cache_seqlens (where the new tokens go)");
  }

  // Shapes and dtypes.
  require_rank4(q, "q", "[b, sq, hq, d]");
  const bool paged = kv.page_table != nullptr;
  const char* cache_shape = paged ? "[num_blocks, page_size, hk, d]" : "[b_cache, s_cache, hk, d]";
  require_rank4(k_cache, "k_cache", cache_shape);
  require_rank4(v_cache, "v_cache", cache_shape);
  const Shape& ks = k_cache.shape();
  const Shape& vs = v_cache.shape();
  if (vs[0] != ks[0] || vs[1] != ks[1] || vs[2] != ks[2]) {
    throw InputError(fmt::format("v_cache: shape {} does not match k_cache's {} (all but d)",
                                 shape_str(vs), shape_str(ks)));
  }
  const std::size_t b = q.shape()[0], sq = q.shape()[1], hk = ks[2], d = ks[3], dv = vs[3];
  if (q.shape()[3] != d) {
    throw InputError(fmt::format("q: head dim {} differs from k_cache's {} (shape {})",
                                 q.shape()[3], d, shape_str(ks)));
  }
  std::size_t capacity = ks[1], page_size = ks[1], max_blocks = 0, table_rows = 0;
  std::vector<std::int64_t> table;
  const std::size_t num_blocks = ks[0];
  if (paged) {
    const Tensor& pt = *kv.page_table;
    if (!is_integer(pt.dtype()) || pt.ndim() != 2) {
      throw InputError(fmt::format("page_table: expected integers [b, max_blocks], got {} {}",
                                   dtype_name(pt.dtype()), shape_str(pt.shape())));
    }
    table_rows = pt.shape()[0];
    max_blocks = pt.shape()[1];
    if (page_size == 0) throw InputError("k_cache: page size (axis 1) is 0");
    capacity = max_blocks * page_size;
    table.resize(pt.numel());
    for (std::size_t i = 0; i < table.size(); ++i) {
      const double x = pt.get(i);
      table[i] = x >= -1e18 && x <= 1e18 ? static_cast<std::int64_t>(x) : -1;
    }
  }
  const std::size_t rows_avail = paged ? table_rows : ks[0];
  const char* rows_what = paged ? "page_table rows" : "k_cache's b_cache";
  std::vector<std::int64_t> idx(b);
  for (std::size_t i = 0; i < b; ++i) idx[i] = static_cast<std::int64_t>(i);
  if (kv.cache_batch_idx) {
    idx = ints(*kv.cache_batch_idx, "cache_batch_idx", b, 0,
               static_cast<std::int64_t>(rows_avail) - 1,
               fmt::format("0 to {}, {} {}", static_cast<std::int64_t>(rows_avail) - 1, rows_what,
                           rows_avail)
                   .c_str());
    if (has_new) {
      std::vector<std::int64_t> sorted = idx;
      std::sort(sorted.begin(), sorted.end());
      const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
      if (dup != sorted.end()) {
        throw InputError(fmt::format("cache_batch_idx: row {} is used by two entries, which "
                                     "would both write their new keys into it",
                                     *dup));
      }
    }
  } else if (rows_avail != b) {
    throw InputError(fmt::format("{}: {} rows for a batch of {} (q {}); give cache_batch_idx "
                                 "to pick rows",
                                 paged ? "page_table" : "k_cache", rows_avail, b,
                                 shape_str(q.shape())));
  }
  // Entry i's new tokens: nnew[i] rows of k_new from row src0[i] (s_new each when
  // batched; cu_seqlens_k_new's spans when packed).
  std::size_t s_new = 0, total_new = 0;
  const bool varlen_new = kv.cu_seqlens_k_new != nullptr;
  std::vector<std::int64_t> nnew(b, 0), src0(b, 0);
  if (has_new && varlen_new) {
    for (const auto& [t, what, dims] : {std::tuple{kv.k_new, "k_new", d}, std::tuple{kv.v_new, "v_new", dv}}) {
      if (!is_float(t->dtype()) || t->ndim() != 3 || t->shape()[1] != hk || t->shape()[2] != dims) {
        throw InputError(fmt::format("{}: with cu_seqlens_k_new expected float [total_new, {}, {}] "
                                     "(the caches' hk and head dim), got {} {}",
                                     what, hk, dims, dtype_name(t->dtype()), shape_str(t->shape())));
      }
    }
    total_new = kv.k_new->shape()[0];
    if (kv.v_new->shape()[0] != total_new) {
      throw InputError(fmt::format("v_new: {} rows, k_new {}", kv.v_new->shape()[0], total_new));
    }
    const Tensor& cu = *kv.cu_seqlens_k_new;
    if (cu.dtype() != DType::i32 && cu.dtype() != DType::i64) {
      throw InputError(fmt::format("cu_seqlens_k_new: expected int32 or int64, got {}",
                                   dtype_name(cu.dtype())));
    }
    if (cu.ndim() != 1 || cu.shape()[0] != b + 1) {
      throw InputError(fmt::format("cu_seqlens_k_new: expected shape [{}] (b + 1), got {}", b + 1,
                                   shape_str(cu.shape())));
    }
    std::int64_t prev = 0;
    for (std::size_t i = 0; i <= b; ++i) {
      const double x = cu.get(i);
      if (i == 0 && x != 0) {
        throw InputError(fmt::format("cu_seqlens_k_new: starts at {}, not 0", x));
      }
      if (x < static_cast<double>(prev)) {
        throw InputError(fmt::format("cu_seqlens_k_new: value {} at index {} is below the "
                                     "previous {} (offsets are non-decreasing)",
                                     x, i, prev));
      }
      if (x > static_cast<double>(total_new)) {
        throw InputError(fmt::format("cu_seqlens_k_new: value {} at index {} is beyond the {} "
                                     "rows of k_new",
                                     x, i, total_new));
      }
      if (i > 0) {
        src0[i - 1] = prev;
        nnew[i - 1] = static_cast<std::int64_t>(x) - prev;
      }
      prev = static_cast<std::int64_t>(x);
    }
    if (prev != static_cast<std::int64_t>(total_new)) {
      throw InputError(fmt::format("cu_seqlens_k_new: ends at {}, but k_new has {} rows", prev,
                                   total_new));
    }
  }
  if (has_new && !varlen_new) {
    require_rank4(*kv.k_new, "k_new", "[b, s_new, hk, d]");
    require_rank4(*kv.v_new, "v_new", "[b, s_new, hk, dv]");
    const Shape& kn = kv.k_new->shape();
    const Shape& vn = kv.v_new->shape();
    s_new = kn[1];
    if (kn != Shape{b, s_new, hk, d}) {
      throw InputError(fmt::format("k_new: shape {}, expected [{}, s_new, {}, {}] (q's b, the "
                                   "caches' hk and d)",
                                   shape_str(kn), b, hk, d));
    }
    if (vn != Shape{b, s_new, hk, dv}) {
      throw InputError(fmt::format("v_new: shape {}, expected {}", shape_str(vn),
                                   shape_str(Shape{b, s_new, hk, dv})));
    }
    total_new = b * s_new;
    for (std::size_t i = 0; i < b; ++i) {
      nnew[i] = static_cast<std::int64_t>(s_new);
      src0[i] = static_cast<std::int64_t>(i * s_new);
    }
  }
  if (has_new) {
    if (kv.k_new->dtype() != k_cache.dtype() || kv.v_new->dtype() != v_cache.dtype()) {
      const bool k = kv.k_new->dtype() != k_cache.dtype();
      throw InputError(fmt::format("{}: dtype {} differs from its cache's {}",
                                   k ? "k_new" : "v_new",
                                   dtype_name(k ? kv.k_new->dtype() : kv.v_new->dtype()),
                                   dtype_name(k ? k_cache.dtype() : v_cache.dtype())));
    }
  }
  const std::int64_t cap = static_cast<std::int64_t>(capacity);
  std::vector<std::int64_t> seqlens(b, cap);
  if (kv.cache_seqlens) {
    seqlens = ints(*kv.cache_seqlens, "cache_seqlens", b, 0, cap,
                   fmt::format("0 to the capacity {}", capacity).c_str());
    for (std::size_t i = 0; i < b; ++i) {
      if (seqlens[i] + nnew[i] > cap) {
        throw InputError(fmt::format(
            "{}: entry {} holds {} tokens, and {} new ones exceed the cache's "
            "capacity {}{}",
            varlen_new ? "cu_seqlens_k_new" : "cache_seqlens", i, seqlens[i], nnew[i], capacity,
            paged ? fmt::format(" (max_blocks {} x page_size {})", max_blocks, page_size)
                  : std::string()));
      }
    }
  }
  std::vector<std::int64_t> leftpad(b, 0);
  if (kv.cache_leftpad) {
    leftpad = ints(*kv.cache_leftpad, "cache_leftpad", b, 0, cap, "0 to the capacity");
    for (std::size_t i = 0; i < b; ++i) {
      if (leftpad[i] > seqlens[i]) {
        throw InputError(fmt::format("cache_leftpad: entry {} starts at {}, beyond its "
                                     "cache_seqlens {}",
                                     i, leftpad[i], seqlens[i]));
      }
    }
  }
  // The page ids each entry uses: in range, and not shared with another entry when one
  // of them writes into it.
  if (paged) {
    std::vector<std::int64_t> owner(num_blocks, -1);   // entry that uses the page
    std::vector<char> written(num_blocks, 0);
    for (std::size_t i = 0; i < b; ++i) {
      const std::size_t end = static_cast<std::size_t>(seqlens[i] + nnew[i]);
      const std::size_t first = static_cast<std::size_t>(leftpad[i]) / page_size;
      const std::size_t last = (end + page_size - 1) / page_size;
      const std::size_t w0 = static_cast<std::size_t>(seqlens[i]) / page_size;
      for (std::size_t k = first; k < last; ++k) {
        const std::int64_t p = table[static_cast<std::size_t>(idx[i]) * max_blocks + k];
        if (p < 0 || p >= static_cast<std::int64_t>(num_blocks)) {
          throw InputError(fmt::format("page_table: row {}, block {}: page {} is out of range "
                                       "(0 to {}, the caches' num_blocks {})",
                                       idx[i], k, p, static_cast<std::int64_t>(num_blocks) - 1,
                                       num_blocks));
        }
        const std::size_t u = static_cast<std::size_t>(p);
        const bool writes = nnew[i] > 0 && k >= w0;
        if (owner[u] == static_cast<std::int64_t>(i)) {
          // Twice in one row: a new key could land on a key the entry reads.
          if (nnew[i] > 0) {
            throw InputError(fmt::format("page_table: page {} appears twice in row {}", p,
                                         idx[i]));
          }
        } else if (owner[u] >= 0 && (writes || written[u])) {
          throw InputError(fmt::format("page_table: page {} is used by entries {} and {}, and "
                                       "the new keys of one are written into it",
                                       p, owner[u], i));
        }
        owner[u] = static_cast<std::int64_t>(i);
        written[u] |= writes;
      }
    }
  }

  // Rotary: the new keys (rounded once to the cache's dtype) and the queries (in the
  // arithmetic type). The tables' row count is checked by the rotation itself.
  const DType arith = attention_arith(opt);
  Tensor q_rot, k_rot;
  const Tensor* q_use = &q;
  const Tensor* k_src = kv.k_new;
  AttentionOptions o = opt;
  if (kv.rotary_cos) {
    const Tensor& c = *kv.rotary_cos;
    const Tensor& s = *kv.rotary_sin;
    if (!is_float(c.dtype()) || !is_float(s.dtype())) {
      throw InputError(fmt::format("{}: expected a float table, got {}",
                                   is_float(c.dtype()) ? "rotary_sin" : "rotary_cos",
                                   dtype_name(is_float(c.dtype()) ? s.dtype() : c.dtype())));
    }
    if (c.ndim() != 2 || 2 * c.shape()[1] > d || c.shape()[1] == 0) {
      throw InputError(fmt::format("rotary_cos: expected shape [s_rot, rotary_dim / 2] with "
                                   "rotary_dim up to the head dim {}, got {}",
                                   d, shape_str(c.shape())));
    }
    if (s.shape() != c.shape() || s.dtype() != c.dtype()) {
      throw InputError(fmt::format("rotary_sin: {} {} differs from rotary_cos's {} {}",
                                   dtype_name(s.dtype()), shape_str(s.shape()),
                                   dtype_name(c.dtype()), shape_str(c.shape())));
    }
    std::vector<std::int64_t> offsets = seqlens;
    if (kv.rotary_seqlens) {
      offsets = ints(*kv.rotary_seqlens, "rotary_seqlens", b, 0, kMaxPosition,
                     "0 to 2^53");
    }
    const std::size_t rows = c.shape()[0];
    Positions pos;
    pos.table_shape = c.shape();
    pos.table_dtype = c.dtype();
    pos.table_cos.resize(c.numel());
    pos.table_sin.resize(s.numel());
    for (std::size_t i = 0; i < c.numel(); ++i) {
      pos.table_cos[i] = c.get(i);
      pos.table_sin[i] = s.get(i);
    }
    pos.cos_what = "rotary_cos";
    pos.sin_what = "rotary_sin";
    pos.offsets_what = "rotary_seqlens";
    pos.seqlen_offsets = offsets;
    const bool per_token = opt.causal != CausalAlign::none || opt.window_left >= 0 ||
                           opt.window_right >= 0 || opt.sliding_window > 0 ||
                           opt.chunk_size > 0;
    // Every position used must have its table row (named before the rotation's own
    // message, with the input that needs it).
    for (std::size_t i = 0; i < b; ++i) {
      const std::int64_t last_k = offsets[i] + nnew[i] - 1;
      const std::int64_t last_q = offsets[i] + (per_token ? static_cast<std::int64_t>(sq) - 1 : 0);
      const std::int64_t need = std::max(nnew[i] ? last_k : -1, sq ? last_q : -1);
      if (need >= static_cast<std::int64_t>(rows)) {
        throw InputError(fmt::format("rotary_cos: {} rows, but entry {} rotates at position {} "
                                     "({} {} + {} tokens)",
                                     rows, i, need,
                                     kv.rotary_seqlens ? "rotary_seqlens" : "cache_seqlens",
                                     offsets[i], need - offsets[i] + 1));
      }
    }
    const int rdim = static_cast<int>(2 * c.shape()[1]);
    const bool il = kv.rotary_interleaved;
    auto params = [rdim, il](int head_dim) {
      RopeParams p;
      p.head_dim = head_dim;
      p.rotary_dim = rdim;
      p.style = il ? RopeStyle::gptj : RopeStyle::neox;
      return p;
    };
    RopeApplyOptions ra;
    ra.allow_nonfinite = opt.allow_nonfinite;
    const Axes axes = resolve_axes("bshd", 4, "q");
    if (total_new > 0 && !varlen_new) {
      const RopeFreqs f = rope_freqs_for(kv.k_new->shape(), axes, params, pos, ra, "k_new");
      k_rot = apply_rope(*kv.k_new, axes, f, pos, ra, k_cache.dtype());
      k_src = &k_rot;
    } else if (total_new > 0) {
      // Packed: each entry's span as a batch of one at its own offset (the same rotation
      // as the batched form, token for token).
      k_rot = Tensor(k_cache.dtype(), kv.k_new->shape());
      const std::size_t row = hk * d * dtype_size(k_cache.dtype());
      for (std::size_t i = 0; i < b; ++i) {
        if (nnew[i] == 0) continue;
        const Tensor span = Tensor::borrow(
            kv.k_new->dtype(), Shape{1, static_cast<std::size_t>(nnew[i]), hk, d},
            const_cast<std::byte*>(kv.k_new->bytes()) + static_cast<std::size_t>(src0[i]) * row);
        Positions one = pos;
        one.seqlen_offsets = {offsets[i]};
        const RopeFreqs f = rope_freqs_for(span.shape(), axes, params, one, ra, "k_new");
        const Tensor r = apply_rope(span, axes, f, one, ra, k_cache.dtype());
        std::memcpy(k_rot.bytes() + static_cast<std::size_t>(src0[i]) * row, r.bytes(),
                    r.nbytes());
      }
      k_src = &k_rot;
    }
    if (sq > 0) {
      // Not causal nor local: every query of an entry at its single offset, as one token
      // of sq * hq heads.
      const Tensor qv = per_token ? Tensor::borrow(q.dtype(), q.shape(),
                                                   const_cast<std::byte*>(q.bytes()))
                                  : Tensor::borrow(q.dtype(), Shape{b, 1, sq * q.shape()[2], d},
                                                   const_cast<std::byte*>(q.bytes()));
      const RopeFreqs f = rope_freqs_for(qv.shape(), axes, params, pos, ra, "q");
      q_rot = apply_rope(qv, axes, f, pos, ra, arith);
      q_rot.reshape(q.shape());
      q_use = &q_rot;
      if (!o.dtype) o.dtype = q.dtype();
    }
  }

  // The new tokens into the caches (nothing was written before this point).
  const std::size_t krow = hk * d * dtype_size(k_cache.dtype());
  const std::size_t vrow = hk * dv * dtype_size(v_cache.dtype());
  auto rows_of = [&](std::size_t i) {
    Rows r;
    if (paged) {
      r.pages = table.data() + static_cast<std::size_t>(idx[i]) * max_blocks;
      r.page_size = page_size;
    } else {
      r.row0 = static_cast<std::size_t>(idx[i]) * capacity;
    }
    return r;
  };
  if (total_new > 0) {
    for (std::size_t i = 0; i < b; ++i) {
      const Rows r = rows_of(i);
      for (std::size_t t = 0; t < static_cast<std::size_t>(nnew[i]); ++t) {
        const std::size_t at = r.at(static_cast<std::size_t>(seqlens[i]) + t);
        const std::size_t from = static_cast<std::size_t>(src0[i]) + t;
        std::memcpy(k_cache.bytes() + at * krow, k_src->bytes() + from * krow, krow);
        std::memcpy(v_cache.bytes() + at * vrow, kv.v_new->bytes() + from * vrow, vrow);
      }
    }
  }

  // Each entry's keys [leftpad, seqlen + s_new) from position 0 on, as cache rows that
  // the kernel gathers as it reads each key block (KeyRows); -1 past an entry's length
  // (a row of zeros: masked, but read with its key block).
  std::vector<std::int64_t> n(b);
  std::size_t sk = 0;
  for (std::size_t i = 0; i < b; ++i) {
    n[i] = seqlens[i] + nnew[i] - leftpad[i];
    sk = std::max(sk, static_cast<std::size_t>(n[i]));
  }
  std::vector<std::int64_t> rows(b * sk, -1);
  for (std::size_t i = 0; i < b; ++i) {
    const Rows r = rows_of(i);
    for (std::int64_t j = 0; j < n[i]; ++j) {
      rows[i * sk + static_cast<std::size_t>(j)] =
          static_cast<std::int64_t>(r.at(static_cast<std::size_t>(leftpad[i] + j)));
    }
  }
  // K and V as attention sees them, [b, sk, hk, d]: only their shapes are used while the
  // rows are set. Their memory is never written; zeros (a fresh mapping when large), so
  // that a search of them for NaN (the error path) finds none.
  auto shape_only = [](DType t, Shape s) {
    Tensor x(t, std::move(s));
    if (x.nbytes() < (std::size_t{64} << 20)) std::memset(x.bytes(), 0, x.nbytes());
    return x;
  };
  const Tensor K = shape_only(k_cache.dtype(), Shape{b, sk, hk, d});
  const Tensor V = shape_only(v_cache.dtype(), Shape{b, sk, hk, dv});
  attention_detail::KeyRows key_rows;
  key_rows.k = k_cache.bytes();
  key_rows.v = v_cache.bytes();
  key_rows.rows = rows.data();
  key_rows.name = [&] {
    // NaN or Inf in the cache rows an entry uses (after the new ones were stored).
    for (const auto& [cache, width, what] : {std::tuple{&k_cache, d, "k_cache"},
                                             std::tuple{&v_cache, dv, "v_cache"}}) {
      const std::size_t row = hk * width;
      for (std::size_t i = 0; i < b; ++i) {
        for (std::size_t j = 0; j < static_cast<std::size_t>(n[i]); ++j) {
          const std::size_t at = static_cast<std::size_t>(rows[i * sk + j]) * row;
          for (std::size_t c = 0; c < row; ++c) {
            if (!std::isfinite(cache->get(at + c))) {
              throw InputError(fmt::format("{}: NaN or Inf in key {} of entry {} (cache row "
                                           "{}){}",
                                           what, j, i, rows[i * sk + j],
                                           total_new ? " (new keys and values included)" : ""));
            }
          }
        }
      }
    }
  };
  struct Guard {
    explicit Guard(const attention_detail::KeyRows* r) { attention_detail::key_rows() = r; }
    ~Guard() { attention_detail::key_rows() = nullptr; }
  };
  Tensor used(DType::i64, Shape{b});
  std::copy(n.begin(), n.end(), used.data<std::int64_t>());
  o.axes = "bshd";
  o.seqused_k = &used;
  o.output_sink = nullptr;
  if (o.emit.empty()) o.emit = {AttentionEmit::output};
  AttentionResult res;
  if (opt.qv || opt.q_descale || opt.k_descale || opt.v_descale || opt.k_scale != 0 ||
      opt.v_scale != 0) {
    // qv and the descales (attention_fa.cpp) read K and V whole: each entry's rows are
    // gathered into [b, sk, hk, d] copies (zeros past its length, masked by seqused_k),
    // counted against max_memory; a paged and a contiguous cache give the same copies.
    const std::size_t copies = K.nbytes() + V.nbytes();
    if (opt.max_memory && copies > opt.max_memory) {
      throw InputError(fmt::format("the gathered KV cache rows (for qv and the descales) "
                                   "would need {} > max_memory {}",
                                   bytes_str(copies), bytes_str(opt.max_memory)));
    }
    if (opt.max_memory) o.max_memory = opt.max_memory - copies;
    if (!opt.allow_nonfinite) key_rows.name();  // names the cache and the entry
    Tensor Kg(k_cache.dtype(), Shape{b, sk, hk, d}), Vg(v_cache.dtype(), Shape{b, sk, hk, dv});
    std::memset(Kg.bytes(), 0, Kg.nbytes());
    std::memset(Vg.bytes(), 0, Vg.nbytes());
    for (std::size_t i = 0; i < b; ++i) {
      for (std::size_t j = 0; j < static_cast<std::size_t>(n[i]); ++j) {
        const std::size_t at = static_cast<std::size_t>(rows[i * sk + j]);
        std::memcpy(Kg.bytes() + (i * sk + j) * krow, k_cache.bytes() + at * krow, krow);
        std::memcpy(Vg.bytes() + (i * sk + j) * vrow, v_cache.bytes() + at * vrow, vrow);
      }
    }
    res = attention(*q_use, Kg, &Vg, o);
  } else {
    const Guard guard(&key_rows);
    res = attention(*q_use, K, &V, o);
  }
  res.attrs.push_back({"kv_cache", std::string(paged ? "paged" : "contiguous")});
  if (s_new) res.attrs.push_back({"kv_new_tokens", static_cast<long long>(s_new)});
  if (varlen_new) res.attrs.push_back({"kv_new_tokens_total", static_cast<long long>(total_new)});
  if (kv.rotary_cos) {
    res.attrs.push_back({"rotary_dim", static_cast<long long>(2 * kv.rotary_cos->shape()[1])});
    res.attrs.push_back({"rotary_interleaved", static_cast<long long>(kv.rotary_interleaved)});
  }
  return res;
}

}  // namespace posenc
