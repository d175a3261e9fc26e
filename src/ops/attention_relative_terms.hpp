#pragma once
// The Transformer-XL / XLNet / Funnel and DeBERTa tensors checked and read into float64
// (ops/attention_relative.hpp): one reading, which the forward's terms
// (attention_relative.cpp) and their backward (attention_backward_relative.cpp) both
// take, so the two see the same shift, segments and buckets. Internal to the library.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "posenc/ops/attention_backward.hpp"
#include "posenc/ops/attention_relative.hpp"

namespace posenc::relative_detail {

/// Shapes of Q and K by axis letter, and the arithmetic type of attention.
struct Geo {
  std::size_t b = 1, hq = 1, hk = 1, sq = 0, sk = 0, d = 0;
  bool has_b = false, has_h = false;
  std::string axes;
  DType compute = DType::f32;
  Shape scores;  ///< [b, hq, sq, sk] with b, h where Q has them
};

Geo geometry(const Tensor& q, const Tensor& k, const AttentionOptions& opt);

/// x's values as float64 in [b][h][s][d] order (x's axes `axes`).
std::vector<double> bhsd(const Tensor& x, const std::string& axes);

/// Four partial sums in a fixed order: vectorisable, and the same bits on any thread.
double dot(const double* a, const double* b, std::size_t n);

/// Relative rows [rows, hq, d] (or [rows, d] without h; batched: [rows, b, hq, d]) as
/// float64 [b'][hq][rows][d], b' = b when batched else 1.
struct RelRows {
  std::vector<double> v;
  std::size_t rows = 0;
  bool batched = false;
  const double* at(std::size_t b, std::size_t h, std::size_t hq, std::size_t row,
                   std::size_t d) const {
    return v.data() + (((batched ? b : 0) * hq + h) * rows + row) * d;
  }
};

/// Where HF's shift takes score (i, j) from: row and column of the unshifted
/// [sq, rlen] matrix, or none (Transformer-XL's zero pad).
struct ShiftSource {
  std::size_t row = 0, col = 0;
  bool zero = false;
};
ShiftSource xl_shift(std::size_t sq, std::size_t rlen, std::size_t sk, std::size_t shift,
                     std::size_t i, std::size_t j);

/// A projection W [d_model, hq, d] ([d_model, d] without h) as float64 [d_model][hq][d].
struct Kernel {
  std::vector<double> w;
  std::size_t dm = 0;
  const double* at(std::size_t m, std::size_t h, std::size_t hq, std::size_t d) const {
    return w.data() + (m * hq + h) * d;
  }
};

/// Transformer-XL / XLNet / Funnel's inputs, checked, in float64.
struct XlInputs {
  Geo g;
  bool fact = false;        ///< Funnel's factorized term (phi, pi, psi, omega)
  std::size_t shift = 0;    ///< XlAttention::shift
  std::optional<Kernel> w;  ///< rel_kernel
  std::vector<double> embed;  ///< with rel_kernel: rel_keys unprojected [rows][d_model]
  RelRows r;                  ///< the projected rows (none when factorized)
  /// Funnel's factorized tables: phi, pi [sq][d_model], psi, omega [sk][d_model].
  std::vector<double> phi, pi, psi, omega;
  std::vector<double> u, vb;  ///< content_bias, position_bias [hq][d] (zeros when absent)
  bool seg = false;           ///< the segment term
  std::vector<std::int64_t> ids;       ///< segment_ids [b][sk]
  std::vector<std::uint8_t> seg_rows;  ///< segment_index [b][sq][sk]
  RelRows se;                          ///< seg_embed [hq][2][d]
  std::vector<double> sb;              ///< segment_bias [hq][d]
  std::vector<double> qd, kd;          ///< Q and K as bhsd()
  std::size_t mlen = 0;                ///< memory keys before the queries
  bool cls_mask = false;
  double scale = 0;  ///< opt.scale, or 1/sqrt(d)
  /// The seg_embed row (0 or 1) of score (b, i, j).
  std::size_t segment_row(std::size_t b, std::size_t i, std::size_t j) const {
    if (!seg_rows.empty()) return seg_rows[(b * g.sq + i) * g.sk + j];
    return ids[b * g.sk + mlen + i] != ids[b * g.sk + j] ? 1 : 0;
  }
};
XlInputs xl_inputs(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                   const XlAttention& xl);

/// DeBERTa's inputs, checked, in float64.
struct DebertaInputs {
  Geo g;
  RelRows pk, pq;  ///< pos_key, pos_query (rows 0 when absent)
  bool c2p = false, p2c = false;
  std::int64_t n = 0;  ///< max(sq, sk): the bucket index of distance delta is at delta + n - 1
  std::vector<std::int32_t> index, index_p2c;  ///< c2p's row by i - j, p2c's by j - i
  std::vector<double> qd, kd;
  double scale = 0;  ///< opt.scale, or deberta_default_scale
  int position_buckets = 0, max_relative_positions = 0;
  std::size_t c2p_row(std::size_t i, std::size_t j) const {
    return static_cast<std::size_t>(index[static_cast<std::size_t>(
        static_cast<std::int64_t>(i) - static_cast<std::int64_t>(j) + n - 1)]);
  }
  std::size_t p2c_row(std::size_t i, std::size_t j) const {
    return static_cast<std::size_t>(index_p2c[static_cast<std::size_t>(
        static_cast<std::int64_t>(j) - static_cast<std::int64_t>(i) + n - 1)]);
  }
};
DebertaInputs deberta_inputs(const Tensor& q, const Tensor& k, const AttentionOptions& opt,
                             const DebertaAttention& deb);

/// The attributes of the forward's terms (relative, rel_rows, ...; relative,
/// pos_att_type, ...), appended to `attrs`.
void xl_attrs(const XlInputs& in, Attrs& attrs);
void deberta_attrs(const DebertaInputs& in, Attrs& attrs);

/// attention_backward_memory with the score term and its gradient (dscore_bias), the
/// gradients in float64, the relative switches cleared (attention_backward_relative.cpp).
std::size_t relative_backward_memory_inner(const Shape& q, const Shape& k, const Shape& v,
                                           DType q_dtype, const AttentionOptions& opt,
                                           const AttentionBackwardOptions& bopt);

/// UsageError for a relative tensor's gradient switch (drel_keys, ..., dpos_query)
/// asked of a backward without the relative terms ("gradients: drel_keys needs
/// --rel-keys").
void refuse_relative_gradients(const AttentionBackwardOptions& bopt);

}  // namespace posenc::relative_detail
