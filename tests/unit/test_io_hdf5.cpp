// HDF5 writer and reader round trips (interop with h5py is tested in tests/cli).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "posenc/error.hpp"
#include "posenc/io/hdf5.hpp"

namespace posenc {
namespace {

class Hdf5Test : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/posenc-h5-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    std::string cmd = "ls -A '" + dir_ + "'";
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) {
      std::string s = buf;
      s.pop_back();
      out.push_back(s);
    }
    ::pclose(p);
    return out;
  }
  std::string dir_;
};

Tensor ramp(DType d, Shape s) {
  Tensor t(d, s);
  for (std::size_t i = 0; i < t.numel(); ++i) t.set(i, (static_cast<double>(i) - 3.0) * 0.37);
  return t;
}

void write_one(const std::string& path, const std::string& name, const Tensor& t,
               const Attrs& attrs = {}, int compression = 0) {
  WriteOptions opt;
  opt.compression = compression;
  Hdf5FileWriter w(path, opt);
  TensorInfo info{t.dtype(), t.shape(), "", attrs};
  auto sink = w.dataset(name, info);
  std::size_t rows = t.shape().empty() ? 1 : t.shape()[0];
  std::size_t row_bytes = rows == 0 ? 0 : t.nbytes() / rows;
  // Two slabs, to exercise hyperslab writes.
  std::size_t half = rows / 2;
  sink->write_rows(t.bytes(), half);
  sink->write_rows(t.bytes() + half * row_bytes, rows - half);
  sink->commit();
  w.commit();
}

Tensor read_all(const std::string& path, const std::string& name, TensorInfo* info = nullptr) {
  TensorRef ref{path + ":" + name, path, name, Format::hdf5, {}};
  auto src = open_hdf5_source(ref, OpenOptions{/*attrs=*/true});
  Tensor t(src->info().dtype, src->info().shape);
  std::size_t rows = t.shape().empty() ? 1 : t.shape()[0];
  src->read_rows(0, rows, t.bytes());
  if (info != nullptr) *info = src->info();
  return t;
}

TEST_F(Hdf5Test, RoundTripsEveryDtype) {
  for (DType d :
       {DType::f16, DType::bf16, DType::f32, DType::f64, DType::i8, DType::i16, DType::i32,
        DType::i64, DType::u8, DType::u16, DType::u32, DType::u64, DType::b1}) {
    Tensor t = ramp(d, {5, 3});
    std::string p = path(std::string(dtype_name(d)) + ".h5");
    write_one(p, "/g/x", t);
    TensorInfo info;
    Tensor r = read_all(p, "/g/x", &info);
    EXPECT_EQ(info.dtype, d) << dtype_name(d);
    EXPECT_EQ(info.shape, t.shape());
    ASSERT_EQ(r.nbytes(), t.nbytes());
    EXPECT_EQ(std::memcmp(r.bytes(), t.bytes(), t.nbytes()), 0) << dtype_name(d);
  }
}

TEST_F(Hdf5Test, ScalarEmptyAndHighRank) {
  Tensor s = ramp(DType::f64, {});
  write_one(path("s.h5"), "/s", s);
  Tensor r = read_all(path("s.h5"), "/s");
  EXPECT_TRUE(r.shape().empty());
  EXPECT_EQ(r.get(0), s.get(0));

  Tensor e(DType::f32, {0, 4});
  write_one(path("e.h5"), "/e", e);
  EXPECT_EQ(read_all(path("e.h5"), "/e").shape(), (Shape{0, 4}));

  Tensor h = ramp(DType::f32, {2, 1, 3, 1, 2, 1, 2, 2});
  write_one(path("h.h5"), "/h", h, {}, 4);
  Tensor hr = read_all(path("h.h5"), "/h");
  EXPECT_EQ(std::memcmp(hr.bytes(), h.bytes(), h.nbytes()), 0);
}

TEST_F(Hdf5Test, CompressedStorageIsDescribed) {
  Tensor t = ramp(DType::f32, {600, 700});
  write_one(path("c.h5"), "/c", t, {}, 4);
  TensorInfo info;
  Tensor r = read_all(path("c.h5"), "/c", &info);
  EXPECT_EQ(std::memcmp(r.bytes(), t.bytes(), t.nbytes()), 0);
  EXPECT_NE(info.storage.find("chunked"), std::string::npos) << info.storage;
  EXPECT_NE(info.storage.find("gzip 4"), std::string::npos) << info.storage;
  EXPECT_NE(info.storage.find("shuffle"), std::string::npos) << info.storage;

  write_one(path("u.h5"), "/u", t);
  read_all(path("u.h5"), "/u", &info);
  EXPECT_EQ(info.storage.rfind("HDF5 contiguous", 0), 0u) << info.storage;
}

