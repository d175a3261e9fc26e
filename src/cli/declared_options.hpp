#pragma once
// Options from a request's declared fields (posenc/declare.hpp): each field becomes the
// option its name spells (`max_distance` -> --max-distance) with its help, bound to the
// request's member. The ranges are not repeated here: the library validates the request
// and names the field, which cli_terms turns back into the option.

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "posenc/declare.hpp"
#include "posenc/error.hpp"

namespace posenc::cli {

class OptionBinder {
 public:
  explicit OptionBinder(CLI::App* sub) : sub_(sub) {}

  template <class T>
  void operator()(const Field& f, T& member) {
    CLI::Option* opt = nullptr;
    if constexpr (std::is_same_v<T, bool>) {
      if (f.positive) opt = sub_->add_flag(f.option(), member, f.help);
      if (!f.negation.empty()) {
        sub_->add_flag_callback(
            Field::option_of(f.negation), [&member] { member = false; }, f.negation_help);
      }
      if (f.positive && !f.negation.empty()) {
        // Both given: refused rather than the last one winning.
        const std::string pos = f.option(), neg = Field::option_of(f.negation);
        sub_->parse_complete_callback([sub = sub_, pos, neg] {
          if (sub->count(pos) > 0 && sub->count(neg) > 0) {
            throw UsageError(pos + ": cannot be combined with " + neg);
          }
        });
      }
    } else if constexpr (IsOptional<T>::value) {
      using V = typename T::value_type;
      opt = sub_->add_option_function<V>(
          f.option(), [&member](const V& v) { member = v; }, f.help);
    } else {
      opt = sub_->add_option(f.option(), member, f.help);
    }
    if (opt != nullptr && f.required) opt->required();
  }

  template <class M, class E>
  void operator()(const Field& f, Choice<M, E> c) {
    CLI::Option* opt = sub_->add_option_function<std::string>(
        f.option(), [c](const std::string& name) { c.member = *c.find(name); }, f.help);
    opt->check(CLI::IsMember(c.list()));
    if (f.required) opt->required();
  }

 private:
  CLI::App* sub_;
};

/// Adds the options of request `r`'s declared fields to `sub`, bound to `r` (which must
/// outlive the parse).
template <class R>
void add_declared_options(CLI::App* sub, R& r) {
  OptionBinder b(sub);
  declare(b, r);
}

}  // namespace posenc::cli
