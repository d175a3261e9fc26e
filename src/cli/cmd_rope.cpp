// `posenc rope`: applies rotary embeddings (or their inverse) to tensors read from
// NPY/HDF5/text/stdin, slab by slab along the first axis whose extent is not 1 (s for
// [1, s, h, d]) so that inputs larger than memory are streamed in bounded memory. All
// outputs become visible together, or none does.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <omp.h>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/rope_options.hpp"
#include "posenc/error.hpp"
#include "posenc/io/hdf5.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/rope.hpp"

namespace posenc::cli {

namespace {

struct RopeCmdOptions {
  std::vector<std::string> inputs;
  OutputOptions out;
  RopeCliOptions rope;
  std::string axes;
  std::string dtype = "same";
  std::vector<long long> grid;  // H W
  std::string order = "xy";
  std::string mrope_section;
  bool allow_nonfinite = false;
  std::string max_memory;
};

/// The default --max-memory: a quarter of physical memory (1 GiB when unknown).
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

/// A progress line on stderr, only for a terminal and not with --quiet, at most 10 Hz.
class Progress {
 public:
  Progress(std::string what, std::size_t total)
      : what_(std::move(what)),
        total_(total),
        on_(total > 0 && !globals().quiet && isatty(STDERR_FILENO) == 1),
        start_(std::chrono::steady_clock::now()) {}
  ~Progress() {
    if (shown_) fmt::print(stderr, "\r\033[K");
  }
  void update(std::size_t done) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    // Short jobs stay silent; long ones refresh ten times a second.
    if (now - start_ < std::chrono::milliseconds(500) ||
        (shown_ && now - last_ < std::chrono::milliseconds(100))) {
      return;
    }
    last_ = now;
    shown_ = true;
    fmt::print(stderr, "\rposenc rope: {} {:3.0f}% ({} of {} MiB)", what_,
               100.0 * static_cast<double>(done) / static_cast<double>(total_), done >> 20,
               total_ >> 20);
    std::fflush(stderr);
  }

