// Unit tests of declared parameters (posenc/declare.hpp, encodings/table_fields.hpp): the
// validator judges the declared ranges (naming the caller's field, or a config file's key),
// the describer lists fields with their types, choices and defaults, and every table kind
// declares fields whose names are distinct and well formed.

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "posenc/declare.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/attention_fields.hpp"

namespace posenc {
namespace {

struct Toy {
  int count = 1;
  std::optional<std::int64_t> window;
  double scale = 0.5;
  bool on = true;
  SinusoidalLayout layout = SinusoidalLayout::concat;
};

template <class V>
void declare(V& v, Toy& r) {
  v(field("count", "how many").require().at_least(1), r.count);
  v(field("window", "the window").from(0, std::int64_t{1} << 52, "2^52"), r.window);
  v(field("scale", "a factor"), r.scale);
  v(field("on", "switched on").negated_by("off", "switched off"), r.on);
  v(field("layout", "the order"), choice(r.layout, fields::sinusoidal_layouts()));
}

template <class R>
std::string message_of(const R& r, const ValueSources& s = ValueSources()) {
  try {
    validate(r, s);
  } catch (const UsageError& e) {
    return std::string("usage: ") + e.what();
  } catch (const InputError& e) {
    return std::string("input: ") + e.what();
  }
  return "";
}

TEST(Declare, ValidatorChecksTheDeclaredRanges) {
  Toy t;
  EXPECT_EQ(message_of(t), "");
  t.count = 0;
  EXPECT_EQ(message_of(t), "usage: count: must be at least 1, got 0");
  t.count = 3;
  t.window = -1;
  EXPECT_EQ(message_of(t), "usage: window: must be from 0 to 2^52, got -1");
  t.window = (std::int64_t{1} << 52) + 1;
  EXPECT_EQ(message_of(t), "usage: window: must be from 0 to 2^52, got 4503599627370497");
  t.window = std::int64_t{1} << 52;
  EXPECT_EQ(message_of(t), "");
}

TEST(Declare, ValidatorNamesTheConfigKeyThatGaveTheValue) {
  Toy t;
  t.count = -2;
  ValueSources s;
  s.set("count", "config.json", "num_things");
  EXPECT_EQ(message_of(t, s), "input: config.json: 'num_things': must be at least 1, got -2");
}

TEST(Declare, DescriberListsTypesChoicesAndDefaults) {
  const std::vector<Field> f = describe<Toy>();
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0].name, "count");
  EXPECT_EQ(f[0].option(), "--count");
  EXPECT_EQ(f[0].type, "int");
  EXPECT_TRUE(f[0].required);
  EXPECT_EQ(f[0].default_text, "1");
  EXPECT_EQ(f[1].type, "int");
  EXPECT_EQ(f[1].default_text, "");  // unset optional
  EXPECT_EQ(f[2].type, "float");
  EXPECT_EQ(f[2].default_text, "0.5");
  EXPECT_EQ(f[3].type, "bool");
  EXPECT_EQ(f[3].negation, "off");
  EXPECT_EQ(f[4].type, "choice");
  EXPECT_EQ(f[4].choices, (std::vector<std::string>{"interleaved", "concat"}));
  EXPECT_EQ(f[4].default_text, "concat");
  EXPECT_EQ(Field::option_of("max_relative_positions"), "--max-relative-positions");
}

TEST(Declare, ChoiceFindsNamesAndListsThem) {
  AlibiRequest r;
  const auto c = choice(r.variant, fields::alibi_tables());
  ASSERT_NE(c.find("bottom-right"), nullptr);
  EXPECT_EQ(*c.find("bottom-right"), AlibiTable::bottom_right);
  EXPECT_EQ(c.find("bottom_right"), nullptr);
  EXPECT_EQ(c.listed(), "slopes, causal, symmetric, fairseq or bottom-right");
}

TEST(Declare, EveryTableKindDeclaresDistinctSnakeCaseFields) {
  int kinds = 0;
  for_each_table_kind([&](const char* kind, auto r) {
    ++kinds;
    Describer d;
    declare(d, r);
    std::set<std::string> names;
    for (const Field& f : d.fields) {
      EXPECT_TRUE(names.insert(f.name).second) << kind << ": " << f.name << " twice";
      EXPECT_EQ(f.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_"),
                std::string::npos)
          << kind << ": " << f.name;
      EXPECT_FALSE(f.help.empty()) << kind << ": " << f.name;
      EXPECT_TRUE(!f.hi || f.lo) << kind << ": " << f.name << " has a top but no bottom";
    }
  });
  EXPECT_EQ(kinds, 22);
}

