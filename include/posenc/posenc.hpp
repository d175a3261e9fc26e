#pragma once
/// \file
/// posenc's C++ API in one header, on xtensor: tables as `xt::xtensor`/`xt::xarray`,
/// RoPE applied to xtensor containers in place, attention, and NPY/HDF5/text I/O.
/// Link `posenc::posenc` (`find_package(posenc CONFIG)`) or `pkg-config posenc`.
///
///     posenc::RopeParams p;                       // Llama 3.1 style
///     p.head_dim = 128; p.base = 500000; p.scaling = posenc::RopeScaling::llama3;
///     p.factor = 8; p.original_max_pos = 8192;
///     auto [cos, sin] = posenc::table::rope_cos_sin(p, 4096);   // [4096, 128] each
///     xt::xtensor<float, 4> q = ...;                            // [b, h, s, d]
///     posenc::apply_rope(q, "bhsd", p);                         // in place
///
/// Values are computed in float64 and rounded once to the container's type. The
/// request structs (encodings/tables.hpp), RopeParams (encodings/rope.hpp) and
/// AttentionOptions (ops/attention.hpp) mirror the command's options one to one.
/// Errors are the typed exceptions of error.hpp; nothing prints.

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "posenc/encodings/axial_positions.hpp"
#include "posenc/encodings/complex_order.hpp"
#include "posenc/encodings/cpmant_bucket.hpp"
#include "posenc/encodings/family_sinusoids.hpp"
#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/layout_bucket.hpp"
#include "posenc/encodings/relative_attention.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/rope_ids.hpp"
#include "posenc/encodings/tables.hpp"
#include "posenc/encodings/window_index.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/add_positions.hpp"
#include "posenc/ops/attention.hpp"
#include "posenc/ops/attention_relative.hpp"
#include "posenc/ops/combine.hpp"
#include "posenc/ops/hf_attention.hpp"
#include "posenc/ops/rope.hpp"
#include "posenc/ops/rope_stream.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

// --- xtensor and Tensor -------------------------------------------------------------

/// The DType stored for element type T (float f32, double f64, integers by width;
/// f16/bf16 data is uint16 storage and has no C++ arithmetic type here).
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, bool>) return DType::b1;
  else if constexpr (std::is_same_v<T, std::int8_t>) return DType::i8;
  else if constexpr (std::is_same_v<T, std::int16_t>) return DType::i16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return DType::u8;
  else if constexpr (std::is_same_v<T, std::uint16_t>) return DType::u16;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return DType::u32;
  else {
    static_assert(std::is_same_v<T, std::uint64_t>, "no posenc dtype for this type");
    return DType::u64;
  }
}

/// A zero-copy xtensor view of `t`'s storage. T must be the stored type
/// (`dtype_of<T>() == t.dtype()`, or std::uint16_t for f16/bf16 storage); throws
/// UsageError otherwise. The view is valid while `t` lives.
template <class T>
auto adapt(Tensor& t) {
  const bool half = (t.dtype() == DType::f16 || t.dtype() == DType::bf16) &&
                    std::is_same_v<T, std::uint16_t>;
  if (!half && dtype_of<T>() != t.dtype()) {
    throw UsageError("adapt: the element type does not match the tensor's dtype " +
                     std::string(dtype_name(t.dtype())));
  }
  return xt::adapt(t.data<T>(), t.numel(), xt::no_ownership(), t.shape());
}

/// `t`'s values converted to T (floats round to nearest even, as numpy's astype).
template <class T>
xt::xarray<T> to_xarray(const Tensor& t) {
  const Tensor c = t.dtype() == dtype_of<T>() ? t.astype(t.dtype()) : t.astype(dtype_of<T>());
  xt::xarray<T> out = xt::empty<T>(c.shape());
  std::copy(c.data<T>(), c.data<T>() + c.numel(), out.data());
  return out;
}

/// A Tensor holding the values of `e` (of its value type), C order.
template <class E>
Tensor to_tensor(const xt::xexpression<E>& e) {
  using T = typename E::value_type;
  const xt::xarray<T> v = e.derived_cast();
  Tensor t(dtype_of<T>(), Shape(v.shape().begin(), v.shape().end()));
  std::copy(v.data(), v.data() + v.size(), t.data<T>());
  return t;
}

// --- tables -------------------------------------------------------------------------

