#pragma once
/// \file
/// The parameters of a comparison and of flash-attn's verdict, declared once (declare.hpp):
/// `posenc compare --rtol --atol --max-ulp --equal-nan --factor` binds them, posenc.compare
/// (rtol=, atol=, ulp=, equal_nan=, factor=) reads them, and compare() and
/// judge_against_baseline() check them. Their ranges are checked as they are given, so a
/// bad tolerance is refused before a tensor is opened, with one message from every front
/// end ("rtol: must be a finite number >= 0, got -1", said `--rtol: ...` on the command
/// line).

#include "posenc/declare.hpp"
#include "posenc/io/write_fields.hpp"
#include "posenc/ops/combine.hpp"
#include "posenc/ops/compare.hpp"
#include "posenc/ops/compare_baseline.hpp"

namespace posenc {

/// The rule's tolerances. The command's --help lists --json between max_ulp and
/// equal_nan, so it binds them in two runs.
template <class V>
void declare(V& v, CompareOptions& o) {
  v(field("rtol",
          "relative tolerance (default by the less precise float dtype, as torch.testing: f64 "
          "1e-7, f32 1.3e-6, f16 1e-3, bf16 1.6e-2; float8_e4m3fn 0.125, float8_e5m2 0.25; 0 "
          "for integers)")
        .non_negative_number()
        .check_when_given(),
    o.rtol);
  v(field("atol", "absolute tolerance (default f64 1e-7, f32/f16/bf16 1e-5; 0 for integers)")
        .non_negative_number()
        .check_when_given(),
    o.atol);
  v(field("max_ulp",
          "match when the distance in units in the last place (in the less precise dtype) is "
          "at most N; with --rtol/--atol, either test suffices")
        .at_least(0)
        .check_when_given()
        .python_keyword("ulp"),
    o.max_ulp);
  v(field("equal_nan", "NaN in both at the same place counts as a match"), o.equal_nan);
}

/// flash-attn's rule: the factor, and a fixed atol in place of its fwd_atol (the command's
/// --atol, which it shares with the comparison's).
template <class V>
void declare(V& v, BaselineRule& r) {
  v(field("factor", "R of --baseline (default 2, FA's rtol; 3 with soft-capping)")
        .non_negative_number()
        .check_when_given(),
    r.factor);
  v(field("atol", "a fixed atol of --baseline").non_negative_number().check_when_given(),
    r.atol);
}

/// Calls `f(kind, request)` for the requests of compare (kind compare), its verdict
/// (baseline), combine and write, whose fields the tests walk (posenc._posenc._fields("ops")).
template <class F>
void for_each_ops_request(F&& f) {
  f("compare", CompareOptions{});
  f("baseline", BaselineRule{});
  f("combine", CombineOptions{});
  f("write", WriteOptions{});
}

}  // namespace posenc
