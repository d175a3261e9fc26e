// HDF5 datasets through the C API.
//
// Reading treats files as semi-trusted (io-cli-reliability.md B6): libhdf5 1.10.8 has
// known parser bugs, so the error stack is silenced, filter plugins are never loaded,
// external links / external raw storage / virtual datasets are refused, and class,
// size, rank and element count are validated before a byte of data is read.
//
// Writing produces files h5py reads naturally (f16 as h5py's half type, bool as h5py's
// enum, string attributes as variable-length UTF-8) and that are byte-identical from
// run to run (no object timestamps).

#include "posenc/io/hdf5.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "io/hdf5_append.hpp"
#include "io/hdf5_reader.hpp"
#include "io/slab.hpp"
#include "posenc/error.hpp"
#include "posenc/io/atomic.hpp"
#include "posenc/printable.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "memory types for f16/bf16/bool assume a little-endian host");

// Defined by the posenc executable, which loads libhdf5 when this is first called
// (src/shim/hdf5.cpp): returns why it cannot, or null. Absent (a null weak symbol)
// where libhdf5 is linked, as in libposenc.
extern "C" const char* posenc_load_hdf5() __attribute__((weak));

namespace posenc {
namespace {

constexpr int kMaxRank = 8;
constexpr std::size_t kMaxListed = 6;            // datasets named in a "no dataset" message
constexpr std::size_t kMaxAttrValues = 1 << 20;  // numeric attribute elements read
constexpr hsize_t kMaxStringAttr = 1 << 20;      // bytes of a string attribute

// Silences the HDF5 error stack (no HDF5-DIAG output, ever) and disables filter
// plugins. The library is thread-safe-built, so the error-stack setting is per
// thread: done on first use in each thread, and every entry point calls this (the
// table writer writes from OpenMP threads). The library is kept from closing itself at
// exit: after a failed write (disk full) it would close the broken file again there
// and crash; every file posenc keeps is closed explicitly, and the rest is a
// temporary file being discarded.
//
// Returns the scope that tells the libhdf5 children's forks to wait while this thread
// calls libhdf5 (hdf5_reader.hpp): each entry point holds it until it returns.
[[nodiscard]] hdf5_detail::Hdf5CallScope init_hdf5() {
  thread_local bool done = false;
  if (done) return {};
  static const bool once = [] {
    H5dont_atexit();
    H5open();
    H5PLset_loading_state(0);
    return true;
  }();
  (void)once;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  done = true;
  return {};
}

// The innermost HDF5 error description, for the "why" of a message.
std::string h5_reason() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        auto* s = static_cast<std::string*>(data);
        if (n == 0 && e->desc != nullptr) *s = e->desc;
        return 0;
      },
      &out);
  H5Eclear2(H5E_DEFAULT);
  // The file driver's message spans lines and names posenc's temporary file; the errno
  // in it says what happened ("No space left on device", "File too large").
  const auto at = out.find("errno = ");
  if (at != std::string::npos) {
    const int e = std::atoi(out.c_str() + at + 8);
    if (e > 0) out = std::strerror(e);
  }
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out.empty() ? "HDF5 library error" : out;
}

/// Owns one hid_t and closes it with the matching H5?close.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer close) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: reads like the C API
  /// Closes now; returns the close status (files: whether everything was flushed).
  herr_t reset() {
    herr_t r = 0;
    if (id_ >= 0 && close_ != nullptr) {
      const hdf5_detail::Hdf5CallScope calls;  // also from destructors, outside entry points
      r = close_(id_);
    }
    id_ = H5I_INVALID_HID;
    return r;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// check(): every C call goes through one of these. E is the error type thrown,
// `what` the complete message prefix ("x.h5: cannot read '/d'"), HDF5's reason added.
template <class E, class T>
T check(T ret, const std::string& what) {
  if (ret < 0) throw E(fmt::format("{}: {}", what, h5_reason()));
  return ret;
}
template <class E>
Hid check_id(hid_t id, Hid::Closer close, const std::string& what) {
  if (id < 0) throw E(fmt::format("{}: {}", what, h5_reason()));
  return Hid(id, close);
}

Hid plist(hid_t cls, const std::string& what) {
  return check_id<OutputError>(H5Pcreate(cls), H5Pclose, what);
}

// External links could make posenc open arbitrary files: refuse to traverse them.
herr_t deny_external_link(const char*, const char*, const char*, const char*, unsigned*, hid_t,
                          void*) {
  return -1;
}

// h5py's float16: IEEE binary16 described as a shrunken copy of IEEE f32 LE.
Hid make_half_type() {
  Hid t = check_id<OutputError>(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "HDF5 half type");
  check<OutputError>(H5Tset_fields(t, 15, 10, 5, 0, 10), "HDF5 half type");
  check<OutputError>(H5Tset_size(t, 2), "HDF5 half type");
  check<OutputError>(H5Tset_ebias(t, 15), "HDF5 half type");
  check<OutputError>(H5Tset_precision(t, 16), "HDF5 half type");
  return t;
}

// bfloat16: f32's sign and exponent with a 7-bit mantissa.
Hid make_bf16_type() {
  Hid t = check_id<OutputError>(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "HDF5 bfloat16 type");
  check<OutputError>(H5Tset_fields(t, 15, 7, 8, 0, 7), "HDF5 bfloat16 type");
  check<OutputError>(H5Tset_size(t, 2), "HDF5 bfloat16 type");
  check<OutputError>(H5Tset_ebias(t, 127), "HDF5 bfloat16 type");
  check<OutputError>(H5Tset_precision(t, 16), "HDF5 bfloat16 type");
  return t;
}

// fp8: a 1-byte opaque type with h5py's tag for numpy's '|V1' ("NUMPY:|V1"; h5py 3.7
// reads a dataset of it as '|V1' bytes, and cannot read an opaque type of another tag),
// and the attribute kFp8Attr naming the format ("float8_e4m3fn", torch's name). HDF5
// 1.10 has no fp8 float type, and its float conversions would take e4m3fn's top exponent
// for Inf/NaN; an opaque type is never converted.
constexpr const char* kFp8Tag = "NUMPY:|V1";
constexpr const char* kFp8Attr = "dtype";
Hid make_fp8_type(DType) {
  Hid t = check_id<OutputError>(H5Tcreate(H5T_OPAQUE, 1), H5Tclose, "HDF5 fp8 type");
  check<OutputError>(H5Tset_tag(t, kFp8Tag), "HDF5 fp8 type");
  return t;
}

// h5py's bool: an enum over int8 with FALSE = 0 and TRUE = 1.
Hid make_bool_type() {
  Hid t = check_id<OutputError>(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose, "HDF5 bool type");
  std::int8_t v = 0;
  check<OutputError>(H5Tenum_insert(t, "FALSE", &v), "HDF5 bool type");
  v = 1;
  check<OutputError>(H5Tenum_insert(t, "TRUE", &v), "HDF5 bool type");
  return t;
}

// The type a posenc dtype has in memory (file type == memory type on this host for
// the little-endian IEEE and integer types).
Hid type_for(DType d) {
  auto copy = [](hid_t base) {
    return check_id<OutputError>(H5Tcopy(base), H5Tclose, "HDF5 type");
  };
  switch (d) {
    case DType::f16:
      return make_half_type();
    case DType::bf16:
      return make_bf16_type();
    case DType::f8e4m3fn:
    case DType::f8e5m2:
      return make_fp8_type(d);
    case DType::f32:
      return copy(H5T_IEEE_F32LE);
    case DType::f64:
      return copy(H5T_IEEE_F64LE);
    case DType::i8:
      return copy(H5T_STD_I8LE);
    case DType::i16:
      return copy(H5T_STD_I16LE);
    case DType::i32:
      return copy(H5T_STD_I32LE);
    case DType::i64:
      return copy(H5T_STD_I64LE);
    case DType::u8:
      return copy(H5T_STD_U8LE);
    case DType::u16:
      return copy(H5T_STD_U16LE);
    case DType::u32:
      return copy(H5T_STD_U32LE);
    case DType::u64:
      return copy(H5T_STD_U64LE);
    case DType::b1:
      return make_bool_type();
  }
  throw OutputError("HDF5: unknown dtype");
}

std::string class_name(H5T_class_t c) {
  switch (c) {
    case H5T_INTEGER:
      return "integer";
    case H5T_FLOAT:
      return "float";
    case H5T_TIME:
      return "time";
    case H5T_STRING:
      return "string";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_COMPOUND:
      return "compound";
    case H5T_REFERENCE:
      return "reference";
    case H5T_ENUM:
      return "enum";
    case H5T_VLEN:
      return "variable-length";
    case H5T_ARRAY:
      return "array";
    default:
      return "unknown";
  }
}

}  // namespace