namespace rope {
/// The inverse frequencies [R/2] of a RoPE variant (float64; `attention_factor` and the
/// rest of the reduced variant from compute_rope_freqs).
xt::xtensor<double, 1> inv_freq(const RopeParams& p);
}  // namespace rope

namespace table {
// Any table of `posenc table`, computed whole in float64 (see tables.hpp for shapes).
// Each throws UsageError naming the request member that is out of range.

/// `table sinusoidal`: [N, D] (sinusoidal_table).
xt::xarray<double> sinusoidal(const SinusoidalRequest& r);
/// `table rope`: the table of `r.emit` (rope_table: [R/2], [N, W], [2, N, W], ...).
xt::xarray<double> rope(const RopeTableRequest& r);
/// `table rope2d`: as rope with H * W rows (rope2d_table).
xt::xarray<double> rope2d(const Rope2dRequest& r);
/// `table alibi`: slopes [H] or a bias [H, Q, K] (alibi_table).
xt::xarray<double> alibi(const AlibiRequest& r);
/// `table relative`: the relative index [Q, K] of the window (relative_table; -1
/// outside it with zero_beyond). UsageError with `embeddings` (relative_table gathers).
xt::xarray<std::int64_t> relative(const RelativeRequest& r);
/// `table layoutlm-bucket`: LayoutLMv2/v3 buckets [b, s, s], or the bias [b, heads, s, s]
/// of learned weights (layout_bucket.hpp); buckets are exact in float64.
xt::xarray<double> layoutlm_buckets(const LayoutBucketRequest& r);
/// `table complex-order`: Wang et al.'s complex word-order embeddings, real then
/// imaginary parts, [2, N, D] or [2, b, s, D] (complex_order.hpp).
xt::xarray<double> complex_order(const ComplexOrderRequest& r);
/// `table reformer-axial`: Reformer's axial position embeddings [n_1 ... n_k, hidden],
/// [N, hidden] or [b, s, hidden] (axial_positions.hpp).
xt::xarray<double> reformer_axial(const AxialPositionsRequest& r);
/// `table cpmant-bucket`: CPM-Ant segment-aware buckets [b, q, k], or the bias
/// [b, heads, q, k] of a learned table (cpmant_bucket.hpp); buckets are exact in float64.
xt::xarray<double> cpmant_buckets(const CpmAntBucketRequest& r);
/// `table t5-bucket`: HF T5's bucket of j - i, [Q, K] (t5_bucket_table).
xt::xarray<std::int64_t> t5_buckets(const T5BucketRequest& r);
/// `table xl-relative`: the Transformer-XL / XLNet relative table R [rlen, D].
xt::xarray<double> xl_relative(const XlRelativeRequest& r);
/// `table funnel-relative`: a Funnel block's relative_shift position embeddings
/// [rows, D] (funnel_relative_table).
xt::xarray<double> funnel_relative(const FunnelRelativeRequest& r);
/// `table funnel-factorized`: one of Funnel's factorized tables phi, pi, psi, omega
/// [rows, D] (funnel_factorized_table).
xt::xarray<double> funnel_factorized(const FunnelFactorizedRequest& r);
/// `table deberta-bucket`: DeBERTa's bucketed relative positions [Q, K].
xt::xarray<std::int64_t> deberta_buckets(const DebertaBucketRequest& r);
/// Swin / BEiT window relative index [N, N], or the bias [heads, N, N] of a learned
/// table (window_index.hpp); index values are exact in float64.
xt::xarray<double> window_index(const WindowIndexRequest& r);
/// LeViT attention_bias_idxs [R_out^2, R^2], or the bias of a learned table.
xt::xarray<double> levit_index(const LevitIndexRequest& r);
/// Swin-V2 relative_coords_table [2H-1, 2W-1, 2].
xt::xarray<double> swinv2_coords(const SwinV2CoordsRequest& r);
/// DETR's sine embedding [b, 2E, H, W] (family_sinusoids.hpp).
xt::xarray<double> detr_sine(const DetrSineRequest& r);
/// fairseq / M2M-100 sinusoidal weights [N, D] or token embeddings [b, s, D].
xt::xarray<double> fairseq_sinusoidal(const FairseqSinusoidalRequest& r);

/// cos and sin [N, R] for positions start .. start + N - 1 in the pair layout of
/// `p.style` (as `posenc table rope --emit cos-sin`), scaled by the attention factor.
std::pair<xt::xtensor<double, 2>, xt::xtensor<double, 2>> rope_cos_sin(
    const RopeParams& p, std::int64_t positions, std::int64_t start = 0);
}  // namespace table

