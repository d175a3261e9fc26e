// The strict NPY reader and the np.save-compatible writer (see npy.hpp).
#include "posenc/io/npy.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "io/slab.hpp"
#include "posenc/error.hpp"
#include "posenc/io/atomic.hpp"

namespace posenc {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
constexpr unsigned char kHdf5Signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
// Reads larger than this are split: Linux transfers at most ~2 GiB per call anyway.
constexpr std::size_t kMaxIo = std::size_t{1} << 30;
// Streams of unknown length are read in pieces of this size before the full tensor is
// allocated (see read_all_rows).
constexpr std::size_t kStreamChunk = std::size_t{64} << 20;

bool little_endian_host() {
  const std::uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

[[noreturn]] void bad_header(const std::string& what, const std::string& why) {
  throw InputError(fmt::format("{}: malformed NPY header: {}", what, why));
}

// A recursive-descent reader of the one dict shape numpy writes: string keys, a string
// (or a list, for structured dtypes we refuse) for descr, True/False, a tuple of ints.
class DictParser {
 public:
  DictParser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    expect('{', "expected '{'");
    for (;;) {
      skip_ws();
      if (peek() == '}') break;
      std::string key = parse_string("a quoted key");
      skip_ws();
      expect(':', fmt::format("expected ':' after '{}'", key));
      skip_ws();
      if (key == "descr") {
        if (have_descr) bad_header(what_, "duplicate key 'descr'");
        have_descr = true;
        if (peek() == '[') {
          throw InputError(fmt::format(
              "{}: unsupported dtype: structured (record) arrays are not supported", what_));
        }
        h.descr = parse_string("a dtype string for 'descr'");
      } else if (key == "fortran_order") {
        if (have_fortran) bad_header(what_, "duplicate key 'fortran_order'");
        have_fortran = true;
        std::string id = parse_word();
        if (id == "True") {
          h.fortran_order = true;
        } else if (id == "False") {
          h.fortran_order = false;
        } else {
          bad_header(what_, fmt::format("fortran_order must be True or False, got '{}'", id));
        }
      } else if (key == "shape") {
        if (have_shape) bad_header(what_, "duplicate key 'shape'");
        have_shape = true;
        h.shape = parse_shape();
      } else {
        bad_header(what_, fmt::format("unexpected key '{}'", key));
      }
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') break;
      bad_header(what_, "expected ',' or '}' after a value");
    }
    ++pos_;  // '}'
    skip_ws();
    if (pos_ != s_.size()) bad_header(what_, "unexpected text after the dict");
    if (!have_descr) bad_header(what_, "missing key 'descr'");
    if (!have_fortran) bad_header(what_, "missing key 'fortran_order'");
    if (!have_shape) bad_header(what_, "missing key 'shape'");
    return h;
  }

 private:
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  void expect(char c, const std::string& why) {
    if (peek() != c || pos_ >= s_.size()) bad_header(what_, why);
    ++pos_;
  }
  std::string parse_string(const char* expected) {
    char q = peek();
    if (q != '\'' && q != '"') bad_header(what_, fmt::format("expected {}", expected));
    std::size_t end = s_.find(q, pos_ + 1);
    if (end == std::string::npos) bad_header(what_, "unterminated string");
    std::string out = s_.substr(pos_ + 1, end - pos_ - 1);
    if (out.find('\\') != std::string::npos) bad_header(what_, "escapes in strings");
    pos_ = end + 1;
    return out;
  }
  std::string parse_word() {
    std::size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) ||
                                s_[pos_] == '_' || s_[pos_] == '-' || s_[pos_] == '.')) {
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }
  std::size_t parse_dim() {
    if (peek() == '-') {
      ++pos_;
      bad_header(what_, fmt::format("negative dimension -{} in shape", parse_word()));
    }
    std::size_t start = pos_;
    std::uint64_t v = 0;
    bool overflow = false;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (__builtin_mul_overflow(v, std::uint64_t{10}, &v) ||
          __builtin_add_overflow(v, static_cast<std::uint64_t>(s_[pos_] - '0'), &v)) {
        overflow = true;
      }
      ++pos_;
    }
    if (pos_ == start) {
      std::string w = parse_word();
      bad_header(what_, fmt::format("shape must hold integers, got '{}'",
                                    w.empty() ? std::string(1, peek()) : w));
    }
    if (peek() == 'L' || peek() == 'l') ++pos_;  // Python 2 long literals
    std::string digits = s_.substr(start, pos_ - start);
    if (overflow || v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        v > std::numeric_limits<std::size_t>::max()) {
      throw InputError(
          fmt::format("{}: dimension {} in the NPY header is too large", what_, digits));
    }
    return static_cast<std::size_t>(v);
  }
  Shape parse_shape() {
    expect('(', "shape must be a tuple");
    Shape shape;
    skip_ws();
    if (peek() == ')') {
      ++pos_;
      return shape;
    }
    bool trailing_comma = false;
    for (;;) {
      skip_ws();
      shape.push_back(parse_dim());
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        skip_ws();
        if (peek() == ')') {
          trailing_comma = true;
          ++pos_;
          break;
        }
        continue;
      }
      if (peek() == ')') {
        ++pos_;
        break;
      }
      bad_header(what_, "expected ',' or ')' in shape");
    }
    // "(3)" is an int in Python, not a tuple: numpy refuses it too.
    if (shape.size() == 1 && !trailing_comma) bad_header(what_, "shape must be a tuple");
    return shape;
  }

  const std::string& s_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

