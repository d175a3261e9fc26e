#pragma once
// Attention's I/O plumbing: the outputs (allocated, or rows handed to a sink as work
// items end) and the out-of-core run (K and V read in chunks of whole key blocks, or
// used in place in their mapped files), with the memory it needs. Internal to the
// library.

#include <cstddef>
#include <functional>
#include <string>

#include "ops/attention_kernel.hpp"

namespace posenc::attention_detail {

// The sink AttentionOptions::output_sink gives for the output, when the output is
// emitted in rows that an item holds contiguously (d last, s before it) and the sink
// takes positional writes; null otherwise (the output is then kept in memory).
TensorSink* take_output_sink(const Geometry& g, const Shape& q_shape, const AttentionOptions& opt);

// The emitted tensors (the output only when no sink takes it), allocated, and P's
// pointers to them.
template <class T>
AttentionResult allocate(Plan<T>& P, const Shape& q_shape, TensorSink* out_sink);

// What a streamed run holds besides the K and V chunks, and what each key of a chunk
// adds (its raw bytes plus a converted copy when the type or the layout differs).
struct StreamMemory {
  std::size_t fixed = 0, per_key = 0;
  std::size_t tile = 0;  // one more worker's tiles
};

StreamMemory stream_memory(const Geometry& g, const TensorInfo& q, const TensorInfo& k,
                           const TensorInfo* v, const AttentionOptions& opt,
                           bool output_in_memory);

/// The in-memory run with K or V stored as f16 or bf16, or f32 under f64 arithmetic (d
/// last): used in place, each key block widened as the file-mapped run widens it (no
/// converted copy of the whole tensor, the same bits). False, having done nothing, when K and V are not such. NaN
/// and Inf are the caller's to check, unless `name_nonfinite` is given: K and V in the
/// arithmetic's type (d last) are then run in place too, every key block is checked
/// finite as it is first read (widened, or in the cache for the product), the blocks no
/// row sees after the run, and any failure calls name_nonfinite first, which throws the
/// caller's error for NaN or Inf in K or V and returns when they have none.
template <class T>
bool run_widening(const Plan<T>& P, const Tensor& k, const Tensor* v, std::size_t nq,
                  std::size_t nthreads, const std::function<void()>* name_nonfinite = nullptr);

/// How a streamed run may use K and V in place of their files: mapped (the budget holds
/// all of K and V), and read block by block into each worker's buffers (the budget holds
/// those buffers; the file allows positional reads of its bytes).
struct KvWays {
  bool map = false, read = false;
};

/// Bytes of the block buffers each worker holds for K and V read block by block: a key
/// block of K and of V in the compute dtype, and the pieces of their stored bytes read
/// to be widened.
std::size_t read_buffers(const Geometry& g, std::size_t key_block);

// Attention with Q, K and V read whole: `work` bytes of outputs and work memory (`names`
// the tensors dominating it) plus the inputs must fit opt.max_memory (InputError naming
// the shapes otherwise, before anything is read); `run` then computes on the tensors with
// what is left of the budget.
AttentionResult run_in_memory(
    TensorSource& q, TensorSource& k, TensorSource* v, const AttentionOptions& opt,
    std::size_t work, const std::string& names,
    const std::function<AttentionResult(const Tensor&, const Tensor&, const Tensor*,
                                        const AttentionOptions&)>& run);

/// The streamed run: Q read whole (or in place), K and V in chunks of `chunk` keys (a
/// multiple of the key block), or in place as `ways` allows (mapped, or read block by
/// block); the output to `out_sink` when given.
template <class T>
AttentionResult run_streamed(TensorSource& qs, TensorSource& ks, TensorSource* vs,
                             const Geometry& g, const AttentionOptions& opt, std::size_t chunk,
                             KvWays ways, TensorSink* out_sink);

}  // namespace posenc::attention_detail
