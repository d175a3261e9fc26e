// Reading HDF5 in a child process.
//
// libhdf5 1.10.8 (Debian's) has known parser bugs: crafted files overflow its heap,
// crash it, make it allocate gigabytes or loop forever. posenc cannot fix the library,
// so every libhdf5 call on a file being read runs in a forked child with limits:
// address space (current size + 1 GiB), CPU time per request, no core dump, no file
// writes, and a watchdog in the parent that kills a child which does not answer within
// POSENC_HDF5_TIMEOUT seconds (default 10). Data come back through shared memory (a
// memfd mapped before the fork, two slots of 16 MiB each followed by a guard page, so
// an overflow past a read buffer faults in the child), requests and answers through a
// socket. A child that dies, hangs or runs out of its limits becomes one InputError
// (exit 3) in the parent, whose own memory and outputs it cannot touch.
//
// Reads are cut into pieces of at most one slot, and the child fills one slot while the
// parent copies the other out, so on two cores the copy costs little next to the read.

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/hdf5_reader.hpp"
#include "io/slab.hpp"
#include "posenc/error.hpp"
#include "posenc/io/hdf5.hpp"
#include "posenc/printable.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define POSENC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define POSENC_ASAN 1
#endif
#endif

// In sanitizer builds (the fuzzers): the hook a fuzzer sets to save the input when a
// sanitizer reports an error. The child clears it, so that libhdf5's errors it catches
// end the child only. Absent (null) in ordinary builds.
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

namespace posenc {

namespace {

constexpr std::size_t kSlotBytes = std::size_t{16} << 20;
constexpr std::size_t kChildHeadroom = hdf5_detail::kSandboxHeadroom;
constexpr int kDefaultTimeout = 10;
constexpr int kChildFailed = 125;  // exit status of a child whose own code failed

// --- the row and slab arithmetic shared by both sources ---------------------------

/// A TensorSource whose reads are flat element ranges in C order: rows and slabs
/// along a leading-unit axis are such ranges.
class FlatSource : public TensorSource {
 public:
  const TensorInfo& info() const override { return info_; }
  bool seekable() const override { return true; }
  void read_rows(std::size_t first, std::size_t count, void* dst) override {
    read_slab(0, first, count, dst);
  }
  void read_slab(std::size_t axis, std::size_t first, std::size_t count, void* dst) override {
    io_detail::check_slab_axis(info_.shape, axis);
    const std::size_t n = io_detail::slab_extent(info_.shape, axis);
    if (first > n || count > n - first) {
      throw InputError(fmt::format("{}: entries {}..{} along axis {} requested, the dataset has {}",
                                   what_, first, first + count, axis, n));
    }
    const std::size_t entry = io_detail::slab_entry_bytes(info_.shape, axis, 1);
    if (count == 0 || entry == 0) return;
    read_flat(first * entry, count * entry, dst);
  }
  // The child reads a flat range as a union of hyperslabs (hdf5.cpp).
  void read_elements(std::size_t first, std::size_t count, void* dst) override {
    std::size_t n = 1;
    for (std::size_t e : info_.shape) n *= e;
    if (first > n || count > n - first) {
      throw InputError(fmt::format("{}: elements {}..{} requested, the dataset has {}", what_,
                                   first, first + count, n));
    }
    if (count) read_flat(first, count, dst);
  }

 protected:
  virtual void read_flat(std::size_t first, std::size_t count, void* dst) = 0;
  TensorInfo info_;
  std::string what_;
};

class InProcessSource final : public FlatSource {
 public:
  explicit InProcessSource(std::unique_ptr<hdf5_detail::DatasetReader> r) : r_(std::move(r)) {
    info_ = r_->info();
  }

