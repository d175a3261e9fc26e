// Locating compare's errors (CompareLocate in ops/compare.hpp, ops/compare_locate.hpp):
// the breakdown and the worst elements against a plain scan over multi-indices written
// here, for every block size and with slices; the tolerance ratio against the match
// test; the pairing of dims; the --by list.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>
#include <xtensor/xadapt.hpp>

#include "posenc/analysis.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/compare.hpp"
#include "posenc/ops/compare_locate.hpp"
#include "posenc/ops/select.hpp"
#include "posenc/tensor.hpp"

namespace posenc {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

bool isclose(double a, double b, double rtol, double atol, bool equal_nan) {
  if (std::isnan(a) || std::isnan(b)) return equal_nan && std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}

CompareResult run_blocks(const std::vector<double>& a, const std::vector<double>& b,
                         const CompareRule& rule, const CompareLocate& loc, const Selection& sel,
                         std::size_t block) {
  Comparator c(rule, loc, sel);
  for (std::size_t i = 0; i < a.size(); i += block) {
    const std::size_t n = std::min(block, a.size() - i);
    const std::array<std::size_t, 1> shape{n};
    c.add(xt::adapt(a.data() + i, n, xt::no_ownership(), shape),
          xt::adapt(b.data() + i, n, xt::no_ownership(), shape));
  }
  return c.result();
}

TEST(TolRatio, ExceedsOneExactlyForMismatches) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  const double specials[] = {kNaN, kInf, -kInf, 0.0, -0.0};
  for (const CompareOptions& opt :
       {CompareOptions{1e-3, 1e-4, std::nullopt, false},
        CompareOptions{0.0, 0.0, std::nullopt, true},
        CompareOptions{std::nullopt, std::nullopt, 2, false}, CompareOptions{1e-6, 0.0, 0, false},
        CompareOptions{0.0, 1e-5, 4, true}}) {
    const CompareRule rule = make_compare_rule(DType::f32, DType::f32, opt);
    for (int i = 0; i < 20000; ++i) {
      const double b = static_cast<float>(normal(rng));
      double a = static_cast<float>(b + normal(rng) * std::pow(10.0, -(i % 8)));
      double bb = b;
      if (i % 97 == 0) a = specials[i % 5];
      if (i % 89 == 0) bb = specials[(i / 89) % 5];
      if (i % 13 == 0) a = bb;
      bool match = isclose(a, bb, rule.rtol, rule.atol, rule.equal_nan);
      if (rule.max_ulp && !std::isnan(a) && !std::isnan(bb)) {
        const bool ulp_ok = ulp_distance(a, bb, rule.ulp_type) <= *rule.max_ulp;
        match = rule.tolerance_explicit ? (ulp_ok || match) : ulp_ok;
        if (std::isinf(a) || std::isinf(bb)) match = a == bb;
      }
      const double r = tol_ratio(a, bb, rule);
      ASSERT_FALSE(std::isnan(r));
      ASSERT_EQ(r > 1, !match) << a << " " << bb << " ratio " << r;
    }
  }
}

TEST(PairStyle, ParsesAndNamesStyles) {
  EXPECT_EQ(parse_pair_style("half"), PairStyle::neox);
  EXPECT_EQ(parse_pair_style("interleaved"), PairStyle::gptj);
  EXPECT_EQ(pair_style_name(PairStyle::gptj), "gptj");
  EXPECT_THROW(parse_pair_style("rotate"), UsageError);
}

TEST(ByList, ParsesLettersNumbersAndPair) {
  const auto items = parse_by("h, -1");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].letter, 'h');
  EXPECT_EQ(items[1].number, -1);
  EXPECT_TRUE(parse_by("pair")[0].pair);
  for (const char* bad : {"", "h,", "x", "h,h", "s,s", "pair,pairs", "h,s,h", "1.5", "hs"}) {
    EXPECT_THROW(parse_by(bad), UsageError) << bad;
  }
  const auto r = resolve_by(parse_by("s,pair"), "bshd", 4, "x");
  EXPECT_EQ(r[0], (ByAxis{1, false}));
  EXPECT_EQ(r[1], (ByAxis{3, true}));
  EXPECT_EQ(resolve_by(parse_by("pair"), "", 5, "x")[0], (ByAxis{4, true}));
  EXPECT_EQ(resolve_by(parse_by("-4"), "bhsd", 4, "x")[0].axis, 0u);
  EXPECT_THROW(resolve_by(parse_by("h"), "bsd", 3, "x"), InputError);
  EXPECT_THROW(resolve_by(parse_by("4"), "bhsd", 4, "x"), InputError);
  EXPECT_THROW(resolve_by(parse_by("-5"), "bhsd", 4, "x"), InputError);
  EXPECT_THROW(resolve_by(parse_by("s,2"), "bhsd", 4, "x"), UsageError);
  EXPECT_THROW(resolve_by(parse_by("d,pair"), "bhsd", 4, "x"), UsageError);
  EXPECT_EQ(compare_layout("", 3, "x"), "bsd");
  EXPECT_EQ(compare_layout("", 5, "x"), "");
  EXPECT_THROW(compare_layout("bshx", 4, "x"), UsageError);
  EXPECT_THROW(compare_layout("bsd", 4, "x"), InputError);
}

