// posenc analyze: the properties behind the pictures (RoPE decay, wavelengths, the
// relative-position check, attention entropy and distance) as tables written like any
// tensor (-o) and drawn with --plot.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/figure_output.hpp"
#include "cli/rope_options.hpp"
#include "cli/table_output.hpp"
#include "posenc/analysis.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/io/text.hpp"

namespace posenc::cli {

namespace {

/// What every analyze subcommand shares: outputs and the picture.
struct AnalyzeCommon : TableOutputOptions {
  CLI::App* app = nullptr;
};

void add_common(CLI::App* sub, AnalyzeCommon& c) {
  c.app = sub;
  add_table_output_options(
      sub, c, nullptr, "draw the table: an image file (.png, .svg, .pdf) or - for the terminal");
}

void emit(const AnalysisTable& t, const AnalyzeCommon& c, bool print = true) {
  emit_table(t, c, print);
}

/// A comma list of positive numbers.
std::vector<double> number_list(const std::string& text, const char* option) {
  std::vector<double> out;
  for (const auto& part : split_list(text)) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || !std::isfinite(v) || v <= 0) {
      throw UsageError(fmt::format("{}: '{}' is not a list of positive numbers", option, text));
    }
    out.push_back(v);
  }
  return out;
}

std::string base_text(double b) {
  if (b == std::floor(b) && b < 1e15) return fmt::format("{}", static_cast<long long>(b));
  return fmt::format("{}", b);
}

/// Refuses ROPE OPTIONS that place tokens, which an analysis over distances ignores.
void refuse_positions(CLI::App* sub, const char* command) {
  for (const char* name : {"--position-ids", "--cu-seqlens", "--inverse"}) {
    if (sub->count(name) > 0) {
      throw UsageError(fmt::format("{}: does not apply to analyze {}", name, command));
    }
  }
}

// --- decay and wavelengths: RoPE variants to compare -------------------------------

struct RopeAnalysisOptions {
  AnalyzeCommon c;
  RopeCliOptions rope;
  int dim = 0;
  std::string bases, variants;
  long long max_distance = 1024, step = 1, target_len = 0;
  std::string emit = "bound,mean-qk";
};

RopeParams base_params(const RopeAnalysisOptions& o, const char* command) {
  refuse_positions(o.c.app, command);
  if (o.c.app->count("--dim") > 0 && o.dim <= 0) {
    throw UsageError(fmt::format("--dim: must be at least 1, got {}", o.dim));
  }
  if (o.dim <= 0 && o.rope.hf_config.empty()) {
    throw UsageError("--dim: the head dimension is required (or give --hf-config)");
  }
  return rope_params(o.rope, o.dim);
}

/// The curves: every base of --bases (or the one base) under every variant of
/// --variants (or `default_variants`). `prepare` adjusts each variant's parameters.
template <class Prepare>
std::vector<RopeCurve> rope_curves(const RopeAnalysisOptions& o, const RopeParams& p,
                                   const std::vector<RopeScaling>& default_variants,
                                   const Prepare& prepare) {
  const std::vector<double> bases =
      o.bases.empty() ? std::vector<double>{p.base} : number_list(o.bases, "--bases");
  std::vector<RopeScaling> variants;
  if (o.variants.empty()) {
    variants = default_variants;
  } else {
    for (const auto& v : split_list(o.variants)) variants.push_back(parse_rope_scaling(v));
  }
  std::vector<RopeCurve> curves;
  for (RopeScaling v : variants) {
    for (double b : bases) {
      RopeParams q = p;
      q.base = b;
      q.scaling = v;
      prepare(q);
      std::vector<std::string> label;
      if (variants.size() > 1 || v != RopeScaling::none) label.push_back(rope_scaling_name(v));
      if (bases.size() > 1 || label.empty()) label.push_back("base=" + base_text(b));
      curves.push_back({fmt::format("{}", fmt::join(label, " ")), compute_rope_freqs(q)});
    }
  }
  return curves;
}

