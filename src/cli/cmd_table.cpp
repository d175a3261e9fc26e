// `posenc table KIND`: every encoding table (sinusoidal, rope, rope2d, alibi, relative,
// t5-bucket, xl-relative, funnel-relative, funnel-factorized, deberta-bucket, swin-index,
// beit-index, swinv2-coords, levit-index, detr-sine, fairseq-sinusoidal, layoutlm-bucket,
// complex-order, reformer-axial, cpmant-bucket, longt5-global, rt-detr-sincos, udop-bucket).
// The options fill the library's table requests (encodings/tables.hpp and the modules beside
// it); the table is computed in float64 and streamed to the output block by block.

#include <fmt/format.h>

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/declared_options.hpp"
#include "cli/rope_options.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"

namespace posenc::cli {

namespace {

struct Common {
  OutputOptions out;
  std::string dtype;
  std::string part;
};

void add_common(CLI::App* sub, Common& c, const char* dtype_help, bool several = false) {
  if (several) {
    add_output_options(sub, c.out, /*multiple=*/true, /*required=*/true,
                       "output reference(s): one per table of --emit in its order, one pattern "
                       "with {} (out_{}.npy, f.h5:/{}), or one HDF5 file (a dataset per table)");
  } else {
    add_output_options(sub, c.out);
  }
  if (defines_option("--dtype")) sub->add_option("--dtype", c.dtype, dtype_help);
  add_part_option(sub, c.part,
                  "the table's first axis whose extent is not 1 (positions for sinusoidal and "
                  "rope tables; cos|sin for --emit cos-sin)");
}

// Writes the tables of one run (several for --emit cos,sin) to their outputs, all
// visible together or none. `names` (for RoPE tables, whose -o may name one output per
// table, a pattern or a group) name the tables in -o patterns and groups; without them
// there is one table and one -o.
void write_all(std::vector<Table> tables, const std::vector<std::string>& names, const Common& c) {
  std::vector<std::string> defaults;
  std::vector<DType> dtypes;
  const Part part = c.part.empty() ? Part{} : parse_part(c.part, "--part");
  for (Table& t : tables) {
    const DType dtype = table_dtype(t, c.dtype, "--dtype");
    t.attrs.push_back({"dtype", std::string(dtype_name(dtype))});
    if (!part.whole()) {
      const std::size_t axis = slab_axis(t.spec.shape);
      const Attrs pa = part_attrs(part, t.spec.shape, axis);
      t.attrs.insert(t.attrs.end(), pa.begin(), pa.end());
      t.spec = table_part(t.spec, part, axis);
    }
    dtypes.push_back(dtype);
    defaults.push_back(t.dataset);
  }
  std::vector<TensorRef> refs =
      names.empty() ? std::vector<TensorRef>{parse_ref(c.out.outputs.at(0), c.out.to, defaults[0])}
                    : emitted_output_refs(c.out, names, defaults);
  OutputSet outs(refs, c.out.write_options());
  for (std::size_t i = 0; i < tables.size(); ++i) {
    Table& t = tables[i];
    verbose(fmt::format("{}: table shape {} as {}", refs[i].text, shape_str(t.spec.shape),
                        dtype_name(dtypes[i])));
    verbose_attrs(t.attrs);
    TensorInfo info;
    info.dtype = dtypes[i];
    info.shape = t.spec.shape;
    info.attrs = std::move(t.attrs);
    write_table(t.spec, dtypes[i], outs.open(i, info));
  }
  outs.commit();
}

struct RopeTableOptions {
  Common c;
  RopeCliOptions rope;
  long long positions = 0;
  int dim = 0;
  RopeTableRequest r;  // --emit, --layout (its declared fields)
};

void run_rope(RopeTableOptions& o, CLI::App* sub) {
  if (sub->count("--dim") > 0 && o.dim <= 0) {
    throw UsageError(fmt::format("--dim: must be at least 1, got {}", o.dim));
  }
  if (o.dim <= 0 && o.rope.hf_config.empty()) {
    throw UsageError("--dim: the head dimension is required (or give --hf-config)");
  }
  RopeTableRequest r = o.r;
  r.where = rope_positions(o.rope);
  if (sub->count("--position-ids") > 0 && sub->count("--start") > 0) {
    throw UsageError("--start: cannot be combined with --position-ids (ids are absolute)");
  }
  if (sub->count("--positions") > 0) r.positions = o.positions;
  r.rope = rope_params(o.rope, o.dim);
  // Where the rotated dims sit in a head, and the input pair order: nothing of a table.
  for (const char* flag :
       {"--rotary-last", "--rope-interleave", "--no-rotary-last", "--no-rope-interleave"}) {
    if (sub->count(flag) > 0) {
      throw UsageError(fmt::format(
          "{}: places the rotation in the input's head dims (posenc rope, attention --rope); a "
          "table does not depend on it",
          flag));
    }
  }
  r.inverse = o.rope.apply.inverse;
  r.precision = rope_precision(o.rope);
  // Every table is described (and its request checked) before any output is opened.
  std::vector<Table> tables;
  std::vector<std::string> names;
  for_each_emitted(r, [&](const std::string& name) {
    tables.push_back(rope_table(r));
    names.push_back(name);
  });
  write_all(std::move(tables), names, o.c);
}

void add_rope(CLI::App* table) {
  static RopeTableOptions o;
  auto* sub = table->add_subcommand(
      "rope", "RoPE tables (inv_freq, angles, cos, sin) with HF scaling variants");
  sub->add_option("--positions", o.positions,
                  "number of positions N (required unless --position-ids, --cu-seqlens, or "
                  "--emit inv-freq)");
  sub->add_option("--dim", o.dim, "head dimension D (or from --hf-config)");
  add_declared_options(sub, o.r);
  add_rope_options(sub, o.rope);
  add_common(sub, o.c, fields::kFloatDtypes, /*several=*/true);
  sub->callback([sub] { run_rope(o, sub); });
}

// A kind: its request (the declared fields bound to options), its output options, the
// files of its array fields, and its subcommand.
template <class R>
struct Kind {
  Common c;
  R r;
  ArrayFiles files;
  CLI::App* sub = nullptr;

