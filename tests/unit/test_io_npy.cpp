// The NPY reader and writer: every malformed-input class of io-cli-reliability.md
// (table ii), the valid variants numpy writes (key order, byte order, versions, Fortran
// order, rank 0, zero-size), streams that deliver short reads, and the writer's layout.
// Expected values are the numbers the hand-built files were made from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "posenc/error.hpp"
#include "posenc/io/npy.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

// Serves bytes from memory, at most `max_chunk` at a time (random sizes if `rng`),
// like a pipe.
class MemoryReader final : public ByteReader {
 public:
  explicit MemoryReader(std::string data, std::size_t max_chunk = SIZE_MAX,
                        std::mt19937* rng = nullptr)
      : data_(std::move(data)), max_chunk_(max_chunk), rng_(rng) {}
  std::size_t read_some(void* dst, std::size_t n) override {
    std::size_t left = data_.size() - pos_;
    std::size_t k = std::min({n, left, max_chunk_});
    if (rng_ && k > 1) k = std::uniform_int_distribution<std::size_t>(1, k)(*rng_);
    std::memcpy(dst, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  std::string data_;
  std::size_t pos_ = 0;
  std::size_t max_chunk_;
  std::mt19937* rng_;
};

std::string le(std::uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// An NPY file with `dict` as header text (padded to 64 bytes like numpy) and `data`.
std::string npy_file(const std::string& dict, const std::string& data, int major = 1,
                     int minor = 0) {
  const int len_bytes = major == 1 ? 2 : 4;
  std::string h = dict;
  std::size_t total = 8 + len_bytes + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(static_cast<char>(minor));
  out += le(h.size(), len_bytes);
  return out + h + data;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string f4_dict(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
}

std::vector<float> iota_f(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return v;
}

Tensor load(const std::string& bytes) {
  MemoryReader r(bytes);
  return read_npy(r, "x.npy");
}

// Expects an InputError whose message names the file and contains `fragment`.
void expect_bad(const std::string& bytes, const std::string& fragment) {
  try {
    load(bytes);
    ADD_FAILURE() << "accepted; expected an error containing: " << fragment;
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("x.npy"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << "message: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  }
}

TEST(NpyRead, ValidC) {
  auto v = iota_f(12);
  Tensor t = load(npy_file(f4_dict("(3, 4)"), bytes_of(v)));
  ASSERT_EQ(t.dtype(), DType::f32);
  ASSERT_EQ(t.shape(), (Shape{3, 4}));
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(t.data<float>()[i], v[i]);
}

TEST(NpyRead, BadMagic) {
  for (std::string m : {std::string("\x92NUMPY\x01\x00", 8), std::string("\x00NUMPY\x01\x00", 8),
                        std::string("\x93numpy\x01\x00", 8), std::string("\x93MATLB\x01\x00", 8)}) {
    expect_bad(m + std::string(200, ' '), "not an NPY file");
  }
}

TEST(NpyRead, ShortMagic) {
  expect_bad(std::string("\x93NUMPY\x01", 7), "truncated magic");
  expect_bad("\x93NUMPY", "truncated magic");
  expect_bad("\x93NU", "truncated magic");
  expect_bad("", "empty");
}

TEST(NpyRead, Hdf5AndZipAreNamed) {
  expect_bad(std::string("\x89HDF\r\n\x1a\n", 8) + std::string(100, '\0'), "HDF5 file");
  expect_bad(std::string("PK\x03\x04", 4) + std::string(100, '\0'), "ZIP");
}

TEST(NpyRead, BadVersions) {
  for (auto [ma, mi] :
       std::vector<std::pair<int, int>>{{1, 1}, {0, 0}, {0, 1}, {2, 2}, {255, 255}, {4, 0}}) {
    std::string f = npy_file(f4_dict("(1,)"), bytes_of(iota_f(1)));
    f[6] = static_cast<char>(ma);
    f[7] = static_cast<char>(mi);
    expect_bad(f, "unsupported NPY version " + std::to_string(ma) + "." + std::to_string(mi));
  }
}

TEST(NpyRead, HeaderTooLong) {
  std::string f = std::string("\x93NUMPY\x02\x00", 8) + le(0xffffffffu, 4) + "{";
  expect_bad(f, "too large");
  f = std::string("\x93NUMPY\x03\x00", 8) + le(kNpyMaxHeaderLen + 1, 4) + "{";
  expect_bad(f, "too large");
}

TEST(NpyRead, HeaderLengthBeyondData) {
  std::string f = std::string("\x93NUMPY\x01\x00", 8) + le(1000, 2) + f4_dict("(1,)");
  expect_bad(f, "truncated NPY header: expected 1000 bytes");
  expect_bad(std::string("\x93NUMPY\x01\x00", 8) + "\x10", "truncated NPY header");
  // With the file size known, the length is checked before the header is read.
  MemoryReader r(f);
  try {
    read_npy_header(r, "x.npy", f.size());
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("beyond the end of the file"), std::string::npos)
        << e.what();
  }
}

TEST(NpyRead, MalformedDicts) {
  const std::string d = bytes_of(iota_f(4));
  struct Case {
    const char* dict;
    const char* fragment;
  } cases[] = {
      {"{'descr': '<f4', 'shape': (4,), }", "missing key 'fortran_order'"},
      {"{'fortran_order': False, 'shape': (4,), }", "missing key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, }", "missing key 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'extra': 1}",
       "unexpected key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (4,), }",
       "fortran_order must be True or False"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (4,), }",
       "fortran_order must be True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4.0,), }", "shape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': ('4',), }", "shape must hold integers"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 4), }", "negative dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4), }", "shape must be a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [4], }", "shape must be a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'shape': (4,)}", "duplicate key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,) ", "expected ',' or '}'"},
      {"['descr', '<f4']", "expected '{'"},
      {"", "expected '{'"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (4,), }", ""},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), } x", "unexpected text after"},
      {"{descr: '<f4', 'fortran_order': False, 'shape': (4,), }", "quoted key"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.dict);
    expect_bad(npy_file(c.dict, d), c.fragment);
  }
}

