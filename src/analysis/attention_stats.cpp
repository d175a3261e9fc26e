// Per-head entropy and mean attended distance of attention probabilities (analysis.hpp).

#include <fmt/format.h>

#include <cmath>

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
/// axis. Throws InputError (naming the row via `where`) for invalid probabilities.
template <class Where>
RowStats row_stats(const Tensor& p, std::size_t at, std::size_t sk, double qpos, double tol,
                   const Where& where) {
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
      throw InputError(
          fmt::format("{}: row {} holds {}, not a probability", where.what, where(), v));
    }
    sum += v;
    if (v > 0) r.entropy -= v * std::log(v);
    r.distance += v * std::fabs(qpos - static_cast<double>(j));
  }
  if (nan == sk || (nan == 0 && sum == 0)) {
    r.masked = true;
    return r;
  }
  if (nan > 0) {
    throw InputError(fmt::format("{}: row {} is partly NaN", where.what, where()));
  }
  if (std::fabs(sum - 1.0) > tol) {
    throw InputError(
        fmt::format("{}: row {} sums to {}, not 1 (tolerance {})", where.what, where(), sum, tol));
  }
  return r;
}

}  // namespace

AnalysisTable attention_head_stats(const Tensor& probs, const std::string& what) {
  if (!is_float(probs.dtype())) {
    throw InputError(
        fmt::format("{}: expected float probabilities, got {}", what, dtype_name(probs.dtype())));
  }
  const Shape& sh = probs.shape();
  if (sh.size() < 2 || sh.size() > 4) {
    throw InputError(fmt::format("{}: expected [b, h, sq, sk], [h, sq, sk] or [sq, sk], got {}",
                                 what, shape_str(sh)));
  }
  const std::size_t r = sh.size();
  const std::size_t nb = r == 4 ? sh[0] : 1, nh = r >= 3 ? sh[r - 3] : 1;
  const std::size_t sq = sh[r - 2], sk = sh[r - 1];
  const double tol = sum_tolerance(probs.dtype());
  std::vector<double> head(nh), entropy(nh), distance(nh), rows(nh);
  const auto heads = static_cast<std::ptrdiff_t>(nh);
  // One head per work item, rows summed in order: results do not depend on threads.
  // Errors are kept per head and the first one is thrown after the loop.
  std::vector<std::string> errors(nh);
#pragma omp parallel for schedule(dynamic)
  for (std::ptrdiff_t hh = 0; hh < heads; ++hh) {
    const auto h = static_cast<std::size_t>(hh);
    double e = 0, dist = 0;
    std::size_t used = 0;
    try {
      for (std::size_t b = 0; b < nb; ++b) {
        for (std::size_t i = 0; i < sq; ++i) {
          struct {
            const std::string& what;
            std::size_t b, h, i, rank;
            std::string operator()() const {
              return rank == 4   ? fmt::format("({}, {}, {})", b, h, i)
                     : rank == 3 ? fmt::format("({}, {})", h, i)
                                 : fmt::format("({})", i);
            }
          } where{what, b, h, i, r};
          const std::size_t at = ((b * nh + h) * sq + i) * sk;
          const double qpos = static_cast<double>(i + sk) - static_cast<double>(sq);
          const RowStats s = row_stats(probs, at, sk, qpos, tol, where);
          if (s.masked) continue;
          e += s.entropy;
          dist += s.distance;
          ++used;
        }
      }
    } catch (const InputError& err) {
      errors[h] = err.what();
    }
    head[h] = static_cast<double>(h);
    entropy[h] = used ? e / static_cast<double>(used) : std::nan("");
    distance[h] = used ? dist / static_cast<double>(used) : std::nan("");
    rows[h] = static_cast<double>(used);
  }
  for (const auto& e : errors) {
    if (!e.empty()) throw InputError(e);
  }
  Attrs attrs{{"kind", std::string("attention-stats")},
              {"source", what},
              {"entropy_unit", std::string("nats")}};
  AnalysisTable t = analysis_detail::make_table({"head", "entropy", "mean_distance", "rows"},
                                                {head, entropy, distance, rows}, std::move(attrs));
  LinePanel pe, pd;
  pe.title = fmt::format("attention entropy per head: {}", what);
  pe.subtitle = fmt::format("mean over {} batch(es) x {} queries, {} keys; uniform = {:.3g} nats",
                            nb, sq, sk, std::log(static_cast<double>(sk)));
  pe.xlabel = "head";
  pe.ylabel = "entropy (nats)";
  pe.series.push_back(PlotSeries{"", head, entropy, true, 0, 0});
  pd.title = "mean attended distance per head";
  pd.xlabel = "head";
  pd.ylabel = "Σ p |i - j| (tokens)";
  pd.series.push_back(PlotSeries{"", head, distance, true, 0, 1});
  t.figure.panels.push_back(std::move(pe));
  t.figure.panels.push_back(std::move(pd));
  return t;
}

}  // namespace posenc
