#pragma once
/// \file
/// A request's parameters declared once (STYLE pattern 10). Each request struct has a
/// `declare` overload that visits its fields in order:
///
///     template <class V> void declare(V& v, AlibiRequest& r) {
///       v(field("heads", "number of heads H (any count)").required().at_least(1), r.heads);
///       v(field("variant", "slopes, causal, ..."), choice(r.variant, alibi_table_names()));
///     }
///
/// A field has one spelling, its member name: the Python keyword is that name
/// (`max_distance`) and the option is derived from it (`--max-distance`). The visitors:
/// `validate` (here: ranges, errors through ValueSources so a config file's key is named),
/// `describe` (here: the field list, for tests and generated stubs), the command line's
/// binder (src/cli) and the Python module's reader (python/posenc_module.cpp). A front end
/// never repeats a range or a choice list: it reads them from the Field.

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xarray.hpp>

#include "posenc/error.hpp"
#include "posenc/value_source.hpp"

namespace posenc {

/// One declared parameter: its name, help, whether it is required, its range or choices,
/// and for flags the options that set it.
struct Field {
  std::string name;  ///< snake_case: the Python keyword and the library's name in messages
  std::string help;  ///< one line, the option's --help text
  bool required = false;
  std::optional<std::int64_t> lo, hi;  ///< inclusive range of an integer field
  std::string hi_text;                 ///< how messages write `hi` ("2^52"); empty: the number
  /// Flags: the option that sets the field false ("causal", "no-normalize"); empty: none.
  std::string negation;
  std::string negation_help;  ///< the --help text of the negation
  bool positive = true;       ///< flags: `--name` itself sets it true
  /// Array fields (`std::optional<xt::xarray<double>>`, `<std::int64_t>`): a bool
  /// tensor counts as numbers 0 and 1 (a pixel mask) instead of being refused.
  bool bools = false;
  /// Lists (`std::vector<...>` members): how many values the option takes.
  int min_count = 1, max_count = 1;
  /// Choices whose option may go without its word (`--causal [ALIGN]`): the name the
  /// bare option (and Python's True) stands for. `word`: how --help writes the value
  /// (a choice's names then checked by the library's message, not listed).
  std::string bare, word;
  /// Sides fields: how messages name the two sides ("LEFT", "RIGHT").
  std::string first_side, second_side;
  /// Choices: a flag of the command line that gives one name (`--half-width` for
  /// `--layout half`), its name and help; empty: none. Python has no such keyword.
  std::string flag, flag_word, flag_help;
  /// The command line's one-letter name beside the option ("f": -f,--force); empty: none.
  std::string short_name;
  /// Python's keyword where it is not the name (posenc.compare's `ulp` for max_ulp).
  std::string keyword;
  /// Real fields: 0 and up, finite (`lo` is otherwise exclusive: a positive number).
  bool non_negative = false;
  /// The range is checked as the caller gives the value (the command line as it reads
  /// the option, before any input is opened; Python as it reads the keyword), and --help
  /// shows it after the type as CLI11's range checks write it (`INT:INT in [0 - 9]`,
  /// `FLOAT:NONNEGATIVE`).
  bool checked_when_given = false;
  // Filled by `describe`:
  std::string type;                  ///< int, float, bool, choice
  std::vector<std::string> choices;  ///< a choice field's names, in order
  std::string default_text;          ///< the default as the user writes it; empty: none

  /// The command-line option: "--" and the name with '-' for '_'.
  std::string option() const { return option_of(name); }
  static std::string option_of(std::string n) {
    for (char& c : n) {
      if (c == '_') c = '-';
    }
    return "--" + n;
  }

  /// Python's keyword: the name, or `keyword` where that differs.
  std::string python_name() const { return keyword.empty() ? name : keyword; }

