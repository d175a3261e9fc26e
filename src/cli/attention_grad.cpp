// `posenc attention --grad-output dO` (see attention_grad.hpp).
#include "cli/attention_grad.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <memory>

#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/ops/attention_backward.hpp"
#include "posenc/ops/attention_fields.hpp"
#include "posenc/ops/cast.hpp"

namespace posenc::cli {

namespace {

// A file that can be mapped is used in place (no copy through read(2)); the budget
// counts it all the same, as its pages become resident.
Tensor whole(TensorSource& src) {
  if (const std::byte* p = src.mapped_data()) {
    return Tensor::borrow(src.info().dtype, src.info().shape, const_cast<std::byte*>(p));
  }
  return read_all_rows(src);
}

// Stands for a forward the backward is given (AttentionBackwardOptions::forward_output
// and forward_lse) where only the memory counts look at it: nothing is run or counted.
const Tensor kForwardGiven;

std::size_t add_sat(std::size_t a, std::size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

// The forward given with --forward-output and --forward-lse (FlashAttention's out and
// softmax_lse): opened and checked from the headers, read whole when the backward runs,
// O widened exactly to float64 as the library takes it.
struct GivenForward {
  std::unique_ptr<TensorSource> o_src, lse_src;
  Tensor o, lse;

  bool given() const { return o_src != nullptr; }
  // The bytes held: O as read, its float64 copy, lse.
  std::size_t bytes() const {
    if (!given()) return 0;
    const TensorInfo &oi = o_src->info(), &li = lse_src->info();
    const std::size_t n = checked_numel(oi.shape, 8, "attention");
    const std::size_t wide = oi.dtype == DType::f64 ? 0 : n * 8;
    return add_sat(add_sat(n * dtype_size(oi.dtype), wide),
                   checked_numel(li.shape, 8, "attention") * dtype_size(li.dtype));
  }
  // Reads them and points bopt at them.
  void read(AttentionBackwardOptions& bopt) {
    o = whole(*o_src);
    if (o.dtype() != DType::f64) o = cast(o, DType::f64);
    lse = whole(*lse_src);
    bopt.forward_output = &o;
    bopt.forward_lse = &lse;
  }
};

// The streamed backward (posenc-attention(1), GRADIENTS): K and V used in place of their
// mapped files and released tile by tile, dk and dv written to their NPY files as their
// key tiles complete, the forward streamed over K and V within what is left of the
// budget. Possible where K and V are mapped in the arithmetic's dtype (or narrower
// floats, widened a key tile at a time) with a head's keys
// contiguous (h before s, d last), dk and dv (when emitted) go to regular NPY files, and
// neither --rope nor --qv is given (Gemma-3n's --per-dim-scale and --relative-proj make
// their scaled Q and table from Q, streamed alike). Returns the bytes it holds (Q, dO,
// dq and the work; a given forward's O and lse), or 0 where it is not possible.
// Whether `t` is the arithmetic's dtype or widens to it exactly (f16, bf16; f32 to f64).
bool widens(DType t, DType arith) {
  return t == arith || (is_float(t) && !is_fp8(t) && dtype_size(t) < dtype_size(arith));
}

std::size_t streamed_need(TensorSource& q, TensorSource& k, TensorSource& v, TensorSource& dO,
                          const AttentionOptions& opt, const std::vector<std::string>& names,
                          const std::vector<TensorRef>& refs, const AttentionRope* rope,
                          const AttentionBackwardOptions& bopt, const GivenForward& forward) {
  const TensorInfo &qi = q.info(), &ki = k.info(), &vi = v.info(), &oi = dO.info();
  const DType arith = attention_arith(opt);
  const std::string axes = !opt.axes.empty() ? opt.axes : ki.shape.size() == 4 ? "bhsd" : "";
  const auto h = axes.find('h'), sa = axes.find('s');
  if (rope || opt.qv || axes.empty() ||
      h == std::string::npos || sa == std::string::npos || h > sa || axes.back() != 'd' ||
      !widens(ki.dtype, arith) || !widens(vi.dtype, arith) || !k.mapped_data() ||
      !v.mapped_data()) {
    return 0;
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    if ((names[i] == "dk" || names[i] == "dv") &&
        (refs[i].format != Format::npy || refs[i].is_stdio())) {
      return 0;
    }
  }
  AttentionBackwardOptions b = bopt;
  b.forward_output = b.forward_lse = &kForwardGiven;
  b.sink = [](const std::string&, const TensorInfo&) { return nullptr; };
  b.release_kv = true;
  std::size_t need = attention_backward_memory(qi.shape, ki.shape, vi.shape, qi.dtype, opt, b);
  need = add_sat(need, forward.bytes());
  for (const TensorInfo* t : {&qi, &oi}) {
    const std::size_t bytes = checked_numel(t->shape, 1, "attention") * dtype_size(t->dtype);
    need = add_sat(need, bytes);
  }
  return need;
}

void run_streamed(TensorSource& q, TensorSource& k, TensorSource& v, TensorSource& dO_src,
                  const AttentionOptions& opt, const std::vector<std::string>& names,
                  const std::vector<TensorRef>& refs, const OutputOptions& out,
                  AttentionBackwardOptions bopt, std::size_t need, GivenForward& given) {
  // The forward, K and V streamed within what the backward leaves of the budget, unless
  // the caller gave it.
  AttentionResult fwd;
  if (given.given()) {
    given.read(bopt);
  } else {
    AttentionOptions f = opt;
    f.emit = {AttentionEmit::output, AttentionEmit::lse};
    f.dtype = DType::f64;
    f.output_sink = nullptr;
    f.max_memory = opt.max_memory - need;
    try {
      fwd = attention(q, k, &v, f);
    } catch (const InputError& e) {
      throw InputError(fmt::format("gradients streamed within --max-memory {} (the backward "
                                   "holds {}): the forward: {}",
                                   bytes_str(opt.max_memory), bytes_str(need), e.what()));
    }
    bopt.forward_output = &fwd.output;
    bopt.forward_lse = &fwd.lse;
  }
  const Tensor qt = whole(q), dO = whole(dO_src);
  const Tensor kt = Tensor::borrow(k.info().dtype, k.info().shape,
                                   const_cast<std::byte*>(k.mapped_data()));
  const Tensor vt = Tensor::borrow(v.info().dtype, v.info().shape,
                                   const_cast<std::byte*>(v.mapped_data()));
  OutputSet set(refs, out.write_options());
  auto index = [&](const std::string& n) {
    return static_cast<std::size_t>(std::find(names.begin(), names.end(), n) - names.begin());
  };
  bopt.release_kv = true;
  bopt.sink = [&](const std::string& n, const TensorInfo& info) -> TensorSink* {
    const std::size_t i = index(n);
    if (i == names.size()) return nullptr;
    TensorSink& s = set.open(i, info);
    if (!s.writes_at()) {
      throw InputError(fmt::format("{}: the streamed gradients need a regular NPY file",
                                   refs[i].text));
    }
    return &s;
  };
  AttentionOptions o = opt;
  // What is left bounds the workers (the given forward is counted in `need`).
  o.max_memory = opt.max_memory - (qt.nbytes() + dO.nbytes());
  AttentionGrads g = attention_backward(qt, kt, vt, dO, o, bopt);
  verbose_attrs(g.attrs);
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "dk" || names[i] == "dv") continue;
    const Tensor& t = g.named(names[i]);
    Attrs a = g.attrs;
    a.push_back({"tensor", names[i]});
    TensorSink& s = set.open(i, TensorInfo{t.dtype(), t.shape(), "", a});
    s.write_rows(t.bytes(), t.shape().empty() ? 1 : t.shape()[0]);
  }
  set.commit();
}

}  // namespace

