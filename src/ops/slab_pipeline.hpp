#pragma once
// Internal to the streaming operations (`posenc rope`, `posenc add`): one tensor read
// slab by slab along an axis whose leading axes all have extent 1, transformed and
// written, with reading, transforming and writing overlapped in three stages (a reader
// thread, the calling thread with OpenMP, a writer thread; no reader when the source is
// mapped, see TensorSource::mapped_data). An operation describes
// itself as a SlabOp; plan_slabs sizes the slabs for a memory budget and stream_slabs
// runs the pipeline. Slabs are written in order, so the bytes written do not depend on
// the slab size or the thread count as long as the operation's rows do not.

#include <cstddef>
#include <functional>
#include <string>

#include "posenc/io/ref.hpp"

namespace posenc::detail {

/// The default memory limit of a streaming operation: a quarter of physical memory
/// (1 GiB when unknown).
std::size_t default_max_memory();

/// What streaming one tensor needs of an operation.
struct SlabOp {
  std::size_t in_row_bytes = 0;   ///< bytes of one entry along the slab axis, input
  std::size_t out_row_bytes = 0;  ///< the same, output
  std::size_t min_rows = 1;       ///< slabs hold at least this many entries
  std::size_t total_rows = 0;     ///< entries along the slab axis
  /// Entries [first_row, total_rows) are streamed (a share of the job, `--part`); the
  /// sink receives them as its first entries.
  std::size_t first_row = 0;
  /// Bytes of the tables (or other working memory) a slab of `rows` entries needs.
  std::function<std::size_t(std::size_t rows)> table_bytes;
  /// Transforms entries [first, first + count): `src` in the input dtype, `dst` in the
  /// output dtype, both C order. May use OpenMP; may throw.
  std::function<void(const std::byte* src, std::byte* dst, std::size_t first, std::size_t count)>
      rows;
  /// Rows may be cut into this many parts along the next axis (1: never cut); a mapped
  /// source whose rows are larger than a slab is then streamed in parts of rows, written
  /// in place (TensorSink::write_at) where the sink allows it.
  std::size_t parts = 1;
  /// Transforms entries [first, first + count) of the next axis within row `row`, as
  /// `rows` would (needed when parts > 1).
  std::function<void(const std::byte* src, std::byte* dst, std::size_t row, std::size_t first,
                     std::size_t count)>
      part;
  std::size_t out_item = 1;  ///< bytes of one output element (write_at counts elements)
};

/// How a tensor is cut: entries per slab and buffers per side.
struct SlabPlan {
  std::size_t rows = 1;
  std::size_t depth = 2;
};

/// The largest slab (capped at a few MiB of input, which streams faster than one big
/// slab) whose buffers and tables fit `budget` bytes; one buffer per side when double
/// buffering does not fit. Throws UsageError naming `max_memory`, `what` and the axis
/// when not even one slab of `op.min_rows` fits.
SlabPlan plan_slabs(const SlabOp& op, std::size_t budget, const std::string& what, std::size_t axis,
                    char axis_letter);

/// The slabs stream_slabs cuts: `rows` entries each, or, when `part_entries` is not 0,
/// `part_entries` of the `parts` entries of the next axis within one row.
struct SlabShape {
  std::size_t rows = 1;
  std::size_t part_entries = 0;
  std::size_t parts = 1;
  /// "N slab(s) of R row(s)" or "N slab(s) of E/P of a row", for `-v` notes.
  std::string describe(std::size_t total_rows) const;
};

/// The slabs stream_slabs cuts for `plan` from `src` into `sink` (a mapped source
/// streams smaller slabs than the plan's, and cuts rows larger than one).
SlabShape slab_shape(TensorSource& src, const TensorSink& sink, const SlabOp& op,
                     const SlabPlan& plan);

/// Streams `op.total_rows` entries along `axis` from `src` through `op.rows` to `sink`
/// as `plan` says. `serialize_io` keeps reads and writes from running at the same time
/// (HDF5 on both sides: the library is not thread-safe). At most `threads` OpenMP
/// threads transform (0: the cores the I/O threads leave); fewer while they would take
/// cores from the reader and writer, all of them once the transform is measured to take
/// over twice as long as the I/O. `done` (may be empty) is called with
/// the entries written so far after each slab. The first error of any stage stops all
/// of them and is rethrown here. Does not commit the sink.
void stream_slabs(TensorSource& src, TensorSink& sink, std::size_t axis, const SlabOp& op,
                  const SlabPlan& plan, bool serialize_io, int threads,
                  const std::function<void(std::size_t rows_done)>& done);

}  // namespace posenc::detail
