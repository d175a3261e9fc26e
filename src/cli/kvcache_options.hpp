#pragma once
// The KV-cache options of `posenc attention` (FlashAttention's flash_attn_with_kvcache
// arguments): binding, checks, reading, and the call into ops/attention_cache.hpp.

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli/declared_options.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_fields.hpp"

namespace posenc::cli {

struct KvCacheCliOptions {
  KvCacheOptions kv;                   // the declared inputs (attention_fields.hpp)
  ArrayFiles tensors;                  // their files, read into kv
  std::vector<std::string> cache_out;  // K_REF V_REF
  CLI::App* app = nullptr;
};

/// Binds the options to `o` on `sub` (group "KV CACHE").
void add_kvcache_options(CLI::App* sub, KvCacheCliOptions& o);

/// Whether any KV-cache option was given: -k and -v are then the caches.
bool kvcache_wanted(const KvCacheCliOptions& o);

/// The KV-cache step: reads Q, the caches (K_REF, V_REF) and the options' tensors,
/// computes (attention_kvcache) and writes the emitted tensors to `out_refs` and, with
/// --cache-out, the updated caches, all or none. `conflicts` names an option of the
/// command given that the KV cache cannot honour (empty: none); it is refused.
void run_kvcache(KvCacheCliOptions& o, const std::string& q, const std::string& k,
                 const std::string& v, const std::string& conflicts, AttentionOptions opt,
                 const std::vector<TensorRef>& out_refs, const WriteOptions& write, Attrs extra);

}  // namespace posenc::cli
