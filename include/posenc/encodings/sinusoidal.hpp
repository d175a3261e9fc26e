#pragma once
/// \file
/// Vaswani sinusoidal tables and the sine/cosine kernel every table uses.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace posenc {

/// sin and cos of `n` float64 angles, each within about one float64 ulp of the exact
/// sin/cos of the given double angle (so float32 results rounded from them are within
/// one float32 ulp of the correctly rounded value). Angles up to about 1.5e6 in
/// magnitude take a vectorised path (three-part Cody-Waite reduction by pi/2, exact for
/// such arguments, and fdlibm's kernel polynomials); larger ones use libm's sin/cos,
/// whose reduction is exact for any argument. Not parallel itself: call it per row.
void sincos_array(const double* angle, double* sin_out, double* cos_out, std::size_t n);

/// The order of sin and cos along D (--layout).
enum class SinusoidalLayout {
  interleaved,  ///< PE[p, 2i] = sin, PE[p, 2i+1] = cos (Vaswani, the seeds)
  concat        ///< [sin(p w_0..w_{D/2-1}) | cos(...)] (tensor2tensor)
};

/// The frequencies w_i = 1 / base^(2i / dim), i < dim/2, in float64. Throws UsageError
/// for an odd or non-positive `dim` or a non-positive base.
std::vector<double> sinusoidal_freqs(int dim, double base);

/// One row of the table for position `p`: `dim` values into `out`, angles p * w_i
/// formed in float64.
void sinusoidal_row(double p, const std::vector<double>& freqs, SinusoidalLayout layout,
                    double* out);

}  // namespace posenc
