// Tensor references and format dispatch: NPY here, HDF5 in hdf5.cpp, the text
// encodings in text.cpp (pure functions whose bytes are read and written here).
#include "posenc/io/ref.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "io/hdf5_reader.hpp"
#include "io/slab.hpp"
#include "posenc/error.hpp"
#include "posenc/io/atomic.hpp"
#include "posenc/io/hdf5.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/io/text.hpp"
#include "posenc/io/write_fields.hpp"
#include "posenc/printable.hpp"

namespace posenc {

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Format named by --to (empty: none).
std::optional<Format> format_from_to(const std::string& to) {
  const std::string t = lower(to);
  if (t.empty()) return std::nullopt;
  if (t == "npy") return Format::npy;
  if (t == "h5" || t == "hdf5") return Format::hdf5;
  if (t == "csv") return Format::csv;
  if (t == "tsv") return Format::tsv;
  if (t == "json") return Format::json;
  if (t == "text" || t == "txt") return Format::text;
  throw UsageError(
      fmt::format("to: unknown format '{}' (expected npy, h5, csv, tsv, json or text)", to));
}

std::string extension_of(const std::string& path) {
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  auto dot = base.rfind('.');
  if (dot == std::string::npos || dot == 0) return "";
  return lower(base.substr(dot + 1));
}

// A character device, FIFO or socket (/dev/null, /dev/stdout, a named pipe).
bool is_special_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

std::size_t row_count(const Shape& s) { return s.empty() ? 1 : s[0]; }

std::size_t row_bytes(const TensorInfo& info) {
  Shape row(info.shape.empty() ? info.shape.begin() : info.shape.begin() + 1, info.shape.end());
  return checked_numel(row, dtype_size(info.dtype), "tensor") * dtype_size(info.dtype);
}

bool is_binary(Format f) { return f == Format::npy || f == Format::hdf5; }

// A whole tensor already in memory (decoded text), served as rows.
class MemorySource final : public TensorSource {
 public:
  MemorySource(Tensor t, std::string storage) : t_(std::move(t)) {
    info_.dtype = t_.dtype();
    info_.shape = t_.shape();
    info_.storage = std::move(storage);
    row_bytes_ = row_bytes(info_);
  }
  const TensorInfo& info() const override { return info_; }
  bool seekable() const override { return true; }
  void read_rows(std::size_t first, std::size_t count, void* dst) override {
    const std::size_t rows = row_count(info_.shape);
    if (first > rows || count > rows - first) {
      throw InputError(fmt::format("rows {}..{} are outside the {} rows of the tensor", first,
                                   first + count, rows));
    }
    if (count) std::memcpy(dst, t_.bytes() + first * row_bytes_, count * row_bytes_);
  }
  void read_slab(std::size_t axis, std::size_t first, std::size_t count, void* dst) override {
    io_detail::check_slab_axis(info_.shape, axis);
    const std::size_t n = io_detail::slab_extent(info_.shape, axis);
    if (first > n || count > n - first) {
      throw InputError(fmt::format("entries {}..{} are outside the {} along axis {}", first,
                                   first + count, n, axis));
    }
    const std::size_t entry =
        io_detail::slab_entry_bytes(info_.shape, axis, dtype_size(info_.dtype));
    if (count) std::memcpy(dst, t_.bytes() + first * entry, count * entry);
  }
  void read_elements(std::size_t first, std::size_t count, void* dst) override {
    if (first > t_.numel() || count > t_.numel() - first) {
      throw InputError(fmt::format("elements {}..{} are outside the {} of the tensor", first,
                                   first + count, t_.numel()));
    }
    const std::size_t item = dtype_size(info_.dtype);
    if (count) std::memcpy(dst, t_.bytes() + first * item, count * item);
  }

