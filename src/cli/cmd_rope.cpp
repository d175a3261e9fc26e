// `posenc rope`: applies rotary embeddings (or their inverse) to tensors read from
// NPY/HDF5/text/stdin. The options fill a RopeStreamRequest; the library streams the
// inputs in bounded memory (ops/rope_stream.hpp).

#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/declared_options.hpp"
#include "cli/parse.hpp"
#include "cli/rope_options.hpp"
#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/rope_fields.hpp"
#include "posenc/error.hpp"
#include "posenc/io/part.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/ops/rope_stream.hpp"
#include "posenc/printable.hpp"

namespace posenc::cli {

namespace {

struct RopeCmdOptions {
  std::vector<std::string> inputs;
  OutputOptions out;
  RopeCliOptions rope;
  std::string axes;
  std::string dtype = "same";
  ArrayFiles files;       // --inv-freq (declared with RopeApplyOptions)
  std::string coords;     // --coords grid:...|centres:...
  CoordGrid grid_options;  // --prefix-tokens, --merge-window (declared with CoordGrid)
  std::string max_memory;
  std::string part;
};

/// A progress line on stderr, only for a terminal and not with --quiet, at most 10 Hz.
class Progress {
 public:
  Progress(std::string what, std::size_t total)
      : what_(printable(what)),
        total_(total),
        on_(total > 0 && !globals().quiet && isatty(STDERR_FILENO) == 1),
        start_(std::chrono::steady_clock::now()) {}
  ~Progress() {
    if (shown_) fmt::print(stderr, "\r\033[K");
  }
  void update(std::size_t done) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    // Short jobs stay silent; long ones refresh ten times a second.
    if (now - start_ < std::chrono::milliseconds(500) ||
        (shown_ && now - last_ < std::chrono::milliseconds(100))) {
      return;
    }
    last_ = now;
    shown_ = true;
    fmt::print(stderr, "\rposenc rope: {} {:3.0f}% ({} of {} MiB)", what_,
               100.0 * static_cast<double>(done) / static_cast<double>(total_), done >> 20,
               total_ >> 20);
    std::fflush(stderr);
  }