 private:
  void read_flat(std::size_t first, std::size_t count, void* dst) override {
    r_->read_flat(first, count, dst);
  }
  std::unique_ptr<hdf5_detail::DatasetReader> r_;
};

// --- messages -------------------------------------------------------------------

enum class Op : std::uint8_t { open = 1, read = 2, list = 3 };
enum class Reply : std::uint8_t { ok = 0, input_error = 1, other_error = 2, out_of_memory = 3 };

class Writer {
 public:
  Writer& u64(std::uint64_t v) {
    buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Writer& f64(double v) {
    buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Writer& str(const std::string& s) {
    u64(s.size());
    buf_ += s;
    return *this;
  }
  const std::string& bytes() const { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(std::string b) : buf_(std::move(b)) {}
  std::uint64_t u64() {
    std::uint64_t v;
    take(&v, sizeof v);
    return v;
  }
  double f64() {
    double v;
    take(&v, sizeof v);
    return v;
  }
  std::string str() {
    const std::uint64_t n = u64();
    if (n > buf_.size() - at_) throw std::runtime_error("HDF5 sandbox: malformed message");
    std::string s = buf_.substr(at_, n);
    at_ += n;
    return s;
  }

 private:
  void take(void* dst, std::size_t n) {
    if (n > buf_.size() - at_) throw std::runtime_error("HDF5 sandbox: malformed message");
    std::memcpy(dst, buf_.data() + at_, n);
    at_ += n;
  }
  std::string buf_;
  std::size_t at_ = 0;
};

void put_info(Writer& w, const TensorInfo& info) {
  w.u64(static_cast<std::uint64_t>(info.dtype)).u64(info.shape.size());
  for (auto d : info.shape) w.u64(d);
  w.str(info.storage).u64(info.attrs.size());
  for (const Attr& a : info.attrs) {
    w.str(a.name).u64(a.value.index());
    if (const auto* s = std::get_if<std::string>(&a.value)) w.str(*s);
    if (const auto* d = std::get_if<double>(&a.value)) w.f64(*d);
    if (const auto* i = std::get_if<long long>(&a.value)) w.u64(static_cast<std::uint64_t>(*i));
    if (const auto* v = std::get_if<std::vector<double>>(&a.value)) {
      w.u64(v->size());
      for (double x : *v) w.f64(x);
    }
  }
}

TensorInfo get_info(Reader& r) {
  TensorInfo info;
  info.dtype = static_cast<DType>(r.u64());
  info.shape.resize(r.u64());
  for (auto& d : info.shape) d = r.u64();
  info.storage = r.str();
  const std::uint64_t n = r.u64();
  for (std::uint64_t k = 0; k < n; ++k) {
    Attr a;
    a.name = r.str();
    switch (r.u64()) {
      case 0:
        a.value = r.str();
        break;
      case 1:
        a.value = r.f64();
        break;
      case 2:
        a.value = static_cast<long long>(r.u64());
        break;
      default: {
        std::vector<double> v(r.u64());
        for (double& x : v) x = r.f64();
        a.value = std::move(v);
      }
    }
    info.attrs.push_back(std::move(a));
  }
  return info;
}

// Whole frames (a u64 length, then the payload) over a stream socket.
bool write_all(int fd, const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool send_frame(int fd, const std::string& payload) {
  const std::uint64_t n = payload.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, payload.data(), payload.size());
}

// Reads n bytes, waiting at most until `deadline_ms` (CLOCK_MONOTONIC; <0: forever).
// Returns 1 on success, 0 on end of stream or error, -1 on timeout.
std::int64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int read_all(int fd, void* p, std::size_t n, std::int64_t deadline_ms) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    if (deadline_ms >= 0) {
      const std::int64_t left = deadline_ms - now_ms();
      if (left <= 0) return -1;
      pollfd pfd{fd, POLLIN, 0};
      const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left, 1 << 30)));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) return -1;
    }
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    c += r;
    n -= static_cast<std::size_t>(r);
  }
  return 1;
}

// --- the child ------------------------------------------------------------------

[[maybe_unused]] std::size_t address_space_bytes() {
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return static_cast<std::size_t>(std::max(pages, 0L)) *
         static_cast<std::size_t>(::sysconf(_SC_PAGE_SIZE));
}