std::string hdf5_detail::normalize_name(const std::string& name) {
  std::string out;
  std::size_t i = 0;
  while (i < name.size()) {
    while (i < name.size() && name[i] == '/') ++i;
    std::size_t j = name.find('/', i);
    if (j == std::string::npos) j = name.size();
    if (j > i) out += "/" + name.substr(i, j - i);
    i = j;
  }
  return out;
}

namespace {

using hdf5_detail::normalize_name;

// --- reading -------------------------------------------------------------------

/// A file opened read-only with links, plugins and the error stack under control.
struct OpenFile {
  Hid file;
  Hid lapl;  // link access: external links denied
};

OpenFile open_file(const std::string& path) {
  const auto calls = init_hdf5();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw InputError(fmt::format("{}: is a directory", path));
  if (::access(path.c_str(), R_OK) != 0) {
    throw InputError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  htri_t is = H5Fis_hdf5(path.c_str());
  H5Eclear2(H5E_DEFAULT);
  if (is <= 0) throw InputError(fmt::format("{}: not an HDF5 file", path));
  OpenFile f;
  f.lapl = check_id<InputError>(H5Pcreate(H5P_LINK_ACCESS), H5Pclose, path);
  check<InputError>(H5Pset_elink_cb(f.lapl, deny_external_link, nullptr), path);
  Hid fapl = check_id<InputError>(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, path);
  // Closing the file closes every object in it: no id can outlive a failed read.
  check<InputError>(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), path);
  // No shared flock: it would make a run that reads and adds to one file wait for
  // itself. Writers that lock replace the file by rename, which an open file does not see.
  check<InputError>(H5Pset_file_locking(fapl, 0, 1), path);
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  if (id < 0) {
    throw InputError(fmt::format("{}: cannot open HDF5 file: {}", path, h5_reason()));
  }
  f.file = Hid(id, H5Fclose);
  return f;
}

// The device and inode of the file libhdf5 has open (its sec2 driver's descriptor), so
// that the process that maps the dataset's bytes can tell it maps this very file.
bool file_identity(hid_t file, std::uint64_t& dev, std::uint64_t& ino) {
  Hid fapl(H5Fget_access_plist(file), H5Pclose);
  void* handle = nullptr;
  struct stat st {};
  const bool ok = fapl.get() >= 0 && H5Pget_driver(fapl.get()) == H5FD_SEC2 &&
                  H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) >= 0 && handle != nullptr &&
                  ::fstat(*static_cast<int*>(handle), &st) == 0 && S_ISREG(st.st_mode);
  H5Eclear2(H5E_DEFAULT);
  if (!ok) return false;
  dev = st.st_dev;
  ino = st.st_ino;
  return true;
}

struct Lister {
  hid_t lapl;
  std::vector<std::string> names;
};

std::vector<std::string> datasets_in(const OpenFile& f) {
  Lister l{f.lapl, {}};
  // Visits hard and soft links; external links are listed by name only if they
  // resolved, which they never do here.
  H5Lvisit(
      f.file, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t group, const char* name, const H5L_info_t* info, void* data) -> herr_t {
        auto* l = static_cast<Lister*>(data);
        if (info->type != H5L_TYPE_HARD && info->type != H5L_TYPE_SOFT) return 0;
        H5O_info_t oi;
        if (H5Oget_info_by_name2(group, name, &oi, H5O_INFO_BASIC, l->lapl) < 0) {
          H5Eclear2(H5E_DEFAULT);
          return 0;
        }
        if (oi.type == H5O_TYPE_DATASET) l->names.push_back("/" + std::string(name));
        return l->names.size() >= 10000 ? 1 : 0;  // bounded on hostile files
      },
      &l);
  H5Eclear2(H5E_DEFAULT);
  return l.names;
}

std::string listing(const std::vector<std::string>& names) {
  if (names.empty()) return "(the file has no datasets)";
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(names.size(), kMaxListed));
  std::string more =
      names.size() > kMaxListed ? fmt::format(", ... {} more", names.size() - kMaxListed) : "";
  return fmt::format("(datasets: {}{})", fmt::join(shown, ", "), more);
}

// Checks every link on the way to `name` so that a missing piece, a group, or an
// external link gets its own message instead of HDF5's "object not found".
void check_path(const OpenFile& f, const std::string& path, const std::string& name) {
  if (name.empty() || name == "/") {
    throw InputError(
        fmt::format("{}: '/' is a group, not a dataset {}", path, listing(datasets_in(f))));
  }
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = name.find('/', pos + 1);
    std::string prefix = name.substr(0, pos);
    htri_t exists = H5Lexists(f.file, prefix.c_str(), f.lapl);
    if (exists <= 0) {
      H5Eclear2(H5E_DEFAULT);
      throw InputError(fmt::format("{}: no dataset '{}' {}", path, name, listing(datasets_in(f))));
    }
    H5L_info_t li;
    check<InputError>(H5Lget_info(f.file, prefix.c_str(), &li, f.lapl),
                      fmt::format("{}: cannot look up '{}'", path, prefix));
    if (li.type == H5L_TYPE_EXTERNAL) {
      throw InputError(fmt::format(
          "{}: '{}' is an external link to another file (refused: posenc reads only the "
          "file it is given)",
          path, prefix));
    }
    if (li.type != H5L_TYPE_HARD && li.type != H5L_TYPE_SOFT) {
      throw InputError(fmt::format("{}: '{}' is a user-defined link (refused)", path, prefix));
    }
    H5O_info_t oi;
    if (H5Oget_info_by_name2(f.file, prefix.c_str(), &oi, H5O_INFO_BASIC, f.lapl) < 0) {
      throw InputError(fmt::format("{}: '{}' is a dangling link: {}", path, prefix, h5_reason()));
    }
    bool last = pos == std::string::npos;
    if (last && oi.type == H5O_TYPE_GROUP) {
      throw InputError(fmt::format("{}: '{}' is a group, not a dataset {}", path, name,
                                   listing(datasets_in(f))));
    }
    if (!last && oi.type != H5O_TYPE_GROUP) {
      throw InputError(fmt::format("{}: no dataset '{}' ('{}' is not a group) {}", path, name,
                                   prefix, listing(datasets_in(f))));
    }
    if (last && oi.type != H5O_TYPE_DATASET) {
      throw InputError(fmt::format("{}: '{}' is not a dataset", path, name));
    }
  }
}

std::string filter_desc(H5Z_filter_t id, const unsigned* cd, std::size_t ncd, const char* name) {
  switch (id) {
    case H5Z_FILTER_DEFLATE:
      return ncd > 0 ? fmt::format("gzip {}", cd[0]) : "gzip";
    case H5Z_FILTER_SHUFFLE:
      return "shuffle";
    case H5Z_FILTER_FLETCHER32:
      return "fletcher32";
    case H5Z_FILTER_SZIP:
      return "szip";
    case H5Z_FILTER_NBIT:
      return "nbit";
    case H5Z_FILTER_SCALEOFFSET:
      return "scaleoffset";
    default:
      return name != nullptr && name[0] != '\0' ? fmt::format("filter {} ({})", id, name)
                                                : fmt::format("filter {}", id);
  }
}

