// RoPE from references to references in bounded memory (ops/rope_stream.hpp): slabs
// along the first axis whose extent is not 1, read, rotated and written by three
// overlapped stages.

#include "posenc/ops/rope_stream.hpp"

#include <unistd.h>
#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "posenc/error.hpp"
#include "posenc/io/hdf5.hpp"

namespace posenc {

std::size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
}

namespace {

/// The default memory limit: a quarter of physical memory (1 GiB when unknown).
std::size_t default_max_memory() {
  const std::size_t ram = physical_memory();
  return ram == 0 ? std::size_t{1} << 30 : ram / 4;
}

/// The sequence length dynamic NTK and LongRoPE need when --seq-len is not given:
/// the largest position used, plus one.
std::int64_t positions_extent(const Positions& pos, std::size_t seq, const RopeApplyOptions& a) {
  if (a.grid_h > 0) return std::max(a.grid_h, a.grid_w);
  if (!pos.ids.empty()) {
    return pos.start + *std::max_element(pos.ids.begin(), pos.ids.end()) + 1;
  }
  if (!pos.cu_seqlens.empty()) {
    std::int64_t longest = 0;
    for (std::size_t i = 1; i < pos.cu_seqlens.size(); ++i) {
      longest = std::max(longest, pos.cu_seqlens[i] - pos.cu_seqlens[i - 1]);
    }
    return pos.start + std::max<std::int64_t>(longest, 1);
  }
  return pos.start + static_cast<std::int64_t>(std::max<std::size_t>(seq, 1));
}

/// The output side: plain sinks, and one writer per HDF5 file holding several
/// datasets. Nothing is visible until commit_all().
class Outputs {
 public:
  Outputs(const std::vector<TensorRef>& refs, const WriteOptions& opt) : refs_(refs), opt_(opt) {
    int stdout_count = 0;
    std::set<std::string> plain;
    std::map<std::string, std::set<std::string>> h5;
    for (const auto& r : refs) {
      if (r.is_stdio()) {
        if (++stdout_count > 1) throw UsageError("-o: only one output can go to standard output");
        continue;
      }
      if (r.format == Format::hdf5) {
        if (plain.count(r.path) || !h5[r.path].insert(r.dataset).second) {
          throw UsageError(fmt::format("-o: {} is named by two outputs", r.text));
        }
      } else if (!plain.insert(r.path).second || h5.count(r.path)) {
        throw UsageError(fmt::format("-o: {} is named by two outputs", r.path));
      }
    }
    sinks_.resize(refs.size());
  }

  TensorSink& open(std::size_t i, const TensorInfo& info) {
    const TensorRef& r = refs_[i];
    if (r.format == Format::hdf5 && !r.is_stdio()) {
      auto& w = h5_[r.path];
      if (!w) w = std::make_unique<Hdf5FileWriter>(r.path, opt_);
      sinks_[i] = w->dataset(r.dataset, info);
    } else {
      sinks_[i] = create_sink(r, info, opt_);
    }
    return *sinks_[i];
  }

  void commit_all() {
    // Plain files and datasets first (each only checks or renames), then HDF5 files.
    for (auto& s : sinks_) {
      if (s) s->commit();
    }
    for (auto& [path, w] : h5_) w->commit();
  }

 private:
  std::vector<TensorRef> refs_;
  WriteOptions opt_;
  std::vector<std::unique_ptr<TensorSink>> sinks_;
  std::map<std::string, std::unique_ptr<Hdf5FileWriter>> h5_;
};

/// A blocking FIFO between two pipeline stages. cancel() wakes every waiter and makes
/// pop() fail from then on, so that an error in one stage stops the others.
template <typename T>
class Channel {
 public:
  void push(T v) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back(std::move(v));
    }
    ready_.notify_one();
  }
  /// The next item, or false once cancelled.
  bool pop(T& v) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return cancelled_ || !items_.empty(); });
    if (cancelled_) return false;
    v = std::move(items_.front());
    items_.pop_front();
    return true;
  }
  void cancel() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled_ = true;
    }
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<T> items_;
  bool cancelled_ = false;
};

/// Buffers per side (input, output) of the slab pipeline: two let the reader fill
/// slab i+1 and the writer drain slab i-1 while slab i is rotated.
constexpr std::size_t kPipelineDepth = 2;

