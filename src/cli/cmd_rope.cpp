// `posenc rope`: applies rotary embeddings (or their inverse) to tensors read from
// NPY/HDF5/text/stdin. The options fill a RopeStreamRequest; the library streams the
// inputs in bounded memory (ops/rope_stream.hpp).

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/rope_options.hpp"
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
  std::vector<long long> grid;  // H W
  std::string order = "xy";
  std::string mrope_section;
  bool mrope_interleaved = false;
  bool grid_ids = false;
  bool allow_nonfinite = false;
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

void run_rope(const RopeCmdOptions& o) {
  RopeStreamRequest r;
  for (const auto& t : o.inputs) r.inputs.push_back(parse_ref(t));
  for (const auto& t : o.out.outputs) r.outputs.push_back(parse_ref(t, o.out.to, "/data"));
  if (r.outputs.size() != r.inputs.size()) {
    throw UsageError(fmt::format("-o: {} input(s) need {} output(s), got {}", r.inputs.size(),
                                 r.inputs.size(), r.outputs.size()));
  }
  r.write = o.out.write_options();
  r.axes = o.axes;
  if (o.dtype != "same") r.dtype = parse_dtype(o.dtype);
  r.apply.inverse = o.rope.inverse;
  r.apply.precision = rope_precision(o.rope);
  r.apply.allow_nonfinite = o.allow_nonfinite;
  if (!o.grid.empty()) {
    if (o.grid[0] <= 0 || o.grid[1] <= 0) {
      throw UsageError(fmt::format("--rope2d: height and width must be positive, got {} {}",
                                   o.grid[0], o.grid[1]));
    }
    r.apply.grid_h = o.grid[0];
    r.apply.grid_w = o.grid[1];
    r.apply.grid_yx = o.order == "yx";
  }
  if (!o.mrope_section.empty()) r.apply.mrope_section = parse_sections(o.mrope_section);
  if (o.mrope_interleaved && o.mrope_section.empty()) {
    throw UsageError("--mrope-interleaved: needs --mrope-section");
  }
  r.apply.mrope_interleaved = o.mrope_interleaved;
  if (o.grid_ids) {
    if (!o.grid.empty()) throw UsageError("--rope2d-ids: cannot be combined with --rope2d");
    if (o.rope.app->count("--order") > 0) {
      throw UsageError("--order: the rows of --position-ids give the order with --rope2d-ids");
    }
    r.apply.grid_ids = true;
  }
  // 2-D RoPE's frequencies default to base 100, as `table rope2d`.
  const bool base100 = r.apply.grid_h > 0 && o.rope.app->count("--base") == 0;
  r.params = [&o, base100](int head_dim) {
    RopeParams p = rope_params(o.rope, head_dim);
    if (base100) p.base = 100.0;
    return p;
  };
  r.positions = rope_positions(o.rope);
  if (o.rope.app->count("--max-memory") > 0) {
    r.max_memory = parse_memory_size(o.max_memory, "--max-memory");
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
  sub->add_option("--rope2d", opts->grid,
                  "H W: axial 2-D RoPE over an H x W grid of tokens in row-major order: x and y "
                  "each get R/4 pairs with frequencies base^(-4j/R); --base defaults to 100")
      ->expected(2)
      ->transform(integer_text())
      ->type_name("INT")  // shown as "INT x 2", CLI11's notation for two values
      ->group(g);
  sub->add_flag("--rope2d-ids", opts->grid_ids,
                "axial 2-D RoPE with coordinates from --position-ids [2, s] or [2, b, s]: row 0 "
                "drives the first R/4 pairs, row 1 the next R/4 (Qwen2-VL vision (h, w) ids; "
                "with --style neox, --base 10000 as there)")
      ->group(g);
  sub->add_option("--order", opts->order,
                  "2-D RoPE: which coordinate takes the first R/4 pairs, xy (default) or yx")
      ->check(CLI::IsMember({"xy", "yx"}))
      ->group(g);
  sub->add_option("--mrope-section", opts->mrope_section,
                  "M-RoPE (Qwen2-VL): pairs per t,h,w section, summing to R/2, e.g. 16,24,24; "
                  "--position-ids then has shape [3, s] or [3, b, s]")
      ->type_name("T,H,W")
      ->group(g);
  sub->add_flag("--mrope-interleaved", opts->mrope_interleaved,
                "Qwen3-VL interleaved M-RoPE: pair j takes h when j % 3 = 1 and j < 3H, w when "
                "j % 3 = 2 and j < 3W, else t")
      ->group(g);
  sub->add_flag("--allow-nonfinite", opts->allow_nonfinite,
                "rotate NaN/Inf input values instead of refusing them");
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
