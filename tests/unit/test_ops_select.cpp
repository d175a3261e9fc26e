// numpy basic slicing (ops/select.hpp) against Python's slice rules written out from
// the language reference in 128-bit arithmetic, and strided views against a gather by
// explicit index lists. tests/cli/test_inspect_slices.py checks the same against numpy.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "posenc/error.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/ops/stats.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

__extension__ typedef __int128 I128;  // GCC/Clang: no overflow in the reference
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

// The reference: "The slice of s from i to j with step k is the sequence of items with
// index x = i + n*k ... i and j are reduced to len(s) (len(s) - 1 when k < 0) if
// greater; negative i or j count from the end; omitted ones become the end values",
// walked one index at a time with integers that cannot overflow.
std::vector<std::size_t> reference_range(std::optional<std::int64_t> start,
                                         std::optional<std::int64_t> stop, std::int64_t step,
                                         std::size_t len) {
  const I128 n = len, k = step;
  auto adjust = [&](I128 v, I128 lo, I128 hi) {
    if (v < 0) v += n;
    return v < lo ? lo : v > hi ? hi : v;
  };
  std::vector<std::size_t> out;
  if (k > 0) {
    const I128 i = start ? adjust(*start, 0, n) : 0, j = stop ? adjust(*stop, 0, n) : n;
    for (I128 x = i; x < j; x += k) out.push_back(static_cast<std::size_t>(x));
  } else {
    const I128 i = start ? adjust(*start, -1, n - 1) : n - 1;
    const I128 j = stop ? adjust(*stop, -1, n - 1) : -1;
    for (I128 x = i; x > j; x += k) out.push_back(static_cast<std::size_t>(x));
  }
  return out;
}

std::vector<std::size_t> indices_of(const AxisSelection& a) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < a.size; ++i) {
    out.push_back(static_cast<std::size_t>(static_cast<I128>(a.start) + I128(i) * a.step));
  }
  return out;
}

SliceItem range(std::optional<std::int64_t> start, std::optional<std::int64_t> stop,
                std::int64_t step = 1) {
  SliceItem it;
  it.start = start;
  it.stop = stop;
  it.step = step;
  return it;
}

SliceItem index(std::int64_t i) {
  SliceItem it;
  it.kind = SliceItem::Kind::index;
  it.index = i;
  return it;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SliceParse, ReadsNumpySyntax) {
  SliceSpec s = parse_slice(" [0, :, :4, -2::-3, ...] ");
  ASSERT_EQ(s.items.size(), 5u);
  EXPECT_EQ(s.items[0].kind, SliceItem::Kind::index);
  EXPECT_EQ(s.items[0].index, 0);
  EXPECT_EQ(s.items[1].kind, SliceItem::Kind::range);
  EXPECT_FALSE(s.items[1].start || s.items[1].stop);
  EXPECT_EQ(s.items[2].stop, 4);
  EXPECT_EQ(s.items[3].start, -2);
  EXPECT_FALSE(s.items[3].stop);
  EXPECT_EQ(s.items[3].step, -3);
  EXPECT_EQ(s.items[4].kind, SliceItem::Kind::ellipsis);
  EXPECT_TRUE(parse_slice("  ").items.empty());
  EXPECT_EQ(parse_slice("+3").items[0].index, 3);
  // Bounds and steps beyond int64 saturate as CPython's do.
  s = parse_slice("99999999999999999999:-99999999999999999999:-99999999999999999999");
  EXPECT_EQ(s.items[0].start, kMax);
  EXPECT_EQ(s.items[0].stop, kMin);
  EXPECT_EQ(s.items[0].step, kMin);
  EXPECT_EQ(parse_slice("::9223372036854775807").items[0].step, kMax);
}

TEST(SliceParse, RefusesBadSyntaxAsUsageError) {
  for (const char* bad : {"0,,1", "1:2:3:4", "::0", "x", "...,...", "1e3", "+-5", "1 2", ":a",
                          "99999999999999999999"}) {
    EXPECT_THROW(parse_slice(bad), UsageError) << bad;
    EXPECT_EQ(message_of([&] { parse_slice(bad); }).rfind(std::string("slice '") + bad + "'", 0),
              0u)
        << bad;
  }
}