 private:
  Tensor t_;
  TensorInfo info_;
  std::size_t row_bytes_ = 0;
};

std::string read_all(const TensorRef& ref) {
  int fd = 0;
  if (!ref.is_stdio()) {
    fd = ::open(ref.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw InputError(fmt::format("cannot open '{}': {}", ref.path, std::strerror(errno)));
    }
    struct stat st;
    if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      ::close(fd);
      throw InputError(fmt::format("cannot read '{}': Is a directory", ref.path));
    }
  }
  std::string out;
  FdReader r(fd, ref.text);
  char buf[1 << 16];
  try {
    for (;;) {
      std::size_t n = r.read_some(buf, sizeof buf);
      if (n == 0) break;
      out.append(buf, n);
    }
  } catch (...) {
    if (fd != 0) ::close(fd);
    throw;
  }
  if (fd != 0) ::close(fd);
  return out;
}

void check_text_rank(const TensorRef& ref, const Shape& shape) {
  if ((ref.format == Format::csv || ref.format == Format::tsv) && shape.size() > 2) {
    throw UsageError(
        fmt::format("{}: CSV/TSV hold tensors of rank 0 to 2, got shape {}; use .npy, .h5 or .json",
                    ref.text, shape_str(shape)));
  }
}

// --- sinks -------------------------------------------------------------------------

// Counts entries along slab_axis(shape) (rows and slabs along earlier unit axes
// convert to it), so a sink knows where the next write goes and can refuse a commit
// with missing data (a caller bug).
class RowCounter {
 public:
  explicit RowCounter(const Shape& s)
      : shape_(s), axis_(slab_axis(s)), total_(io_detail::slab_extent(s, axis_)) {}
  /// Adds `n` entries along `axis`; returns the offset in bytes of the first one
  /// (`item` bytes per element).
  std::size_t add(std::size_t axis, std::size_t n, std::size_t item) {
    const std::size_t units = io_detail::slab_units(shape_, axis, n);
    if (units > total_ - written_) throw std::logic_error("more rows written than the shape holds");
    const std::size_t at = written_ * io_detail::slab_entry_bytes(shape_, axis_, item);
    written_ += units;
    return at;
  }
  void check_complete() const {
    if (written_ != total_) throw std::logic_error("sink committed before all rows were written");
  }

 private:
  Shape shape_;
  std::size_t axis_;
  std::size_t total_;
  std::size_t written_ = 0;
};

class NpySink final : public TensorSink {
 public:
  NpySink(const TensorRef& ref, const TensorInfo& info, const WriteOptions& opt)
      : header_(npy_header_bytes(info.dtype, info.shape, ref.text)),
        out_(ref.path, opt, true),
        counter_(info.shape),
        shape_(info.shape),
        dtype_(info.dtype),
        item_(dtype_size(info.dtype)) {
    out_.write(header_);
    out_.reserve(header_.size() + std::uint64_t{numel_} * item_);
  }
  void write_rows(const void* src, std::size_t count) override { write_slab(0, src, count); }
  void write_slab(std::size_t axis, const void* src, std::size_t count) override {
    if (at_ > 0) throw std::logic_error("NpySink: sequential write after write_at");
    counter_.add(axis, count, item_);
    out_.write(src, count * io_detail::slab_entry_bytes(shape_, axis, item_));
  }
  bool writes_at() const override { return out_.atomic(); }
  bool copy_slab(std::size_t axis, TensorSource& src, std::size_t first,
                 std::size_t count) override {
    const TensorInfo& in = src.info();
    if (at_ > 0 || in.dtype != dtype_ || count == 0 || !src.raw_reads()) return false;
    const RawFile rf = src.raw_file();
    if (rf.fd < 0) return false;
    io_detail::check_slab_axis(in.shape, axis);
    const std::size_t n = io_detail::slab_extent(in.shape, axis);
    if (first > n || count > n - first) {
      throw InputError(fmt::format("{}: entries {}..{} are outside the {} along axis {}", rf.what,
                                   first, first + count, n, axis));
    }
    const std::size_t entry = io_detail::slab_entry_bytes(in.shape, axis, item_);
    if (entry != io_detail::slab_entry_bytes(shape_, axis, item_)) {
      throw InputError(fmt::format("{}: its shape {} does not fit the output's {} along axis {}",
                                   rf.what, shape_str(in.shape), shape_str(shape_), axis));
    }
    counter_.add(axis, count, item_);
    out_.copy_from(rf.fd, rf.at + std::uint64_t{first} * entry, std::uint64_t{count} * entry,
                   rf.what, rf.at, rf.bytes);
    return true;
  }
  // The header stays in the write() buffer, which finish() writes at offset 0 (pwrite
  // leaves the file position alone), so the data go straight behind its length.
  void write_at(std::size_t first, const void* src, std::size_t count) override {
    if (!out_.atomic() || first > numel_ || count > numel_ - first) {
      throw std::logic_error("NpySink::write_at: not a regular file, or past the end");
    }
    out_.write_at(header_.size() + std::uint64_t{first} * item_, src, count * item_);
    at_ += count;
  }
  void prepare() override {
    if (at_ > 0 && at_ != numel_) {
      throw std::logic_error(fmt::format("NpySink: {} of {} entries written", at_.load(), numel_));
    }
    if (at_ == 0) counter_.check_complete();
    out_.finish();
  }
  void commit() override {
    prepare();
    out_.commit();
  }

