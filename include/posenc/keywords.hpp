#pragma once
/// \file
/// Requests read by keyword: the declared fields (declare.hpp) of a request taken from
/// named values rather than from command-line text. The Python package's module is such a
/// caller; its dicts of Python objects reach the reader through `Keywords`, the one thing
/// a keyword front end implements (turning one of its values into the type a field asks
/// for). The reader visits a request's declaration, takes each value the caller gave as
/// the field's shape says, and checks its range and choice: the messages and exit statuses
/// are the library's, the same for every keyword caller.

#include <cstdint>
#include <limits>
#include <list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "posenc/declare.hpp"
#include "posenc/error.hpp"
#include "posenc/printable.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// One keyword's value, or item `item` of a list keyword's value, which messages name
/// `as` when it is given (a member of a list of tensors), else by the keyword.
struct Key {
  std::string name;
  std::optional<std::size_t> item;
  std::string as;
  Key(std::string n) : name(std::move(n)) {}  // NOLINT: a keyword is its name
  Key(const char* n) : name(n) {}             // NOLINT
  Key(std::string n, std::size_t i, std::string a = "")
      : name(std::move(n)), item(i), as(std::move(a)) {}
  const std::string& shown() const { return as.empty() ? name : as; }
};

/// What a keyword of type T takes, for messages ("expected an integer, got str 'x'").
template <class T>
const char* expected_kind() {
  if constexpr (std::is_same_v<T, std::string>) {
    return "a string";
  } else if constexpr (std::is_same_v<T, bool>) {
    return "True or False";
  } else if constexpr (std::is_integral_v<T>) {
    return "an integer";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "a number";
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    return "a list of strings";
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    return "a list of numbers";
  } else if constexpr (std::is_same_v<T, std::pair<std::int64_t, std::int64_t>>) {
    return "two integers";
  } else {
    return "a list of integers";
  }
}

/// The caller's values by keyword, as its front end holds them. A getter is called only
/// for a key `gives`; it returns the value as the type asks or throws the UsageError
/// "<name>: expected <kind>, got <the value described>" (an integer beyond int64 "is out
/// of range", a number beyond double "is too large").
class Keywords {
 public:
  virtual ~Keywords() = default;
  /// Whether the caller gave `k` (a value other than none).
  virtual bool gives(const Key& k) const = 0;
  /// The value as messages show it: its type and its value, cut short ("int 5").
  virtual std::string described(const Key& k) const = 0;
  virtual bool is_bool(const Key& k) const = 0;
  virtual bool is_text(const Key& k) const = 0;
  /// An integer of any size (not a bool): one beyond int64 is beyond a narrower type too.
  virtual bool is_integer(const Key& k) const = 0;
  /// An array of real numbers (not a list, not integers).
  virtual bool is_real_array(const Key& k) const = 0;
  /// The length of a list; none for any other value.
  virtual std::optional<std::size_t> list_length(const Key& k) const = 0;
  /// How many items a sequence says it has (0 for a value that is none), before any is
  /// read: a long sequence is refused before it is copied.
  virtual std::size_t size_hint(const Key& k) const = 0;

  virtual bool boolean(const Key& k) const = 0;
  virtual std::int64_t integer(const Key& k) const = 0;
  virtual double number(const Key& k) const = 0;
  virtual std::string text(const Key& k) const = 0;  ///< without a NUL character
  virtual std::vector<std::string> texts(const Key& k) const = 0;
  virtual std::vector<double> numbers(const Key& k) const = 0;
  virtual std::vector<std::int64_t> integers(const Key& k) const = 0;
  virtual std::pair<std::int64_t, std::int64_t> two_integers(const Key& k) const = 0;
  /// An array's values converted to float64 / int64, with its shape.
  virtual xt::xarray<double> real_array(const Key& k) const = 0;
  virtual xt::xarray<std::int64_t> integer_array(const Key& k) const = 0;
  /// A tensor given with its posenc dtype; its memory may be borrowed from the caller's
  /// value, which outlives the request.
  virtual Tensor tensor(const Key& k) const = 0;
  /// Refuses a tensor reference the caller may not give (a keyword caller has no
  /// standard input to read).
  virtual void check_ref(const std::string&) const {}

