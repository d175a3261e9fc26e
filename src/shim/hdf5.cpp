// libhdf5 for the posenc executable, loaded on first use (see shim.hpp).
//
// To add a function: append X(name, number of parameters) to POSENC_HDF5_FUNCTIONS
// (the build fails with "undefined reference to `H5...`" until it is there). A
// predefined type or property-list class (H5T_NATIVE_FLOAT, H5P_LINK_CREATE, ...) is a
// macro reading a global variable after calling H5open(): append the variable's name
// (H5T_NATIVE_FLOAT_g, H5P_CLS_LINK_CREATE_ID_g) to POSENC_HDF5_VARIABLES. The extra
// entries at the end of each list are not called today; they are the group, link and
// dataset-extent functions that appending to files needs.

#include <hdf5.h>

#include <mutex>
#include <string>

#include "posenc/error.hpp"
#include "shim/shim.hpp"

#ifndef POSENC_HDF5_SONAME
#define POSENC_HDF5_SONAME "libhdf5_serial.so.103"
#endif
#ifndef POSENC_HDF5_PACKAGE
#define POSENC_HDF5_PACKAGE "libhdf5-103-1"
#endif

// H5open is not in the list: its trampoline is written out below.
// clang-format off
#define POSENC_HDF5_FUNCTIONS(X)                                                                   \
  X(H5Aclose, 1) X(H5Acreate2, 6) X(H5Adelete, 2) X(H5Aexists, 2) X(H5Aget_space, 1)               \
  X(H5Aget_type, 1) X(H5Aiterate2, 6) X(H5Aopen, 3) X(H5Aread, 3) X(H5Awrite, 3)                   \
  X(H5Dclose, 1) X(H5Dcreate2, 7) X(H5Dget_create_plist, 1) X(H5Dget_space, 1)                     \
  X(H5Dget_type, 1) X(H5Dopen2, 3) X(H5Dread, 6) X(H5Dwrite, 6) X(H5Eclear2, 1)                    \
  X(H5Eset_auto2, 3) X(H5Ewalk2, 4) X(H5Fclose, 1) X(H5Fcreate, 4) X(H5Fget_eoa, 2)              \
  X(H5Fis_hdf5, 1)                                                                                 \
  X(H5Fopen, 3) X(H5Gclose, 1) X(H5Gcreate2, 5) X(H5Gopen2, 3) X(H5Lexists, 3)                     \
  X(H5Lget_info, 4) X(H5Lvisit, 5) X(H5Oget_info_by_name2, 5) X(H5PLset_loading_state, 1)          \
  X(H5Pclose, 1) X(H5Pcreate, 1) X(H5Pget_chunk, 3) X(H5Pget_external_count, 1)                    \
  X(H5Pget_filter2, 8) X(H5Pget_layout, 1) X(H5Pget_nfilters, 1) X(H5Pset_char_encoding, 2)        \
  X(H5Pset_chunk, 3) X(H5Pset_chunk_cache, 4) X(H5Pset_deflate, 2) X(H5Pset_elink_cb, 3)           \
  X(H5Pset_fclose_degree, 2) X(H5Pset_file_locking, 3) X(H5Pset_obj_track_times, 2)                \
  X(H5Pset_shuffle, 1)                                                                             \
  X(H5Sclose, 1) X(H5Screate, 1) X(H5Screate_simple, 3) X(H5Sget_simple_extent_dims, 3)            \
  X(H5Sget_simple_extent_ndims, 1) X(H5Sget_simple_extent_npoints, 1)                              \
  X(H5Sget_simple_extent_type, 1) X(H5Sselect_hyperslab, 6) X(H5Sselect_none, 1)                   \
  X(H5Tclose, 1) X(H5Tcopy, 1) X(H5Tenum_create, 1) X(H5Tenum_insert, 3) X(H5Tget_class, 1)        \
  X(H5Tget_cset, 1) X(H5Tget_ebias, 1) X(H5Tget_fields, 6) X(H5Tget_member_name, 2)                \
  X(H5Tget_member_value, 3) X(H5Tget_native_type, 2) X(H5Tget_nmembers, 1) X(H5Tget_offset, 1)     \
  X(H5Tget_order, 1) X(H5Tget_norm, 1) X(H5Tget_precision, 1) X(H5Tget_sign, 1) X(H5Tget_size, 1)  \
  X(H5Tis_variable_str, 1) X(H5Tget_tag, 1) X(H5Tset_tag, 2)                                      \
  X(H5Tset_cset, 2) X(H5Tset_ebias, 2) X(H5Tset_fields, 6) X(H5Tset_precision, 2)                  \
  X(H5Tset_size, 2) X(H5Tset_strpad, 2) X(H5Zfilter_avail, 1) X(H5check_version, 3)                \
  X(H5dont_atexit, 0) X(H5free_memory, 1)                                                          \
  /* not called yet: groups, links, objects, extents */                                            \
  X(H5Ldelete, 3) X(H5Lcreate_soft, 5) X(H5Lcreate_hard, 6) X(H5Lmove, 6) X(H5Literate, 6)         \
  X(H5Lget_name_by_idx, 8) X(H5Gget_info, 2) X(H5Gget_info_by_name, 4) X(H5Oopen, 3)               \
  X(H5Oclose, 1) X(H5Oget_info2, 3) X(H5Oexists_by_name, 3) X(H5Dset_extent, 2)                    \
  X(H5Dget_storage_size, 1) X(H5Dget_offset, 1) X(H5Dget_access_plist, 1) X(H5Dflush, 1)          \
  X(H5Fflush, 2) X(H5Fget_access_plist, 1) X(H5Fget_vfd_handle, 3) X(H5Pget_driver, 1)            \
  X(H5FD_sec2_init, 0)                                                                             \
  X(H5Fget_intent, 2) X(H5Fget_name, 3) X(H5Iget_type, 1) X(H5Iget_name, 3) X(H5Iis_valid, 1)      \
  X(H5Idec_ref, 1) X(H5Pset_link_creation_order, 2) X(H5Pset_libver_bounds, 3)                     \
  X(H5Pset_layout, 2) X(H5Pset_fill_value, 3) X(H5Pset_alloc_time, 2)                              \
  X(H5Pset_create_intermediate_group, 2) X(H5Aopen_by_name, 5) X(H5Aget_name, 3)                   \
  X(H5Aexists_by_name, 4) X(H5Sget_select_npoints, 1) X(H5Sselect_all, 1)                          \
  X(H5Sset_extent_simple, 4) X(H5Tequal, 2) X(H5Tcreate, 2) X(H5Tinsert, 4)                        \
  X(H5Dvlen_reclaim, 4) X(H5Ocopy, 6) X(H5Pset_virtual, 5) X(H5close, 0)