 private:
  std::string header_;
  OutputFile out_;
  RowCounter counter_;
  Shape shape_;
  DType dtype_;
  std::size_t item_;
  std::size_t numel_ = checked_numel(shape_, 1, "npy");
  std::atomic<std::size_t> at_{0};
};

// Text formats are encoded whole by encode_text: rows are gathered, then written. The
// rows are kept as they arrive (not in a tensor of the declared size), so a source that
// declares more than it delivers costs only what it delivered.
class TextSink final : public TensorSink {
 public:
  TextSink(const TensorRef& ref, const TensorInfo& info, const WriteOptions& opt)
      : ref_(ref),
        attrs_(info.attrs),
        out_(ref.path, opt, false),
        dtype_(info.dtype),
        shape_(info.shape),
        counter_(info.shape) {}
  void write_rows(const void* src, std::size_t count) override { write_slab(0, src, count); }
  void write_slab(std::size_t axis, const void* src, std::size_t count) override {
    const std::size_t item = dtype_size(dtype_);
    counter_.add(axis, count, item);  // in order: the data go at the end
    const std::size_t n = count * io_detail::slab_entry_bytes(shape_, axis, item);
    const auto* p = static_cast<const std::byte*>(src);
    data_.insert(data_.end(), p, p + n);
  }
  void prepare() override {
    if (prepared_) return;
    counter_.check_complete();
    Tensor t(dtype_, shape_);
    if (!data_.empty()) std::memcpy(t.bytes(), data_.data(), data_.size());
    data_ = {};
    out_.write(encode_text(ref_.format, t, attrs_));
    out_.finish();
    prepared_ = true;
  }
  void commit() override {
    prepare();
    out_.commit();
  }

 private:
  TensorRef ref_;
  Attrs attrs_;
  OutputFile out_;
  DType dtype_;
  Shape shape_;
  RowCounter counter_;
  std::vector<std::byte> data_;
  bool prepared_ = false;
};

// One dataset in its own HDF5 file: the file becomes visible on commit.
class Hdf5Sink final : public TensorSink {
 public:
  Hdf5Sink(const TensorRef& ref, const TensorInfo& info, const WriteOptions& opt)
      : writer_(std::make_unique<Hdf5FileWriter>(ref.path, opt)),
        ds_(writer_->dataset(ref.dataset, info)) {}
  void write_rows(const void* src, std::size_t count) override { ds_->write_rows(src, count); }
  void write_slab(std::size_t axis, const void* src, std::size_t count) override {
    ds_->write_slab(axis, src, count);
  }
  void prepare() override {
    if (ds_) ds_->commit();
    ds_.reset();
    writer_->prepare();
  }
  void commit() override {
    prepare();
    writer_->publish();
  }

 private:
  std::unique_ptr<Hdf5FileWriter> writer_;
  std::unique_ptr<TensorSink> ds_;
};

void refuse_hdf5_stdio(const TensorRef& ref, bool output) {
  if (ref.format == Format::hdf5 && ref.is_stdio()) {
    throw UsageError(output ? "HDF5 output cannot go to standard output (it needs a seekable "
                              "file); name a file, e.g. -o out.h5:/data"
                            : "HDF5 input cannot come from standard input; name a file");
  }
}

}  // namespace

