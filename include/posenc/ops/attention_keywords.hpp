#pragma once
/// \file
/// attention's calls read by keyword (posenc/keywords.hpp), as the Python package's
/// posenc.attention makes them: the tensors, the options, the ROPE OPTIONS, the positions,
/// the ways of applying, the relative terms and FlashAttention's KV cache, checked by the
/// command's rules in the command's order, then run as the forward, the gradients
/// (grad_output) or the KV-cache step (ops/attention_cache.hpp).

#include <list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "posenc/encodings/rope.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/keywords.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_backward.hpp"
#include "posenc/ops/attention_cache.hpp"
#include "posenc/ops/attention_relative.hpp"
#include "posenc/ops/attention_term.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// The keywords of one call, by group.
struct AttentionKeywords {
  /// q, k, v, grad_output, forward_output, forward_lse and the declared tensor inputs
  /// (declare_tensors: mask, sinks, qv, ...); "kv" says a KV cache is given.
  const Keywords& tensors;
  /// AttentionOptions' declared fields, emit, t5_causal, grid and key_grid, the relative
  /// window, precision, arith and max_memory.
  const Keywords& options;
  const Keywords& rope;       ///< the ROPE OPTIONS; hf_config's attention parameters too
  const Keywords& positions;  ///< start, position_ids, cu_seqlens, ...
  const Keywords& apply;      ///< the ways of applying RoPE
  const Keywords& relative;   ///< the Transformer-XL / XLNet / Funnel and DeBERTa terms
  /// FlashAttention's KV cache (KvCacheOptions' fields and update_cache), k and v being
  /// the caches; null: no KV cache.
  const Keywords* kv_cache = nullptr;
  bool with_rope = false;  ///< RoPE applied to Q and K inside attention
};

/// What a call gives: its tensors by name, in the order asked for, and the attrs.
struct AttentionEmitted {
  std::vector<std::pair<std::string, Tensor>> tensors;
  Attrs attrs;
};

/// One call of attention by keyword in two steps: the constructor reads and checks every
/// keyword (UsageError and InputError as the command gives them, named by keyword) and
/// holds the tensors, which may borrow the caller's memory; run() computes without
/// reading a keyword again, so a front end that must hold a lock to read its values
/// (Python's GIL) can release it around run(). Both throw the library's errors in the
/// keyword caller's terms: each declared option of the attention, attention_tensors,
/// relative and rope groups (field_groups.hpp) a message names is written as its keyword
/// ("gradients: k_descale ... is not supported", not "--k-descale"), same type and status.
class AttentionCall {
 public:
  explicit AttentionCall(const AttentionKeywords& k);
  AttentionCall(const AttentionCall&) = delete;
  AttentionCall& operator=(const AttentionCall&) = delete;

  /// Whether run() writes the new keys and values into the caches k and v in place
  /// (update_cache, k_new given): the caller checks that `cache` is its own memory.
  bool updates_cache() const { return update_; }
  /// The cache tensor k ('k') or v ('v') as taken from the keywords.
  const Tensor& cache(char which) const { return which == 'k' ? *k_ : *v_; }

  /// The emitted tensors (emit), the gradients named in emit (grad_output) or the
  /// KV-cache step's output (and lse), with the attrs.
  AttentionEmitted run();

 private:
  void read(const AttentionKeywords& k);
  void read_options(const Keywords& o, const Keywords& t);
  void read_rope(const AttentionKeywords& k, const Positions& pos, const Axes& axes);
  void read_kv_cache(const Keywords& kv, const Keywords& o, const char* conflict);
  void check_gradients();
  AttentionEmitted run_gradients();
  AttentionEmitted run_kv_cache();

  enum class Mode { forward, gradients, kv_cache } mode_ = Mode::forward;
  AttentionOptions opt_;
  std::vector<std::string> options_given_;  // its declared fields the keywords gave
  std::vector<std::string> grad_names_;  // emit, with grad_output
  std::optional<Tensor> q_, k_, v_, grad_output_, forward_output_, forward_lse_;
  std::list<Tensor> declared_;  // the declared tensor inputs, which opt_ points at
  std::list<Tensor> held_;      // the relative terms' tensors and the KV cache's
  XlAttention xl_;
  DebertaAttention deb_;
  AttentionRope rope_;
  AttentionTerm term_;
  KvCacheOptions kv_;
  bool update_ = false;
};

}  // namespace posenc