void run_decay(const RopeAnalysisOptions& o) {
  RopeParams p = base_params(o, "decay");
  if (o.max_distance < 0) {
    throw UsageError(fmt::format("--max-distance: must be >= 0, got {}", o.max_distance));
  }
  if (o.step <= 0) throw UsageError(fmt::format("--step: must be positive, got {}", o.step));
  if (o.max_distance / o.step > 10'000'000) {
    throw UsageError("--max-distance/--step: more than 10^7 distances");
  }
  const auto quantities = parse_decay_quantities(o.emit);
  std::vector<std::int64_t> distances;
  for (long long m = 0; m <= o.max_distance; m += o.step) distances.push_back(m);
  auto curves = rope_curves(o, p, {p.scaling}, [&](RopeParams& q) {
    if (q.seq_len == 0) q.seq_len = o.max_distance + 1;
  });
  emit(rope_decay(curves, distances, quantities), o.c);
}

void run_wavelengths(const RopeAnalysisOptions& o) {
  RopeParams p = base_params(o, "wavelengths");
  const std::optional<std::int64_t> l0 = p.original_max_pos ? p.original_max_pos : p.max_pos;
  if (!l0) {
    throw UsageError(
        "analyze wavelengths: needs the trained context length: --original-max-pos (or "
        "--max-pos, or --hf-config)");
  }
  if (o.target_len < 0) throw UsageError(fmt::format("--target-len: must be positive"));
  std::int64_t target = o.target_len;
  if (target == 0) {
    target = p.max_pos && *p.max_pos > *l0 ? *p.max_pos
             : p.factor
                 ? static_cast<std::int64_t>(std::llround(*p.factor * static_cast<double>(*l0)))
                 : *l0;
  }
  // Default comparison: no scaling, every variant the parameters allow, and the
  // configured one.
  std::vector<RopeScaling> variants{RopeScaling::none};
  if (p.factor) {
    for (RopeScaling v :
         {RopeScaling::linear, RopeScaling::dynamic, RopeScaling::yarn, RopeScaling::llama3}) {
      variants.push_back(v);
    }
  }
  if (!p.long_factor.empty() && !p.short_factor.empty()) variants.push_back(RopeScaling::longrope);
  if (std::find(variants.begin(), variants.end(), p.scaling) == variants.end()) {
    variants.push_back(p.scaling);
  }
  auto curves = rope_curves(o, p, variants, [&](RopeParams& q) {
    q.seq_len = target;
    if (!q.original_max_pos) q.original_max_pos = *l0;
    // HF's dynamic NTK reads max_position_embeddings as the trained length.
    if (q.scaling == RopeScaling::dynamic) q.max_pos = *l0;
  });
  emit(rope_wavelengths(curves, *l0, target), o.c);
}

// --- relative ------------------------------------------------------------------------

struct RelativeCheckOptions {
  AnalyzeCommon c;
  RopeCliOptions rope;
  std::string q, k, axes, shifts = "1,100,10000";
  double tol = 0;
};

void run_relative(const RelativeCheckOptions& o) {
  refuse_positions(o.c.app, "relative");
  if (o.c.app->count("--tol") > 0 && !(o.tol > 0)) {
    throw UsageError(fmt::format("--tol: must be positive, got {}", o.tol));
  }
  RelativeOptions ro;
  ro.axes = o.axes;
  ro.start = o.rope.where.start;
  ro.precision = rope_precision(o.rope);
  ro.tolerance = o.tol;
  ro.shifts.clear();
  for (const auto& s : split_list(o.shifts)) {
    const auto v = parse_integer(s);
    if (!v) throw UsageError(fmt::format("--shifts: '{}' is not a list of integers", o.shifts));
    ro.shifts.push_back(*v);
  }
  const Tensor q = read_tensor(o.q), k = read_tensor(o.k);
  const Axes aq = resolve_axes(o.axes, q.ndim(), o.q);
  const int head_dim = static_cast<int>(q.shape()[static_cast<std::size_t>(aq.index('d'))]);
  const RopeFreqs f = compute_rope_freqs(rope_params(o.rope, head_dim));
  const RelativeCheck r = rope_relative_check(q, k, f, ro);
  emit(r.table, o.c, false);
  const std::string line = fmt::format(
      "relative: {}: max |score change| / (|q| |k|) = {:.3g} (tolerance {:.3g}) at batch {}, "
      "head {}, q {}, k {}, shift {}; {} scores x {} shifts",
      r.pass ? "pass" : "FAIL", r.max_rel, r.tolerance, r.at_b, r.at_h, r.at_i, r.at_j, r.at_shift,
      r.scores, ro.shifts.size());
  const bool stdout_busy = o.c.stdout_taken();
  if (!globals().quiet) fmt::print(stdout_busy ? stderr : stdout, "{}\n", line);
  if (!r.pass) exit_code() = 1;
}

