// Atomic outputs: nothing visible before commit, temporaries removed on failure, the
// target untouched by a failed write, permissions like a plain create, --no-clobber,
// write errors reported (/dev/full), and all-or-nothing multi-output writes.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "posenc/error.hpp"
#include "posenc/io/atomic.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/io/ref.hpp"

namespace posenc {
namespace {

class AtomicTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/posenc-atomic-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const auto& f : list()) ::unlink((dir_ + "/" + f).c_str());
    ::rmdir(dir_.c_str());
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> list() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(dir_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") out.push_back(n);
      }
      ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  static void put(const std::string& p, const std::string& s) {
    std::ofstream f(p, std::ios::binary);
    f << s;
  }
  std::string dir_;
};

TEST_F(AtomicTest, VisibleOnlyAfterCommit) {
  OutputFile out(path("a.bin"), {}, true);
  EXPECT_TRUE(out.atomic());
  out.write("hello", 5);
  out.finish();
  // An unnamed temporary (O_TMPFILE): nothing in the folder until the commit.
  EXPECT_TRUE(list().empty());
  out.commit();
  EXPECT_EQ(list(), std::vector<std::string>{"a.bin"});
  EXPECT_EQ(slurp(path("a.bin")), "hello");
}

// reserve() is a hint: the file holds what was written and no more blocks than that
// (on a disk file system the blocks were allocated up front), and a reservation the file
// system cannot give changes nothing.
TEST_F(AtomicTest, ReserveKeepsTheSizeWritten) {
  const std::size_t n = (3 << 20) + 3;
  {
    OutputFile out(path("a.bin"), {}, true);
    out.reserve(n);
    out.write(std::string(3 << 20, 'x'));
    out.write("end", 3);
    out.commit();
  }
  EXPECT_EQ(slurp(path("a.bin")), std::string(3 << 20, 'x') + "end");
  struct stat st {};
  ASSERT_EQ(::stat(path("a.bin").c_str(), &st), 0);
  EXPECT_LE(static_cast<std::size_t>(st.st_blocks) * 512, n + (std::size_t{64} << 10));
  OutputFile big(path("b.bin"), {}, true);
  big.reserve(std::uint64_t{1} << 62);
  big.write("b", 1);
  big.commit();
  EXPECT_EQ(slurp(path("b.bin")), "b");
  ASSERT_EQ(::stat(path("b.bin").c_str(), &st), 0);
  EXPECT_LE(st.st_blocks * 512, 1 << 16);
}

// copy_from appends a byte range of another file after what write() buffered: in the
// kernel into a temporary file, through a buffer into a pipe; a file that ends first is
// the truncated-data InputError with the data bytes it holds, and the target stays as
// it was.
TEST_F(AtomicTest, CopyFromAppendsARangeOrFailsOnTruncation) {
  std::string data(5 << 20, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + i / 4096);
  put(path("in.bin"), "HEAD" + data);
  const int in = ::open(path("in.bin").c_str(), O_RDONLY);
  ASSERT_GE(in, 0);
  {
    OutputFile out(path("a.bin"), {}, true);
    out.write("hdr", 3);
    out.copy_from(in, 4 + 100, data.size() - 200, "'in.bin'", 4, data.size());
    out.write("end", 3);
    out.commit();
  }
  EXPECT_EQ(slurp(path("a.bin")), "hdr" + data.substr(100, data.size() - 200) + "end");

  put(path("b.bin"), "old");
  {
    OutputFile out(path("b.bin"), {}, true);
    out.write("x", 1);
    try {
      out.copy_from(in, 4, data.size() + 10, "'in.bin'", 4, data.size() + 10);
      ADD_FAILURE() << "no error";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), "'in.bin': truncated data: expected " +
                                           std::to_string(data.size() + 10) + " bytes, got " +
                                           std::to_string(data.size()));
    }
  }
  EXPECT_EQ(slurp(path("b.bin")), "old");

  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = slurp(path("fifo")); });
  {
    OutputFile out(path("fifo"), {}, true);
    EXPECT_FALSE(out.atomic());
    out.write("p", 1);
    out.copy_from(in, 4, data.size(), "'in.bin'", 4, data.size());
    out.commit();
  }
  reader.join();
  EXPECT_EQ(got, "p" + data);
  ::close(in);
}

