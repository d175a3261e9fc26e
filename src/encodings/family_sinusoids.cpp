// Sinusoidal absolute encodings of model families: DETR's 2-D sine embedding and
// fairseq's sinusoidal positions (encodings/family_sinusoids.hpp).

#include "posenc/encodings/family_sinusoids.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

constexpr double kTwoPi = 6.283185307179586;

std::int64_t in_range(std::int64_t v, std::int64_t lo, std::int64_t hi, const char* name) {
  if (v < lo || v > hi) {
    throw UsageError(fmt::format("{}: must be from {} to {}, got {}", name, lo, hi, v));
  }
  return v;
}

// The cumulative sums of a DETR pixel mask [b, H, W], normalised as asked: y down the
// rows, x along the columns, each [b, H, W].
struct DetrEmbed {
  std::size_t batch = 0, height = 0, width = 0;
  std::vector<double> y, x;
};

DetrEmbed detr_embed(const DetrSineRequest& r) {
  DetrEmbed e;
  const xt::xarray<double>* m = r.mask ? &*r.mask : nullptr;
  if (m != nullptr) {
    if (m->dimension() != 3 || m->size() == 0) {
      std::string shape;
      for (std::size_t d : m->shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      throw InputError(fmt::format("mask: expected a pixel mask [b, H, W], got shape ({})", shape));
    }
    e.batch = m->shape(0);
    e.height = m->shape(1);
    e.width = m->shape(2);
    in_range(static_cast<std::int64_t>(e.height), 1, kMaxDetrSide, "mask height");
    in_range(static_cast<std::int64_t>(e.width), 1, kMaxDetrSide, "mask width");
    for (std::size_t k = 0; k < m->size(); ++k) {
      const double v = m->data()[k];
      if (v != 0.0 && v != 1.0) {
        throw InputError(fmt::format("mask: entry {} is {}; a pixel mask holds 0 and 1", k, v));
      }
    }
  } else {
    e.batch = 1;
    e.height = static_cast<std::size_t>(in_range(r.height, 1, kMaxDetrSide, "size height"));
    e.width = static_cast<std::size_t>(in_range(r.width, 1, kMaxDetrSide, "size width"));
  }
  const std::size_t h = e.height, w = e.width, plane = h * w;
  e.y.assign(e.batch * plane, 0.0);
  e.x.assign(e.batch * plane, 0.0);
  for (std::size_t b = 0; b < e.batch; ++b) {
    const double* mb = m != nullptr ? m->data() + b * plane : nullptr;
    double* y = e.y.data() + b * plane;
    double* x = e.x.data() + b * plane;
    for (std::size_t i = 0; i < h; ++i) {
      for (std::size_t j = 0; j < w; ++j) {
        const double v = mb != nullptr ? mb[i * w + j] : 1.0;
        // pixel_mask.cumsum(1) and .cumsum(2): sums of 0/1, exact.
        y[i * w + j] = v + (i > 0 ? y[(i - 1) * w + j] : 0.0);
        x[i * w + j] = v + (j > 0 ? x[i * w + j - 1] : 0.0);
      }
    }
    if (r.normalize) {
      const double scale = r.scale.value_or(kTwoPi);
      std::vector<double> y_last(y + (h - 1) * w, y + h * w);
      for (std::size_t i = 0; i < h; ++i) {
        const double x_last = x[i * w + w - 1];
        for (std::size_t j = 0; j < w; ++j) {
          y[i * w + j] = (y[i * w + j] - r.offset) / (y_last[j] + 1e-6) * scale;
          x[i * w + j] = (x[i * w + j] - r.offset) / (x_last + 1e-6) * scale;
        }
      }
    }
  }
  return e;
}

}  // namespace