  Field& require() {
    required = true;
    return *this;
  }
  Field& at_least(std::int64_t v) {
    lo = v;
    return *this;
  }
  Field& from(std::int64_t a, std::int64_t b, std::string b_text = "") {
    lo = a;
    hi = b;
    hi_text = std::move(b_text);
    return *this;
  }
  /// A real number 0 and up, finite.
  Field& non_negative_number() {
    lo = 0;
    non_negative = true;
    return *this;
  }
  /// The range checked as the value is given (see `checked_when_given`).
  Field& check_when_given() {
    checked_when_given = true;
    return *this;
  }
  Field& short_option(std::string letter) {
    short_name = std::move(letter);
    return *this;
  }
  Field& python_keyword(std::string k) {
    keyword = std::move(k);
    return *this;
  }
  Field& bool_ok() {
    bools = true;
    return *this;
  }
  Field& count(int a, int b) {
    min_count = a;
    max_count = b;
    return *this;
  }
  /// A choice whose option alone (Python: True) means `bare_name`; --help shows `word_text`.
  Field& optional_word(std::string bare_name, std::string word_text) {
    bare = std::move(bare_name);
    word = std::move(word_text);
    return *this;
  }
  /// --help writes the value `text` ("TEXT", "T,H,W").
  Field& value_name(std::string text) {
    word = std::move(text);
    return *this;
  }
  Field& sides(std::string first_name, std::string second_name) {
    first_side = std::move(first_name);
    second_side = std::move(second_name);
    return *this;
  }
  /// A choice that the command line's `--flag_name` (help `help_text`) also gives as `word_text`.
  Field& flag_for(std::string flag_name, std::string word_text, std::string help_text) {
    flag = std::move(flag_name);
    flag_word = std::move(word_text);
    flag_help = std::move(help_text);
    return *this;
  }
  /// A flag whose `--negation` (help `neg_help`) sets it false; `with_positive` false:
  /// `--name` is no option.
  Field& negated_by(std::string neg, std::string neg_help, bool with_positive = true) {
    negation = std::move(neg);
    negation_help = std::move(neg_help);
    positive = with_positive;
    return *this;
  }
};

/// Starts a declaration: `field("max_distance", "help")`.
inline Field field(std::string name, std::string help) {
  Field f;
  f.name = std::move(name);
  f.help = std::move(help);
  return f;
}

/// The names of an enum's values, as the user writes them, in the order help lists them.
template <class E>
using Names = std::vector<std::pair<std::string, E>>;

/// A member (an enum, a bool, or an optional enum) set from a name of `names`; `M` is a
/// reference to it, or a tuple of references when one name sets several members
/// (`--alibi falcon`: the variant and alibi_before_scale).
template <class M, class E>
struct Choice {
  M member;
  const Names<E>& names;

  /// The value of `name`, or nullptr when it is none of the names.
  const E* find(const std::string& name) const {
    for (const auto& [n, e] : names) {
      if (n == name) return &e;
    }
    return nullptr;
  }
  /// "a, b or c": the names for messages.
  std::string listed() const {
    std::string out;
    for (std::size_t i = 0; i < names.size(); ++i) {
      out += i == 0 ? "" : i + 1 == names.size() ? " or " : ", ";
      out += names[i].first;
    }
    return out;
  }
  std::vector<std::string> list() const {
    std::vector<std::string> out;
    for (const auto& n : names) out.push_back(n.first);
    return out;
  }
  /// Sets the member from the word a caller gave with field `f` ("" for the bare option:
  /// `f.bare`). Every front end refuses another word with this one message: "causal
  /// diagonal: expected bottom-right or top-left".
  void set(const Field& f, const std::string& word) {
    const E* e = find(word.empty() ? f.bare : word);
    if (e == nullptr) throw UsageError(f.name + " " + word + ": expected " + listed());
    member = *e;
  }
};

/// `v(field(...), choice(r.layout, sinusoidal_layout_names()))`.
template <class M, class E>
Choice<M&, E> choice(M& member, const Names<E>& names) {
  return Choice<M&, E>{member, names};
}
/// One name setting several members: `choice(std::tie(r.alibi, r.alibi_before_scale),
/// names)`, the names' values tuples of the members' values.
template <class... M, class E>
Choice<std::tuple<M&...>, E> choice(std::tuple<M&...> members, const Names<E>& names) {
  return Choice<std::tuple<M&...>, E>{members, names};
}

/// The tables a request writes, one per name of a list (`--emit cos,sin`, Python
/// `emit=("cos", "sin")`), each name at most once: each table is computed with `each` (the
/// request's `emit`) set to its value in turn (for_each_emitted).
template <class E>
struct Emits {
  std::vector<E>& list;
  E& each;
  const Names<E>& names;

