// Unit tests of requests read by keyword (posenc/keywords.hpp, encodings/rope_keywords.hpp)
// from a C++ caller's own Keywords: a map of plain values. The reader takes each declared
// field as its type says, checks ranges and choices with the library's messages, keeps
// array fields for their own pass, and refuses a value of the wrong type through the
// caller's own words for it.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "posenc/declare.hpp"
#include "posenc/encodings/rope_ids_keywords.hpp"
#include "posenc/encodings/rope_keywords.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/encodings/table_keywords.hpp"
#include "posenc/error.hpp"
#include "posenc/keywords.hpp"

namespace posenc {
namespace {

using Value = std::variant<bool, std::int64_t, double, std::string, xt::xarray<double>>;

// Keywords over a map: the keyword caller the tests stand for.
class MapKeywords : public Keywords {
 public:
  explicit MapKeywords(std::map<std::string, Value> m) : m_(std::move(m)) {}
  bool gives(const Key& k) const override { return !k.item && m_.count(k.name) > 0; }
  std::string described(const Key& k) const override {
    const Value& v = m_.at(k.name);
    if (const auto* s = std::get_if<std::string>(&v)) return "str '" + *s + "'";
    if (const auto* i = std::get_if<std::int64_t>(&v)) return "int " + std::to_string(*i);
    return "value";
  }
  bool is_bool(const Key& k) const override { return holds<bool>(k); }
  bool is_text(const Key& k) const override { return holds<std::string>(k); }
  bool is_integer(const Key& k) const override { return holds<std::int64_t>(k); }
  bool is_real_array(const Key& k) const override { return holds<xt::xarray<double>>(k); }
  std::optional<std::size_t> list_length(const Key&) const override { return std::nullopt; }
  std::size_t size_hint(const Key&) const override { return 0; }
  bool boolean(const Key& k) const override { return as<bool>(k, "True or False"); }
  std::int64_t integer(const Key& k) const override {
    return as<std::int64_t>(k, "an integer");
  }
  double number(const Key& k) const override {
    if (holds<std::int64_t>(k)) return static_cast<double>(std::get<std::int64_t>(m_.at(k.name)));
    return as<double>(k, "a number");
  }
  std::string text(const Key& k) const override { return as<std::string>(k, "a string"); }
  std::vector<std::string> texts(const Key& k) const override { refuse(k, "a list of strings"); }
  std::vector<double> numbers(const Key& k) const override { refuse(k, "a list of numbers"); }
  std::vector<std::int64_t> integers(const Key& k) const override {
    refuse(k, "a list of integers");
  }
  std::pair<std::int64_t, std::int64_t> two_integers(const Key& k) const override {
    refuse(k, "two integers");
  }
  xt::xarray<double> real_array(const Key& k) const override {
    return as<xt::xarray<double>>(k, "an array of numbers");
  }
  xt::xarray<std::int64_t> integer_array(const Key& k) const override {
    refuse(k, "an array of integers");
  }
  Tensor tensor(const Key& k) const override { refuse(k, "an array"); }

