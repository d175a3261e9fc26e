// ROPE OPTIONS of CLI.md: one binder and one conversion for `table rope`, `rope` and
// `attention --rope`.

#include "cli/rope_options.hpp"

#include "cli/parse.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "cli/common.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/hf_config.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"

namespace posenc::cli {

void add_rope_options(CLI::App* sub, RopeCliOptions& o) {
  o.app = sub;
  const char* g = "ROPE OPTIONS";
  sub->add_option("--style", o.style,
                  "pair layout: neox (i, i+r/2; alias half) or gptj (2i, 2i+1; alias "
                  "interleaved); default neox; posenc rope also takes tiled (V-JEPA2: adjacent "
                  "pairs, dim l of a chunk of width c using angle l mod c/2)")
      ->group(g);
  sub->add_option("--base", o.base, "theta base, HF rope_theta (default 10000)")->group(g);
  sub->add_option("--rotary-dim", o.rotary_dim, "rotate only the first R dims (even, <= D)")
      ->group(g);
  sub->add_flag("--rotary-last,!--no-rotary-last", o.rotary_last,
                "rotate the last R dims instead of the first (DeepSeek MLA q = [nope | rope])")
      ->group(g);
  sub->add_flag("--rope-interleave,!--no-rope-interleave", o.rope_interleave,
                "HF rope_interleave (DeepSeek-V3): input pairs (2i, 2i+1), output in the neox "
                "order (i, i+R/2); needs --style neox")
      ->group(g);
  sub->add_option("--partial", o.partial,
                  "rotate the first int(F*D) dims (partial_rotary_factor, default 1)")
      ->group(g);
  sub->add_option("--start", o.start, "first position (KV-cache offset), default 0")->group(g);
  sub->add_option("--position-ids", o.position_ids,
                  "explicit positions: tensor of any integer dtype, shape [s] or [b, s] ([n, s] "
                  "or [n, b, s] for n coordinate axes; posenc rope also takes real coordinates "
                  "as a float tensor)")
      ->group(g);
  sub->add_option("--cu-seqlens", o.cu_seqlens,
                  "packed sequences: boundaries [n+1]; positions restart at each one")
      ->group(g);
  sub->add_option("--scaling", o.scaling,
                  "none|linear|dynamic|yarn|longrope|llama3|proportional (HF rope_type), default "
                  "none")
      ->group(g);
  sub->add_option("--factor", o.factor, "scaling factor s (HF factor)")->group(g);
  sub->add_option("--original-max-pos", o.original_max_pos,
                  "L0, HF original_max_position_embeddings")
      ->group(g);
  sub->add_option("--max-pos", o.max_pos, "HF max_position_embeddings (dynamic, yarn, longrope)")
      ->group(g);
  sub->add_option("--seq-len", o.seq_len,
                  "sequence length the frequencies are for (dynamic NTK, longrope switch); "
                  "default: largest position + 1")
      ->group(g);
  sub->add_option("--beta-fast", o.beta_fast, "yarn beta_fast (default 32)")->group(g);
  sub->add_option("--beta-slow", o.beta_slow, "yarn beta_slow (default 1)")->group(g);
  sub->add_option("--mscale", o.mscale, "yarn mscale (DeepSeek)")->group(g);
  sub->add_option("--mscale-all-dim", o.mscale_all_dim, "yarn mscale_all_dim (DeepSeek)")->group(g);
  sub->add_option("--attention-factor", o.attention_factor,
                  "attention factor multiplying cos and sin (overrides the yarn/longrope default)")
      ->group(g);
  sub->add_flag("--no-truncate", o.no_truncate,
                "yarn: do not floor/ceil the correction range (HF truncate=false)")
      ->group(g);
  sub->add_option("--low-freq-factor", o.low_freq_factor, "llama3 low_freq_factor (default 1)")
      ->group(g);
  sub->add_option("--high-freq-factor", o.high_freq_factor, "llama3 high_freq_factor (default 4)")
      ->group(g);
  sub->add_option("--short-factor", o.short_factor,
                  "longrope short_factor: comma list or tensor reference, R/2 values")
      ->group(g);
  sub->add_option("--long-factor", o.long_factor,
                  "longrope long_factor: comma list or tensor reference, R/2 values")
      ->group(g);
  sub->add_option("--hf-config", o.hf_config,
                  "take the RoPE of a HF config.json as transformers v5 reads it (rope_theta, "
                  "head_dim, partial_rotary_factor, max_position_embeddings, "
                  "rope_scaling/rope_parameters, mrope_section, ...); explicit options win")
      ->group(g);
  sub->add_option("--hf-version", o.hf_version,
                  "with --hf-config: read the config as this transformers release does "
                  "(4.43 to 5.x; default 5), where releases differ: the YaRN factor rule, "
                  "original_max_position_embeddings, rope_parameters")
      ->type_name("X.Y")
      ->group(g);
  sub->add_option("--layer-type", o.layer_type,
                  "with --hf-config: the layers to follow (a layer_types value such as "
                  "sliding_attention); default full_attention, or the config's only type")
      ->group(g);
  sub->add_option("--layer", o.layer,
                  "with --hf-config: follow one layer (0-based index): its layer type and its "
                  "own rules, such as SmolLM3's no_rope_layers")
      ->group(g);
  sub->add_flag("--inverse", o.inverse, "apply the inverse rotation (R^T)")->group(g);
  sub->add_option("--precision", o.precision,
                  "posenc's own working precision for --arith exact: f64 (default; correctly "
                  "rounded) or f32 (faster, not any framework's bits)")
      ->check(CLI::IsMember({"f64", "f32"}))
      ->group(g);
  sub->add_option("--arith", o.arith,
                  "exact (default: the correctly rounded value) or a framework's float32 "
                  "arithmetic bit for bit: hf (HF transformers on torch CPU), meta (Meta's "
                  "llama complex form), ggml (ggml's CPU rope)")
      ->check(CLI::IsMember({"exact", "hf", "meta", "ggml"}))
      ->group(g);
}

namespace {

bool given(const RopeCliOptions& o, const char* name, bool fallback) {
  if (o.app == nullptr) return fallback;
  return o.app->count(name) > 0;
}

// A comma list of numbers ("1.0,1.1,...") or a tensor reference.
std::vector<double> factor_list(const std::string& text, const char* option) {
  if (auto list = parse_number_list(text, option)) return *list;
  Tensor t;
  try {
    t = read_tensor(text);
  } catch (const UsageError&) {
    throw UsageError(
        fmt::format("{}: '{}' is neither a comma-separated list of numbers nor a tensor reference",
                    option, text));
  }
  if (t.ndim() > 1) {
    throw InputError(fmt::format("{}: {}: expected a 1-D tensor, got shape {}", option, text,
                                 shape_str(t.shape())));
  }
  std::vector<double> v(t.numel());
  for (std::size_t i = 0; i < t.numel(); ++i) v[i] = t.get(i);
  return v;
}

// The options' values (their defaults where not given) as RoPE parameters.
void set_explicit(const RopeCliOptions& o, RopeParams& p) {
  auto want = [&](const char* name, bool nonzero) { return given(o, name, nonzero) || nonzero; };
  p.style = parse_rope_style(o.style);
  p.base = o.base;
  if (want("--rotary-dim", o.rotary_dim != 0)) p.rotary_dim = o.rotary_dim;
  p.partial = o.partial;
  if (want("--scaling", o.scaling != "none")) p.scaling = parse_rope_scaling(o.scaling);
  if (want("--factor", o.factor != 0)) p.factor = o.factor;
  if (want("--original-max-pos", o.original_max_pos != 0)) {
    if (o.original_max_pos <= 0) {
      throw UsageError(
          fmt::format("--original-max-pos: must be positive, got {}", o.original_max_pos));
    }
    p.original_max_pos = o.original_max_pos;
  }
  if (want("--max-pos", o.max_pos != 0)) {
    if (o.max_pos <= 0) {
      throw UsageError(fmt::format("--max-pos: must be positive, got {}", o.max_pos));
    }
    p.max_pos = o.max_pos;
  }
  if (want("--beta-fast", o.beta_fast != 0)) p.beta_fast = o.beta_fast;
  if (want("--beta-slow", o.beta_slow != 0)) p.beta_slow = o.beta_slow;
  if (want("--mscale", o.mscale != 0)) p.mscale = o.mscale;
  if (want("--mscale-all-dim", o.mscale_all_dim != 0)) p.mscale_all_dim = o.mscale_all_dim;
  if (want("--attention-factor", o.attention_factor != 0)) {
    p.attention_factor = o.attention_factor;
    // Given on the command line, it also wins over a PhiMoE config's mscales.
    p.short_mscale.reset();
    p.long_mscale.reset();
  }
  if (want("--low-freq-factor", o.low_freq_factor != 0)) p.low_freq_factor = o.low_freq_factor;
  if (want("--high-freq-factor", o.high_freq_factor != 0)) {
    p.high_freq_factor = o.high_freq_factor;
  }
  if (o.no_truncate) p.truncate = false;
  if (want("--rotary-last", o.rotary_last)) p.rotary_last = o.rotary_last;
  if (want("--rope-interleave", o.rope_interleave)) p.rope_interleave = o.rope_interleave;
  if (want("--short-factor", !o.short_factor.empty())) {
    p.short_factor = factor_list(o.short_factor, "--short-factor");
  }
  if (want("--long-factor", !o.long_factor.empty())) {
    p.long_factor = factor_list(o.long_factor, "--long-factor");
  }
  if (want("--seq-len", o.seq_len != 0)) {
    if (o.seq_len <= 0) {
      throw UsageError(fmt::format("--seq-len: must be positive, got {}", o.seq_len));
    }
    p.seq_len = o.seq_len;
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  lines.push_back(text.substr(start));
  return lines;
}

// One note on stderr (not with --quiet) when the release that wrote the config reads it
// into other RoPE values than the rules applied.
void note_version_drift(const RopeCliOptions& o, const RopeParams& given_only,
                        const RopeParams& applied, const std::vector<std::string>& names,
                        const HfVersion& version) {
  if (globals().quiet) return;
  const std::optional<HfVersion> wrote = hf_config_version(o.hf_config);
  if (!wrote || same_hf_rules(*wrote, version)) return;
  RopeParams theirs;
  try {
    theirs = merge_hf_config(given_only, names, o.hf_config, hf_layer(o), *wrote);
  } catch (const InputError&) {
    return;  // that release could not read it at all (a v5 key in a 4.x-era file)
  }
  if (theirs.factor == applied.factor && theirs.original_max_pos == applied.original_max_pos &&
      theirs.attention_factor == applied.attention_factor && theirs.truncate == applied.truncate) {
    return;
  }
  fmt::print(stderr,
             "posenc: note: {} was written by transformers {}.{}, which reads its RoPE into "
             "other values than the {}.{} rules applied here (--hf-version {}.{} gives that "
             "release's)\n",
             o.hf_config, wrote->major, wrote->minor, version.major, version.minor, wrote->major,
             wrote->minor);
}

}  // namespace

void check_layer_option(const RopeCliOptions& o) {
  if (o.layer == -1) return;
  if (o.hf_config.empty()) throw UsageError("--layer: needs --hf-config");
  if (o.layer < 0) {
    throw UsageError(fmt::format("--layer: must be a layer index >= 0, got {}", o.layer));
  }
}

HfLayer hf_layer(const RopeCliOptions& o) {
  HfLayer layer{o.layer_type, std::nullopt};
  if (o.layer >= 0) layer.index = o.layer;
  return layer;
}

RopeParams rope_params(const RopeCliOptions& o, int head_dim) {
  RopeParams p;
  set_explicit(o, p);
  p.arith = rope_arith(o);
  // Meta's code only has the complex (interleaved) form.
  if (p.arith == Arith::meta && !given(o, "--style", false)) p.style = RopeStyle::gptj;
  if (head_dim > 0) p.head_dim = head_dim;
  if (!o.layer_type.empty() && o.hf_config.empty()) {
    throw UsageError("--layer-type: needs --hf-config");
  }
  const bool versioned = given(o, "--hf-version", !o.hf_version.empty());
  if (versioned && o.hf_config.empty()) {
    throw UsageError("--hf-version: needs --hf-config");
  }
  check_layer_option(o);
  if (!o.hf_config.empty()) {
    // What the command line gives is not the config's: the config's value is neither
    // taken nor checked, and a range check of the value names the option
    // (merge_hf_config, as the Python module merges its keywords).
    static const std::pair<const char*, const char*> kOptionField[] = {
        {"--style", "style"},
        {"--base", "base"},
        {"--rotary-dim", "rotary_dim"},
        {"--partial", "partial"},
        {"--scaling", "scaling"},
        {"--factor", "factor"},
        {"--original-max-pos", "original_max_pos"},
        {"--max-pos", "max_pos"},
        {"--seq-len", "seq_len"},
        {"--beta-fast", "beta_fast"},
        {"--beta-slow", "beta_slow"},
        {"--mscale", "mscale"},
        {"--mscale-all-dim", "mscale_all_dim"},
        {"--attention-factor", "attention_factor"},
        {"--low-freq-factor", "low_freq_factor"},
        {"--high-freq-factor", "high_freq_factor"},
        {"--no-truncate", "truncate"},
        {"--short-factor", "short_factor"},
        {"--long-factor", "long_factor"},
        {"--rotary-last", "rotary_last"},
        {"--rope-interleave", "rope_interleave"},
    };
    std::vector<std::string> names;
    for (const auto& [option, field] : kOptionField) {
      if (given(o, option, false)) names.push_back(field);
    }
    const HfVersion version = versioned ? parse_hf_version(o.hf_version) : HfVersion{};
    const RopeParams given_only = p;
    p = merge_hf_config(given_only, names, o.hf_config, hf_layer(o), version);
    for (const std::string& line : split_lines(hf_rules_text(version))) verbose(line);
    note_version_drift(o, given_only, p, names, version);
  }
  return p;
}

Positions rope_positions(const RopeCliOptions& o, bool real_coords) {
  Positions pos;
  if (o.start < 0 || o.start > kMaxPosition) {
    throw UsageError(
        fmt::format("--start: must be from 0 to 2^53 = {}, got {}", kMaxPosition, o.start));
  }
  pos.start = o.start;
  if (!o.position_ids.empty() && !o.cu_seqlens.empty()) {
    throw UsageError("--position-ids: cannot be combined with --cu-seqlens");
  }
  auto ints = [](const Tensor& t, const std::string& ref, const char* option, Shape& shape) {
    const xt::xarray<std::int64_t> a = int64_values(t, ref, option);
    shape = t.shape();
    return std::vector<std::int64_t>(a.begin(), a.end());
  };
  if (!o.position_ids.empty()) {
    const Tensor t = read_tensor(o.position_ids);
    if (real_coords && is_float(t.dtype())) {
      pos.coords_shape = t.shape();
      pos.coords.resize(t.numel());
      for (std::size_t i = 0; i < t.numel(); ++i) pos.coords[i] = t.get(i);
      if (pos.coords_shape.empty() || pos.coords_shape.size() > 3) {
        throw InputError(fmt::format("--position-ids: {}: expected shape [s], [b, s], [n, s] "
                                     "or [n, b, s], got {}",
                                     o.position_ids, shape_str(pos.coords_shape)));
      }
      return pos;
    }
    pos.ids = ints(t, o.position_ids, "--position-ids", pos.ids_shape);
    if (pos.ids_shape.empty() || pos.ids_shape.size() > 3) {
      throw InputError(fmt::format("--position-ids: {}: expected shape [s] or [b, s], got {}",
                                   o.position_ids, shape_str(pos.ids_shape)));
    }
    for (std::int64_t v : pos.ids) {
      if (v < 0) {
        throw InputError(
            fmt::format("--position-ids: {}: negative position {}", o.position_ids, v));
      }
      if (v > kMaxPosition - pos.start) {
        throw InputError(fmt::format("--position-ids: {}: position {} (+ --start {}) is beyond "
                                     "2^53 = {}",
                                     o.position_ids, v, pos.start, kMaxPosition));
      }
    }
  }
  if (!o.cu_seqlens.empty()) {
    Shape shape;
    pos.cu_seqlens = ints(read_tensor(o.cu_seqlens), o.cu_seqlens, "--cu-seqlens", shape);
    if (shape.size() != 1 || pos.cu_seqlens.empty() || pos.cu_seqlens[0] != 0) {
      throw InputError(
          fmt::format("--cu-seqlens: {}: expected a 1-D tensor starting at 0, got shape {}",
                      o.cu_seqlens, shape_str(shape)));
    }
    for (std::size_t i = 1; i < pos.cu_seqlens.size(); ++i) {
      if (pos.cu_seqlens[i] > kMaxPosition - pos.start) {
        throw InputError(fmt::format("--cu-seqlens: {}: boundary {} (+ --start {}) is beyond "
                                     "2^53 = {}",
                                     o.cu_seqlens, pos.cu_seqlens[i], pos.start, kMaxPosition));
      }
      if (pos.cu_seqlens[i] < pos.cu_seqlens[i - 1]) {
        throw InputError(fmt::format("--cu-seqlens: {}: boundaries must not decrease ({} after {})",
                                     o.cu_seqlens, pos.cu_seqlens[i], pos.cu_seqlens[i - 1]));
      }
    }
  }
  return pos;
}

std::int64_t last_position(std::int64_t start, std::int64_t count) {
  if (count > kMaxPosition - start + 1) {
    throw UsageError(fmt::format("--start {} with {} positions goes beyond 2^53 = {}", start,
                                 count, kMaxPosition));
  }
  return start + count - 1;
}

Precision rope_precision(const RopeCliOptions& o) {
  if (o.precision == "f64") return Precision::f64;
  if (o.precision == "f32") return Precision::f32;
  throw UsageError(fmt::format("--precision: expected f64 or f32, got '{}'", o.precision));
}

Arith rope_arith(const RopeCliOptions& o) {
  const Arith a = parse_arith(o.arith);
  if (a != Arith::exact && given(o, "--precision", false)) {
    throw UsageError(
        fmt::format("--precision: applies to --arith exact only (--arith {} has "
                    "its framework's own arithmetic)",
                    o.arith));
  }
  return a;
}

}  // namespace posenc::cli
