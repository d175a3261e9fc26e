#pragma once
/// \file
/// The properties that explain positional encodings, as tables you can write and plot:
/// RoPE's long-term decay, the wavelengths of its frequency pairs under each scaling
/// variant, a check of its relative-position property on real q/k, and per-head
/// entropy and attended distance of attention probabilities.
///
/// Every analysis returns an AnalysisTable: a 2-D float64 tensor with one named column
/// per quantity, the parameters used (recorded with the output, the column names among
/// them as the attribute "columns") and a Figure that draws it.

#include <cstdint>
#include <string>
#include <vector>

#include "posenc/encodings/rope.hpp"
#include "posenc/ops/compare.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/plot.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// What an analysis computes: a float64 table with named columns, and its figure.
struct AnalysisTable {
  Tensor data;                       ///< f64 [rows, columns.size()]
  std::vector<std::string> columns;  ///< name of each column
  Attrs attrs;                       ///< parameters, then "columns" (comma-joined names)
  Figure figure;                     ///< the picture of the table
};

/// One RoPE variant of a comparison, with its legend label (e.g. "base=500000", "yarn").
struct RopeCurve {
  std::string label;  ///< the legend text and the column suffix [LABEL]
  RopeFreqs freqs;    ///< the variant (compute_rope_freqs)
};

/// The decay quantities of `rope_decay`.
enum class DecayQuantity {
  bound,   ///< the RoFormer upper bound (1/n) Σ_j |S_j|
  mean_qk  ///< the mean q·k of unit vectors (1/n) Σ_k cos(m θ_k)
};

/// Parses a comma list of "bound" and "mean-qk" (order kept). Throws UsageError naming
/// `--emit` for anything else or an empty list.
std::vector<DecayQuantity> parse_decay_quantities(const std::string& list);

/// RoPE's long-term decay over relative distances m, for each curve with n = R/2
/// frequency pairs θ_0..θ_{n-1} (attention factors are not applied):
/// - bound(m) = (1/n) Σ_{j=1..n} |S_j|, S_j = Σ_{k<j} e^{i m θ_k}: the RoFormer upper bound
///   of |q·k| relative to max_j |h_{j+1} - h_j| (Su et al. 2021, §3.4.3);
/// - mean_qk(m) = (1/n) Σ_k cos(m θ_k): q·k of q = k a random unit vector in the rotary
///   dims, on average (and exactly for the unit vector with equal entries).
/// Columns: "distance", then per curve and quantity "bound[LABEL]" / "mean_qk[LABEL]".
/// Throws UsageError for an empty curve or distance list or a negative distance.
AnalysisTable rope_decay(const std::vector<RopeCurve>& curves,
                         const std::vector<std::int64_t>& distances,
                         const std::vector<DecayQuantity>& quantities);

/// Per frequency pair j of each curve: the wavelength 2π/θ_j in tokens (inf for θ_j = 0)
/// and the number of full turns L θ_j / 2π within the trained context L = `trained` and
/// the target context L = `target`. Columns: "pair", then per curve
/// "wavelength[LABEL]", "rotations_trained[LABEL]", "rotations_target[LABEL]". The
/// figure shows the wavelengths on a log axis with both context lengths. All curves
/// must have the same number of pairs (UsageError); lengths must be positive.
AnalysisTable rope_wavelengths(const std::vector<RopeCurve>& curves, std::int64_t trained,
                               std::int64_t target);

/// `posenc analyze relative`: --axes, --start, --shifts, --precision, --tol.
struct RelativeOptions {
  std::string axes;                                 ///< shared by q and k; empty = by rank
  std::int64_t start = 0;                           ///< position of token 0 (of q and of k)
  std::vector<std::int64_t> shifts{1, 100, 10000};  ///< the shifts t compared with 0
  Precision precision = Precision::f64;             ///< rotation arithmetic (see ops/rope.hpp)
  double tolerance = 0;  ///< on the relative deviation; 0 = default_tolerance
};

