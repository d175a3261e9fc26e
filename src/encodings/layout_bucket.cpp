// LayoutLMv2/v3 relative-position buckets over positions and bounding boxes, and the
// biases a learned weight gives them (encodings/layout_bucket.hpp).

#include "posenc/encodings/layout_bucket.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "posenc/encodings/bias.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"

namespace posenc {

LayoutAxis parse_layout_axis(const std::string& s) {
  if (s == "1d") return LayoutAxis::positions;
  if (s == "x") return LayoutAxis::x;
  if (s == "y") return LayoutAxis::y;
  if (s == "xy") return LayoutAxis::xy;
  throw UsageError(fmt::format("axis {}: expected 1d, x, y or xy", s));
}

namespace {

const char* axis_name(LayoutAxis a) {
  switch (a) {
    case LayoutAxis::positions:
      return "1d";
    case LayoutAxis::x:
      return "x";
    case LayoutAxis::y:
      return "y";
    case LayoutAxis::xy:
      break;
  }
  return "xy";
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string out;
  for (std::size_t d : shape) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "(" + out + ")";
}

// The coordinates per row, [b][s]: positions, or one column of the boxes.
std::vector<std::vector<std::int64_t>> coordinates(const LayoutBucketRequest& r, int column) {
  std::vector<std::vector<std::int64_t>> c;
  const char* what = column < 0 ? "position_ids" : "bbox";
  const auto check = [what](std::int64_t v, std::size_t b, std::size_t s) {
    if (v < -kMaxLayoutCoordinate || v > kMaxLayoutCoordinate) {
      throw InputError(
          fmt::format("{}: entry of row {}, token {} is {}; coordinates must be "
                      "within +-2^40",
                      what, b, s, v));
    }
    return v;
  };
  if (column < 0 && !r.position_ids) {
    const std::int64_t s = *r.seq_len;
    c.emplace_back();
    for (std::int64_t i = 0; i < s; ++i) c[0].push_back(i);
    return c;
  }
  const xt::xarray<std::int64_t>& a = column < 0 ? *r.position_ids : *r.bbox;
  const bool ok = column < 0 ? a.dimension() == 2 : a.dimension() == 3 && a.shape(2) == 4;
  if (!ok) {
    throw InputError(fmt::format("{}: expected {}, got shape {}", what,
                                 column < 0 ? "positions [b, s]" : "boxes [b, s, 4]",
                                 shape_text({a.shape().begin(), a.shape().end()})));
  }
  if (a.shape(1) > static_cast<std::size_t>(kMaxLayoutBucketTokens)) {
    throw InputError(
        fmt::format("{}: {} tokens per row; at most {}", what, a.shape(1), kMaxLayoutBucketTokens));
  }
  c.resize(a.shape(0));
  for (std::size_t b = 0; b < a.shape(0); ++b) {
    for (std::size_t s = 0; s < a.shape(1); ++s) {
      c[b].push_back(check(column < 0 ? a(b, s) : a(b, s, static_cast<std::size_t>(column)), b, s));
    }
  }
  return c;
}

// A learned weight [heads, buckets], checked.
std::shared_ptr<const xt::xarray<double>> weight(const xt::xarray<double>& w, int buckets,
                                                 const char* name) {
  if (w.dimension() != 2 || w.shape(1) != static_cast<std::size_t>(buckets) || w.shape(0) == 0) {
    throw InputError(
        fmt::format("{}: expected a weight (heads, {}) (nn.Linear(buckets, heads)), "
                    "got shape {}",
                    name, buckets, shape_text({w.shape().begin(), w.shape().end()})));
  }
  for (std::size_t k = 0; k < w.size(); ++k) {
    if (!std::isfinite(w.data()[k])) {
      throw InputError(
          fmt::format("{}: entry ({}, {}) is not finite", name, k / w.shape(1), k % w.shape(1)));
    }
  }
  return std::make_shared<const xt::xarray<double>>(w);
}

// The bucket of every offset d, as a table over [-md, md]: beyond max_distance every
// offset shares the last bucket of its side (HF's min(val_if_large, num_buckets - 1)),
// so clamping d to +-md first gives the same bucket.
class BucketLookup {
 public:
  BucketLookup(int buckets, int max_distance) : md_(max_distance) {
    lut_.resize(2 * static_cast<std::size_t>(md_) + 1);
    for (std::int64_t d = -md_; d <= md_; ++d) {
      lut_[static_cast<std::size_t>(d + md_)] =
          static_cast<std::int32_t>(t5_bucket(d, true, buckets, max_distance));
    }
  }
  std::int32_t operator()(std::int64_t d) const {
    return lut_[static_cast<std::size_t>(std::clamp<std::int64_t>(d, -md_, md_) + md_)];
  }

