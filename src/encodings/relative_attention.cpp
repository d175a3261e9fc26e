// Relative positions of Transformer-XL / XLNet and DeBERTa (encodings/relative_attention.hpp)
// and their tables.

#include "posenc/encodings/relative_attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "posenc/encodings/sinusoidal.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

std::int64_t positive(std::int64_t v, const char* name) {
  if (v <= 0) throw UsageError(fmt::format("{}: must be at least 1, got {}", name, v));
  if (v > (std::int64_t{1} << 40)) throw UsageError(fmt::format("{}: {} is too large", name, v));
  return v;
}

std::pair<std::int64_t, std::int64_t> table_lengths(const std::optional<std::int64_t>& q,
                                                    const std::optional<std::int64_t>& k) {
  if (!q && !k) throw UsageError("q_len/k_len: the table size is required");
  return {positive(q ? *q : *k, "q_len"), positive(k ? *k : *q, "k_len")};
}

}  // namespace

XlForm parse_xl_form(const std::string& s) {
  if (s == "transfo-xl") return XlForm::transfo_xl;
  if (s == "xlnet-bi") return XlForm::xlnet_bi;
  if (s == "xlnet-uni") return XlForm::xlnet_uni;
  throw UsageError(fmt::format("form {}: expected transfo-xl, xlnet-bi or xlnet-uni", s));
}

std::string xl_form_name(XlForm f) {
  switch (f) {
    case XlForm::transfo_xl:
      return "transfo-xl";
    case XlForm::xlnet_bi:
      return "xlnet-bi";
    case XlForm::xlnet_uni:
      return "xlnet-uni";
  }
  return "?";
}

std::int64_t xl_relative_rows(XlForm f, std::int64_t q_len, std::int64_t k_len) {
  switch (f) {
    case XlForm::transfo_xl:
      return k_len;
    case XlForm::xlnet_bi:
      return k_len + q_len;
    case XlForm::xlnet_uni:
      return k_len + 1;
  }
  return k_len;
}

std::int64_t xl_relative_position(XlForm f, std::int64_t k_len, std::int64_t c) {
  return f == XlForm::transfo_xl ? k_len - 1 - c : k_len - c;
}

Table xl_relative_table(const XlRelativeRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const auto [q, k] = table_lengths(r.q_len, r.k_len);
  if (r.clamp_len < 0) {
    throw UsageError(fmt::format("clamp_len: must be >= 0 (0 = no clamping), got {}", r.clamp_len));
  }
  auto freqs = std::make_shared<std::vector<double>>(sinusoidal_freqs(r.dim, r.base));
  const XlForm form = r.form;
  const std::int64_t kk = k, clamp = r.clamp_len;
  Table t;
  t.attrs = {{"kind", std::string("xl-relative")},         {"form", xl_form_name(form)},
             {"q_len", static_cast<long long>(q)},         {"k_len", static_cast<long long>(k)},
             {"dim", static_cast<long long>(r.dim)},       {"base", r.base},
             {"clamp_len", static_cast<long long>(clamp)}, {"layout", std::string("concat")}};
  t.spec.shape = {static_cast<std::size_t>(xl_relative_rows(form, q, k)),
                  static_cast<std::size_t>(r.dim)};
  t.spec.line = [freqs, form, kk, clamp](std::size_t c, double* out) {
    std::int64_t p = xl_relative_position(form, kk, static_cast<std::int64_t>(c));
    if (clamp > 0) p = std::clamp(p, -clamp, clamp);
    sinusoidal_row(static_cast<double>(p), *freqs, SinusoidalLayout::concat, out);
  };
  t.dataset = "/xl_relative";
  return t;
}

