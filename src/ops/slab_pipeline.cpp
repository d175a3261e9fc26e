// The three-stage slab pipeline shared by the streaming operations (slab_pipeline.hpp).

#include "ops/slab_pipeline.hpp"

#include <fmt/core.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "io/slab.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/rope_stream.hpp"

namespace posenc::detail {

std::size_t default_max_memory() {
  const std::size_t ram = physical_memory();
  return ram == 0 ? std::size_t{1} << 30 : ram / 4;
}

namespace {

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

/// The wall time an I/O stage (reader or writer) spent in its reads or writes, summed
/// over the slabs it finished: published by that stage for TransformThreads.
struct StageTime {
  std::atomic<std::int64_t> ns{0};
  std::atomic<std::int64_t> rows{0};
  /// Times `io()` and adds it as `n` entries.
  template <typename F>
  void time(std::size_t n, F&& io) {
    const auto t0 = std::chrono::steady_clock::now();
    io();
    const auto t = std::chrono::steady_clock::now() - t0;
    ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count(),
                 std::memory_order_relaxed);
    rows.fetch_add(static_cast<std::int64_t>(n), std::memory_order_release);
  }
};

/// CPU time of the calling thread in nanoseconds.
std::int64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

/// How many of the `cap` allowed OpenMP threads transform the next slab. The reader and
/// writer threads keep a core each busy (one between them when reads and writes take
/// turns), so the transform starts on the cores they leave, at least one: a second
/// transforming thread on a two-core machine only took CPU and memory bandwidth from
/// the writer (a 256 MiB f32 RoPE from tmpfs to tmpfs, writing two thirds of its CPU,
/// ran 3-8% slower with -j 2 than with -j 1 beside a busy process, and up to 24% slower
/// to ext4). When that leaves threads of `cap` unused, the transform's time per entry
/// (the calling thread's CPU time: OpenMP splits the rows evenly; the median of the
/// last few slabs, as the first ten or so also fault in fresh working memory) is set
/// against the I/O's wall time per entry (reading and writing in turn when they are
/// serialised, else the slower of the two). A transform that takes more than twice as
/// long as the I/O at two decisions in a row leaves the I/O threads idle over half the
/// time, and gets all `cap` threads for the rest of the run. (Coming back down is not
/// decided from the same figures: on more threads the transform's CPU time grows with
/// their contention for memory.)
class TransformThreads {
 public:
  TransformThreads(int cap, int io_threads, bool serialize_io, const StageTime& reader,
                   const StageTime& writer)
      : cap_(std::max(cap, 1)),
        threads_(std::min(cap_, std::max(1, omp_get_num_procs() - io_threads))),
        serialize_(serialize_io),
        reader_(reader),
        writer_(writer) {}

  int threads() const { return threads_; }

  /// Records a slab of `rows` entries whose transform took `cpu_ns` of the calling
  /// thread's CPU time.
  void transformed(std::size_t rows, std::int64_t cpu_ns) {
    if (threads_ == cap_ || rows == 0) return;
    recent_[slabs_ % kRecent] = static_cast<double>(cpu_ns) / static_cast<double>(rows);
    if (++slabs_ < kFirstDecision || slabs_ % kEvery != 0) return;
    std::array<double, kRecent> sorted = recent_;
    std::nth_element(sorted.begin(), sorted.begin() + kRecent / 2, sorted.end());
    const double cpu = sorted[kRecent / 2];
    const double io =
        serialize_ ? rate(reader_) + rate(writer_) : std::max(rate(reader_), rate(writer_));
    bound_decisions_ = io > 0 && cpu > kComputeBound * io ? bound_decisions_ + 1 : 0;
    if (bound_decisions_ >= 2) threads_ = cap_;
  }

 private:
  static constexpr std::size_t kRecent = 8;  ///< slabs whose median is taken
  static constexpr std::size_t kFirstDecision = 16;
  static constexpr std::size_t kEvery = 4;  ///< slabs between decisions
  static constexpr double kComputeBound = 2.0;

  /// Wall nanoseconds per entry of a stage so far (0 before its first slab).
  static double rate(const StageTime& s) {
    const std::int64_t rows = s.rows.load(std::memory_order_acquire);
    const std::int64_t ns = s.ns.load(std::memory_order_relaxed);
    return rows == 0 ? 0.0 : static_cast<double>(ns) / static_cast<double>(rows);
  }

  const int cap_;
  int threads_;
  const bool serialize_;
  const StageTime& reader_;
  const StageTime& writer_;
  std::size_t slabs_ = 0;
  std::array<double, kRecent> recent_{};
  int bound_decisions_ = 0;
};

/// Buffers per side (input, output) of the slab pipeline: two let the reader fill
/// slab i+1 and the writer drain slab i-1 while slab i is transformed.
constexpr std::size_t kPipelineDepth = 2;

}  // namespace