// Maps a descr to a DType and whether its bytes need swapping on this machine.
void parse_descr(NpyHeader& h, const std::string& what) {
  const std::string& d = h.descr;
  auto unsupported = [&]() -> void {
    throw InputError(fmt::format("{}: unsupported dtype '{}'", what, d));
  };
  std::size_t i = 0;
  char order = '=';
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) {
    order = d[0];
    i = 1;
  }
  if (d.size() != i + 2) unsupported();
  char kind = d[i];
  char size = d[i + 1];
  switch (kind) {
    case 'f':
      if (size == '2')
        h.dtype = DType::f16;
      else if (size == '4')
        h.dtype = DType::f32;
      else if (size == '8')
        h.dtype = DType::f64;
      else if (size == '1')
        h.dtype = DType::u8;  // early ml_dtypes' float8_e5m2: bytes, as '<V1'
      else
        unsupported();
      break;
    case 'i':
      if (size == '1')
        h.dtype = DType::i8;
      else if (size == '2')
        h.dtype = DType::i16;
      else if (size == '4')
        h.dtype = DType::i32;
      else if (size == '8')
        h.dtype = DType::i64;
      else
        unsupported();
      break;
    case 'u':
      if (size == '1')
        h.dtype = DType::u8;
      else if (size == '2')
        h.dtype = DType::u16;
      else if (size == '4')
        h.dtype = DType::u32;
      else if (size == '8')
        h.dtype = DType::u64;
      else
        unsupported();
      break;
    case 'b':
      if (size == '1')
        h.dtype = DType::b1;
      else
        unsupported();
      break;
    case 'V':
      // ml_dtypes' float8 types ('<V1' as np.save writes them; older releases wrote e5m2
      // as '<f1', below) and any other 1-byte void: their bytes, which an input dtype
      // (TensorRef::view_as) reads as fp8.
      if (size == '1')
        h.dtype = DType::u8;
      else
        unsupported();
      break;
    default:
      unsupported();
  }
  bool little = little_endian_host();
  h.swap = dtype_size(h.dtype) > 1 && ((order == '<' && !little) || (order == '>' && little));
}