TEST(SliceResolve, RangesFollowPythonForEveryBoundAndStep) {
  const std::vector<std::optional<std::int64_t>> bounds = {std::nullopt,
                                                           0,
                                                           1,
                                                           2,
                                                           3,
                                                           5,
                                                           6,
                                                           7,
                                                           8,
                                                           11,
                                                           -1,
                                                           -2,
                                                           -3,
                                                           -6,
                                                           -7,
                                                           -8,
                                                           -12,
                                                           kMax,
                                                           kMin,
                                                           kMax - 1,
                                                           kMin + 1,
                                                           std::int64_t{1} << 62,
                                                           -(std::int64_t{1} << 62)};
  const std::vector<std::int64_t> steps = {1,  2,  3,  5,  7,    kMax,     kMax - 1,
                                           -1, -2, -3, -7, kMin, kMin + 1, -(kMax / 2)};
  for (std::size_t n : {0, 1, 2, 3, 7}) {
    for (const auto& start : bounds) {
      for (const auto& stop : bounds) {
        for (std::int64_t step : steps) {
          const Selection sel = resolve_selection(SliceSpec{"", {range(start, stop, step)}}, {n});
          const AxisSelection& a = sel.axes[0];
          const auto want = reference_range(start, stop, step, n);
          ASSERT_EQ(indices_of(a), want) << "n=" << n << " start=" << start.value_or(-999)
                                         << " stop=" << stop.value_or(-999) << " step=" << step;
          EXPECT_EQ(sel.shape, Shape{want.size()});
          // A step that could overflow a stride product is never handed on.
          if (a.size >= 2) {
            EXPECT_LT(static_cast<std::size_t>(a.step < 0 ? -a.step : a.step), n);
          } else {
            EXPECT_EQ(a.step, 1);
          }
        }
      }
    }
  }
}

TEST(SliceResolve, IndicesEllipsisAndAxisCount) {
  const Shape shape{3, 4, 5};
  Selection s = resolve_selection(parse_slice("-1, ..., 2"), shape);
  EXPECT_EQ(s.shape, (Shape{4}));
  EXPECT_EQ(s.axes[0].start, 2u);
  EXPECT_TRUE(s.axes[0].drop);
  EXPECT_EQ(s.axes[2].start, 2u);
  EXPECT_EQ(s.numel, 4u);
  // "..." may stand for no axis at all; missing trailing entries take whole axes.
  EXPECT_EQ(resolve_selection(parse_slice("0, 1, ..., 2"), shape).shape, Shape{});
  EXPECT_EQ(resolve_selection(parse_slice("1"), shape).shape, (Shape{4, 5}));
  EXPECT_EQ(resolve_selection(parse_slice(""), Shape{}).numel, 1u);
  EXPECT_EQ(resolve_selection(parse_slice("..."), Shape{}).numel, 1u);
  EXPECT_EQ(message_of([&] { resolve_selection(parse_slice("0,4"), shape); }),
            "slice '0,4': index 4 is out of range for axis 1 with size 4");
  EXPECT_THROW(resolve_selection(parse_slice("-4"), shape), InputError);
  EXPECT_THROW(resolve_selection(parse_slice(std::to_string(kMin)), shape), InputError);
  EXPECT_THROW(resolve_selection(parse_slice(std::to_string(kMax)), shape), InputError);
  EXPECT_EQ(message_of([&] { resolve_selection(parse_slice("0,0,0,0"), shape); }),
            "slice '0,0,0,0': 4 axes given for shape (3, 4, 5)");
  // Built in code, the message spells the items.
  EXPECT_EQ(message_of([&] {
              resolve_selection(SliceSpec{"", {index(0), range(1, 2, -1)}}, {2});
            }),
            "slice '0,1:2:-1': 2 axes given for shape (2,)");
}