Table detr_sine_table(const DetrSineRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const int dim = r.embedding_dim;
  if (dim < 2 || dim > kMaxEmbeddingDim || dim % 2 != 0) {
    throw UsageError(fmt::format(
        "embedding_dim: must be even, from 2 to {} (HF pairs channels 2k and 2k+1), got {}",
        kMaxEmbeddingDim, dim));
  }
  for (const auto& [name, v] : {std::pair{"temperature", r.temperature},
                                std::pair{"temperature_width",
                                          r.temperature_width.value_or(r.temperature)}}) {
    if (!(v > 0.0) || !std::isfinite(v)) {
      throw UsageError(fmt::format("{}: must be positive and finite, got {}", name, v));
    }
  }
  if (!std::isfinite(r.offset)) {
    throw UsageError(fmt::format("offset: must be finite, got {}", r.offset));
  }
  if (r.offset != 0.0 && !r.normalize) {
    throw UsageError("offset: applies to normalised positions (not with normalize off)");
  }
  if (r.scale && !r.normalize) {
    throw UsageError("scale: needs normalize (HF: normalize should be True if scale is passed)");
  }
  if (r.scale && !std::isfinite(*r.scale)) {
    throw UsageError(fmt::format("scale: must be finite, got {}", *r.scale));
  }
  auto e = std::make_shared<const DetrEmbed>(detr_embed(r));
  // dim_t = temperature ** (2 * floor(k / 2) / embedding_dim): y's channels in [0, E),
  // x's (DAB-DETR: its temperature_width) in [E, 2E).
  auto dim_t = std::make_shared<std::vector<double>>(2 * static_cast<std::size_t>(dim));
  for (int k = 0; k < 2 * dim; ++k) {
    const double temp = k < dim ? r.temperature : r.temperature_width.value_or(r.temperature);
    (*dim_t)[static_cast<std::size_t>(k)] =
        std::pow(temp, 2.0 * static_cast<double>((k % dim) / 2) / static_cast<double>(dim));
  }
  const auto channels = static_cast<std::size_t>(2 * dim);
  Table t;
  t.attrs = {{"kind", std::string("detr-sine")},
             {"batch", static_cast<long long>(e->batch)},
             {"height", static_cast<long long>(e->height)},
             {"width", static_cast<long long>(e->width)},
             {"embedding_dim", static_cast<long long>(dim)},
             {"temperature", r.temperature},
             {"normalize", static_cast<long long>(r.normalize ? 1 : 0)}};
  if (r.temperature_width) t.attrs.push_back({"temperature_width", *r.temperature_width});
  if (r.normalize) t.attrs.push_back({"scale", r.scale.value_or(kTwoPi)});
  if (r.offset != 0.0) t.attrs.push_back({"offset", r.offset});
  t.attrs.push_back({"mask", std::string(r.mask ? "given" : "ones")});
  t.attrs.push_back({"layout", std::string(r.tokens ? "tokens" : "channels")});
  t.dataset = "/detr_sine";
  const std::size_t half = static_cast<std::size_t>(dim);
  if (r.tokens) {
    // pos.flatten(2).permute(0, 2, 1): one line per token, its 2E channels.
    t.spec.shape = {e->batch, e->height * e->width, channels};
    t.spec.line = [e, dim_t, channels, half](std::size_t line, double* out) {
      const double y = e->y[line], x = e->x[line];
      std::vector<double> angle(channels), s(channels), co(channels);
      for (std::size_t k = 0; k < half; ++k) {
        angle[k] = y / (*dim_t)[k];
        angle[half + k] = x / (*dim_t)[half + k];
      }
      sincos_array(angle.data(), s.data(), co.data(), channels);
      for (std::size_t c = 0; c < channels; ++c) out[c] = (c % half) % 2 == 0 ? s[c] : co[c];
    };
    return t;
  }
  t.spec.shape = {e->batch, channels, e->height, e->width};
  t.spec.line = [e, dim_t, channels, half](std::size_t line, double* out) {
    const std::size_t h = e->height, w = e->width;
    const std::size_t row = line % h;
    const std::size_t c = (line / h) % channels;
    const std::size_t b = line / (h * channels);
    // Channels [0, E) are pos_y, [E, 2E) pos_x.
    const std::vector<double>& v = c < half ? e->y : e->x;
    const std::size_t k = c < half ? c : c - half;
    const double* src = v.data() + (b * h + row) * w;
    std::vector<double> angle(w), s(w), co(w);
    for (std::size_t j = 0; j < w; ++j) angle[j] = src[j] / (*dim_t)[c];
    sincos_array(angle.data(), s.data(), co.data(), w);
    const std::vector<double>& pick = k % 2 == 0 ? s : co;
    std::copy(pick.begin(), pick.end(), out);
  };
  return t;
}

Table rt_detr_sincos_table(const RtDetrSincosRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const int dim = r.embedding_dim;
  if (dim < 4 || dim > kMaxEmbeddingDim || dim % 4 != 0) {
    throw UsageError(fmt::format(
        "embedding_dim: must be a multiple of 4, from 4 to {} (sin and cos of y and x), got {}",
        kMaxEmbeddingDim, dim));
  }
  if (!(r.temperature > 0.0) || !std::isfinite(r.temperature)) {
    throw UsageError(fmt::format("temperature: must be positive and finite, got {}", r.temperature));
  }
  const auto h = static_cast<std::size_t>(in_range(r.height, 1, kMaxDetrSide, "size height"));
  const auto w = static_cast<std::size_t>(in_range(r.width, 1, kMaxDetrSide, "size width"));
  // omega = 1 / temperature ** (arange(pos_dim) / pos_dim)
  const std::size_t pos_dim = static_cast<std::size_t>(dim) / 4;
  auto omega = std::make_shared<std::vector<double>>(pos_dim);
  for (std::size_t k = 0; k < pos_dim; ++k) {
    (*omega)[k] = 1.0 / std::pow(r.temperature,
                                 static_cast<double>(k) / static_cast<double>(pos_dim));
  }
  Table t;
  t.attrs = {{"kind", std::string("rt-detr-sincos")},
             {"height", static_cast<long long>(h)},
             {"width", static_cast<long long>(w)},
             {"embedding_dim", static_cast<long long>(dim)},
             {"temperature", r.temperature}};
  t.dataset = "/rt_detr_sincos";
  t.spec.shape = {1, h * w, static_cast<std::size_t>(dim)};
  t.spec.line = [omega, pos_dim, w](std::size_t line, double* out) {
    const double y = static_cast<double>(line / w), x = static_cast<double>(line % w);
    std::vector<double> angle(2 * pos_dim), s(2 * pos_dim), c(2 * pos_dim);
    for (std::size_t k = 0; k < pos_dim; ++k) {
      angle[k] = y * (*omega)[k];
      angle[pos_dim + k] = x * (*omega)[k];
    }
    sincos_array(angle.data(), s.data(), c.data(), 2 * pos_dim);
    for (std::size_t k = 0; k < pos_dim; ++k) {
      out[k] = s[k];
      out[pos_dim + k] = c[k];
      out[2 * pos_dim + k] = s[pos_dim + k];
      out[3 * pos_dim + k] = c[pos_dim + k];
    }
  };
  return t;
}