// The group of multi-index `idx` along a ByAxis, as the definition says.
std::size_t group_of(const std::vector<std::size_t>& idx, const ByAxis& by, std::size_t rotary,
                     PairStyle style) {
  const std::size_t j = idx[by.axis];
  if (!by.pairs) return j;
  if (j >= rotary) return rotary / 2 + (j - rotary) / 2;
  return style == PairStyle::neox ? j % (rotary / 2) : j / 2;
}

TEST(Breakdown, MatchesAScanOverMultiIndicesForAnyBlocking) {
  const Shape shape{2, 3, 40, 12};
  std::size_t n = 1;
  for (auto e : shape) n *= e;
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  std::vector<double> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    b[i] = normal(rng);
    const auto idx = unravel_index(i, shape);
    // Error growing with position in head 1 on dims 4 and 10 (neox pair 4 of 6).
    const double grow = idx[1] == 1 && (idx[3] == 4 || idx[3] == 10) ? 1e-6 * idx[2] * idx[2] : 0;
    a[i] = b[i] + grow + normal(rng) * 1e-9;
  }
  a[17] = kNaN;
  b[300] = kInf;
  const CompareRule rule =
      make_compare_rule(DType::f64, DType::f64, {1e-5, 1e-5, std::nullopt, false});
  for (PairStyle style : {PairStyle::neox, PairStyle::gptj}) {
    for (std::size_t rotary : {12u, 8u}) {
      CompareLocate loc;
      loc.by = {{2, false}, {3, true}};
      loc.pairs = style;
      loc.rotary_dim = rotary;
      loc.top = 7;
      // The reference: a scan with std::max over every element.
      std::vector<GroupStats> want(40 * 6);
      std::vector<WorstElement> all;
      for (std::size_t i = 0; i < n; ++i) {
        const auto idx = unravel_index(i, shape);
        GroupStats& g = want[idx[2] * 6 + group_of(idx, loc.by[1], rotary, style)];
        const bool ok = isclose(a[i], b[i], rule.rtol, rule.atol, false);
        ++g.count;
        g.mismatches += ok ? 0 : 1;
        const double ratio = tol_ratio(a[i], b[i], rule);
        g.max_tol_ratio = std::max(g.max_tol_ratio, ratio);
        if (!std::isnan(a[i]) && !std::isnan(b[i])) {
          const double d = std::fabs(a[i] - b[i]);
          g.max_abs = std::max(g.max_abs, std::isinf(b[i]) ? kInf : d);
          g.max_rel = std::max(g.max_rel, std::isinf(b[i]) ? kInf : d / std::fabs(b[i]));
          g.max_ulp = std::max(g.max_ulp, ulp_distance(a[i], b[i], rule.ulp_type));
          g.any_ulp = true;
        }
        all.push_back({i, a[i], b[i], ratio, !ok});
      }
      std::stable_sort(all.begin(), all.end(), [](const WorstElement& x, const WorstElement& y) {
        auto key = [](const WorstElement& w) {
          const double d = std::fabs(w.a - w.b);
          return std::make_tuple(-w.tol_ratio, std::isnan(d) ? -kInf : -d);
        };
        return key(x) < key(y);
      });
      all.resize(7);
      for (std::size_t block : {1u, 5u, 12u, 4096u}) {
        const CompareResult r = run_blocks(a, b, rule, loc, select_all(shape), block);
        ASSERT_TRUE(r.breakdown);
        ASSERT_EQ(r.breakdown->groups.size(), want.size());
        for (std::size_t g = 0; g < want.size(); ++g) {
          const GroupStats &x = r.breakdown->groups[g], &y = want[g];
          ASSERT_EQ(x.count, y.count) << g;
          ASSERT_EQ(x.mismatches, y.mismatches) << g;
          ASSERT_EQ(x.max_abs, y.max_abs) << g;
          ASSERT_EQ(x.max_rel, y.max_rel) << g;
          ASSERT_EQ(x.max_ulp, y.max_ulp) << g;
          ASSERT_EQ(x.max_tol_ratio, y.max_tol_ratio) << g;
        }
        ASSERT_EQ(r.worst.size(), 7u);
        for (std::size_t k = 0; k < 7; ++k) EXPECT_EQ(r.worst[k].flat, all[k].flat) << k;
      }
    }
  }
}

