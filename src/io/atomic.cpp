// Atomic output files and the signal-time cleanup of temporary files (see atomic.hpp).
#include "posenc/io/atomic.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <mutex>

#include "posenc/error.hpp"

namespace posenc {

namespace {

// Live temporary paths, readable from a signal handler: fixed storage, a flag per slot
// set only after the path is complete and cleared before the slot is reused.
constexpr int kMaxTemps = 128;
struct TempSlot {
  char path[PATH_MAX];
  volatile sig_atomic_t live;
};
TempSlot g_slots[kMaxTemps];
std::mutex g_slots_mutex;

extern "C" void cleanup_and_exit(int sig) {
  for (auto& slot : g_slots) {
    if (slot.live) ::unlink(slot.path);
  }
  ::_exit(128 + sig);
}

// Blocks the cleanup signals for the lifetime of the guard, so a temporary file is
// never created without being registered (or unregistered while being renamed).
class SignalBlock {
 public:
  SignalBlock() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~SignalBlock() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

int register_temp(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;  // not removable on a signal; still removed normally
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  for (int i = 0; i < kMaxTemps; ++i) {
    if (!g_slots[i].live) {
      std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
      g_slots[i].live = 1;
      return i;
    }
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot < 0) return;
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  g_slots[slot].live = 0;
}

mode_t create_mode() {
  // umask can only be read by setting it; done once, before any threads write files.
  static const mode_t mask = [] {
    mode_t m = ::umask(0);
    ::umask(m);
    return m;
  }();
  return 0666 & ~mask;
}

std::string quoted(const std::string& p) { return fmt::format("'{}'", p); }

std::string dir_of(const std::string& p) {
  auto slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string base_of(const std::string& p) {
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// Mapped input files, readable from the SIGBUS handler (as the temporary slots above).
constexpr int kMaxMapped = 16;
struct MappedSlot {
  const char* begin;
  const char* end;
  char message[512];
  std::size_t message_len;
  volatile sig_atomic_t live;
};
MappedSlot g_mapped[kMaxMapped];

extern "C" void mapped_input_bus(int sig, siginfo_t* info, void*) {
  const char* at = static_cast<const char*>(info->si_addr);
  for (auto& m : g_mapped) {
    if (m.live && at >= m.begin && at < m.end) {
      ssize_t ignored = ::write(2, m.message, m.message_len);
      (void)ignored;
      for (auto& slot : g_slots) {
        if (slot.live) ::unlink(slot.path);
      }
      ::_exit(3);
    }
  }
  // Not ours: the default action (core dump) as if no handler had been installed.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

int guard_mapped_input(const void* addr, std::size_t len, const std::string& what) {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = mapped_input_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, nullptr);
  });
  const std::string msg =
      fmt::format("posenc: error: {}: input file shrank while being read\n", what);
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  for (int i = 0; i < kMaxMapped; ++i) {
    MappedSlot& m = g_mapped[i];
    if (m.live) continue;
    m.begin = static_cast<const char*>(addr);
    m.end = m.begin + len;
    m.message_len = std::min(msg.size(), sizeof m.message);
    std::memcpy(m.message, msg.data(), m.message_len);
    m.live = 1;
    return i;
  }
  return -1;
}

void unguard_mapped_input(int handle) noexcept {
  if (handle < 0 || handle >= kMaxMapped) return;
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  g_mapped[handle].live = 0;
}

void install_output_signal_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      sigaction(sig, nullptr, &old);
      // A signal ignored by our parent (nohup) stays ignored.
      if (old.sa_handler == SIG_IGN) continue;
      struct sigaction sa {};
      sa.sa_handler = cleanup_and_exit;
      sigemptyset(&sa.sa_mask);
      sigaction(sig, &sa, nullptr);
    }
    // A closed pipe must surface as EPIPE from write() so it can be reported.
    std::signal(SIGPIPE, SIG_IGN);
  });
}

void refuse_binary_terminal(int fd, bool binary, bool force, const std::string& display) {
  if (binary && !force && ::isatty(fd)) {
    throw UsageError(fmt::format(
        "refusing to write binary data to a terminal ({}); use -o FILE, --to text, or --force",
        display));
  }
}

// Why a file cannot be created in `dir`: for a missing folder (or a file in its place)
// the folder is named, since the file name itself is not what is wrong.
static std::string missing_folder(const std::string& dir, int err) {
  const std::string shown = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  if (err == ENOENT) return "no such directory: " + shown;
  if (err == ENOTDIR) return "not a directory: " + dir;
  return std::strerror(err);
}

// --- TempFile ----------------------------------------------------------------------

TempFile::TempFile(const std::string& target, bool no_clobber, bool sync)
    : target_(target), no_clobber_(no_clobber), sync_(sync) {
  install_output_signal_handlers();
  struct stat lst;
  const bool exists = ::lstat(target.c_str(), &lst) == 0;
  if (exists && no_clobber) {
    throw OutputError(fmt::format("{} already exists (no_clobber)", quoted(target)));
  }
  // Replace what a symbolic link points to, not the link itself.
  if (exists && S_ISLNK(lst.st_mode)) {
    if (char* real = ::realpath(target.c_str(), nullptr)) {
      target_ = real;
      std::free(real);
    }
  }
  struct stat st;
  const bool target_exists = ::stat(target_.c_str(), &st) == 0;
  if (target_exists && S_ISDIR(st.st_mode)) {
    throw OutputError(fmt::format("cannot write {}: Is a directory", quoted(target)));
  }
  std::string tmpl = dir_of(target_) + "/." + base_of(target_) + ".posenc-XXXXXX";
  {
    SignalBlock block;
    fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd_ < 0) {
      const int e = errno;
      throw OutputError(
          fmt::format("cannot create {}: {}", quoted(target), missing_folder(dir_of(target_), e)));
    }
    path_ = tmpl;
    slot_ = register_temp(path_);
  }
  // mkstemp makes 0600 files; give the output the mode a plain create would, or keep
  // the mode of the file being replaced.
  const mode_t mode = target_exists && S_ISREG(st.st_mode) ? (st.st_mode & 07777) : create_mode();
  if (::fchmod(fd_, mode) != 0) {
    int e = errno;
    ::close(fd_);
    fd_ = -1;
    ::unlink(path_.c_str());
    unregister_temp(slot_);
    slot_ = -1;
    throw OutputError(fmt::format("cannot create {}: {}", quoted(target), std::strerror(e)));
  }
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!published_) {
    ::unlink(path_.c_str());
    unregister_temp(slot_);
  }
}