TEST(NpyRead, HugeShapesRefusedBeforeAllocating) {
  expect_bad(npy_file(f4_dict("(4611686018427387904, 4)"), ""), "too large");
  expect_bad(npy_file(f4_dict("(4294967296, 4294967296)"), ""), "too large");
  expect_bad(npy_file(f4_dict("(99999999999999999999999,)"), ""), "too large");
  expect_bad(npy_file(f4_dict("(9223372036854775808,)"), ""), "too large");
  // Fits in size_t as elements but not as bytes.
  expect_bad(npy_file(f4_dict("(4611686018427387904,)"), ""), "too large");
  // A plausible header on a tiny stream: the data are simply missing, no huge read.
  expect_bad(npy_file(f4_dict("(1000000000,)"), "abcd"), "truncated data");
  // 400 GB claimed on a short stream: read in slabs, so the error is the truncation,
  // not an allocation failure (C and Fortran order).
  expect_bad(npy_file(f4_dict("(100000000000, 1)"), "abcd"),
             "truncated data: expected 400000000000 bytes, got 4");
  expect_bad(
      npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (100000000000, 1), }", "ab"),
      "truncated data: expected 400000000000 bytes, got 2");
}

TEST(NpyRead, TruncatedAndTrailingData) {
  const std::string d = bytes_of(iota_f(12));
  expect_bad(npy_file(f4_dict("(3, 4)"), d.substr(0, 47)),
             "truncated data: expected 48 bytes, got 47");
  expect_bad(npy_file(f4_dict("(3, 4)"), ""), "truncated data: expected 48 bytes, got 0");
  expect_bad(npy_file(f4_dict("(3, 4)"), d + "x"), "trailing bytes");
  // Known file size: both are found from the header alone.
  for (auto [data, frag] : {std::pair<std::string, std::string>{
                                d.substr(0, 40), "truncated data: expected 48 bytes, got 40"},
                            {d + "xyz", "unexpected 3 trailing bytes"}}) {
    std::string f = npy_file(f4_dict("(3, 4)"), data);
    MemoryReader r(f);
    try {
      read_npy_header(r, "x.npy", f.size());
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << e.what();
    }
  }
}

TEST(NpyRead, UnsupportedDtypes) {
  for (const char* descr : {"|O", "<U3", "|S2", "|V4", "<c8", "<c16", "<f16", "<f12", "<M8[ns]",
                            "<m8", "<i3", "|b2", "f4x", ""}) {
    SCOPED_TRACE(descr);
    std::string dict =
        std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (1,), }";
    expect_bad(npy_file(dict, std::string(16, '\0')),
               std::string("unsupported dtype '") + descr + "'");
  }
  expect_bad(
      npy_file("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (1,), }",
               std::string(8, '\0')),
      "unsupported dtype: structured");
}