std::uint64_t le_uint(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Copies a Fortran-ordered array into C order, element by element (itemsize T).
template <class T>
void fortran_to_c(const std::byte* src, std::byte* dst, const Shape& shape, std::size_t numel) {
  const std::size_t nd = shape.size();
  if (numel == 0) return;
  std::vector<std::size_t> fstride(nd), idx(nd, 0);
  std::size_t s = 1;
  for (std::size_t k = 0; k < nd; ++k) {
    fstride[k] = s;
    s *= shape[k];
  }
  const T* in = reinterpret_cast<const T*>(src);
  T* out = reinterpret_cast<T*>(dst);
  std::size_t off = 0;
  for (std::size_t n = 0; n < numel; ++n) {
    std::memcpy(out + n, in + off, sizeof(T));
    // Advance the C-order multi-index (last axis fastest), keeping `off` in step.
    for (std::size_t k = nd; k-- > 0;) {
      if (++idx[k] < shape[k]) {
        off += fstride[k];
        break;
      }
      off -= fstride[k] * (shape[k] - 1);
      idx[k] = 0;
    }
  }
}

void fortran_to_c(const std::byte* src, std::byte* dst, const Shape& shape, std::size_t numel,
                  std::size_t itemsize) {
  switch (itemsize) {
    case 1:
      fortran_to_c<std::uint8_t>(src, dst, shape, numel);
      break;
    case 2:
      fortran_to_c<std::uint16_t>(src, dst, shape, numel);
      break;
    case 4:
      fortran_to_c<std::uint32_t>(src, dst, shape, numel);
      break;
    default:
      fortran_to_c<std::uint64_t>(src, dst, shape, numel);
      break;
  }
}

std::string storage_text(const NpyHeader& h) {
  std::string order;
  if (dtype_size(h.dtype) == 1) {
    order = "";
  } else {
    bool little = little_endian_host() != h.swap;
    order = little ? ", little-endian" : ", big-endian";
  }
  // A 1-byte void or float descr holds opaque bytes (ml_dtypes' float8 arrays).
  auto ends = [&](const char* tail) {
    return h.descr.size() >= 2 && h.descr.compare(h.descr.size() - 2, 2, tail) == 0;
  };
  const bool opaque = ends("V1") || ends("f1");
  return fmt::format("NPY {}.{}, {} order{}{}", h.major, h.minor,
                     h.fortran_order ? "Fortran" : "C", order,
                     opaque ? fmt::format(", descr '{}' (1-byte opaque, read as bytes)", h.descr)
                            : "");
}

// Row access to NPY data. Regular files use positioned reads (any order); streams
// are read forward. Fortran-ordered data are loaded and transposed on first use.
class NpySource final : public TensorSource {
 public:
  NpySource(NpyHeader h, std::string what, int fd, bool own_fd, std::unique_ptr<ByteReader> stream)
      : h_(std::move(h)),
        what_(std::move(what)),
        fd_(fd),
        own_fd_(own_fd),
        stream_(std::move(stream)) {
    info_.dtype = h_.dtype;
    info_.shape = h_.shape;
    info_.storage = storage_text(h_);
    rows_ = h_.shape.empty() ? 1 : h_.shape[0];
    Shape row_shape(h_.shape.empty() ? h_.shape.begin() : h_.shape.begin() + 1, h_.shape.end());
    row_bytes_ = checked_numel(row_shape, dtype_size(h_.dtype), what_) * dtype_size(h_.dtype);
  }
  ~NpySource() override {
    if (own_fd_ && fd_ >= 0) ::close(fd_);
  }

  // The data mapped read-only and shared: the page cache itself, no copy. Only for data
  // usable as they are.
  const std::byte* mapped_data() override {
    if (!map_.empty()) return map_.data();
    if (stream_ || h_.fortran_order || h_.swap || h_.data_bytes == 0 || map_tried_) {
      return nullptr;
    }
    map_tried_ = true;
    map_ =
        io_detail::MappedFileRange(fd_, h_.data_offset, h_.data_bytes, dtype_size(h_.dtype), what_);
    return map_.empty() ? nullptr : map_.data();
  }

  const TensorInfo& info() const override { return info_; }
  bool seekable() const override { return stream_ == nullptr; }

  bool raw_reads() override {
    return !stream_ && !h_.fortran_order && !h_.swap && fd_ >= 0 && h_.data_bytes > 0;
  }
  RawFile raw_file() const override {
    if (stream_ || h_.fortran_order || h_.swap || fd_ < 0) return {};
    return {fd_, h_.data_offset, h_.data_bytes, what_};
  }
  // Only fd_ and the header are used: safe from several threads.
  void read_raw(std::size_t offset, std::size_t n, void* dst) override {
    if (stream_ || h_.fortran_order || h_.swap || fd_ < 0) {
      throw std::logic_error("NpySource::read_raw: not a regular file in C and native order");
    }
    if (offset > h_.data_bytes || n > h_.data_bytes - offset) {
      throw InputError(fmt::format("{}: bytes {}..{} are outside the {} data bytes", what_, offset,
                                   offset + n, h_.data_bytes));
    }
    io_detail::pread_full(fd_, h_.data_offset + offset, dst, n, what_, h_.data_offset,
                          h_.data_bytes);
  }

  /// The whole tensor from a stream, allocated only once its bytes have arrived.
  Tensor read_whole_stream() {
    if (next_byte_ != 0 || loaded_) {
      throw InputError(fmt::format("{}: cannot read rows again from a stream", what_));
    }
    if (h_.fortran_order) {
      load_fortran();
      return std::move(cache_);
    }
    Tensor raw = read_stream_whole();
    next_byte_ = h_.data_bytes;
    eof_checked_ = true;
    char extra[4096];
    if (read_full(*stream_, extra, sizeof extra) > 0) {
      throw InputError(fmt::format("{}: unexpected trailing bytes after the {} data bytes", what_,
                                   h_.data_bytes));
    }
    if (h_.swap) byteswap_elements(raw.bytes(), raw.numel(), dtype_size(h_.dtype));
    return raw;
  }

  void read_rows(std::size_t first, std::size_t count, void* dst) override {
    if (first > rows_ || count > rows_ - first) {
      throw InputError(fmt::format("{}: rows {}..{} are outside the {} rows of the tensor", what_,
                                   first, first + count, rows_));
    }
    read_range(first * row_bytes_, count * row_bytes_, dst);
  }

  // With the leading axes of extent 1, entries along `axis` are consecutive byte
  // ranges of the C-order data: the same byte stream as rows.
  void read_slab(std::size_t axis, std::size_t first, std::size_t count, void* dst) override {
    io_detail::check_slab_axis(h_.shape, axis);
    const std::size_t n = io_detail::slab_extent(h_.shape, axis);
    if (first > n || count > n - first) {
      throw InputError(fmt::format("{}: entries {}..{} are outside the {} along axis {}", what_,
                                   first, first + count, n, axis));
    }
    const std::size_t entry = io_detail::slab_entry_bytes(h_.shape, axis, dtype_size(h_.dtype));
    read_range(first * entry, count * entry, dst);
  }

  void read_elements(std::size_t first, std::size_t count, void* dst) override {
    const std::size_t item = dtype_size(h_.dtype);
    const std::size_t n = rows_ * (row_bytes_ / std::max<std::size_t>(item, 1));
    if (first > n || count > n - first) {
      throw InputError(fmt::format("{}: elements {}..{} are outside the {} of the tensor", what_,
                                   first, first + count, n));
    }
    read_range(first * item, count * item, dst);
  }

 private:
  // Data bytes [offset, offset + nbytes) in C order and native byte order.
  void read_range(std::size_t offset, std::size_t nbytes, void* dst) {
    auto* out = static_cast<std::byte*>(dst);
    if (h_.fortran_order) {
      load_fortran();
      if (nbytes) std::memcpy(out, cache_.bytes() + offset, nbytes);
      return;
    }
    if (stream_) {
      read_stream(offset, nbytes, out);
    } else {
      read_file(offset, out, nbytes);
    }
    if (h_.swap) byteswap_elements(out, nbytes / dtype_size(h_.dtype), dtype_size(h_.dtype));
  }

  void read_file(std::size_t offset, std::byte* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      std::size_t want = std::min(n - done, kMaxIo);
      ssize_t got =
          ::pread(fd_, out + done, want, static_cast<off_t>(h_.data_offset + offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        throw InputError(fmt::format("{}: read error: {}", what_, std::strerror(errno)));
      }
      if (got == 0) {
        throw InputError(fmt::format("{}: truncated data: expected {} bytes, got {}", what_,
                                     h_.data_bytes, offset + done));
      }
      done += static_cast<std::size_t>(got);
    }
  }

  void read_stream(std::size_t offset, std::size_t nbytes, std::byte* out) {
    if (offset < next_byte_) {
      throw InputError(fmt::format("{}: cannot read rows again from a stream", what_));
    }
    // Skip data the caller does not want (forward only).
    std::vector<std::byte> scratch;
    while (next_byte_ < offset) {
      const std::size_t n = std::min(offset - next_byte_, std::size_t{1} << 20);
      scratch.resize(n);
      stream_read(scratch.data(), n);
      next_byte_ += n;
    }
    stream_read(out, nbytes);
    next_byte_ += nbytes;
    if (next_byte_ == h_.data_bytes && !eof_checked_) {
      eof_checked_ = true;
      char extra[4096];
      std::size_t n = read_full(*stream_, extra, sizeof extra);
      if (n > 0) {
        throw InputError(fmt::format("{}: unexpected trailing bytes after the {} data bytes", what_,
                                     h_.data_bytes));
      }
    }
  }

  void stream_read(std::byte* out, std::size_t n) {
    std::size_t got = read_full(*stream_, out, n);
    consumed_ += got;
    if (got < n) {
      throw InputError(fmt::format("{}: truncated data: expected {} bytes, got {}", what_,
                                   h_.data_bytes, consumed_));
    }
  }

  // Reads all data bytes of a stream, allocating as they arrive: pieces grow with what
  // has been read (64 KiB, then as much again, up to 64 MiB), so a header that lies
  // about a huge size costs about what the stream really delivered before it ran dry.
  Tensor read_stream_whole() {
    std::vector<std::unique_ptr<std::byte[]>> pieces;
    std::vector<std::size_t> sizes;
    for (std::size_t done = 0; done < h_.data_bytes;) {
      const std::size_t want = std::clamp<std::size_t>(done, std::size_t{64} << 10, kStreamChunk);
      const std::size_t n = std::min(want, h_.data_bytes - done);
      pieces.emplace_back(new std::byte[n]);
      sizes.push_back(n);
      stream_read(pieces.back().get(), n);
      done += n;
    }
    Tensor raw(h_.dtype, h_.shape);
    std::size_t off = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (sizes[i]) std::memcpy(raw.bytes() + off, pieces[i].get(), sizes[i]);
      off += sizes[i];
    }
    return raw;
  }

  void load_fortran() {
    if (loaded_) return;
    Tensor raw;
    if (stream_) {
      raw = read_stream_whole();
      char extra[4096];
      if (read_full(*stream_, extra, sizeof extra) > 0) {
        throw InputError(fmt::format("{}: unexpected trailing bytes after the {} data bytes", what_,
                                     h_.data_bytes));
      }
    } else {
      raw = Tensor(h_.dtype, h_.shape);
      read_file(0, raw.bytes(), raw.nbytes());
    }
    if (h_.swap) byteswap_elements(raw.bytes(), raw.numel(), dtype_size(h_.dtype));
    cache_ = Tensor(h_.dtype, h_.shape);
    fortran_to_c(raw.bytes(), cache_.bytes(), h_.shape, raw.numel(), dtype_size(h_.dtype));
    loaded_ = true;
  }

  NpyHeader h_;
  std::string what_;
  TensorInfo info_;
  int fd_ = -1;
  bool own_fd_ = false;
  std::unique_ptr<ByteReader> stream_;
  std::size_t rows_ = 0;
  std::size_t row_bytes_ = 0;
  std::size_t next_byte_ = 0;
  std::size_t consumed_ = 0;
  bool eof_checked_ = false;
  bool loaded_ = false;
  Tensor cache_;
  io_detail::MappedFileRange map_;
  bool map_tried_ = false;
};