void limit(int resource, rlim_t soft, rlim_t hard) {
  rlimit r{soft, hard};
  ::setrlimit(resource, &r);
}


// Before each request: this much more CPU time, then SIGXCPU.
void cpu_budget(int seconds) {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const rlim_t used = static_cast<rlim_t>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec);
  rlimit r{};
  ::getrlimit(RLIMIT_CPU, &r);
  r.rlim_cur = std::min<rlim_t>(used + static_cast<rlim_t>(seconds) + 1, r.rlim_max);
  ::setrlimit(RLIMIT_CPU, &r);
}

// POSENC_HDF5_FAULT=list-segv makes the child die of SIGSEGV after listing a file's
// datasets, as libhdf5 does on some crafted files (not on every run: what it reads
// there depends on memory it never initialised). For tests only.
void list_fault() {
  const char* fault = std::getenv("POSENC_HDF5_FAULT");
  if (fault != nullptr && std::string(fault) == "list-segv") {
    std::signal(SIGSEGV, SIG_DFL);  // (not a sanitizer's report: the plain signal)
    std::raise(SIGSEGV);
  }
}

// POSENC_HDF5_FAULT makes the child fail after each read the way libhdf5's bugs do, so
// the tests can show each failure contained: "overflow" writes past the read buffer
// (into the guard page), "abort" aborts (a heap check of the C library), "hang" loops
// forever, "alloc" allocates memory without end. For tests only.
void inject_fault(std::byte* end, std::byte* slot_end) {
  static const char* fault = std::getenv("POSENC_HDF5_FAULT");
  if (fault == nullptr) return;
  const std::string f = fault;
  if (f == "overflow") std::memset(end, 0xab, static_cast<std::size_t>(slot_end - end) + 1);
  if (f == "abort") std::abort();
  if (f == "hang") {
    for (volatile unsigned long spin = 0;; spin = spin + 1) {
    }
  }
  if (f == "alloc") {
    std::vector<std::unique_ptr<char[]>> hog;
    for (;;) hog.emplace_back(new char[std::size_t{256} << 20]);
  }
}

std::string answer_ok(const std::string& body = {}) {
  return std::string(1, static_cast<char>(Reply::ok)) + body;
}

std::string answer_error(Reply kind, const std::string& message) {
  Writer w;
  w.str(message);
  return std::string(1, static_cast<char>(kind)) + w.bytes();
}

[[noreturn]] void serve(int sock, std::byte* slots, int timeout) {
  std::unique_ptr<hdf5_detail::DatasetReader> ds;
  for (;;) {
    std::uint64_t n = 0;
    if (read_all(sock, &n, sizeof n, -1) != 1) ::_exit(0);
    std::string req(n, '\0');
    if (read_all(sock, req.data(), n, -1) != 1) ::_exit(0);
    cpu_budget(timeout);
    std::string out;
    try {
      Reader r(req.substr(1));
      switch (static_cast<Op>(req.at(0))) {
        case Op::open: {
          TensorRef ref;
          ref.path = r.str();
          ref.dataset = r.str();
          ref.text = r.str();
          ref.format = Format::hdf5;
          const bool attrs = r.u64() != 0;
          ds = hdf5_detail::open_dataset(ref, attrs);
          Writer w;
          put_info(w, ds->info());
          const hdf5_detail::DatasetReader::RawBytes raw = ds->raw_bytes();
          w.u64(raw.offset).u64(raw.dev).u64(raw.ino);
          out = answer_ok(w.bytes());
          break;
        }
        case Op::read: {
          const std::uint64_t first = r.u64(), count = r.u64(), slot = r.u64();
          if (!ds || slot > 1 || count * dtype_size(ds->info().dtype) > kSlotBytes) {
            throw std::logic_error("HDF5 sandbox: bad read request");
          }
          std::byte* buf = slots + slot * (kSlotBytes + ::sysconf(_SC_PAGE_SIZE));
          ds->read_flat(first, count, buf);
          inject_fault(buf + count * dtype_size(ds->info().dtype), buf + kSlotBytes);
          out = answer_ok();
          break;
        }
        case Op::list: {
          const std::string path = r.str();
          const std::vector<std::string> names = hdf5_detail::list_datasets(path);
          list_fault();
          Writer w;
          w.u64(names.size());
          for (const std::string& name : names) {
            TensorRef ref{path + ":" + name, path, name, Format::hdf5, {}};
            w.str(name);
            std::unique_ptr<hdf5_detail::DatasetReader> d;
            try {
              d = hdf5_detail::open_dataset(ref, false);
            } catch (const InputError& e) {
              w.u64(0).str(e.what());
              continue;
            }
            put_info(w.u64(1), d->info());
          }
          out = answer_ok(w.bytes());
          break;
        }
      }
    } catch (const InputError& e) {
      out = answer_error(Reply::input_error, e.what());
    } catch (const std::bad_alloc&) {
      out = answer_error(Reply::out_of_memory, "");
    } catch (const std::exception& e) {
      out = answer_error(Reply::other_error, e.what());
    }
    if (!send_frame(sock, out)) ::_exit(0);
  }
}