namespace io_detail {

MappedFileRange::MappedFileRange(int fd, std::uint64_t offset, std::size_t bytes, std::size_t align,
                                 const std::string& what) {
  struct stat st {};
  if (bytes == 0 || align == 0 || offset % align != 0 || ::fstat(fd, &st) != 0 ||
      !S_ISREG(st.st_mode) || offset > static_cast<std::uint64_t>(st.st_size) ||
      bytes > static_cast<std::uint64_t>(st.st_size) - offset) {
    return;
  }
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t from = offset / page * page;
  const std::size_t len = static_cast<std::size_t>(offset - from) + bytes;
  void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(from));
  if (p == MAP_FAILED) return;
  const int guard = guard_mapped_input(p, len, what);
  if (guard < 0) {
    ::munmap(p, len);
    return;
  }
  ::madvise(p, len, MADV_SEQUENTIAL);
  base_ = p;
  len_ = len;
  skip_ = static_cast<std::size_t>(offset - from);
  guard_ = guard;
}

MappedFileRange::~MappedFileRange() {
  if (base_ == nullptr) return;
  unguard_mapped_input(guard_);
  ::munmap(base_, len_);
}

MappedFileRange::MappedFileRange(MappedFileRange&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      len_(o.len_),
      skip_(o.skip_),
      guard_(std::exchange(o.guard_, -1)) {}

MappedFileRange& MappedFileRange::operator=(MappedFileRange&& o) noexcept {
  // The old mapping, if any, goes with `o`.
  std::swap(base_, o.base_);
  std::swap(len_, o.len_);
  std::swap(skip_, o.skip_);
  std::swap(guard_, o.guard_);
  return *this;
}

void pread_full(int fd, std::uint64_t at, void* dst, std::size_t n, const std::string& what,
                std::uint64_t data_at, std::uint64_t data_bytes) {
  constexpr std::size_t kMaxIo = std::size_t{1} << 30;
  auto* out = static_cast<std::byte*>(dst);
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got =
        ::pread(fd, out + done, std::min(n - done, kMaxIo), static_cast<off_t>(at + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw InputError(fmt::format("{}: read error: {}", what, std::strerror(errno)));
    }
    if (got == 0) throw_truncated(fd, what, data_at, data_bytes, at + done);
    done += static_cast<std::size_t>(got);
  }
}

void throw_truncated(int fd, const std::string& what, std::uint64_t data_at,
                     std::uint64_t data_bytes, std::uint64_t reached) {
  struct stat st {};
  std::uint64_t have = reached > data_at ? reached - data_at : 0;
  if (::fstat(fd, &st) == 0) {
    const auto size = static_cast<std::uint64_t>(std::max<off_t>(st.st_size, 0));
    have = size > data_at ? std::min<std::uint64_t>(size - data_at, data_bytes) : 0;
  }
  throw InputError(
      fmt::format("{}: truncated data: expected {} bytes, got {}", what, data_bytes, have));
}

void release_mapped(const std::byte* p, std::size_t n) {
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t lo = a / page * page, hi = (a + n) / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

std::size_t slab_extent(const Shape& shape, std::size_t axis) {
  return shape.empty() ? 1 : shape[axis];
}

void check_slab_axis(const Shape& shape, std::size_t axis) {
  if (shape.empty() ? axis != 0 : axis >= shape.size()) {
    throw std::logic_error(fmt::format("slab axis {} of a {}-D tensor", axis, shape.size()));
  }
  for (std::size_t k = 0; k < axis; ++k) {
    if (shape[k] != 1) {
      throw std::logic_error(fmt::format("slab along axis {} of shape {}: axis {} is not 1", axis,
                                         shape_str(shape), k));
    }
  }
}

std::size_t slab_entry_bytes(const Shape& shape, std::size_t axis, std::size_t itemsize) {
  std::size_t n = itemsize;
  for (std::size_t k = axis + 1; k < shape.size(); ++k) n *= shape[k];
  return n;
}

std::size_t slab_units(const Shape& shape, std::size_t axis, std::size_t count) {
  check_slab_axis(shape, axis);
  const std::size_t k = slab_axis(shape);
  return axis == k ? count : count * slab_extent(shape, k);
}

}  // namespace io_detail

std::size_t slab_axis(const Shape& shape) {
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] != 1) return k;
  }
  return shape.empty() ? 0 : shape.size() - 1;
}