/// Streams `total_rows` rows along `axis` from `src` through `rotate` to `sink` in slabs
/// of `slab_rows`, overlapping the three: a reader thread owns `src`, a writer thread
/// owns `sink` and the calling thread rotates (with OpenMP inside). Slabs are written
/// in order, so the output is byte for byte that of reading, rotating and writing one
/// slab after the other. `depth` buffers of each side are allocated; with depth 1 the
/// stages still run in their threads but take turns. `serialize_io` keeps reads and
/// writes from running at the same time (HDF5 on both sides: the library is not
/// thread-safe). `threads` OpenMP threads rotate (0: the cores the I/O threads leave). The first error of any stage stops all of them and is rethrown here.
template <typename Rotate, typename Done>
void stream_slabs(TensorSource& src, TensorSink& sink, std::size_t axis, std::size_t total_rows,
                  std::size_t slab_rows, std::size_t in_row_bytes, std::size_t out_row_bytes,
                  std::size_t depth, bool serialize_io, int threads, Rotate rotate, Done done) {
  struct Slab {
    std::size_t buf = 0, first = 0, rows = 0;
  };
  std::vector<Buffer> in_bufs, out_bufs;
  Channel<std::size_t> free_in, free_out;
  Channel<Slab> read, rotated;
  for (std::size_t i = 0; i < depth; ++i) {
    in_bufs.emplace_back(slab_rows * in_row_bytes);
    out_bufs.emplace_back(slab_rows * out_row_bytes);
    free_in.push(i);
    free_out.push(i);
  }
  std::mutex io_mutex, error_mutex;
  std::exception_ptr error;
  auto fail = [&](std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = e;
    }
    free_in.cancel();
    free_out.cancel();
    read.cancel();
    rotated.cancel();
  };
  auto io_lock = [&] {
    return serialize_io ? std::unique_lock<std::mutex>(io_mutex) : std::unique_lock<std::mutex>();
  };

  std::thread reader([&] {
    try {
      for (std::size_t first = 0; first < total_rows; first += slab_rows) {
        Slab s{0, first, std::min(slab_rows, total_rows - first)};
        if (!free_in.pop(s.buf)) return;
        {
          auto lock = io_lock();
          src.read_slab(axis, s.first, s.rows, in_bufs[s.buf].data());
        }
        read.push(s);
      }
    } catch (...) {
      fail(std::current_exception());
    }
  });
  auto write_all = [&] {
    try {
      for (std::size_t first = 0; first < total_rows; first += slab_rows) {
        Slab s;
        if (!rotated.pop(s)) return;
        {
          auto lock = io_lock();
          sink.write_slab(axis, out_bufs[s.buf].data(), s.rows);
        }
        free_out.push(s.buf);
        done(s.first + s.rows);
      }
    } catch (...) {
      fail(std::current_exception());
    }
  };
  std::thread writer;
  try {
    writer = std::thread(write_all);
  } catch (...) {
    fail(std::current_exception());  // stops the reader
  }
  // Without -j, the rotation gets the cores the reader and writer leave: libgomp's
  // workers spin-wait between slabs and would take those cores from the I/O threads,
  // which costs far more than a second rotating thread gains (rotation is a small part
  // of the time next to I/O). Results do not depend on the thread count.
  const int saved_threads = omp_get_max_threads();
  if (threads > 0) {
    omp_set_num_threads(threads);
  } else {
    omp_set_num_threads(std::max(1, std::min(saved_threads, omp_get_num_procs() - 2)));
  }
  try {
    for (std::size_t first = 0; first < total_rows; first += slab_rows) {
      Slab in, out;
      if (!read.pop(in) || !free_out.pop(out.buf)) break;
      out.first = in.first;
      out.rows = in.rows;
      rotate(in_bufs[in.buf].data(), out_bufs[out.buf].data(), in.first, in.rows);
      free_in.push(in.buf);
      rotated.push(out);
    }
  } catch (...) {
    fail(std::current_exception());
  }
  omp_set_num_threads(saved_threads);
  reader.join();
  if (writer.joinable()) writer.join();
  if (error) std::rethrow_exception(error);
}

