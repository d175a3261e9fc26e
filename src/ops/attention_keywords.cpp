#include "posenc/ops/attention_keywords.hpp"

#include <map>

#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/rope_fields.hpp"
#include "posenc/encodings/rope_keywords.hpp"
#include "posenc/error.hpp"
#include "posenc/field_groups.hpp"
#include "posenc/ops/attention_fields.hpp"
#include "posenc/ops/attention_relative_fields.hpp"
#include "posenc/ops/cast.hpp"
#include "posenc/ops/hf_attention.hpp"

namespace posenc {

namespace {

// The tensor `key` gives, none when it is not given.
std::optional<Tensor> tensor_if(const Keywords& t, const char* key) {
  if (!t.gives(key)) return std::nullopt;
  return t.tensor(key);
}

// The tensors of `emit` by name (moved out of `res`) and the attrs.
AttentionEmitted emitted(AttentionResult& res, const std::vector<AttentionEmit>& emit) {
  AttentionEmitted out;
  for (AttentionEmit e : emit) {
    out.tensors.emplace_back(attention_emit_name(e), std::move(res.get(e)));
  }
  out.attrs = std::move(res.attrs);
  return out;
}

// Each declared option of attention's requests (--k-descale) and the keyword that gives
// the same field (k_descale).
const std::map<std::string, std::string>& keyword_of_option() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> out;
    const auto add = [&out](const char*, auto r) {
      Describer d;
      declare(d, r);
      for (const Field& f : d.fields) out.emplace(f.option(), f.python_name());
    };
    for (const char* group : {"attention", "attention_tensors", "relative", "rope"}) {
      for_each_request_of(group, add);
    }
    return out;
  }();
  return m;
}

bool option_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// `what` with each declared option written as its keyword: a whole token only (the longest
// option characters run, so --k-descale-x is not --k-descale), and not a value the caller
// quoted ('--mask'); the words after it ("--arith fa-baseline") stay.
std::string in_keyword_terms(const std::string& what) {
  const auto& keywords = keyword_of_option();
  std::string out;
  std::size_t i = 0;
  while (i < what.size()) {
    const bool starts = what.compare(i, 2, "--") == 0 &&
                        (i == 0 || (!option_char(what[i - 1]) && what[i - 1] != '\''));
    if (!starts) {
      out += what[i++];
      continue;
    }
    std::size_t end = i + 2;
    while (end < what.size() && option_char(what[end])) ++end;
    const auto it = keywords.find(what.substr(i, end - i));
    out += it == keywords.end() ? what.substr(i, end - i) : it->second;
    i = end;
  }
  return out;
}

// f(), its errors rethrown with the same type in the keyword caller's terms: the library's
// messages written for the command line name options, which Python has not.
template <class F>
auto in_keyword_terms_of(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    const std::string what = in_keyword_terms(e.what());
    if (dynamic_cast<const UsageError*>(&e)) throw UsageError(what);
    if (dynamic_cast<const InputError*>(&e)) throw InputError(what);
    if (dynamic_cast<const OutputError*>(&e)) throw OutputError(what);
    throw;
  }
}

}  // namespace

AttentionCall::AttentionCall(const AttentionKeywords& k) {
  in_keyword_terms_of([&] { read(k); });
}

