#pragma once
/// \file
/// How many worker threads a process can start.

namespace posenc {

/// The largest worker-thread count posenc accepts (-j, set_threads).
constexpr int kMaxThreads = 4096;

/// The number of OpenMP workers to use when `requested` (1 to kMaxThreads) are asked for:
/// `requested` when that many threads can start in this process now, else as many as
/// could (at least 1). Found by starting `requested` - 1 threads (with the stack size
/// OpenMP's workers get) and ending them again: libgomp, which cannot report a thread
/// it failed to create, would otherwise end the process ("Thread creation failed") under
/// a memory or process limit (ulimit -v, RLIMIT_NPROC). Costs about 20 us per thread.
int startable_threads(int requested);

/// Sets the OpenMP worker count of the calling thread's parallel regions to `requested`
/// (1 to kMaxThreads) when that many can start, and starts them now, so that their
/// stacks are in place before the data take the room; when they cannot all start
/// (startable_threads), to half of those that could (at least 1), leaving room for the
/// data. Returns the count set.
int set_worker_threads(int requested);

}  // namespace posenc