void rope_stream_impl(const RopeStreamRequest& o) {
  if (o.inputs.empty()) throw UsageError("inputs: give at least one input tensor");
  if (o.outputs.size() != o.inputs.size()) {
    throw UsageError(fmt::format("outputs: {} input(s) need {} output(s), got {}",
                                 o.inputs.size(), o.inputs.size(), o.outputs.size()));
  }
  const std::size_t budget = o.max_memory == 0 ? default_max_memory() : o.max_memory;
  const RopeApplyOptions& apply = o.apply;

  const std::vector<TensorRef>& in_refs = o.inputs;
  const std::vector<TensorRef>& out_refs = o.outputs;
  int stdin_count = 0;
  std::set<std::string> h5_inputs;
  for (const auto& r : in_refs) {
    if (r.is_stdio() && ++stdin_count > 1) {
      throw UsageError("inputs: only one input can come from standard input");
    }
    if (r.format == Format::hdf5) h5_inputs.insert(r.path);
  }
  for (const auto& r : out_refs) {
    // An HDF5 output is a new file renamed over the target: it would drop the input's
    // other datasets.
    if (r.format == Format::hdf5 && h5_inputs.count(r.path)) {
      throw UsageError(fmt::format("outputs: {} would replace the input file {} (write the result "
                                   "to another HDF5 file)",
                                   r.text, r.path));
    }
  }
  Outputs outputs(out_refs, o.write);

  const Positions& pos = o.positions;
  std::vector<std::unique_ptr<TensorSource>> sources;
  for (const auto& r : in_refs) sources.push_back(open_source(r));

  for (std::size_t k = 0; k < sources.size(); ++k) {
    TensorSource& src = *sources[k];
    const TensorInfo& info = src.info();
    const std::string& what = in_refs[k].text;
    const Axes axes = resolve_axes(o.axes, info.shape.size(), what);
    const std::size_t head_dim = info.shape[static_cast<std::size_t>(axes.index('d'))];
    const int is = axes.index('s');
    const std::size_t seq = info.shape[static_cast<std::size_t>(is)];

    if (head_dim > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw InputError(fmt::format("{}: head dimension {} is too large", what, head_dim));
    }
    RopeParams params = o.params(static_cast<int>(head_dim));
    if (params.seq_len == 0) params.seq_len = positions_extent(pos, seq, apply);
    const RopeFreqs freqs = compute_rope_freqs(params);
    const DType out_dtype = o.dtype ? *o.dtype : rope_default_out_dtype(info.dtype);

    // Leading axes of extent 1 (b in [1, s, h, d]) carry no slabs: stream along the
    // first axis that does.
    const std::size_t axis = slab_axis(info.shape);
    RopeApplier applier(info.shape, info.dtype, axes, freqs, pos, apply, out_dtype, what, axis);

    // Largest slab (rows along `axis`) whose input, output and table fit the budget.
    const std::size_t total_rows = applier.rows_total();
    // Every pipeline buffer counts; a budget too small for double buffering gets one
    // buffer per side (no overlap) rather than a refusal.
    std::size_t depth = kPipelineDepth;
    auto cost = [&](std::size_t rows) {
      return depth * rows * (applier.in_row_bytes() + applier.out_row_bytes()) +
             applier.table_bytes(rows);
    };
    std::size_t lo = applier.min_rows(), hi = std::max<std::size_t>(total_rows, 1);
    if (cost(lo) > budget) depth = 1;
    if (cost(lo) > budget) {
      throw UsageError(fmt::format(
          "max_memory: {} needs {} for one slab of {} row(s) along axis {} ({}), more than "
          "the limit of {}",
          what, bytes_str(cost(lo)), lo, axis, axes.letters[axis],
          bytes_str(budget)));
    }
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo + 1) / 2;
      if (cost(mid) <= budget) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    // Even when everything fits, moderate slabs are faster: the same few MiB of
    // buffers are reused (already mapped and cached) instead of faulting in fresh
    // pages for the whole tensor, and reading, rotating and writing stay in cache.
    const std::size_t kSlabTarget = std::size_t{8} << 20;
    const std::size_t row_in = std::max<std::size_t>(applier.in_row_bytes(), 1);
    const std::size_t slab_rows =
        std::max(applier.min_rows(), std::min(lo, std::max<std::size_t>(kSlabTarget / row_in, 1)));

    TensorInfo out_info;
    out_info.dtype = out_dtype;
    out_info.shape = info.shape;
    out_info.attrs = freqs.attrs;
    out_info.attrs.push_back({"rope_axes", axes.letters});
    out_info.attrs.push_back({"rope_precision", apply.precision == Precision::f64 ? "f64" : "f32"});
    out_info.attrs.push_back({"rope_inverse", static_cast<long long>(apply.inverse)});
    out_info.attrs.push_back({"rope_start", static_cast<long long>(pos.start)});
    if (apply.grid_h > 0) {
      out_info.attrs.push_back(
          {"rope2d_grid", std::vector<double>{static_cast<double>(apply.grid_h),
                                              static_cast<double>(apply.grid_w)}});
      out_info.attrs.push_back({"rope2d_order", std::string(apply.grid_yx ? "yx" : "xy")});
    }
    if (!apply.mrope_section.empty()) {
      out_info.attrs.push_back(
          {"mrope_section",
           std::vector<double>(apply.mrope_section.begin(), apply.mrope_section.end())});
    }
    if (o.note) {
      o.note(fmt::format("{} -> {}: shape {}, axes {}, {} -> {}, {} slab(s) of {} row(s) along "
                        "axis {} ({})",
                        what, out_refs[k].text, shape_str(info.shape), axes.letters,
                        dtype_name(info.dtype), dtype_name(out_dtype),
                        total_rows == 0 ? 0 : (total_rows + slab_rows - 1) / slab_rows, slab_rows,
                        axis, axes.letters[axis]), out_info.attrs);
    }
    TensorSink& sink = outputs.open(k, out_info);

    const std::size_t rows_per_slab = std::max<std::size_t>(slab_rows, 1);
    const std::size_t total_bytes = total_rows * applier.in_row_bytes();
    stream_slabs(
        src, sink, axis, total_rows, rows_per_slab, applier.in_row_bytes(),
        applier.out_row_bytes(), depth,
        in_refs[k].format == Format::hdf5 && out_refs[k].format == Format::hdf5, o.threads,
        [&](const std::byte* in, std::byte* out, std::size_t first, std::size_t n) {
          applier.rows(in, out, first, n);
        },
        [&](std::size_t rows_done) {
          if (o.progress) o.progress(what, rows_done * applier.in_row_bytes(), total_bytes);
        });
  }
  outputs.commit_all();
}

}  // namespace

void rope_stream(const RopeStreamRequest& r) {
  if (!r.params) throw UsageError("params: no RoPE variant given");
  rope_stream_impl(r);
}

}  // namespace posenc
