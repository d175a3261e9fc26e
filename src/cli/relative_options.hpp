#pragma once
// The Transformer-XL / XLNet / Funnel and DeBERTa options of `posenc attention`: binding, checks
// of their combinations, and the call into ops/attention_relative.hpp.

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_relative.hpp"

namespace posenc::cli {

struct RelativeCliOptions {
  // Transformer-XL / XLNet (tensor references).
  std::string rel_keys, content_bias, position_bias;
  std::string segment_ids, segment_embed, segment_bias;
  // Funnel Transformer: the shift, the projection, the factorized tables, the per-score
  // segment rows and the <cls> mask.
  long long rel_shift = 0;
  std::string rel_kernel, segment_index;
  std::vector<std::string> factorized;  // PHI PI PSI OMEGA
  bool separate_cls = false;
  // DeBERTa.
  std::string pos_key, pos_query, pos_att_type;
  int position_buckets = 256;
  int max_relative_positions = 512;
  CLI::App* app = nullptr;  ///< to ask which options were given explicitly
};

/// Binds the options to `o` on `sub` (group "RELATIVE ATTENTION").
void add_relative_options(CLI::App* sub, RelativeCliOptions& o);

/// Whether a Transformer-XL / XLNet / Funnel or DeBERTa term was asked for.
bool relative_wanted(const RelativeCliOptions& o);

/// Throws UsageError for options that do not go together (before anything is read);
/// `rope` says whether --rope was given.
void check_relative_options(const RelativeCliOptions& o, bool rope);

/// The relative tensors read from their references, and the terms' request pointing at
/// them (Transformer-XL / XLNet / Funnel's when `xl_terms`, else DeBERTa's).
struct RelativeInputs {
  std::optional<Tensor> tensors[14];
  bool xl_terms = false;
  XlAttention xl;
  DebertaAttention deb;
};

/// Reads the tensors of the terms asked for (relative_wanted).
std::unique_ptr<RelativeInputs> read_relative(const RelativeCliOptions& o);

/// Reads the relative tensors and computes attention with their terms.
AttentionResult relative_attention(const RelativeCliOptions& o, const Tensor& q, const Tensor& k,
                                   const Tensor* v, const AttentionOptions& opt);

}  // namespace posenc::cli
