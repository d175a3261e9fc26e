// `posenc attention --grad-output dO` (see attention_grad.hpp).
#include "cli/attention_grad.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/ops/attention_backward.hpp"

namespace posenc::cli {

namespace {
const char* const kNames[] = {"dq",    "dk",     "dv",      "softmax_d", "lse",
                              "dbias", "dsinks", "dt5_bias", "dqv"};
}  // namespace

bool is_gradient_name(const std::string& name) {
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames) &&
         name != "lse";
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
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    std::size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    const std::string name = list.substr(pos, comma - pos);
    if (std::find(std::begin(kNames), std::end(kNames), name) == std::end(kNames)) {
      throw UsageError(fmt::format(
          "--emit {}: with --grad-output, expected a comma list of dq, dk, dv, softmax_d, lse, "
          "dbias, dsinks, dt5_bias, dqv",
          name));
    }
    if (std::find(out.begin(), out.end(), name) != out.end()) {
      throw UsageError(fmt::format("--emit {}: '{}' is named twice", list, name));
    }
    if (name == "dbias" && !float_mask) {
      throw UsageError("--emit dbias: needs a float (additive) --mask");
    }
    if (name == "dsinks" && !sinks) throw UsageError("--emit dsinks: needs --sinks");
    if (name == "dqv" && !qv) throw UsageError("--emit dqv: needs --qv");
    out.push_back(name);
    pos = comma + 1;
  }
  return out;
}

void run_gradients(TensorSource& q, TensorSource& k, TensorSource& v, const std::string& grad_ref,
                   const AttentionOptions& opt, const std::vector<std::string>& names,
                   const std::vector<TensorRef>& refs, const OutputOptions& out,
                   const AttentionRope* rope) {
  auto dO_src = open_source(parse_ref(grad_ref));
  AttentionBackwardOptions bopt;
  bopt.dbias = std::find(names.begin(), names.end(), "dbias") != names.end();
  bopt.dt5_bias = std::find(names.begin(), names.end(), "dt5_bias") != names.end();
  const TensorInfo &qi = q.info(), &ki = k.info(), &vi = v.info(), &oi = dO_src->info();
  // The inputs' headers against each other and the budget, before anything is read.
  if (!is_float(oi.dtype)) {
    throw InputError(fmt::format("--grad-output {}: dtype {} is not a float type", grad_ref,
                                 dtype_name(oi.dtype)));
  }
  if (opt.max_memory) {
    std::size_t need = attention_backward_memory(qi.shape, ki.shape, vi.shape, qi.dtype, opt, bopt);
    for (const TensorInfo* t : {&qi, &ki, &vi, &oi}) {
      const std::size_t bytes = checked_numel(t->shape, 1, "attention") * dtype_size(t->dtype);
      need = need > SIZE_MAX - bytes ? SIZE_MAX : need + bytes;
    }
    if (opt.qv) need = need > SIZE_MAX - opt.qv->nbytes() ? SIZE_MAX : need + opt.qv->nbytes();
    if (rope) {  // rotated Q and K, and dq and dk before they are rotated back, in float64
      for (const TensorInfo* t : {&qi, &ki}) {
        const std::size_t bytes = checked_numel(t->shape, 16, "attention") * 16;
        need = need > SIZE_MAX - bytes ? SIZE_MAX : need + bytes;
      }
    }
    if (need > opt.max_memory) {
      throw InputError(fmt::format("gradients would need {} with the inputs > --max-memory {}",
                                   bytes_str(need), bytes_str(opt.max_memory)));
    }
  }
  // A file that can be mapped is used in place (no copy through read(2)); the budget
  // counts it all the same, as its pages become resident.
  auto whole = [](TensorSource& src) {
    if (const std::byte* p = src.mapped_data()) {
      return Tensor::borrow(src.info().dtype, src.info().shape, const_cast<std::byte*>(p));
    }
    return read_all_rows(src);
  };
  Tensor qt = whole(q), kt = whole(k), vt = whole(v);
  Tensor dO = whole(*dO_src);
  AttentionOptions o = opt;
  o.max_memory = 0;  // checked above, with the inputs
  if (opt.max_memory) {
    // What is left of the budget bounds the workers (the bytes never depend on it).
    std::size_t inputs = 0;
    for (const Tensor* t : {&qt, &kt, &vt, &dO}) inputs += t->nbytes();
    o.max_memory = opt.max_memory > inputs ? opt.max_memory - inputs : 1;
  }
  AttentionGrads g = rope ? attention_backward(qt, kt, vt, dO, o, bopt, *rope)
                          : attention_backward(qt, kt, vt, dO, o, bopt);
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
