// The mask rules of attention (see attention_mask.hpp).
#include "ops/attention_mask.hpp"

#include <algorithm>
#include <cmath>

namespace posenc::attention_detail {

KeySpan KeyRules::span(std::size_t b, std::int64_t i) const {
  // Every rule but the window's left side bounds the sink tokens too (FlashAttention's
  // construct_local_mask: j < sink_token_length is ORed into the left test only; the
  // chunk mask and key padding still apply to them).
  if (!q_len.empty() && i >= q_len[b]) return {};  // a padded query row
  const std::int64_t off = off_b.empty() ? this->off : off_b[b];
  std::int64_t lo = 0, hi = sk - 1, base = 0;
  if (causal == CausalAlign::bottom_right) hi = std::min(hi, i + off);
  if (causal == CausalAlign::top_left) hi = std::min(hi, i);
  if (win_right >= 0) hi = std::min(hi, i + off + win_right);
  if (!key_len.empty()) hi = std::min(hi, key_len[b] - 1);
  if (chunk > 0) {
    // Floor, as FlashAttention's construct_chunk_mask (p - p % C, Python's modulo): a
    // query at a negative position (more queries than keys, bottom-right) is in a chunk
    // of negative positions and sees no key; truncation would put p = -1 in chunk 0.
    const std::int64_t p = i + off;
    std::int64_t m = p % chunk;
    if (m < 0) m += chunk;
    const std::int64_t c0 = p - m;
    lo = std::max(lo, c0);
    hi = std::min(hi, c0 + chunk - 1);
  }
  if (!doc_lo.empty()) {
    base = doc_lo[static_cast<std::size_t>(i)];
    lo = std::max(lo, base);
    hi = std::min(hi, doc_hi[static_cast<std::size_t>(i)]);
  }
  KeySpan k;
  k.hi = hi;
  k.lo = win_left >= 0 ? std::max(lo, i + off - win_left) : lo;
  if (sink > 0 && k.lo > lo) {
    const std::int64_t shi = std::min(hi, base + sink - 1);
    if (lo <= shi) {
      if (k.lo > hi) {
        k.lo = lo, k.hi = shi;  // the window is empty: the sink tokens alone
      } else if (shi >= k.lo - 1) {
        k.lo = lo;  // touching the window: one range
      } else {
        k.sink_lo = lo, k.sink_hi = shi;
      }
    }
  }
  return k;
}

KeyRules key_rules(const AttentionOptions& opt, std::size_t sq, std::size_t sk) {
  KeyRules r;
  r.sk = static_cast<std::int64_t>(sk);
  r.off = static_cast<std::int64_t>(sk) - static_cast<std::int64_t>(sq);
  r.causal = opt.causal;
  // A window wider than every distance is unbounded: clamping keeps i + off + window
  // far from overflow whatever the caller passed.
  const auto span = static_cast<std::int64_t>(sq + sk);
  r.win_left = opt.window_left < 0 ? -1 : std::min(opt.window_left, span);
  r.win_right = opt.window_right < 0 ? -1 : std::min(opt.window_right, span);
  if (opt.sliding_window > 0) {
    // HF: kv > q - W (and kv < q + W without a causal mask), the narrower side wins.
    const std::int64_t w = std::min(opt.sliding_window - 1, span);
    r.win_left = r.win_left < 0 ? w : std::min(r.win_left, w);
    if (opt.causal == CausalAlign::none) r.win_right = r.win_right < 0 ? w : std::min(r.win_right, w);
  }
  r.chunk = opt.chunk_size;
  r.sink = opt.sink_tokens;
  if (opt.temperature_scale != 0) {
    r.temp_scale = opt.temperature_scale;
    r.temp_floor = opt.temperature_floor;
  }
  if (opt.llama4_scaling_beta != 0) {
    r.l4_beta = opt.llama4_scaling_beta;
    r.l4_period = opt.llama4_scaling_period;
  }
  if (!opt.cu_seqlens.empty()) {
    r.doc_lo.resize(sk);
    r.doc_hi.resize(sk);
    const auto& cu = opt.cu_seqlens;
    for (std::size_t k = 0; k + 1 < cu.size(); ++k) {
      for (std::int64_t i = cu[k]; i < cu[k + 1]; ++i) {
        r.doc_lo[static_cast<std::size_t>(i)] = cu[k];
        r.doc_hi[static_cast<std::size_t>(i)] = cu[k + 1] - 1;
      }
    }
  }
  if (opt.key_lengths) {
    for (std::size_t i = 0; i < opt.key_lengths->numel(); ++i) {
      r.key_len.push_back(static_cast<std::int64_t>(opt.key_lengths->get(i)));
    }
  }
  if (opt.seqused_q || opt.seqused_k) {
    // Each entry aligned to its own lengths (FlashAttention's sk_b - sq_b).
    const std::size_t nb = (opt.seqused_q ? opt.seqused_q : opt.seqused_k)->numel();
    for (std::size_t b = 0; b < nb; ++b) {
      const auto q_b = opt.seqused_q ? static_cast<std::int64_t>(opt.seqused_q->get(b))
                                     : static_cast<std::int64_t>(sq);
      const auto k_b = opt.seqused_k ? static_cast<std::int64_t>(opt.seqused_k->get(b))
                                     : static_cast<std::int64_t>(sk);
      r.q_len.push_back(q_b);
      r.off_b.push_back(k_b - q_b);
      if (opt.seqused_k) r.key_len.push_back(k_b);
    }
  }
  return r;
}

double KeyRules::temperature(std::int64_t qpos) const {
  if (l4_beta != 0) {
    const double n = std::floor(static_cast<double>(qpos) / static_cast<double>(l4_period));
    return 1.0 + l4_beta * std::log(1.0 + n);
  }
  if (temp_scale == 0) return 1.0;
  return 1.0 + temp_scale * std::log1p(std::floor(static_cast<double>(qpos + 1) / temp_floor));
}

AlibiVariant alibi_form(const AttentionOptions& opt) {
  if (opt.alibi) return *opt.alibi;
  // FlashAttention takes window (-1, 0) as causal, and adds slope * j there: a row
  // constant away from -slope (pos(i) - j), so the same probabilities, and its lse.
  const bool causal = opt.causal != CausalAlign::none || opt.window_right == 0;
  const bool left_open = opt.window_left < 0 && opt.sliding_window == 0;
  return causal && left_open ? AlibiVariant::fairseq : AlibiVariant::bottom_right;
}

}  // namespace posenc::attention_detail