TEST_F(AtomicTest, UncommittedLeavesNothingAndTargetUntouched) {
  put(path("a.bin"), "old");
  {
    OutputFile out(path("a.bin"), {}, true);
    out.write(std::string(3 << 20, 'x'));  // more than the buffer: real writes happened
  }
  EXPECT_EQ(list(), std::vector<std::string>{"a.bin"});
  EXPECT_EQ(slurp(path("a.bin")), "old");
}

// A library installs no signal handlers: the caller's dispositions for the signals the
// command's cleanup takes over are as they were after outputs of every kind.
TEST_F(AtomicTest, OutputsLeaveSignalDispositionsAlone) {
  const int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGBUS};
  auto dispositions = [&] {
    std::vector<void (*)(int)> out;
    for (int sig : kSignals) {
      struct sigaction sa {};
      sigaction(sig, nullptr, &sa);
      out.push_back(sa.sa_handler);
    }
    return out;
  };
  const auto before = dispositions();
  {
    OutputFile out(path("a.npy"), {}, true);
    out.write("x");
    out.commit();
  }
  { TempFile named(path("b.h5"), false, false, true, /*named=*/true); }
  write_tensor(parse_ref(path("c.npy")), Tensor(DType::f32, {2}));
  EXPECT_EQ(dispositions(), before);
}

TEST_F(AtomicTest, NulInAPathIsRefusedBeforeOpening) {
  put(path("keep.h5"), "old");
  const std::string nul = path("keep.h5") + std::string(1, '\0') + ".npy";
  EXPECT_THROW(OutputFile(nul, {}, true), UsageError);
  EXPECT_THROW(TempFile(nul, false), UsageError);
  EXPECT_THROW(parse_ref(nul), UsageError);
  EXPECT_EQ(list(), std::vector<std::string>{"keep.h5"});
  EXPECT_EQ(slurp(path("keep.h5")), "old");
}