// Adapts a borrowed reader to the owned-reader interface of NpySource.
class BorrowedReader final : public ByteReader {
 public:
  explicit BorrowedReader(ByteReader& r) : r_(r) {}
  std::size_t read_some(void* dst, std::size_t n) override { return r_.read_some(dst, n); }

 private:
  ByteReader& r_;
};

}  // namespace

std::size_t FdReader::read_some(void* dst, std::size_t n) {
  for (;;) {
    ssize_t got = ::read(fd_, dst, std::min(n, kMaxIo));
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno == EINTR) continue;
    throw InputError(fmt::format("{}: read error: {}", what_, std::strerror(errno)));
  }
}

std::size_t read_full(ByteReader& r, void* dst, std::size_t n) {
  auto* p = static_cast<char*>(dst);
  std::size_t done = 0;
  while (done < n) {
    std::size_t got = r.read_some(p + done, n - done);
    if (got == 0) break;
    done += got;
  }
  return done;
}

void byteswap_elements(void* p, std::size_t count, std::size_t size) noexcept {
  auto* b = static_cast<unsigned char*>(p);
  switch (size) {
    case 2:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t v;
        std::memcpy(&v, b + 2 * i, 2);
        v = __builtin_bswap16(v);
        std::memcpy(b + 2 * i, &v, 2);
      }
      break;
    case 4:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint32_t v;
        std::memcpy(&v, b + 4 * i, 4);
        v = __builtin_bswap32(v);
        std::memcpy(b + 4 * i, &v, 4);
      }
      break;
    case 8:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint64_t v;
        std::memcpy(&v, b + 8 * i, 8);
        v = __builtin_bswap64(v);
        std::memcpy(b + 8 * i, &v, 8);
      }
      break;
    default:
      break;
  }
}