  /// The value of `k` as a T (none when not given), an integer checked against T's range.
  template <class T>
  std::optional<T> get(const Key& k) const {
    if (!gives(k)) return std::nullopt;
    if constexpr (std::is_same_v<T, bool>) {
      return boolean(k);
    } else if constexpr (std::is_integral_v<T>) {
      std::int64_t v = 0;
      bool beyond = false;  // beyond int64: said with T's range, as any value beyond T's
      try {
        v = integer(k);
      } catch (const UsageError&) {
        if (std::is_same_v<T, std::int64_t> || !is_integer(k)) throw;
        beyond = true;
      }
      if (beyond || v < std::int64_t{std::numeric_limits<T>::min()} ||
          (std::is_signed_v<T> && v > static_cast<std::int64_t>(std::numeric_limits<T>::max()))) {
        throw UsageError(k.shown() + ": " + described(k) + " is out of range (" +
                         std::to_string(std::numeric_limits<T>::min()) + " to " +
                         std::to_string(std::numeric_limits<T>::max()) + ")");
      }
      return static_cast<T>(v);
    } else if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(number(k));
    } else if constexpr (std::is_same_v<T, std::string>) {
      return text(k);
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      return texts(k);
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      return numbers(k);
    } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
      return integers(k);
    } else {
      static_assert(std::is_same_v<T, std::pair<std::int64_t, std::int64_t>>);
      return two_integers(k);
    }
  }
  template <class T>
  xt::xarray<T> array(const Key& k) const {
    if constexpr (std::is_same_v<T, double>) {
      return real_array(k);
    } else {
      static_assert(std::is_same_v<T, std::int64_t>);
      return integer_array(k);
    }
  }
  /// Throws "<name>: expected <what>, got <the value>".
  [[noreturn]] void refuse(const Key& k, const std::string& what) const {
    throw UsageError(k.shown() + ": expected " + what + ", got " + described(k));
  }
};

/// The keywords of `given` as a request's check_given sees them: a field given when one of
/// them gives it, spelled as its keyword; a list's count its length.
inline Caller keyword_caller(std::vector<const Keywords*> given) {
  const auto holder = [given](const std::string& n) -> const Keywords* {
    for (const Keywords* k : given) {
      if (k != nullptr && k->gives(n)) return k;
    }
    return nullptr;
  };
  Caller c;
  c.spread_apart = true;  // a Spread's keywords are the caller's names for its members
  c.gave = [holder](const std::string& n) { return holder(n) != nullptr; };
  c.term = [](const std::string& n) { return n; };
  c.count = [holder](const std::string& n) -> std::size_t {
    const Keywords* k = holder(n);
    return k == nullptr ? 0 : k->list_length(n).value_or(0);
  };
  return c;
}

/// Reads a request's declared fields from `k`: the keys are the fields' keywords; a choice
/// is one of its names (or, for a field with a bare form, True); an array field's value an
/// array, a pair's two integers, a list's a list. Ranges, shapes and values are checked
/// as the fields declare. With `arrays` false the array fields are passed over, with true
/// only they are read: a request's check_given runs between the two. A tensor field's
/// tensor goes to `held`, its member pointing at it (none: tensor fields are passed over).
class KeywordReader {
 public:
  explicit KeywordReader(const Keywords& k, std::optional<bool> arrays = std::nullopt,
                         std::list<Tensor>* held = nullptr)
      : k_(k), arrays_(arrays), held_(held) {}
  /// The names of the fields given, in declaration order.
  std::vector<std::string> given;