// The selected elements by explicit index lists: the reference for the views.
Tensor gather(const Tensor& t, const Selection& sel) {
  std::vector<std::vector<std::size_t>> idx;
  for (const auto& a : sel.axes) idx.push_back(indices_of(a));
  Tensor out(t.dtype(), sel.shape);
  const std::size_t item = dtype_size(t.dtype());
  std::vector<std::size_t> pos(idx.size(), 0);
  for (std::size_t k = 0; k < sel.numel; ++k) {
    std::size_t flat = 0;
    for (std::size_t ax = 0; ax < idx.size(); ++ax) flat = flat * t.shape()[ax] + idx[ax][pos[ax]];
    std::memcpy(out.bytes() + k * item, t.bytes() + flat * item, item);
    for (std::size_t ax = idx.size(); ax-- > 0;) {  // odometer, last axis fastest
      if (++pos[ax] < idx[ax].size()) break;
      pos[ax] = 0;
    }
  }
  return out;
}

std::optional<std::int64_t> random_bound(std::mt19937_64& rng, std::size_t n) {
  const int sn = static_cast<int>(n);
  switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
    case 0:
      return std::nullopt;
    case 1:
      return std::uniform_int_distribution<int>(0, 1)(rng) ? kMax : kMin;
    default:
      return std::uniform_int_distribution<int>(-2 * sn - 2, 2 * sn + 2)(rng);
  }
}

SliceSpec random_spec(std::mt19937_64& rng, const Shape& shape) {
  SliceSpec spec;
  for (std::size_t n : shape) {
    const int kind = std::uniform_int_distribution<int>(0, 4)(rng);
    if (kind == 0 && n > 0) {
      spec.items.push_back(index(
          std::uniform_int_distribution<std::int64_t>(-std::int64_t(n), std::int64_t(n) - 1)(rng)));
    } else {
      const std::int64_t steps[] = {1, 1, 2, 3, -1, -1, -2, -3, kMax, kMin};
      spec.items.push_back(range(random_bound(rng, n), random_bound(rng, n),
                                 steps[std::uniform_int_distribution<int>(0, 9)(rng)]));
    }
  }
  return spec;
}

template <class T>
Tensor iota(DType t, const Shape& shape) {
  Tensor x(t, shape);
  for (std::size_t i = 0; i < x.numel(); ++i) x.data<T>()[i] = static_cast<T>(i * 2654435761u);
  return x;
}

TEST(SliceView, StridedViewsEqualTheGatherByIndexLists) {
  std::mt19937_64 rng(11);
  std::vector<Tensor> tensors;
  tensors.push_back(iota<float>(DType::f32, {4, 5, 6}));
  tensors.push_back(iota<std::int64_t>(DType::i64, {3, 1, 7, 2}));
  tensors.push_back(iota<std::uint16_t>(DType::f16, {9}));
  tensors.push_back(iota<std::uint8_t>(DType::u8, {2, 0, 3}));
  tensors.push_back(iota<double>(DType::f64, {}));
  for (const Tensor& t : tensors) {
    for (int round = 0; round < 300; ++round) {
      const SliceSpec spec = random_spec(rng, t.shape());
      const Selection sel = resolve_selection(spec, t.shape());
      const Tensor got = select(t, sel), want = gather(t, sel);
      ASSERT_EQ(got.shape(), want.shape());
      ASSERT_EQ(0, std::memcmp(got.bytes(), want.bytes(), want.nbytes()));
      // contiguous_offset: exactly when the source positions are one run.
      const auto off = contiguous_offset(sel);
      Tensor pos = gather(iota<std::uint64_t>(DType::u64, t.shape()), sel);
      bool run = true;
      for (std::size_t i = 1; i < pos.numel(); ++i) {
        run = run && pos.data<std::uint64_t>()[i] == pos.data<std::uint64_t>()[i - 1] + 2654435761u;
      }
      EXPECT_EQ(off.has_value(), run);
      if (off && pos.numel() > 0) {
        EXPECT_EQ(pos.data<std::uint64_t>()[0], *off * 2654435761u);
      }
    }
  }
}

TEST(SliceView, EmptyReversedRangeIsEmpty) {
  // xtensor 0.24's own range normalisation gives a[8:-1:-1] an extent of 2^64 - 1.
  const Tensor t = iota<float>(DType::f32, {10});
  const Selection sel = resolve_selection(parse_slice("8:-1:-1"), t.shape());
  EXPECT_EQ(sel.shape, Shape{0});
  EXPECT_EQ(select(t, sel).numel(), 0u);
  const Selection all = resolve_selection(parse_slice("::-1"), t.shape());
  const Tensor r = select(t, all);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(r.get(i), t.get(9 - i));
  EXPECT_THROW(select(t, resolve_selection(parse_slice(":"), {9})), std::invalid_argument);
}