TEST(NpyRead, AnyKeyOrderTrailingCommaAndQuotes) {
  const std::string d = bytes_of(iota_f(6));
  const std::vector<std::string> items = {"'descr': '<f4'", "'fortran_order': False",
                                          "'shape': (2, 3)"};
  std::vector<int> order = {0, 1, 2};
  int n = 0;
  do {
    for (bool trailing : {false, true}) {
      std::string dict = "{" + items[order[0]] + ", " + items[order[1]] + ",  " + items[order[2]] +
                         (trailing ? ",}" : "}");
      Tensor t = load(npy_file(dict, d));
      EXPECT_EQ(t.shape(), (Shape{2, 3})) << dict;
      EXPECT_EQ(t.data<float>()[5], iota_f(6)[5]);
      ++n;
    }
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(n, 12);
  Tensor t = load(npy_file("{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2,3,)}", d));
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  t = load(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }", d));
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
}

TEST(NpyRead, ByteSwapped) {
  // Big-endian encodings of known values, written byte by byte.
  std::string be_f4 =
      std::string("\x3f\x80\x00\x00", 4) + std::string("\xc0\x20\x00\x00", 4);  // 1, -2.5
  Tensor t = load(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", be_f4));
  EXPECT_EQ(t.data<float>()[0], 1.0f);
  EXPECT_EQ(t.data<float>()[1], -2.5f);
  std::string be_f8 = std::string("\x40\x09\x21\xfb\x54\x44\x2d\x18", 8);  // pi
  t = load(npy_file("{'descr': '>f8', 'fortran_order': False, 'shape': (), }", be_f8));
  EXPECT_EQ(t.data<double>()[0], 3.141592653589793);
  std::string be_i2 = std::string("\xff\xfe\x01\x02", 4);  // -2, 258
  t = load(npy_file("{'descr': '>i2', 'fortran_order': False, 'shape': (2,), }", be_i2));
  EXPECT_EQ(t.dtype(), DType::i16);
  EXPECT_EQ(t.data<std::int16_t>()[0], -2);
  EXPECT_EQ(t.data<std::int16_t>()[1], 258);
  std::string be_f2 = std::string("\x3c\x00\xc0\x00", 4);  // 1, -2 as binary16
  t = load(npy_file("{'descr': '>f2', 'fortran_order': False, 'shape': (2,), }", be_f2));
  EXPECT_EQ(t.dtype(), DType::f16);
  EXPECT_EQ(half_to_float(t.data<std::uint16_t>()[0]), 1.0f);
  EXPECT_EQ(half_to_float(t.data<std::uint16_t>()[1]), -2.0f);
  std::string be_u8 = std::string("\x00\x00\x00\x01\x00\x00\x00\x02", 8);
  t = load(npy_file("{'descr': '>u8', 'fortran_order': False, 'shape': (1,), }", be_u8));
  EXPECT_EQ(t.data<std::uint64_t>()[0], (std::uint64_t{1} << 32) + 2);
}

TEST(NpyRead, SmallIntAndBoolTypes) {
  std::string b("\x01\x00\x01", 3);
  Tensor t = load(npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", b));
  EXPECT_EQ(t.dtype(), DType::b1);
  EXPECT_EQ(t.get(0), 1.0);
  EXPECT_EQ(t.get(1), 0.0);
  t = load(npy_file("{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }",
                    std::string("\xff\x00\x7f", 3)));
  EXPECT_EQ(t.dtype(), DType::i8);
  EXPECT_EQ(t.get(0), -1.0);
  EXPECT_EQ(t.get(2), 127.0);
  t = load(npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }",
                    std::string("\xff\x00\x7f", 3)));
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(t.get(0), 255.0);
}

TEST(NpyRead, Versions2And3) {
  auto v = iota_f(6);
  for (int major : {2, 3}) {
    Tensor t = load(npy_file(f4_dict("(6,)"), bytes_of(v), major));
    ASSERT_EQ(t.shape(), (Shape{6}));
    EXPECT_EQ(t.data<float>()[4], v[4]);
  }
  // A v1 length read as u16 and a length whose low byte has the high bit set (the
  // signed-char bug of xtensor's reader).
  std::string dict = f4_dict("(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6)");
  std::string f = npy_file(dict + std::string(60, ' '), bytes_of(v));
  ASSERT_GE(static_cast<unsigned char>(f[8]), 0x80);
  Tensor t = load(f);
  EXPECT_EQ(t.numel(), 6u);
  EXPECT_EQ(t.ndim(), 15u);
}

TEST(NpyRead, FortranOrderTransposed) {
  // shape (2, 3, 4); Fortran data lists element (i, j, k) at i + 2 j + 6 k.
  std::vector<double> fdata(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) fdata[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
  Tensor t = load(
      npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3, 4), }", bytes_of(fdata)));
  ASSERT_EQ(t.shape(), (Shape{2, 3, 4}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(t.data<double>()[12 * i + 4 * j + k], 100 * i + 10 * j + k);
  // Big-endian and Fortran together.
  std::vector<std::uint16_t> be = {0x0100, 0x0200, 0x0300, 0x0400, 0x0500, 0x0600};  // 1..6 as >i2
  t = load(npy_file("{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }", bytes_of(be)));
  const std::int16_t want[6] = {1, 3, 5, 2, 4, 6};
  for (int n = 0; n < 6; ++n) EXPECT_EQ(t.data<std::int16_t>()[n], want[n]);
}

TEST(NpyRead, RankZeroAndZeroSize) {
  std::vector<float> one = {42.5f};
  Tensor t = load(npy_file(f4_dict("()"), bytes_of(one)));
  EXPECT_EQ(t.ndim(), 0u);
  EXPECT_EQ(t.numel(), 1u);
  EXPECT_EQ(t.data<float>()[0], 42.5f);
  for (const char* s : {"(0,)", "(2, 0, 3)", "(0, 5)"}) {
    t = load(npy_file(f4_dict(s), ""));
    EXPECT_EQ(t.numel(), 0u) << s;
  }
  expect_bad(npy_file(f4_dict("(0, 5)"), "x"), "trailing bytes");
  expect_bad(npy_file(f4_dict("()"), ""), "truncated data: expected 4 bytes, got 0");
}

TEST(NpyRead, RandomShortReads) {
  // Like numpy's test_roundtrip_randsize: a reader returning random short counts.
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 50; ++trial) {
    std::size_t rows = trial % 7, cols = 1 + trial % 5;
    std::vector<double> v(rows * cols);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i + trial));
    std::string dict =
        "{'descr': '<f8', 'fortran_order': " + std::string(trial % 3 ? "False" : "True") +
        ", 'shape': (" + std::to_string(rows) + ", " + std::to_string(cols) + "), }";
    std::string f = npy_file(dict, bytes_of(v), 1 + trial % 3);
    MemoryReader r(f, 1 + trial % 13, &rng);
    Tensor t = read_npy(r, "x.npy");
    ASSERT_EQ(t.shape(), (Shape{rows, cols}));
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) {
        double want = trial % 3 ? v[i * cols + j] : v[i + rows * j];
        ASSERT_EQ(t.data<double>()[i * cols + j], want);
      }
  }
}

