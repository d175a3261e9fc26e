#pragma once
/// \file
/// The declared parameters of the Transformer-XL / XLNet / Funnel and DeBERTa terms
/// (ops/attention_relative.hpp; declare.hpp), in the order `posenc attention --help` lists
/// them (group RELATIVE ATTENTION): the tensors (TensorSlot; --factorized's four tables
/// TensorSlots) and the scalar fields, one option and one keyword each. The command line
/// binds them, the Python module reads them, and both check them with
/// check_relative_given before any tensor is read.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "posenc/declare.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/attention_fields.hpp"
#include "posenc/ops/attention_relative.hpp"

namespace posenc {

template <class V>
void declare(V& v, XlAttention& x) {
  v(field("rel_keys",
          "Transformer-XL / XLNet projected relative keys r [rlen, h, d] (or HF XLNet's "
          "[rlen, b, h, d]); rlen = sk: Transformer-XL _rel_shift, rlen > sk (sk+sq or "
          "sk+1): XLNet rel_shift_bnij"),
    tensor_slot(x.rel_keys));
  v(field("content_bias", "u = r_w_bias [h, d]: (q + u).k (default 0)"),
    tensor_slot(x.content_bias));
  v(field("position_bias", "v = r_r_bias [h, d]: rel_shift((q + v).r) (default 0)"),
    tensor_slot(x.position_bias));
  v(field("segment_ids",
          "XLNet segment term: segment id of every key [sk] or [b, sk] (memory keys 0 as "
          "HF); query i has the id of key sk - sq + i"),
    tensor_slot(x.segment_ids));
  v(field("segment_embed",
          "XLNet seg_embed [2, h, d]: (q + r_s_bias).seg_embed[different segment]"),
    tensor_slot(x.segment_embed));
  v(field("segment_bias", "XLNet r_s_bias [h, d] (default 0)"), tensor_slot(x.segment_bias));
  v(field("segment_index",
          "instead of --segment-ids: the --segment-embed row (0 or 1) of every score, "
          "[sq, sk] or [b, sq, sk] (HF Funnel's token_type_mat as it is: true = same "
          "segment = row 1)"),
    tensor_slot(x.segment_index));
  v(field("rel_shift",
          "HF Funnel _relative_shift_gather shift S: score (i, j) reads column "
          "S (sq - i) + j of (q + v).r (2: pooled queries over unpooled keys, 1: "
          "otherwise, as XLNet; rlen >= sk + S); default: by the rows of --rel-keys")
        .from(1, std::int64_t{1} << 30, "2^30"),
    x.shift);
  v(field("rel_kernel",
          "projection W [d_model, h, d] (HF Funnel r_kernel, XLNet r): --rel-keys and the "
          "--factorized tables are then unprojected [rows, d_model], r = R W"),
    tensor_slot(x.rel_kernel));
  v(field("factorized",
          "HF Funnel attention_type factorized, instead of --rel-keys (needs "
          "--rel-kernel): tables PHI, PI [sq, d_model], PSI, OMEGA [sk, d_model]; "
          "position term ((q + v).W) . (PHI_i PSI_j + PI_i OMEGA_j)"),
    tensor_slots({&x.phi, &x.pi, &x.psi, &x.omega}, {"phi", "pi", "psi", "omega"},
                 "PHI PI PSI OMEGA", "the four tables"));
  v(field("separate_cls",
          "HF Funnel separate_cls (cls_mask): query 0 and key 0 get no position or "
          "segment term"),
    x.cls_mask);
}

template <class V>
void declare(V& v, DebertaAttention& d) {
  v(field("pos_key",
          "DeBERTa c2p: projected relative embeddings [2 span, h, d] (pos_key_proj, or "
          "key_proj with share_att_key)"),
    tensor_slot(d.pos_key));
  v(field("pos_query",
          "DeBERTa p2c: projected relative embeddings [2 span, h, d] (pos_query_proj or "
          "query_proj); needs sq = sk"),
    tensor_slot(d.pos_query));
  v(field("pos_att_type",
          "DeBERTa pos_att_type: c2p, p2c or c2p,p2c (default: the terms whose tensors "
          "are given); scale 1/sqrt(d (1 + terms))"),
    d.pos_att_type);
  v(field("position_buckets",
          "DeBERTa position_buckets: span of the log buckets (default 256; <= 0 none)"),
    d.position_buckets);
  v(field("max_relative_positions", "DeBERTa max_relative_positions (default 512)"),
    d.max_relative_positions);
}

/// Whether the caller asked for the Transformer-XL / XLNet / Funnel terms.
inline bool xl_terms_given(const Caller& c) { return c.gave("rel_keys") || c.gave("factorized"); }
/// Whether the caller asked for the DeBERTa terms.
inline bool deberta_terms_given(const Caller& c) {
  return c.gave("pos_key") || c.gave("pos_query");
}

/// The rules of the relative terms' parameters, checked by each front end once the scalar
/// fields of `xl` and `deb` are set and before any tensor is read; `rope`: whether RoPE
/// rotates Q and K. UsageError in the caller's terms: "--rel-shift: the
/// --factorized term has no shift", "rel_shift: the factorized term has no shift"; a
/// range as "rel_shift 0: must be from 1 to 2^30".
inline void check_relative_given(const XlAttention& xl, const DebertaAttention& deb,
                                 const Caller& c, bool rope) {
  const bool xl_terms = xl_terms_given(c), deb_terms = deberta_terms_given(c);
  for (const Field& f : describe<XlAttention>()) {
    if (f.name != "rel_keys" && f.name != "factorized" && c.gave(f.name) && !xl_terms) {
      throw UsageError(c.term(f.name) + ": a Transformer-XL / XLNet / Funnel option needs " +
                       c.term("rel_keys") + " or " + c.term("factorized"));
    }
  }
  const std::vector<std::string> ranged =
      c.gave("rel_shift") ? std::vector<std::string>{"rel_shift"} : std::vector<std::string>{};
  GivenValidator range(ranged);
  declare(range, const_cast<XlAttention&>(xl));  // the validator only reads
  if (c.gave("factorized")) {
    if (c.gave("rel_keys")) {
      throw UsageError(c.term("factorized") + ": replaces " + c.term("rel_keys") + " (give one)");
    }
    if (!c.gave("rel_kernel")) {
      throw UsageError(c.term("factorized") + ": needs " + c.term("rel_kernel") +
                       " (W, which projects the tables)");
    }
    if (c.gave("rel_shift")) {
      throw UsageError(c.term("rel_shift") + ": the " + c.term("factorized") +
                       " term has no shift");
    }
  }
  if (c.gave("segment_ids") && c.gave("segment_index")) {
    throw UsageError(c.term("segment_ids") + ": not with " + c.term("segment_index") +
                     " (give one)");
  }
  for (const Field& f : describe<DebertaAttention>()) {
    if (f.type != "tensor" && c.gave(f.name) && !deb_terms) {
      throw UsageError(c.term(f.name) + ": a DeBERTa option needs " + c.term("pos_key") + " or " +
                       c.term("pos_query"));
    }
  }
  if (xl_terms && deb_terms) {
    throw UsageError(c.term("rel_keys") +
                     ": Transformer-XL / XLNet / Funnel and DeBERTa terms exclude each other");
  }
  if (rope && (xl_terms || deb_terms)) {
    const std::string terms = !xl_terms               ? c.term("pos_key") + "/" + c.term("pos_query")
                              : c.gave("rel_keys") ? c.term("rel_keys")
                                                   : c.term("factorized");
    throw UsageError(terms + ": cannot be combined with " + c.term("rope"));
  }
  if (c.gave("pos_att_type")) {
    bool c2p = false, p2c = false;
    const std::string& list = deb.pos_att_type;
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t comma = std::min(list.find(',', at), list.size());
      const std::string item = list.substr(at, comma - at);
      if (item != "c2p" && item != "p2c") {
        throw UsageError(c.term("pos_att_type") + " " + list +
                         ": expected a comma list of c2p, p2c");
      }
      (item == "c2p" ? c2p : p2c) = true;
      at = comma + 1;
    }
    const std::string type = c.term("pos_att_type");
    if (c2p != c.gave("pos_key")) {
      throw UsageError(c2p ? type + " c2p: needs " + c.term("pos_key")
                           : c.term("pos_key") + ": c2p is not in " + type);
    }
    if (p2c != c.gave("pos_query")) {
      throw UsageError(p2c ? type + " p2c: needs " + c.term("pos_query")
                           : c.term("pos_query") + ": p2c is not in " + type);
    }
  }
}

/// `f(name, Request{})` for the relative terms' requests: the field lists the tests walk.
template <class F>
void for_each_relative_request(F&& f) {
  f("relative", XlAttention{});
  f("relative", DebertaAttention{});
}

/// Bytes of the tensors `r`'s slots point at (the inputs a memory budget counts).
class SlotBytes {
 public:
  std::size_t bytes = 0;
  template <class T>
  void operator()(const Field&, const T&) {}
  void operator()(const Field&, const TensorSlot& s) { add(s.slot); }
  void operator()(const Field&, const TensorSlots& s) {
    for (const Tensor** t : s.slots) add(*t);
  }

 private:
  void add(const Tensor* t) {
    if (t != nullptr) bytes = bytes > SIZE_MAX - t->nbytes() ? SIZE_MAX : bytes + t->nbytes();
  }
};
template <class R>
std::size_t slot_bytes(const R& r) {
  SlotBytes b;
  declare(b, const_cast<R&>(r));  // only reads
  return b.bytes;
}

}  // namespace posenc
