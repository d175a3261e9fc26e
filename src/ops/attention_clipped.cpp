// Phi-4-multimodal audio's clipped-distance bias (attention_clipped.hpp): options checked.
#include "ops/attention_clipped.hpp"

#include <fmt/format.h>

#include "posenc/error.hpp"

namespace posenc::attention_detail {

std::int64_t clipped_distance(const AttentionOptions& opt) {
  const auto rows = static_cast<std::int64_t>(opt.clipped_bias->shape()[0]);
  return opt.clipped_symmetric ? rows : rows / 2;
}

void check_clipped(const Geometry& g, const AttentionOptions& opt) {
  if (!opt.clipped_bias) {
    if (opt.clipped_symmetric) throw UsageError("clipped_symmetric: needs clipped_bias");
    return;
  }
  if (opt.t5_bias) {
    throw UsageError("clipped_bias and t5_bias: one relative bias table at a time");
  }
  const Tensor& t = *opt.clipped_bias;
  require_float(t.dtype(), "clipped_bias");
  if (t.ndim() != 2 || t.shape()[1] != g.hq || t.shape()[0] == 0 ||
      (!opt.clipped_symmetric && t.shape()[0] % 2 != 0)) {
    throw InputError(fmt::format("clipped_bias: expected shape ({}, {}) ([{}, heads]), got {}",
                                 opt.clipped_symmetric ? "M" : "2M", g.hq,
                                 opt.clipped_symmetric ? "M" : "2M", shape_str(t.shape())));
  }
  const std::int64_t m = clipped_distance(opt);
  if (opt.clipped_symmetric && static_cast<std::int64_t>(g.sk) > m) {
    throw InputError(fmt::format(
        "clipped_bias: a symmetric table of {} rows has no row for distance -{}, which "
        "keys {} or more before a query need ({} keys; HF indexes past the table there)",
        m, m, m, g.sk));
  }
}

}  // namespace posenc::attention_detail