TEST(Declare, TensorsPairsAndListsAreDescribed) {
  const std::vector<Field> w = describe<WindowIndexRequest>();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].type, "pair");
  EXPECT_EQ(w[1].type, "array");
  EXPECT_EQ(w[1].option(), "--bias-table");
  const std::vector<Field> a = describe<AxialPositionsRequest>();
  EXPECT_EQ(a[0].type, "int list");
  EXPECT_EQ(a[1].type, "array list");
  EXPECT_EQ(a[1].max_count, 8);
  EXPECT_EQ(describe<FairseqSinusoidalRequest>().back().type, "int array");
}

TEST(Declare, CheckGivenJoinsFieldsInTheCallersTerms) {
  DetrSineRequest r;
  const auto none = [](const std::string&) { return false; };
  const Caller python{none, [](const std::string& n) { return n; },
                      [](const std::string&) { return std::size_t{0}; }};
  const Caller cli{none, &Field::option_of, [](const std::string&) { return std::size_t{0}; }};
  try {
    check_given(r, python);
    ADD_FAILURE() << "neither mask nor size passed";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "mask: give a pixel mask or size H W (one of them)");
  }
  try {
    check_given(r, cli);
    ADD_FAILURE() << "neither mask nor size passed";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--mask: give a pixel mask or --size H W (one of them)");
  }
}

// attention's rules that relate a field to a tensor input: the caller says which tensors
// it was given, and the message names both as the caller spells them.
TEST(Declare, AttentionRulesSeeTheTensorsGiven) {
  const AttentionOptions o;
  auto message = [&o](std::set<std::string> given, bool python) {
    // Python has no t5_bidirectional (only t5_causal).
    Caller c{[given](const std::string& n) { return given.count(n) > 0; },
             [python](const std::string& n) {
               return !python ? Field::option_of(n) : n == "t5_bidirectional" ? "" : n;
             },
             nullptr};
    try {
      check_given(o, c);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("passed");
  };
  EXPECT_EQ(message({"alibi", "alibi_max_bias", "alibi_slopes"}, true),
            "alibi_max_bias: not with alibi_slopes (the slopes are given)");
  EXPECT_EQ(message({"alibi", "alibi_max_bias", "alibi_slopes"}, false),
            "--alibi-max-bias: not with --alibi-slopes (the slopes are given)");
  EXPECT_EQ(message({"alibi", "alibi_max_bias"}, false), "passed");
  EXPECT_EQ(message({"alibi", "alibi_slopes"}, false), "passed");
  EXPECT_EQ(message({"t5_buckets"}, true),
            "t5_buckets/t5_max_distance/t5_causal need t5_bias or global_bias");
  EXPECT_EQ(message({"t5_causal"}, false),
            "--t5-buckets/--t5-max-distance/--t5-bidirectional/--t5-causal need --t5-bias or "
            "--global-bias");
  EXPECT_EQ(message({"t5_bidirectional"}, false).substr(0, 14), "--t5-buckets/-");
  EXPECT_EQ(message({"t5_max_distance", "t5_bias"}, true), "passed");
  EXPECT_EQ(message({"t5_buckets", "global_bias", "global_kv", "global_block_size"}, false),
            "passed");
  EXPECT_EQ(message({"t5_buckets", "global_bias"}, false),
            "--global-block-size/--global-bias: only with --global-kv");
  EXPECT_EQ(message({"global_kv"}, true), "global_kv: needs global_block_size G");
}

TEST(Declare, TableFunctionsValidateFromTheDeclaration) {
  CpmAntBucketRequest c;
  c.seq_len = 8;
  c.segments = 0;
  EXPECT_THROW(
      {
        try {
          cpmant_bucket_table(c);
        } catch (const UsageError& e) {
          EXPECT_STREQ(e.what(), "segments: must be from 1 to 4096, got 0");
          throw;
        }
      },
      UsageError);
  RelativeRequest r;
  r.q_len = 4;
  r.left = -1;
  r.right = 2;
  EXPECT_THROW(
      {
        try {
          relative_table(r);
        } catch (const UsageError& e) {
          EXPECT_STREQ(e.what(), "left: must be from 0 to 2^52, got -1");
          throw;
        }
      },
      UsageError);
}

}  // namespace
}  // namespace posenc