// --- attention -----------------------------------------------------------------------

struct AttentionStatsOptions {
  AnalyzeCommon c;
  std::string probs;
};

void run_attention_stats(const AttentionStatsOptions& o) {
  const Tensor p = read_tensor(o.probs);
  emit(attention_head_stats(p, o.probs), o.c);
}

// --- registration --------------------------------------------------------------------

void add_rope_analysis(CLI::App* sub, RopeAnalysisOptions& o) {
  sub->add_option("--dim", o.dim, "head dimension D (or from --hf-config)");
  add_rope_options(sub, o.rope);
  sub->add_option("--bases", o.bases, "compare these bases (comma list, e.g. 10000,500000)");
  sub->add_option("--variants", o.variants,
                  "compare these scalings (comma list of none, linear, dynamic, yarn, longrope, "
                  "llama3, proportional)");
  add_common(sub, o.c);
}

}  // namespace

void register_analyze(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "analyze",
      "the properties that explain positional encodings, as tables (-o) and pictures "
      "(--plot): decay, wavelengths, relative, attention.");
  sub->require_subcommand(1);

  auto decay = std::make_shared<RopeAnalysisOptions>();
  auto* d = sub->add_subcommand(
      "decay",
      "RoPE's long-term decay: the RoFormer upper bound and the mean q.k of unit vectors "
      "over relative distance");
  add_rope_analysis(d, *decay);
  d->add_option("--max-distance", decay->max_distance, "largest distance m (default 1024)");
  d->add_option("--step", decay->step, "distance step (default 1)");
  d->add_option("--emit", decay->emit, "bound, mean-qk or both (default bound,mean-qk)");
  d->callback([decay] { run_decay(*decay); });

  auto wl = std::make_shared<RopeAnalysisOptions>();
  auto* w =
      sub->add_subcommand("wavelengths",
                          "per frequency pair: wavelength and rotations within the trained and the "
                          "target context, for each scaling variant");
  add_rope_analysis(w, *wl);
  w->add_option("--target-len", wl->target_len,
                "target context (default: --max-pos when above L0, else factor x L0)");
  w->callback([wl] { run_wavelengths(*wl); });

  auto rel = std::make_shared<RelativeCheckOptions>();
  auto* r = sub->add_subcommand(
      "relative", "check RoPE's relative-position property on real q/k (exit 1 when it fails)");
  r->add_option("-q,--query", rel->q, "query tensor (before RoPE)")->required();
  r->add_option("-k,--key", rel->k, "key tensor (before RoPE)")->required();
  r->add_option("--axes", rel->axes, "axes of q and k (default by rank: bhsd, bsd, sd)");
  add_rope_options(r, rel->rope);
  r->add_option("--shifts", rel->shifts, "position shifts to compare with (default 1,100,10000)");
  r->add_option(
      "--tol", rel->tol,
      "tolerance on the relative deviation (default 4 eps (A + D), see posenc help analyze)");
  add_common(r, rel->c);
  r->callback([rel] { run_relative(*rel); });

  auto att = std::make_shared<AttentionStatsOptions>();
  auto* a = sub->add_subcommand(
      "attention", "per head: entropy and mean attended distance of attention probabilities");
  a->add_option("probs", att->probs, "probabilities [b, h, sq, sk], [h, sq, sk] or [sq, sk]")
      ->required();
  add_common(a, att->c);
  a->callback([att] { run_attention_stats(*att); });
}

}  // namespace posenc::cli