// --- the parent -----------------------------------------------------------------

int timeout_seconds() { return hdf5_detail::env_seconds("POSENC_HDF5_TIMEOUT", kDefaultTimeout, 1); }

/// A forked child holding libhdf5, and the shared slots it reads into.
class Child {
 public:
  explicit Child(std::string what) : what_(std::move(what)), timeout_(timeout_seconds()) {
    // Where the posenc executable loads libhdf5 on first use, it is loaded here, in the
    // parent: once per process rather than once per child. Loading runs no code on the
    // file, so the child is as isolated as it was with libhdf5 linked.
    if (const std::string why = hdf5_detail::hdf5_unavailable(); !why.empty()) {
      throw InputError(fmt::format("{}: cannot read HDF5 files: {}", what_, why));
    }
    page_ = static_cast<std::size_t>(::sysconf(_SC_PAGE_SIZE));
    map_bytes_ = 2 * (kSlotBytes + page_);
    shm_ = ::memfd_create("posenc-hdf5", MFD_CLOEXEC);
    if (shm_ < 0 || ::ftruncate(shm_, static_cast<off_t>(2 * kSlotBytes)) != 0) {
      cleanup();
      throw InputError(
          fmt::format("{}: cannot set up the HDF5 reader: {}", what_, std::strerror(errno)));
    }
    // [slot 0][guard][slot 1][guard]: the guards stay PROT_NONE.
    void* base = ::mmap(nullptr, map_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    bool ok = base != MAP_FAILED;
    for (int s = 0; ok && s < 2; ++s) {
      void* at = static_cast<char*>(base) + s * (kSlotBytes + page_);
      ok = ::mmap(at, kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, shm_,
                  static_cast<off_t>(s * kSlotBytes)) != MAP_FAILED;
    }
    if (base != MAP_FAILED) slots_ = static_cast<std::byte*>(base);
    int sv[2] = {-1, -1};
    if (!ok || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      cleanup();
      throw InputError(
          fmt::format("{}: cannot set up the HDF5 reader: {}", what_, std::strerror(errno)));
    }
    const pid_t parent = ::getpid();
    pid_ = hdf5_detail::fork_for_libhdf5();
    if (pid_ == 0) {
      // Nothing may return from here into the caller's code: an exception escaping the
      // child (say, an allocation failing against its limit) ends it instead.
      try {
        hdf5_detail::close_inherited_fds(sv[1]);
        hdf5_detail::enter_sandbox_child(parent, /*may_write=*/false);
        serve(sv[1], slots_, timeout_);
      } catch (...) {
      }
      ::_exit(kChildFailed);
    }
    ::close(sv[1]);
    sock_ = sv[0];
    if (pid_ < 0) {
      cleanup();
      throw InputError(
          fmt::format("{}: cannot start the HDF5 reader: {}", what_, std::strerror(errno)));
    }
  }
  ~Child() { cleanup(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  void send(Op op, const Writer& body) {
    if (dead_) throw InputError(what_ + ": the HDF5 reader is gone");
    std::string msg(1, static_cast<char>(op));
    msg += body.bytes();
    if (!send_frame(sock_, msg)) fail("reading it");
  }

  /// The answer to the oldest request sent; InputError if the child failed it or died.
  Reader receive(const char* doing) {
    if (dead_) throw InputError(what_ + ": the HDF5 reader is gone");
    const std::int64_t deadline = now_ms() + std::int64_t{1000} * timeout_;
    std::uint64_t n = 0;
    int got = read_all(sock_, &n, sizeof n, deadline);
    std::string msg;
    if (got == 1) {
      msg.resize(n);
      got = read_all(sock_, msg.data(), n, deadline);
    }
    if (got == -1) timed_out(doing);
    if (got != 1 || msg.empty()) fail(doing);
    const auto kind = static_cast<Reply>(msg[0]);
    Reader r(msg.substr(1));
    if (kind == Reply::input_error) throw InputError(r.str());
    if (kind == Reply::out_of_memory) {
      throw InputError(
          fmt::format("{}: {} needs more than the {} GiB of memory allowed to "
                      "libhdf5 (the file may be malformed)",
                      what_, doing, kChildHeadroom >> 30));
    }
    if (kind == Reply::other_error) throw std::runtime_error(r.str());
    return r;
  }

  std::byte* slot(std::size_t s) const { return slots_ + s * (kSlotBytes + page_); }

 private:
  [[noreturn]] void timed_out(const char* doing) {
    ::kill(pid_, SIGKILL);
    reap();
    throw InputError(fmt::format(
        "{}: libhdf5 did not finish {} within {} s and was stopped (the file may be malformed; "
        "POSENC_HDF5_TIMEOUT sets the limit)",
        what_, doing, timeout_));
  }

  // The child closed the socket: it died. Say how.
  [[noreturn]] void fail(const char* doing) {
    const int status = reap();
    if (WIFSIGNALED(status)) {
      const int sig = WTERMSIG(status);
      if (sig == SIGXCPU) {
        throw InputError(
            fmt::format("{}: libhdf5 used more than {} s of CPU {} and was stopped "
                        "(the file may be malformed)",
                        what_, timeout_, doing));
      }
      throw InputError(fmt::format(
          "{}: libhdf5 crashed {} (signal {}, SIG{}); the file is malformed or uses something "
          "libhdf5 mishandles",
          what_, doing, sig, sigabbrev_np(sig) ? sigabbrev_np(sig) : "unknown"));
    }
    throw InputError(
        fmt::format("{}: libhdf5 ended {} (exit status {}); the file is malformed "
                    "or uses something libhdf5 mishandles",
                    what_, doing, WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  }

  int reap() {
    dead_ = true;
    if (sock_ >= 0) ::close(sock_), sock_ = -1;
    int status = 0;
    if (pid_ > 0) {
      // The socket is closed: a child still alive is killed rather than waited for.
      for (int tries = 0; ::waitpid(pid_, &status, WNOHANG) == 0; ++tries) {
        if (tries == 20) ::kill(pid_, SIGKILL);
        ::usleep(tries < 20 ? 5000 : 0);
        if (tries > 20) {
          ::waitpid(pid_, &status, 0);
          break;
        }
      }
      pid_ = -1;
    }
    return status;
  }

  void cleanup() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (sock_ >= 0) ::close(sock_), sock_ = -1;
    if (slots_ != nullptr) ::munmap(slots_, map_bytes_), slots_ = nullptr;
    if (shm_ >= 0) ::close(shm_), shm_ = -1;
  }

  std::string what_;
  int timeout_;
  std::size_t page_ = 4096, map_bytes_ = 0;
  int shm_ = -1, sock_ = -1;
  pid_t pid_ = -1;
  std::byte* slots_ = nullptr;
  bool dead_ = false;
};

class SandboxSource final : public FlatSource {
 public:
  SandboxSource(const TensorRef& ref, bool attrs) {
    what_ = ref.dataset.empty() ? ref.path : fmt::format("{}: dataset '{}'", ref.path, ref.dataset);
    child_ = std::make_unique<Child>(what_);
    Writer w;
    w.str(ref.path).str(ref.dataset).str(ref.text).u64(attrs ? 1 : 0);
    child_->send(Op::open, w);
    Reader r = child_->receive("opening it");
    info_ = get_info(r);
    raw_.offset = r.u64();
    raw_.dev = r.u64();
    raw_.ino = r.u64();
    path_ = ref.path;
  }

  // A dataset whose bytes the child found stored as they are (contiguous, no filters,
  // the memory type) is mapped from the file like an NPY file: its values are the bytes
  // at that offset whoever reads them, so libhdf5 has nothing to interpret, and the
  // copy through the shared slots is saved. Only the file the child checked is mapped
  // (same device and inode: a file put in its place meanwhile is read through the
  // child), and the offset only within the file's size; a file truncated while mapped
  // ends posenc with exit 3 (guard_mapped_input).
  const std::byte* mapped_data() override {
    if (!map_.empty()) return map_.data();
    if (raw_.offset == hdf5_detail::DatasetReader::kNotRaw || map_tried_) return nullptr;
    map_tried_ = true;
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_dev) == raw_.dev &&
        static_cast<std::uint64_t>(st.st_ino) == raw_.ino) {
      const std::size_t bytes =
          checked_numel(info_.shape, dtype_size(info_.dtype), what_) * dtype_size(info_.dtype);
      map_ = io_detail::MappedFileRange(fd, raw_.offset, bytes, dtype_size(info_.dtype), what_);
    }
    ::close(fd);
    return map_.empty() ? nullptr : map_.data();
  }

  ~SandboxSource() override {
    if (raw_fd_ >= 0) ::close(raw_fd_);
  }

  // The same bytes with positional reads from the file the child checked (as for the
  // mapping: same device and inode); the file stays open while the source lives.
  bool raw_reads() override {
    if (raw_fd_ >= 0) return true;
    if (raw_.offset == hdf5_detail::DatasetReader::kNotRaw || raw_tried_) return false;
    raw_tried_ = true;
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<std::uint64_t>(st.st_dev) != raw_.dev ||
        static_cast<std::uint64_t>(st.st_ino) != raw_.ino) {
      ::close(fd);
      return false;
    }
    raw_bytes_ =
        checked_numel(info_.shape, dtype_size(info_.dtype), what_) * dtype_size(info_.dtype);
    // (The offset comes from the child: ranges past what a file offset can hold fail.)
    constexpr std::uint64_t kMaxOff = static_cast<std::uint64_t>(INT64_MAX);
    if (raw_bytes_ == 0 || raw_.offset > kMaxOff || raw_bytes_ > kMaxOff - raw_.offset) {
      ::close(fd);
      return false;
    }
    raw_fd_ = fd;
    return true;
  }
  RawFile raw_file() const override {
    if (raw_fd_ < 0) return {};
    return {raw_fd_, raw_.offset, raw_bytes_, what_};
  }
  void read_raw(std::size_t offset, std::size_t n, void* dst) override {
    if (raw_fd_ < 0) throw std::logic_error("SandboxSource::read_raw before raw_reads");
    if (offset > raw_bytes_ || n > raw_bytes_ - offset) {
      throw InputError(fmt::format("{}: bytes {}..{} are outside the {} data bytes", what_, offset,
                                   offset + n, raw_bytes_));
    }
    io_detail::pread_full(raw_fd_, raw_.offset + offset, dst, n, what_, raw_.offset, raw_bytes_);
  }

 private:
  // Pieces of at most one slot, two in flight: the child fills one slot while the
  // parent copies the other.
  void read_flat(std::size_t first, std::size_t count, void* dst) override {
    const std::size_t item = dtype_size(info_.dtype);
    const std::size_t piece = kSlotBytes / item;
    const std::size_t pieces = (count + piece - 1) / piece;
    auto request = [&](std::size_t k) {
      Writer w;
      w.u64(first + k * piece).u64(std::min(piece, count - k * piece)).u64(k % 2);
      child_->send(Op::read, w);
    };
    request(0);
    for (std::size_t k = 0; k < pieces; ++k) {
      if (k + 1 < pieces) request(k + 1);
      child_->receive("reading it");
      const std::size_t n = std::min(piece, count - k * piece);
      std::memcpy(static_cast<std::byte*>(dst) + k * piece * item, child_->slot(k % 2), n * item);
    }
  }

  std::unique_ptr<Child> child_;
  std::string path_;
  hdf5_detail::DatasetReader::RawBytes raw_;
  io_detail::MappedFileRange map_;
  bool map_tried_ = false;
  int raw_fd_ = -1;
  std::size_t raw_bytes_ = 0;
  bool raw_tried_ = false;
};

}  // namespace