TEST(Breakdown, FollowsTheSliceInAsCoordinates) {
  const Shape shape{4, 6, 8};
  std::vector<double> a(4 * 6 * 8, 1.0), b(a);
  const Selection sel = resolve_selection(parse_slice("2, 1::2, :"), shape);  // (3, 8)
  std::vector<double> sa(sel.numel), sb(sel.numel, 1.0);
  for (std::size_t i = 0; i < sel.numel; ++i) {
    const auto src = source_index(sel, i);
    sa[i] = src[1] == 3 && src[2] / 2 == 1 ? 2.0 : 1.0;  // rows 3, gptj pair 1
  }
  CompareLocate loc;
  loc.by = {{1, false}, {2, true}};
  loc.pairs = PairStyle::gptj;
  const CompareResult r =
      run_blocks(sa, sb, make_compare_rule(DType::f64, DType::f64, {}), loc, sel, 5);
  ASSERT_TRUE(r.breakdown);
  EXPECT_EQ(r.breakdown->coords[0], (std::vector<std::size_t>{1, 3, 5}));
  EXPECT_EQ(r.breakdown->coords[1].size(), 4u);
  for (std::size_t g = 0; g < 12; ++g) {
    EXPECT_EQ(r.breakdown->groups[g].mismatches, g == 1 * 4 + 1 ? 2u : 0u) << g;
    EXPECT_EQ(r.breakdown->groups[g].count, 2u);
  }
  // A fixed axis is one row at its index; pairs need the whole axis.
  loc.by = {{0, false}};
  EXPECT_EQ(run_blocks(sa, sb, make_compare_rule(DType::f64, DType::f64, {}), loc, sel, 5)
                .breakdown->coords[0],
            (std::vector<std::size_t>{2}));
  loc.by = {{2, true}};
  const Selection part = resolve_selection(parse_slice(":, :, :4"), shape);
  EXPECT_THROW(Comparator(make_compare_rule(DType::f64, DType::f64, {}), loc, part), InputError);
  loc.rotary_dim = 3;
  EXPECT_THROW(Comparator(make_compare_rule(DType::f64, DType::f64, {}), loc, select_all(shape)),
               InputError);
  loc.rotary_dim = std::nullopt;
  loc.by = {{1, false}, {1, false}};
  EXPECT_THROW(Comparator(make_compare_rule(DType::f64, DType::f64, {}), loc, select_all(shape)),
               UsageError);
  loc.by = {{3, false}};
  EXPECT_THROW(Comparator(make_compare_rule(DType::f64, DType::f64, {}), loc, select_all(shape)),
               InputError);
}

TEST(Breakdown, TableHasOneRowPerGroup) {
  const Shape shape{3, 4};
  std::vector<double> a(12, 0.0), b(12, 0.0);
  a[7] = 1.0;  // (1, 3)
  CompareLocate loc;
  loc.by = {{0, false}, {1, false}};
  const CompareResult r =
      run_blocks(a, b, make_compare_rule(DType::f32, DType::f32, {}), loc, select_all(shape), 12);
  const AnalysisTable t = compare_breakdown_table(r, {"s", "d"});
  ASSERT_EQ(t.data.shape(), (Shape{12, 8}));
  EXPECT_EQ(t.columns[2], "count");
  EXPECT_EQ(t.data.get(7 * 8 + 0), 1.0);
  EXPECT_EQ(t.data.get(7 * 8 + 1), 3.0);
  EXPECT_EQ(t.data.get(7 * 8 + 3), 1.0);  // mismatches
  EXPECT_EQ(t.data.get(7 * 8 + 4), 1.0);  // max_abs
  EXPECT_EQ(t.data.get(6 * 8 + 3), 0.0);
  ASSERT_EQ(t.figure.panels.size(), 2u);
  // An axis of extent 0: no rows.
  loc.by = {{1, false}};
  const CompareResult e = run_blocks({}, {}, make_compare_rule(DType::f32, DType::f32, {}), loc,
                                     select_all({3, 0, 4}), 12);
  EXPECT_EQ(e.breakdown->groups.size(), 0u);
  EXPECT_EQ(compare_breakdown_table(e, {"s"}).data.shape(), (Shape{0, 7}));
  EXPECT_TRUE(std::get<HeatmapPanel>(t.figure.panels[1]).log);
  EXPECT_FALSE(std::get<HeatmapPanel>(t.figure.panels[0]).log);
}

}  // namespace
}  // namespace posenc