/// Reads attribute `name` of `loc` as an AttrValue; nullopt when its type is not one
/// posenc represents (compound, reference, ...).
std::optional<AttrValue> read_attr(hid_t loc, const char* name) {
  Hid a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  if (a.get() < 0) return std::nullopt;
  Hid type(H5Aget_type(a), H5Tclose);
  Hid space(H5Aget_space(a), H5Sclose);
  if (type.get() < 0 || space.get() < 0) return std::nullopt;
  H5S_class_t sc = H5Sget_simple_extent_type(space);
  if (sc == H5S_NULL || sc == H5S_NO_CLASS) return std::nullopt;
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0 || static_cast<std::size_t>(n) > kMaxAttrValues) return std::nullopt;
  H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_STRING) {
    if (n != 1) return std::nullopt;
    htri_t vl = H5Tis_variable_str(type);
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    if (vl > 0) {
      H5Tset_size(mem, H5T_VARIABLE);
      H5Tset_cset(mem, H5Tget_cset(type));
      char* s = nullptr;
      if (H5Aread(a, mem, &s) < 0) return std::nullopt;
      std::string out = s != nullptr ? s : "";
      H5free_memory(s);
      return out;
    }
    std::size_t size = H5Tget_size(type);
    if (size == 0 || size > kMaxStringAttr) return std::nullopt;
    H5Tset_size(mem, size);
    H5Tset_cset(mem, H5Tget_cset(type));
    H5Tset_strpad(mem, H5T_STR_NULLPAD);
    std::string buf(size, '\0');
    if (H5Aread(a, mem, buf.data()) < 0) return std::nullopt;
    buf.resize(std::strlen(buf.c_str()));
    return buf;
  }
  if (cls == H5T_INTEGER && n == 1 && sc == H5S_SCALAR) {
    long long v = 0;
    if (H5Aread(a, H5T_NATIVE_LLONG, &v) < 0) return std::nullopt;
    return v;
  }
  if (cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_ENUM) {
    std::vector<double> v(static_cast<std::size_t>(n));
    if (H5Aread(a, H5T_NATIVE_DOUBLE, v.data()) < 0) return std::nullopt;
    if (sc == H5S_SCALAR) return v[0];
    return v;
  }
  return std::nullopt;
}

Attrs read_attrs(hid_t loc) {
  Attrs out;
  hsize_t idx = 0;
  H5Aiterate2(
      loc, H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t l, const char* name, const H5A_info_t*, void* data) -> herr_t {
        auto* out = static_cast<Attrs*>(data);
        auto v = read_attr(l, name);
        H5Eclear2(H5E_DEFAULT);
        out->push_back({name, v ? *v : AttrValue(std::string("(unsupported attribute type)"))});
        return out->size() >= 1000 ? 1 : 0;
      },
      &out);
  H5Eclear2(H5E_DEFAULT);
  return out;
}