void AttentionCall::read(const AttentionKeywords& k) {
  const Keywords &t = k.tensors, &o = k.options;
  read_options(o, t);
  grad_names_ = o.get<std::vector<std::string>>("emit").value_or(std::vector<std::string>{});
  std::string emit_list;
  for (const auto& e : grad_names_) emit_list += (emit_list.empty() ? "" : ",") + e;
  if (o.gives("emit") && grad_names_.empty()) {
    throw UsageError("emit: expected a list of logits, probs, output, lse, got ()");
  }
  q_ = tensor_if(t, "q");
  k_ = tensor_if(t, "k");
  v_ = tensor_if(t, "v");
  if (!q_ || !k_) throw UsageError(std::string(q_ ? "k" : "q") + ": required, got None");
  // grad_output: the gradients (attention_backward), named in emit.
  grad_output_ = tensor_if(t, "grad_output");
  if (!grad_output_) opt_.emit = parse_attention_emit(emit_list, v_.has_value());
  // The declared tensor inputs by keyword (declare_tensors; wavlm_gate, global_kv and
  // decomposed_rel_pos a list of tensors each).
  KeywordReader declared(t, true, &declared_);
  declare_tensors(declared, opt_);
  // FlashAttention's varlen boundaries; packed Q, K and V default to its thd (shd).
  const bool varlen_axes = (opt_.cu_seqlens_q || opt_.cu_seqlens_k) && opt_.axes.empty();
  const Axes axes = resolve_axes(opt_.axes, q_->ndim(), "q");
  opt_.axes = axes.letters;
  if (varlen_axes) opt_.axes.clear();
  HfConfigChoice hf;  // hf_config, hf_version, layer_type, layer: checked as the command does
  KeywordReader(k.rope).read(hf);
  check_given(hf, keyword_caller({&k.rope}));
  if (!hf.hf_config.empty()) {
    const HfAttentionConfig c = read_hf_attention_config(hf.hf_config, hf.layers());
    check_hf_attention_shapes(c, hf.hf_config, q_->shape(), k_->shape(),
                              v_ ? &v_->shape() : nullptr, opt_.axes);
    std::vector<std::string> keep = options_given_;  // scale, alibi, ... given stay
    apply_hf_attention(c, opt_, keep);
  }
  const Positions pos = positions_by_keyword(k.positions);
  opt_.cu_seqlens = pos.cu_seqlens;

  // The Transformer-XL / XLNet / Funnel and DeBERTa terms, checked by the library's rules
  // (check_relative_given) before their tensors are taken.
  KeywordReader scalars(k.relative, false), tensors(k.relative, true, &held_);
  scalars.read(xl_);
  scalars.read(deb_);
  const Caller c = keyword_caller({&k.relative});
  check_relative_given(xl_, deb_, c, k.with_rope);
  if (xl_terms_given(c)) tensors.read(xl_);
  if (deberta_terms_given(c)) tensors.read(deb_);
  const bool xl_terms = xl_.rel_keys || xl_.phi, deb_terms = deb_.pos_key || deb_.pos_query;
  check_forward_given(xl_terms || deb_terms, keyword_caller({&t}));
  if (k.kv_cache != nullptr) {
    const char* conflict = k.with_rope               ? "rope"
                           : grad_output_            ? "grad_output"
                           : (xl_terms || deb_terms) ? "the relative terms"
                                                     : "";
    read_kv_cache(*k.kv_cache, o, conflict);
    return;
  }
  if (k.with_rope) read_rope(k, pos, axes);
  term_ = {xl_terms ? &xl_ : nullptr, deb_terms ? &deb_ : nullptr, k.with_rope ? &rope_ : nullptr};
  if (grad_output_) {
    forward_output_ = tensor_if(t, "forward_output");
    forward_lse_ = tensor_if(t, "forward_lse");
    check_gradients();
    mode_ = Mode::gradients;
  }
}

// axes, scale, sliding_window, ...: the declared fields (ops/attention_fields.hpp), their
// ranges the library's; `t`: the tensor inputs given, which the rules between fields and
// tensors see.
void AttentionCall::read_options(const Keywords& o, const Keywords& t) {
  KeywordReader k(o);
  k.read(opt_);
  options_given_ = k.given;
  validate_given(opt_, options_given_);
  // A keyword caller has t5_causal alone, no t5_bidirectional.
  check_given(
      opt_, Caller{[&](const std::string& n) { return o.gives(n) || t.gives(n); },
                   [](const std::string& n) { return n == "t5_bidirectional" ? "" : n; }, nullptr});
  opt_.t5_bidirectional = !o.get<bool>("t5_causal").value_or(false);
  DecomposedGrids grids;  // grid, key_grid
  KeywordReader(o).read(grids);
  set_grids(opt_, grids, keyword_caller({&o}));
  // The relative tables' window (relative_left, relative_right, relative_sign,
  // relative_beyond: RelativeWindow's declaration), set when any of them is given.
  RelativeWindow w;
  KeywordReader window(o);
  window.read(w);
  if (!window.given.empty()) opt_.relative_window = checked_window(w, keyword_caller({&o}));
  KeywordReader{o}(field("precision", ""), choice(opt_.precision, fields::precisions()));
  AttentionArith arith;  // exact, hf, fa-baseline (FlashAttention-3's tests)
  KeywordReader(o).read(arith);
  check_given(arith, keyword_caller({&o}));
  opt_.arith = arith.arith;
  opt_.fa_baseline = arith.fa_baseline;
  MemoryBudget budget;  // max_memory: bytes (the command's text is a size)
  KeywordReader(o).read(budget);
  opt_.max_memory = budget.max_memory;
}