  /// Sets the list from the names a caller gave, `said` as the caller wrote them
  /// ("phi,rho"; empty when one name) and `a_list` how the caller says a list ("a comma
  /// list of"): "emit phi,rho: expected a comma list of phi, pi, psi, omega", "emit
  /// phi,phi: 'phi' is named twice".
  void set(const Field& f, const std::vector<std::string>& words, const std::string& said,
           const std::string& a_list) const {
    const std::string prefix = f.name + (said.empty() ? "" : " " + said) + ": ";
    std::vector<E> out;
    for (const std::string& w : words) {
      const E* e = nullptr;
      for (const auto& [n, v] : names) {
        if (n == w) e = &v;
      }
      if (e == nullptr) {
        std::string all;
        for (const auto& n : names) all += (all.empty() ? "" : ", ") + n.first;
        throw UsageError(prefix + "expected " + a_list + " " + all +
                         (said.empty() ? ", got '" + w + "'" : ""));
      }
      for (E x : out) {
        if (x == *e) throw UsageError(prefix + "'" + w + "' is named twice");
      }
      out.push_back(*e);
    }
    if (out.empty()) throw UsageError(prefix + "expected " + a_list + " names, got none");
    list = std::move(out);
  }
  /// The name of value `e` with '_' for '-' (cos_sin): the table's name in -o patterns.
  std::string name(E e) const {
    for (const auto& [n, v] : names) {
      if (v == e) {
        std::string out = n;
        for (char& c : out) c = c == '-' ? '_' : c;
        return out;
      }
    }
    return "";
  }
};
/// `v(field("emit", ...), emits(r.emits, r.emit, rope_emits()))`.
template <class E>
Emits<E> emits(std::vector<E>& list, E& each, const Names<E>& names) {
  return Emits<E>{list, each, names};
}

/// Two integers given together ("--window H W", Python `window=(H, W)`); with
/// `one_for_both` a single value sets both (a square window).
struct Pair {
  std::int64_t& first;
  std::int64_t& second;
  bool one_for_both;
};

/// `v(field("window", ...), pair(r.height, r.width, true))`.
inline Pair pair(std::int64_t& first, std::int64_t& second, bool one_for_both = false) {
  return Pair{first, second, one_for_both};
}

/// Two integers the caller writes `A[,B]` (`--window 4,0`; Python `window=4` or `(4, 0)`),
/// the second `second_default` when left out. Both sides are in the field's range
/// (`from(lo, hi)`); the field's `sides` names them in messages.
struct Sides {
  std::int64_t& first;
  std::int64_t& second;
  std::int64_t second_default;

  /// Sets both sides from the one or two values a caller gave; UsageError "window 1,-5:
  /// must be from -1 to 2^53, each side" (every front end's message) when one is out of
  /// the field's range.
  void set(const Field& f, const std::vector<std::int64_t>& v) const {
    std::string text;
    for (std::int64_t x : v) text += (text.empty() ? "" : ",") + std::to_string(x);
    if (v.empty() || v.size() > 2) {
      throw UsageError(f.name + " " + text + ": expected " + f.first_side + "[," +
                       f.second_side + "]");
    }
    for (std::int64_t x : v) {
      if ((f.lo && x < *f.lo) || (f.hi && x > *f.hi)) {
        throw UsageError(fmt::format("{} {}: must be from {} to {}, each side", f.name, text,
                                     *f.lo,
                                     f.hi_text.empty() ? std::to_string(*f.hi) : f.hi_text));
      }
    }
    first = v[0];
    second = v.size() > 1 ? v[1] : second_default;
  }
};
inline Sides sides(std::int64_t& first, std::int64_t& second, std::int64_t second_default) {
  return Sides{first, second, second_default};
}

/// Two numbers given together, each into its member (`--attn-temperature SCALE FLOOR`,
/// Python `attn_temperature=(SCALE, FLOOR)`; the field's `sides` names them). `valid` is
/// the field's range and `what` says it: a pair outside it is refused with one message from
/// every front end, "attn_temperature: expected SCALE FLOOR, a number and a positive
/// floor". An integer second member takes a whole number (`valid` says so).
template <class B>
struct Numbers {
  double& first;
  B& second;
  bool (*valid)(double, double);
  const char* what;

  void set(const Field& f, const std::vector<double>& v) const {
    if (v.size() != 2 || !valid(v[0], v[1])) {
      throw UsageError(f.name + ": expected " + f.first_side + " " + f.second_side + ", " + what);
    }
    first = v[0];
    second = static_cast<B>(v[1]);
  }
};
template <class B>
Numbers<B> numbers(double& first, B& second, bool (*valid)(double, double), const char* what) {
  return Numbers<B>{first, second, valid, what};
}

/// A member parsed from the caller's text by `parse(text, field name)` (`--dtype bf16`,
/// Python dtype="bf16"; `--layout sections:16,24,24`): its errors name the field, one
/// message from every front end. `kind` is how describe() types it ("dtype": Python names
/// numpy dtypes first). The member is a `std::optional<T>` (none: not given) or a T with
/// its default.
template <class T, class M = std::optional<T>>
struct Parsed {
  M& member;
  T (*parse)(std::string_view, std::string_view);
  const char* kind;