class Hdf5Dataset final : public hdf5_detail::DatasetReader {
 public:
  Hdf5Dataset(const TensorRef& ref, bool attrs) : what_(ref.path) {
    f_ = open_file(ref.path);
    std::string name = normalize_name(ref.dataset);
    if (name.empty()) {
      // A bare file reference: fine when the file holds exactly one dataset.
      auto names = datasets_in(f_);
      if (names.size() != 1) {
        throw InputError(
            fmt::format("{}: name a dataset as {}:/NAME {}", ref.path, ref.path, listing(names)));
      }
      name = names[0];
    }
    name_ = name;
    what_ = fmt::format("{}: dataset '{}'", ref.path, name);
    check_path(f_, ref.path, name);

    Hid dapl = check_id<InputError>(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose, what_);
    check<InputError>(H5Pset_elink_cb(dapl, deny_external_link, nullptr), what_);
    // Pieces of a read need not align with chunks: a cache holding a few rows of
    // chunks keeps a chunk cut by a piece boundary from being decompressed twice.
    check<InputError>(H5Pset_chunk_cache(dapl, 12421, std::size_t{64} << 20, 1.0), what_);
    dset_ = check_id<InputError>(H5Dopen2(f_.file, name.c_str(), dapl), H5Dclose,
                                 what_ + ": cannot open");

    Hid dcpl = check_id<InputError>(H5Dget_create_plist(dset_), H5Pclose, what_);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    std::string storage;
    if (layout == H5D_VIRTUAL) {
      // What `posenc join --virtual` writes: say what reads it instead.
      throw InputError(what_ +
                       " is a virtual dataset (refused: it reads other files; h5py reads it, "
                       "and 'posenc join' without --virtual writes a copy posenc reads)");
    }
    int next = check<InputError>(H5Pget_external_count(dcpl), what_);
    if (next > 0) {
      throw InputError(what_ + " keeps its data in external files (refused)");
    }

    read_type();
    read_space();

    if (layout == H5D_CONTIGUOUS) {
      storage = "HDF5 contiguous";
    } else if (layout == H5D_COMPACT) {
      storage = "HDF5 compact";
    } else if (layout == H5D_CHUNKED) {
      int rank = static_cast<int>(info_.shape.size());
      std::vector<hsize_t> chunk(std::max(rank, 1));
      check<InputError>(H5Pget_chunk(dcpl, rank, chunk.data()), what_);
      chunk.resize(rank);
      // HDF5 refuses to create a chunk larger than a fixed-size dimension; a file that has
      // one is malformed, and libhdf5 reads such chunks past their end (garbage values).
      for (int k = 0; k < rank; ++k) {
        if (maxdims_[k] != H5S_UNLIMITED && chunk[k] > maxdims_[k]) {
          throw InputError(fmt::format("{}: malformed chunk shape {} for the fixed shape {}",
                                       what_, shape_str(Shape(chunk.begin(), chunk.end())),
                                       shape_str(info_.shape)));
        }
      }
      storage = fmt::format("HDF5 chunked {}", shape_str(Shape(chunk.begin(), chunk.end())));
    } else {
      throw InputError(what_ + ": unknown storage layout");
    }
    int nf = check<InputError>(H5Pget_nfilters(dcpl), what_);
    for (int i = 0; i < nf; ++i) {
      unsigned flags = 0;
      unsigned cd[8] = {};
      std::size_t ncd = 8;
      char fname[64] = {};
      unsigned config = 0;
      H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &ncd, cd,
                                       sizeof fname, fname, &config);
      check<InputError>(id, what_);
      std::string desc = filter_desc(id, cd, std::min<std::size_t>(ncd, 8), fname);
      htri_t avail = H5Zfilter_avail(id);
      H5Eclear2(H5E_DEFAULT);
      if (avail <= 0) {
        throw InputError(
            fmt::format("{} is compressed with {}, which is not available (posenc loads no HDF5 "
                        "filter plugins)",
                        what_, desc));
      }
      storage += ", " + desc;
    }
    if (dtype_size(info_.dtype) > 1 || info_.dtype == DType::b1 || is_fp8(info_.dtype) ||
        stored_.rfind("opaque", 0) == 0) {
      storage += ", " + stored_;
    }
    info_.storage = storage;
    if (layout == H5D_CONTIGUOUS && nf == 0 && info_.dtype != DType::b1) {
      Hid t(H5Dget_type(dset_), H5Tclose);
      const std::size_t bytes =
          checked_numel(info_.shape, dtype_size(info_.dtype), what_) * dtype_size(info_.dtype);
      const haddr_t at = H5Dget_offset(dset_);
      // Floats passed read_type's check of the exact IEEE layout of info_.dtype, so a
      // little-endian one of that size is those bytes (h5py's f16 type and posenc's
      // differ in properties H5Tequal compares but the values do not depend on).
      const bool same = t.get() >= 0 && (H5Tequal(t.get(), mem_type_.get()) > 0 ||
                                         (H5Tget_class(t.get()) == H5T_FLOAT &&
                                          H5Tget_order(t.get()) == H5T_ORDER_LE &&
                                          H5Tget_size(t.get()) == dtype_size(info_.dtype)));
      // A dataset stored past the file's end-of-allocation address (a crafted or
      // truncated superblock) reads as zeros whole but as the file's bytes by slabs:
      // refused, so that no two reads of it disagree.
      haddr_t eoa = 0;
      if (at != HADDR_UNDEF && H5Fget_eoa(f_.file, &eoa) >= 0 && (at > eoa || bytes > eoa - at)) {
        throw InputError(fmt::format(
            "{}: the data lie past the end of the file its superblock declares (crafted or "
            "truncated file)",
            what_));
      }
      if (same && at != HADDR_UNDEF && H5Dget_storage_size(dset_) == bytes &&
          file_identity(f_.file, raw_.dev, raw_.ino)) {
        raw_.offset = at;
      }
      H5Eclear2(H5E_DEFAULT);
    }
    if (attrs) {
      info_.attrs = read_attrs(dset_);
      // The fp8 format is the dtype, not a parameter to carry to other outputs.
      if (is_fp8(info_.dtype)) {
        info_.attrs.erase(std::remove_if(info_.attrs.begin(), info_.attrs.end(),
                                         [](const Attr& a) { return a.name == kFp8Attr; }),
                          info_.attrs.end());
      }
    }
  }

  const TensorInfo& info() const override { return info_; }
  RawBytes raw_bytes() const override { return raw_; }

  // The flat range as a union of at most 2 * rank hyperslabs, read into a 1-D memory
  // space: HDF5 delivers selected elements in C order of the file dataspace.
  void read_flat(std::size_t first, std::size_t count, void* dst) override {
    if (count == 0) return;
    const std::string what = fmt::format("{}: cannot read", what_);
    if (info_.shape.empty()) {
      check<InputError>(H5Dread(dset_, mem_type_, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst), what);
      return;
    }
    Hid fspace = check_id<InputError>(H5Dget_space(dset_), H5Sclose, what);
    check<InputError>(H5Sselect_none(fspace), what);
    std::vector<hsize_t> start(info_.shape.size(), 0);
    select_flat(fspace, start, 0, first, first + count, what);
    const hsize_t n = count;
    Hid mspace = check_id<InputError>(H5Screate_simple(1, &n, nullptr), H5Sclose, what);
    check<InputError>(H5Dread(dset_, mem_type_, mspace, fspace, H5P_DEFAULT, dst), what);
  }

 private:
  // Adds elements [a, b) (flat, C order) of the block of axes axis.. whose earlier
  // coordinates are start[0..axis): a partial leading row, the whole rows, a partial
  // trailing row.
  void select_flat(hid_t space, std::vector<hsize_t>& start, std::size_t axis, std::size_t a,
                   std::size_t b, const std::string& what) {
    const Shape& s = info_.shape;
    auto add = [&](std::size_t row0, std::size_t rows) {
      std::vector<hsize_t> st(start.begin(), start.end()), cnt(s.size(), 1);
      st[axis] = row0;
      cnt[axis] = rows;
      for (std::size_t k = axis + 1; k < s.size(); ++k) st[k] = 0, cnt[k] = s[k];
      check<InputError>(
          H5Sselect_hyperslab(space, H5S_SELECT_OR, st.data(), nullptr, cnt.data(), nullptr),
          what);
    };
    if (axis + 1 == s.size()) return add(a, b - a);
    std::size_t inner = 1;
    for (std::size_t k = axis + 1; k < s.size(); ++k) inner *= s[k];
    std::size_t ra = a / inner, rb = b / inner;
    const std::size_t oa = a % inner, ob = b % inner;
    if (ra == rb) {
      start[axis] = ra;
      return select_flat(space, start, axis + 1, oa, ob, what);
    }
    if (oa != 0) {
      start[axis] = ra++;
      select_flat(space, start, axis + 1, oa, inner, what);
    }
    if (rb > ra) add(ra, rb - ra);
    if (ob != 0) {
      start[axis] = rb;
      select_flat(space, start, axis + 1, 0, ob, what);
    }
  }

  void read_type() {
    Hid t = check_id<InputError>(H5Dget_type(dset_), H5Tclose, what_);
    H5T_class_t cls = H5Tget_class(t);
    std::size_t size = H5Tget_size(t);
    H5T_order_t order = H5Tget_order(t);
    std::string endian = order == H5T_ORDER_BE ? "big-endian" : "little-endian";
    if (cls == H5T_FLOAT || cls == H5T_INTEGER || cls == H5T_ENUM) {
      // The significant bits must lie inside the element: libhdf5 converts a type whose
      // precision runs past its size by reading beyond each element (garbage values).
      const std::size_t precision = H5Tget_precision(t);
      const int offset = H5Tget_offset(t);
      if (size == 0 || precision == 0 || offset < 0 ||
          static_cast<std::size_t>(offset) + precision > 8 * size) {
        H5Eclear2(H5E_DEFAULT);
        throw InputError(fmt::format(
            "{}: malformed {}-byte {} type (precision {} bits at bit offset {})", what_, size,
            class_name(cls), precision, offset));
      }
    }
    if (cls == H5T_FLOAT) {
      // Only the IEEE layouts themselves: libhdf5 converts other layouts (fields that
      // overlap, another bias or normalisation) in software, and its conversion of such
      // types gives different values for a partial read than for a whole one.
      std::size_t spos, epos, esize, mpos, msize;
      check<InputError>(H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize), what_);
      const std::size_t ebias = H5Tget_ebias(t);
      const bool plain = H5Tget_norm(t) == H5T_NORM_IMPLIED && H5Tget_offset(t) == 0 &&
                         H5Tget_precision(t) == 8 * size && mpos == 0 && spos == 8 * size - 1 &&
                         epos == mpos + msize && epos + esize == spos;
      H5Eclear2(H5E_DEFAULT);
      if (plain && size == 2 && esize == 5 && msize == 10 && ebias == 15) {
        info_.dtype = DType::f16;
      } else if (plain && size == 2 && esize == 8 && msize == 7 && ebias == 127) {
        info_.dtype = DType::bf16;
      } else if (plain && size == 4 && esize == 8 && msize == 23 && ebias == 127) {
        info_.dtype = DType::f32;
      } else if (plain && size == 8 && esize == 11 && msize == 52 && ebias == 1023) {
        info_.dtype = DType::f64;
      } else {
        throw InputError(
            fmt::format("{}: unsupported {}-byte float type (expected the IEEE layout of "
                        "float16, bfloat16, float32 or float64)",
                        what_, size));
      }
      stored_ = fmt::format("{} {}", endian, dtype_name(info_.dtype));
    } else if (cls == H5T_INTEGER) {
      bool is_signed = H5Tget_sign(t) == H5T_SGN_2;
      switch (size) {
        case 1:
          info_.dtype = is_signed ? DType::i8 : DType::u8;
          break;
        case 2:
          info_.dtype = is_signed ? DType::i16 : DType::u16;
          break;
        case 4:
          info_.dtype = is_signed ? DType::i32 : DType::u32;
          break;
        case 8:
          info_.dtype = is_signed ? DType::i64 : DType::u64;
          break;
        default:
          throw InputError(fmt::format("{}: unsupported {}-byte integer type", what_, size));
      }
      stored_ = fmt::format("{} {}", endian, dtype_name(info_.dtype));
    } else if (cls == H5T_ENUM && is_bool_enum(t)) {
      info_.dtype = DType::b1;
      stored_ = "bool (enum FALSE/TRUE)";
    } else if (cls == H5T_OPAQUE && size == 1) {
      // posenc's fp8 (the attribute kFp8Attr names the format); any other 1-byte opaque
      // type (h5py's '|V1', as it stores ml_dtypes' float8 arrays) reads as its bytes, u8,
      // which an input dtype (--input-dtype) reinterprets.
      char* tag = H5Tget_tag(t);
      const std::string name = tag != nullptr ? tag : "";
      if (tag != nullptr) H5free_memory(tag);
      H5Eclear2(H5E_DEFAULT);
      const auto fmt_attr = read_attr(dset_, kFp8Attr);
      H5Eclear2(H5E_DEFAULT);
      const std::string* f = fmt_attr ? std::get_if<std::string>(&*fmt_attr) : nullptr;
      info_.dtype = f == nullptr                 ? DType::u8
                    : *f == "float8_e4m3fn"      ? DType::f8e4m3fn
                    : *f == "float8_e5m2"        ? DType::f8e5m2
                                                 : DType::u8;
      stored_ = fmt::format("opaque 1-byte, tag '{}'", printable(name));
      mem_type_ = check_id<InputError>(H5Tcopy(t), H5Tclose, what_);
      return;
    } else {
      throw InputError(
          fmt::format("{}: unsupported type class {} (posenc reads numbers: float, integer, bool)",
                      what_, cls == H5T_ENUM ? "enum (other than h5py's bool)" : class_name(cls)));
    }
    mem_type_ = info_.dtype == DType::b1 ? make_bool_type() : type_for(info_.dtype);
    // Native order: the file type may be big-endian; HDF5 converts while reading.
    if (is_integer(info_.dtype) || info_.dtype == DType::f32 || info_.dtype == DType::f64) {
      Hid native(H5Tget_native_type(t, H5T_DIR_ASCEND), H5Tclose);
      if (native.get() >= 0) mem_type_ = std::move(native);
      H5Eclear2(H5E_DEFAULT);
    }
  }

  // h5py stores numpy bool as an enum over a 1-byte integer with FALSE=0, TRUE=1.
  static bool is_bool_enum(hid_t t) {
    if (H5Tget_size(t) != 1 || H5Tget_nmembers(t) != 2) return false;
    for (unsigned i = 0; i < 2; ++i) {
      char* name = H5Tget_member_name(t, i);
      if (name == nullptr) return false;
      std::string n = name;
      H5free_memory(name);
      std::int8_t v = -1;
      if (H5Tget_member_value(t, i, &v) < 0) return false;
      if (!((n == "FALSE" && v == 0) || (n == "TRUE" && v == 1))) return false;
    }
    return true;
  }

  void read_space() {
    Hid s = check_id<InputError>(H5Dget_space(dset_), H5Sclose, what_);
    H5S_class_t sc = H5Sget_simple_extent_type(s);
    if (sc == H5S_NULL) throw InputError(what_ + " is empty (null dataspace)");
    if (sc == H5S_SCALAR) {
      info_.shape = {};
    } else if (sc == H5S_SIMPLE) {
      int rank = check<InputError>(H5Sget_simple_extent_ndims(s), what_);
      if (rank > kMaxRank) {
        throw InputError(
            fmt::format("{} has {} dimensions (at most {} supported)", what_, rank, kMaxRank));
      }
      std::vector<hsize_t> dims(rank);
      maxdims_.assign(rank, 0);
      check<InputError>(H5Sget_simple_extent_dims(s, dims.data(), maxdims_.data()), what_);
      info_.shape.assign(dims.begin(), dims.end());
    } else {
      throw InputError(what_ + ": unknown dataspace");
    }
    checked_numel(info_.shape, dtype_size(info_.dtype), what_);
  }

  std::string what_;
  std::string name_;
  std::string stored_;
  OpenFile f_;
  Hid dset_;
  Hid mem_type_;
  TensorInfo info_;
  std::vector<hsize_t> maxdims_;  // per axis; H5S_UNLIMITED for extendible ones
  RawBytes raw_;
};