// Sources and sinks that only know rows: a slab along a later axis is all of row 0
// (the axes before it have extent 1), so only whole-axis slabs can be served.
void TensorSource::read_slab(std::size_t axis, std::size_t first, std::size_t count, void* dst) {
  const Shape& shape = info().shape;
  io_detail::check_slab_axis(shape, axis);
  if (axis == 0) return read_rows(first, count, dst);
  if (count == 0) return;
  if (first != 0 || count != shape[axis]) {
    throw std::logic_error("this source reads slabs along axis 0 only");
  }
  read_rows(0, 1, dst);
}

void TensorSource::read_elements(std::size_t first, std::size_t count, void* dst) {
  const Shape& shape = info().shape;
  std::size_t row = 1;
  for (std::size_t ax = 1; ax < shape.size(); ++ax) row *= shape[ax];
  if (count == 0) return;
  if (row == 0 || first % row != 0 || count % row != 0) {
    throw std::logic_error("this source reads whole rows only");
  }
  read_rows(first / row, count / row, dst);
}

void TensorSource::read_raw(std::size_t, std::size_t, void*) {
  throw std::logic_error("this source does not read raw bytes at positions");
}

bool TensorSink::copy_slab(std::size_t, TensorSource&, std::size_t, std::size_t) { return false; }

void TensorSink::write_slab(std::size_t axis, const void* src, std::size_t count) {
  if (axis == 0) return write_rows(src, count);
  if (count == 0) return;
  throw std::logic_error("this sink writes slabs along axis 0 only");
}

void TensorSink::write_at(std::size_t, const void*, std::size_t) {
  throw std::logic_error("this sink does not write at positions");
}

std::string datasets_hint(const std::string& path) {
  constexpr std::size_t kMaxListed = 20;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  std::vector<Hdf5Entry> entries;
  try {
    entries = list_hdf5_entries(path);
  } catch (const std::exception&) {
    return "";
  }
  if (entries.empty()) return fmt::format("; {} holds no datasets", path);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < entries.size() && i < kMaxListed; ++i) {
    const Hdf5Entry& e = entries[i];
    names.push_back(e.error.empty() ? fmt::format("{} {} {}", e.name, shape_str(e.info.shape),
                                                  dtype_name(e.info.dtype))
                                    : e.name);
  }
  const std::string more =
      entries.size() > kMaxListed ? fmt::format(" and {} more", entries.size() - kMaxListed) : "";
  return fmt::format("; {} holds {}{}", path, fmt::join(names, ", "), more);
}

