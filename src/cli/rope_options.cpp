// ROPE OPTIONS of CLI.md: one binder and one conversion for `table rope`, `rope` and
// `attention --rope`.

#include "cli/rope_options.hpp"

#include "cli/parse.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "cli/common.hpp"
#include "cli/declared_options.hpp"
#include "posenc/encodings/rope_fields.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/hf_config.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"

namespace posenc::cli {

void add_rope_options(CLI::App* sub, RopeCliOptions& o) {
  o.app = sub;
  const char* g = "ROPE OPTIONS";
  // --style also takes `posenc rope`'s tiled, which is no RopeStyle: bound by hand; the
  // factor lists follow the tensors of positions.
  OptionBinder bind(sub, g, {"style", "short_factor", "long_factor"});
  for (const Field& f : posenc::describe<RopeParams>()) {
    if (f.name == "style") sub->add_option("--style", o.style, f.help)->group(g);
  }
  declare(bind, o.params);
  OptionBinder positions(sub, g, fields::rope_only_positions(), o.files.get());  // rope's own
  declare(positions, o.where);
  add_declared_options(sub, o.params, {"short_factor", "long_factor"}, g);
  OptionBinder hf(sub, g);
  declare(hf, static_cast<HfConfigChoice&>(o));
  add_declared_options(sub, o.apply, {"inverse", "precision"}, g);
  OptionBinder arith(sub, g);
  declare(arith, o.arith);
}

namespace {

bool given(const RopeCliOptions& o, const char* name, bool fallback) {
  if (o.app == nullptr) return fallback;
  return o.app->count(name) > 0;
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
  check_given(static_cast<const HfConfigChoice&>(o), command_line(o.app));
}

HfLayer hf_layer(const RopeCliOptions& o) { return o.layers(); }

RopeParams rope_params(const RopeCliOptions& o, int head_dim) {
  RopeParams p = o.params;  // the options' values (their defaults where not given)
  p.style = parse_rope_style(o.style);
  rope_arith(o);  // --precision only with --arith exact
  set_arith(p, o.arith, command_line(o.app));
  if (head_dim > 0) p.head_dim = head_dim;
  check_layer_option(o);
  if (!o.hf_config.empty()) {
    // What the command line gives is not the config's: the config's value is neither
    // taken nor checked, and a range check of the value names the option
    // (merge_hf_config, as the Python module merges its keywords).
    std::vector<std::string> names = given_fields(o.app, const_cast<RopeParams&>(o.params));
    if (given(o, "--style", false)) names.emplace_back("style");
    const HfVersion version = o.hf_version.value_or(HfVersion{});
    const RopeParams given_only = p;
    p = merge_hf_config(given_only, names, o.hf_config, hf_layer(o), version);
    for (const std::string& line : split_lines(hf_rules_text(version))) verbose(line);
    note_version_drift(o, given_only, p, names, version);
  }
  return p;
}

Positions rope_positions(RopeCliOptions& o, bool real_coords) {
  Positions& pos = o.where;
  validate(pos);
  check_given(pos, command_line(o.app));
  o.files->take_reals(real_coords);
  o.files->read();  // the declared tensors, once the rules have passed
  check_positions(pos, "--start");
  return pos;
}

std::int64_t last_position(std::int64_t start, std::int64_t count) {
  if (count > kMaxPosition - start + 1) {
    throw UsageError(fmt::format("--start {} with {} positions goes beyond 2^53 = {}", start,
                                 count, kMaxPosition));
  }
  return start + count - 1;
}

Precision rope_precision(const RopeCliOptions& o) { return o.apply.precision; }

Arith rope_arith(const RopeCliOptions& o) {
  check_given(o.arith, command_line(o.app));
  return o.arith.arith;
}

}  // namespace posenc::cli
