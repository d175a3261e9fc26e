#include "posenc/encodings/rope_keywords.hpp"

#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/rope_fields.hpp"
#include "posenc/encodings/rope_layout.hpp"

namespace posenc {

RopeParams rope_params_by_keyword(const Keywords& k, int head_dim, const Caller& c) {
  RopeParams p;
  KeywordReader r(k);
  r.read(p);  // the declared fields (rope_fields.hpp)
  ArithChoice arith;
  KeywordReader(k).read(arith);
  check_given(arith, c);
  set_arith(p, arith, c);
  if (head_dim > 0) p.head_dim = head_dim;
  HfConfigChoice hf;
  KeywordReader(k).read(hf);
  check_given(hf, keyword_caller({&k}));
  return merge_hf_config(p, r.given, hf.hf_config, hf.layers(),
                         hf.hf_version.value_or(HfVersion{}));
}

Positions positions_by_keyword(const Keywords& k) {
  Positions pos;
  KeywordReader(k, false).read(pos);  // start; its range is the library's
  check_given(pos, keyword_caller({&k}));
  KeywordReader(k, true).read(pos);  // position_ids (real: coords), cu_seqlens, cos, ...
  Caller grid = keyword_caller({&k});  // the caller's coords arrive as the key grid
  grid.gave = [&k](const std::string& n) { return k.gives(n == "coords" ? "grid" : n); };
  check_given(pos.grid, grid);
  if (auto g = k.get<std::string>("grid")) {
    pos.grid = parse_coord_grid(*g);
    KeywordReader(k).read(pos.grid);  // prefix_tokens, merge_window
  }
  check_positions(pos);
  return pos;
}

RopeApplyOptions apply_by_keyword(const Keywords& k, const Keywords* pos) {
  RopeApplyOptions a;
  KeywordReader(k, false).read(a);  // the declared ways of applying (rope_fields.hpp)
  check_given(a, keyword_caller({&k, pos}));
  KeywordReader(k, true).read(a);  // inv_freq, once the rules have passed
  if (auto tiled = k.get<bool>("tiled")) a.layout.tiled = *tiled;
  return a;
}

RopeRotation rope_by_keyword(const Keywords& rope, const Keywords& pos, const Keywords& apply,
                             const Shape& shape, const Axes& axes, const std::string& what) {
  Caller tables = keyword_caller({&rope, &pos, &apply});  // the caller's coords: key grid
  tables.gave = [g = tables.gave](const std::string& n) { return g(n == "coords" ? "grid" : n); };
  check_tables_given(tables);
  if (tables.gave("cos")) {
    ArithChoice arith;
    KeywordReader(rope).read(arith);
    check_tables_arith(arith, tables);
  }
  RopeRotation r;
  r.apply = apply_by_keyword(apply, &pos);
  r.pos = positions_by_keyword(pos);
  r.freqs = rope_freqs_for(
      shape, axes,
      [&](int head_dim) {
        return with_apply_defaults(rope_params_by_keyword(rope, head_dim, tables), head_dim,
                                   r.apply, keyword_caller({&rope}));
      },
      r.pos, r.apply, what);
  return r;
}

}  // namespace posenc
