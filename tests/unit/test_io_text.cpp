// Text encodings: exact round trips, formatting and input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "posenc/error.hpp"
#include "posenc/io/text.hpp"

namespace posenc {
namespace {

Tensor vec_f32(std::vector<float> v, Shape s) {
  Tensor t(DType::f32, s);
  std::memcpy(t.bytes(), v.data(), v.size() * 4);
  return t;
}

TEST(TextTest, FloatsAreShortestInTheirOwnType) {
  Tensor t = vec_f32({0.1f, 1.0f, -2.5f, 1e-8f, 3.4028235e38f}, {5});
  EXPECT_EQ(encode_text(Format::csv, t), "0.1\n1\n-2.5\n1e-08\n3.4028235e+38\n");
  Tensor d(DType::f64, {1});
  d.set(0, 0.1);
  EXPECT_EQ(encode_text(Format::csv, d), "0.1\n");
}

TEST(TextTest, CsvTsvGridAndNonFinite) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  float inf = std::numeric_limits<float>::infinity();
  Tensor t = vec_f32({1, nan, -inf, inf, -0.0f, 2}, {2, 3});
  EXPECT_EQ(encode_text(Format::csv, t), "1,nan,-inf\ninf,-0,2\n");
  EXPECT_EQ(encode_text(Format::tsv, t), "1\tnan\t-inf\ninf\t-0\t2\n");
  Tensor back = decode_text(Format::csv, encode_text(Format::csv, t), "t.csv");
  ASSERT_EQ(back.shape(), (Shape{2, 3}));
  EXPECT_TRUE(std::isnan(back.get(1)));
  EXPECT_EQ(back.get(2), -INFINITY);
  EXPECT_TRUE(std::signbit(back.get(4)));
}

TEST(TextTest, CsvRejectsRank3) {
  Tensor t(DType::f32, {2, 2, 2});
  EXPECT_THROW(encode_text(Format::csv, t), UsageError);
}

TEST(TextTest, IntegersKeepAllBits) {
  Tensor t(DType::u64, {2});
  t.data<std::uint64_t>()[0] = std::numeric_limits<std::uint64_t>::max();
  t.data<std::uint64_t>()[1] = 3;
  EXPECT_EQ(encode_text(Format::csv, t), "18446744073709551615\n3\n");
  Tensor back = decode_text(Format::json, encode_text(Format::json, t), "t.json");
  EXPECT_EQ(back.dtype(), DType::u64);
  EXPECT_EQ(back.data<std::uint64_t>()[0], std::numeric_limits<std::uint64_t>::max());
}

TEST(TextTest, JsonRoundTripWithAttrs) {
  Tensor t =
      vec_f32({1.5f, std::numeric_limits<float>::quiet_NaN(), -INFINITY, 0.1f, 2, 3}, {3, 1, 2});
  std::string s = encode_text(Format::json, t, {{"base", 10000.0}, {"style", std::string("neox")}});
  EXPECT_NE(s.find("\"NaN\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"-Infinity\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"style\": \"neox\""), std::string::npos) << s;
  Tensor back = decode_text(Format::json, s, "t.json");
  EXPECT_EQ(back.dtype(), DType::f32);
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(back.get(0), 1.5);
  EXPECT_TRUE(std::isnan(back.get(1)));
  EXPECT_EQ(back.get(3), static_cast<double>(0.1f));
}

TEST(TextTest, JsonScalarBoolAndFlatData) {
  Tensor b(DType::b1, {2});
  b.set(0, 1);
  b.set(1, 0);
  EXPECT_NE(encode_text(Format::json, b).find("[true, false]"), std::string::npos);
  Tensor s = decode_text(Format::json, R"({"shape": [], "dtype": "f64", "data": 2.5})", "s");
  EXPECT_TRUE(s.shape().empty());
  EXPECT_EQ(s.get(0), 2.5);
  Tensor f = decode_text(Format::json, R"({"shape": [2, 2], "data": [1, 2, 3, 4]})", "f");
  EXPECT_EQ(f.shape(), (Shape{2, 2}));
  EXPECT_EQ(f.get(3), 4.0);
}

void expect_error(Format f, const std::string& content, const std::string& part) {
  try {
    decode_text(f, content, "in.txt");
    ADD_FAILURE() << "no error for " << content;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(TextTest, DecodeErrorsSayWhere) {
  expect_error(Format::csv, "1,2\n3,x\n", "line 2, column 3: 'x' is not a number");
  expect_error(Format::csv, "1,2\n3,4,5\n", "line 2 has 3 values, line 1 has 2");
  expect_error(Format::csv, "1,,2\n", "empty value");
  expect_error(Format::json, "{\"data\": [1, 2", "invalid JSON");
  expect_error(Format::json, "{\"data\": [[1, 2], [3]]}", "expected a list of 2");
  expect_error(Format::json, "{\"data\": [\"abc\"]}", "not a number");
  expect_error(Format::json, "{\"dtype\": \"i8\", \"data\": [300]}", "out of range");
  expect_error(Format::json, "{\"dtype\": \"i8\", \"data\": [1.5]}", "not an integer");
  expect_error(Format::json, "{\"shape\": [3], \"data\": [1, 2]}", "expected a list of 3");
}

TEST(TextTest, CsvShapes) {
  EXPECT_EQ(decode_text(Format::csv, "1\n2\n3\n", "c").shape(), (Shape{3}));
  EXPECT_EQ(decode_text(Format::csv, "# header\n1,2,3\n\n", "c").shape(), (Shape{1, 3}));
  EXPECT_EQ(decode_text(Format::tsv, "1\t2\r\n3\t+4\r\n", "c").shape(), (Shape{2, 2}));
  EXPECT_EQ(decode_text(Format::csv, "", "c").shape(), (Shape{0}));
}

TEST(TextTest, TableIsAlignedAndSummarised) {
  Tensor t = vec_f32({1, -22.5f, 3, 4}, {2, 2});
  EXPECT_EQ(encode_text(Format::text, t),
            "# shape (2, 2), f32\n"
            "   0      1\n"
            "0  1  -22.5\n"
            "1  3      4\n");
  Tensor big(DType::f32, {4, 50, 50});
  for (std::size_t i = 0; i < big.numel(); ++i) big.set(i, static_cast<double>(i));
  std::string b = encode_text(Format::text, big);
  EXPECT_NE(b.find("showing the first and last 3"), std::string::npos);
  EXPECT_NE(b.find("[0, :, :]"), std::string::npos);
  EXPECT_NE(b.find("[3, :, :]"), std::string::npos);
  EXPECT_LT(b.size(), 3000u);
  EXPECT_NE(b.find("9999"), std::string::npos);  // the very last value
}

}  // namespace
}  // namespace posenc
