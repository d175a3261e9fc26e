#pragma once
// Options from a request's declared fields (posenc/declare.hpp): each field becomes the
// option its name spells (`max_distance` -> --max-distance) with its help, bound to the
// request's member. The ranges are not repeated here: the library validates the request
// and names the field, which cli_terms turns back into the option.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "cli/parse.hpp"
#include "posenc/declare.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {

/// A tensor of any numeric dtype as float64, read for `option` (a learned table, weights,
/// frequencies; with `allow_bool` a pixel mask); the library checks its shape and values.
/// `dtype`: where to say the file's dtype.
inline xt::xarray<double> read_values(const std::string& ref, const std::string& option,
                                      bool allow_bool = false, DType* dtype = nullptr) {
  const Tensor t = read_tensor(ref);
  if (dtype != nullptr) *dtype = t.dtype();
  if (t.dtype() == DType::b1 && !allow_bool) {
    throw InputError(fmt::format("{}: {}: expected numbers, got bool", option, ref));
  }
  xt::xarray<double> out = xt::empty<double>(t.shape());
  for (std::size_t i = 0; i < t.numel(); ++i) out.data()[i] = t.get(i);
  return out;
}

/// The files of a command's array fields (`--bias-table REF`): bound as paths while the
/// command line is parsed, read in declaration order by `read()` once the request's plain
/// fields are set and its `check_given` has passed.
class ArrayFiles {
 public:
  template <class T>
  void bind(CLI::App* sub, CLI::Option*& opt, const Field& f, T& member) {
    Slot& s = slots_.emplace_back();
    const std::string option = f.option();
    if constexpr (std::is_same_v<T, std::vector<xt::xarray<double>>>) {
      opt = sub->add_option(option, s.paths, f.help)->expected(f.min_count, f.max_count);
      s.read = [&member, &s, option] {
        for (const std::string& p : s.paths) member.push_back(read_values(p, option));
      };
    } else {
      opt = sub->add_option(option, s.path, f.help);
      const bool bools = f.bools;
      s.read = [&member, &s, option, bools] {
        if (s.path.empty()) return;
        using V = std::decay_t<decltype(value_of(member))>;
        if constexpr (std::is_same_v<V, xt::xarray<std::int64_t>>) {
          member = read_int64(s.path, option.c_str());
        } else {
          member = read_values(s.path, option, bools);
        }
      };
    }
  }
  /// A float64 tensor whose file's dtype says whether it is computed in float32.
  /// A float64 tensor the declaration takes apart.
  void bind(CLI::App* sub, CLI::Option*& opt, const Field& f, ArrayInto a) {
    Slot& s = slots_.emplace_back();
    opt = sub->add_option(f.option(), s.path, f.help);
    s.read = [a, &s, f] {
      if (!s.path.empty()) a.set(f, read_values(s.path, f.option()));
    };
  }
  void bind(CLI::App* sub, CLI::Option*& opt, const Field& f, ArrayF32 a) {
    Slot& s = slots_.emplace_back();
    const std::string option = f.option();
    opt = sub->add_option(option, s.path, f.help);
    s.read = [a, &s, option] {
      if (s.path.empty()) return;
      DType dt = DType::f64;
      a.values = read_values(s.path, option, false, &dt);
      a.f32 = dt == DType::f32;
    };
  }
  /// Several files, one into each member.
  template <class T>
  void bind(CLI::App* sub, CLI::Option*& opt, const Field& f, const Spread<T>& spread) {
    Slot& s = slots_.emplace_back();
    const std::string option = f.option();
    opt = sub->add_option(option, s.paths, f.help)->expected(f.min_count, f.max_count);
    s.read = [members = spread.members, &s, option] {
      for (std::size_t i = 0; i < s.paths.size(); ++i) {
        if constexpr (std::is_same_v<T, std::int64_t>) {
          *members.at(i) = read_int64(s.paths[i], option.c_str());
        } else {
          *members.at(i) = read_values(s.paths[i], option);
        }
      }
    };
  }
  /// A tensor reference (`--rel-keys r.npy`), read as it is and pointed at by the member.
  void bind(CLI::App* sub, CLI::Option*& opt, const Field& f, TensorSlot t) {
    Slot& s = slots_.emplace_back();
    opt = sub->add_option(f.option(), s.path, f.help);
    s.read = [t, &s] {
      if (s.path.empty()) return;
      s.held.emplace_back(read_tensor(s.path));
      t.slot = &s.held.back();
    };
  }
  /// Several tensor references (`--factorized PHI PI PSI OMEGA`), one into each member.
  void bind(CLI::App* sub, CLI::Option*& opt, const Field& f, const TensorSlots& t) {
    Slot& s = slots_.emplace_back();
    opt = sub->add_option(f.option(), s.paths, f.help)
              ->expected(static_cast<int>(t.slots.size()))
              ->type_name(t.words);
    s.read = [slots = t.slots, &s] {
      for (std::size_t i = 0; i < s.paths.size(); ++i) {
        s.held.emplace_back(read_tensor(s.paths[i]));
        *slots.at(i) = &s.held.back();
      }
    };
  }
  /// A tensor into flat values and their shape (Values: `--cu-seqlens c.npy`): integers
  /// exactly as int64, or any float dtype widened exactly; the source named
  /// "--cu-seqlens: FILE" in the library's messages.
  template <class T>
  void bind(CLI::App* sub, CLI::Option*& opt, const Field& f, Values<T> v) {
    Slot& s = slots_.emplace_back();
    const std::string option = f.option();
    opt = sub->add_option(option, s.path, f.help);
    s.read = [this, v, &s, option] {
      if (s.path.empty()) return;
      const Tensor t = read_tensor(s.path);
      v.what = option + ": " + s.path;
      v.shape = t.shape();
      if constexpr (std::is_same_v<T, std::int64_t>) {
        if (v.reals != nullptr && reals_ && is_float(t.dtype())) {  // real coordinates
          v.shape.clear();
          *v.reals_shape = t.shape();
          v.reals->resize(t.numel());
          for (std::size_t i = 0; i < t.numel(); ++i) (*v.reals)[i] = t.get(i);
          return;
        }
        const xt::xarray<std::int64_t> a = int64_values(t, s.path, option.c_str());
        v.values.assign(a.begin(), a.end());
      } else {
        if (!is_float(t.dtype())) {
          throw InputError(fmt::format("{}: {}: expected a float tensor, got {}", option, s.path,
                                       dtype_name(t.dtype())));
        }
        if (v.dtype) v.dtype(std::string(dtype_name(t.dtype())));
        v.values.resize(t.numel());  // get() widens every float type exactly
        for (std::size_t i = 0; i < t.numel(); ++i) v.values[i] = t.get(i);
      }
    };
  }
  void read() {
    for (Slot& s : slots_) s.read();
  }
  /// Whether a Values field that takes reals (Values::or_reals) takes a float tensor's
  /// (`posenc rope --position-ids` of real coordinates); otherwise it must hold integers.
  void take_reals(bool yes) { reals_ = yes; }
  /// The bytes of the tensors read for TensorSlot(s) members.
  std::size_t held_bytes() const {
    std::size_t n = 0;
    for (const Slot& s : slots_) {
      for (const Tensor& t : s.held) n += t.nbytes();
    }
    return n;
  }