namespace {

// HF stride_pool_pos for block b >= 1.
std::vector<std::int64_t> funnel_pool(const std::vector<std::int64_t>& pos, std::int64_t block,
                                      const FunnelRelativeRequest& r) {
  std::vector<std::int64_t> out;
  std::size_t first = 0, end = pos.size();
  if (r.separate_cls) {
    out.push_back(1 - (std::int64_t{1} << block));
    first = 1;
    if (r.truncate_seq && end > 0) --end;
  }
  for (std::size_t i = first; i < end; i += 2) out.push_back(pos[i]);
  return out;
}

// HF relative_pos: max_dist down to min_dist in steps of stride.
std::vector<std::int64_t> funnel_relative(const std::vector<std::int64_t>& pos,
                                          const std::vector<std::int64_t>& pooled,
                                          std::int64_t stride, std::int64_t shift) {
  const std::int64_t ref = pooled.front() - pos.front();
  const std::int64_t max_dist = ref + shift * static_cast<std::int64_t>(pooled.size()) * stride;
  const std::int64_t min_dist = pooled.front() - pos.back();
  std::vector<std::int64_t> out;
  for (std::int64_t p = max_dist; p > min_dist - 1; p -= stride) out.push_back(p);
  return out;
}

}  // namespace

FunnelPositions funnel_relative_positions(const FunnelRelativeRequest& r) {
  positive(r.seq_len, "seq_len");
  if (r.seq_len > (std::int64_t{1} << 30)) {
    throw UsageError(fmt::format("seq_len: {} is too large (at most 2^30)", r.seq_len));
  }
  if (r.block < 0 || r.block > 62) {
    throw UsageError(fmt::format("block: must be from 0 to 62, got {}", r.block));
  }
  if (r.shift != 1 && r.shift != 2) {
    throw UsageError(fmt::format("shift: must be 1 or 2, got {}", r.shift));
  }
  if (r.shift == 2 && r.block == 0) {
    throw UsageError("shift: 2 (pooled queries, unpooled keys) needs block 1 or more");
  }
  if (r.truncate_seq && !r.separate_cls) {
    throw UsageError("truncate_seq: only with separate_cls (HF drops the last token then)");
  }
  std::vector<std::int64_t> pos(static_cast<std::size_t>(r.seq_len));
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int64_t>(i);
  std::vector<std::int64_t> keys = pos;
  for (std::int64_t b = 1; b <= r.block; ++b) {
    keys = pos;
    pos = funnel_pool(pos, b, r);
    if (pos.empty()) {
      throw UsageError(fmt::format("block: {} poolings leave no position of seq_len {}", b,
                                   r.seq_len));
    }
  }
  FunnelPositions out;
  if (r.shift == 2) {
    out.relative = funnel_relative(keys, pos, std::int64_t{1} << (r.block - 1), 2);
    out.k_len = static_cast<std::int64_t>(keys.size());
  } else {
    out.relative = funnel_relative(pos, pos, std::int64_t{1} << r.block, 1);
    out.k_len = static_cast<std::int64_t>(pos.size());
  }
  out.q_len = static_cast<std::int64_t>(pos.size());
  const std::int64_t lo = -2 * r.seq_len, hi = 2 * r.seq_len;
  for (const std::int64_t p : out.relative) {
    if (p < lo || p >= hi) {
      throw UsageError(fmt::format(
          "block: relative position {} of block {} lies outside HF's table [-2 seq_len, 2 "
          "seq_len) = [{}, {}) (HF's gather fails there)",
          p, r.block, lo, hi));
    }
  }
  return out;
}

Table funnel_relative_table(const FunnelRelativeRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  auto freqs = std::make_shared<std::vector<double>>(sinusoidal_freqs(r.dim, r.base));
  const FunnelPositions fp = funnel_relative_positions(r);
  auto rel = std::make_shared<std::vector<std::int64_t>>(fp.relative);
  Table t;
  t.attrs = {{"kind", std::string("funnel-relative")},
             {"seq_len", static_cast<long long>(r.seq_len)},
             {"dim", static_cast<long long>(r.dim)},
             {"block", static_cast<long long>(r.block)},
             {"shift", static_cast<long long>(r.shift)},
             {"separate_cls", static_cast<long long>(r.separate_cls)},
             {"truncate_seq", static_cast<long long>(r.truncate_seq)},
             {"base", r.base},
             {"q_len", static_cast<long long>(fp.q_len)},
             {"k_len", static_cast<long long>(fp.k_len)},
             {"layout", std::string("concat")}};
  t.spec.shape = {rel->size(), static_cast<std::size_t>(r.dim)};
  t.spec.line = [freqs, rel](std::size_t c, double* out) {
    sinusoidal_row(static_cast<double>((*rel)[c]), *freqs, SinusoidalLayout::concat, out);
  };
  t.dataset = "/funnel_relative";
  return t;
}