  void set(const Field& f, const std::string& text) const { member = parse(text, f.name); }
};
template <class T, class M>
Parsed<T, M> parsed(M& member, T (*parse)(std::string_view, std::string_view), const char* kind) {
  return Parsed<T, M>{member, parse, kind};
}

/// The value of a plain decimal number's text ([+-]digits[.digits][e[+-]digits], as the
/// command line's numbers are written); NaN for any other text (hex, inf, nan, spaces).
inline double decimal_value(const std::string& s) {
  std::size_t i = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0, digits = 0;
  const auto run = [&s, &i] {
    std::size_t n = 0;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) ++n;
    return n;
  };
  digits += run();
  if (i < s.size() && s[i] == '.') digits += (++i, run());
  if (digits > 0 && i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    i += i + 1 < s.size() && (s[i + 1] == '+' || s[i + 1] == '-') ? 2 : 1;
    if (run() == 0) digits = 0;
  }
  if (digits == 0 || i != s.size()) return std::numeric_limits<double>::quiet_NaN();
  return std::strtod(s.c_str(), nullptr);
}

/// A positive finite number, or a word that stands for one (`--freq-scale 2pi`, Python
/// `freq_scale=2 * math.pi` or "2pi"): `words` the words and their numbers, the first the
/// one messages name. Every front end refuses anything else with one message,
/// "freq_scale: expected a positive number or 2pi, got '-1'".
struct NumberOrWord {
  using Value = double;  ///< what Python gives besides the text
  double& member;
  const Names<double>& words;

  /// A number (Python's float or int).
  void set(const Field& f, double v) const { set(f, v, fmt::format("{}", v)); }
  /// A word or a decimal number's text ("2pi", "0.5", "1e-3").
  void set(const Field& f, const std::string& text) const {
    for (const auto& [w, v] : words) {
      if (w == text) {
        member = v;
        return;
      }
    }
    set(f, decimal_value(text), text);
  }

 private:
  void set(const Field& f, double v, const std::string& text) const {
    if (!(v > 0) || v > std::numeric_limits<double>::max()) {
      throw UsageError(f.name + ": expected a positive number or " + words.front().first +
                       ", got '" + text + "'");
    }
    member = v;
  }
};
inline NumberOrWord number_or_word(double& member, const Names<double>& words) {
  return NumberOrWord{member, words};
}