SlabPlan plan_slabs(const SlabOp& op, std::size_t budget, const std::string& what, std::size_t axis,
                    char axis_letter) {
  // Every pipeline buffer counts; a budget too small for double buffering gets one
  // buffer per side (no overlap) rather than a refusal.
  SlabPlan plan;
  plan.depth = kPipelineDepth;
  auto cost = [&](std::size_t rows) {
    return plan.depth * rows * (op.in_row_bytes + op.out_row_bytes) + op.table_bytes(rows);
  };
  std::size_t lo = op.min_rows, hi = std::max<std::size_t>(op.total_rows - op.first_row, 1);
  if (cost(lo) > budget) plan.depth = 1;
  if (cost(lo) > budget) {
    throw UsageError(
        fmt::format("max_memory: {} needs {} for one slab of {} row(s) along axis {} ({}), more "
                    "than the limit of {}",
                    what, bytes_str(cost(lo)), lo, axis, axis_letter, bytes_str(budget)));
  }
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo + 1) / 2;
    if (cost(mid) <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  // Even when everything fits, moderate slabs are faster: the same few MiB of buffers
  // are reused (already mapped and cached) instead of faulting in fresh pages for the
  // whole tensor, and reading, transforming and writing stay in cache.
  const std::size_t kSlabTarget = std::size_t{8} << 20;
  const std::size_t row_in = std::max<std::size_t>(op.in_row_bytes, 1);
  plan.rows = std::max(op.min_rows, std::min(lo, std::max<std::size_t>(kSlabTarget / row_in, 1)));
  plan.rows = std::max<std::size_t>(plan.rows, 1);
  return plan;
}

SlabShape slab_shape(TensorSource& src, const TensorSink& sink, const SlabOp& op,
                     const SlabPlan& plan) {
  SlabShape shape;
  shape.rows = plan.rows;
  shape.parts = std::max<std::size_t>(op.parts, 1);
  // A mapped source (a regular NPY file) is transformed in place of the page cache:
  // no reader thread and no input buffers, which saves a copy of every byte. The
  // output slabs are then kept small, so that the writer copies them into the page
  // cache while they are still in the CPU's cache.
  if (src.mapped_data() != nullptr) {
    // 1 MiB: measured against 256 KiB to 8 MiB on 256 MiB files (bench/rope); 8 MiB
    // slabs took twice as long as 256 KiB to 1 MiB ones.
    constexpr std::size_t kMappedSlabBytes = std::size_t{1} << 20;
    const std::size_t out_row = std::max<std::size_t>(op.out_row_bytes, 1);
    shape.rows = std::max(
        op.min_rows, std::min(shape.rows, std::max<std::size_t>(kMappedSlabBytes / out_row, 1)));
    // A row larger than that ([b, h, s, d] along b: h*s*d values) is cut along the next
    // axis and its parts written in place. Whole 32 MiB rows took 1.4-3 times as long as
    // `dd` on ext4: the writer copied each from memory rather than from the cache, and
    // the two fresh 32 MiB buffers cost 16,000 page faults.
    if (shape.rows == 1 && op.min_rows == 1 && shape.parts > 1 && op.part &&
        out_row > kMappedSlabBytes && op.out_row_bytes % shape.parts == 0 &&
        op.in_row_bytes % shape.parts == 0 &&
        (op.out_row_bytes / shape.parts) % std::max<std::size_t>(op.out_item, 1) == 0 &&
        sink.writes_at()) {
      shape.part_entries = std::max<std::size_t>(kMappedSlabBytes / (out_row / shape.parts), 1);
    }
  }
  return shape;
}

std::string SlabShape::describe(std::size_t total_rows) const {
  if (part_entries == 0) {
    return fmt::format("{} slab(s) of {} row(s)",
                       total_rows == 0 ? 0 : (total_rows + rows - 1) / rows, rows);
  }
  const std::size_t per_row = (parts + part_entries - 1) / part_entries;
  return fmt::format("{} slab(s) of {}/{} of a row", total_rows * per_row, part_entries, parts);
}

