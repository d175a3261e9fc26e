// Complex-order word embeddings (encodings/complex_order.hpp).

#include "posenc/encodings/complex_order.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

constexpr std::int64_t kMaxOrderPosition = std::int64_t{1} << 52;

std::string shape_text(const xt::xarray<double>::shape_type& shape) {
  std::string out;
  for (std::size_t d : shape) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "(" + out + ")";
}

void check_finite(const xt::xarray<double>& a, const char* name) {
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (!std::isfinite(a.data()[k])) {
      throw InputError(
          fmt::format("{}: value {} (flat index {}) is not finite", name, a.data()[k], k));
    }
  }
}

// The three parameter arrays of one shape, [rows, D], as float64 row-major copies.
struct Params {
  std::size_t rows = 0, dim = 0;
  std::vector<double> r, w, theta;
};

}  // namespace

Table complex_order_table(const ComplexOrderRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const xt::xarray<double>& w = r.frequency;
  const bool per_word = w.dimension() == 2;
  if (w.dimension() != 1 && !per_word) {
    throw InputError(fmt::format("frequency: expected a vector [D] or a table [V, D], got shape {}",
                                 shape_text(w.shape())));
  }
  if (w.size() == 0) {
    throw InputError(fmt::format("frequency: empty, shape {}", shape_text(w.shape())));
  }
  for (const auto& [name, a] :
       {std::pair{"amplitude", &r.amplitude}, std::pair{"phase", &r.phase}}) {
    if (*a && (*a)->shape() != w.shape()) {
      throw InputError(fmt::format("{}: shape {} differs from the frequency's {}", name,
                                   shape_text((*a)->shape()), shape_text(w.shape())));
    }
  }
  if (r.start < -kMaxOrderPosition || r.start > kMaxOrderPosition) {
    throw UsageError(fmt::format("start: must be within +-2^52, got {}", r.start));
  }
  if (per_word) {
    if (!r.input_ids) {
      throw UsageError("input_ids: needed with tables [V, D] (one vector per word)");
    }
    if (r.positions) throw UsageError("positions: cannot be combined with input_ids");
  } else {
    if (r.input_ids) {
      throw UsageError("input_ids: need tables [V, D]; vectors [D] take positions");
    }
    if (!r.positions) throw UsageError("positions: the number of rows is required");
    if (r.start + *r.positions - 1 > kMaxOrderPosition) {
      throw UsageError("start/positions: the last position passes 2^52");
    }
  }
  check_finite(w, "frequency");
  if (r.amplitude) check_finite(*r.amplitude, "amplitude");
  if (r.phase) check_finite(*r.phase, "phase");

  auto p = std::make_shared<Params>();
  p->rows = per_word ? w.shape(0) : 1;
  p->dim = per_word ? w.shape(1) : w.shape(0);
  p->w.assign(w.begin(), w.end());
  if (r.amplitude) {
    p->r.assign(r.amplitude->begin(), r.amplitude->end());
  } else {
    p->r.assign(w.size(), 1.0);
  }
  if (r.phase) {
    p->theta.assign(r.phase->begin(), r.phase->end());
  } else {
    p->theta.assign(w.size(), 0.0);
  }

  // Each line: (part, token): the word row and the position.
  auto ids = std::make_shared<std::vector<std::int64_t>>();
  std::size_t batch = 1, seq = 0;
  if (per_word) {
    const xt::xarray<std::int64_t>& a = *r.input_ids;
    if (a.dimension() != 2) {
      throw InputError(fmt::format("input_ids: expected token ids [b, s], got shape ({})",
                                   fmt::join(a.shape(), ", ")));
    }
    batch = a.shape(0);
    seq = a.shape(1);
    if (r.start + static_cast<std::int64_t>(seq) > kMaxOrderPosition) {
      throw UsageError("start: the last position passes 2^52");
    }
    for (std::size_t k = 0; k < a.size(); ++k) {
      const std::int64_t id = a.data()[k];
      if (id < 0 || static_cast<std::size_t>(id) >= p->rows) {
        throw InputError(
            fmt::format("input_ids: id {} at (b {}, s {}) is not a row of the {} "
                        "words",
                        id, k / seq, k % seq, p->rows));
      }
      ids->push_back(id);
    }
  } else {
    seq = static_cast<std::size_t>(*r.positions);
  }

  Table t;
  t.attrs = {{"kind", std::string("complex-order")},
             {"dim", static_cast<long long>(p->dim)},
             {"start", static_cast<long long>(r.start)},
             {"words", static_cast<long long>(per_word ? p->rows : 0)},
             {"parts", std::string("real, imag")}};
  t.dataset = "/complex_order";
  const std::size_t tokens = batch * seq, dim = p->dim;
  t.spec.shape = per_word ? Shape{2, batch, seq, dim} : Shape{2, seq, dim};
  const std::int64_t start = r.start;
  t.spec.line = [p, ids, tokens, seq, dim, start, per_word](std::size_t line, double* out) {
    const bool imag = line >= tokens;
    const std::size_t token = line % tokens;
    const std::size_t row = per_word ? static_cast<std::size_t>((*ids)[token]) : 0;
    const double pos = static_cast<double>(start + static_cast<std::int64_t>(token % seq));
    const double* w = p->w.data() + row * dim;
    const double* th = p->theta.data() + row * dim;
    const double* amp = p->r.data() + row * dim;
    std::vector<double> angle(dim), s(dim), c(dim);
    for (std::size_t k = 0; k < dim; ++k) {
      angle[k] = w[k] * pos + th[k];  // two roundings (-ffp-contract=off in CMakeLists.txt)
    }
    sincos_array(angle.data(), s.data(), c.data(), dim);
    const std::vector<double>& part = imag ? s : c;
    for (std::size_t k = 0; k < dim; ++k) out[k] = amp[k] * part[k];
  };
  return t;
}

}  // namespace posenc
