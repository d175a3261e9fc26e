// numpy basic slicing of stored tensors (posenc/slice.hpp), against index arithmetic
// written out by hand.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/slice.hpp"

namespace posenc {
namespace {

TEST(Slice, ResolvesLikeNumpy) {
  Selection s = resolve_slice("1, ::-2, -1", Shape{3, 5, 4});
  EXPECT_EQ(s.shape, (Shape{3}));
  EXPECT_EQ(s.idx[0], (std::vector<std::size_t>{1}));
  EXPECT_EQ(s.idx[1], (std::vector<std::size_t>{4, 2, 0}));
  EXPECT_EQ(s.idx[2], (std::vector<std::size_t>{3}));
  s = resolve_slice("...,1:3", Shape{2, 3, 4});
  EXPECT_EQ(s.shape, (Shape{2, 3, 2}));
  s = resolve_slice("", Shape{2, 3});
  EXPECT_EQ(s.shape, (Shape{2, 3}));
  EXPECT_EQ(s.numel, 6u);
  s = resolve_slice("10:20", Shape{4});  // slices clamp
  EXPECT_EQ(s.numel, 0u);
}

TEST(Slice, Errors) {
  EXPECT_THROW(check_slice("0,,1"), UsageError);
  EXPECT_THROW(check_slice("1:2:3:4"), UsageError);
  EXPECT_THROW(check_slice("::0"), UsageError);
  EXPECT_THROW(check_slice("...,..."), UsageError);
  EXPECT_THROW(check_slice("a"), UsageError);
  EXPECT_THROW(resolve_slice("4", Shape{4}), InputError);
  EXPECT_THROW(resolve_slice("0,0,0", Shape{4, 4}), InputError);
}

TEST(Slice, ReadsOnlyTheSelection) {
  // A [1, 6, 5] tensor streams along its second axis; select rows 5, 3, 1 and cols 1, 3.
  Tensor t(DType::f32, Shape{1, 6, 5});
  for (std::size_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(i));
  const std::string path = ::testing::TempDir() + "posenc_slice_test.npy";
  const TensorRef ref = parse_ref(path);
  write_tensor(ref, t);
  auto src = open_source(ref);
  const Selection sel = resolve_slice("0, ::-2, 1::2", t.shape());
  const Tensor got = read_selection(*src, sel, path);
  std::remove(path.c_str());
  ASSERT_EQ(got.shape(), (Shape{3, 2}));
  const double want[] = {26, 28, 16, 18, 6, 8};  // row r, col c = r * 5 + c
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(got.get(i), want[i]) << i;
}

}  // namespace
}  // namespace posenc