 private:
  std::string what_;
  std::size_t total_;
  bool on_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

/// --style tiled into the layout spec (--layout, --inv-freq and --freq-scale are declared
/// fields of RopeApplyOptions).
void set_layout(const RopeCmdOptions& o, RopeStreamRequest& r) {
  RopeLayoutSpec& l = r.apply.layout;
  l.tiled = o.rope.style == "tiled";
  const bool old_forms = r.apply.grid_h > 0 || r.apply.grid_ids || !r.apply.mrope_section.empty();
  if (l.custom() && old_forms) {
    throw UsageError("--layout: --rope2d, --rope2d-ids and --mrope-section are layouts "
                     "themselves; give one of them");
  }
}

/// --coords / --prefix-tokens / --merge-window into the positions.
void set_coordinates(const RopeCmdOptions& o, Positions& pos) {
  if (!o.coords.empty()) {
    pos.grid = parse_coord_grid(o.coords, "--coords");
    pos.grid.prefix = o.grid_options.prefix;
    pos.grid.merge = o.grid_options.merge;
  }
}

/// The rules of the caller's --cos/--sin tables, before any file is read: both or
/// neither, and not with the options a table replaces.
void check_tables(const RopeCmdOptions& o) {
  const bool cos = o.rope.app->count("--cos") > 0, sin = o.rope.app->count("--sin") > 0;
  if (cos != sin) throw UsageError(cos ? "--cos: needs --sin" : "--sin: needs --cos");
  if (!cos) return;
  Caller c;  // the options, truncate's the one that sets it false
  c.term = [](const std::string& n) {
    return n == "truncate" ? std::string("--no-truncate") : Field::option_of(n);
  };
  c.gave = [app = o.rope.app, term = c.term](const std::string& n) {
    return app->count(term(n)) > 0;
  };
  check_tables_given(c);
  check_tables_arith(o.rope.arith, c);
}

// A one-line note (not with --quiet) for each input file whose head count is neither
// the config's num_attention_heads nor its num_key_value_heads: the config's RoPE is
// applied all the same, but the input may not be that model's. Standard input is not
// looked at before it is read. Printed after a successful run, so that an error stays
// the only line of a failed one.
std::vector<std::string> config_heads_notes(const RopeCmdOptions& o,
                                            const std::vector<TensorRef>& inputs) {
  std::vector<std::string> notes;
  if (globals().quiet || o.rope.hf_config.empty()) return notes;
  HfAttentionConfig c;
  try {
    c = read_hf_attention_config(o.rope.hf_config, hf_layer(o.rope));
  } catch (const Error&) {
    return notes;  // the RoPE parameters' own reading says what is wrong
  }
  if (!c.heads) return notes;
  for (const TensorRef& ref : inputs) {
    if (ref.is_stdio()) continue;
    std::size_t heads = 0;
    try {
      const Shape shape = open_source(ref)->info().shape;
      const int h = resolve_axes(o.axes, shape.size(), ref.text).index('h');
      if (h < 0) continue;
      heads = shape[static_cast<std::size_t>(h)];
    } catch (const Error&) {
      continue;  // said when the input is read
    }
    const auto n = static_cast<std::size_t>(*c.heads);
    if (heads == n || (c.kv_heads && heads == static_cast<std::size_t>(*c.kv_heads))) continue;
    notes.push_back(fmt::format(
        "posenc: note: {} has {} heads (axis h), but {} says num_attention_heads {}{}; its "
        "RoPE is applied all the same\n",
        printable(ref.text), heads, printable(o.rope.hf_config), n,
        c.kv_heads && *c.kv_heads != *c.heads
            ? fmt::format(" and num_key_value_heads {}", *c.kv_heads)
            : std::string()));
  }
  return notes;
}

void run_rope(RopeCmdOptions& o) {
  check_given(o.rope.apply, command_line(o.rope.app));
  o.files.read();  // --inv-freq into the layout, once the rules have passed
  RopeStreamRequest r;
  r.apply = o.rope.apply;  // the declared ways of applying
  for (const auto& t : o.inputs) r.inputs.push_back(parse_ref(t));
  for (const auto& t : o.out.outputs) r.outputs.push_back(parse_ref(t, o.out.to, "/data"));
  if (r.outputs.size() != r.inputs.size()) {
    throw UsageError(fmt::format("-o: {} input(s) need {} output(s), got {}", r.inputs.size(),
                                 r.inputs.size(), r.outputs.size()));
  }
  r.write = o.out.write_options();
  r.axes = o.axes;
  if (o.dtype != "same") r.dtype = parse_dtype(o.dtype);
  set_layout(o, r);
  // --style tiled: the neox frequencies with the tiled pairing (RopePairing::tiled).
  auto rope = std::make_shared<RopeCliOptions>(o.rope);
  if (rope->style == "tiled") rope->style = "neox";
  r.params = [rope, apply = r.apply, given = command_line(o.rope.app)](int head_dim) {
    return with_apply_defaults(rope_params(*rope, head_dim), head_dim, apply, given);
  };
  check_given(o.grid_options, command_line(o.rope.app));
  check_tables(o);
  r.positions = rope_positions(o.rope, /*real_coords=*/true);
  set_coordinates(o, r.positions);
  const std::vector<std::string> notes = config_heads_notes(o, r.inputs);
  if (o.rope.app->count("--max-memory") > 0) {
    r.max_memory = memory_size(o.max_memory, "--max-memory");
  }
  if (!o.part.empty()) r.part = parse_part(o.part, "--part");
  r.threads = globals().threads;
  std::unique_ptr<Progress> progress;  // one line per input
  std::string current;
  r.progress = [&](const std::string& what, std::size_t done, std::size_t total) {
    if (!progress || what != current) {
      progress.reset();
      progress = std::make_unique<Progress>(what, total);
      current = what;
    }
    progress->update(done);
  };
  r.note = [](const std::string& plan, const Attrs& attrs) {
    verbose(plan);
    verbose_attrs(attrs);
  };
  rope_stream(r);
  for (const std::string& n : notes) fmt::print(stderr, "{}", n);
}

}  // namespace

void register_rope(CLI::App& app) {
  auto opts = std::make_shared<RopeCmdOptions>();
  auto* sub = app.add_subcommand(
      "rope",
      "apply rotary position embedding (or its inverse) to every vector along axis d of one or "
      "more tensors, position taken from axis s; inputs larger than --max-memory are streamed");
  sub->add_option("inputs", opts->inputs,
                  "input tensor references (x.npy, x.h5:/q, x.csv, - for stdin)")
      ->required();
  add_output_options(sub, opts->out, /*multiple=*/true, /*required=*/true,
                     "output tensor reference, one per input in order (x.npy, x.h5:/d, x.csv, "
                     "x.json, - for stdout)");
  sub->add_option("--axes", opts->axes,
                  "axis letters of the inputs from b, h, s, d (default by rank: sd, bsd, bhsd; "
                  "e.g. bshd)");
  sub->add_option("--dtype", opts->dtype,
                  "output type: same (default; f64 for integer inputs), f64, f32, f16, bf16")
      ->check(CLI::IsMember({"same", "f64", "f32", "f16", "bf16", "float64", "float32",
                             "float16", "bfloat16"}));
  add_rope_options(sub, opts->rope);
  const char* g = "ROPE OPTIONS";
  OptionBinder ways(sub, g,
                    {"rope2d", "rope2d_ids", "order", "mrope_section", "mrope_interleaved",
                     "layout", "inv_freq", "freq_scale"},
                    &opts->files);
  declare(ways.only(), opts->rope.apply);
  sub->add_option("--coords", opts->coords,
                  "generated coordinates: grid:E1,E2,... (indices of a row-major grid, one axis "
                  "each) or centres:H,W (DINOv3 patch centres in [-1, 1])")
      ->type_name("grid:..|centres:..")
      ->group(g);
  OptionBinder grid_binder(sub, g);
  declare(grid_binder, opts->grid_options);
  declare(OptionBinder(sub, g, {"angles", "cos", "sin"}, opts->rope.files.get()).only(),
          opts->rope.where);
  add_declared_options(sub, opts->rope.apply, {"torch_ops"}, g);
  declare(OptionBinder(sub, g, {"seqlen_offsets"}, opts->rope.files.get()).only(),
          opts->rope.where);
  add_declared_options(sub, opts->rope.apply, {"allow_nonfinite"});
  sub->add_option("--max-memory", opts->max_memory,
                  "memory for buffers and tables (e.g. 512M, 2G, 1.5GiB or bytes; K, M, G, T are "
                  "powers of 1024; default 1/4 of physical memory); larger inputs are streamed "
                  "in slabs along their first axis whose extent is not 1");
  add_part_option(sub, opts->part,
                  "the first axis of the input whose extent is not 1 (b of [b, h, s, d], s of "
                  "[1, s, h, d])");
  sub->callback([opts] { run_rope(*opts); });
}

}  // namespace posenc::cli