/// The bytes of a size's text: a byte count or a number with K, M, G or T (powers of 1024;
/// 4G, 4GB and 4GiB alike), at least one byte and below 2^63. UsageError naming `name`.
inline std::size_t memory_size(std::string_view text, std::string_view name) {
  std::size_t i = 0, digits = 0;
  for (bool dot = false; i < text.size(); ++i) {
    if (text[i] >= '0' && text[i] <= '9') {
      ++digits;
    } else if (text[i] == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  std::string unit(text.substr(i));
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();  // KiB = K
  const std::string_view units = "KMGT";
  double mult = unit.empty() ? 1 : 0;
  if (unit.size() == 1 && units.find(unit[0]) != std::string_view::npos) {
    mult = std::ldexp(1.0, 10 * static_cast<int>(units.find(unit[0]) + 1));
  }
  const double bytes =
      (digits > 0 ? std::strtod(std::string(text.substr(0, i)).c_str(), nullptr) : 0) * mult;
  if (digits == 0 || mult == 0 || !(bytes >= 1)) {
    throw UsageError(fmt::format("{}: expected a size such as 512M, 2G, 1.5GiB or a byte "
                                 "count (K, M, G, T are powers of 1024), got '{}'",
                                 name, text));
  }
  if (bytes >= std::ldexp(1.0, 63)) {
    throw UsageError(fmt::format("{}: size '{}' is too large", name, text));
  }
  return static_cast<std::size_t>(bytes);
}

/// A memory budget (`--max-memory 4G`; Python `max_memory=` an int of bytes, 0 for no
/// limit): the command line's text is `memory_size`'s, Python's int must not be negative.
struct MemorySize {
  using Value = std::int64_t;  ///< what Python gives: bytes
  std::size_t& member;

  void set(const Field& f, std::int64_t bytes) const {
    if (bytes < 0) throw UsageError(f.name + ": must not be negative");
    member = static_cast<std::size_t>(bytes);
  }
  void set(const Field& f, const std::string& text) const { member = memory_size(text, f.name); }
};

/// A fixed number of counts, each from `lo` to `hi`, that the command line takes as one
/// text (`--mrope-section 16,24,24`) and Python as a sequence of integers or that text.
/// `what` says them in the one message of every front end: "mrope_section: expected
/// three counts t,h,w such as 16,24,24, got '16,24'".
struct Counts {
  using Value = std::vector<std::int64_t>;
  std::vector<int>& member;
  std::size_t n;
  std::int64_t lo, hi;
  const char* what;

  void set(const Field& f, const std::vector<std::int64_t>& v) const {
    std::string text;
    for (std::int64_t x : v) text += (text.empty() ? "" : ",") + std::to_string(x);
    set(f, v, text);
  }
  /// The text's comma-separated integers.
  void set(const Field& f, const std::string& text) const {
    std::vector<std::int64_t> v;
    for (std::size_t at = 0; at <= text.size();) {
      std::size_t end = text.find(',', at);
      if (end == std::string::npos) end = text.size();
      std::string item = text.substr(at, end - at);
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      const std::size_t sign = !item.empty() && (item[0] == '+' || item[0] == '-') ? 1 : 0;
      const bool digits = item.size() > sign && item.size() <= 18 &&
                          item.find_first_not_of("0123456789", sign) == std::string::npos;
      if (!digits) refuse(f, text);
      v.push_back(std::stoll(item));
      at = end + 1;
    }
    set(f, v, text);
  }
  [[noreturn]] void refuse(const Field& f, const std::string& text) const {
    throw UsageError(f.name + ": expected " + what + ", got '" + text + "'");
  }

 private:
  void set(const Field& f, const std::vector<std::int64_t>& v, const std::string& text) const {
    if (v.size() != n) refuse(f, text);
    for (std::int64_t x : v) {
      if (x < lo || x > hi) refuse(f, text);
    }
    member.assign(v.begin(), v.end());
  }
};
inline Counts counts(std::vector<int>& member, std::size_t n, std::int64_t lo, std::int64_t hi,
                     const char* what) {
  return Counts{member, n, lo, hi, what};
}

/// A list of numbers (`--short-factor 1.0,1.1`, Python `short_factor=[1.0, 1.1]` or an
/// array), also given as a tensor reference (`--short-factor f.npy`) that `read` reads.
/// Every front end says the same: "short_factor: 'x' is neither a comma-separated list of
/// numbers nor a tensor reference", "short_factor: '1e999' is not a finite number",
/// "short_factor: f.npy: expected a 1-D tensor, got shape (2, 2)".
struct NumberList {
  using Value = xt::xarray<double>;
  std::vector<double>& member;
  std::function<xt::xarray<double>(const std::string& ref)> read;

  /// A comma list, or else a tensor reference.
  void set(const Field& f, const std::string& text) const {
    std::vector<double> v;
    for (std::size_t at = 0; at <= text.size() && !text.empty();) {
      std::size_t end = text.find(',', at);
      if (end == std::string::npos) end = text.size();
      std::string item = text.substr(at, end - at);
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      const double x = decimal_value(item);
      if (std::isnan(x)) return set(f, read_ref(f, text), text + ": ", "tensor");
      if (!std::isfinite(x)) throw UsageError(f.name + ": '" + item + "' is not a finite number");
      v.push_back(x);
      at = end + 1;
    }
    if (v.empty()) return set(f, read_ref(f, text), text + ": ", "tensor");
    member = std::move(v);
  }
  /// Python's list or array.
  void set(const Field& f, const xt::xarray<double>& a) const { set(f, a, "", "list"); }

 private:
  xt::xarray<double> read_ref(const Field& f, const std::string& text) const {
    try {
      return read(text);
    } catch (const UsageError&) {
      throw UsageError(f.name + ": '" + text +
                       "' is neither a comma-separated list of numbers nor a tensor reference");
    }
  }
  void set(const Field& f, const xt::xarray<double>& a, const std::string& where,
           const char* what) const {
    if (a.dimension() > 1) {
      std::string shape;
      for (std::size_t n : a.shape()) shape += (shape.empty() ? "" : ", ") + std::to_string(n);
      throw InputError(f.name + ": " + where + "expected a 1-D " + what + ", got shape (" + shape +
                       ")");
    }
    member.assign(a.begin(), a.end());
  }
};
inline NumberList number_list(std::vector<double>& member,
                              xt::xarray<double> (*read)(const std::string&)) {
  return NumberList{member, read};
}

/// A float64 array the library takes apart as it is set (`--inv-freq F.npy`, Python
/// `inv_freq=F`): `set(field, values)` checks its shape and values and fills the
/// request's members (a RoPE layout's frequency matrix).
struct ArrayInto {
  std::function<void(const Field&, const xt::xarray<double>&)> set;
};

/// A float64 tensor and whether its source held float32 values (UDOP's boxes are then
/// computed in float32, as HF does): `v(field("bbox", ...), with_f32(r.bbox, r.bbox_f32))`.
/// In Python the flag is the keyword `<name>_f32`.
struct ArrayF32 {
  std::optional<xt::xarray<double>>& values;
  bool& f32;
};
inline ArrayF32 with_f32(std::optional<xt::xarray<double>>& values, bool& f32) {
  return ArrayF32{values, f32};
}

/// Several tensors given together, each into its own member (`--mlp W1 B1 W2`, Python
/// `mlp=(w1, b1, w2)`; `--bias-table WX [WY]`). `said`: for a member the library's
/// messages name apart ("bias_table_y"), that name and how the command line says it after
/// the field's own name ("y, the second"); empty: the member goes by the field's name.
/// `keywords`: Python's keyword for each member (`segment_ids`, `key_segment_ids`: one
/// option on the command line, two keywords); empty: one keyword, a list.
template <class T = double>
struct Spread {
  std::vector<std::optional<xt::xarray<T>>*> members;
  std::vector<std::pair<std::string, std::string>> said;
  std::vector<std::string> keywords;
};
template <class T = double>
Spread<T> spread(std::vector<std::optional<xt::xarray<T>>*> members,
                 std::vector<std::pair<std::string, std::string>> said = {},
                 std::vector<std::string> keywords = {}) {
  return Spread<T>{std::move(members), std::move(said), std::move(keywords)};
}

class Tensor;

/// A tensor input given by reference (`--rel-keys r.npy`, Python `rel_keys=r`) into a
/// request's `const Tensor*` member: the front end reads it once the request's rules
/// (its `check_given`) have passed and points the member at it; the library checks its
/// shape and values. `v(field("rel_keys", ...), tensor_slot(r.rel_keys))`.
struct TensorSlot {
  const Tensor*& slot;
};
inline TensorSlot tensor_slot(const Tensor*& member) { return TensorSlot{member}; }

/// Several tensors given together, each into its member (`--factorized PHI PI PSI OMEGA`,
/// Python `factorized=(phi, pi, psi, omega)`): `names` are the members' names (Python's
/// messages), `words` how --help writes them, `what` how messages say them ("the four
/// tables").
struct TensorSlots {
  std::vector<const Tensor**> slots;
  std::vector<std::string> names;
  std::string words;
  std::string what;

  /// "factorized: expected the four tables (phi, pi, psi, omega)" and `tail`.
  [[noreturn]] void refuse(const Field& f, const std::string& tail = "") const {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw UsageError(f.name + ": expected " + what + " (" + list + ")" + tail);
  }
};
inline TensorSlots tensor_slots(std::vector<const Tensor**> slots, std::vector<std::string> names,
                                std::string words, std::string what) {
  return TensorSlots{std::move(slots), std::move(names), std::move(words), std::move(what)};
}

/// A tensor read into a request's flat values and their shape, and the words that name
/// its source in the library's messages (RoPE's position ids, cu_seqlens, angles): `T`
/// std::int64_t takes integers only, exactly; double a float tensor of any float dtype,
/// widened exactly. The command line's `what` is "--cu-seqlens: FILE"; Python's stays the
/// keyword. `v(field("cu_seqlens", ...), values(p.cu_seqlens, p.cu_seqlens_shape,
/// p.cu_what))`; the library checks the shape and the values.
template <class T>
struct Values {
  std::vector<T>& values;
  std::vector<std::size_t>& shape;
  std::string& what;
  /// Integers: where a float tensor goes instead (real coordinates given as position ids)
  /// when the caller takes them; none: a float tensor is refused.
  std::vector<double>* reals = nullptr;
  std::vector<std::size_t>* reals_shape = nullptr;
  /// Takes the source's dtype name (the caller's cos/sin tables keep their type); none:
  /// the type is not kept. Python gives it as the keyword `<name>_dtype`.
  std::function<void(const std::string&)> dtype;

  Values& or_reals(std::vector<double>& r, std::vector<std::size_t>& r_shape) {
    reals = &r;
    reals_shape = &r_shape;
    return *this;
  }
  Values& dtype_to(std::function<void(const std::string&)> f) {
    dtype = std::move(f);
    return *this;
  }
};
template <class T>
Values<T> values(std::vector<T>& values, std::vector<std::size_t>& shape, std::string& what) {
  return Values<T>{values, shape, what, nullptr, nullptr, {}};
}

/// What a front end says about the request being built: whether the caller gave a field,
/// and how the caller spells a field in messages ("--bias-table" on the command line,
/// "bias_table" in Python; "" for a field the caller does not have, which a message
/// listing fields leaves out).
struct Caller {
  std::function<bool(const std::string&)> gave;
  std::function<std::string(const std::string&)> term;
  std::function<std::size_t(const std::string&)> count;  ///< values a list field was given
  /// Takes a Spread with `keywords` as those keywords (Python), which its messages name.
  bool spread_apart = false;
};

/// Rules that join fields (one of two given, sizes checked before a table is read):
/// checked by each front end once the plain fields are set and before any array is read,
/// so a bad window is named before a large file is read. A request without such rules
/// has this empty overload; others overload it beside their `declare`.
template <class R>
void check_given(const R&, const Caller&) {}

/// Collects the spread members whose messages must be said as the caller's field.
struct SpreadNames {
  std::vector<std::pair<std::string, std::string>> from_to;  ///< "bias_table_y: " -> "X (y, ...): "
  const Caller* caller = nullptr;
  template <class T>
  void operator()(const Field&, const T&) {}
  template <class T>
  void operator()(const Field& f, const Spread<T>& s) {
    if (caller->spread_apart && !s.keywords.empty()) return;
    for (const auto& [member, label] : s.said) {
      from_to.push_back({member + ": ", caller->term(f.name) + " (" + label + "): "});
    }
  }
};

/// `f()`, an InputError naming a spread member as the library does ("bias_table_y: ...")
/// said as the caller's field instead ("--bias-table (y, the second): ...").
template <class R, class F>
auto in_callers_terms(R& r, const Caller& c, F&& f) {
  try {
    return f();
  } catch (const InputError& e) {
    SpreadNames n;
    n.caller = &c;
    declare(n, r);
    const std::string msg = e.what();
    for (const auto& [from, to] : n.from_to) {
      if (msg.rfind(from, 0) == 0) throw InputError(to + msg.substr(from.size()));
    }
    throw;
  }
}

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

/// Why `v` is outside field `f`'s range, or "" when it is inside: "must be from 0 to 9,
/// got 10", "must be at least 1, got 0", for a real field taking 0 and up "must be a
/// finite number >= 0, got -1". The one message of the library and of every front end,
/// each putting its name for the field before it (`compression`, `--compression`).
template <class T>
std::string range_error(const Field& f, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!f.non_negative || (v >= 0 && std::isfinite(v))) return "";
    return fmt::format("must be a finite number >= 0, got {}", v);
  } else {
    bool huge = false;  // an unsigned value beyond int64's range
    if constexpr (std::is_unsigned_v<T>) {
      huge = static_cast<std::uint64_t>(v) > std::uint64_t{std::numeric_limits<std::int64_t>::max()};
    }
    const auto x = static_cast<std::int64_t>(v);
    const bool low = !huge && f.lo && x < *f.lo, high = f.hi && (huge || x > *f.hi);
    if (!low && !high) return "";
    if (f.hi) {
      return fmt::format("must be from {} to {}, got {}", *f.lo,
                         f.hi_text.empty() ? std::to_string(*f.hi) : f.hi_text, v);
    }
    return fmt::format("must be at least {}, got {}", *f.lo, v);
  }
}