namespace hdf5_detail {

namespace {

// Threads inside an Hdf5CallScope, and threads waiting to fork (which hold new scopes
// off until they have forked).
struct CallGate {
  std::mutex m;
  std::condition_variable cv;
  int active = 0;
  int forkers = 0;
};

thread_local int t_scope_depth = 0;
bool g_forked_child = false;  // set in a child of fork_for_libhdf5, single-threaded there
CallGate* g_gate = nullptr;   // never destroyed: scopes may end at exit

// A child forked by anyone else (multiprocessing, say) has only the forking thread: a
// fresh gate counts it alone (the old one's mutex may be held by a thread not there).
extern "C" void reset_gate_in_child() {
  g_gate = new CallGate;
  g_gate->active = t_scope_depth > 0 ? 1 : 0;
}

CallGate& call_gate() {
  static const bool once = [] {
    g_gate = new CallGate;
    ::pthread_atfork(nullptr, nullptr, reset_gate_in_child);
    return true;
  }();
  (void)once;
  return *g_gate;
}

void enter_gate() {
  CallGate& g = call_gate();
  std::unique_lock<std::mutex> lock(g.m);
  g.cv.wait(lock, [&g] { return g.forkers == 0; });
  ++g.active;
}

void leave_gate() {
  CallGate& g = call_gate();
  {
    std::lock_guard<std::mutex> lock(g.m);
    --g.active;
  }
  g.cv.notify_all();
}

}  // namespace

Hdf5CallScope::Hdf5CallScope() {
  if (!g_forked_child && t_scope_depth++ == 0) enter_gate();
}

Hdf5CallScope::~Hdf5CallScope() {
  if (!g_forked_child && --t_scope_depth == 0) leave_gate();
}

Hdf5CallPause::Hdf5CallPause() : depth_(g_forked_child ? 0 : t_scope_depth) {
  if (depth_ == 0) return;
  t_scope_depth = 0;
  leave_gate();
}

Hdf5CallPause::~Hdf5CallPause() {
  if (depth_ == 0) return;
  enter_gate();
  t_scope_depth = depth_;
}

pid_t fork_for_libhdf5() {
  if (g_forked_child) return ::fork();
  Hdf5CallPause pause;
  CallGate& g = call_gate();
  std::unique_lock<std::mutex> lock(g.m);
  ++g.forkers;
  g.cv.wait(lock, [&g] { return g.active == 0; });
  // Forked with the gate's mutex held, so that no scope begins in between; the child's
  // copy of it is never used (g_forked_child).
  const pid_t pid = ::fork();
  if (pid == 0) {
    g_forked_child = true;
    return 0;
  }
  --g.forkers;
  lock.unlock();
  g.cv.notify_all();
  return pid;
}

int env_seconds(const char* name, int fallback, int lo) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(env, &end, 10);
  if (*end != '\0' || errno != 0 || !(env[0] >= '0' && env[0] <= '9') || v < lo || v > 86400) {
    throw UsageError(fmt::format("{}: expected a number of seconds from {} to 86400, got '{}'",
                                 name, lo, printable(env)));
  }
  return static_cast<int>(v);
}

