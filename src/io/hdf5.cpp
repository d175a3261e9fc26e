// HDF5 reading and writing through the C API (early version: not implemented yet).
#include "posenc/io/hdf5.hpp"

#include "posenc/error.hpp"

namespace posenc {

std::unique_ptr<TensorSource> open_hdf5_source(const TensorRef& ref) {
  throw InputError(ref.text + ": HDF5 reading not supported yet");
}

struct Hdf5FileWriter::Impl {
  std::string path;
};

Hdf5FileWriter::Hdf5FileWriter(const std::string& path, const WriteOptions&)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  throw OutputError(path + ": HDF5 writing not supported yet");
}
Hdf5FileWriter::~Hdf5FileWriter() = default;

std::unique_ptr<TensorSink> Hdf5FileWriter::dataset(const std::string&, const TensorInfo&) {
  throw OutputError(impl_->path + ": HDF5 writing not supported yet");
}
void Hdf5FileWriter::root_attrs(const Attrs&) {}
void Hdf5FileWriter::commit() {
  throw OutputError(impl_->path + ": HDF5 writing not supported yet");
}

std::vector<std::string> list_hdf5_datasets(const std::string& path) {
  throw InputError(path + ": HDF5 reading not supported yet");
}

}  // namespace posenc
