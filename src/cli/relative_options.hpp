#pragma once
// The Transformer-XL / XLNet / Funnel and DeBERTa options of `posenc attention`: bound from
// their declaration (posenc/ops/attention_relative_fields.hpp), checked by the library's
// rules, and the term they add to attention (ops/attention_term.hpp).

#include <CLI/CLI.hpp>

#include "cli/declared_options.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_relative.hpp"
#include "posenc/ops/attention_term.hpp"

namespace posenc::cli {

struct RelativeCliOptions {
  XlAttention xl;        // Transformer-XL / XLNet / Funnel
  DebertaAttention deb;  // DeBERTa
  ArrayFiles files;      // the tensors' references, read by read_relative
  CLI::App* app = nullptr;
  bool xl_terms = false;  ///< set by read_relative: xl's terms, else deb's
  std::size_t bytes = 0;  ///< set by read_relative: the tensors read
};

/// Binds the options to `o` on `sub` (group "RELATIVE ATTENTION").
void add_relative_options(CLI::App* sub, RelativeCliOptions& o);

/// Whether a Transformer-XL / XLNet / Funnel or DeBERTa term was asked for.
bool relative_wanted(const RelativeCliOptions& o);

/// Throws UsageError for options that do not go together (before anything is read);
/// `rope` says whether --rope was given.
void check_relative_options(const RelativeCliOptions& o, bool rope);

/// Reads the tensors of the terms asked for (relative_wanted) into `o.xl` or `o.deb`.
void read_relative(RelativeCliOptions& o);

/// The term a call adds to attention: the relative terms of `relative` (read by
/// read_relative; null when none is wanted), else `rope` (null: none).
AttentionTerm attention_term(const RelativeCliOptions* relative, const AttentionRope* rope);

}  // namespace posenc::cli