void TempFile::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TempFile::sync_and_close() {
  if (fd_ < 0) return;
  if (sync_ && ::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) {
    int e = errno;
    close_fd();
    throw OutputError(fmt::format("cannot write {}: {}", quoted(target_), std::strerror(e)));
  }
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) {
    throw OutputError(fmt::format("cannot write {}: {}", quoted(target_), std::strerror(errno)));
  }
}

void TempFile::publish() {
  if (published_) return;
  SignalBlock block;
  int rc;
  if (no_clobber_) {
    // Refuse to replace a target created since we checked.
    rc = ::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
      rc = ::link(path_.c_str(), target_.c_str());
      if (rc == 0) ::unlink(path_.c_str());
    }
    if (rc != 0 && errno == EEXIST) {
      throw OutputError(fmt::format("{} already exists (no_clobber)", quoted(target_)));
    }
  } else {
    rc = ::rename(path_.c_str(), target_.c_str());
  }
  if (rc != 0) {
    throw OutputError(fmt::format("cannot create {}: {}", quoted(target_), std::strerror(errno)));
  }
  published_ = true;
  unregister_temp(slot_);
  slot_ = -1;
}

// --- OutputFile --------------------------------------------------------------------

OutputFile::OutputFile(const std::string& path, const WriteOptions& opt, bool binary)
    : path_(path) {
  install_output_signal_handlers();
  if (path == "-") {
    display_ = "standard output";
    refuse_binary_terminal(1, binary, opt.force, display_);
    std::fflush(stdout);  // keep anything printed through stdio before our bytes
    fd_ = 1;
    return;
  }
  display_ = quoted(path);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    // Devices, pipes, sockets: cannot be replaced, so written in place.
    if (opt.no_clobber) {
      throw OutputError(fmt::format("{} already exists (no_clobber)", display_));
    }
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) {
      throw OutputError(fmt::format("cannot open {}: {}", display_, std::strerror(errno)));
    }
    own_fd_ = true;
    try {
      refuse_binary_terminal(fd_, binary, opt.force, display_);
    } catch (...) {
      ::close(fd_);
      throw;
    }
    return;
  }
  temp_ = std::make_unique<TempFile>(path, opt.no_clobber, opt.sync);
  fd_ = temp_->fd();
}

OutputFile::~OutputFile() {
  if (own_fd_ && fd_ >= 0) ::close(fd_);
}

void OutputFile::write_fd(const void* data, std::size_t n, std::int64_t offset) const {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const std::size_t len = std::min<std::size_t>(n, std::size_t{1} << 30);
    ssize_t w = offset < 0 ? ::write(fd_, p, len) : ::pwrite(fd_, p, len, offset);
    if (w < 0) {
      if (errno == EINTR) continue;
      const char* why = std::strerror(errno);
      if (path_ == "-") throw OutputError(fmt::format("cannot write to standard output: {}", why));
      throw OutputError(fmt::format("cannot write {}: {}", display_, why));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    if (offset >= 0) offset += w;
  }
}

void OutputFile::write_at(std::uint64_t offset, const void* data, std::size_t n) {
  if (!temp_ || finished_ || offset > static_cast<std::uint64_t>(INT64_MAX)) {
    throw std::logic_error("OutputFile::write_at: not an open regular file, or past 2^63");
  }
  write_fd(data, n, static_cast<std::int64_t>(offset));
}

void OutputFile::flush_buffer() {
  if (used_ == 0) return;
  std::size_t n = used_;
  used_ = 0;
  write_fd(buf_.data(), n);
}

void OutputFile::write(const void* data, std::size_t n) {
  constexpr std::size_t kBufSize = std::size_t{1} << 20;
  if (finished_) throw std::logic_error("OutputFile::write after finish");
  if (used_ + n > kBufSize) flush_buffer();
  if (n >= kBufSize) {
    write_fd(data, n);
    return;
  }
  // Grown as needed: zeroing the whole 1 MiB up front took longer than writing a small
  // file (a table of a few rows) from start to finish.
  if (buf_.size() < used_ + n) {
    buf_.resize(std::min(kBufSize, std::max(used_ + n, 2 * buf_.size())));
  }
  std::memcpy(buf_.data() + used_, data, n);
  used_ += n;
}

void OutputFile::finish() {
  if (finished_) return;
  flush_buffer();
  if (temp_) {
    temp_->sync_and_close();
  } else if (own_fd_) {
    int fd = fd_;
    fd_ = -1;
    own_fd_ = false;
    if (::close(fd) != 0 && errno != EINTR) {
      throw OutputError(fmt::format("cannot write {}: {}", display_, std::strerror(errno)));
    }
  }
  finished_ = true;
}

void OutputFile::commit() {
  finish();
  if (temp_) temp_->publish();
}

}  // namespace posenc
