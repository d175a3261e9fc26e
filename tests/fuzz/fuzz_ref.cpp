// Fuzzes tensor references (`x.npy`, `x.h5:/g/d`, `-`, `--to`, default datasets):
// the input is three strings separated by NUL bytes (reference, --to value, default
// dataset). Contract: only UsageError, and a parsed reference is consistent: a file
// path that is not empty, and for HDF5 a dataset that starts with '/' and no stdin.

#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string parts[3];
  int k = 0;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && k < 2) {
      ++k;
    } else {
      parts[k].push_back(static_cast<char>(data[i]));
    }
  }
  posenc::TensorRef ref;
  try {
    ref = posenc::parse_ref(parts[0], parts[1], parts[2]);
  } catch (const posenc::UsageError&) {
    return 0;
  }
  using posenc::fuzz::expect;
  expect(ref.text == parts[0], "the reference text is not kept");
  expect(!ref.path.empty(), "empty file path");
  if (ref.format == posenc::Format::hdf5) {
    expect(!ref.is_stdio(), "HDF5 on standard input/output");
    expect(!ref.dataset.empty() && ref.dataset[0] == '/', "HDF5 dataset without a leading '/'");
  } else {
    expect(ref.dataset.empty(), "a dataset on a non-HDF5 reference");
  }
  return 0;
}