void close_inherited_fds(int keep) {
  // Another thread's descriptors (an output it holds flock'ed, a pipe to its own
  // child) would otherwise stay open here for as long as this child lives: its lock
  // would outlive its owner's close and its child's end of file would never come.
  const unsigned k = static_cast<unsigned>(keep);
  bool done = true;
  if (keep > 3) done = ::close_range(3, k - 1, 0) == 0;
  done = done && ::close_range(keep >= 3 ? k + 1 : 3, ~0U, 0) == 0;
  if (done) return;
  const long max = std::min(::sysconf(_SC_OPEN_MAX), 1L << 16);  // (kernel before 5.9)
  for (int fd = 3; fd < max; ++fd) {
    if (fd != keep) ::close(fd);
  }
}

void enter_sandbox_child(pid_t parent, bool may_write) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before the line above
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(nullptr);
  // Crashes are plain signal deaths (no inherited handler from the parent, ASan or a
  // fuzzer runs in the child's place), and so is a file-size limit (SIGXFSZ: the parent
  // reports "File too large"). Ctrl-C from the terminal (SIGINT to the process group)
  // is the parent's to act on: the posenc command removes its temporaries and exits,
  // and this child dies with it (PR_SET_PDEATHSIG); a Python caller gets its
  // KeyboardInterrupt once the call has finished, which this child lets it do.
  for (int sig : {SIGTERM, SIGHUP, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGXCPU, SIGALRM}) {
    ::signal(sig, SIG_DFL);
  }
  ::signal(SIGXFSZ, may_write ? SIG_DFL : SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
  // libhdf5's and the C library's own complaints (glibc's "malloc(): corrupted ...")
  // must not reach the user's terminal: the parent reports one line.
  if (std::getenv("POSENC_HDF5_DEBUG") == nullptr) {
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) {
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::close(null);
    }
  }
  ::setenv("LIBC_FATAL_STDERR_", "1", 1);
  limit(RLIMIT_CORE, 0, 0);
  if (!may_write) limit(RLIMIT_FSIZE, 0, 0);
