// `posenc attention`: reference attention logits, probabilities, outputs and
// log-sum-exp from Q, K (and V) tensors, with RoPE, ALiBi, T5, Shaw relative tables,
// Transformer-XL / XLNet and DeBERTa relative terms, masks, soft-capping and sinks. The
// numerics live in posenc/ops/attention.hpp; this file binds options, reads the inputs
// and writes all outputs together (or none).

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli/attention_grad.hpp"
#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/declared_options.hpp"
#include "cli/kvcache_options.hpp"
#include "cli/relative_options.hpp"
#include "cli/rope_options.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/io/part.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_fields.hpp"
#include "posenc/ops/hf_attention.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/ops/rope_stream.hpp"
#include "posenc/ops/select.hpp"

namespace posenc::cli {

namespace {

struct AttentionCmdOptions {
  std::string part;  // --part I/N: a share of the batch axis
  std::string q, k, v;
  std::string input_dtype;  // --input-dtype: Q, K and V read as fp8
  OutputOptions out;
  bool rope = false;
  RopeCliOptions rope_opts;
  AttentionOptions params;  // the declared fields (posenc/ops/attention_fields.hpp)
  bool t5_bidirectional = false, t5_causal = false;
  RelativeWindow window;  // --relative-left/right/sign/beyond
  ArrayFiles tensors;     // the files of the declared tensor inputs (declare_tensors) into params
  DecomposedGrids grids;  // --grid H W, --key-grid H W
  AttentionArith arith;   // --arith, among the ROPE OPTIONS
  MemoryBudget budget;    // --max-memory
  std::string emit;
  std::string grad_output;  // dO: the gradients instead of the forward (attention_grad)
  ForwardRefs forward;      // --forward-output, --forward-lse: the backward's forward given
  RelativeCliOptions relative;
  KvCacheCliOptions kv;  // FlashAttention's KV-cache step (cli/kvcache_options.hpp)
  CLI::App* app = nullptr;
};

bool given(const AttentionCmdOptions& o, const char* name) { return o.app->count(name) > 0; }

// --max-memory counts the inputs as well as what attention allocates (outputs, work,
// converted and rotated copies): refused from the headers, before K and V are read.
void check_budget(const TensorSource& q, const TensorSource& k, const TensorSource* v, bool rope,
                  const AttentionOptions& opt) {
  if (opt.max_memory == 0) return;
  const TensorInfo &qi = q.info(), &ki = k.info();
  const Shape* vs = v ? &v->info().shape : nullptr;
  // With --rope, attention takes the rotated copies, already in the arithmetic type.
  const DType arith = attention_arith(opt);
  const bool f64 = arith == DType::f64;
  auto [need, names] =
      attention_memory(qi.shape, ki.shape, vs, qi.dtype, opt, rope ? arith : ki.dtype,
                       v ? std::optional(v->info().dtype) : std::nullopt);
  auto add = [&need](const TensorInfo& t, std::size_t item) {
    const std::size_t bytes = checked_numel(t.shape, item, "attention") * item;
    need = need > SIZE_MAX - bytes ? SIZE_MAX : need + bytes;
  };
  add(qi, dtype_size(qi.dtype));
  add(ki, dtype_size(ki.dtype));
  if (v) add(v->info(), dtype_size(v->info().dtype));
  if (rope) {  // rotated copies of Q and K in the arithmetic type
    add(qi, f64 ? 8 : 4);
    add(ki, f64 ? 8 : 4);
  }
  if (need > opt.max_memory) {
    throw InputError(fmt::format(
        "{} would need {} with the inputs (Q {}, K {}{}) > --max-memory {}", names,
        bytes_str(need), shape_str(qi.shape), shape_str(ki.shape),
        v ? ", V " + shape_str(v->info().shape) : std::string(), bytes_str(opt.max_memory)));
  }
}

// The output references for the emitted tensors (see posenc-attention(1): one per tensor in
// --emit order, a {} / %s pattern, or one HDF5 file with a dataset per tensor, at
// /NAME or /GROUP/NAME).
std::vector<TensorRef> output_refs(const AttentionCmdOptions& o,
                                   const std::vector<AttentionEmit>& emit) {
  std::vector<std::string> names, defaults;
  for (auto e : emit) {
    names.push_back(attention_emit_name(e));
    defaults.push_back("/" + names.back());
  }
  return emitted_output_refs(o.out, names, defaults);
}

// --hf-config: the layer type's attention parameters, explicit options winning, and the
// tensors checked against the config's head counts and dims.
void apply_config(const AttentionCmdOptions& o, AttentionOptions& opt, const Shape& q,
                  const Shape& k, const Shape* v) {
  const std::string& path = o.rope_opts.hf_config;
  const HfAttentionConfig c = read_hf_attention_config(path, hf_layer(o.rope_opts));
  check_hf_attention_shapes(c, path, q, k, v, opt.axes);
  // The declared fields given (scale, alibi, ...) keep their values.
  AttentionOptions declared = o.params;
  std::vector<std::string> keep = given_fields(o.app, declared);
  // The library would name its own parameter for the option that clashes with the config.
  auto clash = [&](const char* option, bool config_scales, const char* key) {
    if (given(o, option) && config_scales) {
      throw UsageError(fmt::format(
          "{}: {}: '{}' scales the queries already; no model scales them both ways", option,
          path, key));
    }
  };
  clash("--attn-temperature", c.llama4_scaling_beta.has_value(), "llama_4_scaling_beta");
  clash("--llama4-scaling", c.temperature_scale.has_value(), "attn_temperature_tuning");
  apply_hf_attention(c, opt, keep);
  verbose(c.layer_index ? fmt::format("{}: layer {} ({})", path, *c.layer_index, c.layer_type)
                        : fmt::format("{}: layer type {}", path, c.layer_type));
}

// The parameters recorded with the outputs.
Attrs result_attrs(const AttentionResult& res, const AttentionCmdOptions& o) {
  Attrs attrs = res.attrs;
  attrs.push_back({"rope", static_cast<long long>(o.rope)});
  return attrs;
}

// The tensors a --part share is computed from (recorded for join; the options that
// follow the batch are refused with --part).
std::vector<TensorRef> attention_inputs(const AttentionCmdOptions& o) {
  std::vector<TensorRef> refs;
  for (const std::string* r : {&o.q, &o.k, &o.v}) {
    if (!r->empty()) refs.push_back(parse_ref(*r));
  }
  for (const char* name :
       {"--t5-bias", "--relative-k", "--relative-v", "--sinks", "--clipped-bias", "--relative-proj",
        "--per-dim-scale", "--global-bias", "--decomposed-rel-pos"}) {
    for (const std::string& r : o.app->get_option(name)->results()) refs.push_back(parse_ref(r));
  }
  return refs;
}

// `batch` is the whole batch of a --part run (its outputs record their share of it).
void write_results(const AttentionResult& res, const AttentionOptions& opt,
                   const std::vector<TensorRef>& out_refs, const AttentionCmdOptions& o,
                   const Part& part = Part{}, std::size_t batch = 0) {
  const Attrs attrs = result_attrs(res, o);
  verbose_attrs(attrs);
  std::vector<NamedTensor> named;
  for (std::size_t i = 0; i < opt.emit.size(); ++i) {
    Attrs a = attrs;
    a.push_back({"tensor", attention_emit_name(opt.emit[i])});
    if (!part.whole()) {
      Shape whole = res.get(opt.emit[i]).shape();
      whole[0] = batch;
      const Attrs pa = part_attrs(part, whole, 0, attention_inputs(o));
      a.insert(a.end(), pa.begin(), pa.end());
    }
    named.push_back(NamedTensor{out_refs[i], &res.get(opt.emit[i]), a});
  }
  write_tensors(named, o.out.write_options());
}

void run_attention(AttentionCmdOptions& o) {
  // Option values first: a usage error never waits for a large read.
  if (o.t5_bidirectional && o.t5_causal) {
    throw UsageError("--t5-bidirectional and --t5-causal exclude each other");
  }
  if (!o.rope) {
    for (const char* name :
         {"--style", "--base", "--rotary-dim", "--partial", "--start", "--position-ids",
          "--scaling", "--factor", "--inverse", "--rotary-last", "--rope-interleave"}) {
      if (given(o, name)) throw UsageError(fmt::format("{}: a ROPE OPTION needs --rope", name));
    }
  }
  check_relative_options(o.relative, o.rope);
  // The declared fields' ranges (ops/attention_fields.hpp), of the options given.
  validate_given(o.params, given_fields(o.app, o.params));
  AttentionOptions& opt = o.params;  // the declared tensors are read into it
  const std::string axes_given = opt.axes;  // opt.axes becomes the letters resolved
  // The rules between declared fields and the tensors given, spelled as options.
  check_given(o.params, command_line(o.app));
  if (given(o, "--global-kv") && o.v.empty()) {
    throw UsageError("--global-kv: needs -v (the side values VG go with the values)");
  }
  if (given(o, "--llama4-scaling") && given(o, "--attn-temperature")) {
    throw UsageError("--llama4-scaling and --attn-temperature: no model scales its queries "
                     "both ways; give one");
  }
  check_layer_option(o.rope_opts);  // --layer-type, --layer: need --hf-config
  opt.t5_bidirectional = !o.t5_causal;
  if (given(o, "--relative-proj")) {
    if (given(o, "--relative-k")) {
      throw UsageError("--relative-proj: not with --relative-k (it computes the relative keys)");
    }
    if (!given(o, "--relative-left") || !given(o, "--relative-right")) {
      throw UsageError(
          "--relative-proj needs --relative-left and --relative-right (the distances it "
          "projects; Gemma-3n: context_left - 1 and context_right)");
    }
    if (given(o, "--max-distance")) {
      throw UsageError("--max-distance: not with --relative-proj (give --relative-left/right)");
    }
  }
  const bool windowed = given(o, "--relative-left") || given(o, "--relative-right") ||
                        given(o, "--relative-sign") || given(o, "--relative-beyond");
  if (windowed) {
    if (given(o, "--max-distance") &&
        (given(o, "--relative-left") || given(o, "--relative-right"))) {
      throw UsageError("--max-distance: cannot be combined with --relative-left/--relative-right");
    }
    opt.relative_window = checked_window(o.window, command_line(o.app));
  }
  set_grids(opt, o.grids, command_line(o.app));
  const bool grads = !o.grad_output.empty();
  check_forward_given(relative_wanted(o.relative), command_line(o.app));
  std::vector<std::string> grad_names;
  if (grads) {
    if (o.v.empty()) throw UsageError("--grad-output: needs -v (dO is the output's gradient)");
    if (!o.part.empty()) throw UsageError("--grad-output: not with --part");
    // Whether the mask is float is known once it is read; dbias is checked again there.
    grad_names =
        parse_gradient_emit(o.emit, given(o, "--sinks"), given(o, "--mask"), given(o, "--qv"));
  } else {
    refuse_gradients_without_dO(o.emit);
    opt.emit = parse_attention_emit(o.emit, !o.v.empty());
    // The KV-cache step gives FlashAttention's out (and lse on request), never probs.
    if (kvcache_wanted(o.kv) && !given(o, "--emit")) opt.emit = {AttentionEmit::output};
    // The varlen form has no scores: output (lse without V) unless --emit says.
    if ((given(o, "--cu-seqlens-q") || given(o, "--cu-seqlens-k")) && !given(o, "--emit")) {
      opt.emit = {o.v.empty() ? AttentionEmit::lse : AttentionEmit::output};
    }
  }
  opt.max_memory = o.budget.max_memory;
  if (given(o, "--precision")) opt.precision = rope_precision(o.rope_opts);
  check_given(o.arith, command_line(o.app));
  opt.arith = o.rope_opts.arith.arith = o.arith.arith;  // --rope: RoPE's too
  opt.fa_baseline = o.arith.fa_baseline;  // FlashAttention's PyTorch baseline (attention_fa.cpp)
  if (opt.fa_baseline && (o.rope || grads || relative_wanted(o.relative))) {
    throw UsageError("--arith fa-baseline: not with --rope, --relative or --grad-output");
  }
  if ((grads || !o.part.empty()) &&
      ((given(o, "--qv") && !grads) || given(o, "--q-descale") || given(o, "--k-descale") ||
       given(o, "--v-descale") || !o.params.p_dtype.empty())) {
    throw UsageError(
        fmt::format("{}--q-descale, --k-descale, --v-descale, --p-dtype: not "
                    "with {}",
                    grads ? "" : "--qv, ", grads ? "--grad-output" : "--part"));
  }

  const std::vector<TensorRef> out_refs =
      grads ? emitted_output_refs(o.out, grad_names,
                                  [&] {
                                    std::vector<std::string> d;
                                    for (const auto& n : grad_names) d.push_back("/" + n);
                                    return d;
                                  }())
            : output_refs(o, opt.emit);
  const Part part = o.part.empty() ? Part{} : parse_part(o.part, "--part");
  if (!part.whole() && (given(o, "--cu-seqlens-q") || given(o, "--cu-seqlens-k"))) {
    throw UsageError("--part: not with --cu-seqlens-q or --cu-seqlens-k (packed sequences)");
  }
  if (!part.whole() && (given(o, "--seqused-q") || given(o, "--seqused-k"))) {
    throw UsageError(
        "--part: not with --seqused-q or --seqused-k (they follow the batch; run "
        "the whole batch)");
  }
  if (!part.whole() && given(o, "--alibi-slopes")) {
    throw UsageError(
        "--part: not with --alibi-slopes (its [b, hq] rows follow the batch; run "
        "the whole batch)");
  }
  if (!part.whole() && (given(o, "--mask") || given(o, "--key-lengths") ||
                        given(o, "--wavlm-gate") || given(o, "--global-kv") ||
                        given(o, "--position-ids") || given(o, "--cu-seqlens"))) {
    throw UsageError(
        "--part: not with --mask, --key-lengths, --wavlm-gate, --global-kv, --position-ids or "
        "--cu-seqlens (they follow the batch; run the whole batch)");
  }

  // Inputs: shapes from the headers first, so that the budget is checked before
  // anything large is read.
  auto q_src = open_source(with_input_dtype(parse_ref(o.q), o.input_dtype));
  auto k_src = open_source(with_input_dtype(parse_ref(o.k), o.input_dtype));
  std::unique_ptr<TensorSource> v_src;
  if (!o.v.empty()) v_src = open_source(with_input_dtype(parse_ref(o.v), o.input_dtype));
  const Axes axes = resolve_axes(axes_given, q_src->info().shape.size(), o.q);
  opt.axes = axes.letters;
  // Packed Q, K and V default to FlashAttention's thd (shd), which no rank implies.
  if ((given(o, "--cu-seqlens-q") || given(o, "--cu-seqlens-k")) && axes_given.empty())
    opt.axes.clear();
  // --part: rows [floor(I*B/N), floor((I+1)*B/N)) of the batch axis (axis 0) of Q, K, V.
  const Shape& q_shape = q_src->info().shape;
  const std::size_t batch = part.whole() ? 0 : q_shape[0];
  if (!part.whole() && (axes.index('b') != 0 || batch < 2)) {
    throw UsageError(
        fmt::format("--part: cuts the batch axis b, and {} has no batch axis "
                    "longer than 1 (axes {}, shape {})",
                    o.q, axes.letters, shape_str(q_shape)));
  }
  o.tensors.read();  // the declared tensor inputs (declare_tensors), into opt
  if (!o.rope_opts.hf_config.empty()) {
    apply_config(o, opt, q_src->info().shape, k_src->info().shape,
                 v_src ? &v_src->info().shape : nullptr);
  }
  // Positions (with --rope) and packed sequences, which also mask across sequences.
  const Positions pos = rope_positions(o.rope_opts);
  opt.cu_seqlens = pos.cu_seqlens;
  if (kvcache_wanted(o.kv)) {  // -k and -v are the caches (cli/kvcache_options.cpp)
    const char* conflict = o.rope                        ? "--rope"
                           : relative_wanted(o.relative) ? "--rel-keys and the relative terms"
                           : !part.whole()               ? "--part"
                           : grads                       ? "--grad-output"
                                                         : "";
    opt.axes = axes_given.empty() ? "bshd" : axes_given;  // FlashAttention's layout by default
    return run_kvcache(o.kv, o.q, o.k, o.v, conflict, opt, out_refs, o.out.write_options(),
                       {{"rope", 0LL}});
  }

  // A lone NPY output is written by the work items as they finish its rows (into the
  // temporary file, at their offsets), so no write of the whole output follows.
  std::unique_ptr<TensorSink> sink;
  if (opt.emit.size() == 1 && opt.emit[0] == AttentionEmit::output &&
      out_refs[0].format == Format::npy && part.whole() && !relative_wanted(o.relative)) {
    opt.output_sink = [&](const TensorInfo& info) {
      sink = create_sink(out_refs[0], info, o.out.write_options());
      return sink.get();
    };
  }
  auto finish = [&](const AttentionResult& res) {
    if (!sink) return write_results(res, opt, out_refs, o, part, batch);
    verbose_attrs(result_attrs(res, o));
    // Standard output and other non-regular targets cannot take positional writes:
    // the output was kept in memory and goes to the sink opened for it.
    if (!res.output_streamed) sink->write_rows(res.output.bytes(), res.output.shape().at(0));
    sink->commit();
  };
  AttentionRope rope;
  if (o.rope) {
    rope.params = [&o](int head_dim) { return rope_params(o.rope_opts, head_dim); };
    rope.positions = pos;
    rope.apply.inverse = o.rope_opts.apply.inverse;
    rope.apply.precision = rope_precision(o.rope_opts);
    rope.apply.allow_nonfinite = opt.allow_nonfinite;
  }
  if (grads) {
    const bool relative = relative_wanted(o.relative);
    if (relative) read_relative(o.relative);  // the terms' tensors
    return run_gradients(*q_src, *k_src, *v_src, o.grad_output, opt, grad_names, out_refs, o.out,
                         o.rope ? &rope : nullptr, relative ? &o.relative : nullptr, o.forward);
  }
  if (!o.rope && !relative_wanted(o.relative) && part.whole()) {
    // The library reads the inputs itself: K and V in chunks within --max-memory.
    return finish(attention(*q_src, *k_src, v_src.get(), opt));
  }
  check_budget(*q_src, *k_src, v_src.get(), o.rope, opt);
  Tensor q = read_all_rows(*q_src);
  Tensor k = read_all_rows(*k_src);
  std::optional<Tensor> v;
  if (v_src) v = read_all_rows(*v_src);
  if (!part.whole()) {
    const auto [first, last] = part_range(part, batch);
    const SliceSpec rows = parse_slice(fmt::format("{}:{}", first, last));
    // K and V are cut alike when they carry the same batch (otherwise attention names
    // the mismatch).
    auto cut = [&](Tensor& t) {
      if (t.ndim() > 0 && t.shape()[0] == batch) t = select(t, resolve_selection(rows, t.shape()));
    };
    cut(q);
    cut(k);
    if (v) cut(*v);
  }
  const bool relative = relative_wanted(o.relative);
  if (relative) read_relative(o.relative);  // the terms' tensors
  finish(attention(q, k, v ? &*v : nullptr, opt,
                   attention_term(relative ? &o.relative : nullptr, o.rope ? &rope : nullptr)));
}

}  // namespace

void register_attention(CLI::App& app) {
  auto o = std::make_shared<AttentionCmdOptions>();
  auto* sub = app.add_subcommand(
      "attention",
      "compute attention logits, probabilities, outputs and log-sum-exp from Q, K and V");
  o->app = sub;
  sub->add_option("-q,--query", o->q, "queries Q [b, hq, sq, d] (any --axes order)")->required();
  sub->add_option("-k,--key", o->k, "keys K [b, hk, sk, d]; hk must divide hq")->required();
  sub->add_option("-v,--value", o->v, "values V [b, hk, sk, dv] (needed for output)");
  add_output_options(sub, o->out, /*multiple=*/true, /*required=*/true,
                     "output reference(s): one per tensor of --emit in its order, one pattern "
                     "with {} (out_{}.npy), or one HDF5 file (a dataset per tensor)");
  add_declared_options(sub, o->params, {"axes"});
  sub->add_option("--emit", o->emit,
                  "comma list of logits, probs, output, lse (default probs,output; probs "
                  "without -v)");
  // --scale, --sliding-window, --softcap, ..., --causal, --window, --alibi, --dtype: the
  // declared fields (attention_fields.hpp), the options of several words where --help has
  // always listed them.
  add_declared_options_but(
      sub, o->params,
      {"axes", "causal", "window", "attn_temperature", "llama4_scaling", "alibi", "dtype"});
  add_declared_options(sub, o->params, {"causal", "window", "attn_temperature", "llama4_scaling"});
  // --mask, --key-lengths, --t5-bias, --qv, ...: the declared tensor inputs
  // (declare_tensors), a tensor reference each; those of several tensors below.
  const std::vector<std::string> groups{"wavlm_gate", "global_kv", "decomposed_rel_pos"};
  OptionBinder tensors(sub, "", groups, &o->tensors);
  declare_tensors(tensors, o->params);
  add_declared_options(sub, o->params, {"alibi"});
  sub->add_flag("--t5-bidirectional", o->t5_bidirectional, "T5 encoder buckets (default)");
  sub->add_flag("--t5-causal", o->t5_causal, "T5 decoder buckets (future keys share bucket 0)");
  // One option for several tensors: --wavlm-gate, --global-kv, and after the relative
  // window, --decomposed-rel-pos.
  OptionBinder gate_kv(sub, "", {groups[0], groups[1]}, &o->tensors);
  declare_tensors(gate_kv.only(), o->params);
  add_declared_options(sub, o->window);  // the relative window (attention_fields.hpp)
  OptionBinder decomposed(sub, "", {groups[2]}, &o->tensors);
  declare_tensors(decomposed.only(), o->params);
  add_declared_options(sub, o->grids);  // --grid, --key-grid (attention_fields.hpp)
  add_declared_options(sub, o->params, {"dtype"});
  sub->add_option("--input-dtype", o->input_dtype,
                  std::string(kInputDtypeHelp) + "; applies to Q, K and V")
      ->type_name("FP8");
  add_declared_options(sub, o->budget);
  sub->add_option("--grad-output", o->grad_output,
                  "dO, the gradient of the output (Q's shape with dv): emit the gradients "
                  "dq, dk, dv, softmax_d (rowsum(dO O)) and lse instead (dqv with --qv; "
                  "see GRADIENTS)");
  sub->add_option("--forward-output", o->forward.output,
                  "with --grad-output and --forward-lse: the forward's output O (its shape, any "
                  "float dtype; FlashAttention's out): no forward is run, D = rowsum(dO O)");
  sub->add_option("--forward-lse", o->forward.lse,
                  "with --forward-output: the forward's lse [b, hq, sq], f32 or f64 "
                  "(FlashAttention's softmax_lse): P = exp(s - lse)");
  add_relative_options(sub, o->relative);
  add_kvcache_options(sub, o->kv);
  sub->add_flag("--rope", o->rope, "rotate Q and K with RoPE (ROPE OPTIONS) before the scores");
  add_rope_options(sub, o->rope_opts);
  o->rope_opts.app = sub;
  if (auto* p = sub->get_option_no_throw("--cu-seqlens")) {
    p->description(
        "packed sequences (HF's form; FlashAttention's varlen is --cu-seqlens-q/-k): "
        "boundaries [n+1]; a query attends only to keys of its own sequence, positions and "
        "chunks stay the packed tensor's, with --rope positions restart at each one (sq = sk)");
  }
  if (auto* p = sub->get_option_no_throw("--hf-config")) {
    p->description(
        "a HF config.json: scale, soft-cap, sliding window, chunking, temperature, Llama-4 "
        "query scaling and ALiBi of "
        "the --layer-type, its head counts and dims checked against Q, K, V, and with --rope "
        "its RoPE (as transformers v5 reads the file); explicit options win");
  }
  if (auto* p = sub->get_option_no_throw("--precision")) {
    p->description(
        "f64 or f32: arithmetic of RoPE and attention (default: f64 for every input dtype, "
        "each output rounded once; f32 is the opt-in for speed, not correctly rounded)");
  }
  // attention's --arith in place of RoPE's, last of the ROPE OPTIONS as before.
  sub->remove_option(sub->get_option("--arith"));
  OptionBinder arith(sub, "ROPE OPTIONS");
  declare(arith, o->arith);
  add_part_option(sub, o->part,
                  "the batch axis b of Q, K and V (not with --mask, --key-lengths, "
                  "--wavlm-gate, --global-kv, --position-ids or --cu-seqlens)");
  sub->callback([o] { run_attention(*o); });
}

}  // namespace posenc::cli