FunnelFactor parse_funnel_factor(const std::string& s) {
  if (s == "phi") return FunnelFactor::phi;
  if (s == "pi") return FunnelFactor::pi;
  if (s == "psi") return FunnelFactor::psi;
  if (s == "omega") return FunnelFactor::omega;
  throw UsageError(fmt::format("emit {}: expected phi, pi, psi or omega", s));
}

std::string funnel_factor_name(FunnelFactor f) {
  switch (f) {
    case FunnelFactor::phi:
      return "phi";
    case FunnelFactor::pi:
      return "pi";
    case FunnelFactor::psi:
      return "psi";
    case FunnelFactor::omega:
      return "omega";
  }
  return "?";
}

Table funnel_factorized_table(const FunnelFactorizedRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  positive(r.seq_len, "seq_len");
  if (r.seq_len > (std::int64_t{1} << 30)) {
    throw UsageError(fmt::format("seq_len: {} is too large (at most 2^30)", r.seq_len));
  }
  const std::int64_t key_block = r.key_block.value_or(r.block);  // both 0 to 62 (declared)
  if (r.truncate_seq && !r.separate_cls) {
    throw UsageError("truncate_seq: only with separate_cls (HF drops the last token then)");
  }
  auto freqs = std::make_shared<std::vector<double>>(sinusoidal_freqs(r.dim, r.base));
  const bool queries = r.emit == FunnelFactor::phi || r.emit == FunnelFactor::pi;
  const std::int64_t pools = queries ? r.block : key_block;
  auto pos = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(r.seq_len));
  for (std::size_t i = 0; i < pos->size(); ++i) (*pos)[i] = static_cast<std::int64_t>(i);
  for (std::int64_t b = 0; b < pools; ++b) {
    std::vector<std::int64_t> rows;
    if (r.separate_cls) rows.push_back(pos->front());
    rows.insert(rows.end(), pos->begin(), pos->end());
    const std::size_t end = r.separate_cls && r.truncate_seq ? rows.size() - 1 : rows.size();
    std::vector<std::int64_t> pooled;
    for (std::size_t i = 0; i < end; i += 2) pooled.push_back(rows[i]);
    *pos = std::move(pooled);
  }
  const FunnelFactor f = r.emit;
  const std::size_t half = freqs->size();
  Table t;
  t.attrs = {{"kind", std::string("funnel-factorized")},
             {"emit", funnel_factor_name(f)},
             {"seq_len", static_cast<long long>(r.seq_len)},
             {"dim", static_cast<long long>(r.dim)},
             {"block", static_cast<long long>(r.block)},
             {"key_block", static_cast<long long>(key_block)},
             {"separate_cls", static_cast<long long>(r.separate_cls)},
             {"truncate_seq", static_cast<long long>(r.truncate_seq)},
             {"base", r.base}};
  t.spec.shape = {pos->size(), static_cast<std::size_t>(r.dim)};
  t.spec.line = [freqs, pos, f, half](std::size_t row, double* out) {
    // [sin | cos] of the position, then arranged as the factor wants.
    sinusoidal_row(static_cast<double>((*pos)[row]), *freqs, SinusoidalLayout::concat, out);
    for (std::size_t i = 0; i < half; ++i) {
      const double s = out[i], c = out[half + i];
      switch (f) {
        case FunnelFactor::phi:
          out[i] = s, out[half + i] = s;
          break;
        case FunnelFactor::pi:
          out[i] = c, out[half + i] = c;
          break;
        case FunnelFactor::psi:
          out[i] = c, out[half + i] = s;
          break;
        case FunnelFactor::omega:
          out[i] = -s, out[half + i] = c;
          break;
      }
    }
  };
  t.dataset = "/funnel_" + funnel_factor_name(f);
  return t;
}