/// Range errors of a field: "<name>: " and range_error's message, thrown through
/// `sources` (UsageError, or InputError naming the config file's key when a file gave
/// the value).
class Validator {
 public:
  explicit Validator(const ValueSources& sources) : sources_(sources) {}

  template <class T>
  void operator()(const Field& f, const T& value) {
    if constexpr (IsOptional<T>::value) {
      if (value) (*this)(f, *value);
    } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      const std::string why = range_error(f, value);
      if (!why.empty()) sources_.fail(f.name, f.name + ": " + why);
    }
  }
  template <class M, class E>
  void operator()(const Field&, const Choice<M, E>&) {}  // a name table holds only valid values
  void operator()(const Field&, const Pair&) {}          // the sides' ranges are the table's
  void operator()(const Field&, const Sides&) {}         // checked as they are set
  template <class E>
  void operator()(const Field&, const Emits<E>&) {}  // checked as they are set

 private:
  const ValueSources& sources_;
};

/// Checks every declared range of `r` (before anything is computed or read).
template <class R>
void validate(const R& r, const ValueSources& sources = ValueSources()) {
  Validator v(sources);
  declare(v, const_cast<R&>(r));  // the validator only reads
}

/// Collects the fields of a request with their types, choices and defaults.
class Describer {
 public:
  std::vector<Field> fields;

