// Per-head entropy and mean attended distance of attention probabilities (analysis.hpp).

#include <fmt/format.h>

#include <cmath>
#include <exception>

#include "analysis/analysis_common.hpp"
#include "posenc/analysis.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

/// How far a row sum may be from 1: a few roundings of the stored type (f64 files
/// often hold probabilities computed in f32).
double sum_tolerance(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-6;
    case DType::f32:
      return 1e-4;
    default:
      return 2e-2;
  }
}

struct RowStats {
  bool masked = false;
  double entropy = 0, distance = 0;
};

/// Entropy and attended distance of one row; `qpos` is the query's position on the key
/// axis. Throws InputError, naming the row with `row()` ("probs.npy: row (0, 2, 5)"),
/// for invalid probabilities.
template <class Row>
RowStats row_stats(const Tensor& p, std::size_t at, std::size_t sk, double qpos, double tol,
                   const Row& row) {
  RowStats r;
  std::size_t nan = 0;
  double sum = 0;
  for (std::size_t j = 0; j < sk; ++j) {
    const double v = p.get(at + j);
    if (std::isnan(v)) {
      ++nan;
      continue;
    }
    if (v < 0 || !std::isfinite(v)) {
      throw InputError(fmt::format("{} holds {}, not a probability", row(), v));
    }
    sum += v;
    if (v > 0) r.entropy -= v * std::log(v);
    r.distance += v * std::fabs(qpos - static_cast<double>(j));
  }
  if (nan == sk || (nan == 0 && sum == 0)) {
    r.masked = true;
    return r;
  }
  if (nan > 0) throw InputError(fmt::format("{} is partly NaN", row()));
  if (std::fabs(sum - 1.0) > tol) {
    throw InputError(fmt::format("{} sums to {}, not 1 (tolerance {})", row(), sum, tol));
  }
  return r;
}

/// [b, h, sq, sk] of a probability tensor of rank 2-4 (missing axes have extent 1).
struct ProbsShape {
  std::size_t rank = 0, nb = 1, nh = 1, sq = 0, sk = 0;
};

ProbsShape probs_shape(const Tensor& probs, const std::string& what) {
  if (!is_float(probs.dtype())) {
    throw InputError(
        fmt::format("{}: expected float probabilities, got {}", what, dtype_name(probs.dtype())));
  }
  const Shape& sh = probs.shape();
  if (sh.size() < 2 || sh.size() > 4) {
    throw InputError(fmt::format("{}: expected [b, h, sq, sk], [h, sq, sk] or [sq, sk], got {}",
                                 what, shape_str(sh)));
  }
  ProbsShape ps;
  ps.rank = sh.size();
  ps.nb = ps.rank == 4 ? sh[0] : 1;
  ps.nh = ps.rank >= 3 ? sh[ps.rank - 3] : 1;
  ps.sq = sh[ps.rank - 2];
  ps.sk = sh[ps.rank - 1];
  return ps;
}

struct HeadMean {
  double entropy = 0, distance = 0;
  std::size_t rows = 0;
};

/// The means over batches and query rows of head `h`, summed in order.
HeadMean head_mean(const Tensor& probs, const ProbsShape& ps, std::size_t h,
                   const std::string& what) {
  const double tol = sum_tolerance(probs.dtype());
  HeadMean m;
  for (std::size_t b = 0; b < ps.nb; ++b) {
    for (std::size_t i = 0; i < ps.sq; ++i) {
      auto row = [&] {
        return ps.rank == 4   ? fmt::format("{}: row ({}, {}, {})", what, b, h, i)
               : ps.rank == 3 ? fmt::format("{}: row ({}, {})", what, h, i)
                              : fmt::format("{}: row ({})", what, i);
      };
      const std::size_t at = ((b * ps.nh + h) * ps.sq + i) * ps.sk;
      const double qpos = static_cast<double>(i + ps.sk) - static_cast<double>(ps.sq);
      const RowStats s = row_stats(probs, at, ps.sk, qpos, tol, row);
      if (s.masked) continue;
      m.entropy += s.entropy;
      m.distance += s.distance;
      ++m.rows;
    }
  }
  if (m.rows > 0) {
    m.entropy /= static_cast<double>(m.rows);
    m.distance /= static_cast<double>(m.rows);
  } else {
    m.entropy = m.distance = std::nan("");
  }
  return m;
}

Figure attention_figure(const std::vector<double>& head, const std::vector<double>& entropy,
                        const std::vector<double>& distance, const ProbsShape& ps,
                        const std::string& what) {
  LinePanel pe, pd;
  pe.title = fmt::format("attention entropy per head: {}", what);
  pe.subtitle = fmt::format("mean over {} batch(es) x {} queries, {} keys; uniform = {:.3g} nats",
                            ps.nb, ps.sq, ps.sk, std::log(static_cast<double>(ps.sk)));
  pe.xlabel = "head";
  pe.ylabel = "entropy (nats)";
  pe.series.push_back(PlotSeries{"", head, entropy, true, 0, 0});
  pd.title = "mean attended distance per head";
  pd.xlabel = "head";
  pd.ylabel = "Σ p |i - j| (tokens)";
  pd.series.push_back(PlotSeries{"", head, distance, true, 0, 1});
  Figure f;
  f.panels.push_back(std::move(pe));
  f.panels.push_back(std::move(pd));
  return f;
}

}  // namespace

AnalysisTable attention_head_stats(const Tensor& probs, const std::string& what) {
  const ProbsShape ps = probs_shape(probs, what);
  std::vector<double> head(ps.nh), entropy(ps.nh), distance(ps.nh), rows(ps.nh);
  // One head per work item: results do not depend on threads. Errors are kept per head
  // and the first one is thrown after the loop (exceptions must not leave the region).
  std::vector<std::exception_ptr> errors(ps.nh);
  const auto heads = static_cast<std::ptrdiff_t>(ps.nh);
#pragma omp parallel for schedule(dynamic)
  for (std::ptrdiff_t hh = 0; hh < heads; ++hh) {
    const auto h = static_cast<std::size_t>(hh);
    try {
      const HeadMean m = head_mean(probs, ps, h, what);
      head[h] = static_cast<double>(h);
      entropy[h] = m.entropy;
      distance[h] = m.distance;
      rows[h] = static_cast<double>(m.rows);
    } catch (...) {
      errors[h] = std::current_exception();
    }
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  Attrs attrs{{"kind", std::string("attention-stats")},
              {"source", what},
              {"entropy_unit", std::string("nats")}};
  AnalysisTable t = analysis_detail::make_table({"head", "entropy", "mean_distance", "rows"},
                                                {head, entropy, distance, rows}, std::move(attrs));
  t.figure = attention_figure(head, entropy, distance, ps, what);
  return t;
}

}  // namespace posenc
