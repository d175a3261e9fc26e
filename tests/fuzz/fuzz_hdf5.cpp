// Fuzzes posenc's HDF5 reading as the commands use it: the listing `inspect FILE.h5`
// shows, then every dataset opened with its attributes (as `inspect FILE.h5:/d` does)
// and read whole, in slabs and (when stored as its own bytes) through the mapping.
// libhdf5 runs in the sandbox child, so its crashes, hangs and runaway allocations must
// come back as InputError; anything else escaping (or this process crashing) is a
// finding. POSENC_HDF5_TIMEOUT is set to 2 s here so a hanging input costs little.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "fuzz_util.hpp"
#include "posenc/error.hpp"
#include "posenc/io/hdf5.hpp"
#include "posenc/io/npy.hpp"

namespace {

constexpr std::size_t kMaxRead = std::size_t{16} << 20;

void read_dataset(const std::string& path, const posenc::Hdf5Entry& e) {
  posenc::TensorRef ref{path + ":" + e.name, path, e.name, posenc::Format::hdf5, {}};
  auto src = posenc::open_hdf5_source(ref, posenc::OpenOptions{/*attrs=*/true});
  const posenc::TensorInfo& info = src->info();
  posenc::fuzz::expect(info.shape == e.info.shape && info.dtype == e.info.dtype,
                       "the listing and the dataset disagree");
  const std::size_t item = posenc::dtype_size(info.dtype);
  const std::size_t n = posenc::checked_numel(info.shape, item, "fuzz");
  if (n * item > kMaxRead) return;
  posenc::Tensor whole = posenc::read_all_rows(*src);
  // A dataset the child found stored as its own bytes is mapped from the file (rope,
  // attention): those bytes must be what libhdf5 reads.
  if (const std::byte* mapped = src->mapped_data()) {
    posenc::fuzz::expect(std::memcmp(mapped, whole.bytes(), whole.nbytes()) == 0,
                         "the mapped bytes differ from libhdf5's read");
  }
  // The same bytes slab by slab along the slab axis.
  const std::size_t axis = posenc::slab_axis(info.shape);
  const std::size_t entries = info.shape.empty() ? 1 : info.shape[axis];
  const std::size_t entry = entries == 0 ? 0 : whole.nbytes() / entries;
  std::string buf(whole.nbytes(), '\0');
  for (std::size_t first = 0; entry > 0 && first < entries; first += 2) {
    const std::size_t count = std::min<std::size_t>(2, entries - first);
    src->read_slab(axis, first, count, buf.data() + first * entry);
  }
  posenc::fuzz::expect(std::memcmp(buf.data(), whole.bytes(), buf.size()) == 0,
                       "slabs differ from the whole");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool env = ::setenv("POSENC_HDF5_TIMEOUT", "2", 0) == 0;
  (void)env;
  const std::string path = posenc::fuzz::temp_file(".h5", data, size);
  try {
    for (const posenc::Hdf5Entry& e : posenc::list_hdf5_entries(path)) {
      if (!e.error.empty()) continue;
      try {
        read_dataset(path, e);
      } catch (const posenc::InputError&) {
      }
    }
  } catch (const posenc::InputError&) {
  } catch (const std::bad_alloc&) {
    posenc::fuzz::finding("allocation failed in posenc (not in the sandbox)");
  }
  return 0;
}
