#pragma once
// The decomposed relative positions of SAM, SAM-HQ, ViTDet and GOT-OCR2 as an attention
// score term (HF SamVisionAttention.add_decomposed_rel_pos and get_rel_pos): queries
// and keys on 2-D grids, and score (i, j) gains q_i.Rh[row offset] + q_i.Rw[column
// offset]. The options are checked here (check_decomposed), the tables resized and the
// offsets indexed once per run (Decomposed::from), and each query's terms computed when
// its work item begins (Decomposed::row); the kernel adds them (attention_kernel.cpp).
// Internal to the library.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/attention_geometry.hpp"
#include "posenc/ops/attention.hpp"

namespace posenc::attention_detail {

/// Checks the tables and grids of `opt` against Q and K (g.sq, g.sk, g.d) and sets
/// g.dec_cols: UsageError for a grid without tables, one table alone or no query grid;
/// InputError for a grid that does not hold the queries or keys or a table that is not
/// [L >= 1, d] floats.
void check_decomposed(Geometry& g, const AttentionOptions& opt);

/// The gradient of a table of `len` rows from `grad`, the gradient of its resized rows
/// [n, d] (Decomposed's rh or rw): the transpose of the linear resize, each resized row's
/// gradient added to its two source rows by their weights, rows in order (float64).
std::vector<double> resized_grad(const std::vector<double>& grad, std::size_t len,
                                 std::size_t d);

/// The term of a run: the tables resized to 2 max(q, k) - 1 rows (float64) and, per
/// (query coordinate, key coordinate) of each axis, the row of the resized table.
struct Decomposed {
  std::size_t qw = 0, kh = 0, kw = 0, d = 0;  // kh == 0: off
  std::vector<double> rh, rw;                 // [2 max(qh, kh) - 1, d], [2 max(qw, kw) - 1, d]
  std::vector<std::int32_t> ih, iw;           // [qh][kh] and [qw][kw]: rows of rh and rw

  bool on() const { return kh > 0; }
  /// The terms of one query: kh height terms then kw width terms.
  std::size_t cols() const { return kh + kw; }
  /// The term of options checked by check_decomposed (off when they have no tables).
  static Decomposed from(const Geometry& g, const AttentionOptions& opt);

  /// The terms of query `i` (row i / qw, column i % qw of its grid) whose d values are
  /// `q`: out[c] = q.Rh[ih[i / qw][c]] for the kh key rows c, then out[kh + c] =
  /// q.Rw[iw[i % qw][c]] for the kw key columns, each summed in float64 over d in order.
  template <class T>
  void row(const T* q, std::size_t i, T* out) const {
    const std::size_t a = i / qw, b = i % qw;
    auto dot = [&](const std::vector<double>& table, std::int32_t r) {
      const double* t = table.data() + static_cast<std::size_t>(r) * d;
      double acc = 0;
      for (std::size_t c = 0; c < d; ++c) acc += static_cast<double>(q[c]) * t[c];
      return static_cast<T>(acc);
    };
    for (std::size_t c = 0; c < kh; ++c) out[c] = dot(rh, ih[a * kh + c]);
    for (std::size_t c = 0; c < kw; ++c) out[kh + c] = dot(rw, iw[b * kw + c]);
  }
};

}  // namespace posenc::attention_detail