std::int64_t deberta_log_bucket(std::int64_t rel, int bucket_size, int max_position) {
  const std::int64_t mid = bucket_size / 2;
  // HF: abs_pos = mid - 1 inside (-mid, mid), where the result is rel itself anyway.
  if (rel <= mid && rel >= -mid) return rel;
  const std::int64_t abs_pos = rel < 0 ? -rel : rel;
  // float32 throughout, as torch computes it: abs_pos / mid is a float32 division,
  // torch.tensor((max_position - 1) / mid) rounds a double quotient to float32, log and
  // ceil are float32.
  const float ratio = static_cast<float>(abs_pos) / static_cast<float>(mid);
  const float top =
      static_cast<float>(static_cast<double>(max_position - 1) / static_cast<double>(mid));
  const float scaled = std::log(ratio) / std::log(top) * static_cast<float>(mid - 1);
  const float log_pos = std::ceil(scaled) + static_cast<float>(mid);
  const float signed_pos = rel < 0 ? -log_pos : log_pos;
  return static_cast<std::int64_t>(signed_pos);
}

std::int64_t deberta_relative_position(std::int64_t i, std::int64_t j, int bucket_size,
                                       int max_position) {
  const std::int64_t rel = i - j;
  return bucket_size > 0 ? deberta_log_bucket(rel, bucket_size, max_position) : rel;
}

void check_deberta_buckets(int position_buckets, int max_relative_positions) {
  if (max_relative_positions < 1) {
    throw UsageError(
        fmt::format("max_relative_positions: must be at least 1, got {}", max_relative_positions));
  }
  if (position_buckets <= 0) return;
  if (position_buckets < 2) {
    throw UsageError(fmt::format("position_buckets: must be at least 2 (or <= 0 for none), got {}",
                                 position_buckets));
  }
  if (max_relative_positions - 1 <= position_buckets / 2) {
    throw UsageError(fmt::format(
        "max_relative_positions: must exceed position_buckets / 2 + 1 = {} (the log buckets "
        "span distances {} to max_relative_positions - 1), got {}",
        position_buckets / 2 + 1, position_buckets / 2, max_relative_positions));
  }
}

Table deberta_bucket_table(const DebertaBucketRequest& r) {
  validate(r);  // the declared ranges (table_fields.hpp)
  const auto [q, k] = table_lengths(r.q_len, r.k_len);
  check_deberta_buckets(r.position_buckets, r.max_relative_positions);
  const int nb = r.position_buckets, mp = r.max_relative_positions;
  const std::int64_t kk = k;
  Table t;
  t.integral = true;
  // The bucketing is monotonic in i - j, so the extremes sit at the corners.
  t.max_value = deberta_relative_position(q - 1, 0, nb, mp);
  t.min_value = deberta_relative_position(0, k - 1, nb, mp);
  t.attrs = {{"kind", std::string("deberta-bucket")},
             {"q_len", static_cast<long long>(q)},
             {"k_len", static_cast<long long>(k)},
             {"position_buckets", static_cast<long long>(nb)},
             {"max_relative_positions", static_cast<long long>(mp)}};
  t.spec.shape = {static_cast<std::size_t>(q), static_cast<std::size_t>(k)};
  t.spec.line = [kk, nb, mp](std::size_t i, double* out) {
    for (std::int64_t j = 0; j < kk; ++j) {
      out[j] =
          static_cast<double>(deberta_relative_position(static_cast<std::int64_t>(i), j, nb, mp));
    }
  };
  t.dataset = "/deberta_bucket";
  return t;
}

}  // namespace posenc
