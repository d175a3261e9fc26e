// The three-stage slab pipeline shared by the streaming operations (slab_pipeline.hpp).

#include "ops/slab_pipeline.hpp"

#include <fmt/core.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
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

void stream_slabs(TensorSource& src, TensorSink& sink, std::size_t axis, const SlabOp& op,
                  const SlabPlan& plan, bool serialize_io, int threads,
                  const std::function<void(std::size_t rows_done)>& done) {
  struct Slab {
    std::size_t buf = 0, first = 0, rows = 0;
  };
  // A mapped source (a regular NPY file) is transformed in place of the page cache:
  // no reader thread and no input buffers, which saves a copy of every byte. The
  // output slabs are then kept small, so that the writer copies them into the page
  // cache while they are still in the CPU's cache.
  const std::byte* mapped = src.mapped_data();
  std::size_t slab_rows = plan.rows;
  if (mapped) {
    // 1 MiB: measured against 256 KiB to 8 MiB on 256 MiB files (bench/rope); 8 MiB
    // slabs took twice as long as 256 KiB to 1 MiB ones.
    constexpr std::size_t kMappedSlabBytes = std::size_t{1} << 20;
    const std::size_t out_row = std::max<std::size_t>(op.out_row_bytes, 1);
    slab_rows = std::max(op.min_rows,
                         std::min(slab_rows, std::max<std::size_t>(kMappedSlabBytes / out_row, 1)));
  }
  const std::size_t total_rows = op.total_rows;
  std::vector<Buffer> in_bufs, out_bufs;
  Channel<std::size_t> free_in, free_out;
  Channel<Slab> read, transformed;
  for (std::size_t i = 0; i < plan.depth; ++i) {
    if (!mapped) in_bufs.emplace_back(slab_rows * op.in_row_bytes);
    out_bufs.emplace_back(slab_rows * op.out_row_bytes);
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
  auto io_lock = [&] {
    return serialize_io ? std::unique_lock<std::mutex>(io_mutex) : std::unique_lock<std::mutex>();
  };

  std::thread reader([&] {
    if (mapped) return;
    try {
      for (std::size_t first = op.first_row; first < total_rows; first += slab_rows) {
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
      for (std::size_t first = op.first_row; first < total_rows; first += slab_rows) {
        Slab s;
        if (!transformed.pop(s)) return;
        {
          auto lock = io_lock();
          sink.write_slab(axis, out_bufs[s.buf].data(), s.rows);
        }
        free_out.push(s.buf);
        if (done) done(s.first + s.rows - op.first_row);
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
  // Without -j, the transform gets the cores the reader and writer leave: libgomp's
  // workers spin-wait between slabs and would take those cores from the I/O threads,
  // which costs far more than a second transforming thread gains (the transform is a
  // small part of the time next to I/O). Results do not depend on the thread count.
  const int saved_threads = omp_get_max_threads();
  if (threads > 0) {
    omp_set_num_threads(threads);
  } else {
    omp_set_num_threads(std::max(1, std::min(saved_threads, omp_get_num_procs() - 2)));
  }
  try {
    for (std::size_t first = op.first_row; first < total_rows; first += slab_rows) {
      Slab in, out;
      if (mapped) {
        in = Slab{0, first, std::min(slab_rows, total_rows - first)};
      } else if (!read.pop(in)) {
        break;
      }
      if (!free_out.pop(out.buf)) break;
      out.first = in.first;
      out.rows = in.rows;
      op.rows(mapped ? mapped + in.first * op.in_row_bytes : in_bufs[in.buf].data(),
              out_bufs[out.buf].data(), in.first, in.rows);
      if (mapped) {
        io_detail::release_mapped(mapped + in.first * op.in_row_bytes, in.rows * op.in_row_bytes);
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