#ifndef POSENC_ASAN
  // (AddressSanitizer reserves terabytes of address space up front; its builds go
  // without this limit.)
  const rlim_t as = address_space_bytes() + kChildHeadroom;
  limit(RLIMIT_AS, as, as);
#endif
}

std::unique_ptr<TensorSource> in_process_source(std::unique_ptr<DatasetReader> r) {
  return std::make_unique<InProcessSource>(std::move(r));
}

}  // namespace hdf5_detail

std::unique_ptr<TensorSource> open_hdf5_source(const TensorRef& ref, const OpenOptions& opt) {
  return std::make_unique<SandboxSource>(ref, opt.attrs);
}

std::vector<Hdf5Entry> list_hdf5_entries(const std::string& path) {
  Child child(path);
  Writer w;
  w.str(path);
  child.send(Op::list, w);
  Reader r = child.receive("listing its datasets");
  std::vector<Hdf5Entry> out(r.u64());
  for (Hdf5Entry& e : out) {
    e.name = r.str();
    if (r.u64() == 1) {
      e.info = get_info(r);
    } else {
      e.error = r.str();
    }
  }
  return out;
}

std::vector<std::string> list_hdf5_datasets(const std::string& path) {
  std::vector<std::string> names;
  for (const Hdf5Entry& e : list_hdf5_entries(path)) names.push_back(e.name);
  return names;
}

}  // namespace posenc
