#include "cli/relative_options.hpp"

#include "posenc/ops/attention_relative_fields.hpp"

namespace posenc::cli {

void add_relative_options(CLI::App* sub, RelativeCliOptions& o) {
  o.app = sub;
  OptionBinder b(sub, "RELATIVE ATTENTION", {}, &o.files);
  declare(b, o.xl);
  declare(b, o.deb);
}

bool relative_wanted(const RelativeCliOptions& o) {
  const Caller c = command_line(o.app);
  return xl_terms_given(c) || deberta_terms_given(c);
}

void check_relative_options(const RelativeCliOptions& o, bool rope) {
  check_relative_given(o.xl, o.deb, command_line(o.app), rope);
}

void read_relative(RelativeCliOptions& o) {
  o.files.read();
  o.xl_terms = xl_terms_given(command_line(o.app));
  o.bytes = o.xl_terms ? slot_bytes(o.xl) : slot_bytes(o.deb);
}

AttentionTerm attention_term(const RelativeCliOptions* relative, const AttentionRope* rope) {
  if (relative == nullptr) return AttentionTerm{nullptr, nullptr, rope};
  return relative->xl_terms ? AttentionTerm{&relative->xl} : AttentionTerm{nullptr, &relative->deb};
}

}  // namespace posenc::cli