bool is_gradient_name(const std::string& name) {
  return find_gradient(name) != nullptr && name != "lse";
}

void refuse_gradients_without_dO(const std::string& list) {
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    const std::string name = list.substr(pos, comma - pos);
    if (is_gradient_name(name)) {
      throw UsageError(fmt::format(
          "--emit {}: gradients need --grad-output dO (the gradient of the output)", name));
    }
    pos = comma + 1;
  }
}

std::vector<std::string> parse_gradient_emit(const std::string& list, bool sinks,
                                             bool float_mask, bool qv) {
  if (list.empty()) {
    std::vector<std::string> d = {"dq", "dk", "dv", "softmax_d", "lse"};
    if (sinks) d.push_back("dsinks");
    if (qv) d.push_back("dqv");
    return d;
  }
  const Caller given{[sinks, qv](const std::string& n) { return n == "sinks" ? sinks : qv; },
                     &Field::option_of, nullptr};
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    const std::string name = list.substr(pos, comma - pos);
    check_gradient_emit({name}, given);
    if (std::find(out.begin(), out.end(), name) != out.end()) {
      throw UsageError(fmt::format("--emit {}: '{}' is named twice", list, name));
    }
    if (name == "dbias" && !float_mask) {
      throw UsageError("--emit dbias: needs a float (additive) --mask");
    }
    out.push_back(name);
    pos = comma + 1;
  }
  return out;
}