TEST_F(Hdf5Test, ReadsRowSlabs) {
  Tensor t = ramp(DType::f64, {10, 4});
  write_one(path("r.h5"), "/r", t, {}, 1);
  TensorRef ref{"r", path("r.h5"), "/r", Format::hdf5, {}};
  auto src = open_hdf5_source(ref);
  std::vector<double> buf(3 * 4);
  src->read_rows(6, 3, buf.data());
  for (std::size_t i = 0; i < buf.size(); ++i) EXPECT_EQ(buf[i], t.get(24 + i));
  EXPECT_THROW(src->read_rows(8, 3, buf.data()), InputError);
}

TEST_F(Hdf5Test, AttributesRoundTrip) {
  Attrs attrs{{"style", std::string("neox")},
              {"base", 10000.0},
              {"positions", 128LL},
              {"factors", std::vector<double>{1.0, 2.5, -3.0}}};
  write_one(path("a.h5"), "/a", ramp(DType::f32, {2}), attrs);
  TensorInfo info;
  read_all(path("a.h5"), "/a", &info);
  ASSERT_EQ(info.attrs.size(), 4u);
  // Listed by name.
  EXPECT_EQ(info.attrs[0].name, "base");
  EXPECT_EQ(std::get<double>(info.attrs[0].value), 10000.0);
  EXPECT_EQ(std::get<std::vector<double>>(info.attrs[1].value),
            (std::vector<double>{1.0, 2.5, -3.0}));
  EXPECT_EQ(std::get<long long>(info.attrs[2].value), 128);
  EXPECT_EQ(std::get<std::string>(info.attrs[3].value), "neox");
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST_F(Hdf5Test, IdenticalWritesAreByteIdentical) {
  Tensor t = ramp(DType::f16, {7, 9});
  Attrs attrs{{"note", std::string("x")}, {"base", 1.5}};
  for (const char* name : {"1.h5", "2.h5"}) {
    WriteOptions opt;
    Hdf5FileWriter w(path(name), opt);
    w.root_attrs({{"tool", std::string("posenc")}});
    auto a = w.dataset("/deep/er/probs", {t.dtype(), t.shape(), "", attrs});
    a->write_rows(t.bytes(), 7);
    a->commit();
    auto b = w.dataset("/output", {t.dtype(), t.shape(), "", {}});
    b->write_rows(t.bytes(), 7);
    b->commit();
    w.commit();
    ::sleep(name[0] == '1' ? 1 : 0);  // a timestamp would now differ
  }
  EXPECT_EQ(slurp(path("1.h5")), slurp(path("2.h5")));
  auto names = list_hdf5_datasets(path("1.h5"));
  EXPECT_EQ(names, (std::vector<std::string>{"/deep/er/probs", "/output"}));
}

TEST_F(Hdf5Test, UncommittedWriterLeavesNothingAndKeepsTarget) {
  std::string target = path("keep.h5");
  write_one(target, "/old", ramp(DType::f32, {3}));
  std::string before = slurp(target);
  {
    WriteOptions opt;
    Hdf5FileWriter w(target, opt);
    auto s = w.dataset("/new", {DType::f32, {4}, "", {}});
    Tensor t = ramp(DType::f32, {4});
    s->write_rows(t.bytes(), 2);
    EXPECT_THROW(s->commit(), OutputError);  // only 2 of 4 rows
    EXPECT_THROW(w.commit(), OutputError);
  }
  EXPECT_EQ(slurp(target), before);
  EXPECT_EQ(files(), (std::vector<std::string>{"keep.h5"}));
}

TEST_F(Hdf5Test, NoClobberRefusesExistingTarget) {
  std::string target = path("x.h5");
  write_one(target, "/x", ramp(DType::f32, {3}));
  WriteOptions opt;
  opt.no_clobber = true;
  EXPECT_THROW(Hdf5FileWriter(target, opt), OutputError);
  EXPECT_THROW(Hdf5FileWriter(path("missing/dir/x.h5"), WriteOptions{}), OutputError);
}

TEST_F(Hdf5Test, ExistingFileGetsDatasetsAdded) {
  std::string target = path("a.h5");
  write_one(target, "/old", ramp(DType::f64, {3}), {{"note", std::string("kept")}});
  write_one(target, "/g/new", ramp(DType::f32, {2, 2}));
  TensorInfo info;
  Tensor old = read_all(target, "/old", &info);
  EXPECT_EQ(old.shape(), (Shape{3}));
  EXPECT_EQ(old.get(2), ramp(DType::f64, {3}).get(2));
  EXPECT_EQ(read_all(target, "/g/new").shape(), (Shape{2, 2}));
  ASSERT_EQ(info.attrs.size(), 1u);
  // Replacing needs force; a group is never replaced; the file stays as it was.
  std::string before = slurp(target);
  EXPECT_THROW(write_one(target, "/old", ramp(DType::f32, {5})), OutputError);
  WriteOptions force;
  force.force = true;
  EXPECT_THROW(Hdf5FileWriter(target, force).dataset("/g", {DType::f32, {1}, "", {}}), OutputError);
  EXPECT_EQ(slurp(target), before);
  {
    Hdf5FileWriter w(target, force);
    Tensor t = ramp(DType::f32, {5});
    auto s = w.dataset("/old", {t.dtype(), t.shape(), "", {}});
    s->write_rows(t.bytes(), 5);
    s->commit();
    w.commit();
  }
  EXPECT_EQ(read_all(target, "/old").shape(), (Shape{5}));
  EXPECT_EQ(read_all(target, "/g/new").shape(), (Shape{2, 2}));
  EXPECT_EQ(files(), (std::vector<std::string>{"a.h5"}));
}

TEST_F(Hdf5Test, OutputSetCommitsAllOrNothing) {
  const std::string h5 = path("s.h5");
  std::vector<TensorRef> refs = {parse_ref(h5 + ":/a"), parse_ref(h5 + ":/b/c"),
                                 parse_ref(path("d.npy"))};
  Tensor t = ramp(DType::f32, {4});
  {
    OutputSet outs(refs, WriteOptions{});
    for (std::size_t i = 0; i < refs.size(); ++i) {
      outs.open(i, {t.dtype(), t.shape(), "", {}}).write_rows(t.bytes(), 4);
    }
    // Not committed: nothing appears.
  }
  EXPECT_TRUE(files().empty());
  {
    OutputSet outs(refs, WriteOptions{});
    for (std::size_t i = 0; i < refs.size(); ++i) {
      outs.open(i, {t.dtype(), t.shape(), "", {}}).write_rows(t.bytes(), 4);
    }
    outs.commit();
  }
  EXPECT_EQ(files(), (std::vector<std::string>{"d.npy", "s.h5"}));
  EXPECT_EQ(read_all(h5, "/b/c").get(3), t.get(3));
  EXPECT_THROW(OutputSet({parse_ref(h5 + ":/a"), parse_ref(h5 + ":/a")}, WriteOptions{}),
               UsageError);
}

TEST_F(Hdf5Test, DatasetNamingErrors) {
  WriteOptions opt;
  Hdf5FileWriter w(path("n.h5"), opt);
  auto s = w.dataset("/a", {DType::f32, {1}, "", {}});
  float v = 1;
  s->write_rows(&v, 1);
  s->commit();
  EXPECT_THROW(w.dataset("/a", {DType::f32, {1}, "", {}}), OutputError);    // twice
  EXPECT_THROW(w.dataset("/a/b", {DType::f32, {1}, "", {}}), OutputError);  // under a dataset
}

void expect_input_error(const std::string& path, const std::string& ds, const std::string& part) {
  TensorRef ref{path + ":" + ds, path, ds, Format::hdf5, {}};
  try {
    open_hdf5_source(ref);
    ADD_FAILURE() << "no error for " << path << ":" << ds;
  } catch (const InputError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(part), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST_F(Hdf5Test, ReadErrorsNameFileAndDataset) {
  write_one(path("f.h5"), "/g/q", ramp(DType::f32, {2}));
  expect_input_error(path("f.h5"), "/g/k", "no dataset '/g/k' (datasets: /g/q)");
  expect_input_error(path("f.h5"), "/g", "'/g' is a group, not a dataset");
  expect_input_error(path("f.h5"), "/g/q/z", "no dataset '/g/q/z'");
  expect_input_error(path("nope.h5"), "/x", "cannot open");
  std::ofstream(path("text.h5")) << "not hdf5\n";
  expect_input_error(path("text.h5"), "/x", "not an HDF5 file");
}

// [1, s, h] written and read in slabs along s (axis 1): hyperslabs with a zero offset
// on the unit axis, mixing slab sizes, with and without chunked compression.
TEST_F(Hdf5Test, SlabsAlongTheFirstNonUnitAxis) {
  for (int compression : {0, 3}) {
    const std::string file = path("slab" + std::to_string(compression) + ".h5");
    Tensor t = ramp(DType::f32, {1, 11, 5});
    const std::size_t entry = 5 * sizeof(float);
    {
      WriteOptions opt;
      opt.compression = compression;
      Hdf5FileWriter w(file, opt);
      auto sink = w.dataset("/g/x", TensorInfo{t.dtype(), t.shape(), "", {}});
      sink->write_slab(1, t.bytes(), 4);
      sink->write_slab(1, t.bytes() + 4 * entry, 0);
      sink->write_slab(1, t.bytes() + 4 * entry, 7);
      EXPECT_THROW(sink->write_slab(1, t.bytes(), 1), OutputError);  // past the end
      sink->commit();
      w.commit();
    }
    Tensor back = read_all(file, "/g/x");
    ASSERT_EQ(back.shape(), t.shape());
    EXPECT_EQ(std::memcmp(back.bytes(), t.bytes(), t.nbytes()), 0);

    TensorRef ref{file + ":/g/x", file, "/g/x", Format::hdf5, {}};
    auto src = open_hdf5_source(ref);
    std::vector<float> buf(3 * 5);
    src->read_slab(1, 8, 3, buf.data());
    EXPECT_EQ(std::memcmp(buf.data(), t.bytes() + 8 * entry, 3 * entry), 0);
    EXPECT_THROW(src->read_slab(1, 9, 3, buf.data()), InputError);
    EXPECT_THROW(src->read_slab(2, 0, 1, buf.data()), std::logic_error);
  }
}

// Reads go through the sandbox child in pieces of 16 MiB, which cut rows anywhere: a
// piece is then a union of partial and whole rows over several axes. Whole reads and
// slab reads must still return exactly the bytes written.
TEST_F(Hdf5Test, SandboxPiecesCutRowsExactly) {
  for (const Shape& shape : {Shape{3, 3000001}, Shape{2, 3, 1398103}, Shape{1, 5, 1048577}}) {
    Tensor t(DType::f32, shape);
    for (std::size_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
    const std::string file = path("big.h5");
    ::unlink(file.c_str());  // a new file each time (writing adds to an existing one)
    write_one(file, "/x", t);
    Tensor back = read_all(file, "/x");
    ASSERT_EQ(back.shape(), shape);
    EXPECT_EQ(std::memcmp(back.bytes(), t.bytes(), t.nbytes()), 0) << shape_str(shape);
    // The last entry along the slab axis alone: a piece boundary inside it.
    TensorRef ref{file + ":/x", file, "/x", Format::hdf5, {}};
    auto src = open_hdf5_source(ref);
    const std::size_t axis = slab_axis(shape);
    const std::size_t entry = t.nbytes() / shape[axis];
    std::vector<std::byte> buf(entry);
    src->read_slab(axis, shape[axis] - 1, 1, buf.data());
    EXPECT_EQ(std::memcmp(buf.data(), t.bytes() + t.nbytes() - entry, entry), 0);
  }
}

TEST_F(Hdf5Test, AttributesAreReadOnlyOnRequest) {
  write_one(path("a.h5"), "/x", ramp(DType::f32, {3}), {{"note", std::string("kept")}});
  TensorRef ref{path("a.h5") + ":/x", path("a.h5"), "/x", Format::hdf5, {}};
  EXPECT_TRUE(open_hdf5_source(ref)->info().attrs.empty());
  const Attrs attrs = open_hdf5_source(ref, OpenOptions{true})->info().attrs;
  ASSERT_EQ(attrs.size(), 1u);
  EXPECT_EQ(std::get<std::string>(attrs[0].value), "kept");
}

TEST_F(Hdf5Test, IncompleteSlabWritesAreRefused) {
  Tensor t = ramp(DType::f64, {1, 6, 2});
  Hdf5FileWriter w(path("part.h5"), WriteOptions{});
  auto sink = w.dataset("/x", TensorInfo{t.dtype(), t.shape(), "", {}});
  sink->write_slab(1, t.bytes(), 5);
  try {
    sink->commit();
    ADD_FAILURE() << "committed 5 of 6 entries";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("5 of 6 entries along axis 1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace posenc