// --- writing -------------------------------------------------------------------

// The chunk shape used with compression: whole rows of the trailing axes, halving
// axes in turn (as h5py's guess does) until a chunk is at most ~1 MiB.
std::vector<hsize_t> chunk_shape(const Shape& shape, std::size_t itemsize) {
  std::vector<hsize_t> c(shape.begin(), shape.end());
  constexpr std::size_t kTarget = 1 << 20;
  std::size_t axis = 0;
  for (;;) {
    std::size_t bytes = itemsize;
    for (auto d : c) bytes *= d;
    if (bytes <= kTarget) break;
    bool shrunk = false;
    for (std::size_t k = 0; k < c.size() && !shrunk; ++k) {
      std::size_t a = (axis + k) % c.size();
      if (c[a] > 1) {
        c[a] = (c[a] + 1) / 2;
        shrunk = true;
        axis = a + 1;
      }
    }
    if (!shrunk) break;
  }
  return c;
}

// The attributes a dataset of `info` gets: its recorded parameters, and for fp8 the
// attribute naming the format (in place of any parameter of that name).
Attrs dataset_attrs(const TensorInfo& info) {
  if (!is_fp8(info.dtype)) return info.attrs;
  Attrs out;
  for (const Attr& a : info.attrs) {
    if (a.name != kFp8Attr) out.push_back(a);
  }
  out.push_back({kFp8Attr, std::string(dtype_name(info.dtype))});
  return out;
}

void write_attrs(hid_t loc, const Attrs& attrs, const std::string& what) {
  Hid acpl = check_id<OutputError>(H5Pcreate(H5P_ATTRIBUTE_CREATE), H5Pclose, what);
  check<OutputError>(H5Pset_char_encoding(acpl, H5T_CSET_UTF8), what);
  for (const auto& a : attrs) {
    std::string w = fmt::format("{}: attribute '{}'", what, a.name);
    htri_t exists = H5Aexists(loc, a.name.c_str());
    if (exists > 0) check<OutputError>(H5Adelete(loc, a.name.c_str()), w);  // last one wins
    H5Eclear2(H5E_DEFAULT);
    if (const auto* s = std::get_if<std::string>(&a.value)) {
      // h5py writes str attributes as scalar variable-length UTF-8 and reads them as str.
      Hid t = check_id<OutputError>(H5Tcopy(H5T_C_S1), H5Tclose, w);
      check<OutputError>(H5Tset_size(t, H5T_VARIABLE), w);
      check<OutputError>(H5Tset_cset(t, H5T_CSET_UTF8), w);
      Hid sp = check_id<OutputError>(H5Screate(H5S_SCALAR), H5Sclose, w);
      Hid at = check_id<OutputError>(H5Acreate2(loc, a.name.c_str(), t, sp, acpl, H5P_DEFAULT),
                                     H5Aclose, w);
      const char* p = s->c_str();
      check<OutputError>(H5Awrite(at, t, &p), w);
    } else if (const auto* d = std::get_if<double>(&a.value)) {
      Hid sp = check_id<OutputError>(H5Screate(H5S_SCALAR), H5Sclose, w);
      Hid at = check_id<OutputError>(
          H5Acreate2(loc, a.name.c_str(), H5T_IEEE_F64LE, sp, acpl, H5P_DEFAULT), H5Aclose, w);
      check<OutputError>(H5Awrite(at, H5T_NATIVE_DOUBLE, d), w);
    } else if (const auto* i = std::get_if<long long>(&a.value)) {
      Hid sp = check_id<OutputError>(H5Screate(H5S_SCALAR), H5Sclose, w);
      Hid at = check_id<OutputError>(
          H5Acreate2(loc, a.name.c_str(), H5T_STD_I64LE, sp, acpl, H5P_DEFAULT), H5Aclose, w);
      check<OutputError>(H5Awrite(at, H5T_NATIVE_LLONG, i), w);
    } else if (const auto* v = std::get_if<std::vector<double>>(&a.value)) {
      hsize_t n = v->size();
      Hid sp = check_id<OutputError>(H5Screate_simple(1, &n, nullptr), H5Sclose, w);
      Hid at = check_id<OutputError>(
          H5Acreate2(loc, a.name.c_str(), H5T_IEEE_F64LE, sp, acpl, H5P_DEFAULT), H5Aclose, w);
      if (n > 0) check<OutputError>(H5Awrite(at, H5T_NATIVE_DOUBLE, v->data()), w);
    }
  }
}