// clang-format on

// clang-format off
#define POSENC_HDF5_VARIABLES(X)                                                                   \
  X(H5T_NATIVE_INT8_g) X(H5T_NATIVE_UINT8_g) X(H5T_NATIVE_INT16_g) X(H5T_NATIVE_UINT16_g)          \
  X(H5T_NATIVE_INT32_g) X(H5T_NATIVE_UINT32_g) X(H5T_NATIVE_INT64_g) X(H5T_NATIVE_UINT64_g)        \
  X(H5T_NATIVE_INT_g) X(H5T_NATIVE_LLONG_g) X(H5T_NATIVE_HSIZE_g) X(H5T_NATIVE_FLOAT_g)            \
  X(H5T_NATIVE_DOUBLE_g) X(H5T_IEEE_F32LE_g) X(H5T_IEEE_F64LE_g) X(H5T_STD_I8LE_g)                 \
  X(H5T_STD_U8LE_g) X(H5T_STD_I16LE_g) X(H5T_STD_U16LE_g) X(H5T_STD_I32LE_g)                       \
  X(H5T_STD_U32LE_g) X(H5T_STD_I64LE_g) X(H5T_STD_U64LE_g) X(H5T_C_S1_g)                           \
  X(H5P_CLS_FILE_CREATE_ID_g) X(H5P_CLS_FILE_ACCESS_ID_g) X(H5P_CLS_DATASET_CREATE_ID_g)           \
  X(H5P_CLS_DATASET_ACCESS_ID_g) X(H5P_CLS_DATASET_XFER_ID_g) X(H5P_CLS_GROUP_CREATE_ID_g)         \
  X(H5P_CLS_GROUP_ACCESS_ID_g) X(H5P_CLS_LINK_CREATE_ID_g) X(H5P_CLS_LINK_ACCESS_ID_g)             \
  X(H5P_CLS_ATTRIBUTE_CREATE_ID_g) X(H5P_CLS_OBJECT_COPY_ID_g)
