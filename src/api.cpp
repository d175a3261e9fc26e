// The xtensor face of the library (posenc.hpp): tables evaluated into xtensor
// containers, RoPE in place on xtensor data.

#include "posenc/posenc.hpp"

#include <algorithm>

#include <xtensor/xview.hpp>

namespace posenc {

namespace {

xt::xarray<std::int64_t> integral(const Table& t) {
  return xt::cast<std::int64_t>(evaluate_table(t));
}

// The variant for a tensor: head dim from the shape when not given, and the sequence
// length dynamic NTK and LongRoPE need from the positions.
RopeFreqs freqs_for(RopeParams p, const Shape& shape, const Axes& axes, const Positions& pos) {
  const auto d = shape[static_cast<std::size_t>(axes.index('d'))];
  const auto s = static_cast<std::int64_t>(shape[static_cast<std::size_t>(axes.index('s'))]);
  if (p.head_dim == 0) p.head_dim = static_cast<int>(d);
  if (p.seq_len == 0) {
    p.seq_len = pos.ids.empty() ? pos.start + std::max<std::int64_t>(s, 1)
                                : pos.start + *std::max_element(pos.ids.begin(), pos.ids.end()) + 1;
  }
  return compute_rope_freqs(p);
}

template <class T>
void rotate_in_place(T* data, const Shape& shape, const std::string& axes_text,
                     const RopeParams& p, const Positions& pos, const RopeApplyOptions& opt) {
  const Axes axes = resolve_axes(axes_text, shape.size(), "input");
  const RopeFreqs f = freqs_for(p, shape, axes, pos);
  RopeApplier ap(shape, dtype_of<T>(), axes, f, pos, opt, dtype_of<T>(), "input");
  // Each vector is read whole before its rotation is stored, so source and
  // destination may be the same memory.
  ap.rows(data, data, 0, shape.empty() ? 1 : shape[0]);
}

}  // namespace

namespace rope {
xt::xtensor<double, 1> inv_freq(const RopeParams& p) {
  const RopeFreqs f = compute_rope_freqs(p);
  return xt::adapt(f.inv_freq, {f.inv_freq.size()});
}
}  // namespace rope

namespace table {
xt::xarray<double> sinusoidal(const SinusoidalRequest& r) {
  return evaluate_table(sinusoidal_table(r));
}
xt::xarray<double> rope(const RopeTableRequest& r) { return evaluate_table(rope_table(r)); }
xt::xarray<double> rope2d(const Rope2dRequest& r) { return evaluate_table(rope2d_table(r)); }
xt::xarray<double> alibi(const AlibiRequest& r) { return evaluate_table(alibi_table(r)); }
xt::xarray<std::int64_t> relative(const RelativeRequest& r) {
  if (r.embeddings) {
    throw UsageError(
        "embeddings: table::relative returns the index (the gathered rows: relative_table)");
  }
  return integral(relative_table(r));
}
xt::xarray<double> complex_order(const ComplexOrderRequest& r) {
  return evaluate_table(complex_order_table(r));
}
xt::xarray<double> reformer_axial(const AxialPositionsRequest& r) {
  return evaluate_table(axial_positions_table(r));
}
xt::xarray<double> cpmant_buckets(const CpmAntBucketRequest& r) {
  return evaluate_table(cpmant_bucket_table(r));
}
xt::xarray<double> layoutlm_buckets(const LayoutBucketRequest& r) {
  return evaluate_table(layout_bucket_table(r));
}
xt::xarray<double> xl_relative(const XlRelativeRequest& r) {
  return evaluate_table(xl_relative_table(r));
}

xt::xarray<double> funnel_relative(const FunnelRelativeRequest& r) {
  return evaluate_table(funnel_relative_table(r));
}

xt::xarray<double> funnel_factorized(const FunnelFactorizedRequest& r) {
  return evaluate_table(funnel_factorized_table(r));
}
xt::xarray<std::int64_t> deberta_buckets(const DebertaBucketRequest& r) {
  return integral(deberta_bucket_table(r));
}
xt::xarray<double> window_index(const WindowIndexRequest& r) {
  return evaluate_table(window_index_table(r));
}
xt::xarray<double> levit_index(const LevitIndexRequest& r) {
  return evaluate_table(levit_index_table(r));
}
xt::xarray<double> swinv2_coords(const SwinV2CoordsRequest& r) {
  return evaluate_table(swinv2_coords_table(r));
}
xt::xarray<double> detr_sine(const DetrSineRequest& r) { return evaluate_table(detr_sine_table(r)); }
xt::xarray<double> fairseq_sinusoidal(const FairseqSinusoidalRequest& r) {
  return evaluate_table(fairseq_sinusoidal_table(r));
}
xt::xarray<std::int64_t> t5_buckets(const T5BucketRequest& r) {
  return integral(t5_bucket_table(r));
}

std::pair<xt::xtensor<double, 2>, xt::xtensor<double, 2>> rope_cos_sin(const RopeParams& p,
                                                                       std::int64_t positions,
                                                                       std::int64_t start) {
  RopeTableRequest r;
  r.rope = p;
  r.positions = positions;
  r.where.start = start;
  r.emit = RopeEmit::cos_sin;
  const xt::xarray<double> both = evaluate_table(rope_table(r));  // [2, N, R]
  return {xt::view(both, 0), xt::view(both, 1)};
}
}  // namespace table

void apply_rope(float* data, const Shape& shape, const std::string& axes, const RopeParams& p,
                const Positions& pos, const RopeApplyOptions& opt) {
  rotate_in_place(data, shape, axes, p, pos, opt);
}

void apply_rope(double* data, const Shape& shape, const std::string& axes, const RopeParams& p,
                const Positions& pos, const RopeApplyOptions& opt) {
  rotate_in_place(data, shape, axes, p, pos, opt);
}

Tensor apply_rope(const Tensor& x, const std::string& axes_text, const RopeParams& p, DType out,
                  const Positions& pos, const RopeApplyOptions& opt) {
  const Axes axes = resolve_axes(axes_text, x.ndim(), "input");
  return apply_rope(x, axes, freqs_for(p, x.shape(), axes, pos), pos, opt, out);
}

}  // namespace posenc
