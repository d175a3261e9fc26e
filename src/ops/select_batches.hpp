#pragma once
// Selections read slab by slab (ops/select.hpp read_selection, stats, compare): which
// entries of the streaming axis each slab holds, and the selected elements of a slab.
#include <cstddef>
#include <utility>
#include <vector>

#include "ops/slab_fetch.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/tensor.hpp"

namespace posenc::detail {

/// Entries [lo, lo + count) along `axis` of the source, and the part of the selection
/// they hold as a selection of that slab (whose source shape has `count` at `axis`).
struct SelectionBatch {
  std::size_t axis = 0, lo = 0, count = 0;
  Selection local;
};

/// The batches of a selection, in order: each spans at most `slab_entries` entries of
/// the source's slab axis (one entry at least), and together they hold the selection
/// in its C order.
class SelectionBatches {
 public:
  /// `entry_bytes`: bytes of one entry along the slab axis (the largest of the tensors
  /// read together).
  SelectionBatches(const Selection& sel, std::size_t entry_bytes, std::size_t slab_bytes);
  /// For a tensor of `info`: entries of its slab axis in that tensor's bytes.
  SelectionBatches(const Selection& sel, const TensorInfo& info, std::size_t slab_bytes);
  /// The next batch into `b`; false when there are none left.
  bool next(SelectionBatch& b);

 private:
  const Selection& sel_;
  std::size_t axis_ = 0, slab_entries_ = 1, k_ = 0;
  bool done_ = false;
};

/// The selected elements of a slab as one C-ordered run: a pointer into `slab` when
/// they are contiguous there, else gathered into `gather`.
const std::byte* selected_elements(DType t, const std::byte* slab, const Selection& local,
                                   std::vector<std::byte>& gather);

/// The selected elements of a source, block by block (one batch each), in the C order
/// of the selection.
class SelectedReader {
 public:
  SelectedReader(const TensorInfo& info, FetchSlab fetch, Selection sel, std::size_t slab_bytes);
  /// The next block of selected elements, valid until the next call; count 0 at the end.
  std::pair<const std::byte*, std::size_t> next();

 private:
  DType dtype_;
  FetchSlab fetch_;
  Selection sel_;
  SelectionBatches batches_;
  SelectionBatch batch_;
  std::vector<std::byte> gather_;
};

/// Runs `f(data, count)` for the selected elements of every batch, fetching slabs with
/// `fetch` (the source described by `info`).
void for_each_selected(const TensorInfo& info, const FetchSlab& fetch, const Selection& sel,
                       std::size_t slab_bytes, const SelectedBlock& f);

}  // namespace posenc::detail
