#pragma once
/// \file
/// Tensor references (`x.npy`, `x.h5:/g/d`, `x.csv`, `x.tsv`, `x.json`, `-`) and the
/// format-independent reading and writing API every command uses.
///
/// Reading: `open_source(ref)` gives a TensorSource that reports the shape and dtype
/// from the header alone and reads row slabs (along axis 0) on demand, so large inputs
/// can be streamed; `read_tensor(ref)` reads everything.
///
/// Writing: `create_sink(ref, info, options)` gives a TensorSink; rows are written in
/// order with `write_rows`, and nothing is visible at the target until `commit()`
/// (temporary file + rename in the target's folder). A sink destroyed without commit
/// removes its temporary file and leaves an existing target untouched.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "posenc/tensor.hpp"

namespace posenc {

/// The file format of a tensor reference (from its extension, or `--to`).
enum class Format {
  npy,   ///< .npy, format 1.0/2.0/3.0
  hdf5,  ///< .h5/.hdf5 with a dataset path
  csv,   ///< .csv, rank 0 to 2
  tsv,   ///< .tsv, rank 0 to 2
  json,  ///< .json: {"shape": [...], "dtype": "...", "data": [...]}
  text   ///< a readable table (output only)
};

/// A parsed tensor reference.
struct TensorRef {
  std::string text;     ///< as the user wrote it, for messages
  std::string path;     ///< file path; "-" for stdin/stdout
  std::string dataset;  ///< HDF5 dataset path ("/g/d"); empty for other formats
  Format format = Format::npy;  ///< from the extension, or `to` of parse_ref
  /// Input only: the stored 1-byte elements (u8, i8, NPY's void '<V1' as np.save writes
  /// ml_dtypes' float8 arrays, an HDF5 1-byte opaque type) read as this fp8 dtype, as
  /// numpy's `.view(ml_dtypes.float8_e4m3fn)` does. open_source throws InputError for
  /// elements of another size or another fp8 type; UsageError for a dtype that is not fp8.
  std::optional<DType> view_as;
  /// Whether the reference is standard input or output ("-").
  bool is_stdio() const { return path == "-"; }
};

/// Parses `text`. `to` overrides the format taken from the extension (the `--to`
/// option: "npy", "h5", "csv", "tsv", "json", "text"). An HDF5 reference without a
/// dataset gets `default_dataset` (e.g. "/data"), or a UsageError when that is empty
/// (listing, when the file exists, its first 20 datasets with shapes and dtypes).
/// Unknown extensions are a UsageError naming the reference.
TensorRef parse_ref(const std::string& text, const std::string& to = "",
                    const std::string& default_dataset = "");

/// For messages about an HDF5 file named without a dataset: "; x.h5 holds /a (3, 4) f32,
/// /b (8,) f64" (at most 20 datasets, then "and N more"), read through the sandboxed
/// listing; empty when `path` is not a readable HDF5 file.
std::string datasets_hint(const std::string& path);

/// One recorded parameter: written as an HDF5 attribute, a JSON field, or listed by
/// `--verbose`.
using AttrValue = std::variant<std::string, double, long long, std::vector<double>>;
/// A named parameter recorded with an output (see AttrValue).
struct Attr {
  std::string name;  ///< e.g. "rope_theta", as HF names the parameter where it has one
  AttrValue value;   ///< text, a real, an integer or a list of reals
};
/// The recorded parameters of an output, in the order they are written.
using Attrs = std::vector<Attr>;

/// What a reader learned from a header, and what `inspect` shows about storage.
struct TensorInfo {
  DType dtype = DType::f32;  ///< element type as stored
  Shape shape;               ///< extents, C order
  std::string storage;  ///< e.g. "NPY 1.0, C order, little-endian" or
                        ///< "HDF5, chunked (64, 128), gzip 4, shuffle"
  Attrs attrs;          ///< HDF5 attributes of the dataset, if any
};

/// The data of a source as bytes of a regular file (C order, native byte order).
struct RawFile {
  int fd = -1;              ///< open while the source lives
  std::uint64_t at = 0;     ///< where the data start in the file
  std::uint64_t bytes = 0;  ///< how many bytes of data the header declares
  std::string what;         ///< how errors name the source
};

/// Sequential or random access to the rows (slabs along axis 0) of a stored tensor.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  /// Dtype, shape, storage and (when asked for) attributes, known once opened.
  virtual const TensorInfo& info() const = 0;
  /// Reads rows [first, first + count) of axis 0 into `dst` (C order, native byte
  /// order, the source dtype). A rank-0 tensor has one row. Streams (stdin) only allow
  /// reading forward. Throws InputError on short or malformed data.
  virtual void read_rows(std::size_t first, std::size_t count, void* dst) = 0;
  /// Whether whole-tensor reads are cheap relative to streaming (regular files).
  virtual bool seekable() const = 0;
  /// Reads entries [first, first + count) along `axis` into `dst` (as read_rows). Every
  /// axis before `axis` must have extent 1, so the slab is one contiguous range of the
  /// C-order data: this streams tensors such as [1, s, h, d] along s. `axis` 0 is
  /// read_rows. Throws InputError for a range outside the axis, std::logic_error for
  /// an axis that is not allowed (see `slab_axis`).
  virtual void read_slab(std::size_t axis, std::size_t first, std::size_t count, void* dst);
  /// All of the tensor's bytes in place (C order, native byte order, the source dtype,
  /// aligned to the element size) when the source can map its file into memory (a
  /// regular NPY file in C order and native byte order, an HDF5 dataset stored as its
  /// bytes), else nullptr. Reading through the mapping saves the copy a read makes.
  /// Valid while the source lives. A file truncated by another process while mapped
  /// cannot be read through the mapping: posenc ends with a one-line error and exit
  /// status 3, removing its temporary outputs (see guard_mapped_input in io/atomic.hpp).
  virtual const std::byte* mapped_data() { return nullptr; }
  /// Reads elements [first, first + count) of the C-order data into `dst` (native byte
  /// order, the source dtype): any hyperslab is a sequence of such ranges. Sources that
  /// only know rows (see `seekable`) serve whole rows only and throw std::logic_error
  /// otherwise; NPY files and HDF5 datasets serve any range.
  virtual void read_elements(std::size_t first, std::size_t count, void* dst);
  /// Whether read_raw() serves this source: its data are stored as their bytes (C order,
  /// native byte order) in a regular file, as for mapped_data(). Prepares the reads (an
  /// HDF5 source opens the file the sandbox checked); call it from one thread, before
  /// read_raw().
  virtual bool raw_reads() { return false; }
  /// Reads bytes [offset, offset + n) of the data (not of the file) into `dst` with
  /// positional reads, retrying interrupted and short reads. After raw_reads() returned
  /// true, several threads may call it at once. Throws InputError naming the file when it
  /// ends first (truncated, or shrunk by another process), InputError for a range outside
  /// the data, std::logic_error where raw_reads() is false.
  virtual void read_raw(std::size_t offset, std::size_t n, void* dst);
  /// Where the data lie in a regular file, for copying them unchanged file to file (see
  /// TensorSink::copy_slab): after raw_reads() returned true, else `fd` is -1.
  virtual RawFile raw_file() const { return {}; }
};

