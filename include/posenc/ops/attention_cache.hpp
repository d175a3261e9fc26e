#pragma once
/// \file
/// One step of attention over a KV cache, as FlashAttention's `flash_attn_with_kvcache`
/// defines it: the new keys and values (if any) are rotated and written into the cache,
/// then the queries attend to each batch entry's cached keys.
///
/// Layouts are FlashAttention's (bshd): Q [b, sq, hq, d]; the caches either contiguous,
/// [b_cache, s_cache, hk, d] and [b_cache, s_cache, hk, dv], or paged, [num_blocks,
/// page_size, hk, d] with a page table [b, max_blocks] whose row r holds the pages of
/// logical tokens t (token t at page row[t / page_size], slot t % page_size).
///
/// Entry b uses cache row (or page-table row) r = cache_batch_idx[b] (b without it). Its
/// keys are the cache rows [leftpad_b, cache_seqlens_b + s_new) (leftpad 0 without
/// cache_leftpad), key j of them sitting at position j - leftpad_b, and every mask
/// (causal, window, chunk, sink tokens) aligns to the entry's own length n_b =
/// cache_seqlens_b + s_new - leftpad_b, query i at position i + n_b - sq, as
/// FlashAttention's attention_ref does with key_leftpad.
///
/// With rotary tables, the new keys are rotated at positions rotary_seqlens_b + t
/// (cache_seqlens_b + t without it) before they are stored; the queries at the same
/// per-token positions under a causal mask, a window or chunks, and all at the single
/// position rotary_seqlens_b otherwise (FlashAttention's rule). The rotation is
/// apply_rotary_emb's: the first rotary_dim = 2 * columns dims rotate (pairs of halves,
/// or adjacent pairs with `rotary_interleaved`), the rest pass through; table values are
/// used as given (bf16 tables as bf16 values). Rotated keys are rounded once, to the
/// cache's dtype; rotated queries stay in the arithmetic type.
///
/// Results are byte for byte the same for a paged cache and a contiguous one holding the
/// same tokens, whatever the thread count.

#include <cstddef>
#include <cstdint>

#include "posenc/ops/attention.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// FlashAttention's KV-cache arguments (the tensors are borrowed, none owned; integer
/// tensors of any integer dtype).
struct KvCacheOptions {
  /// [b, max_blocks] (or [rows, max_blocks] with cache_batch_idx) page ids into the
  /// caches' first axis, or null for a contiguous cache.
  const Tensor* page_table = nullptr;
  /// [b] tokens already in each entry's cache row (counting its left padding); null:
  /// the whole capacity (not with new keys).
  const Tensor* cache_seqlens = nullptr;
  /// [b] the cache row (or page-table row) of each entry; null: entry b uses row b.
  const Tensor* cache_batch_idx = nullptr;
  /// [b] the entry's first valid cache row; null: 0.
  const Tensor* cache_leftpad = nullptr;
  /// New keys [b, s_new, hk, d] and values [b, s_new, hk, dv] (both or neither), stored
  /// at cache rows cache_seqlens_b .. + s_new - 1 before attending.
  const Tensor* k_new = nullptr;
  const Tensor* v_new = nullptr;  ///< (k_new: the keys)
  /// [b + 1] int32/int64 offsets packing the new keys and values (FlashAttention's
  /// varlen form): k_new [total_new, hk, d] and v_new [total_new, hk, dv], entry b's new
  /// tokens rows [cu[b], cu[b + 1]) (possibly none), appended at cache_seqlens_b with
  /// every length, rotary position and mask as for s_new = cu[b + 1] - cu[b]; null:
  /// batched k_new.
  const Tensor* cu_seqlens_k_new = nullptr;
  /// Rotary tables [s_rot, rotary_dim / 2], any float dtype (both or neither; needs
  /// k_new, as FlashAttention's).
  const Tensor* rotary_cos = nullptr;
  const Tensor* rotary_sin = nullptr;  ///< (rotary_cos: the cos table)
  /// [b] rotary positions of the first new token; null: cache_seqlens.
  const Tensor* rotary_seqlens = nullptr;
  /// GPT-J pairs (dims 2i, 2i+1) instead of halves (i, i + rotary_dim / 2).
  bool rotary_interleaved = false;
};

/// Attention of `q` over the KV cache (see the file comment), writing the new keys and
/// values into `k_cache` and `v_cache` in place. `opt` gives the scale, causal mask
/// (bottom-right), window, chunk size, sink tokens, soft-cap, sinks, per_dim_scale, dtype,
/// precision, masked_rows, allow_nonfinite, max_memory and emit (output and lse only), and
/// FA3's qv and fp8 descales ([b, hk], per batch entry: the entry's cache rows are
/// gathered into a copy counted against max_memory, then as attention's qv and
/// descales). Throws UsageError for options the KV cache cannot honour (other axes than
/// bshd, logits or probs, arith other than exact, the FlashAttention baseline, p_dtype,
/// seqused_q/k, key lengths, masks, packed sequences, terms by position: alibi, t5,
/// clipped, relative, decomposed, global, score_bias, temperature and llama4 scaling;
/// rotary tables without new keys) and InputError,
/// naming the input, for inconsistent shapes or dtypes, page ids out of range or (with
/// new keys) shared by entries that write into them, cache_batch_idx out of range or
/// (with new keys) repeated, leftpad beyond cache_seqlens, cache_seqlens + s_new beyond
/// the capacity, cu_seqlens_k_new not int32/int64 [b + 1] offsets from 0 to k_new's rows,
/// non-decreasing (UsageError without k_new), and rotary tables too short for the
/// positions; all before the caches are written.
AttentionResult attention_kvcache(const Tensor& q, Tensor& k_cache, Tensor& v_cache,
                                  const KvCacheOptions& kv, const AttentionOptions& opt);

}  // namespace posenc
