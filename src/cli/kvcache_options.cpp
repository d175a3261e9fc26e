// `posenc attention`'s KV-cache options (kvcache_options.hpp).
#include "cli/kvcache_options.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "cli/common.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/ops/attention_cache.hpp"

namespace posenc::cli {

void add_kvcache_options(CLI::App* sub, KvCacheCliOptions& o) {
  o.app = sub;
  const char* g = "KV CACHE";
  sub->add_option("--page-table", o.page_table,
                  "paged cache: -k/-v are [num_blocks, page_size, hk, d] pages and this "
                  "[b, max_blocks] integer tensor their ids per entry")
      ->group(g);
  sub->add_option("--cache-seqlens", o.cache_seqlens,
                  "[b] tokens already in each entry's cache (-k/-v are then the caches "
                  "[b_cache, s_cache, hk, d]); default: all")
      ->group(g);
  sub->add_option("--cache-batch-idx", o.cache_batch_idx,
                  "[b] cache row (or page-table row) of each entry")
      ->group(g);
  sub->add_option("--cache-leftpad", o.cache_leftpad, "[b] first valid cache row of each entry")
      ->group(g);
  sub->add_option("--k-new", o.k_new,
                  "new keys [b, s_new, hk, d], stored at cache_seqlens before attending")
      ->group(g);
  sub->add_option("--v-new", o.v_new, "new values [b, s_new, hk, dv] (with --k-new)")->group(g);
  sub->add_option("--cu-seqlens-k-new", o.cu_seqlens_k_new,
                  "[b+1] int32/int64 offsets packing the new keys: --k-new/--v-new are "
                  "[total_new, hk, d], entry b's rows [cu[b], cu[b+1]) (varlen)")
      ->type_name("REF")
      ->group(g);
  sub->add_option("--rotary-cos", o.rotary_cos,
                  "[s_rot, rotary_dim/2] cos table (any float dtype, used as given) rotating "
                  "q and the new keys at cache_seqlens")
      ->group(g);
  sub->add_option("--rotary-sin", o.rotary_sin, "the sin table (with --rotary-cos)")->group(g);
  sub->add_option("--rotary-seqlens", o.rotary_seqlens,
                  "[b] rotary position of each entry's first new token (default cache_seqlens)")
      ->group(g);
  sub->add_flag("--rotary-interleaved", o.rotary_interleaved,
                "rotate adjacent pairs (GPT-J; FlashAttention's default) instead of halves")
      ->group(g);
  sub->add_option("--cache-out", o.cache_out,
                  "where the updated caches go (K_REF V_REF; the cache files themselves "
                  "update them), written with the other outputs")
      ->expected(2)
      ->type_name("K_REF V_REF")
      ->group(g);
}

bool kvcache_wanted(const KvCacheCliOptions& o) {
  for (const char* name :
       {"--page-table", "--cache-seqlens", "--cache-batch-idx", "--cache-leftpad", "--k-new",
        "--v-new", "--cu-seqlens-k-new", "--rotary-cos", "--rotary-sin", "--rotary-seqlens", "--rotary-interleaved",
        "--cache-out"}) {
    if (o.app->count(name) > 0) return true;
  }
  return false;
}

void run_kvcache(const KvCacheCliOptions& o, const std::string& q, const std::string& k,
                 const std::string& v, const std::string& conflicts, AttentionOptions opt,
                 const std::vector<TensorRef>& out_refs, const WriteOptions& write, Attrs extra) {
  if (!conflicts.empty()) throw UsageError(fmt::format("{}: not with a KV cache", conflicts));
  if (v.empty()) throw UsageError("--cache-seqlens and the KV-cache options need -v (the values cache)");
  if (o.rotary_interleaved && o.rotary_cos.empty()) {
    throw UsageError("--rotary-interleaved: needs --rotary-cos and --rotary-sin");
  }
  if (!o.cu_seqlens_k_new.empty() && o.k_new.empty()) {
    throw UsageError("--cu-seqlens-k-new: packs the new keys; needs --k-new and --v-new");
  }
  if (!o.cache_out.empty() && o.k_new.empty()) {
    throw UsageError("--cache-out: the caches change only with --k-new and --v-new");
  }
  std::vector<TensorRef> cache_refs;
  for (const std::string& r : o.cache_out) cache_refs.push_back(parse_ref(r));
  {
    std::vector<TensorRef> all = out_refs;
    all.insert(all.end(), cache_refs.begin(), cache_refs.end());
    check_distinct_outputs(all);
  }
  std::optional<Tensor> side[10];
  KvCacheOptions kv;
  const std::string* refs[10] = {&o.page_table, &o.cache_seqlens, &o.cache_batch_idx,
                                 &o.cache_leftpad, &o.k_new, &o.v_new,
                                 &o.rotary_cos, &o.rotary_sin, &o.rotary_seqlens,
                                 &o.cu_seqlens_k_new};
  const Tensor** slots[10] = {&kv.page_table, &kv.cache_seqlens, &kv.cache_batch_idx,
                              &kv.cache_leftpad, &kv.k_new, &kv.v_new,
                              &kv.rotary_cos, &kv.rotary_sin, &kv.rotary_seqlens,
                              &kv.cu_seqlens_k_new};
  auto q_src = open_source(parse_ref(q));
  auto k_src = open_source(parse_ref(k));
  auto v_src = open_source(parse_ref(v));
  // A cache only read (no new keys) is used in place where its file can be mapped: only
  // the pages holding the rows the entries use become resident, read block by block as
  // the kernel widens each key block. New keys are written into the cache, so it is then
  // read whole (an owned copy, written out by --cache-out with the other outputs).
  const bool in_place = o.k_new.empty() && k_src->mapped_data() && v_src->mapped_data();
  std::size_t own = 0;  // bytes read into memory: Q, the small inputs, caches read whole
  auto bytes_of = [](const TensorInfo& t) {
    return checked_numel(t.shape, 1, "attention") * dtype_size(t.dtype);
  };
  auto add = [](std::size_t a, std::size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; };
  own = add(own, bytes_of(q_src->info()));
  for (int i = 0; i < 10; ++i) {
    if (refs[i]->empty()) continue;
    side[i] = read_tensor(*refs[i]);
    *slots[i] = &*side[i];
    own = add(own, side[i]->nbytes());
  }
  AttentionOptions lib = opt;
  if (opt.max_memory) {
    // The budget from the headers (and the small per-entry inputs), before a cache byte
    // is read: a cache read whole counts all its bytes, one used in place the rows its
    // entries use; K and V as the kernel sees them ([b, sk, hk, d], set as it reads each
    // key block) count too. The outputs and work memory are the library's (what is left).
    const TensorInfo &ki = k_src->info(), &vi = v_src->info(), &qi = q_src->info();
    if (ki.shape.size() == 4 && vi.shape.size() == 4 && qi.shape.size() == 4) {
      const std::size_t b = qi.shape[0];
      const std::size_t per_row = ki.shape[2] * ki.shape[3] * dtype_size(ki.dtype) +
                                  vi.shape[2] * vi.shape[3] * dtype_size(vi.dtype);
      const std::size_t s_new = side[4] && !side[9] && side[4]->shape().size() > 1 ? side[4]->shape()[1] : 0;
      const std::size_t capacity =
          side[0] && side[0]->shape().size() == 2 ? side[0]->shape()[1] * ki.shape[1] : ki.shape[1];
      auto entry = [&](const std::optional<Tensor>& t, std::size_t i, double dflt) {
        return t && t->shape().size() == 1 && i < t->shape()[0] ? t->get(i) : dflt;
      };
      std::size_t used = 0, sk = 0;
      for (std::size_t i = 0; i < b; ++i) {
        // Packed new keys: the entry's span of cu_seqlens_k_new.
        const double n_new = side[9] ? entry(side[9], i + 1, 0.0) - entry(side[9], i, 0.0)
                                     : static_cast<double>(s_new);
        const double n = entry(side[1], i, static_cast<double>(capacity)) + n_new -
                         entry(side[3], i, 0.0);
        // Out-of-range lengths are refused by the library, naming the input.
        const std::size_t rows =
            n > 0 ? static_cast<std::size_t>(std::min(n, static_cast<double>(capacity))) : 0;
        used = add(used, rows);
        sk = std::max(sk, rows);
      }
      std::size_t need = own;
      if (in_place) {
        need = add(need, used > SIZE_MAX / per_row ? SIZE_MAX : used * per_row);
      } else {
        need = add(need, add(bytes_of(ki), bytes_of(vi)));
      }
      const std::size_t views = b * sk > SIZE_MAX / per_row ? SIZE_MAX : b * sk * per_row;
      need = add(need, views);
      if (need >= opt.max_memory) {
        throw InputError(fmt::format(
            "--max-memory {}: the KV cache step needs {} before its outputs and work memory "
            "(Q, the per-entry inputs, {}, and the keys as attention sees them)",
            bytes_str(opt.max_memory), bytes_str(need),
            in_place ? "the cache rows the entries use" : "the caches read whole"));
      }
      lib.max_memory = opt.max_memory - need;
    }
  }
  auto whole = [&](TensorSource& src) {
    if (in_place) {
      return Tensor::borrow(src.info().dtype, src.info().shape,
                            const_cast<std::byte*>(src.mapped_data()));
    }
    return read_all_rows(src);
  };
  Tensor qt = read_all_rows(*q_src), kc = whole(*k_src), vc = whole(*v_src);
  kv.rotary_interleaved = o.rotary_interleaved;
  const AttentionResult res = attention_kvcache(qt, kc, vc, kv, lib);
  Attrs attrs = res.attrs;
  attrs.insert(attrs.end(), extra.begin(), extra.end());
  verbose_attrs(attrs);
  std::vector<NamedTensor> named;
  for (std::size_t i = 0; i < opt.emit.size(); ++i) {
    Attrs a = attrs;
    a.push_back({"tensor", attention_emit_name(opt.emit[i])});
    named.push_back(NamedTensor{out_refs[i], &res.get(opt.emit[i]), a});
  }
  if (!cache_refs.empty()) {
    named.push_back(NamedTensor{cache_refs[0], &kc, {{"tensor", std::string("k_cache")}}});
    named.push_back(NamedTensor{cache_refs[1], &vc, {{"tensor", std::string("v_cache")}}});
  }
  write_tensors(named, write);
}

}  // namespace posenc::cli