 private:
  template <class V>
  static V& value_of(std::optional<V>& m) {
    return *m;
  }
  template <class V>
  static V& value_of(V& m) {
    return m;
  }
  struct Slot {
    std::string path;
    std::vector<std::string> paths;
    std::function<void()> read;
    std::list<Tensor> held;  // tensors read for TensorSlot members, which point at them
  };
  std::list<Slot> slots_;  // stable addresses: CLI11 holds the paths' references
  bool reals_ = true;
};

/// The check of a field whose range is checked as it is given (Field::checked_when_given):
/// --help shows the range as CLI11's Range and NonNegativeNumber wrote it ("INT in [0 - 9]",
/// "NONNEGATIVE"; UINT says "at least 0"), and a number outside it is refused with the
/// library's message before any input is opened. Text that is no number is left to
/// check_numeric_options, which reads an integer as signed under this ("declared") check.
inline CLI::Validator declared_range(const Field& f, bool real) {
  const std::string shown = real     ? "NONNEGATIVE"
                            : f.hi ? fmt::format("INT in [{} - {}]", *f.lo, *f.hi)
                                   : std::string();
  return CLI::Validator(
      [f, real](std::string& text) {
        const double x = decimal_value(text);  // an integer's text is canonical by now
        if (std::isnan(x) || (!real && std::fabs(x) > 9e18)) return std::string();
        return real ? range_error(f, x) : range_error(f, static_cast<std::int64_t>(x));
      },
      shown, "declared");
}