NpyHeader parse_npy_dict(const std::string& text, const std::string& what) {
  NpyHeader h = DictParser(text, what).parse();
  parse_descr(h, what);
  h.numel = checked_numel(h.shape, dtype_size(h.dtype), what);
  h.data_bytes = h.numel * dtype_size(h.dtype);
  return h;
}

NpyHeader read_npy_header(ByteReader& r, const std::string& what,
                          std::optional<std::uint64_t> file_size) {
  unsigned char pre[8];
  std::size_t got = read_full(r, pre, 8);
  if (got >= 8 && std::memcmp(pre, kHdf5Signature, 8) == 0) {
    throw InputError(fmt::format(
        "{}: this is an HDF5 file, not NPY; name it with a .h5 extension and a dataset, "
        "e.g. x.h5:/data",
        what));
  }
  if (got >= 4 && std::memcmp(pre, "PK\x03\x04", 4) == 0) {
    throw InputError(fmt::format("{}: this is a ZIP archive (.npz?), not an NPY file", what));
  }
  if (got == 0) throw InputError(fmt::format("{}: empty input, not an NPY file", what));
  if (std::memcmp(pre, kMagic, std::min(got, kMagicLen)) != 0) {
    throw InputError(fmt::format("{}: not an NPY file (bad magic)", what));
  }
  if (got < 8) {
    throw InputError(fmt::format("{}: not an NPY file (truncated magic: {} bytes)", what, got));
  }
  NpyHeader h;
  h.major = pre[6];
  h.minor = pre[7];
  if (!((h.major == 1 || h.major == 2 || h.major == 3) && h.minor == 0)) {
    throw InputError(fmt::format("{}: unsupported NPY version {}.{} (expected 1.0, 2.0 or 3.0)",
                                 what, h.major, h.minor));
  }
  const int len_bytes = h.major == 1 ? 2 : 4;
  unsigned char lb[4];
  if (read_full(r, lb, len_bytes) < static_cast<std::size_t>(len_bytes)) {
    throw InputError(fmt::format("{}: truncated NPY header (no header length)", what));
  }
  const std::uint64_t hlen = le_uint(lb, len_bytes);
  const std::uint64_t offset = 8 + len_bytes + hlen;
  if (hlen > kNpyMaxHeaderLen) {
    throw InputError(fmt::format("{}: NPY header length {} is too large (limit {})", what, hlen,
                                 kNpyMaxHeaderLen));
  }
  if (file_size && offset > *file_size) {
    throw InputError(
        fmt::format("{}: NPY header length {} goes beyond the end of the file ({} bytes)", what,
                    hlen, *file_size));
  }
  std::string text(hlen, '\0');
  std::size_t hgot = read_full(r, text.data(), hlen);
  if (hgot < hlen) {
    throw InputError(
        fmt::format("{}: truncated NPY header: expected {} bytes, got {}", what, hlen, hgot));
  }
  NpyHeader parsed = parse_npy_dict(text, what);
  parsed.major = h.major;
  parsed.minor = h.minor;
  parsed.data_offset = static_cast<std::size_t>(offset);
  if (file_size) {
    std::uint64_t avail = *file_size - offset;
    if (avail < parsed.data_bytes) {
      throw InputError(fmt::format("{}: truncated data: expected {} bytes, got {}", what,
                                   parsed.data_bytes, avail));
    }
    if (avail > parsed.data_bytes) {
      throw InputError(fmt::format("{}: unexpected {} trailing bytes after the {} data bytes", what,
                                   avail - parsed.data_bytes, parsed.data_bytes));
    }
  }
  return parsed;
}