/// The axis along which a tensor of `shape` streams in the smallest slabs: the first
/// axis whose extent is not 1 (the last axis when all are 1; 0 for rank 0). Every axis
/// before it has extent 1, as read_slab/write_slab require.
std::size_t slab_axis(const Shape& shape);

/// What a reader fetches besides shape, dtype and storage.
struct OpenOptions {
  /// HDF5: the dataset's attributes into info().attrs. Off by default: only `inspect`
  /// shows them, and every attribute read exposes more of libhdf5 to the file.
  bool attrs = false;
};

/// Opens `ref` for reading: its header is read and checked (InputError naming the
/// reference on any problem), the data is read through the source's methods. HDF5 is
/// read by libhdf5 in a sandboxed child process.
std::unique_ptr<TensorSource> open_source(const TensorRef& ref, const OpenOptions& opt = {});

/// Reads the whole tensor. Throws InputError naming `ref.text` on any problem.
Tensor read_tensor(const TensorRef& ref);
/// Reads the whole tensor of the reference `ref_text` (parse_ref, then read_tensor).
Tensor read_tensor(const std::string& ref_text);

/// Options shared by all writers.
struct WriteOptions {
  /// Allow binary output to a terminal; replace existing datasets of an HDF5 output
  /// file, or an existing file that is not HDF5.
  bool force = false;
  int compression = 0;     ///< HDF5 gzip level (0 = none)
  bool no_clobber = false;  ///< refuse an existing target (HDF5: also adding to one)
  /// fsync each output before renaming it into place, so it survives a power loss.
  /// Off by default: atomicity against failed runs and signals does not need it, and
  /// it costs a full writeback of the file (more than the whole computation for a
  /// memory-bound job).
  bool sync = false;
};