Table fairseq_sinusoidal_table(const FairseqSinusoidalRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const int dim = r.dim;
  if (dim < 4 || dim > kMaxEmbeddingDim) {
    throw UsageError(
        fmt::format("dim: must be from 4 to {} (the frequencies divide by D/2 - 1), got {}",
                    kMaxEmbeddingDim, dim));
  }
  const bool with_ids = r.input_ids.has_value();
  if (with_ids && r.positions) {
    throw UsageError("positions: cannot be combined with input_ids (the ids give the shape)");
  }
  if (!with_ids && !r.positions) {
    throw UsageError("positions: the number of rows is required (or input_ids)");
  }
  if (with_ids && !r.padding_idx) {
    throw UsageError("padding_idx: needed with input_ids (padding tokens are ids equal to it)");
  }
  if (r.padding_idx) in_range(*r.padding_idx, 0, std::int64_t{1} << 40, "padding_idx");
  in_range(r.past_length, 0, std::int64_t{1} << 40, "past_length");
  if (!with_ids && r.past_length != 0) {
    throw UsageError("past_length: applies to input_ids only");
  }
  const std::int64_t pad = r.padding_idx.value_or(-1);

  // emb = exp(arange(half_dim) * -(log(10000) / (half_dim - 1)))
  const int half = dim / 2;
  const double step = std::log(10000.0) / static_cast<double>(half - 1);
  auto freqs = std::make_shared<std::vector<double>>(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) (*freqs)[static_cast<std::size_t>(i)] = std::exp(i * -step);

  Table t;
  t.attrs = {{"kind", std::string("fairseq-sinusoidal")}, {"dim", static_cast<long long>(dim)}};
  if (r.padding_idx) t.attrs.push_back({"padding_idx", static_cast<long long>(pad)});
  auto ids = std::make_shared<std::vector<std::int64_t>>();
  if (with_ids) {
    const xt::xarray<std::int64_t>& in = *r.input_ids;
    if (in.dimension() != 2 || in.size() == 0) {
      std::string shape;
      for (std::size_t d : in.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      throw InputError(fmt::format("input_ids: expected token ids [b, s], got shape ({})", shape));
    }
    const std::size_t b = in.shape(0), s = in.shape(1);
    // create_position_ids_from_input_ids: (cumsum(mask) + past) * mask + padding_idx
    ids->resize(b * s);
    for (std::size_t i = 0; i < b; ++i) {
      std::int64_t count = 0;
      for (std::size_t j = 0; j < s; ++j) {
        const bool token = in(i, j) != pad;
        count += token ? 1 : 0;
        (*ids)[i * s + j] = (token ? count + r.past_length : 0) + pad;
      }
    }
    t.attrs.push_back({"past_length", static_cast<long long>(r.past_length)});
    t.spec.shape = {b, s, static_cast<std::size_t>(dim)};
  } else {
    const std::int64_t n = in_range(*r.positions, 1, std::int64_t{1} << 40, "positions");
    if (r.padding_idx && pad >= n) {
      throw UsageError(fmt::format("padding_idx: {} is not a row of the {} positions", pad, n));
    }
    t.attrs.push_back({"positions", static_cast<long long>(n)});
    t.spec.shape = {static_cast<std::size_t>(n), static_cast<std::size_t>(dim)};
  }
  t.spec.line = [freqs, ids, pad, dim, half](std::size_t line, double* out) {
    const std::int64_t p = ids->empty() ? static_cast<std::int64_t>(line) : (*ids)[line];
    const auto h = static_cast<std::size_t>(half);
    if (p == pad) {
      std::fill(out, out + dim, 0.0);
      return;
    }
    std::vector<double> angle(h);
    for (std::size_t i = 0; i < h; ++i) angle[i] = static_cast<double>(p) * (*freqs)[i];
    // [sin | cos], then a zero column for odd D
    sincos_array(angle.data(), out, out + h, h);
    if (dim % 2 == 1) out[dim - 1] = 0.0;
  };
  t.dataset = "/fairseq_sinusoidal";
  return t;
}

}  // namespace posenc
