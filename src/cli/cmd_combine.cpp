// `posenc combine OUT_PARTIAL LSE_PARTIAL -o OUT [--lse-output LSE]`: split-KV partial
// attention outputs and their log-sum-exp merged into one (flash_attn_combine,
// FlashInfer merge_state). The arithmetic is the library's (ops/combine.hpp).

#include <fmt/core.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/declared_options.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/combine.hpp"

namespace posenc::cli {

namespace {

struct CombineCmdOptions {
  std::string out_partial;
  std::string lse_partial;
  OutputOptions out;
  std::string lse_output;
  CombineOptions combine;  ///< --axis, --lse-layout and --dtype, declared (ops/combine.hpp)
};

// The library names its inputs out_partial and lse_partial; the command names the files
// it read them from.
std::string named(std::string msg, const CombineCmdOptions& o) {
  for (const auto& [name, ref] :
       {std::pair{"out_partial", &o.out_partial}, std::pair{"lse_partial", &o.lse_partial}}) {
    for (std::size_t at = 0; (at = msg.find(name, at)) != std::string::npos;) {
      msg.replace(at, std::string(name).size(), *ref);
      at += ref->size();
    }
  }
  return msg;
}

void run_combine(const CombineCmdOptions& o) {
  const CombineOptions& opt = o.combine;
  std::vector<TensorRef> refs{parse_ref(o.out.outputs.at(0), o.out.to, "/output")};
  if (!o.lse_output.empty()) refs.push_back(parse_ref(o.lse_output, o.out.to, "/lse"));
  check_distinct_outputs(refs);  // before anything is read
  if (o.out_partial == "-" && o.lse_partial == "-") {
    throw UsageError("OUT_PARTIAL and LSE_PARTIAL cannot both be standard input");
  }
  const Tensor out_partial = read_tensor(o.out_partial);
  const Tensor lse_partial = read_tensor(o.lse_partial);
  verbose(fmt::format("{}: {} {}; {}: {} {}", o.out_partial, dtype_name(out_partial.dtype()),
                      shape_str(out_partial.shape()), o.lse_partial,
                      dtype_name(lse_partial.dtype()), shape_str(lse_partial.shape())));
  CombineResult r;
  try {
    r = combine(out_partial, lse_partial, opt);
  } catch (const InputError& e) {
    throw InputError(named(e.what(), o));
  } catch (const UsageError& e) {
    throw UsageError(named(e.what(), o));  // main() maps axis to --axis
  }
  const Attrs attrs{{"split_axis", static_cast<std::int64_t>(opt.axis)},
                    {"lse_layout", std::string(opt.lse_layout == LseLayout::hs ? "hs" : "sh")}};
  verbose_attrs(attrs);
  std::vector<NamedTensor> outs{{refs[0], &r.out, attrs}};
  if (refs.size() > 1) outs.push_back({refs[1], &r.lse, attrs});
  write_tensors(outs, o.out.write_options());
}

}  // namespace

void register_combine(CLI::App& app) {
  auto o = std::make_shared<CombineCmdOptions>();
  auto* sub = app.add_subcommand(
      "combine",
      "Merge split-KV partial attention outputs with their log-sum-exp, as flash-attn's "
      "flash_attn_combine and FlashInfer's merge_state: lse = logsumexp_i(lse_i), "
      "out = sum_i exp(lse_i - lse) out_i, in float64 rounded once. A split with lse -inf "
      "contributes nothing; where all are -inf, out is 0 and lse -inf.");
  sub->add_option("out_partial", o->out_partial,
                  "partial outputs OUT_PARTIAL [splits, b, s, h, d] (any float dtype; - for "
                  "stdin)")
      ->required();
  sub->add_option("lse_partial", o->lse_partial,
                  "their natural-log lse LSE_PARTIAL [splits, b, s, h] (see --lse-layout)")
      ->required();
  add_output_options(sub, o->out, /*multiple=*/false, /*required=*/true,
                     "the merged output, OUT_PARTIAL's shape without the split axis");
  sub->add_option("--lse-output", o->lse_output,
                  "where the merged lse goes (LSE_PARTIAL's shape without the split axis; f64 "
                  "when the output is f64, else f32)");
  add_declared_options(sub, o->combine);
  sub->callback([o] { run_combine(*o); });
}

}  // namespace posenc::cli
