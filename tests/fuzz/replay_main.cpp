// Runs a fuzz harness over files, for builds without libFuzzer (GCC, ctest): each
// argument is a file or a folder of files (a corpus), fed once to
// LLVMFuzzerTestOneInput. A harness that finds a problem aborts, failing the test.

#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void run_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

int run(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "%s: not found\n", path.c_str());
    return 0;
  }
  if (!S_ISDIR(st.st_mode)) {
    run_file(path);
    return 1;
  }
  int n = 0;
  DIR* d = ::opendir(path.c_str());
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    if (e->d_name[0] != '.') n += run(path + "/" + e->d_name);
  }
  if (d) ::closedir(d);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 0;
  for (int i = 1; i < argc; ++i) n += run(argv[i]);
  std::printf("%d inputs ran clean\n", n);
  return n > 0 ? 0 : 1;
}