/// The result of `rope_relative_check`.
struct RelativeCheck {
  AnalysisTable table;   ///< per shift and diagonal i - j: the largest deviations
  double max_abs = 0;    ///< largest |score change|
  double max_rel = 0;    ///< largest |score change| / (|q| |k|)
  double tolerance = 0;  ///< the bound max_rel was held to (given or default_tolerance)
  bool pass = true;      ///< max_rel <= tolerance
  // Where max_rel occurs:
  std::int64_t at_b = 0;      ///< batch
  std::int64_t at_h = 0;      ///< query head
  std::int64_t at_i = 0;      ///< query token
  std::int64_t at_j = 0;      ///< key token
  std::int64_t at_shift = 0;  ///< shift
  std::size_t scores = 0;     ///< score pairs compared (per shift)
};

/// The default tolerance on the relative deviation, 4 ε (A + D): ε is the unit roundoff
/// of the arithmetic (2^-53 or 2^-24), A the largest angle used (largest position times
/// the largest frequency), D the head dimension. Each of the four angles a comparison
/// involves (q and k, at shift 0 and t) is rounded by at most ε A, a score moves by at
/// most |q| |k| times the largest angle error, and D ε covers cos, sin and the dot
/// products.
double relative_default_tolerance(const RopeFreqs& f, Precision p, std::int64_t max_position);

/// Checks RoPE's relative-position property on real q and k (before rotation): the
/// score of query vector i and key vector j, rotated to positions start + i and
/// start + j, must not change when both positions move by a shift t, that is, scores
/// along each diagonal i - j of the score matrix of fixed content are constant (to
/// rounding). For every batch, head (key head h / (Hq/Hk) for grouped queries), i, j
/// and shift, compares the f64 dot products of the rotated vectors with those at
/// shift 0, relative to |q_i| |k_j| after rotation. Columns: "distance" (i - j),
/// "max_abs_dev", "max_rel_dev" over everything on that diagonal. Shapes as in
/// attention (rank 2-4, s and d required); throws InputError for mismatched shapes and
/// non-finite values, UsageError for a negative start or shift.
RelativeCheck rope_relative_check(const Tensor& q, const Tensor& k, const RopeFreqs& f,
                                  const RelativeOptions& opt);

/// Per head of an attention probability tensor [b, h, sq, sk] (rank 3: [h, sq, sk];
/// rank 2: one head [sq, sk]), averaged over batches and query rows: the entropy
/// -Σ_j p_ij ln p_ij (nats) and the mean attended distance Σ_j p_ij |i + sk - sq - j|
/// (queries aligned bottom-right, as `posenc attention`). Fully masked rows (all 0 or
/// all NaN) are left out. Columns: "head", "entropy", "mean_distance", "rows" (rows
/// averaged). Throws InputError naming `what` and the row for negative or partly NaN
/// probabilities and row sums away from 1 (beyond 1e-6 for f64, 1e-4 for f32, 2e-2 for
/// f16/bf16), for non-float tensors and ranks outside 2-4.
AnalysisTable attention_head_stats(const Tensor& probs, const std::string& what);

/// The breakdown of a comparison (CompareResult::breakdown, which must be set) as a
/// table: one row per group in C order over the breakdown's axes, with columns: the
/// axes' names (`names`, one per axis; the cells hold A's index along it, or the pair
/// index), "count" (elements compared), "mismatches", "max_abs", "max_rel", "max_ulp",
/// "max_tol_ratio" (see GroupStats; NaN where a group has no value). Attributes: the
/// rule (rtol, atol, max_ulp when set, ulp_type), "by" (the names comma-joined), `extra`,
/// then "columns". The figure: for one axis, line charts of max |a - b| (log axis when
/// some value is positive) and of the mismatches along it; for two, heatmaps of the
/// mismatches and of max |a - b| (log colours), rows the first axis, columns the second;
/// for more, none.
AnalysisTable compare_breakdown_table(const CompareResult& r, const std::vector<std::string>& names,
                                      Attrs extra = {});

}  // namespace posenc
