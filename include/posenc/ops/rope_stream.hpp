#pragma once
/// \file
/// RoPE from tensor references to tensor references in bounded memory: what
/// `posenc rope` does. Each input is read slab by slab along its first axis whose
/// extent is not 1 (s for [1, s, h, d]), rotated and written, with reading, rotating
/// and writing overlapped (a reader thread, the calling thread with OpenMP, a writer
/// thread); a regular NPY input is mapped instead of read (TensorSource::mapped_data)
/// and rotated straight from the page cache. The slabs are sized so that every buffer
/// and table fits `max_memory`. All outputs become visible together when every input
/// is done, or none does. The bytes written do not depend on the slab size or the
/// thread count.

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "posenc/encodings/rope.hpp"
#include "posenc/io/part.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc {

/// Physical memory of the machine in bytes, or 0 when the system does not tell.
std::size_t physical_memory();

/// `posenc rope` from tensor references to tensor references (see rope_stream).
struct RopeStreamRequest {
  std::vector<TensorRef> inputs;   ///< at most one standard input
  std::vector<TensorRef> outputs;  ///< one per input; distinct targets
  WriteOptions write;              ///< how the outputs are written
  std::string axes;                ///< axis letters of the inputs; "" = by rank
  std::optional<DType> dtype;      ///< output type; default rope_default_out_dtype
  /// The RoPE variant for an input whose axis d has extent `head_dim`. `seq_len` 0 is
  /// filled in from the positions (dynamic NTK, LongRoPE).
  std::function<RopeParams(int head_dim)> params;
  Positions positions;             ///< where each token sits (shared by all inputs)
  RopeApplyOptions apply;          ///< inverse, precision, 2-D and M-RoPE forms
  /// Bytes for slab buffers and tables; 0 = a quarter of physical memory (1 GiB when
  /// unknown).
  std::size_t max_memory = 0;
  /// The share of every input to rotate and write (`--part I/N`): part_range of its
  /// first axis whose extent is not 1; the output holds that share only, with the
  /// part attributes of io/part.hpp when it is HDF5. Default: the whole input.
  Part part;
  /// The most OpenMP threads that rotate; 0 = all cores but the two the reader and
  /// writer use (at least one). Of these, as many rotate as the cores the reader and
  /// writer leave (at least one), and all once rotating is measured to take over twice
  /// as long as reading and writing. The bytes written do not depend on it.
  int threads = 0;
  /// Called after each slab is written with the input's text, the bytes done and the
  /// total (optional).
  std::function<void(const std::string& what, std::size_t done, std::size_t total)> progress;
  /// Called with a description of each input's plan and the recorded parameters
  /// (optional; `posenc -v`).
  std::function<void(const std::string& plan, const Attrs& attrs)> note;
};

/// Rotates every input into its output. Throws UsageError for inconsistent requests
/// (counts, two outputs naming one target, an HDF5 output replacing an input file, a
/// memory limit too small for one slab), InputError for bad inputs and OutputError
/// when an output cannot be written; on any error no output is left behind.
void rope_stream(const RopeStreamRequest& r);

}  // namespace posenc
