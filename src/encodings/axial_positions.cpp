// Reformer axial position embeddings (encodings/axial_positions.hpp).

#include "posenc/encodings/axial_positions.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

// Per axis: its side, its width and its rows [n_a][d_a] (row-major copies).
struct AxialWeights {
  std::vector<std::size_t> side, width, offset;  // offset: first column in the row
  std::vector<std::vector<double>> rows;
  std::size_t hidden = 0;
};

}  // namespace

std::int64_t axial_rows(const std::vector<std::int64_t>& axial_shape) {
  const std::size_t k = axial_shape.size();
  if (k == 0 || k > kMaxAxialAxes) {
    throw UsageError(fmt::format("axial_shape: 1 to {} sides, got {}", kMaxAxialAxes, k));
  }
  std::int64_t total = 1;
  for (std::int64_t n : axial_shape) {
    if (n < 1 || n > kMaxAxialRows) {
      throw UsageError(fmt::format("axial_shape: each side must be from 1 to 2^40, got {}", n));
    }
    if (total > kMaxAxialRows / n) {
      throw UsageError(fmt::format("axial_shape: the product of ({}) passes 2^40",
                                   fmt::join(axial_shape, ", ")));
    }
    total *= n;
  }
  return total;
}

Table axial_positions_table(const AxialPositionsRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const std::size_t k = r.axial_shape.size();
  const std::int64_t total = axial_rows(r.axial_shape);
  if (r.weights.size() != k) {
    throw UsageError(
        fmt::format("weights: one per axis of axial_shape, {} expected, got {}", k, r.weights.size()));
  }
  if (r.positions && r.position_ids) {
    throw UsageError("positions: cannot be combined with position_ids");
  }
  if (r.positions && (*r.positions < 1 || *r.positions > total)) {
    throw UsageError(fmt::format(
        "positions: must be from 1 to the {} rows of axial_shape ({}), got {}", total,
        fmt::join(r.axial_shape, ", "), *r.positions));
  }

  auto axes = std::make_shared<AxialWeights>();
  for (std::size_t a = 0; a < k; ++a) {
    const xt::xarray<double>& w = r.weights[a];
    const auto n = static_cast<std::size_t>(r.axial_shape[a]);
    bool ok = w.dimension() == k + 1 && w.shape(k) >= 1;
    for (std::size_t i = 0; ok && i < k; ++i) ok = w.shape(i) == (i == a ? n : 1);
    if (!ok) {
      std::vector<std::string> want(k, "1");
      want[a] = std::to_string(n);
      want.push_back("d");
      throw InputError(fmt::format(
          "weights: the weight of axis {} must have shape ({}) (HF weights[{}]), got ({})", a,
          fmt::join(want, ", "), a, fmt::join(w.shape(), ", ")));
    }
    const std::size_t d = w.shape(k);
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (!std::isfinite(w.data()[i])) {
        throw InputError(fmt::format("weights: axis {}: entry (row {}, column {}) is not finite",
                                     a, i / d, i % d));
      }
    }
    axes->side.push_back(n);
    axes->width.push_back(d);
    axes->offset.push_back(axes->hidden);
    axes->rows.emplace_back(w.begin(), w.end());
    axes->hidden += d;
  }

  // The rows of the table each output line takes.
  auto ids = std::make_shared<std::vector<std::int64_t>>();
  Shape shape;
  if (r.position_ids) {
    const xt::xarray<std::int64_t>& p = *r.position_ids;
    if (p.dimension() != 2) {
      throw InputError(fmt::format("position_ids: expected positions [b, s], got shape ({})",
                                   fmt::join(p.shape(), ", ")));
    }
    for (std::size_t i = 0; i < p.size(); ++i) {
      const std::int64_t v = p.data()[i];
      if (v < 0 || v >= total) {
        throw InputError(fmt::format(
            "position_ids: {} at (b {}, s {}) is not a row of the {} of axial_shape ({})", v,
            i / p.shape(1), i % p.shape(1), total, fmt::join(r.axial_shape, ", ")));
      }
      ids->push_back(v);
    }
    shape = {p.shape(0), p.shape(1), axes->hidden};
  } else {
    const std::int64_t rows = r.positions.value_or(total);
    shape = {static_cast<std::size_t>(rows), axes->hidden};
  }

  Table t;
  t.attrs = {{"kind", std::string("reformer-axial")},
             {"axial_shape", fmt::format("{}", fmt::join(r.axial_shape, ","))},
             {"hidden", static_cast<long long>(axes->hidden)}};
  t.dataset = "/reformer_axial";
  t.spec.shape = shape;
  const bool by_id = r.position_ids.has_value();
  t.spec.line = [axes, ids, by_id](std::size_t line, double* out) {
    // Row p = (i_1, ..., i_k), row-major: the last axis varies fastest.
    std::size_t p = by_id ? static_cast<std::size_t>((*ids)[line]) : line;
    for (std::size_t a = axes->side.size(); a-- > 0;) {
      const std::size_t i = p % axes->side[a], d = axes->width[a];
      p /= axes->side[a];
      const double* src = axes->rows[a].data() + i * d;
      double* dst = out + axes->offset[a];
      for (std::size_t c = 0; c < d; ++c) dst[c] = src[c];
    }
  };
  return t;
}

}  // namespace posenc