  // The rules joining the request's fields checked, then its files read.
  void read() {
    check_given(r, command_line(sub));
    files.read();
  }
};

// A kind whose options are all declared: its request reduced to its table, or to one
// table per name of its --emit list (each its own output).
template <class R>
void add_plain_kind(CLI::App* table, const char* name, const char* help,
                    const std::string& dtype_help, Table (*compute)(const R&), R preset = R{}) {
  static std::list<Kind<R>> kinds;  // swin-index and beit-index share a request type
  Kind<R>& o = kinds.emplace_back();
  o.r = std::move(preset);
  o.sub = table->add_subcommand(name, help);
  add_declared_options(o.sub, o.r, &o.files);
  const bool several = emits_several<R>();
  add_common(o.sub, o.c, dtype_help.c_str(), several);
  o.sub->callback([&o, compute, several] {
    o.read();
    std::vector<Table> tables;
    std::vector<std::string> names;
    for_each_emitted(o.r, [&](const std::string& table_name) {
      tables.push_back(in_callers_terms(o.r, command_line(o.sub), [&] { return compute(o.r); }));
      names.push_back(table_name);
    });
    write_all(std::move(tables), several ? names : std::vector<std::string>{}, o.c);
  });
}

}  // namespace

void register_table(CLI::App& app) {
  auto* table = app.add_subcommand("table", "generate an encoding table");
  table->require_subcommand(1);
  // Only the kind this run names is defined: the options of all of them were two
  // thirds of a small table's run time.
  std::vector<std::string_view> kinds{"rope"};
  for_each_table([&kinds](const char* kind, auto&&...) { kinds.push_back(kind); });
  const auto wanted = [&kinds](std::string_view kind) {
    return defines_kind("table", kind, kinds);
  };
  for_each_table([&](const char* kind, auto preset, auto compute, const TableAbout& about) {
    if (std::string_view(kind) == "rope2d" && wanted("rope")) add_rope(table);  // --help order
    if (wanted(kind)) add_plain_kind(table, kind, about.help, about.dtypes, compute, preset);
  });
}

}  // namespace posenc::cli
