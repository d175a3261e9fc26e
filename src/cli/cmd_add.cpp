// `posenc add`: an absolute position encoding (sinusoidal or a learned table) added to
// token embeddings, x * scale + PE. The options fill an AddStreamRequest; the library
// streams the input in bounded memory (ops/add_positions.hpp).

#include <fmt/core.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "posenc/declare.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/add_positions.hpp"

namespace posenc::cli {

namespace {

struct AddCmdOptions {
  std::string input;
  OutputOptions out;
  std::string table;
  std::string scale = "1";
  double base = 10000.0;
  long long start = 0;
  long long offset = 0;
  std::string combine = "add";
  std::string attention_mask;
  std::string position_ids;
  std::string layout = "interleaved";
  std::string axes;
  std::string dtype = "same";
  std::string max_memory;
  bool allow_nonfinite = false;
  CLI::App* app = nullptr;
};

// --scale: a finite number, or sqrt-d for the square root of the model dimension.
std::optional<double> parse_scale(const std::string& text) {
  if (text == "sqrt-d" || text == "sqrt(d)") return std::nullopt;
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v)) {
    throw UsageError(
        fmt::format("--scale {}: expected a finite number or sqrt-d (sqrt of d_model)", text));
  }
  return v;
}

// The extent of axis s of the input (from its header; a stdin input is refused, as its
// header cannot be read twice).
std::size_t sequence_length(const TensorRef& input, const std::string& axes) {
  if (input.is_stdio()) {
    throw UsageError("--attention-mask: needs the input in a file (its length is read first)");
  }
  const TensorInfo info = open_source(input)->info();
  std::string letters = axes;
  if (letters.empty()) letters = info.shape.size() == 3 ? "bsd" : "sd";
  const std::size_t at = letters.find('s');
  if (at == std::string::npos || letters.size() != info.shape.size())
    return 0;  // the add reports it
  return info.shape[at];
}

void run_add(const AddCmdOptions& o) {
  const std::optional<double> scale = parse_scale(o.scale);
  const bool sinusoidal = o.table == "sinusoidal";
  if (!sinusoidal) {
    for (const char* name : {"--base", "--layout"}) {
      if (o.app->count(name) > 0) {
        throw UsageError(fmt::format("{}: only for --table sinusoidal", name));
      }
    }
  }
  AddStreamRequest r;
  r.input = parse_ref(o.input);
  r.output = parse_ref(o.out.outputs.at(0), o.out.to, "/data");
  r.write = o.out.write_options();
  r.axes = o.axes;
  if (o.dtype != "same") r.dtype = parse_dtype(o.dtype);
  r.allow_nonfinite = o.allow_nonfinite;
  r.encoding.base = o.base;
  r.encoding.start = o.start;
  r.encoding.layout =
      o.layout == "concat" ? SinusoidalLayout::concat : SinusoidalLayout::interleaved;
  std::optional<Tensor> learned;
  if (!sinusoidal) {
    learned = read_tensor(o.table);
    r.encoding.table = &*learned;
  }
  r.encoding.offset = o.offset;
  r.encoding.combine = parse_combine(o.combine);
  if (!o.attention_mask.empty() && !o.position_ids.empty()) {
    throw UsageError("--attention-mask: cannot be combined with --position-ids");
  }
  if ((!o.attention_mask.empty() || !o.position_ids.empty()) && o.app->count("--start") > 0) {
    throw UsageError(fmt::format("--start: cannot be combined with {} (positions are absolute)",
                                 o.attention_mask.empty() ? "--position-ids" : "--attention-mask"));
  }
  std::optional<xt::xarray<std::int64_t>> positions;
  if (!o.position_ids.empty()) {
    positions = read_int64(o.position_ids, "--position-ids");
  } else if (!o.attention_mask.empty()) {
    // The sequence length comes from the input's header: the mask's last s columns.
    const xt::xarray<std::int64_t> mask = read_int64(o.attention_mask, "--attention-mask");
    const std::size_t s = sequence_length(r.input, o.axes);
    positions = positions_from_mask(mask, s);
  }
  if (positions) r.encoding.positions = &*positions;
  r.encoding.scale = scale.value_or(1.0);
  r.encoding.scale_sqrt_d = !scale;
  if (o.app->count("--max-memory") > 0) {
    r.max_memory = memory_size(o.max_memory, "--max-memory");
  }
  r.threads = globals().threads;
  r.note = [](const std::string& plan, const Attrs& attrs) {
    verbose(plan);
    verbose_attrs(attrs);
  };
  try {
    add_positions_stream(r);
  } catch (const InputError& e) {
    // The library's "positions" are those of --position-ids or of the mask.
    const std::string msg = e.what();
    if (msg.rfind("positions: ", 0) != 0 || !positions) throw;
    throw InputError((o.position_ids.empty() ? "--attention-mask: " : "--position-ids: ") +
                     msg.substr(11));
  }
}

}  // namespace

