#pragma once
/// \file
/// Complex-valued word-order embeddings (Wang et al. 2020, "Encoding word order in
/// complex embeddings", ICLR): word j at position pos is the complex vector
/// r_j * exp(i (w_j * pos + theta_j)), with amplitude r_j, frequency w_j and initial
/// phase theta_j per dimension. `posenc table complex-order` writes its real part
/// r cos(w pos + theta) and imaginary part r sin(w pos + theta).

#include <cstdint>
#include <optional>
#include <xtensor/xarray.hpp>

#include "posenc/encodings/tables.hpp"

namespace posenc {

/// `posenc table complex-order`: --frequency, --amplitude, --phase, --positions,
/// --start, --input-ids.
struct ComplexOrderRequest {
  /// w: one vector [D] (the same for every position), or a table [V, D] of one vector
  /// per word, read by input_ids.
  xt::xarray<double> frequency;
  std::optional<xt::xarray<double>> amplitude;  ///< r, the shape of frequency; default 1
  std::optional<xt::xarray<double>> phase;      ///< theta, the shape of frequency; default 0
  /// Positions start .. start + N - 1 (vectors [D] only).
  std::optional<std::int64_t> positions;
  std::int64_t start = 0;  ///< position of the first token or row, |start| <= 2^52
  /// Token ids [b, s] into tables [V, D]: token (b, s) at position start + s.
  std::optional<xt::xarray<std::int64_t>> input_ids;
};

/// [2, N, D] for vectors, [2, b, s, D] for token ids: the real parts, then the
/// imaginary parts, each r cos(w p + theta) and r sin(w p + theta) with the angle formed
/// in float64 as w * p + theta. UsageError for bad counts or combinations, InputError
/// (naming frequency, amplitude, phase, input_ids) for shapes that do not match,
/// non-finite values and ids outside the table.
Table complex_order_table(const ComplexOrderRequest& r);

}  // namespace posenc
