#include "cli/relative_options.hpp"

#include <fmt/core.h>

#include <optional>
#include <utility>

#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/attention_relative.hpp"

namespace posenc::cli {

namespace {

bool given(const RelativeCliOptions& o, const char* name) { return o.app->count(name) > 0; }

bool xl_wanted(const RelativeCliOptions& o) { return !o.rel_keys.empty() || !o.factorized.empty(); }
bool deberta_wanted(const RelativeCliOptions& o) {
  return !o.pos_key.empty() || !o.pos_query.empty();
}

// --pos-att-type: a comma list of c2p and p2c; sets the two flags.
void parse_pos_att_type(const std::string& list, bool& c2p, bool& p2c) {
  c2p = p2c = false;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, comma - at);
    if (item == "c2p") {
      c2p = true;
    } else if (item == "p2c") {
      p2c = true;
    } else {
      throw UsageError(fmt::format("--pos-att-type {}: expected a comma list of c2p, p2c", list));
    }
    at = comma + 1;
  }
}

}  // namespace

void add_relative_options(CLI::App* sub, RelativeCliOptions& o) {
  o.app = sub;
  const char* g = "RELATIVE ATTENTION";
  sub->add_option("--rel-keys", o.rel_keys,
                  "Transformer-XL / XLNet projected relative keys r [rlen, h, d] (or HF XLNet's "
                  "[rlen, b, h, d]); rlen = sk: Transformer-XL _rel_shift, rlen > sk (sk+sq or "
                  "sk+1): XLNet rel_shift_bnij")
      ->group(g);
  sub->add_option("--content-bias", o.content_bias, "u = r_w_bias [h, d]: (q + u).k (default 0)")
      ->group(g);
  sub->add_option("--position-bias", o.position_bias,
                  "v = r_r_bias [h, d]: rel_shift((q + v).r) (default 0)")
      ->group(g);
  sub->add_option("--segment-ids", o.segment_ids,
                  "XLNet segment term: segment id of every key [sk] or [b, sk] (memory keys 0 as "
                  "HF); query i has the id of key sk - sq + i")
      ->group(g);
  sub->add_option("--segment-embed", o.segment_embed,
                  "XLNet seg_embed [2, h, d]: (q + r_s_bias).seg_embed[different segment]")
      ->group(g);
  sub->add_option("--segment-bias", o.segment_bias, "XLNet r_s_bias [h, d] (default 0)")->group(g);
  sub->add_option("--segment-index", o.segment_index,
                  "instead of --segment-ids: the --segment-embed row (0 or 1) of every score, "
                  "[sq, sk] or [b, sq, sk] (HF Funnel's token_type_mat as it is: true = same "
                  "segment = row 1)")
      ->group(g);
  sub->add_option("--rel-shift", o.rel_shift,
                  "HF Funnel _relative_shift_gather shift S: score (i, j) reads column "
                  "S (sq - i) + j of (q + v).r (2: pooled queries over unpooled keys, 1: "
                  "otherwise, as XLNet; rlen >= sk + S); default: by the rows of --rel-keys")
      ->group(g);
  sub->add_option("--rel-kernel", o.rel_kernel,
                  "projection W [d_model, h, d] (HF Funnel r_kernel, XLNet r): --rel-keys and the "
                  "--factorized tables are then unprojected [rows, d_model], r = R W")
      ->group(g);
  sub->add_option("--factorized", o.factorized,
                  "HF Funnel attention_type factorized, instead of --rel-keys (needs "
                  "--rel-kernel): tables PHI, PI [sq, d_model], PSI, OMEGA [sk, d_model]; "
                  "position term ((q + v).W) . (PHI_i PSI_j + PI_i OMEGA_j)")
      ->expected(4)
      ->type_name("PHI PI PSI OMEGA")
      ->group(g);
  sub->add_flag("--separate-cls", o.separate_cls,
                "HF Funnel separate_cls (cls_mask): query 0 and key 0 get no position or "
                "segment term")
      ->group(g);
  sub->add_option("--pos-key", o.pos_key,
                  "DeBERTa c2p: projected relative embeddings [2 span, h, d] (pos_key_proj, or "
                  "key_proj with share_att_key)")
      ->group(g);
  sub->add_option("--pos-query", o.pos_query,
                  "DeBERTa p2c: projected relative embeddings [2 span, h, d] (pos_query_proj or "
                  "query_proj); needs sq = sk")
      ->group(g);
  sub->add_option("--pos-att-type", o.pos_att_type,
                  "DeBERTa pos_att_type: c2p, p2c or c2p,p2c (default: the terms whose tensors "
                  "are given); scale 1/sqrt(d (1 + terms))")
      ->group(g);
  sub->add_option("--position-buckets", o.position_buckets,
                  "DeBERTa position_buckets: span of the log buckets (default 256; <= 0 none)")
      ->group(g);
  sub->add_option("--max-relative-positions", o.max_relative_positions,
                  "DeBERTa max_relative_positions (default 512)")
      ->group(g);
}