TEST_F(AtomicTest, PermissionsLikeAPlainCreate) {
  mode_t old = ::umask(022);
  {
    OutputFile out(path("new.bin"), {}, false);
    out.commit();
  }
  struct stat st;
  ASSERT_EQ(::stat(path("new.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  // An existing file keeps its mode.
  ::chmod(path("new.bin").c_str(), 0600);
  {
    OutputFile out(path("new.bin"), {}, false);
    out.commit();
  }
  ASSERT_EQ(::stat(path("new.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ::umask(old);
}

TEST_F(AtomicTest, NoClobber) {
  put(path("a.bin"), "old");
  WriteOptions opt;
  opt.no_clobber = true;
  try {
    OutputFile out(path("a.bin"), opt, true);
    ADD_FAILURE() << "accepted";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos);
  }
  // A target that appears between open and commit is not replaced either.
  OutputFile out(path("b.bin"), opt, true);
  out.write("new", 3);
  put(path("b.bin"), "racer");
  EXPECT_THROW(out.commit(), OutputError);
  EXPECT_EQ(slurp(path("b.bin")), "racer");
}

TEST_F(AtomicTest, MissingFolderNamesThePath) {
  try {
    OutputFile out(path("nope/a.bin"), {}, true);
    ADD_FAILURE() << "accepted";
  } catch (const OutputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot create '" + path("nope/a.bin") + "': no such directory: " + path("nope/"));
  }
}

TEST_F(AtomicTest, DirectoryTargetRefused) {
  ::mkdir(path("d").c_str(), 0755);
  EXPECT_THROW(OutputFile(path("d"), {}, true), OutputError);
  ::rmdir(path("d").c_str());
}

TEST_F(AtomicTest, DevFullReportsNoSpace) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "SKIP: no /dev/full here";
  OutputFile out("/dev/full", {}, false);
  EXPECT_FALSE(out.atomic());
  try {
    out.write("x", 1);
    out.commit();
    ADD_FAILURE() << "no error";
  } catch (const OutputError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write '/dev/full': No space left on device");
  }
}

TEST_F(AtomicTest, SymlinkTargetReplacesTheFileItPointsTo) {
  put(path("real.bin"), "old");
  ASSERT_EQ(::symlink("real.bin", path("link.bin").c_str()), 0);
  {
    OutputFile out(path("link.bin"), {}, false);
    out.write("new", 3);
    out.commit();
  }
  struct stat st;
  ASSERT_EQ(::lstat(path("link.bin").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(slurp(path("real.bin")), "new");
}

TEST_F(AtomicTest, WriteTensorsAllOrNothing) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "SKIP: no /dev/full here";
  Tensor t(DType::f32, {4});
  for (std::size_t i = 0; i < 4; ++i) t.set(i, static_cast<double>(i));
  put(path("b.npy"), "old");
  std::vector<NamedTensor> outs = {
      {parse_ref(path("a.npy")), &t, {}},
      {parse_ref(path("b.npy")), &t, {}},
      {parse_ref("/dev/full"), &t, {}},
  };
  EXPECT_THROW(write_tensors(outs), OutputError);
  EXPECT_EQ(list(), std::vector<std::string>{"b.npy"});
  EXPECT_EQ(slurp(path("b.npy")), "old");
  outs.pop_back();
  write_tensors(outs);
  EXPECT_EQ(list(), (std::vector<std::string>{"a.npy", "b.npy"}));
  Tensor back = read_tensor(path("b.npy"));
  EXPECT_EQ(back.shape(), (Shape{4}));
  EXPECT_EQ(back.get(3), 3.0);
  EXPECT_EQ(slurp(path("a.npy")), slurp(path("b.npy")));
}

TEST_F(AtomicTest, WriteTensorsRefusesDuplicatesAndBf16Npy) {
  Tensor t(DType::f32, {2});
  t.set(0, 1);
  t.set(1, 2);
  std::vector<NamedTensor> dup = {{parse_ref(path("a.npy")), &t, {}},
                                  {parse_ref(path("a.npy")), &t, {}}};
  EXPECT_THROW(write_tensors(dup), UsageError);
  Tensor b = t.astype(DType::bf16);
  EXPECT_THROW(write_tensor(parse_ref(path("b.npy")), b), UsageError);
  EXPECT_TRUE(list().empty());
}

TEST_F(AtomicTest, SinkStreamsRowsAndCommits) {
  TensorInfo info;
  info.dtype = DType::i32;
  info.shape = {3, 2};
  auto sink = create_sink(parse_ref(path("s.npy")), info);
  const std::int32_t rows[6] = {1, 2, 3, 4, 5, 6};
  sink->write_rows(rows, 1);
  sink->write_rows(rows + 2, 2);
  EXPECT_TRUE(list().empty());  // not visible before the commit
  sink->commit();
  Tensor back = read_tensor(path("s.npy"));
  ASSERT_EQ(back.dtype(), DType::i32);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back.data<std::int32_t>()[i], rows[i]);
  EXPECT_EQ(slurp(path("s.npy")).size(), 128u + 24u);
}

TEST_F(AtomicTest, SinkWritesAtPositionsFromThreads) {
  TensorInfo info;
  info.dtype = DType::f32;
  info.shape = {64, 32};
  auto sink = create_sink(parse_ref(path("p.npy")), info);
  ASSERT_TRUE(sink->writes_at());
  // Two threads, each writing every other block of 4 rows, last block first.
  auto writer = [&](int parity) {
    std::vector<float> block(4 * 32);
    for (int blk = 15; blk >= 0; --blk) {
      if (blk % 2 != parity) continue;
      for (std::size_t i = 0; i < block.size(); ++i) {
        block[i] = static_cast<float>(blk * 4 * 32 + static_cast<int>(i));
      }
      sink->write_at(static_cast<std::size_t>(blk) * 4 * 32, block.data(), block.size());
    }
  };
  std::thread a(writer, 0), b(writer, 1);
  a.join();
  b.join();
  EXPECT_THROW(sink->write_at(64 * 32 - 1, info.shape.data(), 2), std::logic_error);
  sink->commit();
  Tensor back = read_tensor(path("p.npy"));
  ASSERT_EQ(back.shape(), info.shape);
  for (std::size_t i = 0; i < back.numel(); ++i) ASSERT_EQ(back.get(i), static_cast<double>(i));
  EXPECT_EQ(list(), std::vector<std::string>{"p.npy"});
}

TEST_F(AtomicTest, SinkWriteAtIncompleteIsRefusedAndLeavesNothing) {
  put(path("p.npy"), "old");
  {
    TensorInfo info;
    info.shape = {4};
    auto sink = create_sink(parse_ref(path("p.npy")), info);
    const float x[2] = {1, 2};
    sink->write_at(2, x, 2);
    EXPECT_THROW(sink->commit(), std::logic_error);
  }
  EXPECT_EQ(list(), std::vector<std::string>{"p.npy"});
  EXPECT_EQ(slurp(path("p.npy")), "old");
  // Standard output cannot seek: no positional writes.
  TensorInfo info;
  info.shape = {1};
  WriteOptions force;
  force.force = true;
  EXPECT_FALSE(create_sink(parse_ref("-"), info, force)->writes_at());
}

TEST(ParseRef, Forms) {
  auto r = parse_ref("x.npy");
  EXPECT_EQ(r.format, Format::npy);
  EXPECT_EQ(r.path, "x.npy");
  r = parse_ref("a/b.h5:/g/d");
  EXPECT_EQ(r.format, Format::hdf5);
  EXPECT_EQ(r.path, "a/b.h5");
  EXPECT_EQ(r.dataset, "/g/d");
  r = parse_ref("weird:name.HDF5:/d");
  EXPECT_EQ(r.path, "weird:name.HDF5");
  EXPECT_EQ(r.dataset, "/d");
  r = parse_ref("x.h5", "", "/data");
  EXPECT_EQ(r.dataset, "/data");
  r = parse_ref("x.h5:d");
  EXPECT_EQ(r.dataset, "/d");
  EXPECT_THROW(parse_ref("x.h5"), UsageError);
  try {
    parse_ref("x.h5:");
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "x.h5:: name a dataset, e.g. x.h5:/data");
  }
  EXPECT_EQ(parse_ref("t:1.csv").format, Format::csv);
  EXPECT_EQ(parse_ref("t.TSV").format, Format::tsv);
  EXPECT_EQ(parse_ref("t.json").format, Format::json);
  EXPECT_EQ(parse_ref("-").format, Format::npy);
  EXPECT_TRUE(parse_ref("-").is_stdio());
  EXPECT_EQ(parse_ref("-", "text").format, Format::text);
  EXPECT_EQ(parse_ref("out.bin", "npy").format, Format::npy);
  r = parse_ref("out.bin:/x", "h5");
  EXPECT_EQ(r.path, "out.bin");
  EXPECT_EQ(r.dataset, "/x");
  EXPECT_THROW(parse_ref("x.foo"), UsageError);
  EXPECT_THROW(parse_ref("noext"), UsageError);
  EXPECT_THROW(parse_ref("x.npz"), UsageError);
  EXPECT_THROW(parse_ref(""), UsageError);
  EXPECT_EQ(parse_ref("/dev/null").format, Format::npy);
}

}  // namespace
}  // namespace posenc