class OptionBinder {
 public:
  /// Options go to `group` of --help (empty: the command's own); the fields named in
  /// `skip` are bound by hand (a command-specific value such as `posenc rope --style tiled`).
  /// `files`: where the array fields' paths go (a request without them needs none).
  explicit OptionBinder(CLI::App* sub, std::string group = "", std::vector<std::string> skip = {},
                        ArrayFiles* files = nullptr)
      : sub_(sub), group_(std::move(group)), skip_(std::move(skip)), files_(files) {}
  /// Binds only the fields `skip` names (where --help lists them apart from the others).
  OptionBinder& only() {
    only_ = true;
    return *this;
  }

  /// The option's CLI11 names: "--force", or "-f,--force" with a short name.
  static std::string names(const Field& f) {
    return f.short_name.empty() ? f.option() : "-" + f.short_name + "," + f.option();
  }

  template <class T>
  void operator()(const Field& f, T& member) {
    if (skipped(f)) return;
    CLI::Option* opt = nullptr;
    if constexpr (IsArray<T>::value) {
      files_->bind(sub_, opt, f, member);
    } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
      opt = sub_->add_option(f.option(), member, f.help)->delimiter(',');  // N1,N2,..
    } else if constexpr (std::is_same_v<T, bool>) {
      if (f.positive) opt = sub_->add_flag(names(f), member, f.help);
      if (!f.negation.empty()) {
        // Both given: refused rather than the last one winning. (Option callbacks run
        // once the whole command line is parsed, so the flag's count is known here; a
        // command has one parse_complete_callback, too few for several such fields.)
        const std::string pos = f.positive ? f.option() : "", neg = Field::option_of(f.negation);
        grouped(sub_->add_flag_callback(
            neg,
            [&member, sub = sub_, pos, neg] {
              if (!pos.empty() && sub->count(pos) > 0) {
                throw UsageError(pos + ": cannot be combined with " + neg);
              }
              member = false;
            },
            f.negation_help));
      }
    } else if constexpr (IsOptional<T>::value) {
      using V = typename T::value_type;
      opt = sub_->add_option_function<V>(
          names(f), [&member](const V& v) { member = v; }, f.help);
      if (f.checked_when_given) opt->check(declared_range(f, std::is_floating_point_v<V>));
    } else {
      opt = sub_->add_option(names(f), member, f.help);
      if (f.checked_when_given) opt->check(declared_range(f, std::is_floating_point_v<T>));
    }
    if (opt != nullptr && f.required) opt->required();
    grouped(opt);
  }

  template <class M, class E>
  void operator()(const Field& f, Choice<M, E> c) {
    if (skipped(f)) return;
    CLI::Option* opt = sub_->add_option_function<std::string>(
        f.option(), [c, f](const std::string& name) mutable { c.set(f, name); }, f.help);
    if (f.word.empty()) {
      opt->check(CLI::IsMember(c.list()));
    } else {  // `--causal [ALIGN]`, `--style TEXT`: checked by the library's one message
      opt->type_name(f.word);
      if (!f.bare.empty()) opt->expected(0, 1);
    }
    if (f.required) opt->required();
    grouped(opt);
    if (!f.flag.empty()) {  // `--half-width`: as `--layout half`, and after it
      grouped(sub_->add_flag_callback(
          Field::option_of(f.flag), [c, f]() mutable { c.set(f, f.flag_word); }, f.flag_help));
    }
  }

  /// `--emit cos,sin`: a comma list of the names.
  template <class E>
  void operator()(const Field& f, Emits<E> e) {
    if (skipped(f)) return;
    CLI::Option* opt = sub_->add_option_function<std::string>(
        f.option(),
        [e, f](const std::string& text) { e.set(f, split_list(text), text, "a comma list of"); },
        f.help);
    if (f.required) opt->required();
    grouped(opt);
  }

  /// `--attn-temperature SCALE FLOOR`: two numbers, shown so in --help.
  template <class B>
  void operator()(const Field& f, Numbers<B> n) {
    if (skipped(f)) return;
    CLI::Option* opt = sub_->add_option_function<std::vector<double>>(
        f.option(), [n, f](const std::vector<double>& v) { n.set(f, v); }, f.help);
    opt->expected(2)->type_name(f.first_side + " " + f.second_side);
    if (f.required) opt->required();
    grouped(opt);
  }

  /// A field the declaration sets from the option's text (`--dtype bf16`, `--layout
  /// NAME[:ARGS]`, `--freq-scale X|2pi`, `--mrope-section T,H,W`, `--short-factor
  /// LIST|REF`): the parse, the range and the message are the declaration's.
  template <class S, class = decltype(std::declval<const S&>().set(Field(), std::string()))>
  void operator()(const Field& f, S s) {
    if (skipped(f)) return;
    CLI::Option* opt = sub_->add_option_function<std::string>(
        f.option(), [s, f](const std::string& text) { s.set(f, text); }, f.help);
    if (!f.word.empty()) opt->type_name(f.word);
    if (f.required) opt->required();
    grouped(opt);
  }

  /// `--window LEFT[,RIGHT]`: the text's integers, their range the declaration's.
  void operator()(const Field& f, Sides s) {
    if (skipped(f)) return;
    CLI::Option* opt = sub_->add_option_function<std::string>(
        f.option(),
        [s, f](const std::string& text) {
          const auto v = parse_integer_list(text);
          if (!v) {
            throw UsageError(f.name + " " + text + ": expected " + f.first_side + "[," +
                             f.second_side + "], integers");
          }
          s.set(f, *v);
        },
        f.help);
    if (f.required) opt->required();
    grouped(opt);
  }

  /// `--window H W` (`H [W]` when one value sets both).
  void operator()(const Field& f, Pair p) {
    if (skipped(f)) return;
    CLI::Option* opt = sub_->add_option_function<std::vector<std::int64_t>>(
        f.option(),
        [p](const std::vector<std::int64_t>& v) {
          p.first = v.at(0);
          p.second = v.size() > 1 ? v[1] : v[0];
        },
        f.help);
    opt->expected(p.one_for_both ? 1 : 2, 2);
    if (!f.word.empty()) opt->type_name(f.word);  // "H W"
    if (f.required) opt->required();
    grouped(opt);
  }
  template <class T>
  void operator()(const Field& f, const Spread<T>& spread) {
    if (skipped(f)) return;
    CLI::Option* opt = nullptr;
    files_->bind(sub_, opt, f, spread);
    grouped(opt);
  }
  void operator()(const Field& f, TensorSlot t) {
    if (skipped(f)) return;
    CLI::Option* opt = nullptr;
    files_->bind(sub_, opt, f, t);
    grouped(opt);
  }
  void operator()(const Field& f, const TensorSlots& t) {
    if (skipped(f)) return;
    CLI::Option* opt = nullptr;
    files_->bind(sub_, opt, f, t);
    grouped(opt);
  }
  void operator()(const Field& f, ArrayInto a) {
    if (skipped(f)) return;
    CLI::Option* opt = nullptr;
    files_->bind(sub_, opt, f, a);
    grouped(opt);
  }
  void operator()(const Field& f, ArrayF32 a) {
    if (skipped(f)) return;
    CLI::Option* opt = nullptr;
    files_->bind(sub_, opt, f, a);
    grouped(opt);
  }
  template <class T>
  void operator()(const Field& f, Values<T> v) {
    if (skipped(f)) return;
    CLI::Option* opt = nullptr;
    files_->bind(sub_, opt, f, v);
    grouped(opt);
  }

 private:
  bool skipped(const Field& f) const {
    const bool listed = std::find(skip_.begin(), skip_.end(), f.name) != skip_.end();
    return listed != only_;
  }
  void grouped(CLI::Option* opt) const {
    if (opt != nullptr && !group_.empty()) opt->group(group_);
  }

  template <class T>
  struct IsArray : std::false_type {};
  template <class T>
  struct IsArray<xt::xarray<T>> : std::true_type {};
  template <class T>
  struct IsArray<std::optional<xt::xarray<T>>> : std::true_type {};
  template <class T>
  struct IsArray<std::vector<xt::xarray<T>>> : std::true_type {};

  CLI::App* sub_;
  std::string group_;
  std::vector<std::string> skip_;
  ArrayFiles* files_;
  bool only_ = false;
};