// Progress is counted in entries along slab_axis(shape) (rows when that is axis 0).
struct DatasetState {
  std::string name;
  std::size_t axis = 0;
  std::size_t rows = 0;
  std::size_t written = 0;
  bool committed = false;
};

std::string rows_text(const DatasetState& st, std::size_t n) {
  return st.axis == 0 ? fmt::format("{} rows", n)
                      : fmt::format("{} entries along axis {}", n, st.axis);
}

}  // namespace

struct Hdf5FileWriter::Impl {
  std::string path;
  std::unique_ptr<TempFile> tmp;
  WriteOptions opt;
  Hid file;
  bool committed = false;
  // The target is an existing HDF5 file: `file` is a scratch file whose datasets are
  // added to a copy of it on commit (hdf5_append.hpp).
  bool append = false;
  // No file was at the target: the new file must not replace one made meanwhile.
  bool fresh = false;
  std::unique_ptr<hdf5_append::Merge> merge;
  bool prepared = false;
  Attrs root_attrs;
  // Shared with the sinks so a sink can report on a writer that is gone.
  std::vector<std::shared_ptr<DatasetState>> datasets;

  std::string what() const { return path; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& d : datasets) out.push_back(d->name);
    return out;
  }
  // Adds the scratch file's datasets to a locked copy of the file at the target
  // (hdf5_append::Merge); false when no file is there any more.
  bool start_merge() {
    merge = std::make_unique<hdf5_append::Merge>(tmp->target(), path, tmp->path(), names(),
                                                 root_attrs, opt.force);
    if (merge->ready()) return true;
    merge.reset();
    return false;
  }
};

namespace {

class Hdf5Sink final : public TensorSink {
 public:
  Hdf5Sink(Hid dset, Hid mem_type, TensorInfo info, std::shared_ptr<DatasetState> st,
           std::string what)
      : dset_(std::move(dset)),
        mem_type_(std::move(mem_type)),
        info_(std::move(info)),
        st_(std::move(st)),
        what_(std::move(what)) {}

  void write_rows(const void* src, std::size_t count) override { write_slab(0, src, count); }

  // Entries along `axis` are entries along the slab axis (or all of them, for an
  // earlier unit axis); the hyperslab has zero offsets on the leading unit axes.
  void write_slab(std::size_t axis, const void* src, std::size_t count) override {
    const auto calls = init_hdf5();
    if (st_->committed) throw OutputError(what_ + ": written after commit");
    count = io_detail::slab_units(info_.shape, axis, count);
    if (count > st_->rows - st_->written) {
      throw OutputError(fmt::format("{}: {} written, the dataset has {}", what_,
                                    rows_text(*st_, st_->written + count), st_->rows));
    }
    if (count == 0) return;
    std::string w = what_ + ": cannot write";
    if (info_.shape.empty()) {
      check<OutputError>(H5Dwrite(dset_, mem_type_, H5S_ALL, H5S_ALL, H5P_DEFAULT, src), w);
      st_->written += count;
      return;
    }
    bool empty = false;
    for (auto d : info_.shape) empty = empty || d == 0;
    if (!empty) {
      int rank = static_cast<int>(info_.shape.size());
      std::vector<hsize_t> start(rank, 0), cnt(info_.shape.begin(), info_.shape.end());
      start[st_->axis] = st_->written;
      cnt[st_->axis] = count;
      Hid fspace = check_id<OutputError>(H5Dget_space(dset_), H5Sclose, w);
      check<OutputError>(
          H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr),
          w);
      Hid mspace = check_id<OutputError>(H5Screate_simple(rank, cnt.data(), nullptr), H5Sclose, w);
      check<OutputError>(H5Dwrite(dset_, mem_type_, mspace, fspace, H5P_DEFAULT, src), w);
    }
    st_->written += count;
  }

  void commit() override {
    const auto calls = init_hdf5();
    if (st_->written != st_->rows) {
      throw OutputError(fmt::format("{}: only {} of {} were written", what_, st_->written,
                                    rows_text(*st_, st_->rows)));
    }
    check<OutputError>(dset_.reset(), what_ + ": cannot close");
    st_->committed = true;
  }

 private:
  Hid dset_;
  Hid mem_type_;
  TensorInfo info_;
  std::shared_ptr<DatasetState> st_;
  std::string what_;
};

}  // namespace

Hdf5FileWriter::Hdf5FileWriter(const std::string& path, const WriteOptions& opt)
    : impl_(std::make_unique<Impl>()) {
  if (const std::string why = hdf5_detail::hdf5_unavailable(); !why.empty()) {
    throw OutputError(fmt::format("{}: cannot write HDF5 files: {}", path, why));
  }
  const auto calls = init_hdf5();
  impl_->path = path;
  impl_->opt = opt;
  // The temporary is registered for removal on SIGINT/SIGTERM; its descriptor stays
  // open (unused by HDF5) so commit() can fsync the same inode before renaming.
  impl_->tmp = std::make_unique<TempFile>(path, opt.no_clobber, opt.sync, /*regular_only=*/true,
                                          /*named=*/true);
  struct stat st {};
  impl_->fresh = ::stat(impl_->tmp->target().c_str(), &st) != 0;
  impl_->append =
      !opt.no_clobber && hdf5_append::adds_to_existing(impl_->tmp->target(), path, opt.force);
  std::string w = fmt::format("{}: cannot create HDF5 file", path);
  Hid fcpl = plist(H5P_FILE_CREATE, w);
  // The root group's header would otherwise carry timestamps.
  check<OutputError>(H5Pset_obj_track_times(fcpl, 0), w);
  Hid fapl = plist(H5P_FILE_ACCESS, w);
  check<OutputError>(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), w);
  check<OutputError>(H5Pset_file_locking(fapl, 0, 1), w);  // the TempFile holds the lock
  impl_->file = check_id<OutputError>(
      H5Fcreate(impl_->tmp->path().c_str(), H5F_ACC_TRUNC, fcpl, fapl), H5Fclose, w);
}

Hdf5FileWriter::~Hdf5FileWriter() {
  const auto calls = init_hdf5();
  if (impl_ && !impl_->committed) {
    impl_->file.reset();  // the TempFile then removes the temporary
    H5Eclear2(H5E_DEFAULT);
  }
}