std::string npy_descr(DType t, const std::string& what) {
  const char order = little_endian_host() ? '<' : '>';
  switch (t) {
    case DType::f16:
      return fmt::format("{}f2", order);
    case DType::f32:
      return fmt::format("{}f4", order);
    case DType::f64:
      return fmt::format("{}f8", order);
    case DType::i8:
      return "|i1";
    case DType::i16:
      return fmt::format("{}i2", order);
    case DType::i32:
      return fmt::format("{}i4", order);
    case DType::i64:
      return fmt::format("{}i8", order);
    case DType::u8:
      return "|u1";
    case DType::u16:
      return fmt::format("{}u2", order);
    case DType::u32:
      return fmt::format("{}u4", order);
    case DType::u64:
      return fmt::format("{}u8", order);
    case DType::b1:
      return "|b1";
    case DType::f8e4m3fn:
    case DType::f8e5m2:
      // As np.save writes ml_dtypes' float8 arrays (kind 'V', native order): numpy reads
      // the bytes as void; `.view(ml_dtypes.float8_e4m3fn)` or `.view(np.uint8)` types them.
      return fmt::format("{}V1", order);
    case DType::bf16:
      break;
  }
  throw UsageError(fmt::format(
      "{}: NPY has no bfloat16 type; use --dtype f32 (exact for bf16 values) or an HDF5 output",
      what));
}