TEST(NpyStream, RowSlabsForwardOnly) {
  auto v = iota_f(20);
  std::string f = npy_file(f4_dict("(5, 4)"), bytes_of(v));
  auto src = open_npy_stream(std::make_unique<MemoryReader>(f, 3), "x.npy");
  EXPECT_FALSE(src->seekable());
  EXPECT_EQ(src->info().shape, (Shape{5, 4}));
  EXPECT_EQ(src->info().storage, "NPY 1.0, C order, little-endian");
  std::vector<float> rows(8);
  src->read_rows(1, 2, rows.data());  // skips row 0
  EXPECT_EQ(rows[0], v[4]);
  EXPECT_EQ(rows[7], v[11]);
  EXPECT_THROW(src->read_rows(0, 1, rows.data()), InputError);
  src->read_rows(3, 2, rows.data());
  EXPECT_EQ(rows[7], v[19]);
  EXPECT_THROW(src->read_rows(5, 1, rows.data()), InputError);
}

TEST(NpyWrite, HeaderLayout) {
  // numpy 1.24: "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }" + 20 growth
  // spaces, padded so that the data start at byte 128.
  std::string h = npy_header_bytes(DType::f32, {3, 4}, "x.npy");
  ASSERT_EQ(h.size(), 128u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8), 118);
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
  EXPECT_EQ(h.substr(10, dict.size()), dict);
  EXPECT_EQ(h.substr(10 + dict.size(), 20), std::string(20, ' '));  // growth padding
  EXPECT_EQ(h.back(), '\n');
  const std::string dict0 = "{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
  EXPECT_EQ(npy_header_bytes(DType::f64, {}, "x").substr(10, dict0.size() + 1), dict0 + " ");
  EXPECT_EQ(npy_header_bytes(DType::f64, {}, "x").size(), 128u);
  EXPECT_NE(npy_header_bytes(DType::u8, {7}, "x").find("'descr': '|u1'"), std::string::npos);
  EXPECT_NE(npy_header_bytes(DType::b1, {7}, "x").find("'shape': (7,), }"), std::string::npos);
  for (std::size_t nd = 0; nd < 40; ++nd) {
    Shape s(nd, 1);
    if (nd) s[0] = 12345;
    std::string hb = npy_header_bytes(DType::f16, s, "x");
    EXPECT_EQ(hb.size() % 64, 0u);
    MemoryReader r(hb + std::string(2 * checked_numel(s, 2, "x"), '\0'));
    NpyHeader parsed = read_npy_header(r, "x");
    EXPECT_EQ(parsed.shape, s);
    EXPECT_EQ(parsed.dtype, DType::f16);
    EXPECT_EQ(parsed.data_offset, hb.size());
  }
}

