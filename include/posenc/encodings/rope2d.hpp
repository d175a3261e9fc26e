#pragma once
/// \file
/// Axial 2-D RoPE for an H x W grid of tokens in row-major order (RoPE-ViT's axial
/// form, the 2-D seed): token idx sits at x = idx % W, y = idx / W; x and y each get
/// D/4 frequencies f_k = 1 / base^(4k / D), so a token has D/2 angles
/// [x f_0 .. x f_{D/4-1} | y f_0 .. y f_{D/4-1}] (order xy) or the y block first (yx).

#include <cstdint>
#include <vector>

namespace posenc {

/// The D/4 frequencies. Throws UsageError unless `dim` is a positive multiple of 4 and
/// `base` is positive.
std::vector<double> rope2d_freqs(int dim, double base);

/// The D/2 angles of token `idx` of a grid `width` tokens wide into `out`.
void rope2d_angles(std::int64_t idx, std::int64_t width, const std::vector<double>& freqs,
                   bool y_first, double* out);

}  // namespace posenc