// --- RoPE on xtensor containers ---------------------------------------------------

/// Rotates every vector along axis d of `x` (f32 or f64 values, C order, any axis order
/// named by `axes`; "" = by rank) in place, by its position along axis s; the result
/// is the float64 rotation rounded once to T. `p.head_dim` 0 is taken from x. Throws
/// as apply_rope on Tensors does.
void apply_rope(float* data, const Shape& shape, const std::string& axes, const RopeParams& p,
                const Positions& pos = {}, const RopeApplyOptions& opt = {});
/// The same for float64 data.
void apply_rope(double* data, const Shape& shape, const std::string& axes, const RopeParams& p,
                const Positions& pos = {}, const RopeApplyOptions& opt = {});

/// The same on an xtensor container (xt::xtensor, xt::xarray or an adaptor in row-major
/// order).
template <class C>
void apply_rope(C& x, const std::string& axes, const RopeParams& p, const Positions& pos = {},
                const RopeApplyOptions& opt = {}) {
  if (x.layout() != xt::layout_type::row_major) {
    throw UsageError("apply_rope: the container must be in row-major (C) order");
  }
  apply_rope(x.data(), Shape(x.shape().begin(), x.shape().end()), axes, p, pos, opt);
}

/// Rotates a tensor of any float storage type (f16, bf16, f32, f64) and returns the
/// result as `out` (float64 arithmetic, rounded once).
Tensor apply_rope(const Tensor& x, const std::string& axes, const RopeParams& p, DType out,
                  const Positions& pos = {}, const RopeApplyOptions& opt = {});

// --- attention and files ------------------------------------------------------------

/// The tensors `attention` emits, as xtensor containers (those not asked for are unset).
template <class T>
struct AttentionArrays {
  std::optional<xt::xarray<T>> logits;  ///< the final scores s_ij (see ops/attention.hpp)
  std::optional<xt::xarray<T>> probs;   ///< the softmax of the logits, their shape
  std::optional<xt::xarray<T>> output;  ///< sum_j p_ij v_j, one vector per query
  std::optional<xt::xarray<double>> lse;  ///< f32 or f64 values, as the arithmetic
  Attrs attrs;  ///< the parameters used (scale, masks, biases), as recorded with outputs
};

/// Attention of q over k (and v) given as xtensor expressions of one float type (f32
/// arithmetic for float, f64 for double unless `opt.precision` says otherwise). Shapes
/// and options as `attention` on Tensors (ops/attention.hpp).
template <class EQ, class EK, class EV>
auto attention(const xt::xexpression<EQ>& q, const xt::xexpression<EK>& k,
               const xt::xexpression<EV>& v, const AttentionOptions& opt) {
  using T = typename EQ::value_type;
  const Tensor tq = to_tensor(q), tk = to_tensor(k), tv = to_tensor(v);
  AttentionResult r = attention(tq, tk, &tv, opt);
  AttentionArrays<T> out;
  auto get = [](const Tensor& t, auto& dst) {
    using D = typename std::decay_t<decltype(dst)>::value_type::value_type;
    if (t.numel() > 0 || t.ndim() > 0) dst = to_xarray<D>(t);
  };
  get(r.logits, out.logits);
  get(r.probs, out.probs);
  get(r.output, out.output);
  get(r.lse, out.lse);
  out.attrs = std::move(r.attrs);
  return out;
}

/// A tensor reference ("x.npy", "f.h5:/group/name", "x.csv", "x.json") read whole, its
/// values converted to T.
template <class T>
xt::xarray<T> read_array(const std::string& ref) {
  return to_xarray<T>(read_tensor(ref));
}

/// Writes `e` (its value type) to a tensor reference, atomically; `attrs` are recorded
/// as HDF5 attributes. Throws OutputError when the file cannot be written.
template <class E>
void write_array(const xt::xexpression<E>& e, const std::string& ref, const Attrs& attrs = {},
                 const WriteOptions& opt = {}) {
  write_tensor(parse_ref(ref), to_tensor(e), attrs, opt);
}

}  // namespace posenc