  template <class T>
  void operator()(Field f, const T& value) {
    using V = typename Plain<T>::type;
    f.type = std::is_same_v<V, bool>       ? "bool"
             : std::is_integral_v<V>       ? "int"
             : std::is_floating_point_v<V> ? "float"
                                           : "?";
    if constexpr (std::is_same_v<V, xt::xarray<double>>) {
      f.type = "array";
    } else if constexpr (std::is_same_v<V, xt::xarray<std::int64_t>>) {
      f.type = "int array";
    } else if constexpr (std::is_same_v<V, std::vector<xt::xarray<double>>>) {
      f.type = "array list";
    } else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>) {
      f.type = "int list";
    } else if constexpr (IsOptional<T>::value) {
      if (value) f.default_text = text(*value);
    } else {
      f.default_text = text(value);
    }
    fields.push_back(std::move(f));
  }
  template <class M, class E>
  void operator()(Field f, const Choice<M, E>& c) {
    f.type = "choice";
    f.choices = c.list();
    if constexpr (IsOptional<std::remove_reference_t<M>>::value && !IsOptional<E>::value) {
      if (c.member) f.default_text = name_of(c, *c.member);
    } else if constexpr (std::is_reference_v<M>) {
      f.default_text = name_of(c, c.member);
    }  // tied members: no one name is the default
    fields.push_back(std::move(f));
  }
  template <class B>
  void operator()(Field f, const Numbers<B>&) {
    f.type = "numbers";
    fields.push_back(std::move(f));
  }
  template <class T, class M>
  void operator()(Field f, const Parsed<T, M>& p) {
    f.type = p.kind;
    fields.push_back(std::move(f));
  }
  void operator()(Field f, const NumberList&) {
    f.type = "number list";
    fields.push_back(std::move(f));
  }
  void operator()(Field f, const Counts&) {
    f.type = "counts";
    fields.push_back(std::move(f));
  }
  void operator()(Field f, const MemorySize& m) {
    f.type = "size";
    f.default_text = text(m.member);
    fields.push_back(std::move(f));
  }
  // The words are no choices: "tau" is an alias that --help leaves out.
  void operator()(Field f, const NumberOrWord& n) {
    f.type = "number or word";
    f.default_text = text(n.member);
    fields.push_back(std::move(f));
  }
  void operator()(Field f, const Sides& s) {
    f.type = "sides";
    f.default_text = std::to_string(s.first) + "," + std::to_string(s.second);
    fields.push_back(std::move(f));
  }
  void operator()(Field f, const Pair&) {
    f.type = "pair";
    fields.push_back(std::move(f));
  }
  void operator()(Field f, const ArrayInto&) {
    f.type = "array";
    fields.push_back(std::move(f));
  }
  void operator()(Field f, const ArrayF32&) {
    f.type = "array";
    fields.push_back(std::move(f));
  }
  template <class T>
  void operator()(Field f, const Spread<T>&) {
    f.type = std::is_same_v<T, double> ? "array list" : "int array list";
    fields.push_back(std::move(f));
  }
  template <class E>
  void operator()(Field f, const Emits<E>& e) {
    f.type = "choice list";
    for (const auto& n : e.names) f.choices.push_back(n.first);
    for (E x : e.list) {
      for (const auto& [n, v] : e.names) {
        if (v == x) f.default_text += (f.default_text.empty() ? "" : ",") + n;
      }
    }
    fields.push_back(std::move(f));
  }
  void operator()(Field f, const TensorSlot&) {
    f.type = "tensor";
    fields.push_back(std::move(f));
  }
  template <class T>
  void operator()(Field f, const Values<T>&) {  // Values
    f.type = std::is_same_v<T, double> ? "float tensor" : "int tensor";
    fields.push_back(std::move(f));
  }
  void operator()(Field f, const TensorSlots& s) {
    f.type = "tensors";
    f.choices = s.names;
    fields.push_back(std::move(f));
  }

 private:
  template <class T>
  struct Plain {
    using type = T;
  };
  template <class T>
  struct Plain<std::optional<T>> {
    using type = T;
  };
  template <class T>
  static std::string text(const T& v) {
    if constexpr (std::is_same_v<T, bool>) {
      return v ? "True" : "False";
    } else {
      return fmt::format("{}", v);
    }
  }
  template <class M, class E>
  static std::string name_of(const Choice<M, E>& c, const E& e) {
    for (const auto& [n, v] : c.names) {
      if (v == e) return n;
    }
    return "";
  }
};

