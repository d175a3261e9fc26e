// WavLM's gate on the T5 relative bias (attention_gate.hpp): options checked, factors
// computed.
#include "ops/attention_gate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "posenc/error.hpp"

namespace posenc::attention_detail {

void check_gate(const Geometry& g, const AttentionOptions& opt) {
  const Tensor* parts[] = {opt.gate_input, opt.gate_weight, opt.gate_bias, opt.gate_const};
  int given = 0;
  for (const Tensor* t : parts) given += t != nullptr;
  if (given == 0) return;
  if (given != 4) {
    throw UsageError("gate_input, gate_weight, gate_bias, gate_const: WavLM's gate needs all four");
  }
  if (!opt.t5_bias) throw UsageError("gate_input: WavLM's gate multiplies the t5_bias term");
  const char* names[] = {"gate_input", "gate_weight", "gate_bias", "gate_const"};
  for (int i = 0; i < 4; ++i) require_float(parts[i]->dtype(), names[i]);
  const Tensor& x = *opt.gate_input;
  const Shape want_rows = g.has_b ? Shape{g.b, g.sq} : Shape{g.sq};
  const Shape xs = x.shape();
  if (xs.size() != want_rows.size() + 1 ||
      !std::equal(want_rows.begin(), want_rows.end(), xs.begin()) || xs.back() == 0 ||
      xs.back() % g.hq != 0) {
    throw InputError(fmt::format(
        "gate_input: expected the hidden states {} + (hidden,) with hidden a multiple of the "
        "{} heads, got {}",
        shape_str(want_rows), g.hq, shape_str(xs)));
  }
  const std::size_t e = xs.back() / g.hq;
  if (opt.gate_weight->shape() != Shape{8, e}) {
    throw InputError(fmt::format("gate_weight: expected shape (8, {}) (hidden / heads), got {}", e,
                                 shape_str(opt.gate_weight->shape())));
  }
  if (opt.gate_bias->shape() != Shape{8}) {
    throw InputError(
        fmt::format("gate_bias: expected shape (8,), got {}", shape_str(opt.gate_bias->shape())));
  }
  if (opt.gate_const->numel() != g.hq) {
    throw InputError(fmt::format("gate_const: expected {} values (one per head), got shape {}",
                                 g.hq, shape_str(opt.gate_const->shape())));
  }
}

namespace {

// HF WavLM's two gates of row x[at, at + e): the sigmoids of the sums of the projection's
// two halves (4 outputs each, bias included).
std::pair<double, double> gate_sigmoids(const Tensor& x, const Tensor& w, const Tensor& bias,
                                        std::size_t at, std::size_t e) {
  double half[2] = {0, 0};
  for (std::size_t k = 0; k < 8; ++k) {
    double p = 0;
    for (std::size_t c2 = 0; c2 < e; ++c2) p += x.get(at + c2) * w.get(k * e + c2);
    half[k / 4] += p + bias.get(k);
  }
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  return {sigmoid(half[0]), sigmoid(half[1])};
}

}  // namespace

std::vector<double> gate_factors(const Geometry& g, const AttentionOptions& opt) {
  if (!opt.gate_input) return {};
  const Tensor &x = *opt.gate_input, &w = *opt.gate_weight, &bias = *opt.gate_bias;
  const std::size_t e = x.shape().back() / g.hq;
  std::vector<double> f(g.b * g.hq * g.sq);
  for (std::size_t b = 0; b < g.b; ++b) {
    for (std::size_t h = 0; h < g.hq; ++h) {
      const double c = opt.gate_const->get(h);
      for (std::size_t i = 0; i < g.sq; ++i) {
        const std::size_t at = ((b * g.sq + i) * g.hq + h) * e;  // x[b, i, h E]
        const auto [ga, gb] = gate_sigmoids(x, w, bias, at, e);
        f[(b * g.hq + h) * g.sq + i] = ga * (gb * c - 1.0) + 2.0;
      }
    }
  }
  return f;
}

GateGrads gate_grads(const Geometry& g, const AttentionOptions& opt,
                     const std::vector<double>& dfactor) {
  const Tensor &x = *opt.gate_input, &w = *opt.gate_weight, &bias = *opt.gate_bias;
  const std::size_t e = x.shape().back() / g.hq;
  GateGrads d;
  d.input.assign(x.numel(), 0.0);
  d.weight.assign(8 * e, 0.0);
  d.bias.assign(8, 0.0);
  d.constant.assign(g.hq, 0.0);
  for (std::size_t b = 0; b < g.b; ++b) {
    for (std::size_t h = 0; h < g.hq; ++h) {
      const double c = opt.gate_const->get(h);
      for (std::size_t i = 0; i < g.sq; ++i) {
        const std::size_t at = ((b * g.sq + i) * g.hq + h) * e;  // x[b, i, h E]
        const auto [ga, gb] = gate_sigmoids(x, w, bias, at, e);
        const double df = dfactor[(b * g.hq + h) * g.sq + i];
        d.constant[h] += df * ga * gb;
        // d half: through a (g c - 1) + 2 and the sigmoids' s (1 - s).
        const double dh[2] = {df * (gb * c - 1.0) * ga * (1.0 - ga), df * ga * c * gb * (1.0 - gb)};
        for (std::size_t k = 0; k < 8; ++k) {
          const double dp = dh[k / 4];
          d.bias[k] += dp;
          for (std::size_t c2 = 0; c2 < e; ++c2) {
            d.weight[k * e + c2] += dp * x.get(at + c2);
            d.input[at + c2] += dp * w.get(k * e + c2);
          }
        }
      }
    }
  }
  return d;
}

}  // namespace posenc::attention_detail