std::unique_ptr<TensorSink> Hdf5FileWriter::dataset(const std::string& dataset_name,
                                                    const TensorInfo& info) {
  const auto calls = init_hdf5();
  auto& im = *impl_;
  if (im.committed || im.file.get() < 0) throw OutputError(im.path + ": file already committed");
  std::string name = normalize_name(dataset_name);
  if (name.empty()) throw UsageError(fmt::format("{}: empty HDF5 dataset name", im.path));
  std::string w = fmt::format("{}: cannot create dataset '{}'", im.path, name);
  if (info.shape.size() > static_cast<std::size_t>(kMaxRank)) {
    throw OutputError(fmt::format("{}: rank {} (at most {})", w, info.shape.size(), kMaxRank));
  }
  checked_numel(info.shape, dtype_size(info.dtype), w);
  // Refused now, before anything is computed, rather than when the file is committed.
  if (im.append) hdf5_append::check_name(im.tmp->target(), im.path, name, im.opt.force);

  // Groups on the way, created here (not with H5Pset_create_intermediate_group) so
  // they too get track_times off.
  Hid gcpl = plist(H5P_GROUP_CREATE, w);
  check<OutputError>(H5Pset_obj_track_times(gcpl, 0), w);
  std::size_t pos = 0;
  for (;;) {
    pos = name.find('/', pos + 1);
    std::string prefix = name.substr(0, pos);
    bool last = pos == std::string::npos;
    htri_t exists = H5Lexists(im.file, prefix.c_str(), H5P_DEFAULT);
    H5Eclear2(H5E_DEFAULT);
    if (last) {
      if (exists > 0) {
        throw OutputError(fmt::format("{}: '{}' is written twice", im.path, name));
      }
      break;
    }
    if (exists > 0) {
      H5O_info_t oi;
      check<OutputError>(
          H5Oget_info_by_name2(im.file, prefix.c_str(), &oi, H5O_INFO_BASIC, H5P_DEFAULT), w);
      if (oi.type != H5O_TYPE_GROUP) {
        throw OutputError(fmt::format("{}: '{}' is a dataset, not a group", w, prefix));
      }
    } else {
      Hid g = check_id<OutputError>(
          H5Gcreate2(im.file, prefix.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose, w);
    }
  }

  Hid ftype = type_for(info.dtype);
  Hid mtype = type_for(info.dtype);
  int rank = static_cast<int>(info.shape.size());
  std::vector<hsize_t> dims(info.shape.begin(), info.shape.end());
  Hid space =
      rank == 0 ? check_id<OutputError>(H5Screate(H5S_SCALAR), H5Sclose, w)
                : check_id<OutputError>(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose, w);
  Hid dcpl = plist(H5P_DATASET_CREATE, w);
  check<OutputError>(H5Pset_obj_track_times(dcpl, 0), w);
  std::size_t numel = 1;
  for (auto d : info.shape) numel *= d;
  if (im.opt.compression > 0 && rank > 0 && numel > 0) {
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0) {
      throw OutputError(w + ": gzip (deflate) is not available in this HDF5 library");
    }
    auto chunk = chunk_shape(info.shape, dtype_size(info.dtype));
    check<OutputError>(H5Pset_chunk(dcpl, rank, chunk.data()), w);
    check<OutputError>(H5Pset_shuffle(dcpl), w);
    check<OutputError>(H5Pset_deflate(dcpl, static_cast<unsigned>(im.opt.compression)), w);
  }
  // Streamed slabs need not align with chunks: a cache that holds a few rows of
  // chunks avoids recompressing a chunk each time a slab boundary cuts through it.
  Hid dapl = plist(H5P_DATASET_ACCESS, w);
  check<OutputError>(H5Pset_chunk_cache(dapl, 12421, std::size_t{64} << 20, 1.0), w);
  Hid dset = check_id<OutputError>(
      H5Dcreate2(im.file, name.c_str(), ftype, space, H5P_DEFAULT, dcpl, dapl), H5Dclose, w);
  write_attrs(dset, dataset_attrs(info), fmt::format("{}: dataset '{}'", im.path, name));
  if (!im.append && im.opt.compression == 0) {
    // The data go at or behind the end of what the file holds now (its metadata and
    // earlier datasets), so the file ends past this and no block reserved is left over.
    struct stat fst {};
    if (::fstat(im.tmp->fd(), &fst) == 0) {
      reserve_blocks(im.tmp->fd(), static_cast<std::uint64_t>(fst.st_size) +
                                       std::uint64_t{numel} * dtype_size(info.dtype));
    }
  }

  auto st = std::make_shared<DatasetState>();
  st->name = name;
  st->axis = slab_axis(info.shape);
  st->rows = io_detail::slab_extent(info.shape, st->axis);
  im.datasets.push_back(st);
  return std::make_unique<Hdf5Sink>(std::move(dset), std::move(mtype), info, st,
                                    fmt::format("{}: dataset '{}'", im.path, name));
}

