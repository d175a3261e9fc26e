#pragma once
/// \file
/// Atomic output files.
///
/// A regular-file target is written to a temporary file created with mkstemp in the
/// target's folder (so the final rename stays on one filesystem), every write, the
/// optional fsync and the close are checked, and only `commit()` renames it over the
/// target. A temporary that is never committed is removed when its owner is destroyed
/// (normal return or exception). The library installs no signal handlers: a program
/// that owns its process (the posenc command) calls install_signal_cleanup(), after
/// which SIGINT, SIGTERM and SIGHUP also remove the live temporaries (kept in a fixed
/// table that an async-signal-safe handler unlinks) before exiting with status 128 +
/// signal number.
///
/// Non-regular targets (`-` for standard output, pipes, /dev/null, devices) cannot be
/// replaced atomically and are written directly, with SIGPIPE blocked in the writing
/// thread, so a closed pipe is an OutputError (EPIPE), not a silent death.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>

#include "posenc/io/ref.hpp"

namespace posenc {

/// The file an output named `path` writes: symbolic links followed (a dangling one to
/// where it points), the folder's real path, so that two spellings of one file give
/// the same string. OutputError for a link loop.
std::string resolve_output_target(const std::string& path);

/// Allocates the first `n` bytes of the open file `fd` (fallocate, keeping its size) on
/// a disk file system, so that the writes that follow find their blocks allocated
/// instead of reserving them page by page: a hint, which does nothing on tmpfs (there it
/// would zero pages the writes then fill) or where the file system cannot, and leaves
/// errors such as a full disk to the writes. Blocks past the file's final end stay
/// allocated to it, so `n` is at most the size the file will have.
void reserve_blocks(int fd, std::uint64_t n);

/// A temporary file beside `target`, removed unless published. Where the filesystem has
/// them (Linux ext4, xfs, btrfs, tmpfs) it is an unnamed file (O_TMPFILE) that a crash,
/// even `kill -9`, cannot leave behind. A `named` one (libhdf5 opens files by a name it
/// can resolve), or one where unnamed files are not available, is `.NAME.posenc-XXXXXX`:
/// removed on failure and on SIGINT/SIGTERM/SIGHUP, and one left by a killed process is
/// removed by the next TempFile made for the same target. Either is created 0600 (so
/// any writer can reopen it under any umask) and given, when published, the mode a plain
/// create would give (0666 & ~umask) or the replaced file's mode. It is flock'ed
/// (LOCK_EX, the lock libhdf5 and h5py take to write) from creation until destroyed, so
/// the published file is not changed by another locking writer before the run that
/// made it is done; libhdf5 must open it with its own locking off.
///
/// The target is resolved first: a symbolic link is written through (also a dangling
/// one, as cp does); a link loop, a directory and (for `regular_only`) a target that
/// exists but is not a regular file are OutputErrors.
class TempFile {
 public:
  /// Creates the file. Throws OutputError naming `target` (e.g. missing or unwritable
  /// folder). With `no_clobber`, an existing target is an OutputError now and
  /// `publish()` refuses to replace one created meanwhile.
  TempFile(const std::string& target, bool no_clobber, bool sync = false,
           bool regular_only = false, bool named = false);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  int fd() const noexcept { return fd_; }  ///< the open descriptor, for writing
  /// A path that opens the temporary (for libhdf5, here or in a forked child): its
  /// name, or /proc/self/fd/N for an unnamed file.
  const std::string& path() const noexcept { return path_; }
  /// The file that publish() replaces or creates (symbolic links resolved).
  const std::string& target() const noexcept { return target_; }
  /// Flushes to disk (fsync, when `sync` was asked for); errors are OutputErrors naming
  /// the target. The descriptor stays open until the TempFile is destroyed.
  void sync_and_close();
  /// Makes the temporary the target: renames it over an existing one when `replace`,
  /// else creates the target only where no file is (returns false, the temporary kept,
  /// when one appeared). With no_clobber an existing target is an OutputError. With
  /// `sync` the folder is fsynced after.
  bool publish(bool replace = true);

 private:
  void link_as(const std::string& name);

