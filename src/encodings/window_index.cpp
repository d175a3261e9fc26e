// Relative position indices of windowed 2-D attention (Swin, BEiT) and the biases they
// gather (encodings/window_index.hpp).

#include "posenc/encodings/window_index.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"

namespace posenc {

std::int64_t WindowIndex::index(std::int64_t i, std::int64_t j) const {
  if (class_token) {
    const std::int64_t n = entries();
    if (i == 0) return j == 0 ? n - 1 : n - 3;  // class to class, class to token
    if (j == 0) return n - 2;                   // token to class
    --i;
    --j;
  }
  const std::int64_t dy = i / width - j / width + height - 1;
  const std::int64_t dx = i % width - j % width + width - 1;
  return dy * (2 * width - 1) + dx;
}

void check_window(std::int64_t height, std::int64_t width) {
  for (const auto& [name, v] : {std::pair{"height", height}, std::pair{"width", width}}) {
    if (v < 1 || v > kMaxWindowSide) {
      throw UsageError(
          fmt::format("window {}: must be from 1 to {}, got {}", name, kMaxWindowSide, v));
    }
  }
}

Table window_index_table(const WindowIndexRequest& r) {
  check_window(r.height, r.width);
  const WindowIndex w{r.height, r.width, r.class_token};
  const std::int64_t n = w.tokens();
  const auto un = static_cast<std::size_t>(n);
  Table t;
  t.attrs = {{"kind", std::string(r.class_token ? "beit-index" : "swin-index")},
             {"height", static_cast<long long>(r.height)},
             {"width", static_cast<long long>(r.width)},
             {"num_relative_distance", static_cast<long long>(w.entries())}};
  t.dataset = r.class_token ? "/beit_index" : "/swin_index";
  if (!r.bias_table) {
    t.integral = true;
    t.max_value = w.entries() - 1;
    t.spec.shape = {un, un};
    t.spec.line = [w, n](std::size_t i, double* out) {
      for (std::int64_t j = 0; j < n; ++j) {
        out[j] = static_cast<double>(w.index(static_cast<std::int64_t>(i), j));
      }
    };
    return t;
  }
  const xt::xarray<double>& b = *r.bias_table;
  if (b.dimension() != 2 || b.shape(0) != static_cast<std::size_t>(w.entries()) ||
      b.shape(1) == 0) {
    std::string shape;
    for (std::size_t d : b.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw InputError(fmt::format(
        "bias_table: expected shape ({}, heads) for a {} x {} window{}, got ({})", w.entries(),
        r.height, r.width, r.class_token ? " with a class token" : "", shape));
  }
  for (std::size_t k = 0; k < b.size(); ++k) {
    if (!std::isfinite(b.data()[k])) {
      throw InputError(
          fmt::format("bias_table: entry ({}, {}) is not finite", k / b.shape(1), k % b.shape(1)));
    }
  }
  auto table = std::make_shared<xt::xarray<double>>(b);
  const std::size_t heads = b.shape(1);
  t.attrs.push_back({"heads", static_cast<long long>(heads)});
  t.dataset += "_bias";
  t.spec.shape = {heads, un, un};
  // relative_position_bias_table[index.view(-1)].view(N, N, -1).permute(2, 0, 1)
  t.spec.line = [w, n, un, heads, table](std::size_t line, double* out) {
    const std::size_t h = line / un;
    const auto i = static_cast<std::int64_t>(line % un);
    const double* tb = table->data();
    for (std::int64_t j = 0; j < n; ++j) {
      out[j] = tb[static_cast<std::size_t>(w.index(i, j)) * heads + h];
    }
  };
  return t;
}

Table swinv2_coords_table(const SwinV2CoordsRequest& r) {
  check_window(r.height, r.width);
  const bool pretrained = r.pretrained_height != 0 || r.pretrained_width != 0;
  if (pretrained) {
    for (const auto& [name, v] : {std::pair{"pretrained_window height", r.pretrained_height},
                                  std::pair{"pretrained_window width", r.pretrained_width}}) {
      if (v < 2 || v > kMaxWindowSide) {
        throw UsageError(
            fmt::format("{}: must be from 2 to {} (offsets are divided by it - 1), "
                        "got {}",
                        name, kMaxWindowSide, v));
      }
    }
  }
  // relative_coords_table[..., a] /= side - 1 (the pretrained one if given; skipped
  // for a window of side 1, whose only offset is 0), *= 8, then sign * log2(|c| + 1) / 3.
  const double div_y = static_cast<double>((pretrained ? r.pretrained_height : r.height) - 1);
  const double div_x = static_cast<double>((pretrained ? r.pretrained_width : r.width) - 1);
  const std::int64_t h = r.height, w = r.width;
  Table t;
  t.attrs = {{"kind", std::string("swinv2-coords")},
             {"height", static_cast<long long>(h)},
             {"width", static_cast<long long>(w)},
             {"pretrained_height", static_cast<long long>(r.pretrained_height)},
             {"pretrained_width", static_cast<long long>(r.pretrained_width)}};
  t.dataset = "/swinv2_coords";
  t.spec.shape = {static_cast<std::size_t>(2 * h - 1), static_cast<std::size_t>(2 * w - 1), 2};
  const auto log_spaced = [](double d, double div) {
    const double c = (div > 0 ? d / div : d) * 8.0;
    const double s = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
    return s * std::log2(std::fabs(c) + 1.0) / std::log2(8.0);
  };
  // The coordinates of offset entry e (row-major over [2H - 1, 2W - 1]).
  const auto coords = [h, w, div_y, div_x, log_spaced](std::int64_t e, double* out) {
    out[0] = log_spaced(static_cast<double>(e / (2 * w - 1) - (h - 1)), div_y);
    out[1] = log_spaced(static_cast<double>(e % (2 * w - 1) - (w - 1)), div_x);
  };
  if (!r.mlp_w1 && !r.mlp_b1 && !r.mlp_w2) {
    t.spec.line = [coords](std::size_t line, double* out) {
      coords(static_cast<std::int64_t>(line), out);
    };
    return t;
  }
  if (!r.mlp_w1 || !r.mlp_b1 || !r.mlp_w2) {
    throw UsageError("mlp: needs the three weights W1 [hidden, 2], B1 [hidden], W2 [heads, hidden]");
  }
  const xt::xarray<double>&w1 = *r.mlp_w1, &b1 = *r.mlp_b1, &w2 = *r.mlp_w2;
  const std::size_t hidden = w1.dimension() == 2 ? w1.shape(0) : 0;
  const std::size_t heads = w2.dimension() == 2 ? w2.shape(0) : 0;
  if (hidden == 0 || w1.shape(1) != 2 || b1.dimension() != 1 || b1.shape(0) != hidden ||
      heads == 0 || w2.shape(1) != hidden) {
    throw InputError(fmt::format(
        "mlp: expected W1 [hidden, 2], B1 [hidden] and W2 [heads, hidden] (HF "
        "continuous_position_bias_mlp), got {}, {} and {}",
        shape_str(Shape(w1.shape().begin(), w1.shape().end())),
        shape_str(Shape(b1.shape().begin(), b1.shape().end())),
        shape_str(Shape(w2.shape().begin(), w2.shape().end()))));
  }
  for (const xt::xarray<double>* x : {&w1, &b1, &w2}) {
    if (!std::all_of(x->begin(), x->end(), [](double v) { return std::isfinite(v); })) {
      throw InputError("mlp: the weights hold NaN or Inf");
    }
  }
  // relative_position_bias_table = mlp(coords).view(-1, heads), one row an offset.
  const WindowIndex wi{h, w, false};
  const std::int64_t entries = wi.entries();
  auto table = std::make_shared<std::vector<double>>(static_cast<std::size_t>(entries) * heads);
  std::vector<double> act(hidden);
  for (std::int64_t e = 0; e < entries; ++e) {
    double c[2];
    coords(e, c);
    for (std::size_t k = 0; k < hidden; ++k) {
      act[k] = std::max(0.0, c[0] * w1(k, 0) + c[1] * w1(k, 1) + b1(k));
    }
    for (std::size_t hd = 0; hd < heads; ++hd) {
      double sum = 0;
      for (std::size_t k = 0; k < hidden; ++k) sum += w2(hd, k) * act[k];
      (*table)[static_cast<std::size_t>(e) * heads + hd] = 16.0 * (1.0 / (1.0 + std::exp(-sum)));
    }
  }
  const auto n = static_cast<std::size_t>(wi.tokens());
  t.attrs.push_back({"heads", static_cast<long long>(heads)});
  t.attrs[0] = {"kind", std::string("swinv2-bias")};
  t.dataset = "/swinv2_bias";
  t.spec.shape = {heads, n, n};
  // 16 * sigmoid(table[relative_position_index].view(N, N, -1).permute(2, 0, 1))
  t.spec.line = [wi, n, heads, table](std::size_t line, double* out) {
    const std::size_t hd = line / n;
    const auto i = static_cast<std::int64_t>(line % n);
    for (std::size_t j = 0; j < n; ++j) {
      out[j] = (*table)[static_cast<std::size_t>(wi.index(i, static_cast<std::int64_t>(j))) *
                            heads + hd];
    }
  };
  return t;
}

Table levit_index_table(const LevitIndexRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const std::int64_t res = r.resolution;  // 1 to kMaxWindowSide (declared)
  if (r.stride < 1 || r.stride > res) {
    throw UsageError(
        fmt::format("stride: must be from 1 to the resolution {}, got {}", res, r.stride));
  }
  const std::int64_t stride = r.stride;
  const std::int64_t out_res = (res - 1) / stride + 1;
  const auto keys = static_cast<std::size_t>(res * res);
  const auto queries = static_cast<std::size_t>(out_res * out_res);
  Table t;
  t.attrs = {{"kind", std::string("levit-index")},
             {"resolution", static_cast<long long>(res)},
             {"stride", static_cast<long long>(stride)},
             {"resolution_out", static_cast<long long>(out_res)},
             {"offsets", static_cast<long long>(keys)}};
  t.dataset = "/levit_index";
  // Query q at (qy, qx) * stride, key k at (ky, kx): offset (|dy|, |dx|), numbered
  // |dy| * R + |dx| (the order the first query row meets them in HF's loop).
  const auto index = [res, out_res, stride](std::int64_t q, std::int64_t k) {
    const std::int64_t dy = q / out_res * stride - k / res;
    const std::int64_t dx = q % out_res * stride - k % res;
    return (dy < 0 ? -dy : dy) * res + (dx < 0 ? -dx : dx);
  };
  if (!r.bias_table) {
    t.integral = true;
    t.max_value = res * res - 1;
    t.spec.shape = {queries, keys};
    t.spec.line = [index, keys](std::size_t q, double* out) {
      for (std::size_t k = 0; k < keys; ++k) {
        out[k] =
            static_cast<double>(index(static_cast<std::int64_t>(q), static_cast<std::int64_t>(k)));
      }
    };
    return t;
  }
  const xt::xarray<double>& b = *r.bias_table;
  if (b.dimension() != 2 || b.shape(1) != keys || b.shape(0) == 0) {
    std::string shape;
    for (std::size_t d : b.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw InputError(
        fmt::format("bias_table: expected shape (heads, {}) for resolution {}, got "
                    "({})",
                    keys, res, shape));
  }
  for (std::size_t k = 0; k < b.size(); ++k) {
    if (!std::isfinite(b.data()[k])) {
      throw InputError(fmt::format("bias_table: entry ({}, {}) is not finite", k / keys, k % keys));
    }
  }
  auto table = std::make_shared<xt::xarray<double>>(b);
  const std::size_t heads = b.shape(0);
  t.attrs.push_back({"heads", static_cast<long long>(heads)});
  t.dataset += "_bias";
  t.spec.shape = {heads, queries, keys};
  t.spec.line = [index, keys, queries, table](std::size_t line, double* out) {
    const std::size_t h = line / queries;
    const auto q = static_cast<std::int64_t>(line % queries);
    const double* tb = table->data() + h * keys;
    for (std::size_t k = 0; k < keys; ++k) {
      out[k] = tb[index(q, static_cast<std::int64_t>(k))];
    }
  };
  return t;
}

}  // namespace posenc