 private:
  std::string what_;
  std::size_t total_;
  bool on_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

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
/// thread-safe). The first error of any stage stops all of them and is rethrown here.
template <typename Rotate, typename Done>
void stream_slabs(TensorSource& src, TensorSink& sink, std::size_t axis, std::size_t total_rows,
                  std::size_t slab_rows, std::size_t in_row_bytes, std::size_t out_row_bytes,
                  std::size_t depth, bool serialize_io, Rotate rotate, Done done) {
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
  if (globals().threads == 0) {
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

void run_rope(const RopeCmdOptions& o) {
  if (o.inputs.empty()) throw UsageError("rope: give at least one input tensor");
  if (o.out.outputs.size() != o.inputs.size()) {
    throw UsageError(fmt::format("-o: {} input(s) need {} output(s), got {}", o.inputs.size(),
                                 o.inputs.size(), o.out.outputs.size()));
  }
  const std::size_t budget = o.rope.app->count("--max-memory") == 0
                                 ? default_max_memory()
                                 : parse_memory_size(o.max_memory, "--max-memory");

  RopeApplyOptions apply;
  apply.inverse = o.rope.inverse;
  apply.precision = rope_precision(o.rope);
  apply.allow_nonfinite = o.allow_nonfinite;
  if (!o.grid.empty()) {
    if (o.grid[0] <= 0 || o.grid[1] <= 0) {
      throw UsageError(fmt::format("--rope2d: height and width must be positive, got {} {}",
                                   o.grid[0], o.grid[1]));
    }
    apply.grid_h = o.grid[0];
    apply.grid_w = o.grid[1];
    apply.grid_yx = o.order == "yx";
  }
  if (!o.mrope_section.empty()) apply.mrope_section = parse_sections(o.mrope_section);

  std::vector<TensorRef> in_refs, out_refs;
  for (const auto& t : o.inputs) in_refs.push_back(parse_ref(t));
  for (const auto& t : o.out.outputs) out_refs.push_back(parse_ref(t, o.out.to, "/data"));
  int stdin_count = 0;
  std::set<std::string> h5_inputs;
  for (const auto& r : in_refs) {
    if (r.is_stdio() && ++stdin_count > 1) {
      throw UsageError("rope: only one input can come from standard input");
    }
    if (r.format == Format::hdf5) h5_inputs.insert(r.path);
  }
  for (const auto& r : out_refs) {
    // An HDF5 output is a new file renamed over the target: it would drop the input's
    // other datasets.
    if (r.format == Format::hdf5 && h5_inputs.count(r.path)) {
      throw UsageError(fmt::format("-o: {} would replace the input file {} (write the result "
                                   "to another HDF5 file)",
                                   r.text, r.path));
    }
  }
  Outputs outputs(out_refs, o.out.write_options());

  const Positions pos = rope_positions(o.rope);
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

    RopeParams params = rope_params(o.rope, static_cast<int>(head_dim));
    // 2-D RoPE's frequencies default to base 100, as `table rope2d`.
    if (apply.grid_h > 0 && o.rope.app->count("--base") == 0) params.base = 100.0;
    if (params.seq_len == 0) params.seq_len = positions_extent(pos, seq, apply);
    const RopeFreqs freqs = compute_rope_freqs(params);
    const DType out_dtype =
        o.dtype == "same" ? rope_default_out_dtype(info.dtype) : parse_dtype(o.dtype);

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
          "--max-memory: {} needs {} for one slab of {} row(s) along axis {} ({}), more than "
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
      out_info.attrs.push_back({"rope2d_order", o.order});
    }
    if (!apply.mrope_section.empty()) {
      out_info.attrs.push_back(
          {"mrope_section",
           std::vector<double>(apply.mrope_section.begin(), apply.mrope_section.end())});
    }
    verbose(fmt::format("{} -> {}: shape {}, axes {}, {} -> {}, {} slab(s) of {} row(s) along "
                        "axis {} ({})",
                        what, out_refs[k].text, shape_str(info.shape), axes.letters,
                        dtype_name(info.dtype), dtype_name(out_dtype),
                        total_rows == 0 ? 0 : (total_rows + slab_rows - 1) / slab_rows, slab_rows,
                        axis, axes.letters[axis]));
    verbose_attrs(out_info.attrs);
    TensorSink& sink = outputs.open(k, out_info);

    const std::size_t rows_per_slab = std::max<std::size_t>(slab_rows, 1);
    Progress progress(what, total_rows * applier.in_row_bytes());
    stream_slabs(
        src, sink, axis, total_rows, rows_per_slab, applier.in_row_bytes(),
        applier.out_row_bytes(), depth,
        in_refs[k].format == Format::hdf5 && out_refs[k].format == Format::hdf5,
        [&](const std::byte* in, std::byte* out, std::size_t first, std::size_t n) {
          applier.rows(in, out, first, n);
        },
        [&](std::size_t rows_done) { progress.update(rows_done * applier.in_row_bytes()); });
  }
  outputs.commit_all();
}

}  // namespace

void register_rope(CLI::App& app) {
  auto opts = std::make_shared<RopeCmdOptions>();
  auto* sub = app.add_subcommand(
      "rope",
      "Apply rotary position embedding (or its inverse) to every vector along axis d of one or "
      "more tensors, position taken from axis s. Inputs larger than --max-memory are streamed.");
  sub->add_option("inputs", opts->inputs,
                  "input tensor references (x.npy, x.h5:/q, x.csv, - for stdin)")
      ->required();
  add_output_options(sub, opts->out, /*multiple=*/true);
  sub->add_option("--axes", opts->axes,
                  "axis letters of the inputs from b, h, s, d (default by rank: sd, bsd, bhsd; "
                  "e.g. bshd)");
  sub->add_option("--dtype", opts->dtype,
                  "output type: same (default; f64 for integer inputs), f64, f32, f16, bf16")
      ->check(CLI::IsMember({"same", "f64", "f32", "f16", "bf16", "float64", "float32",
                             "float16", "bfloat16"}));
  add_rope_options(sub, opts->rope);
  const char* g = "ROPE OPTIONS";
  sub->add_option("--rope2d", opts->grid,
                  "axial 2-D RoPE over an H x W grid of tokens in row-major order: x and y "
                  "each get R/4 pairs with frequencies base^(-4j/R); --base defaults to 100")
      ->expected(2)
      ->transform(integer_text())
      ->type_name("H W")
      ->group(g);
  sub->add_option("--order", opts->order,
                  "2-D RoPE: which coordinate takes the first R/4 pairs, xy (default) or yx")
      ->check(CLI::IsMember({"xy", "yx"}))
      ->group(g);
  sub->add_option("--mrope-section", opts->mrope_section,
                  "M-RoPE (Qwen2-VL): pairs per t,h,w section, summing to R/2, e.g. 16,24,24; "
                  "--position-ids then has shape [3, s] or [3, b, s]")
      ->type_name("T,H,W")
      ->group(g);
  sub->add_flag("--allow-nonfinite", opts->allow_nonfinite,
                "rotate NaN/Inf input values instead of refusing them");
  sub->add_option("--max-memory", opts->max_memory,
                  "memory for buffers and tables (e.g. 512M, 2G, 1.5GiB or bytes; K, M, G, T are "
                  "powers of 1024; default 1/4 of physical memory); larger inputs are streamed "
                  "in slabs along their first axis whose extent is not 1");
  sub->callback([opts] { run_rope(*opts); });
}

}  // namespace posenc::cli