void register_add(CLI::App& app) {
  auto o = std::make_shared<AddCmdOptions>();
  auto* sub = app.add_subcommand(
      "add",
      "Add an absolute position encoding to token embeddings [b, s, d] or [s, d]: "
      "x * scale + PE[row], row = start + s + offset or a per-token position + offset (OPT, "
      "BART, fairseq), PE the sinusoidal table or a learned table [max_len, d]; --combine mul "
      "multiplies instead. "
      "Inputs larger than --max-memory are streamed.");
  o->app = sub;
  sub->add_option("input", o->input, "embeddings (x.npy, x.h5:/x, x.csv, - for stdin)")->required();
  add_output_options(sub, o->out);
  sub->add_option("--table", o->table,
                  "sinusoidal (Vaswani, computed on the fly) or a learned table REF [max_len, d] "
                  "(BERT/GPT-2 position embeddings)")
      ->required();
  sub->add_option("--scale", o->scale,
                  "multiplies the embedding before PE is added (default 1; sqrt-d = sqrt(d_model) "
                  "as the Annotated Transformer)");
  sub->add_option("--start", o->start,
                  "position of the first token (default 0; BART: past_key_values_length)");
  sub->add_option("--offset", o->offset,
                  "added to every position to give the table row (default 0; 2 for BART's and "
                  "OPT's learned tables, padding_idx + 1 for fairseq's with --attention-mask)");
  sub->add_option("--position-ids", o->position_ids,
                  "integer positions REF [b, s], [1, s] or [s]: the table row of each token is "
                  "its position + offset (instead of start + s)");
  sub->add_option("--attention-mask", o->attention_mask,
                  "OPT's positions from an attention mask REF [b, n] of 0/1 (n >= s): "
                  "cumsum(mask) * mask - 1 per row, its last s columns (n - s = past length); "
                  "padding tokens take position -1");
  sub->add_option("--combine", o->combine,
                  "add (x * scale + PE, default) or mul ((x * scale) * PE, elementwise)")
      ->check(CLI::IsMember({"add", "mul"}));
  sub->add_option("--base", o->base, "sinusoidal frequency base (default 10000)");
  sub->add_option(
         "--layout", o->layout,
         "sinusoidal layout: interleaved (sin, cos pairs; default) or concat ([sin | cos])")
      ->check(CLI::IsMember({"interleaved", "concat"}));
  sub->add_option("--axes", o->axes,
                  "axis letters of the input from b, s, d (default bsd or sd by rank; sbd for "
                  "sequence-first)");
  sub->add_option("--dtype", o->dtype, "output type: same (default), f64, f32, f16, bf16")
      ->check(CLI::IsMember(
          {"same", "f64", "f32", "f16", "bf16", "float64", "float32", "float16", "bfloat16"}));
  sub->add_flag("--allow-nonfinite", o->allow_nonfinite,
                "add to NaN/Inf input values instead of refusing them");
  sub->add_option("--max-memory", o->max_memory,
                  "memory for buffers and table rows (e.g. 512M, 2G or bytes; default 1/4 of "
                  "physical memory); larger inputs are streamed in slabs");
  sub->callback([o] { run_add(*o); });
}

}  // namespace posenc::cli