TensorRef parse_ref(const std::string& text, const std::string& to,
                    const std::string& default_dataset) {
  if (text.empty()) throw UsageError("empty tensor reference");
  refuse_nul_in_path(text);
  TensorRef ref;
  ref.text = text;
  ref.path = text;
  const std::optional<Format> forced = format_from_to(to);

  // "file.h5:/group/name": split at the last ".h5:" / ".hdf5:" so that colons earlier
  // in the path stay part of the file name.
  const std::string low = lower(text);
  std::size_t split = std::string::npos;
  for (const char* ext : {".h5:", ".hdf5:"}) {
    std::size_t at = low.rfind(ext);
    if (at != std::string::npos) {
      std::size_t colon = at + std::strlen(ext) - 1;
      if (split == std::string::npos || colon > split) split = colon;
    }
  }
  // With --to h5 any file name may carry a dataset after ":/".
  if (split == std::string::npos && forced == Format::hdf5) {
    std::size_t at = text.rfind(":/");
    if (at != std::string::npos && at > 0) split = at;
  }
  if (split != std::string::npos && (!forced || forced == Format::hdf5)) {
    ref.path = text.substr(0, split);
    ref.dataset = text.substr(split + 1);
    ref.format = Format::hdf5;
  } else if (forced) {
    ref.format = *forced;
  } else if (text == "-") {
    ref.format = Format::npy;
  } else {
    const std::string ext = extension_of(text);
    if (ext == "npy") {
      ref.format = Format::npy;
    } else if (ext == "h5" || ext == "hdf5") {
      ref.format = Format::hdf5;
    } else if (ext == "csv") {
      ref.format = Format::csv;
    } else if (ext == "tsv") {
      ref.format = Format::tsv;
    } else if (ext == "json") {
      ref.format = Format::json;
    } else if (ext == "txt") {
      ref.format = Format::text;
    } else if (ext == "npz") {
      throw UsageError(fmt::format(
          "{}: .npz archives are not supported; extract the member (unzip) and use the .npy",
          text));
    } else if (is_special_file(text)) {
      // Devices and pipes (/dev/stdout, /dev/null, a FIFO) carry NPY unless --to says
      // otherwise, like "-".
      ref.format = Format::npy;
    } else {
      throw UsageError(fmt::format(
          "{}: unknown file type{} (expected .npy, .h5:/dataset, .hdf5:/dataset, .csv, .tsv, "
          ".json, .txt or -; or give --to)",
          text, ext.empty() ? std::string() : " '." + ext + "'"));
    }
  }
  if (ref.format == Format::hdf5) {
    if (ref.is_stdio()) {
      throw UsageError(
          "HDF5 needs a seekable file, not standard input/standard output; name a file, "
          "e.g. out.h5:/data");
    }
    if (!ref.dataset.empty() && ref.dataset[0] != '/') ref.dataset = "/" + ref.dataset;
    if (ref.dataset.empty() || ref.dataset == "/") {
      if (default_dataset.empty()) {
        throw UsageError(fmt::format("{}: name a dataset, e.g. {}:/data{}", text, ref.path,
                                     datasets_hint(ref.path)));
      }
      ref.dataset = default_dataset[0] == '/' ? default_dataset : "/" + default_dataset;
    }
    if (ref.path.empty()) throw UsageError(fmt::format("{}: no file name before ':'", text));
  }
  return ref;
}

namespace {

// A source whose 1-byte elements are read as an fp8 dtype (TensorRef::view_as): the
// bytes are the same, only the dtype reported differs.
class ViewSource final : public TensorSource {
 public:
  ViewSource(std::unique_ptr<TensorSource> in, DType as) : in_(std::move(in)), info_(in_->info()) {
    info_.dtype = as;
  }
  const TensorInfo& info() const override { return info_; }
  void read_rows(std::size_t first, std::size_t count, void* dst) override {
    in_->read_rows(first, count, dst);
  }
  bool seekable() const override { return in_->seekable(); }
  void read_slab(std::size_t axis, std::size_t first, std::size_t count, void* dst) override {
    in_->read_slab(axis, first, count, dst);
  }
  const std::byte* mapped_data() override { return in_->mapped_data(); }
  void read_elements(std::size_t first, std::size_t count, void* dst) override {
    in_->read_elements(first, count, dst);
  }
  bool raw_reads() override { return in_->raw_reads(); }
  void read_raw(std::size_t offset, std::size_t n, void* dst) override {
    in_->read_raw(offset, n, dst);
  }
  RawFile raw_file() const override { return in_->raw_file(); }

 private:
  std::unique_ptr<TensorSource> in_;
  TensorInfo info_;
};

std::unique_ptr<TensorSource> open_stored(const TensorRef& ref, const OpenOptions& opt);

}  // namespace

std::unique_ptr<TensorSource> open_source(const TensorRef& ref, const OpenOptions& opt) {
  auto src = open_stored(ref, opt);
  if (!ref.view_as) return src;
  const DType as = *ref.view_as, stored = src->info().dtype;
  if (!is_fp8(as)) {
    throw UsageError(fmt::format("input dtype {}: expected float8_e4m3fn or float8_e5m2",
                                 dtype_name(as)));
  }
  if (stored == as) return src;
  if (stored != DType::u8 && stored != DType::i8) {
    throw InputError(fmt::format(
        "{}: cannot read {} elements as {} (input dtype takes 1-byte elements: uint8, int8, "
        "'|V1', an HDF5 1-byte opaque type)",
        ref.is_stdio() ? "standard input" : printable(ref.text), dtype_name(stored),
        dtype_name(as)));
  }
  return std::make_unique<ViewSource>(std::move(src), as);
}