std::string npy_header_bytes(DType dtype, const Shape& shape, const std::string& what) {
  // The dict exactly as numpy's _write_array_header formats it (sorted keys, repr of
  // a tuple, trailing ", "), then the growth-axis spaces numpy >= 1.20 adds.
  std::string shape_repr;
  if (shape.empty()) {
    shape_repr = "()";
  } else if (shape.size() == 1) {
    shape_repr = fmt::format("({},)", shape[0]);
  } else {
    shape_repr = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i) shape_repr += ", ";
      shape_repr += std::to_string(shape[i]);
    }
    shape_repr += ")";
  }
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                 npy_descr(dtype, what), shape_repr);
  if (!shape.empty()) {
    const std::size_t digits = std::to_string(shape[0]).size();
    constexpr std::size_t kGrowthAxisMaxDigits = 21;
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  // _wrap_header: pad with spaces plus a final newline so that the data start on a
  // 64-byte boundary; version 1.0 unless the length does not fit in 16 bits.
  constexpr std::size_t kAlign = 64;
  const std::size_t hlen = dict.size() + 1;
  for (int major : {1, 2}) {
    const std::size_t len_bytes = major == 1 ? 2 : 4;
    const std::size_t padlen = kAlign - ((8 + len_bytes + hlen) % kAlign);
    const std::size_t total = hlen + padlen;
    if (major == 1 && total > 0xffff) continue;
    std::string out(kMagic, kMagicLen);
    out.push_back(static_cast<char>(major));
    out.push_back('\0');
    for (std::size_t i = 0; i < len_bytes; ++i)
      out.push_back(static_cast<char>((total >> (8 * i)) & 0xff));
    out += dict;
    out.append(padlen, ' ');
    out.push_back('\n');
    return out;
  }
  throw UsageError(
      fmt::format("{}: shape {} is too large for an NPY header", what, shape_str(shape)));
}

