// Adding datasets to an existing HDF5 file without trusting it or risking it.
//
// Why the libhdf5 work runs in a child rather than after a validation pass: Debian's
// libhdf5 1.10.8 has known parser bugs (see hdf5_sandbox.cpp), and a read-only walk of
// a crafted file cannot show that the write path is safe: adding a dataset grows the
// group's B-tree and local heap, allocates from the file's free-space information and
// rewrites the superblock, none of which a read visits. So both the early check of the
// names (before anything is computed) and the merge itself run in forked children with
// the reader's limits (no core dump, address space and CPU bounded, a watchdog). The
// merge child works on a private byte copy of the file: a crash, hang or error there
// leaves the original untouched, and the parent removes the copy.
//
// Cost: the existing file is copied once (copy_file_range: in-kernel, or a reflink on
// filesystems that have them) and the new datasets are written twice (scratch, then
// copy). The copy is always fsynced before the rename, since it holds data that existed
// before this run.

#include "io/hdf5_append.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <vector>

#include "io/hdf5_reader.hpp"
#include "posenc/error.hpp"

namespace posenc::hdf5_append {

namespace {

constexpr std::size_t kChildHeadroom = hdf5_detail::kSandboxHeadroom;
constexpr int kDefaultTimeout = 10;

int timeout_seconds() { return hdf5_detail::env_seconds("POSENC_HDF5_TIMEOUT", kDefaultTimeout, 1); }

std::int64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void limit(int resource, rlim_t value) {
  rlimit r{value, value};
  ::setrlimit(resource, &r);
}

// The child's side of run_isolated: the HDF5 reader child's limits, and a CPU budget.
void enter_child(pid_t parent, int cpu_seconds, bool may_write) {
  hdf5_detail::enter_sandbox_child(parent, may_write);
  limit(RLIMIT_CPU, static_cast<rlim_t>(cpu_seconds) + 1);
}

enum Kind : char { kOk = 0, kFailed = 1, kOutOfMemory = 2, kBug = 3 };

// The child's body: runs `fn`, writes its outcome (a Kind, then a message) to `fd`.
[[noreturn]] void child_main(int fd, pid_t parent, int timeout, bool may_write,
                             const std::function<void()>& fn) {
  Kind kind = kOk;
  std::string msg;
  try {
    enter_child(parent, timeout, may_write);
    fn();
  } catch (const Error& e) {
    kind = kFailed;
    msg = e.what();
  } catch (const std::bad_alloc&) {
    kind = kOutOfMemory;
  } catch (const std::exception& e) {
    kind = kBug;
    msg = e.what();
  } catch (...) {
    kind = kBug;
  }
  msg.insert(msg.begin(), static_cast<char>(kind));
  for (std::size_t at = 0; at < msg.size();) {
    const ssize_t w = ::write(fd, msg.data() + at, msg.size() - at);
    if (w <= 0 && errno != EINTR) break;
    if (w > 0) at += static_cast<std::size_t>(w);
  }
  ::_exit(0);
}

// Everything the child writes until it closes its end (exits); false on timeout.
bool read_answer(int fd, int timeout, std::string& answer) {
  const std::int64_t deadline = now_ms() + std::int64_t{1000} * timeout;
  for (;;) {
    const std::int64_t left = deadline - now_ms();
    pollfd pfd{fd, POLLIN, 0};
    const int pr = left <= 0 ? 0 : ::poll(&pfd, 1, static_cast<int>(left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return false;
    char buf[4096];
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return true;
    answer.append(buf, static_cast<std::size_t>(r));
  }
}

// A child that ended without an answer: say how it died.
[[noreturn]] void report_death(const std::string& display, const char* doing, int timeout,
                               int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGXFSZ) {
      throw OutputError(fmt::format(
          "{}: cannot write {}: File too large (the file-size limit, ulimit -f); the file was "
          "left as it was",
          display, doing));
    }
    if (sig == SIGXCPU) {
      throw OutputError(
          fmt::format("{}: libhdf5 used more than {} s of CPU {} and was stopped (the file may be "
                      "malformed)",
                      display, timeout, doing));
    }
    throw OutputError(fmt::format(
        "{}: libhdf5 crashed {} (signal {}, SIG{}); the file is malformed or uses something "
        "libhdf5 mishandles, and was left as it was",
        display, doing, sig, sigabbrev_np(sig) ? sigabbrev_np(sig) : "unknown"));
  }
  throw OutputError(fmt::format("{}: libhdf5 ended {} (exit status {})", display, doing,
                                WIFEXITED(status) ? WEXITSTATUS(status) : -1));
}

// Runs `fn` in a forked child and waits at most `timeout` seconds (wall and CPU). An
// Error thrown there comes back as an OutputError with its message; a crash, a hang or
// an exhausted limit becomes an OutputError naming `display` and what was being done.
void run_isolated(const std::string& display, const char* doing, int timeout, bool may_write,
                  const std::function<void()>& fn) {
  // Other threads may call libhdf5 while this one waits for its child.
  hdf5_detail::Hdf5CallPause pause;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw OutputError(
        fmt::format("{}: cannot start libhdf5 {}: {}", display, doing, std::strerror(errno)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = hdf5_detail::fork_for_libhdf5();
  if (pid == 0) {
    hdf5_detail::close_inherited_fds(fds[1]);
    child_main(fds[1], parent, timeout, may_write, fn);
  }
  ::close(fds[1]);
  if (pid < 0) {
    const int e = errno;
    ::close(fds[0]);
    throw OutputError(
        fmt::format("{}: cannot start libhdf5 {}: {}", display, doing, std::strerror(e)));
  }
  std::string answer;
  const bool finished = read_answer(fds[0], timeout, answer);
  ::close(fds[0]);
  if (!finished) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!finished) {
    throw OutputError(fmt::format(
        "{}: libhdf5 did not finish {} within {} s and was stopped (the file may be malformed; "
        "POSENC_HDF5_TIMEOUT sets the limit)",
        display, doing, timeout));
  }
  if (answer.empty()) report_death(display, doing, timeout, status);
  const std::string msg = answer.substr(1);
  switch (answer[0]) {
    case kOk:
      return;
    case kFailed:
      throw OutputError(msg);
    case kOutOfMemory:
      throw OutputError(
          fmt::format("{}: {} needs more than the {} GiB of memory allowed to libhdf5", display,
                      doing, kChildHeadroom >> 30));
    default:
      throw std::runtime_error(msg.empty() ? "HDF5 append: unknown failure" : msg);
  }
}

// HDF5's signature, at byte 0 or after a user block of 512, 1024, 2048, ... bytes.
bool has_hdf5_signature(int fd, std::uint64_t size) {
  static const char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  for (std::uint64_t at = 0; at + 8 <= size; at = at == 0 ? 512 : at * 2) {
    char buf[8];
    if (::pread(fd, buf, 8, static_cast<off_t>(at)) != 8) return false;
    if (std::memcmp(buf, kSignature, 8) == 0) return true;
  }
  return false;
}

// Copies the bytes of `from` to `to_fd` (in the kernel where it can). Returns the stat of
// `from` as copied.
void copy_bytes(int in, int to_fd, const std::string& display) {
  struct stat st {};
  auto fail = [&](const char* what) {
    const int e = errno;
    throw OutputError(fmt::format("{}: cannot {}: {}", display, what, std::strerror(e)));
  };
  if (::fstat(in, &st) != 0) fail("read the existing file");
  std::uint64_t left = static_cast<std::uint64_t>(st.st_size);
  loff_t in_at = 0;
  bool kernel = true;
  std::vector<char> buf;
  while (left > 0) {
    if (kernel) {
      const ssize_t n = ::copy_file_range(in, &in_at, to_fd, nullptr,
                                          std::min<std::uint64_t>(left, std::uint64_t{1} << 30), 0);
      if (n > 0) {
        left -= static_cast<std::uint64_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        kernel = false;  // offsets are unchanged: fall back to read/write
        continue;
      }
      if (n == 0) break;  // the file shrank meanwhile: caught by the change check
      fail("copy the existing file");
    }
    if (buf.empty()) buf.resize(std::size_t{1} << 20);
    const ssize_t r = ::pread(in, buf.data(), std::min<std::uint64_t>(left, buf.size()), in_at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("read the existing file");
    if (r == 0) break;
    in_at += r;
    for (ssize_t at = 0; at < r;) {
      const ssize_t w = ::write(to_fd, buf.data() + at, static_cast<std::size_t>(r - at));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail("copy the existing file");
      at += w;
    }
    left -= static_cast<std::uint64_t>(r);
  }
}

bool same_file_state(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

}  // namespace

bool adds_to_existing(const std::string& target, const std::string& display, bool force) {
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return false;
  const int fd = ::open(target.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw OutputError(
        fmt::format("{}: cannot read the existing file: {}", display, std::strerror(errno)));
  }
  const bool hdf5 = has_hdf5_signature(fd, static_cast<std::uint64_t>(st.st_size));
  ::close(fd);
  if (!hdf5) {
    if (force) return false;
    throw OutputError(fmt::format(
        "{}: exists and is not an HDF5 file (datasets are added only to HDF5 files; --force "
        "replaces it)",
        display));
  }
  run_isolated(display, "opening it", timeout_seconds(), false,
               [&] { hdf5_detail::check_append_names(target, display, {}, force); });
  return true;
}

void check_name(const std::string& target, const std::string& display, const std::string& name,
                bool force) {
  run_isolated(display, "looking up the dataset", timeout_seconds(), false,
               [&] { hdf5_detail::check_append_names(target, display, {name}, force); });
}

namespace {

// Seconds to wait for another writer's lock.
int lock_timeout_seconds() { return hdf5_detail::env_seconds("POSENC_LOCK_TIMEOUT", 60, 0); }

// An exclusive flock on the file now at `target` (a file renamed over it while waiting
// is locked anew); -1 when there is no file there any more.
int lock_existing(const std::string& target, const std::string& display, struct stat& st) {
  // The lock may be another thread's, which needs libhdf5 to finish and let go of it.
  hdf5_detail::Hdf5CallPause pause;
  const std::int64_t deadline = now_ms() + std::int64_t{1000} * lock_timeout_seconds();
  for (int pause_ms = 1;;) {
    const int fd = ::open(target.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return -1;
    if (fd < 0) {
      throw OutputError(
          fmt::format("{}: cannot read the existing file: {}", display, std::strerror(errno)));
    }
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        const int e = errno;
        ::close(fd);
        throw OutputError(fmt::format("{}: cannot lock it: {}", display, std::strerror(e)));
      }
      if (now_ms() >= deadline) {
        ::close(fd);
        throw OutputError(fmt::format(
            "{}: another process holds it open for writing (h5py, libhdf5 or posenc); gave up "
            "after {} s (POSENC_LOCK_TIMEOUT); the file was left as it was",
            display, lock_timeout_seconds()));
      }
      ::usleep(static_cast<useconds_t>(pause_ms) * 1000);
      pause_ms = std::min(pause_ms * 2, 50);
    }
    struct stat now {};
    if (::fstat(fd, &st) == 0 && ::stat(target.c_str(), &now) == 0 && now.st_dev == st.st_dev &&
        now.st_ino == st.st_ino) {
      return fd;
    }
    ::close(fd);  // replaced (or removed) while we waited: lock what is there now
  }
}

std::uint64_t free_bytes(const std::string& path) {
  struct statvfs vs {};
  if (::statvfs(path.c_str(), &vs) != 0) return UINT64_MAX;
  return static_cast<std::uint64_t>(vs.f_bavail) * vs.f_frsize;
}

std::string dir_of(const std::string& p) {
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
}

}  // namespace

Merge::Merge(const std::string& target, const std::string& display, const std::string& scratch,
             const std::vector<std::string>& names, const Attrs& root_attrs, bool force)
    : display_(display) {
  lock_fd_ = lock_existing(target, display, locked_);
  if (lock_fd_ < 0) return;
  struct stat sst {};
  const std::uint64_t new_bytes = ::stat(scratch.c_str(), &sst) == 0 ? sst.st_size : 0;
  // The copy holds the whole file and the new datasets: refused before it fills the disk
  // for every other writer there.
  const std::uint64_t need = static_cast<std::uint64_t>(locked_.st_size) + new_bytes;
  const std::uint64_t have = free_bytes(dir_of(target));
  if (need + (std::uint64_t{4} << 20) > have) {
    throw OutputError(fmt::format(
        "{}: cannot add to it: No space left on device (the copy made to add to it needs {:.1f} "
        "MiB, the filesystem has {:.1f} MiB free); the file was left as it was",
        display, static_cast<double>(need) / 1048576.0, static_cast<double>(have) / 1048576.0));
  }
  copy_ = std::make_unique<TempFile>(target, /*no_clobber=*/false, /*sync=*/true,
                                     /*regular_only=*/true, /*named=*/true);
  copy_bytes(lock_fd_, copy_->fd(), display);
  // Time for the data being copied as well (16 MiB/s at least), not only for the file's
  // structure.
  const int timeout = timeout_seconds() + static_cast<int>(std::min<std::uint64_t>(
                                              new_bytes >> 24, std::uint64_t{1} << 20));
  try {
    run_isolated(display, "adding the datasets", timeout, true, [&] {
      hdf5_detail::merge_datasets(scratch, copy_->path(), display, names, root_attrs, force);
      // For the tests: a crash, or a hang, after the copy was modified and before it is
      // published.
      const char* fault = std::getenv("POSENC_HDF5_FAULT");
      if (fault != nullptr && std::strcmp(fault, "append-abort") == 0) std::abort();
      if (fault != nullptr && std::strcmp(fault, "append-hang") == 0) {
        for (volatile unsigned long spin = 0;; spin = spin + 1) {
        }
      }
    });
  } catch (const OutputError&) {
    // libhdf5 reports a full disk as a failed (or aborted) write: say what it was.
    if (free_bytes(dir_of(target)) < (std::uint64_t{1} << 20)) {
      throw OutputError(fmt::format(
          "{}: cannot add the datasets: No space left on device; the file was left as it was",
          display));
    }
    throw;
  }
  copy_->sync_and_close();
}

Merge::~Merge() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void Merge::publish() {
  // Writers that do not lock (HDF5_USE_FILE_LOCKING=FALSE) are still noticed.
  struct stat after {};
  if (::stat(copy_->target().c_str(), &after) != 0 || !same_file_state(locked_, after)) {
    throw OutputError(fmt::format(
        "{}: the file changed while posenc was adding to it; left as the other writer made it",
        display_));
  }
  copy_->publish();
}

}  // namespace posenc::hdf5_append
