#pragma once
/// \file
/// HDF5 datasets through the C API (no <hdf5.h> here). Reading treats files as
/// untrusted: libhdf5 runs in a child process with memory and CPU limits and a
/// watchdog (a crash, hang or runaway allocation in the library is an InputError in
/// the caller within seconds; POSENC_HDF5_TIMEOUT sets the watchdog, default 10 s),
/// the HDF5 error stack is silenced, plugins are not loaded, external links, external
/// storage and virtual datasets are refused, and type, rank and size are validated
/// before anything is read. Writing creates groups as needed, records
/// attributes, stores no timestamps (identical runs give identical bytes), writes f16
/// as the IEEE half type h5py uses and bf16 as a 16-bit float type h5py reads.

#include <memory>
#include <string>
#include <vector>

#include "posenc/io/ref.hpp"

namespace posenc {

/// Opens `ref.dataset` in `ref.path` for reading (row slabs are hyperslab reads).
/// An empty dataset name is accepted when the file holds exactly one dataset.
/// info().storage reads like "HDF5 chunked (64, 128), shuffle, gzip 4, little-endian
/// f32"; info().attrs holds the dataset's attributes when `opt.attrs` asks for them.
/// Every problem (missing file, not HDF5, no such dataset, a group, unsupported type,
/// external link or storage, virtual dataset, unavailable filter, a crash or hang of
/// libhdf5) is a one-line InputError naming file and dataset.
std::unique_ptr<TensorSource> open_hdf5_source(const TensorRef& ref, const OpenOptions& opt = {});

/// Writes one or more datasets to an HDF5 file. The datasets are written to a file
/// under a temporary name in the target's folder (a TempFile: removed on SIGINT/SIGTERM
/// too) and become visible together with `commit()`; destroying an uncommitted writer
/// removes the temporary file and leaves the target as it was.
///
/// A new (or empty) target is the temporary file renamed into place; where no file was
/// at the start, it is published only where still none is (else the datasets are added
/// to the file that appeared). Writers of one file serialise on its lock: concurrent
/// runs adding to one file (posenc or h5py) all land, or fail having changed nothing. An existing HDF5
/// target gets the datasets added as h5py's mode 'a' would: everything else in it
/// (datasets, groups, attributes) is kept; groups on the way are created; an existing
/// dataset of the same name is replaced only with `opt.force`, and a group of that name
/// never. The existing file is never modified in place: commit() copies it, adds the
/// datasets to the copy, fsyncs it and renames it over the original, and all libhdf5
/// work on it runs in child processes (io/hdf5_append.hpp), so that a crafted file
/// cannot crash posenc. An existing target that is not HDF5 is an error unless
/// `opt.force` (then it is replaced); with `opt.no_clobber` any existing target is an
/// error. Errors are OutputErrors naming the file. Sinks must not outlive their writer.
class Hdf5FileWriter {
 public:
  /// A writer of the HDF5 file `path` with `opt` (see above for an existing file).
  Hdf5FileWriter(const std::string& path, const WriteOptions& opt);
  /// Without commit(): the temporary removed, the target as it was.
  ~Hdf5FileWriter();
  Hdf5FileWriter(const Hdf5FileWriter&) = delete;
  Hdf5FileWriter& operator=(const Hdf5FileWriter&) = delete;

  /// A sink for dataset `name` ("/g/d"; groups created as needed) with `info.attrs`
  /// as attributes. For an existing target, whether `name` can be added is checked
  /// here, before any data arrive. The sink's own commit() only checks all rows arrived; the file
  /// becomes visible with this writer's commit().
  std::unique_ptr<TensorSink> dataset(const std::string& name, const TensorInfo& info);
  /// One source of a virtual dataset: all of dataset `dataset` of file `file` (a path
  /// as stored: relative paths are found from the virtual file's folder; "." is the
  /// virtual dataset's own file) placed at `offset` of the virtual dataset. Names are
  /// literal: a '%' is escaped for libhdf5 here.
  struct VirtualSource {
    std::string file;     ///< the source file, as stored in the virtual dataset
    std::string dataset;  ///< the source dataset's path in that file
    Shape shape;          ///< the source dataset's shape
    Shape offset;         ///< where it starts in the virtual dataset
  };
  /// A virtual dataset `name` of `info.dtype` and `info.shape` whose contents are
  /// `sources` (HDF5 1.10 VDS; h5py reads it as one dataset while the source files stay
  /// where they are). posenc's own reader refuses virtual datasets (they can make a
  /// reader open any file), so `posenc inspect` shows them not. Added to an existing
  /// target on commit() like the datasets of dataset().
  void virtual_dataset(const std::string& name, const TensorInfo& info,
                       const std::vector<VirtualSource>& sources);
  /// Attributes on the root group (parameters shared by all datasets).
  void root_attrs(const Attrs& attrs);
  /// Everything that can fail short of making the file visible: the file closed and
  /// (with `sync`) fsynced, or for an existing target the datasets added to a locked
  /// copy (io/hdf5_append.hpp). The file to be published is locked (flock, as libhdf5
  /// and h5py lock a file open for writing) until the writer is destroyed.
  void prepare();
  /// Makes the file visible: renames the copy over the locked original, or links a new
  /// file where none is. A file that another writer created at the target since this
  /// writer was made is added to, never replaced.
  void publish();
  /// prepare() and publish().
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The datasets in a file (full paths, sorted per group), for messages and `inspect`
/// of a bare file. External links are not followed. InputError as for reading.
std::vector<std::string> list_hdf5_datasets(const std::string& path);

/// One dataset of a listing: its description (no attributes), or why it cannot be read.
struct Hdf5Entry {
  std::string name;   ///< full path in the file ("/g/d")
  TensorInfo info;    ///< dtype, shape and storage, when readable
  std::string error;  ///< empty when `info` holds the description
};

/// The datasets of a file with their shapes, dtypes and storage, read by one child
/// process (see list_hdf5_datasets).
std::vector<Hdf5Entry> list_hdf5_entries(const std::string& path);

}  // namespace posenc
