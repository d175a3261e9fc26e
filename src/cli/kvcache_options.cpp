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
  // --page-table, --cache-seqlens, --k-new, ..., --rotary-interleaved: the declared
  // inputs (attention_fields.hpp).
  OptionBinder b(sub, g, {}, &o.tensors);
  declare(b, o.kv);
  sub->add_option("--cache-out", o.cache_out,
                  "where the updated caches go (K_REF V_REF; the cache files themselves "
                  "update them), written with the other outputs")
      ->expected(2)
      ->type_name("K_REF V_REF")
      ->group(g);
}

bool kvcache_wanted(const KvCacheCliOptions& o) {
  KvCacheOptions declared;
  return !given_fields(o.app, declared).empty() || o.app->count("--cache-out") > 0;
}

void run_kvcache(KvCacheCliOptions& o, const std::string& q, const std::string& k,
                 const std::string& v, const std::string& conflicts, AttentionOptions opt,
                 const std::vector<TensorRef>& out_refs, const WriteOptions& write, Attrs extra) {
  if (!conflicts.empty()) throw UsageError(fmt::format("{}: not with a KV cache", conflicts));
  if (v.empty())
    throw UsageError("--cache-seqlens and the KV-cache options need -v (the values cache)");
  const auto given = [&o](const char* option) { return o.app->count(option) > 0; };
  if (o.kv.rotary_interleaved && !given("--rotary-cos")) {
    throw UsageError("--rotary-interleaved: needs --rotary-cos and --rotary-sin");
  }
  if (given("--cu-seqlens-k-new") && !given("--k-new")) {
    throw UsageError("--cu-seqlens-k-new: packs the new keys; needs --k-new and --v-new");
  }
  if (!o.cache_out.empty() && !given("--k-new")) {
    throw UsageError("--cache-out: the caches change only with --k-new and --v-new");
  }
  std::vector<TensorRef> cache_refs;
  for (const std::string& r : o.cache_out) cache_refs.push_back(parse_ref(r));
  {
    std::vector<TensorRef> all = out_refs;
    all.insert(all.end(), cache_refs.begin(), cache_refs.end());
    check_distinct_outputs(all);
  }
  const KvCacheOptions& kv = o.kv;
  auto q_src = open_source(parse_ref(q));
  auto k_src = open_source(parse_ref(k));
  auto v_src = open_source(parse_ref(v));
  // A cache only read (no new keys) is used in place where its file can be mapped: only
  // the pages holding the rows the entries use become resident, read block by block as
  // the kernel widens each key block. New keys are written into the cache, so it is then
  // read whole (an owned copy, written out by --cache-out with the other outputs).
  const bool in_place = !given("--k-new") && k_src->mapped_data() && v_src->mapped_data();
  std::size_t own = 0;  // bytes read into memory: Q, the small inputs, caches read whole
  auto bytes_of = [](const TensorInfo& t) {
    return checked_numel(t.shape, 1, "attention") * dtype_size(t.dtype);
  };
  auto add = [](std::size_t a, std::size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; };
  o.tensors.read();  // into kv
  own = add(add(own, bytes_of(q_src->info())), o.tensors.held_bytes());
  const Tensor *page_table = kv.page_table, *cache_seqlens = kv.cache_seqlens,
               *leftpad = kv.cache_leftpad, *k_new = kv.k_new, *cu_new = kv.cu_seqlens_k_new;
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
      const std::size_t s_new =
          k_new && !cu_new && k_new->shape().size() > 1 ? k_new->shape()[1] : 0;
      const std::size_t capacity = page_table && page_table->shape().size() == 2
                                       ? page_table->shape()[1] * ki.shape[1]
                                       : ki.shape[1];
      auto entry = [&](const Tensor* t, std::size_t i, double dflt) {
        return t && t->shape().size() == 1 && i < t->shape()[0] ? t->get(i) : dflt;
      };
      std::size_t used = 0, sk = 0;
      for (std::size_t i = 0; i < b; ++i) {
        // Packed new keys: the entry's span of cu_seqlens_k_new.
        const double n_new =
            cu_new ? entry(cu_new, i + 1, 0.0) - entry(cu_new, i, 0.0) : static_cast<double>(s_new);
        const double n =
            entry(cache_seqlens, i, static_cast<double>(capacity)) + n_new - entry(leftpad, i, 0.0);
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