namespace {

// A source file or dataset name for H5Pset_virtual, which expands '%' patterns.
std::string vds_literal(const std::string& name) {
  std::string out;
  for (char c : name) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

}  // namespace

void Hdf5FileWriter::virtual_dataset(const std::string& dataset_name, const TensorInfo& info,
                                     const std::vector<VirtualSource>& sources) {
  const auto calls = init_hdf5();
  auto& im = *impl_;
  if (im.committed || im.file.get() < 0) throw OutputError(im.path + ": file already committed");
  const std::string name = normalize_name(dataset_name);
  if (name.empty()) throw UsageError(fmt::format("{}: empty HDF5 dataset name", im.path));
  const std::string w = fmt::format("{}: cannot create virtual dataset '{}'", im.path, name);
  const int rank = static_cast<int>(info.shape.size());
  if (rank == 0 || rank > kMaxRank) throw OutputError(fmt::format("{}: rank {}", w, rank));
  // Refused now, as for dataset(); on commit the virtual dataset is added like the others.
  if (im.append) hdf5_append::check_name(im.tmp->target(), im.path, name, im.opt.force);
  Hid ftype = type_for(info.dtype);
  std::vector<hsize_t> dims(info.shape.begin(), info.shape.end());
  Hid vspace = check_id<OutputError>(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose, w);
  Hid dcpl = plist(H5P_DATASET_CREATE, w);
  check<OutputError>(H5Pset_obj_track_times(dcpl, 0), w);
  for (const auto& src : sources) {
    std::vector<hsize_t> start(src.offset.begin(), src.offset.end());
    std::vector<hsize_t> count(src.shape.begin(), src.shape.end());
    bool empty = false;
    for (auto c : count) empty = empty || c == 0;
    if (empty) continue;  // an empty part maps nothing
    Hid sspace = check_id<OutputError>(H5Screate_simple(rank, count.data(), nullptr), H5Sclose, w);
    check<OutputError>(H5Sselect_hyperslab(vspace, H5S_SELECT_SET, start.data(), nullptr,
                                           count.data(), nullptr),
                       w);
    // libhdf5 reads both names as printf-like patterns ("%b" is a block number): a
    // literal '%' is written "%%".
    check<OutputError>(H5Pset_virtual(dcpl, vspace, vds_literal(src.file).c_str(),
                                      vds_literal(src.dataset).c_str(), sspace),
                       w);
  }
  check<OutputError>(H5Sselect_all(vspace), w);
  Hid lcpl = plist(H5P_LINK_CREATE, w);
  check<OutputError>(H5Pset_create_intermediate_group(lcpl, 1), w);
  Hid dset = check_id<OutputError>(
      H5Dcreate2(im.file, name.c_str(), ftype, vspace, lcpl, dcpl, H5P_DEFAULT), H5Dclose, w);
  write_attrs(dset, dataset_attrs(info), fmt::format("{}: dataset '{}'", im.path, name));
  // Complete as created: listed so that commit() adds it to an existing target.
  auto st = std::make_shared<DatasetState>();
  st->name = name;
  st->committed = true;
  im.datasets.push_back(st);
}

void Hdf5FileWriter::root_attrs(const Attrs& attrs) {
  const auto calls = init_hdf5();
  auto& im = *impl_;
  if (im.committed || im.file.get() < 0) throw OutputError(im.path + ": file already committed");
  std::string w = fmt::format("{}: root group", im.path);
  Hid root = check_id<OutputError>(H5Gopen2(im.file, "/", H5P_DEFAULT), H5Gclose, w);
  write_attrs(root, attrs, w);
  im.root_attrs.insert(im.root_attrs.end(), attrs.begin(), attrs.end());
}

void Hdf5FileWriter::prepare() {
  const auto calls = init_hdf5();
  auto& im = *impl_;
  if (im.prepared || im.committed) return;
  for (const auto& d : im.datasets) {
    if (!d->committed) {
      throw OutputError(fmt::format("{}: dataset '{}' is incomplete ({} of {})", im.path, d->name,
                                    d->written, rows_text(*d, d->rows)));
    }
  }
  check<OutputError>(im.file.reset(), fmt::format("{}: cannot write", im.path));
  // For an addition the scratch file is read back and discarded (no fsync needed); if
  // the target was removed meanwhile, the scratch file becomes the file.
  if (im.append && !im.start_merge()) {
    im.append = false;
    im.fresh = true;
  }
  if (!im.append) im.tmp->sync_and_close();
  im.prepared = true;
}

void Hdf5FileWriter::publish() {
  auto& im = *impl_;
  if (im.committed) return;
  if (!im.prepared) throw std::logic_error("Hdf5FileWriter::publish before prepare");
  if (im.merge) {
    im.merge->publish();
  } else if (!im.tmp->publish(/*replace=*/!im.fresh)) {
    // Another writer made the file since this run started: add to it instead.
    if (!hdf5_append::adds_to_existing(im.tmp->target(), im.path, false)) {
      throw OutputError(fmt::format(
          "{}: a file that is not HDF5 appeared there while posenc ran; left as it is", im.path));
    }
    if (im.start_merge()) {
      im.merge->publish();
    } else if (!im.tmp->publish(false)) {
      throw OutputError(fmt::format("{}: other writers kept replacing it; left as it is", im.path));
    }
  }
  im.committed = true;
}

void Hdf5FileWriter::commit() {
  prepare();
  publish();
}

namespace {

// Where `name` would go in an existing file: every proper prefix must be missing (to be
// created) or a group reached by a hard link; the name itself must be missing, or a
// dataset (replaced only with `force`). Returns whether that dataset exists. Errors are
// OutputErrors naming `display` (the file as the user wrote it) and the dataset.
bool check_output_name(hid_t file, hid_t lapl, const std::string& display, const std::string& name,
                       bool force) {
  std::size_t pos = 0;
  for (;;) {
    pos = name.find('/', pos + 1);
    const bool last = pos == std::string::npos;
    const std::string prefix = name.substr(0, pos);
    const std::string look = fmt::format("{}: cannot look up '{}'", display, prefix);
    const htri_t exists = H5Lexists(file, prefix.c_str(), lapl);
    if (exists < 0) throw OutputError(fmt::format("{}: {}", look, h5_reason()));
    if (exists == 0) return false;  // this group and what follows are created
    H5L_info_t li;
    check<OutputError>(H5Lget_info(file, prefix.c_str(), &li, lapl), look);
    if (li.type != H5L_TYPE_HARD) {
      const char* kind = li.type == H5L_TYPE_SOFT       ? "soft"
                         : li.type == H5L_TYPE_EXTERNAL ? "external"
                                                        : "user-defined";
      throw OutputError(fmt::format(
          "{}: '{}' is a {} link (posenc adds datasets only under groups and replaces only "
          "datasets)",
          display, prefix, kind));
    }
    H5O_info_t oi;
    check<OutputError>(H5Oget_info_by_name2(file, prefix.c_str(), &oi, H5O_INFO_BASIC, lapl), look);
    if (!last) {
      if (oi.type != H5O_TYPE_GROUP) {
        throw OutputError(
            fmt::format("{}: cannot create dataset '{}': '{}' is a dataset, not a group", display,
                        name, prefix));
      }
      continue;
    }
    if (oi.type == H5O_TYPE_GROUP) {
      throw OutputError(fmt::format(
          "{}: '{}' is a group, not a dataset (it is not replaced; name another dataset)", display,
          name));
    }
    if (oi.type != H5O_TYPE_DATASET) {
      throw OutputError(fmt::format("{}: '{}' exists and is not a dataset", display, name));
    }
    if (!force) {
      throw OutputError(
          fmt::format("{}: dataset '{}' already exists (--force replaces it)", display, name));
    }
    return true;
  }
}

// The groups on the way to `name` that do not exist yet, without timestamps.
void create_groups(hid_t file, const std::string& name, const std::string& what) {
  Hid gcpl = plist(H5P_GROUP_CREATE, what);
  check<OutputError>(H5Pset_obj_track_times(gcpl, 0), what);
  for (std::size_t pos = name.find('/', 1); pos != std::string::npos;
       pos = name.find('/', pos + 1)) {
    const std::string prefix = name.substr(0, pos);
    const htri_t exists = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    H5Eclear2(H5E_DEFAULT);
    if (exists > 0) continue;
    Hid g = check_id<OutputError>(H5Gcreate2(file, prefix.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT),
                                  H5Gclose, what);
  }
}

// Without libhdf5's own flock: the existing file is only read (a writer holding its lock
// replaces it by rename, which an open file does not see), and the copy written is this
// run's own, locked by the parent once the child is done (hdf5_append::Merge).
Hid open_for_append(const std::string& path, unsigned flags, const std::string& display) {
  Hid fapl = plist(H5P_FILE_ACCESS, display);
  check<OutputError>(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), display);
  check<OutputError>(H5Pset_file_locking(fapl, 0, 1), display);
  const hid_t id = H5Fopen(path.c_str(), flags, fapl);
  if (id < 0) {
    throw OutputError(
        fmt::format("{}: cannot open the existing HDF5 file: {}", display, h5_reason()));
  }
  return Hid(id, H5Fclose);
}

Hid no_external_links(const std::string& display) {
  Hid lapl = plist(H5P_LINK_ACCESS, display);
  check<OutputError>(H5Pset_elink_cb(lapl, deny_external_link, nullptr), display);
  return lapl;
}

}  // namespace

namespace hdf5_detail {

std::string hdf5_unavailable() {
  if (posenc_load_hdf5 == nullptr) return {};
  const char* why = posenc_load_hdf5();
  return why == nullptr ? std::string() : std::string(why);
}

std::unique_ptr<DatasetReader> open_dataset(const TensorRef& ref, bool attrs) {
  return std::make_unique<Hdf5Dataset>(ref, attrs);
}

std::vector<std::string> list_datasets(const std::string& path) {
  OpenFile f = open_file(path);
  return datasets_in(f);
}

void check_append_names(const std::string& path, const std::string& display,
                        const std::vector<std::string>& names, bool force) {
  const auto calls = init_hdf5();
  Hid file = open_for_append(path, H5F_ACC_RDONLY, display);
  Hid lapl = no_external_links(display);
  for (const std::string& name : names) {
    check_output_name(file, lapl, display, normalize_name(name), force);
  }
}

void merge_datasets(const std::string& scratch, const std::string& copy, const std::string& display,
                    const std::vector<std::string>& names, const Attrs& root_attrs, bool force) {
  const auto calls = init_hdf5();
  Hid dst = open_for_append(copy, H5F_ACC_RDWR, display);
  Hid src_fapl = plist(H5P_FILE_ACCESS, display);
  check<OutputError>(H5Pset_file_locking(src_fapl, 0, 1), display);  // the parent holds it
  Hid src = check_id<OutputError>(H5Fopen(scratch.c_str(), H5F_ACC_RDONLY, src_fapl), H5Fclose,
                                  display + ": cannot reopen the new datasets");
  Hid lapl = no_external_links(display);
  // Attributes and data are copied; external links inside are not expanded (the
  // scratch file holds none).
  Hid ocpypl = plist(H5P_OBJECT_COPY, display);
  for (const std::string& raw : names) {
    const std::string name = normalize_name(raw);
    const std::string w = fmt::format("{}: cannot add dataset '{}'", display, name);
    if (check_output_name(dst, lapl, display, name, force)) {
      check<OutputError>(H5Ldelete(dst, name.c_str(), lapl), w);
    }
    create_groups(dst, name, w);
    check<OutputError>(H5Ocopy(src, name.c_str(), dst, name.c_str(), ocpypl, H5P_DEFAULT), w);
  }
  if (!root_attrs.empty()) {
    const std::string w = display + ": root group";
    Hid root = check_id<OutputError>(H5Gopen2(dst, "/", H5P_DEFAULT), H5Gclose, w);
    write_attrs(root, root_attrs, w);
  }
  check<OutputError>(src.reset(), display);
  check<OutputError>(dst.reset(), display + ": cannot write");
}

}  // namespace hdf5_detail

}  // namespace posenc