// The RoPE variant for Q's head dim, computed once from the keywords and handed to
// attention as a value.
void AttentionCall::read_rope(const AttentionKeywords& k, const Positions& pos, const Axes& axes) {
  const int head_dim = static_cast<int>(q_->shape()[static_cast<std::size_t>(axes.index('d'))]);
  const RopeParams params =
      rope_params_by_keyword(k.rope, head_dim, keyword_caller({&k.rope, &k.options}));
  rope_.params = [params](int hd) {
    RopeParams p = params;
    p.head_dim = hd;
    return p;
  };
  rope_.positions = pos;
  rope_.apply = apply_by_keyword(k.apply);
  rope_.apply.allow_nonfinite = opt_.allow_nonfinite;
}

// FlashAttention's KV-cache step (ops/attention_cache.hpp), k and v being the caches,
// updated in place unless update_cache is false.
void AttentionCall::read_kv_cache(const Keywords& kv, const Keywords& o, const char* conflict) {
  if (*conflict) throw UsageError(std::string(conflict) + ": not with a KV cache");
  if (!v_) throw UsageError("cache_seqlens: the KV cache needs v (the values cache)");
  // The declared inputs (ops/attention_fields.hpp), by keyword.
  KeywordReader(kv, std::nullopt, &held_).read(kv_);
  update_ = kv.get<bool>("update_cache").value_or(true) && kv_.k_new;
  opt_.axes = o.get<std::string>("axes").value_or("bshd");
  mode_ = Mode::kv_cache;
}

// The gradients named in emit (gradient_fields()) against the inputs given, and the
// forward given (forward_output, forward_lse; check_forward_given has said they come
// together).
void AttentionCall::check_gradients() {
  const Caller c{[this](const std::string& n) {
                   return n == "sinks" ? opt_.sinks != nullptr : opt_.qv != nullptr;
                 },
                 [](const std::string& n) { return n; }, nullptr};
  check_gradient_emit(grad_names_, c);
  if (forward_output_) {
    check_forward_shapes(q_->shape(), k_->shape(), v_->shape(), q_->dtype(), opt_,
                         TensorInfo{forward_output_->dtype(), forward_output_->shape(), "", {}},
                         TensorInfo{forward_lse_->dtype(), forward_lse_->shape(), "", {}}, c);
  }
}

AttentionEmitted AttentionCall::run() {
  return in_keyword_terms_of([this] {
    if (mode_ == Mode::kv_cache) return run_kv_cache();
    if (mode_ == Mode::gradients) return run_gradients();
    AttentionResult res = attention(*q_, *k_, v_ ? &*v_ : nullptr, opt_, term_);
    return emitted(res, opt_.emit);
  });
}

AttentionEmitted AttentionCall::run_gradients() {
  AttentionBackwardOptions bopt = gradients_wanted(grad_names_);
  Tensor o64;  // the given forward's output widened exactly, as the backward takes it
  if (forward_output_) {
    const Tensor& o = *forward_output_;
    o64 = o.dtype() == DType::f64
              ? Tensor::borrow(DType::f64, o.shape(), const_cast<std::byte*>(o.bytes()))
              : cast(o, DType::f64);
    bopt.forward_output = &o64;
    bopt.forward_lse = &*forward_lse_;
  }
  AttentionGrads g = attention_backward(*q_, *k_, *v_, *grad_output_, opt_, bopt, term_);
  AttentionEmitted out;
  for (const std::string& n : grad_names_) out.tensors.emplace_back(n, std::move(g.named(n)));
  out.attrs = std::move(g.attrs);
  return out;
}

AttentionEmitted AttentionCall::run_kv_cache() {
  std::optional<Tensor> k_copy, v_copy;
  Tensor* kc = &*k_;
  Tensor* vc = &*v_;
  if (!update_ && kv_.k_new) {  // the caller's caches stay as they are: the new keys go to copies
    k_copy = k_->astype(k_->dtype());
    v_copy = v_->astype(v_->dtype());
    kc = &*k_copy;
    vc = &*v_copy;
  }
  AttentionResult res = attention_kvcache(*q_, *kc, *vc, kv_, opt_);
  return emitted(res, opt_.emit);
}

}  // namespace posenc