 private:
  std::int64_t md_;
  std::vector<std::int32_t> lut_;
};

}  // namespace

Table layout_bucket_table(const LayoutBucketRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const bool boxes = r.axis != LayoutAxis::positions;
  // Which inputs go with the axis.
  if (boxes) {
    if (!r.bbox) throw UsageError(fmt::format("bbox: needed for axis {}", axis_name(r.axis)));
    if (r.position_ids || r.seq_len) {
      throw UsageError(fmt::format("{}: is for axis 1d (boxes give axis {})",
                                   r.position_ids ? "position_ids" : "seq_len", axis_name(r.axis)));
    }
  } else {
    if (r.bbox) throw UsageError("bbox: needs axis x, y or xy");
    if (r.position_ids.has_value() == r.seq_len.has_value()) {
      throw UsageError("seq_len/position_ids: give one of them for axis 1d");
    }
  }
  if (r.axis == LayoutAxis::xy && (!r.bias_table || !r.bias_table_y)) {
    throw UsageError(
        "axis xy: needs both weights, bias_table (x) and bias_table_y (the buckets are per axis: "
        "x or y)");
  }
  if (r.bias_table_y && r.axis != LayoutAxis::xy) {
    throw UsageError("bias_table_y: is for axis xy only");
  }
  // Given values are in their declared ranges; the defaults are HF's.
  const int nb = r.buckets.value_or(boxes ? 64 : 32);
  const std::int64_t md = r.max_distance.value_or(boxes ? 256 : 128);
  t5_bucket(0, true, nb, static_cast<int>(md));  // the pair checked (UsageError)

  // Coordinates: one set, or x and y for xy.
  using Coords = std::vector<std::vector<std::int64_t>>;
  const int col = r.axis == LayoutAxis::y ? 3 : r.axis == LayoutAxis::positions ? -1 : 0;
  auto c1 = std::make_shared<const Coords>(coordinates(r, col));
  auto c2 = r.axis == LayoutAxis::xy ? std::make_shared<const Coords>(coordinates(r, 3)) : nullptr;
  const std::size_t B = c1->size();
  const std::size_t S = B == 0 ? 0 : (*c1)[0].size();

  Table t;
  t.attrs = {{"kind", std::string("layoutlm-bucket")},
             {"axis", std::string(axis_name(r.axis))},
             {"num_buckets", static_cast<long long>(nb)},
             {"max_distance", static_cast<long long>(md)},
             {"bidirectional", 1LL}};
  t.dataset = "/layoutlm_bucket";
  auto bucket = std::make_shared<const BucketLookup>(nb, static_cast<int>(md));
  if (!r.bias_table) {
    t.integral = true;
    t.max_value = nb - 1;
    t.spec.shape = {B, S, S};
    // rel_pos_mat = c.unsqueeze(-2) - c.unsqueeze(-1): entry (i, j) is c_j - c_i.
    t.spec.line = [c1, S, bucket](std::size_t line, double* out) {
      const std::vector<std::int64_t>& c = (*c1)[line / S];
      const std::int64_t ci = c[line % S];
      for (std::size_t j = 0; j < S; ++j) out[j] = static_cast<double>((*bucket)(c[j] - ci));
    };
    return t;
  }
  auto w1 = weight(*r.bias_table, nb, "bias_table");
  auto w2 = c2 ? weight(*r.bias_table_y, nb, "bias_table_y") : nullptr;
  const std::size_t heads = w1->shape(0);
  if (w2 && w2->shape(0) != heads) {
    throw InputError(
        fmt::format("bias_table_y: {} heads, but bias_table has {}", w2->shape(0), heads));
  }
  t.attrs.push_back({"heads", static_cast<long long>(heads)});
  t.dataset += "_bias";
  t.spec.shape = {B, heads, S, S};
  // W.t()[bucket].permute(0, 3, 1, 2): line (b, h, i), entry j is W[h, bucket(i, j)];
  // for xy the x bias plus the y bias.
  t.spec.line = [c1, c2, w1, w2, S, heads, nb, bucket](std::size_t line, double* out) {
    const std::size_t i = line % S, h = (line / S) % heads, b = line / S / heads;
    const BucketLookup& bk = *bucket;
    const double* wx = w1->data() + h * static_cast<std::size_t>(nb);
    const std::vector<std::int64_t>& c = (*c1)[b];
    for (std::size_t j = 0; j < S; ++j) out[j] = wx[bk(c[j] - c[i])];
    if (c2) {
      const double* wy = w2->data() + h * static_cast<std::size_t>(nb);
      const std::vector<std::int64_t>& y = (*c2)[b];
      for (std::size_t j = 0; j < S; ++j) out[j] += wy[bk(y[j] - y[i])];
    }
  };
  return t;
}

UdopAxis parse_udop_axis(const std::string& s) {
  if (s == "1d") return UdopAxis::positions;
  if (s == "horizontal") return UdopAxis::horizontal;
  if (s == "vertical") return UdopAxis::vertical;
  if (s == "all") return UdopAxis::all;
  throw UsageError(fmt::format("axis {}: expected 1d, horizontal, vertical or all", s));
}

namespace {

// One of UDOP's bias modules: which positions, and its bucketing.
struct UdopModule {
  UdopAxis axis;
  std::int64_t max_distance;
  double scaling;
};

// The positions of a module per row, [b][s] (one row for 1d): token indices, or box
// centres as HF's bbox[:, :, [0, 2]].mean(-1) forms them (in float32 for a float32 box).
std::vector<std::vector<double>> udop_positions(const UdopBucketRequest& r, UdopAxis axis,
                                                std::size_t s) {
  if (axis == UdopAxis::positions) {
    std::vector<double> p(s);
    for (std::size_t i = 0; i < s; ++i) p[i] = static_cast<double>(i);
    return {p};
  }
  const xt::xarray<double>& a = *r.bbox;
  const std::size_t c = axis == UdopAxis::horizontal ? 0 : 1;
  std::vector<std::vector<double>> out(a.shape(0), std::vector<double>(s));
  for (std::size_t b = 0; b < a.shape(0); ++b) {
    for (std::size_t i = 0; i < s; ++i) {
      const double lo = a(b, i, c), hi = a(b, i, c + 2);
      out[b][i] = r.bbox_f32 ? static_cast<double>((static_cast<float>(lo) + static_cast<float>(hi)) / 2.0f)
                             : (lo + hi) / 2.0;
    }
  }
  return out;
}

// trunc((p_j - p_i) * scaling) as HF's .to(torch.long), clamped to +-(md + 1) (the
// buckets are the same beyond max_distance).
std::int64_t udop_offset(double pi, double pj, double scaling, bool f32, std::int64_t md) {
  const double v = f32 ? static_cast<double>((static_cast<float>(pj) - static_cast<float>(pi)) *
                                             static_cast<float>(scaling))
                       : (pj - pi) * scaling;
  const double lim = static_cast<double>(md + 1);
  return static_cast<std::int64_t>(std::clamp(std::trunc(v), -lim, lim));
}

}  // namespace

Table udop_bucket_table(const UdopBucketRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const bool boxes = r.axis != UdopAxis::positions;
  if (boxes && !r.bbox) throw UsageError("bbox: needed for axis horizontal, vertical and all");
  if (r.bbox && r.seq_len) throw UsageError("seq_len: not with bbox (the boxes give s)");
  if (!r.bbox && !r.seq_len) throw UsageError("seq_len: needed for axis 1d without bbox");
  if (r.axis == UdopAxis::all && (r.max_distance || r.scaling_factor)) {
    throw UsageError("max_distance/scaling_factor: axis all takes each module's HF default");
  }
  if (r.axis == UdopAxis::all && r.bias_tables.size() != 3) {
    throw UsageError("axis all: needs the three weights (1d, horizontal, vertical)");
  }
  if (r.axis != UdopAxis::all && r.bias_tables.size() > 1) {
    throw UsageError("bias_table: one weight for one axis (three for axis all)");
  }
  std::vector<UdopModule> mods;
  for (UdopAxis a : {UdopAxis::positions, UdopAxis::horizontal, UdopAxis::vertical}) {
    if (r.axis != UdopAxis::all && r.axis != a) continue;
    const bool pos = a == UdopAxis::positions;
    mods.push_back({a, r.max_distance.value_or(pos ? 128 : 100),
                    r.scaling_factor.value_or(pos ? 1.0 : 100.0)});
  }
  for (const UdopModule& m : mods) {
    if (!(m.scaling > 0) || !std::isfinite(m.scaling) || m.scaling > 1e9) {
      throw UsageError(fmt::format("scaling_factor: must be above 0 and at most 1e9, got {}",
                                   m.scaling));
    }
    t5_bucket(0, true, r.buckets, static_cast<int>(m.max_distance));  // the pair checked
  }
  std::size_t B = 1, S = 0;
  if (r.bbox) {
    const xt::xarray<double>& a = *r.bbox;
    if (a.dimension() != 3 || a.shape(2) != 4 || a.shape(0) == 0 || a.shape(1) == 0) {
      throw InputError(fmt::format("bbox: expected boxes [b, s, 4], got shape {}",
                                   shape_text({a.shape().begin(), a.shape().end()})));
    }
    if (a.shape(1) > static_cast<std::size_t>(kMaxLayoutBucketTokens)) {
      throw InputError(fmt::format("bbox: {} tokens per row; at most {}", a.shape(1),
                                   kMaxLayoutBucketTokens));
    }
    for (std::size_t k = 0; k < a.size(); ++k) {
      const double v = a.data()[k];
      if (!(std::fabs(v) <= static_cast<double>(kMaxLayoutCoordinate))) {
        throw InputError(fmt::format("bbox: entry {} is {}; coordinates must be finite, within "
                                     "+-2^40",
                                     k, v));
      }
    }
    B = a.shape(0);
    S = a.shape(1);
  } else {
    S = static_cast<std::size_t>(*r.seq_len);
  }
  // Per module: positions [rows][S] and bucket lookup.
  struct Mod {
    std::vector<std::vector<double>> p;
    std::shared_ptr<const BucketLookup> lut;
    UdopModule m;
    std::shared_ptr<const xt::xarray<double>> w;  // [buckets, heads]
  };
  auto mv = std::make_shared<std::vector<Mod>>();
  std::size_t heads = 0;
  for (std::size_t k = 0; k < mods.size(); ++k) {
    Mod md{udop_positions(r, mods[k].axis, S),
           std::make_shared<const BucketLookup>(r.buckets, static_cast<int>(mods[k].max_distance)),
           mods[k], nullptr};
    if (!r.bias_tables.empty()) {
      const xt::xarray<double>& w = r.bias_tables[k];
      if (w.dimension() != 2 || w.shape(0) != static_cast<std::size_t>(r.buckets) ||
          w.shape(1) == 0 || (heads != 0 && w.shape(1) != heads)) {
        throw InputError(fmt::format(
            "bias_table: expected a weight ({}, heads) (nn.Embedding(buckets, heads)){}, got "
            "shape {}",
            r.buckets, heads != 0 ? fmt::format(" with {} heads", heads) : std::string(),
            shape_text({w.shape().begin(), w.shape().end()})));
      }
      if (!std::all_of(w.begin(), w.end(), [](double v) { return std::isfinite(v); })) {
        throw InputError("bias_table: the weight holds NaN or Inf");
      }
      heads = w.shape(1);
      md.w = std::make_shared<const xt::xarray<double>>(w);
    }
    mv->push_back(std::move(md));
  }
  const bool f32 = r.bbox_f32;
  Table t;
  const char* names[] = {"1d", "horizontal", "vertical", "all"};
  t.attrs = {{"kind", std::string("udop-bucket")},
             {"axis", std::string(names[static_cast<int>(r.axis)])},
             {"num_buckets", static_cast<long long>(r.buckets)},
             {"bidirectional", 1LL}};
  if (r.axis != UdopAxis::all) {
    t.attrs.push_back({"max_distance", static_cast<long long>(mods[0].max_distance)});
    t.attrs.push_back({"scaling_factor", mods[0].scaling});
  }
  t.dataset = "/udop_bucket";
  if (r.bias_tables.empty()) {
    const Mod& m = (*mv)[0];
    const std::size_t rows = m.p.size();
    t.integral = true;
    t.max_value = r.buckets - 1;
    t.spec.shape = {rows, S, S};
    t.spec.line = [mv, S, f32](std::size_t line, double* out) {
      const Mod& m = (*mv)[0];
      const std::vector<double>& p = m.p[line / S];
      const double pi = p[line % S];
      for (std::size_t j = 0; j < S; ++j) {
        out[j] = (*m.lut)(udop_offset(pi, p[j], m.m.scaling, f32, m.m.max_distance));
      }
    };
    return t;
  }
  t.attrs.push_back({"heads", static_cast<long long>(heads)});
  t.dataset += "_bias";
  const std::size_t rows = r.axis == UdopAxis::positions ? 1 : B;
  t.spec.shape = {rows, heads, S, S};
  // relative_attention_bias(bucket).permute(0, 3, 1, 2), summed x = bias + x over the
  // modules in order.
  t.spec.line = [mv, S, heads, f32](std::size_t line, double* out) {
    const std::size_t i = line % S, h = (line / S) % heads, b = line / S / heads;
    std::fill(out, out + S, 0.0);
    for (const Mod& m : *mv) {
      const std::vector<double>& p = m.p[m.p.size() == 1 ? 0 : b];
      const double* w = m.w->data();
      for (std::size_t j = 0; j < S; ++j) {
        const std::int64_t bk = (*m.lut)(udop_offset(p[i], p[j], m.m.scaling, f32, m.m.max_distance));
        out[j] = w[static_cast<std::size_t>(bk) * heads + h] + out[j];
      }
    }
  };
  return t;
}

}  // namespace posenc
