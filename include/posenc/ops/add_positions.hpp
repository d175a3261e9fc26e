#pragma once
/// \file
/// Absolute position encodings added to token embeddings (`posenc add`): the
/// embedding x [b, s, d] (or [s, b, d], [s, d]) becomes x * scale + PE[start + s], with
/// PE Vaswani's sinusoidal table computed on the fly or a learned table [max_len, d]
/// (BERT's and GPT-2's position embeddings). scale = sqrt(d_model) is the Annotated
/// Transformer's `Embeddings` (lut(x) * sqrt(d_model)) followed by its
/// `PositionalEncoding` (x + pe[:, :s]).
///
/// Per-token positions: the row of token (b, s) may come from a positions array [b, s]
/// instead of start + s, and an offset is added to every row index: BART's and OPT's
/// learned tables (HF `BartLearnedPositionalEmbedding`: arange(past, past + s) + 2;
/// `OPTLearnedPositionalEmbedding`: cumsum(attention_mask) * attention_mask - 1, + 2,
/// see positions_from_mask), fairseq's `LearnedPositionalEmbedding` (padding_idx P:
/// the mask form with offset P + 1). The encoding is combined with the embedding by
/// addition or, as the multiplicative schemes of the source articles, by the
/// elementwise product (x * scale) * PE.
///
/// Arithmetic is float64 (the sinusoid as `posenc table sinusoidal` computes it, the
/// learned table's values as stored), rounded once to the output type. Each element
/// depends only on its own input value and position, so results do not depend on the
/// thread count or on how a streamed input is cut into slabs.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <xtensor/xarray.hpp>

#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// How the encoding meets the embedding.
enum class Combine {
  add,  ///< x * scale + PE (Vaswani, BERT, GPT-2, OPT, BART)
  mul   ///< (x * scale) * PE, elementwise (the multiplicative combination)
};
/// add | mul (UsageError naming "combine").
Combine parse_combine(const std::string& s);

/// The positions of OPT's learned table before its offset (HF
/// `OPTLearnedPositionalEmbedding.forward`): for an attention mask [b, n] of 0 and 1,
/// cumsum(mask, 1) * mask - 1 per row, of which the last `s` columns (HF slices off the
/// past_key_values_length = n - s first ones). Padding tokens get -1. Throws
/// InputError naming "attention_mask" for a mask that is not [b, n] with n >= s or holds
/// values other than 0 and 1.
xt::xarray<std::int64_t> positions_from_mask(const xt::xarray<std::int64_t>& mask, std::size_t s);

/// The encoding added and how.
struct AbsoluteEncoding {
  /// A learned table [max_len, d] (any float dtype); null = the sinusoidal table.
  const Tensor* table = nullptr;
  /// Sinusoidal table: frequency base and layout (interleaved sin/cos pairs as Vaswani
  /// and the Annotated Transformer; concat [sin | cos] as tensor2tensor).
  double base = 10000.0;
  SinusoidalLayout layout = SinusoidalLayout::interleaved;  ///< see `base`
  /// Position of the first token (a KV-cache offset, or GPT-2's past length); >= 0.
  std::int64_t start = 0;
  /// Multiplies the embedding before the encoding is added; finite. 0 is allowed.
  double scale = 1.0;
  /// Use sqrt(d) (d the embedding's extent along axis d) as the scale instead.
  bool scale_sqrt_d = false;
  /// Per-token positions [b, s] (b the input's batch, or 1 for all rows) or [s]; null =
  /// start + s. Not with start != 0. The pointee must outlive the call.
  const xt::xarray<std::int64_t>* positions = nullptr;
  /// Added to every position to give the table row (HF's offset 2 of BART and OPT);
  /// |offset| <= 2^52. Rows must lie in [0, max_len) of a learned table.
  std::int64_t offset = 0;
  Combine combine = Combine::add;  ///< x * scale + PE or (x * scale) * PE
};

/// x * scale + PE (or (x * scale) * PE) for an in-memory tensor of any float dtype; `axes` letters
/// from b, s, d with s and d required ("" = by rank: bsd, sd). Returns `out` (a float dtype).
/// Throws UsageError for bad axes or parameters, InputError for a non-float input, a
/// learned table that is not [max_len, d] or too short for the rows asked for, positions
/// of the wrong shape or outside the table, and non-finite values (unless
/// `allow_nonfinite`).
Tensor add_positions(const Tensor& x, const std::string& axes, const AbsoluteEncoding& e, DType out,
                     bool allow_nonfinite = false);

/// `posenc add` from a tensor reference to a tensor reference in bounded memory: the
/// input is streamed slab by slab along its first axis whose extent is not 1, as
/// `rope_stream` does.
struct AddStreamRequest {
  TensorRef input;               ///< the embeddings X
  TensorRef output;              ///< where X * scale + PE goes
  WriteOptions write;            ///< how the output is written
  std::string axes;              ///< "" = by rank
  std::optional<DType> dtype;    ///< output type; default the input's
  AbsoluteEncoding encoding;     ///< the table, start and scale
  bool allow_nonfinite = false;  ///< otherwise NaN/Inf in X (or the table) is an InputError
  /// Bytes for slab buffers and the table rows; 0 = a quarter of physical memory.
  std::size_t max_memory = 0;
  /// The most OpenMP threads that add, chosen as RopeStreamRequest::threads; 0 = all
  /// cores but the two I/O threads use.
  int threads = 0;
  /// Called after each slab with the bytes done and the total (optional).
  std::function<void(std::size_t done, std::size_t total)> progress;
  /// Called with a description of the plan and the recorded parameters (optional).
  std::function<void(const std::string& plan, const Attrs& attrs)> note;
};

/// Adds the encoding to the input and writes the output, which becomes visible only
/// when complete. Throws as add_positions does, UsageError for a memory limit too small
/// for one slab or an HDF5 output replacing the input's file, OutputError when the
/// output cannot be written.
void add_positions_stream(const AddStreamRequest& r);

}  // namespace posenc