// clang-format on

// The variables the macros read, filled from the real library's by H5open() below.
// Not exported from the executable (it is not linked with -rdynamic), so libhdf5's own
// references still reach its own copies.
#define POSENC_DEFINE_VARIABLE(name) hid_t name = H5I_INVALID_HID;
POSENC_HDF5_VARIABLES(POSENC_DEFINE_VARIABLE)
#undef POSENC_DEFINE_VARIABLE

namespace {

struct Hdf5 {
#define POSENC_MEMBER(name, n) decltype(&::name) name = nullptr;
  POSENC_HDF5_FUNCTIONS(POSENC_MEMBER)
#undef POSENC_MEMBER
  decltype(&::H5open) H5open = nullptr;
#define POSENC_MEMBER(name) const hid_t* name = nullptr;
  POSENC_HDF5_VARIABLES(POSENC_MEMBER)
#undef POSENC_MEMBER
  std::string error;  // why the library could not be loaded; empty if it was
};

Hdf5 load() {
  using posenc::shim::symbol;
  Hdf5 h;
  void* lib = posenc::shim::open_library(POSENC_HDF5_SONAME, POSENC_HDF5_PACKAGE, &h.error);
  if (lib == nullptr) return h;
#define POSENC_BIND(name)                                                                          \
  if (h.error.empty()) {                                                                           \
    h.name = reinterpret_cast<decltype(h.name)>(symbol(lib, POSENC_HDF5_SONAME, #name, &h.error)); \
  }
#define POSENC_BIND_FUNCTION(name, n) POSENC_BIND(name)
  POSENC_HDF5_FUNCTIONS(POSENC_BIND_FUNCTION)
  POSENC_BIND(H5open)
  POSENC_HDF5_VARIABLES(POSENC_BIND)
#undef POSENC_BIND_FUNCTION
#undef POSENC_BIND
  return h;
}

// Loaded once, by the first call from any thread; a failure is kept, not retried.
const Hdf5& loaded() {
  static const Hdf5 h = load();
  return h;
}

const Hdf5& hdf5() {
  const Hdf5& h = loaded();
  if (!h.error.empty()) {
    throw posenc::OutputError("cannot read or write HDF5 files: " + h.error);
  }
  return h;
}

}  // namespace

#define POSENC_TRAMPOLINE(name, n) POSENC_SHIM_TRAMPOLINE(hdf5, name, n)
POSENC_HDF5_FUNCTIONS(POSENC_TRAMPOLINE)
#undef POSENC_TRAMPOLINE

extern "C" herr_t H5open(void) {
  const Hdf5& h = hdf5();
  const herr_t ret = h.H5open();
  // The ids are set when the library initialises (again after an H5close()). Copied
  // under a lock, and only when they differ: OpenMP threads call this too, and read the
  // variables after it without the lock.
  if (ret >= 0) {
    static std::mutex m;
    std::lock_guard<std::mutex> lock(m);
#define POSENC_COPY(name) \
  if (name != *h.name) name = *h.name;
    POSENC_HDF5_VARIABLES(POSENC_COPY)
#undef POSENC_COPY
  }
  return ret;
}

/// Loads libhdf5 now. Returns why it cannot be loaded, or nullptr if it was. Called
/// (as a weak symbol) by the HDF5 reader before it forks its sandbox child, so that
/// every child inherits the library, and by the writer, to name its output in the error.
extern "C" const char* posenc_load_hdf5() {
  const Hdf5& h = loaded();
  return h.error.empty() ? nullptr : h.error.c_str();
}