void run_gradients(TensorSource& q, TensorSource& k, TensorSource& v, const std::string& grad_ref,
                   const AttentionOptions& opt, const std::vector<std::string>& names,
                   const std::vector<TensorRef>& refs, const OutputOptions& out,
                   const AttentionRope* rope, const RelativeCliOptions* relative,
                   const ForwardRefs& forward) {
  auto dO_src = open_source(parse_ref(grad_ref));
  AttentionBackwardOptions bopt = gradients_wanted(names);
  const TensorInfo &qi = q.info(), &ki = k.info(), &vi = v.info(), &oi = dO_src->info();
  // The inputs' headers against each other and the budget, before anything is read.
  if (!is_float(oi.dtype)) {
    throw InputError(fmt::format("--grad-output {}: dtype {} is not a float type", grad_ref,
                                 dtype_name(oi.dtype)));
  }
  GivenForward given;
  if (!forward.output.empty()) {
    given.o_src = open_source(parse_ref(forward.output));
    given.lse_src = open_source(parse_ref(forward.lse));
    check_forward_shapes(qi.shape, ki.shape, vi.shape, qi.dtype, opt, given.o_src->info(),
                         given.lse_src->info(), Caller{nullptr, &Field::option_of, nullptr});
    bopt.forward_output = bopt.forward_lse = &kForwardGiven;
  }
  const std::size_t held = [&] {  // the in-memory run: the inputs whole
    std::size_t need =
        !relative ? attention_backward_memory(qi.shape, ki.shape, vi.shape, qi.dtype, opt, bopt)
        : relative->xl_terms
            ? attention_backward_memory(qi.shape, ki.shape, vi.shape, qi.dtype, opt, bopt,
                                        relative->xl)
            : attention_backward_memory(qi.shape, ki.shape, vi.shape, qi.dtype, opt, bopt,
                                        relative->deb);
    for (const TensorInfo* t : {&qi, &ki, &vi, &oi}) {
      const std::size_t bytes = checked_numel(t->shape, 1, "attention") * dtype_size(t->dtype);
      need = add_sat(need, bytes);
    }
    if (opt.qv) need = add_sat(need, opt.qv->nbytes());
    if (relative) need = add_sat(need, relative->bytes);
    need = add_sat(need, given.bytes());
    if (rope) {  // rotated Q and K, and dq and dk before they are rotated back, in float64
      for (const TensorInfo* t : {&qi, &ki}) {
        const std::size_t bytes = checked_numel(t->shape, 16, "attention") * 16;
        need = add_sat(need, bytes);
      }
    }
    return need;
  }();
  if (opt.max_memory && held > opt.max_memory) {
    const std::size_t need =
        relative ? 0 : streamed_need(q, k, v, *dO_src, opt, names, refs, rope, bopt, given);
    if (need) {
      if (need <= opt.max_memory) {
        return run_streamed(q, k, v, *dO_src, opt, names, refs, out, bopt, need, given);
      }
    }
    throw InputError(fmt::format("gradients would need {} with the inputs > --max-memory {}",
                                 bytes_str(held), bytes_str(opt.max_memory)));
  }
  Tensor qt = whole(q), kt = whole(k), vt = whole(v);
  Tensor dO = whole(*dO_src);
  if (given.given()) given.read(bopt);
  AttentionOptions o = opt;
  o.max_memory = 0;  // checked above, with the inputs
  if (opt.max_memory) {
    // What is left of the budget bounds the workers (the bytes never depend on it).
    std::size_t inputs = 0;
    for (const Tensor* t : {&qt, &kt, &vt, &dO}) inputs += t->nbytes();
    inputs = add_sat(inputs, given.bytes());
    o.max_memory = opt.max_memory > inputs ? opt.max_memory - inputs : 1;
  }
  AttentionGrads g = attention_backward(qt, kt, vt, dO, o, bopt, attention_term(relative, rope));
  verbose_attrs(g.attrs);
  std::vector<NamedTensor> named;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& n = names[i];
    const Tensor* t = &g.named(n);
    Attrs a = g.attrs;
    a.push_back({"tensor", n});
    named.push_back(NamedTensor{refs[i], t, a});
  }
  write_tensors(named, out.write_options());
}

}  // namespace posenc::cli