  std::string target_;
  std::string path_;
  int fd_ = -1;
  int slot_ = -1;
  mode_t mode_ = 0;
  bool unnamed_ = false;
  bool no_clobber_ = false;
  bool sync_ = false;
  bool published_ = false;
};

/// Where the bytes of one output go: a TempFile for regular targets, the descriptor
/// itself for standard output and other non-regular files.
class OutputFile {
 public:
  /// Opens `path` ("-" is standard output). `binary` output (NPY, HDF5) to a terminal
  /// is a UsageError unless `opt.force`. Errors name the path.
  OutputFile(const std::string& path, const WriteOptions& opt, bool binary);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// Appends bytes (buffered). Throws OutputError ("cannot write 'x': No space left on
  /// device", "cannot write to standard output: Broken pipe").
  void write(const void* data, std::size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }  ///< appends `s`'s bytes
  /// Writes `n` bytes at byte `offset` of the file, unbuffered (pwrite), leaving the
  /// position of write() alone; safe to call from several threads at once. Only for
  /// atomic() outputs (a pipe cannot seek): std::logic_error otherwise. Errors as
  /// write().
  void write_at(std::uint64_t offset, const void* data, std::size_t n);
  /// Appends bytes [offset, offset + n) of the regular file `in` (descriptor `in_fd`),
  /// after what write() buffered: in the kernel where it can (copy_file_range: the
  /// bytes do not pass through this process, and file systems that share blocks share
  /// them), through a buffer otherwise (standard output, another file system).
  /// InputError "IN: truncated data: expected E bytes, got G" when the file ends first,
  /// where `data_at` and `data_bytes` place the data E in it (offset and n lie inside);
  /// other errors as write().
  void copy_from(int in_fd, std::uint64_t offset, std::uint64_t n, const std::string& in,
                 std::uint64_t data_at, std::uint64_t data_bytes);
  /// Allocates `n` bytes of disk for a temporary file the caller will fill
  /// (reserve_blocks; nothing for other outputs). `n` must not exceed what will be
  /// written: blocks reserved past the end stay allocated to the file.
  void reserve(std::uint64_t n);
  /// Flushes and, for a temporary file, closes it (fsync first with WriteOptions::sync);
  /// the target is unchanged.
  void finish();
  /// finish() and then make the output visible (rename over the target).
  void commit();
  /// How messages name the output: "'out.npy'" or "standard output".
  const std::string& display() const noexcept { return display_; }
  /// Whether the output goes through a temporary file (regular target).
  bool atomic() const noexcept { return temp_ != nullptr; }

 private:
  void flush_buffer();
  // All of `n` bytes: at the file position (write), or at `offset` when it is not
  // negative (pwrite).
  void write_fd(const void* data, std::size_t n, std::int64_t offset = -1) const;

  std::string path_;
  std::string display_;
  std::unique_ptr<TempFile> temp_;
  int fd_ = -1;
  bool own_fd_ = false;
  bool finished_ = false;
  std::vector<char> buf_;
  std::size_t used_ = 0;
};

/// Throws UsageError when `fd` is a terminal and `binary` output is not `force`d.
/// `display` names the output in the message.
void refuse_binary_terminal(int fd, bool binary, bool force, const std::string& display);

/// UsageError for a path with a NUL character in it (the system would cut the name
/// there, and the format is taken from the whole string). Checked by parse_ref, TempFile
/// and OutputFile before anything is opened.
void refuse_nul_in_path(const std::string& path);

/// For a program that owns its process (the posenc command calls it first thing; a
/// library caller or the Python module does not): handlers for SIGINT, SIGTERM and
/// SIGHUP that remove every live named temporary and exit with 128 + the signal (a
/// signal the parent ignored, as under nohup, stays ignored), the SIGBUS handler of
/// guard_mapped_input, and SIGPIPE ignored. Idempotent. Without it, temporaries are
/// removed on normal return and on exceptions, and signals keep the caller's handlers.
void install_signal_cleanup();

/// With install_signal_cleanup(): makes a SIGBUS raised by an access to [addr, addr +
/// len), a read-only mapping of the input file `what`, end the process with "posenc:
/// error: WHAT: input file shrank while being read" on stderr and exit status 3 (bad
/// input), after removing every live temporary output; the targets stay untouched. (A
/// mapped file truncated by another process faults on the pages past its new end;
/// nothing can be returned from there.) SIGBUS elsewhere keeps its default action.
/// Without it, such a SIGBUS has the caller's disposition, as with numpy.memmap.
/// Returns a handle for unguard_mapped_input.
int guard_mapped_input(const void* addr, std::size_t len, const std::string& what);
/// Forgets a range registered by guard_mapped_input (before it is unmapped).
void unguard_mapped_input(int handle) noexcept;

}  // namespace posenc