/// Collects the names of the declared fields whose option (or negation) the command line
/// gave: what a config file must not override (merge_hf_config's `keep`).
class GivenFields {
 public:
  explicit GivenFields(const CLI::App* sub) : sub_(sub) {}
  std::vector<std::string> names;

  template <class T>
  void operator()(const Field& f, const T&) {
    if (given(f.option()) || (!f.negation.empty() && given(Field::option_of(f.negation)))) {
      names.push_back(f.name);
    }
  }

 private:
  bool given(const std::string& option) const {
    const CLI::Option* o = sub_->get_option_no_throw(option);
    return o != nullptr && o->count() > 0;
  }
  const CLI::App* sub_;
};

/// Adds the options of request `r`'s declared fields to `sub`, bound to `r` (which must
/// outlive the parse).
template <class R>
void add_declared_options(CLI::App* sub, R& r, ArrayFiles* files = nullptr) {
  OptionBinder b(sub, "", {}, files);
  declare(b, r);
}

/// The options of `r`'s fields apart from those `placed` names (which
/// add_declared_options binds where --help lists them).
template <class R>
void add_declared_options_but(CLI::App* sub, R& r, std::vector<std::string> placed) {
  OptionBinder b(sub, "", std::move(placed));
  declare(b, r);
}
/// The command line as a request's `check_given` sees it: a field given when its option
/// was, spelled as its option.
inline Caller command_line(const CLI::App* sub) {
  return Caller{[sub](const std::string& name) { return sub->count(Field::option_of(name)) > 0; },
                &Field::option_of,
                [sub](const std::string& name) {
                  return sub->get_option(Field::option_of(name))->results().size();
                }};
}

/// The declared fields of `r` that the parsed command line `sub` gave, by name.
template <class R>
std::vector<std::string> given_fields(const CLI::App* sub, R& r) {
  GivenFields g(sub);
  declare(g, r);
  return g.names;
}

/// Adds the options of the declared fields of `r` named in `names` only, to `group` of
/// --help: for a command whose --help interleaves them with options bound by hand.
template <class R>
void add_declared_options(CLI::App* sub, R& r, std::vector<std::string> names,
                          std::string group = "") {
  OptionBinder b(sub, std::move(group), std::move(names));
  declare(b.only(), r);
}

}  // namespace posenc::cli