bool relative_wanted(const RelativeCliOptions& o) { return xl_wanted(o) || deberta_wanted(o); }

void check_relative_options(const RelativeCliOptions& o, bool rope) {
  for (const char* name :
       {"--content-bias", "--position-bias", "--segment-ids", "--segment-embed", "--segment-bias",
        "--segment-index", "--rel-shift", "--rel-kernel", "--separate-cls"}) {
    if (given(o, name) && !xl_wanted(o)) {
      throw UsageError(fmt::format(
          "{}: a Transformer-XL / XLNet / Funnel option needs --rel-keys or --factorized", name));
    }
  }
  if (given(o, "--rel-shift") && (o.rel_shift < 1 || o.rel_shift > (1LL << 30))) {
    throw UsageError(fmt::format("--rel-shift {}: must be from 1 to 2^30", o.rel_shift));
  }
  if (!o.factorized.empty()) {
    if (!o.rel_keys.empty()) {
      throw UsageError("--factorized: replaces --rel-keys (give one)");
    }
    if (o.rel_kernel.empty()) {
      throw UsageError("--factorized: needs --rel-kernel (W, which projects the tables)");
    }
    if (given(o, "--rel-shift")) {
      throw UsageError("--rel-shift: the --factorized term has no shift");
    }
  }
  if (!o.segment_ids.empty() && !o.segment_index.empty()) {
    throw UsageError("--segment-ids: not with --segment-index (give one)");
  }
  for (const char* name : {"--pos-att-type", "--position-buckets", "--max-relative-positions"}) {
    if (given(o, name) && !deberta_wanted(o)) {
      throw UsageError(fmt::format("{}: a DeBERTa option needs --pos-key or --pos-query", name));
    }
  }
  if (xl_wanted(o) && deberta_wanted(o)) {
    throw UsageError("--rel-keys: Transformer-XL / XLNet and DeBERTa terms exclude each other");
  }
  if (rope && relative_wanted(o)) {
    throw UsageError(fmt::format("{}: cannot be combined with --rope",
                                 xl_wanted(o) ? (o.rel_keys.empty() ? "--factorized" : "--rel-keys")
                                              : "--pos-key/--pos-query"));
  }
  if (given(o, "--pos-att-type")) {
    bool c2p = false, p2c = false;
    parse_pos_att_type(o.pos_att_type, c2p, p2c);
    if (c2p != !o.pos_key.empty()) {
      throw UsageError(c2p ? "--pos-att-type c2p: needs --pos-key"
                           : "--pos-key: c2p is not in --pos-att-type");
    }
    if (p2c != !o.pos_query.empty()) {
      throw UsageError(p2c ? "--pos-att-type p2c: needs --pos-query"
                           : "--pos-query: p2c is not in --pos-att-type");
    }
  }
}

std::unique_ptr<RelativeInputs> read_relative(const RelativeCliOptions& o) {
  auto in = std::make_unique<RelativeInputs>();
  std::size_t next = 0;
  auto read = [&](const std::string& ref) -> const Tensor* {
    if (ref.empty()) return nullptr;
    std::optional<Tensor>& t = in->tensors[next++];
    t = read_tensor(ref);
    return &*t;
  };
  if (xl_wanted(o)) {
    in->xl_terms = true;
    XlAttention& xl = in->xl;
    xl.rel_keys = read(o.rel_keys);
    xl.content_bias = read(o.content_bias);
    xl.position_bias = read(o.position_bias);
    xl.segment_ids = read(o.segment_ids);
    xl.segment_embed = read(o.segment_embed);
    xl.segment_bias = read(o.segment_bias);
    xl.segment_index = read(o.segment_index);
    xl.rel_kernel = read(o.rel_kernel);
    if (!o.factorized.empty()) {
      const Tensor** slots[] = {&xl.phi, &xl.pi, &xl.psi, &xl.omega};
      for (int i = 0; i < 4; ++i) *slots[i] = read(o.factorized[i]);
    }
    xl.shift = o.rel_shift;
    xl.cls_mask = o.separate_cls;
    return in;
  }
  in->deb.pos_key = read(o.pos_key);
  in->deb.pos_query = read(o.pos_query);
  in->deb.position_buckets = o.position_buckets;
  in->deb.max_relative_positions = o.max_relative_positions;
  return in;
}

AttentionResult relative_attention(const RelativeCliOptions& o, const Tensor& q, const Tensor& k,
                                   const Tensor* v, const AttentionOptions& opt) {
  const std::unique_ptr<RelativeInputs> in = read_relative(o);
  return in->xl_terms ? attention(q, k, v, opt, in->xl) : attention(q, k, v, opt, in->deb);
}

}  // namespace posenc::cli