namespace {
std::unique_ptr<TensorSource> open_stored(const TensorRef& ref, const OpenOptions& opt) {
  const std::string what = ref.is_stdio() ? "standard input" : ref.text;
  switch (ref.format) {
    case Format::npy:
      return open_npy_source(ref.path, what);
    case Format::hdf5:
      refuse_hdf5_stdio(ref, false);
      return open_hdf5_source(ref, opt);
    case Format::csv:
    case Format::tsv:
    case Format::json:
    case Format::text: {
      Tensor t = decode_text(ref.format, read_all(ref), what);
      const char* name = ref.format == Format::csv    ? "CSV"
                         : ref.format == Format::tsv  ? "TSV"
                         : ref.format == Format::json ? "JSON"
                                                      : "text";
      return std::make_unique<MemorySource>(std::move(t), name);
    }
  }
  throw std::logic_error("unknown format");
}
}  // namespace

Tensor read_tensor(const TensorRef& ref) {
  auto src = open_source(ref);
  return read_all_rows(*src);
}

Tensor read_tensor(const std::string& ref_text) { return read_tensor(parse_ref(ref_text)); }

std::unique_ptr<TensorSink> create_sink(const TensorRef& ref, const TensorInfo& info,
                                        const WriteOptions& opt) {
  validate(opt);  // the declared ranges (write_fields.hpp)
  switch (ref.format) {
    case Format::npy:
      return std::make_unique<NpySink>(ref, info, opt);
    case Format::hdf5:
      refuse_hdf5_stdio(ref, true);
      return std::make_unique<Hdf5Sink>(ref, info, opt);
    case Format::csv:
    case Format::tsv:
    case Format::json:
    case Format::text:
      check_text_rank(ref, info.shape);
      return std::make_unique<TextSink>(ref, info, opt);
  }
  throw std::logic_error("unknown format");
}

void check_distinct_outputs(const std::vector<TensorRef>& refs) {
  int stdout_count = 0;
  // Files by what they resolve to, so that "x.npy" and "./x.npy" (or a link to it) are one.
  std::map<std::string, std::set<std::string>> h5;
  std::set<std::string> plain;
  for (const auto& r : refs) {
    refuse_hdf5_stdio(r, true);
    if (r.is_stdio()) {
      if (++stdout_count > 1) throw UsageError("only one output can go to standard output");
      continue;
    }
    const std::string file = resolve_output_target(r.path);
    if (r.format == Format::hdf5) {
      if (plain.count(file)) {
        throw UsageError(fmt::format("{}: the file is named by two outputs", r.path));
      }
      if (!h5[file].insert(hdf5_detail::normalize_name(r.dataset)).second) {
        throw UsageError(fmt::format("{}: the dataset is named by two outputs", r.text));
      }
    } else if (!plain.insert(file).second || h5.count(file)) {
      throw UsageError(fmt::format("{}: the file is named by two outputs", r.path));
    }
  }
}

struct OutputSet::Impl {
  std::vector<TensorRef> refs;
  WriteOptions opt;
  std::vector<std::unique_ptr<TensorSink>> sinks;
  std::map<std::string, std::unique_ptr<Hdf5FileWriter>> h5;
};

OutputSet::OutputSet(std::vector<TensorRef> refs, const WriteOptions& opt)
    : impl_(std::make_unique<Impl>()) {
  validate(opt);
  check_distinct_outputs(refs);
  impl_->refs = std::move(refs);
  impl_->opt = opt;
  impl_->sinks.resize(impl_->refs.size());
}

OutputSet::~OutputSet() {
  // Sinks before the writers they belong to.
  if (impl_) impl_->sinks.clear();
}

