#pragma once
// Options from a request's declared fields (posenc/declare.hpp): each field becomes the
// option its name spells (`max_distance` -> --max-distance) with its help, bound to the
// request's member. The ranges are not repeated here: the library validates the request
// and names the field, which cli_terms turns back into the option.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "posenc/declare.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {

class OptionBinder {
 public:
  /// Options go to `group` of --help (empty: the command's own); the fields named in
  /// `skip` are bound by hand (a command-specific value such as `posenc rope --style tiled`).
  explicit OptionBinder(CLI::App* sub, std::string group = "",
                        std::vector<std::string> skip = {})
      : sub_(sub), group_(std::move(group)), skip_(std::move(skip)) {}

  template <class T>
  void operator()(const Field& f, T& member) {
    if (skipped(f)) return;
    CLI::Option* opt = nullptr;
    if constexpr (std::is_same_v<T, bool>) {
      if (f.positive) opt = sub_->add_flag(f.option(), member, f.help);
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
          f.option(), [&member](const V& v) { member = v; }, f.help);
    } else {
      opt = sub_->add_option(f.option(), member, f.help);
    }
    if (opt != nullptr && f.required) opt->required();
    grouped(opt);
  }

  template <class M, class E>
  void operator()(const Field& f, Choice<M, E> c) {
    if (skipped(f)) return;
    CLI::Option* opt = sub_->add_option_function<std::string>(
        f.option(), [c](const std::string& name) { c.member = *c.find(name); }, f.help);
    opt->check(CLI::IsMember(c.list()));
    if (f.required) opt->required();
    grouped(opt);
  }

 private:
  bool skipped(const Field& f) const {
    return std::find(skip_.begin(), skip_.end(), f.name) != skip_.end();
  }
  void grouped(CLI::Option* opt) const {
    if (opt != nullptr && !group_.empty()) opt->group(group_);
  }

  CLI::App* sub_;
  std::string group_;
  std::vector<std::string> skip_;
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
void add_declared_options(CLI::App* sub, R& r) {
  OptionBinder b(sub);
  declare(b, r);
}

/// The declared fields of `r` that the parsed command line `sub` gave, by name.
template <class R>
std::vector<std::string> given_fields(const CLI::App* sub, R& r) {
  GivenFields g(sub);
  declare(g, r);
  return g.names;
}

}  // namespace posenc::cli