TEST(Unravel, MatchesCOrder) {
  EXPECT_EQ(unravel_index(23, {2, 3, 4}), (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_EQ(unravel_index(5, {2, 3, 4}), (std::vector<std::size_t>{0, 1, 1}));
  EXPECT_EQ(unravel_index(0, {}), std::vector<std::size_t>{});
  for (std::size_t f = 0; f < 60; ++f) {
    auto i = unravel_index(f, {3, 4, 5});
    EXPECT_EQ((i[0] * 4 + i[1]) * 5 + i[2], f);
  }
}

// --- index lists -------------------------------------------------------------------------

SliceItem list(std::vector<std::int64_t> v) {
  SliceItem it;
  it.kind = SliceItem::Kind::list;
  it.list = std::move(v);
  return it;
}

TEST(SliceLists, Parse) {
  SliceSpec s = parse_slice("1, [1, 100] ,0");
  ASSERT_EQ(s.items.size(), 3u);
  EXPECT_EQ(s.items[0].kind, SliceItem::Kind::index);
  EXPECT_EQ(s.items[1].kind, SliceItem::Kind::list);
  EXPECT_EQ(s.items[1].list, (std::vector<std::int64_t>{1, 100}));
  EXPECT_EQ(s.items[2].index, 0);
  // Brackets around the whole text are numpy's a[...]: "[1,100]" is two integers.
  s = parse_slice("[1,100]");
  ASSERT_EQ(s.items.size(), 2u);
  EXPECT_EQ(s.items[0].kind, SliceItem::Kind::index);
  s = parse_slice(" [[1,-100]] ");
  ASSERT_EQ(s.items.size(), 1u);
  EXPECT_EQ(s.items[0].list, (std::vector<std::int64_t>{1, -100}));
  s = parse_slice("[0,1],[2,3]");
  ASSERT_EQ(s.items.size(), 2u);
  EXPECT_EQ(s.items[1].list, (std::vector<std::int64_t>{2, 3}));
  s = parse_slice("[[0,1],2]");
  ASSERT_EQ(s.items.size(), 2u);
  EXPECT_EQ(s.items[0].kind, SliceItem::Kind::list);
  EXPECT_TRUE(parse_slice("[ ], ...").items[0].list.empty());
  EXPECT_EQ(parse_slice("[-9223372036854775808]").items[0].index, kMin);
  EXPECT_EQ(parse_slice("0,[-9223372036854775808]").items[1].list[0], kMin);
  for (const char* bad :
       {"[1", "1]", "0,[1,2", "0,[[1]]", "[[1]],2", "0,[1:2]", "0,[1,,2]", "0,[,]", "0,x[1]",
        "0,[1]x", "0,[1]:2", "0,[99999999999999999999]", "0,[a]"}) {
    EXPECT_THROW(parse_slice(bad), UsageError) << bad;
    EXPECT_EQ(message_of([&] { parse_slice(bad); }).rfind(std::string("slice '") + bad + "'", 0),
              0u)
        << bad;
  }
}

TEST(SliceLists, ResolveAndRangeCheck) {
  const Shape shape{3, 4, 5};
  Selection s = resolve_selection(parse_slice("1,[3,0,3,-1],0"), shape);
  EXPECT_EQ(s.shape, Shape{4});
  EXPECT_EQ(s.axes[1].indices, (std::vector<std::size_t>{3, 0, 3, 3}));
  // Evenly spaced lists are ranges (views and contiguous runs still apply).
  s = resolve_selection(parse_slice("0,[1,2,3],[4,2,0]"), shape);
  EXPECT_TRUE(s.axes[1].indices.empty());
  EXPECT_EQ(s.axes[1].start, 1u);
  EXPECT_EQ(s.axes[1].step, 1);
  EXPECT_EQ(s.axes[2].step, -2);
  EXPECT_FALSE(has_index_list(s));
  EXPECT_EQ(contiguous_offset(resolve_selection(parse_slice("2,[1,2]"), shape)), 2u * 20 + 5);
  s = resolve_selection(parse_slice("[], ..."), shape);
  EXPECT_EQ(s.shape, (Shape{0, 4, 5}));
  EXPECT_EQ(s.numel, 0u);
  EXPECT_EQ(resolve_selection(parse_slice("[[-3]]"), shape).shape, (Shape{1, 4, 5}));
  EXPECT_EQ(message_of([&] { resolve_selection(parse_slice("0,[1,4]"), shape); }),
            "slice '0,[1,4]': index 4 is out of range for axis 1 with size 4");
  for (std::int64_t bad : {std::int64_t{-4}, std::int64_t{3}, kMax, kMin}) {
    const SliceSpec spec{"", {list({0, bad})}};
    EXPECT_THROW(resolve_selection(spec, shape), InputError) << bad;
  }
  EXPECT_EQ(message_of([&] {
              resolve_selection(SliceSpec{"", {index(0), list({9, 1})}}, shape);
            }),
            "slice '0,[9,1]': index 9 is out of range for axis 1 with size 4");
  EXPECT_THROW(strided_slices(resolve_selection(parse_slice("0,[1,0,2]"), shape)),
               std::invalid_argument);
}

// Reference: the source indices of each kept axis straight from the spec, then every
// combination in C order (outer indexing).
TEST(SliceLists, SelectAndSourceIndexMatchOuterIndexing) {
  std::mt19937_64 rng(12);
  const Tensor t = iota<std::int64_t>(DType::i64, {4, 6, 5});
  for (int round = 0; round < 400; ++round) {
    SliceSpec spec;
    std::vector<std::vector<std::size_t>> want_idx;  // per source axis
    std::vector<bool> drop;
    for (std::size_t n : t.shape()) {
      const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
      const auto pick = [&] {
        return std::uniform_int_distribution<std::int64_t>(-std::int64_t(n),
                                                           std::int64_t(n) - 1)(rng);
      };
      const auto norm = [&](std::int64_t v) {
        return std::size_t(v < 0 ? v + std::int64_t(n) : v);
      };
      if (kind == 0) {
        const std::int64_t i = pick();
        spec.items.push_back(index(i));
        want_idx.push_back({norm(i)});
        drop.push_back(true);
      } else if (kind == 1) {
        spec.items.push_back(range(std::nullopt, std::nullopt, -1));
        std::vector<std::size_t> v;
        for (std::size_t i = n; i-- > 0;) v.push_back(i);
        want_idx.push_back(v);
        drop.push_back(false);
      } else {
        std::vector<std::int64_t> l(std::uniform_int_distribution<int>(0, 5)(rng));
        std::vector<std::size_t> v;
        for (auto& x : l) v.push_back(norm(x = pick()));
        spec.items.push_back(list(l));
        want_idx.push_back(v);
        drop.push_back(false);
      }
    }
    const Selection sel = resolve_selection(spec, t.shape());
    Shape want_shape;
    std::size_t numel = 1;
    for (std::size_t ax = 0; ax < 3; ++ax) {
      if (!drop[ax]) want_shape.push_back(want_idx[ax].size());
      numel *= want_idx[ax].size();
    }
    ASSERT_EQ(sel.shape, want_shape);
    const Tensor got = select(t, sel);
    std::size_t k = 0;
    for (std::size_t i : want_idx[0]) {
      for (std::size_t j : want_idx[1]) {
        for (std::size_t l : want_idx[2]) {
          ASSERT_EQ(got.data<std::int64_t>()[k], t.data<std::int64_t>()[(i * 6 + j) * 5 + l]);
          ASSERT_EQ(source_index(sel, k), (std::vector<std::size_t>{i, j, l}));
          ++k;
        }
      }
    }
    ASSERT_EQ(k, numel);
    // Streaming in slabs of one, a few and all entries gives the same values.
    for (std::size_t slab : {std::size_t{1}, std::size_t{300}, std::size_t{1} << 20}) {
      const Tensor head = summarize(t, sel, sel.numel, slab).head;
      ASSERT_EQ(head.numel(), got.numel());
      ASSERT_EQ(0, std::memcmp(head.bytes(), got.bytes(), got.nbytes())) << slab;
    }
  }
}

}  // namespace
}  // namespace posenc