TensorSink& OutputSet::open(std::size_t i, const TensorInfo& info) {
  auto& im = *impl_;
  const TensorRef& r = im.refs.at(i);
  if (im.sinks[i]) throw std::logic_error("OutputSet::open: output opened twice");
  if (r.format == Format::hdf5) {
    auto& w = im.h5[resolve_output_target(r.path)];
    if (!w) w = std::make_unique<Hdf5FileWriter>(r.path, im.opt);
    im.sinks[i] = w->dataset(r.dataset, info);
  } else {
    im.sinks[i] = create_sink(r, info, im.opt);
  }
  return *im.sinks[i];
}

// Every output is finished (written, flushed, fsynced when asked, HDF5 additions made
// in locked copies) before any is made visible; the renames, which do not fail on a full
// disk, come last. New HDF5 files are published first: one may still turn into an
// addition when another writer made the file meanwhile.
void OutputSet::commit() {
  auto& im = *impl_;
  for (std::size_t i = 0; i < im.refs.size(); ++i) {
    if (!im.sinks[i]) continue;
    if (im.refs[i].format == Format::hdf5) {
      im.sinks[i]->commit();  // the dataset is complete; the file is the writer's
    } else {
      im.sinks[i]->prepare();
    }
  }
  for (auto& [path, w] : im.h5) w->prepare();
  for (auto& [path, w] : im.h5) w->publish();
  for (std::size_t i = 0; i < im.refs.size(); ++i) {
    if (im.sinks[i] && im.refs[i].format != Format::hdf5) im.sinks[i]->commit();
  }
}

void write_tensor(const TensorRef& ref, const Tensor& t, const Attrs& attrs,
                  const WriteOptions& opt) {
  write_tensors({NamedTensor{ref, &t, attrs}}, opt);
}

void write_tensors(const std::vector<NamedTensor>& outs, const WriteOptions& opt) {
  // Validate the whole set before creating anything.
  validate(opt);
  std::vector<TensorRef> refs;
  for (const auto& o : outs) {
    if (o.tensor == nullptr) throw std::logic_error("write_tensors: null tensor");
    if (o.ref.format == Format::npy) npy_descr(o.tensor->dtype(), o.ref.text);  // bf16 check
    check_text_rank(o.ref, o.tensor->shape());
    refs.push_back(o.ref);
  }
  check_distinct_outputs(refs);

  // Open every output (temporary files) before writing, so a bad folder fails fast.
  std::vector<std::unique_ptr<OutputFile>> files(outs.size());
  std::map<std::string, std::unique_ptr<Hdf5FileWriter>> h5_files;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const auto& o = outs[i];
    if (o.ref.format == Format::hdf5) {
      auto& w = h5_files[resolve_output_target(o.ref.path)];
      if (!w) w = std::make_unique<Hdf5FileWriter>(o.ref.path, opt);
    } else {
      files[i] = std::make_unique<OutputFile>(o.ref.path, opt, is_binary(o.ref.format));
    }
  }
  // Write everything; temporaries are removed by the destructors if anything throws.
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const auto& o = outs[i];
    const Tensor& t = *o.tensor;
    switch (o.ref.format) {
      case Format::npy: {
        const std::string header = npy_header_bytes(t.dtype(), t.shape(), o.ref.text);
        files[i]->reserve(header.size() + std::uint64_t{t.nbytes()});
        files[i]->write(header);
        files[i]->write(t.bytes(), t.nbytes());
        break;
      }
      case Format::hdf5: {
        TensorInfo info;
        info.dtype = t.dtype();
        info.shape = t.shape();
        info.attrs = o.attrs;
        auto ds = h5_files[resolve_output_target(o.ref.path)]->dataset(o.ref.dataset, info);
        ds->write_rows(t.bytes(), row_count(t.shape()));
        ds->commit();
        break;
      }
      default:
        files[i]->write(encode_text(o.ref.format, t, o.attrs));
        break;
    }
  }
  // All finished before any is visible (as OutputSet::commit).
  for (auto& f : files) {
    if (f) f->finish();
  }
  for (auto& [path, w] : h5_files) w->prepare();
  for (auto& [path, w] : h5_files) w->publish();
  for (auto& f : files) {
    if (f) f->commit();
  }
}

}  // namespace posenc
