// CPM-Ant segment-aware relative buckets and the biases a learned table gives them
// (encodings/cpmant_bucket.hpp).

#include "posenc/encodings/cpmant_bucket.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "posenc/encodings/bias.hpp"
#include "posenc/encodings/table_fields.hpp"
#include "posenc/error.hpp"

namespace posenc {

namespace {

// Segments [b][n] of one input, checked.
std::vector<std::vector<std::int64_t>> segments_of(const xt::xarray<std::int64_t>& a,
                                                   const char* name, std::int64_t segments) {
  if (a.dimension() != 2) {
    throw InputError(fmt::format("{}: expected segments [b, s], got shape ({})", name,
                                 fmt::join(a.shape(), ", ")));
  }
  if (a.shape(1) > static_cast<std::size_t>(kMaxCpmAntTokens)) {
    throw InputError(
        fmt::format("{}: {} tokens per row; at most {}", name, a.shape(1), kMaxCpmAntTokens));
  }
  std::vector<std::vector<std::int64_t>> out(a.shape(0));
  for (std::size_t b = 0; b < a.shape(0); ++b) {
    for (std::size_t s = 0; s < a.shape(1); ++s) {
      const std::int64_t v = a(b, s);
      if (v < 0 || v >= segments) {
        throw InputError(fmt::format(
            "{}: segment {} at (b {}, s {}) is outside 0 .. {} (segments {})", name, v, b, s,
            segments - 1, segments));
      }
      out[b].push_back(v);
    }
  }
  return out;
}

// The bucket of every offset d over [-md, md]: beyond max_distance every offset shares
// the last bucket of its side, so clamping d to +-md first gives the same bucket.
class BucketLookup {
 public:
  BucketLookup(int buckets, std::int64_t max_distance) : md_(max_distance) {
    lut_.resize(2 * static_cast<std::size_t>(md_) + 1);
    for (std::int64_t d = -md_; d <= md_; ++d) {
      lut_[static_cast<std::size_t>(d + md_)] = static_cast<std::int32_t>(
          t5_bucket(d, true, buckets, static_cast<int>(max_distance)));
    }
  }
  std::int32_t operator()(std::int64_t d) const {
    return lut_[static_cast<std::size_t>(std::clamp<std::int64_t>(d, -md_, md_) + md_)];
  }

 private:
  std::int64_t md_;
  std::vector<std::int32_t> lut_;
};

struct Rows {
  std::vector<std::vector<std::int64_t>> q, k;
  std::int64_t segments = 0;
  int buckets = 0;
  BucketLookup lookup;
  Rows(int nb, std::int64_t md) : lookup(nb, md) {}
  // The bucket of (b, i, j).
  std::int64_t operator()(std::size_t b, std::size_t i, std::size_t j) const {
    const std::int64_t qs = q[b][i], ks = k[b][j];
    if (qs == ks) return lookup(static_cast<std::int64_t>(j) - static_cast<std::int64_t>(i));
    return buckets + qs * segments + ks;
  }
};

}  // namespace

void cpmant_bucket_check(const CpmAntBucketRequest& r, bool has_segment_ids) {
  if (has_segment_ids == r.seq_len.has_value()) {
    throw UsageError("seq_len/segment_ids: give one of them");
  }
  validate(r);  // seq_len, segments, buckets, max_distance: the declared ranges
  t5_bucket(0, true, r.buckets, static_cast<int>(r.max_distance));  // the pair (UsageError)
}

Table cpmant_bucket_table(const CpmAntBucketRequest& r) {
  if (r.key_segment_ids && !r.segment_ids) {
    throw UsageError("key_segment_ids: needs segment_ids (the query segments)");
  }
  cpmant_bucket_check(r, r.segment_ids.has_value());

  auto rows = std::make_shared<Rows>(r.buckets, r.max_distance);
  rows->segments = r.segments;
  rows->buckets = r.buckets;
  if (r.segment_ids) {
    rows->q = segments_of(*r.segment_ids, "segment_ids", r.segments);
    rows->k = r.key_segment_ids ? segments_of(*r.key_segment_ids, "key_segment_ids", r.segments)
                                : rows->q;
    if (rows->k.size() != rows->q.size()) {
      throw InputError(fmt::format("key_segment_ids: {} rows, but segment_ids has {}",
                                   rows->k.size(), rows->q.size()));
    }
  } else {
    rows->q.assign(1, std::vector<std::int64_t>(static_cast<std::size_t>(*r.seq_len), 0));
    rows->k = rows->q;
  }
  const std::size_t B = rows->q.size();
  const std::size_t Q = r.segment_ids ? r.segment_ids->shape(1) : rows->q[0].size();
  const std::size_t K = r.key_segment_ids ? r.key_segment_ids->shape(1) : Q;
  const std::int64_t entries = r.segments * r.segments + r.buckets;

  Table t;
  t.attrs = {{"kind", std::string("cpmant-bucket")},
             {"num_segments", static_cast<long long>(r.segments)},
             {"num_buckets", static_cast<long long>(r.buckets)},
             {"max_distance", static_cast<long long>(r.max_distance)}};
  t.dataset = "/cpmant_bucket";
  if (!r.bias_table) {
    t.integral = true;
    t.max_value = entries - 1;
    t.spec.shape = {B, Q, K};
    t.spec.line = [rows, Q, K](std::size_t line, double* out) {
      const std::size_t b = line / Q, i = line % Q;
      for (std::size_t j = 0; j < K; ++j) out[j] = static_cast<double>((*rows)(b, i, j));
    };
    return t;
  }
  const xt::xarray<double>& w = *r.bias_table;
  if (w.dimension() != 2 || w.shape(0) != static_cast<std::size_t>(entries) || w.shape(1) == 0) {
    throw InputError(fmt::format(
        "bias_table: expected relative_attention_bias ({}, heads) (segments^2 + buckets rows), "
        "got shape ({})",
        entries, fmt::join(w.shape(), ", ")));
  }
  for (std::size_t e = 0; e < w.size(); ++e) {
    if (!std::isfinite(w.data()[e])) {
      throw InputError(fmt::format("bias_table: entry ({}, {}) is not finite", e / w.shape(1),
                                   e % w.shape(1)));
    }
  }
  auto table = std::make_shared<const xt::xarray<double>>(w);
  const std::size_t heads = w.shape(1);
  t.attrs.push_back({"heads", static_cast<long long>(heads)});
  t.dataset += "_bias";
  t.spec.shape = {B, heads, Q, K};
  // F.embedding(bucket, T).permute(0, 3, 1, 2): line (b, h, i), entry j is T[bucket, h].
  t.spec.line = [rows, table, Q, K, heads](std::size_t line, double* out) {
    const std::size_t i = line % Q, h = (line / Q) % heads, b = line / Q / heads;
    const double* base = table->data();
    for (std::size_t j = 0; j < K; ++j) {
      out[j] = base[static_cast<std::size_t>((*rows)(b, i, j)) * heads + h];
    }
  };
  return t;
}

}  // namespace posenc