void stream_slabs(TensorSource& src, TensorSink& sink, std::size_t axis, const SlabOp& op,
                  const SlabPlan& plan, bool serialize_io, int threads,
                  const std::function<void(std::size_t rows_done)>& done) {
  // Rows [first, first + rows), or, when rows are cut, entries [sub_first, sub_first +
  // sub_count) of the next axis within row `first` (rows is then 1).
  struct Slab {
    std::size_t buf = 0, first = 0, rows = 0, sub_first = 0, sub_count = 0;
  };
  const std::byte* mapped = src.mapped_data();
  const SlabShape shape = slab_shape(src, sink, op, plan);
  const std::size_t slab_rows = shape.rows, part_entries = shape.part_entries, parts = shape.parts;
  const std::size_t in_part = op.in_row_bytes / parts, out_part = op.out_row_bytes / parts;
  const std::size_t out_item = std::max<std::size_t>(op.out_item, 1);
  const std::size_t total_rows = op.total_rows;
  // The slab after `s` (from op.first_row when `s` is the Slab{}), false past the end.
  auto next_slab = [&](Slab& s, bool first_one) {
    if (part_entries == 0) {
      s.first = first_one ? op.first_row : s.first + s.rows;
      if (s.first >= total_rows) return false;
      s.rows = std::min(slab_rows, total_rows - s.first);
      return true;
    }
    if (first_one) {
      s.first = op.first_row;
      s.sub_first = 0;
    } else {
      s.sub_first += s.sub_count;
      if (s.sub_first == parts) s.first += 1, s.sub_first = 0;
    }
    if (s.first >= total_rows) return false;
    s.rows = 1;
    s.sub_count = std::min(part_entries, parts - s.sub_first);
    return true;
  };
  // Entries a slab counts for the stage times (rows, or parts of rows).
  auto units = [&](const Slab& s) { return part_entries == 0 ? s.rows : s.sub_count; };
  const std::size_t in_bytes =
      part_entries == 0 ? slab_rows * op.in_row_bytes : part_entries * in_part;
  const std::size_t out_bytes =
      part_entries == 0 ? slab_rows * op.out_row_bytes : part_entries * out_part;
  std::vector<Buffer> in_bufs, out_bufs;
  Channel<std::size_t> free_in, free_out;
  Channel<Slab> read, transformed;
  for (std::size_t i = 0; i < plan.depth; ++i) {
    if (!mapped) in_bufs.emplace_back(in_bytes);
    out_bufs.emplace_back(out_bytes);
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
    transformed.cancel();
  };
  StageTime read_time, write_time;
  auto io_lock = [&] {
    return serialize_io ? std::unique_lock<std::mutex>(io_mutex) : std::unique_lock<std::mutex>();
  };

  std::thread reader([&] {
    if (mapped) return;
    try {
      Slab s;
      for (bool more = next_slab(s, true); more; more = next_slab(s, false)) {
        if (!free_in.pop(s.buf)) return;
        {
          auto lock = io_lock();
          read_time.time(s.rows,
                         [&] { src.read_slab(axis, s.first, s.rows, in_bufs[s.buf].data()); });
        }
        read.push(s);
      }
    } catch (...) {
      fail(std::current_exception());
    }
  });
  auto write_all = [&] {
    try {
      Slab expect;
      for (bool more = next_slab(expect, true); more; more = next_slab(expect, false)) {
        Slab s;
        if (!transformed.pop(s)) return;
        {
          auto lock = io_lock();
          write_time.time(units(s), [&] {
            if (part_entries == 0) {
              sink.write_slab(axis, out_bufs[s.buf].data(), s.rows);
            } else {
              const std::size_t part_elems = out_part / out_item;
              sink.write_at(((s.first - op.first_row) * parts + s.sub_first) * part_elems,
                            out_bufs[s.buf].data(), s.sub_count * part_elems);
            }
          });
        }
        free_out.push(s.buf);
        if (done && s.sub_first + s.sub_count == (part_entries == 0 ? 0 : parts)) {
          done(s.first + s.rows - op.first_row);
        }
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
  // Without -j, the transform never gets more than the cores the reader and writer
  // leave: a shared libgomp's workers then spin-wait between slabs (main.cpp sets a
  // passive wait only with -j or a static libgomp) and would take those cores from the
  // I/O threads. Within the cap, TransformThreads chooses. Results do not depend on the
  // thread count.
  const int saved_threads = omp_get_max_threads();
  TransformThreads team(
      threads > 0 ? threads : std::max(1, std::min(saved_threads, omp_get_num_procs() - 2)),
      mapped || serialize_io ? 1 : 2, serialize_io, read_time, write_time);
  try {
    Slab next;
    for (bool more = next_slab(next, true); more; more = next_slab(next, false)) {
      Slab in = next, out;
      if (!mapped && !read.pop(in)) break;
      if (!free_out.pop(out.buf)) break;
      out.first = in.first;
      out.rows = in.rows;
      out.sub_first = in.sub_first;
      out.sub_count = in.sub_count;
      omp_set_num_threads(team.threads());
      const std::int64_t cpu0 = thread_cpu_ns();
      const std::byte* at =
          mapped ? mapped + in.first * op.in_row_bytes + in.sub_first * in_part : nullptr;
      if (part_entries == 0) {
        op.rows(mapped ? at : in_bufs[in.buf].data(), out_bufs[out.buf].data(), in.first, in.rows);
      } else {
        op.part(at, out_bufs[out.buf].data(), in.first, in.sub_first, in.sub_count);
      }
      team.transformed(units(in), thread_cpu_ns() - cpu0);
      if (mapped) {
        io_detail::release_mapped(
            at, part_entries == 0 ? in.rows * op.in_row_bytes : in.sub_count * in_part);
      } else {
        free_in.push(in.buf);
      }
      transformed.push(out);
    }
  } catch (...) {
    fail(std::current_exception());
  }
  omp_set_num_threads(saved_threads);
  reader.join();
  if (writer.joinable()) writer.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace posenc::detail