 private:
  template <class T>
  bool holds(const Key& k) const {
    return gives(k) && std::holds_alternative<T>(m_.at(k.name));
  }
  template <class T>
  T as(const Key& k, const char* what) const {
    if (!holds<T>(k)) refuse(k, what);
    return std::get<T>(m_.at(k.name));
  }
  std::map<std::string, Value> m_;
};

struct Toy {
  int count = 1;
  std::optional<std::int64_t> window;
  double scale = 0.5;
  SinusoidalLayout layout = SinusoidalLayout::concat;
  std::optional<xt::xarray<double>> table;
};

template <class V>
void declare(V& v, Toy& r) {
  v(field("count", "how many").at_least(1), r.count);
  v(field("window", "the window").from(0, 9, "9").check_when_given(), r.window);
  v(field("scale", "a factor"), r.scale);
  v(field("layout", "the order"), choice(r.layout, fields::sinusoidal_layouts()));
  v(field("table", "a table"), r.table);
}

template <class F>
std::string usage_message(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Keywords, ReaderTakesEachFieldAsItsTypeSays) {
  const MapKeywords k({{"count", std::int64_t{3}},
                       {"window", std::int64_t{4}},
                       {"scale", std::int64_t{2}},  // an integer is a number
                       {"layout", std::string("interleaved")}});
  Toy t;
  KeywordReader r(k);
  r.read(t);
  EXPECT_EQ(t.count, 3);
  EXPECT_EQ(t.window, 4);
  EXPECT_EQ(t.scale, 2.0);
  EXPECT_EQ(t.layout, SinusoidalLayout::interleaved);
  EXPECT_FALSE(t.table);
  EXPECT_EQ(r.given, (std::vector<std::string>{"count", "window", "scale", "layout"}));
}

TEST(Keywords, ReaderRefusesWithTheLibrarysMessages) {
  const auto refused = [](std::map<std::string, Value> m) {
    return usage_message([&] {
      Toy t;
      KeywordReader(MapKeywords(std::move(m))).read(t);
    });
  };
  EXPECT_EQ(refused({{"layout", std::string("diagonal")}}),
            "layout: expected interleaved or concat, got 'diagonal'");
  EXPECT_EQ(refused({{"count", std::string("x")}}), "count: expected an integer, got str 'x'");
  EXPECT_EQ(refused({{"count", std::int64_t{1} << 40}}),
            "count: int 1099511627776 is out of range (-2147483648 to 2147483647)");
  EXPECT_EQ(refused({{"window", std::int64_t{10}}}), "window: must be from 0 to 9, got 10");
  EXPECT_EQ(refused({{"window", true}}), "window: expected an integer, got value");
}

TEST(Keywords, ArraysAreReadInTheirOwnPass) {
  const MapKeywords k({{"count", std::int64_t{2}}, {"table", xt::xarray<double>{1.0, 2.0}}});
  Toy scalars, arrays;
  KeywordReader(k, false).read(scalars);
  EXPECT_EQ(scalars.count, 2);
  EXPECT_FALSE(scalars.table);
  KeywordReader(k, true).read(arrays);
  EXPECT_EQ(arrays.count, 1);
  ASSERT_TRUE(arrays.table);
  EXPECT_EQ(*arrays.table, (xt::xarray<double>{1.0, 2.0}));
}

TEST(Keywords, RopeRequestsByKeyword) {
  const MapKeywords rope({{"base", 500000.0}});
  const RopeParams p = rope_params_by_keyword(rope, 64, keyword_caller({&rope}));
  EXPECT_EQ(p.base, 500000.0);
  EXPECT_EQ(p.head_dim, 64);
  EXPECT_EQ(usage_message([] {  // the range is checked where the positions are used
              validate(positions_by_keyword(MapKeywords({{"start", std::int64_t{-1}}})));
            }),
            "start: must be from 0 to 2^53 = 9007199254740992, got -1");
  const MapKeywords pos({{"start", std::int64_t{7}}});
  EXPECT_EQ(positions_by_keyword(pos).start, 7);
}

TEST(Keywords, RopeRotationByKeyword) {
  const MapKeywords rope({{"base", 100.0}}), apply({});
  const MapKeywords pos({{"start", std::int64_t{3}}});
  const RopeRotation r =
      rope_by_keyword(rope, pos, apply, {1, 5, 2, 8}, resolve_axes("bshd", 4, "x"), "x");
  EXPECT_EQ(r.pos.start, 3);
  EXPECT_EQ(r.freqs.head_dim, 8);  // axis d's
  ASSERT_EQ(r.freqs.inv_freq.size(), 4u);
  EXPECT_DOUBLE_EQ(r.freqs.inv_freq[1], std::pow(100.0, -2.0 / 8));
  // The caller's tables replace the frequencies; its coords are the key grid.
  const MapKeywords tables({{"cos", xt::xarray<double>{1.0}}, {"grid", std::string("2x2")}});
  EXPECT_EQ(
      usage_message([&] {
        rope_by_keyword(apply, tables, apply, {1, 5, 2, 8}, resolve_axes("bshd", 4, "x"), "x");
      }),
      "cos: the tables replace the frequencies; not with coords");
  EXPECT_EQ(usage_message([&] {
              rope_by_keyword(MapKeywords({{"arith", std::string("hf")}}),
                              MapKeywords({{"cos", xt::xarray<double>{1.0}}}), apply, {1, 5, 2, 8},
                              resolve_axes("bshd", 4, "x"), "x");
            }),
            "arith hf: cos/sin tables are applied exactly only (precision f32 rotates in "
            "float32)");
}

TEST(Keywords, TablesByKeyword) {
  const MapKeywords none({});
  const std::vector<Table> t = tables_by_keyword(
      "sinusoidal", MapKeywords({{"positions", std::int64_t{3}}, {"dim", std::int64_t{4}}}), none,
      none);
  ASSERT_EQ(t.size(), 1u);
  const xt::xarray<double> v = evaluate_table(t[0]);
  ASSERT_EQ(v.shape(), (std::vector<std::size_t>{3, 4}));
  for (std::size_t p = 0; p < 3; ++p) {  // Vaswani's, interleaved: sin, cos of p w_i
    for (std::size_t i = 0; i < 2; ++i) {
      const double w = std::pow(10000.0, -2.0 * static_cast<double>(i) / 4);
      EXPECT_NEAR(v(p, 2 * i), std::sin(static_cast<double>(p) * w), 1e-15);
      EXPECT_NEAR(v(p, 2 * i + 1), std::cos(static_cast<double>(p) * w), 1e-15);
    }
  }
  // RoPE: its own keywords, the ROPE OPTIONS and the positions each in theirs.
  const std::vector<Table> rope = tables_by_keyword(
      "rope", MapKeywords({{"positions", std::int64_t{2}}, {"dim", std::int64_t{4}}}),
      MapKeywords({{"base", 4.0}}), MapKeywords({{"start", std::int64_t{5}}}));
  ASSERT_EQ(rope.size(), 1u);
  const xt::xarray<double> cs = evaluate_table(rope[0]);  // [2, N, R], neox halves
  ASSERT_EQ(cs.shape(), (std::vector<std::size_t>{2, 2, 4}));
  EXPECT_NEAR(cs(0, 1, 1), std::cos(6.0 * 0.5), 1e-15);  // position 6, w_1 = 4^(-2/4)
  EXPECT_NEAR(cs(1, 0, 2), std::sin(5.0), 1e-15);        // position 5, w_0 = 1
  EXPECT_EQ(usage_message([&] { tables_by_keyword("nope", none, none, none); }),
            "kind: unknown table kind 'nope'");
  EXPECT_EQ(
      usage_message([&] {
        tables_by_keyword("sinusoidal", MapKeywords({{"positions", std::int64_t{3}}}), none, none);
      }),
      "dim: the sinusoidal table needs a positive even dimension (sin/cos pairs), got 0");
}

TEST(Keywords, RopeIdsByKeyword) {
  const MapKeywords none({});
  const RopeIdsResolved r =
      rope_ids_by_keyword(MapKeywords({{"family", std::string("qwen2-vl")},
                                       {"layout", std::string("text:2,image:1x4x4")}}),
                          none);
  ASSERT_TRUE(r.layout);
  EXPECT_EQ(prompt_layout_text(*r.layout), "text:2,image:1x4x4");
  EXPECT_EQ(r.rules.family, RopeIdsFamily::qwen2_vl);
  EXPECT_FALSE(r.request.option_names);
  EXPECT_EQ(usage_message([&] {
              rope_ids_by_keyword(MapKeywords({{"layout", std::string("text:2")}}),
                                  MapKeywords({{"input_ids", xt::xarray<double>{1.0}}}));
            }),
            "layout: give the prompt as layout SPEC or as input_ids REF, one of the two");
  EXPECT_EQ(usage_message([&] {
              rope_ids_by_keyword(MapKeywords({{"layout", std::string("text:2")},
                                               {"image_token_id", std::int64_t{5}}}),
                                  none);
            }),
            "image_token_id: goes with input_ids, not layout");
}

}  // namespace
}  // namespace posenc