TEST(NpyWrite, Version2ForHugeHeaders) {
  Shape s(25000, 1);
  std::string h = npy_header_bytes(DType::f32, s, "x");
  EXPECT_EQ(h[6], '\x02');
  EXPECT_EQ(h.size() % 64, 0u);
  MemoryReader r(h + std::string(4, '\0'));
  EXPECT_EQ(read_npy_header(r, "x").shape.size(), 25000u);
}

TEST(NpyWrite, Bf16IsRefused) {
  try {
    npy_header_bytes(DType::bf16, {2}, "out.npy");
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("out.npy: NPY has no bfloat16"), std::string::npos);
  }
}

// Slabs along the first axis whose extent is not 1: with leading unit axes they are
// consecutive byte ranges of the C-order data, from files, streams and Fortran order.
TEST(NpySlab, SlabAxisSkipsLeadingUnitAxes) {
  EXPECT_EQ(slab_axis(Shape{}), 0u);
  EXPECT_EQ(slab_axis(Shape{5, 4}), 0u);
  EXPECT_EQ(slab_axis(Shape{1, 6, 2, 3}), 1u);
  EXPECT_EQ(slab_axis(Shape{1, 1, 6, 3}), 2u);
  EXPECT_EQ(slab_axis(Shape{1, 1, 1}), 2u);
  EXPECT_EQ(slab_axis(Shape{1, 0, 3}), 1u);
}

TEST(NpySlab, StreamReadsEntriesAlongTheSlabAxis) {
  auto v = iota_f(36);  // [1, 6, 2, 3]: an entry along axis 1 is 6 floats
  std::string f = npy_file(f4_dict("(1, 6, 2, 3)"), bytes_of(v));
  auto src = open_npy_stream(std::make_unique<MemoryReader>(f, 5), "x.npy");
  std::vector<float> buf(18);
  src->read_slab(1, 1, 2, buf.data());  // skips entry 0
  for (std::size_t i = 0; i < 12; ++i) ASSERT_EQ(buf[i], v[6 + i]);
  EXPECT_THROW(src->read_slab(1, 0, 1, buf.data()), InputError);  // backwards
  EXPECT_THROW(src->read_slab(1, 4, 3, buf.data()), InputError);  // past the end
  src->read_slab(1, 3, 3, buf.data());
  for (std::size_t i = 0; i < 18; ++i) ASSERT_EQ(buf[i], v[18 + i]);
  // Axis 2 is not allowed: axis 1 does not have extent 1.
  EXPECT_THROW(src->read_slab(2, 0, 1, buf.data()), std::logic_error);
}

TEST(NpySlab, FortranAndBigEndianSlabsMatchRows) {
  // A [1, 4, 3] array stored in Fortran order and big-endian: slabs along axis 1 are
  // the C-order rows of the transposed data in native byte order.
  std::vector<float> c(12);
  for (std::size_t i = 0; i < 12; ++i) c[i] = static_cast<float>(i) * 1.5f - 4.0f;
  std::vector<float> fo(12);
  for (std::size_t j = 0; j < 4; ++j)
    for (std::size_t k = 0; k < 3; ++k) fo[j + 4 * k] = c[j * 3 + k];
  std::string data = bytes_of(fo);
  for (std::size_t i = 0; i < data.size(); i += 4) {
    std::reverse(data.begin() + static_cast<std::ptrdiff_t>(i),
                 data.begin() + static_cast<std::ptrdiff_t>(i + 4));
  }
  std::string f = npy_file("{'descr': '>f4', 'fortran_order': True, 'shape': (1, 4, 3), }", data);
  auto src = open_npy_stream(std::make_unique<MemoryReader>(f, 7), "x.npy");
  std::vector<float> buf(6);
  src->read_slab(1, 2, 2, buf.data());
  for (std::size_t i = 0; i < 6; ++i) ASSERT_EQ(buf[i], c[6 + i]);
}

}  // namespace
}  // namespace posenc
