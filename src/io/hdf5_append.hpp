#pragma once
// Internal to the HDF5 writer: adding datasets to an existing HDF5 file (h5py's mode
// 'a'). The writer (hdf5.cpp) writes the new datasets into a fresh scratch file it
// created itself; on commit the existing file is copied byte for byte beside itself,
// the datasets are copied into the copy, and the copy is fsynced and renamed over the
// original. Every libhdf5 call on the existing file (or its copy) runs in a forked
// child (see hdf5_append.cpp for why), so a crafted file cannot crash posenc and a
// failure at any point leaves the original as it was.

#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "posenc/io/atomic.hpp"
#include "posenc/io/ref.hpp"

namespace posenc::hdf5_append {

/// Whether the datasets for `target` (symbolic links resolved) are to be added to an
/// existing file: true for a non-empty regular file with an HDF5 signature that
/// libhdf5 opens (checked in a child); false when there is no file, an empty one, or
/// (with `force`) a file that is not HDF5, which is then replaced. Throws OutputError
/// naming `display` for a file that is not HDF5 (without `force`) or that cannot be
/// opened.
bool adds_to_existing(const std::string& target, const std::string& display, bool force);

/// Checks in a child that `name` can be added to the existing `target` (see
/// hdf5_detail::check_append_names). Throws OutputError.
void check_name(const std::string& target, const std::string& display, const std::string& name,
                bool force);

/// Adding the datasets `names` of `scratch` (an HDF5 file) to the existing `target`, in
/// two steps so that a run with several outputs can finish them all before publishing
/// any (see OutputSet).
///
/// The constructor takes an exclusive flock on the target, the lock libhdf5 and h5py
/// take while a file is open for writing (waiting up to POSENC_LOCK_TIMEOUT seconds,
/// default 60, for other writers; a target replaced meanwhile is locked anew), makes a
/// byte copy of it in a TempFile beside it (after checking that the folder has room for
/// it; the copy is locked from its creation), copies the datasets (and `root_attrs`)
/// into the copy in a child and fsyncs it. publish() renames the copy over the target.
/// The original and the new file stay locked until the Merge is destroyed: a concurrent
/// adder waits and then adds to the file this one made, so no dataset is lost. On any
/// error the target is untouched and the copy leaves nothing behind. Errors are
/// OutputErrors naming `display`.
class Merge {
 public:
  Merge(const std::string& target, const std::string& display, const std::string& scratch,
        const std::vector<std::string>& names, const Attrs& root_attrs, bool force);
  ~Merge();
  Merge(const Merge&) = delete;
  Merge& operator=(const Merge&) = delete;
  /// False when the target was removed before it could be locked: nothing to add to.
  bool ready() const { return lock_fd_ >= 0; }
  void publish();

 private:
  std::string display_;
  int lock_fd_ = -1;
  struct stat locked_ {};
  std::unique_ptr<TempFile> copy_;
};

}  // namespace posenc::hdf5_append

namespace posenc::hdf5_detail {

/// In this process: opens `path` read-only (without libhdf5's file lock: a writer that
/// holds it replaces the file by rename, which the open file does not see) and checks each of `names` as the writer
/// would add it (groups on the way, or missing; the name missing, or a dataset when
/// `force`). OutputErrors name `display`.
void check_append_names(const std::string& path, const std::string& display,
                        const std::vector<std::string>& names, bool force);

/// In this process: opens `copy` read-write and copies the datasets `names` of
/// `scratch` into it (replacing existing ones when `force`, creating groups), then sets
/// `root_attrs` on its root group and closes it.
void merge_datasets(const std::string& scratch, const std::string& copy, const std::string& display,
                    const std::vector<std::string>& names, const Attrs& root_attrs, bool force);

}  // namespace posenc::hdf5_detail