/// Where a tensor is written: rows (or slabs) in order, or entries at any position,
/// then commit(). Nothing is visible at the target before commit(); a sink destroyed
/// uncommitted leaves the target as it was.
class TensorSink {
 public:
  virtual ~TensorSink() = default;
  /// Writes the next `count` rows (axis 0) from `src` (C order, the sink dtype).
  virtual void write_rows(const void* src, std::size_t count) = 0;
  /// Writes the next `count` entries along `axis`, every axis before which has extent 1
  /// (see TensorSource::read_slab); `axis` 0 is write_rows. Slabs continue where the
  /// previous write (of rows or slabs) ended. std::logic_error for an axis that is not
  /// allowed or more entries than the shape holds.
  virtual void write_slab(std::size_t axis, const void* src, std::size_t count);
  /// Whether write_at() is available: NPY to a regular file. Positional writes and
  /// sequential ones (rows, slabs) are not mixed on one sink.
  virtual bool writes_at() const { return false; }
  /// Writes `count` entries (the sink dtype, C order) starting at entry `first` of the
  /// tensor in C order. May be called from several threads at once, in any order, each
  /// entry once; commit() checks that every entry was written. std::logic_error where
  /// writes_at() is false or the range leaves the tensor.
  virtual void write_at(std::size_t first, const void* src, std::size_t count);
  /// Writes the next `count` entries along `axis` (as write_slab) from entries [first,
  /// first + count) along the same axis of `src`, file to file without passing through
  /// memory (OutputFile::copy_from), where both allow it: `src` in the sink's dtype with
  /// raw_file() data (a regular NPY file in C and native order, an HDF5 dataset stored
  /// as its bytes), a sink that stores its data as they are (NPY). Returns false, having
  /// written nothing, otherwise. Errors as write_slab and read_slab.
  virtual bool copy_slab(std::size_t axis, TensorSource& src, std::size_t first, std::size_t count);
  /// Finishes the output (all rows must have been written) short of making it visible:
  /// what can fail (a full disk, a missing row) fails here. Optional before commit().
  virtual void prepare() {}
  /// Finishes the output (all rows must have been written) and makes it visible.
  virtual void commit() = 0;
};

/// Creates a sink for a tensor described by `info` (dtype, shape, attrs). For HDF5,
/// several datasets may go to one file: see `HdfFileWriter` in io/hdf5.hpp.
std::unique_ptr<TensorSink> create_sink(const TensorRef& ref, const TensorInfo& info,
                                        const WriteOptions& opt = {});

/// Writes a whole tensor atomically.
void write_tensor(const TensorRef& ref, const Tensor& t, const Attrs& attrs = {},
                  const WriteOptions& opt = {});

}  // namespace posenc

namespace posenc {

/// Refuses (UsageError) outputs that name one file twice, also through other spellings
/// (x.npy and ./x.npy, a symbolic link to it), one HDF5 dataset twice (f.h5:/x and
/// ./f.h5:x), an HDF5 file also named as another format, or standard output twice.
void check_distinct_outputs(const std::vector<TensorRef>& refs);

/// One output of a multi-output write.
struct NamedTensor {
  TensorRef ref;                   ///< where it goes
  const Tensor* tensor = nullptr;  ///< what is written (not owned; outlives the write)
  Attrs attrs;                     ///< parameters recorded with it (HDF5 attributes)
};

/// Several streamed outputs of one run, made visible together: `open(i, info)` gives
/// the sink of `refs[i]` (outputs naming datasets of one HDF5 file share that file's
/// writer); `commit()` commits them all, HDF5 files first (their commit can still fail
/// on a full disk or a changed file), then the renames of the other files. Destroying
/// the set uncommitted leaves every target as it was. Two outputs naming the same file
/// (or the same dataset) are a UsageError from the constructor. commit() finishes every
/// output (prepare) before it makes any visible.
class OutputSet {
 public:
  /// The outputs `refs`, written with `opt`; nothing is opened yet. UsageError for
  /// two references to one file or dataset (check_distinct_outputs).
  OutputSet(std::vector<TensorRef> refs, const WriteOptions& opt);
  /// Without commit(): every temporary removed, every target as it was.
  ~OutputSet();
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;
  /// Opens output `i` (once) for a tensor described by `info`. Rows are written to the
  /// returned sink; its own commit() is called by this set's commit().
  TensorSink& open(std::size_t i, const TensorInfo& info);
  /// Finishes every opened output, then makes all of them visible (HDF5 files first).
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Writes several outputs so that all or none become visible: every target file is
/// written to a temporary file first and all are renamed only after every write
/// succeeded. Outputs naming datasets of the same HDF5 file go into that one file.
void write_tensors(const std::vector<NamedTensor>& outs, const WriteOptions& opt = {});

}  // namespace posenc
