#include "posenc/encodings/table_keywords.hpp"

#include <cstdint>
#include <functional>
#include <map>

#include "posenc/declare.hpp"
#include "posenc/encodings/rope_fields.hpp"
#include "posenc/encodings/rope_keywords.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"
#include "posenc/printable.hpp"

namespace posenc {
namespace {

// The keywords of one call: the kind's own (`d`), RoPE's and the positions'.
struct TableArgs {
  const Keywords& d;
  const Keywords& rope;
  const Keywords& pos;
};

// One table kind: its keywords to its tables.
using TableKind = std::function<void(const TableArgs& a, std::vector<Table>& tables)>;

// The request R the keywords give: `preset` with its declared fields read, the rules
// joining them checked before the arrays are taken (as the command line checks them
// before it reads a file).
template <class R>
R request_by_keyword(const Keywords& k, R r) {
  KeywordReader scalars(k, false), arrays(k, true);
  scalars.read(r);
  check_given(r, keyword_caller({&k}));
  arrays.read(r);
  return r;
}

// Kind rope: its ROPE OPTIONS and positions are keywords of their own.
void rope_kind(const TableArgs& a, std::vector<Table>& tables) {
  RopeTableRequest r;
  KeywordReader(a.d).read(r);  // emit, layout
  r.where = positions_by_keyword(a.pos);
  r.positions = a.d.get<std::int64_t>("positions");
  r.rope = rope_params_by_keyword(a.rope, a.d.get<int>("dim").value_or(0),
                                  keyword_caller({&a.rope, &a.d}));
  if (auto inverse = a.d.get<bool>("inverse")) r.inverse = *inverse;
  KeywordReader{a.d}(field("precision", ""), choice(r.precision, fields::precisions()));
  for_each_emitted(r, [&](const std::string&) { tables.push_back(rope_table(r)); });
}

// Every kind posenc.table knows, by name: the declared kinds, then RoPE's.
const std::map<std::string, TableKind>& table_kinds() {
  static const std::map<std::string, TableKind> kinds = [] {
    std::map<std::string, TableKind> k;
    for_each_table([&k](const char* kind, auto preset, auto compute, const TableAbout&) {
      k[kind] = [preset, compute](const TableArgs& a, std::vector<Table>& tables) {
        auto r = request_by_keyword(a.d, preset);
        for_each_emitted(r, [&](const std::string&) {
          // a spread member's table in error named as the caller's keyword
          tables.push_back(in_callers_terms(r, keyword_caller({}), [&] { return compute(r); }));
        });
      };
    });
    k["rope"] = rope_kind;
    return k;
  }();
  return kinds;
}

}  // namespace

std::vector<Table> tables_by_keyword(const std::string& kind, const Keywords& d,
                                     const Keywords& rope, const Keywords& pos) {
  const auto it = table_kinds().find(kind);
  if (it == table_kinds().end()) throw UsageError("kind: unknown table kind '" + printable(kind) + "'");
  std::vector<Table> tables;
  it->second(TableArgs{d, rope, pos}, tables);
  return tables;
}

}  // namespace posenc