/// The declared fields of request type R, in declaration order, with their defaults.
template <class R>
std::vector<Field> describe() {
  R r{};
  Describer d;
  declare(d, r);
  return d.fields;
}

/// Finds a request's Emits field.
class EmitsFinder {
 public:
  /// Calls its argument with each table's name once `each` is set; none: the request has
  /// no Emits field.
  std::function<void(const std::function<void(const std::string&)>&)> each;

  template <class T>
  void operator()(const Field&, const T&) {}
  template <class E>
  void operator()(const Field&, Emits<E> e) {
    each = [e](const std::function<void(const std::string&)>& f) {
      for (E x : e.list) {
        e.each = x;
        f(e.name(x));
      }
    };
  }
};

/// Calls `f(name)` once for each table of `r` with its `emit` set: once per name of its
/// Emits field (the name as Emits::name), or once with "" for a request without one.
template <class R, class F>
void for_each_emitted(R& r, F&& f) {
  EmitsFinder e;
  declare(e, r);
  if (!e.each) return f(std::string());
  e.each(f);
}

/// Whether request type R writes a list of tables (has an Emits field).
template <class R>
bool emits_several() {
  R r{};
  EmitsFinder e;
  declare(e, r);
  return static_cast<bool>(e.each);
}

}  // namespace posenc