std::unique_ptr<TensorSource> open_npy_stream(std::unique_ptr<ByteReader> r,
                                              const std::string& what) {
  NpyHeader h = read_npy_header(*r, what);
  return std::make_unique<NpySource>(std::move(h), what, -1, false, std::move(r));
}

std::unique_ptr<TensorSource> open_npy_source(const std::string& path, const std::string& what) {
  if (path == "-") {
    return open_npy_stream(std::make_unique<FdReader>(0, what), what);
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw InputError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw InputError(fmt::format("cannot open '{}': {}", path, std::strerror(e)));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw InputError(fmt::format("cannot read '{}': Is a directory", path));
  }
  if (!S_ISREG(st.st_mode)) {
    // A pipe or device named by path (/dev/stdin, a FIFO): read forward only. The
    // reader owns nothing, so the descriptor is closed by a small owning wrapper.
    struct OwningFdReader final : ByteReader {
      explicit OwningFdReader(int fd, std::string w) : fd(fd), r(fd, std::move(w)) {}
      ~OwningFdReader() override { ::close(fd); }
      std::size_t read_some(void* dst, std::size_t n) override { return r.read_some(dst, n); }
      int fd;
      FdReader r;
    };
    return open_npy_stream(std::make_unique<OwningFdReader>(fd, what), what);
  }
  try {
    FdReader r(fd, what);
    NpyHeader h = read_npy_header(r, what, static_cast<std::uint64_t>(st.st_size));
    return std::make_unique<NpySource>(std::move(h), what, fd, true, nullptr);
  } catch (...) {
    ::close(fd);
    throw;
  }
}

Tensor read_all_rows(TensorSource& src) {
  // A stream is gathered in pieces as its bytes arrive, then allocated whole.
  if (auto* npy = dynamic_cast<NpySource*>(&src); npy != nullptr && !src.seekable()) {
    return npy->read_whole_stream();
  }
  const TensorInfo& info = src.info();
  Tensor t(info.dtype, info.shape);
  src.read_rows(0, info.shape.empty() ? 1 : info.shape[0], t.bytes());
  return t;
}

Tensor read_npy(ByteReader& r, const std::string& what) {
  auto src = open_npy_stream(std::make_unique<BorrowedReader>(r), what);
  return read_all_rows(*src);
}

}  // namespace posenc