  template <class R>
  void read(R& r) {
    declare(*this, r);
  }
  /// A plain field; one whose range is checked as it is given (Field::checked_when_given)
  /// is read as int64 or double, so that -1 or 2**40 meets the range's message, and
  /// refuses a bool unless it takes one.
  template <class T>
  void operator()(const Field& f, T& member) {
    if (arrays_.value_or(false)) return;
    const std::string key = f.python_name();
    if (k_.gives(key)) given.push_back(f.name);
    using V = typename decltype(std::optional(member))::value_type;  // T, or T's value
    if constexpr (std::is_arithmetic_v<V> && !std::is_same_v<V, bool>) {
      using Read = std::conditional_t<std::is_integral_v<V>, std::int64_t, V>;
      if (f.checked_when_given) {
        if (k_.gives(key) && k_.is_bool(key) && !f.bools) k_.refuse(key, expected_kind<Read>());
        const auto v = k_.get<Read>(key);
        const std::string why = v ? range_error(f, *v) : "";
        if (!why.empty()) throw UsageError(key + ": " + why);
        if (v) member = static_cast<V>(*v);
        return;
      }
    }
    if (auto v = k_.get<V>(key)) member = *v;
  }
  template <class T>
  void operator()(const Field& f, xt::xarray<T>& member) {
    if (!arrays_.value_or(true) || !has(f)) return;
    member = k_.array<T>(f.name);
  }
  template <class T>
  void operator()(const Field& f, std::optional<xt::xarray<T>>& member) {
    if (!arrays_.value_or(true)) return;
    member = array_if<T>(f.name);
  }
  void operator()(const Field& f, std::vector<xt::xarray<double>>& member) {
    if (!arrays_.value_or(true) || !has(f)) return;
    const std::size_t n = list_of(f);
    for (std::size_t i = 0; i < n; ++i) member.push_back(k_.real_array(Key(f.name, i)));
  }
  template <class T>
  void operator()(const Field& f, const Spread<T>& s) {
    if (!arrays_.value_or(true)) return;
    for (std::size_t i = 0; i < s.keywords.size(); ++i) {  // a keyword each
      *s.members.at(i) = array_if<T>(s.keywords[i]);
    }
    if (!s.keywords.empty() || !has(f)) return;
    const std::size_t n = list_of(f);
    for (std::size_t i = 0; i < n; ++i) {  // (x, None): the second not given
      if (k_.gives(Key(f.name, i))) *s.members.at(i) = k_.array<T>(Key(f.name, i));
    }
  }
  void operator()(const Field& f, const ArrayInto& a) {
    if (!arrays_.value_or(true)) return;
    if (auto m = array_if<double>(f.name)) a.set(f, *m);
  }
  void operator()(const Field& f, ArrayF32 a) {
    if (!arrays_.value_or(true)) return;
    a.values = array_if<double>(f.name);
    if (auto v = k_.get<bool>(f.name + "_f32")) a.f32 = *v;
  }
  void operator()(const Field& f, Pair p) {
    if (arrays_.value_or(false)) return;
    if (auto v = k_.get<std::pair<std::int64_t, std::int64_t>>(f.name)) {
      std::tie(p.first, p.second) = *v;
    }
  }
  template <class M, class E>
  void operator()(const Field& f, Choice<M, E> c) {
    if (arrays_.value_or(false)) return;
    if (!f.bare.empty() && has(f) && k_.is_bool(f.name)) {
      if (!k_.boolean(f.name)) return;  // False: not given
      given.push_back(f.name);
      return c.set(f, "");  // True: as the bare option
    }
    const auto name = scalar<std::string>(f);
    if (!name) return;
    if (!f.bare.empty()) return c.set(f, *name);  // the command's message
    const E* e = c.find(*name);
    if (e == nullptr) {
      throw UsageError(f.name + ": expected " + c.listed() + ", got '" + printable(*name) + "'");
    }
    c.member = *e;
  }
  template <class E>
  void operator()(const Field& f, const Emits<E>& e) {  // a name or a sequence of names
    if (arrays_.value_or(false) || !has(f)) return;
    if (k_.is_text(f.name)) return e.set(f, {k_.text(f.name)}, "", "one or a sequence of");
    const auto names = *scalar<std::vector<std::string>>(f);
    std::string said;  // as Python writes the tuple: ('a', 'b')
    for (const std::string& n : names) said += (said.empty() ? "('" : ", '") + n + "'";
    said += names.size() == 1 ? ",)" : ")";
    e.set(f, names, names.size() == 1 ? "" : said, "one or a sequence of");
  }
  template <class B>
  void operator()(const Field& f, const Numbers<B>& n) {
    if (auto v = scalar<std::vector<double>>(f)) n.set(f, *v);
  }
  template <class T, class M>
  void operator()(const Field& f, const Parsed<T, M>& p) {
    if (auto text = scalar<std::string>(f)) p.set(f, *text);
  }
  void operator()(const Field& f, MemorySize m) {  // bytes only: no size text by keyword
    if (auto v = scalar<std::int64_t>(f)) m.set(f, *v);
  }
  /// A field the command line sets from its text (NumberOrWord, Counts, NumberList): a
  /// text is that text, another value the shape's Value (a number, integers, an array). A
  /// long sequence is refused before it is copied (an empty array of shape (2**31, 0) has
  /// 2**31 items); a tensor reference is one the caller may give.
  template <class S, class V = typename S::Value>
  void operator()(const Field& f, S s) {
    if (arrays_.value_or(false) || !has(f)) return;
    if constexpr (std::is_same_v<S, NumberList>) {
      s.read = [this, read = s.read](const std::string& ref) {
        k_.check_ref(ref);
        return read(ref);
      };
    }
    if (k_.is_text(f.name)) return s.set(f, *scalar<std::string>(f));
    given.push_back(f.name);
    if constexpr (std::is_same_v<V, xt::xarray<double>>) {
      s.set(f, k_.real_array(f.name));
    } else {
      if (k_.size_hint(f.name) > 16) k_.refuse(f.name, expected_kind<V>());
      s.set(f, *k_.get<V>(f.name));
    }
  }
  void operator()(const Field& f, const Sides& s) {
    if (auto v = scalar<std::vector<std::int64_t>>(f)) s.set(f, *v);
  }
  void operator()(const Field& f, TensorSlot t) {
    if (held_ != nullptr && arrays_.value_or(true)) t.slot = hold(f.name);
  }
  template <class T>
  void operator()(const Field& f, Values<T> v) {  // an int64 or float64 array
    if (!arrays_.value_or(true) || !has(f)) return;
    if (v.reals != nullptr && k_.is_real_array(f.name)) {  // real coordinates
      const xt::xarray<double> r = k_.real_array(f.name);
      v.reals_shape->assign(r.shape().begin(), r.shape().end());
      v.reals->assign(r.begin(), r.end());
      return;
    }
    if (v.dtype) {
      if (auto n = k_.get<std::string>(f.name + "_dtype")) v.dtype(*n);
    }
    const xt::xarray<T> a = k_.array<T>(f.name);
    v.shape.assign(a.shape().begin(), a.shape().end());
    v.values.assign(a.begin(), a.end());
  }
  void operator()(const Field& f, const TensorSlots& t) {  // a list of tensors
    if (held_ == nullptr || !arrays_.value_or(true) || !has(f)) return;
    if (k_.list_length(f.name) != t.slots.size()) t.refuse(f);
    for (std::size_t i = 0; i < t.slots.size(); ++i) {
      if (!(*t.slots[i] = hold(Key(f.name, i, t.names[i])))) {
        t.refuse(f, ", got None for " + t.names[i]);
      }
    }
  }

 private:
  /// The tensor of `k` held for the request (none: not given).
  const Tensor* hold(const Key& k) {
    return k_.gives(k) ? &held_->emplace_back(k_.tensor(k)) : nullptr;
  }
  template <class T>
  std::optional<xt::xarray<T>> array_if(const std::string& key) const {
    if (!k_.gives(key)) return std::nullopt;
    return k_.array<T>(key);
  }
  /// The length of list field `f`, which the caller gave (refused when not a list).
  std::size_t list_of(const Field& f) const {
    const auto n = k_.list_length(f.name);
    if (!n) k_.refuse(f.name, "a list of arrays");
    return *n;
  }
  /// The value of field `f` when this pass reads scalars and the caller gave it (noted as
  /// given).
  template <class T>
  std::optional<T> scalar(const Field& f) {
    if (arrays_.value_or(false)) return std::nullopt;
    auto v = k_.get<T>(f.name);
    if (v) given.push_back(f.name);
    return v;
  }
  bool has(const Field& f) const { return k_.gives(f.name); }

  const Keywords& k_;
  std::optional<bool> arrays_;  // none: every field
  std::list<Tensor>* held_;
};

}  // namespace posenc
