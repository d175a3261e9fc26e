// Attention core against a naive float64 reference written from the formulas in
// attention.hpp (loops over every score; no BLAS, no blocks, no online softmax).
//
// Note on the seeds' `attention(q, k, v, mask)`: it discards the result of masked_fill
// and fills with -1e-9 instead of -1e9, so its mask does nothing. The reference here
// applies the mask properly (masked scores are -inf before the softmax).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <random>

#include "posenc/error.hpp"
#include "posenc/io/ref.hpp"
#include "posenc/ops/attention.hpp"
#include "random_tensor.hpp"

namespace posenc {
namespace {

struct Ref {
  std::vector<double> logits, probs, out, lse;
};

// q [b, hq, sq, d], k [b, hk, sk, d], v [b, hk, sk, dv] (bhsd only).
Ref naive(const Tensor& q, const Tensor& k, const Tensor& v, double scale, CausalAlign causal,
          std::int64_t wl, std::int64_t wr, const std::vector<double>* sinks, double softcap,
          bool nan_rows) {
  std::size_t b = q.shape()[0], hq = q.shape()[1], sq = q.shape()[2], d = q.shape()[3];
  std::size_t hk = k.shape()[1], sk = k.shape()[2], dv = v.shape()[3];
  Ref r;
  r.logits.resize(b * hq * sq * sk);
  r.probs.resize(b * hq * sq * sk);
  r.out.resize(b * hq * sq * dv);
  r.lse.resize(b * hq * sq);
  const double inf = std::numeric_limits<double>::infinity();
  std::int64_t off = static_cast<std::int64_t>(sk) - static_cast<std::int64_t>(sq);
  for (std::size_t bi = 0; bi < b; ++bi)
    for (std::size_t h = 0; h < hq; ++h)
      for (std::size_t i = 0; i < sq; ++i) {
        std::size_t kh = h / (hq / hk);
        std::size_t row = (bi * hq + h) * sq + i;
        double mx = sinks ? (*sinks)[h] : -inf;
        for (std::size_t j = 0; j < sk; ++j) {
          double s = 0;
          for (std::size_t c = 0; c < d; ++c)
            s += q.get(((bi * hq + h) * sq + i) * d + c) * k.get(((bi * hk + kh) * sk + j) * d + c);
          s *= scale;
          if (softcap > 0) s = softcap * std::tanh(s / softcap);
          std::int64_t ii = static_cast<std::int64_t>(i), jj = static_cast<std::int64_t>(j);
          bool keep = true;
          if (causal == CausalAlign::bottom_right && jj > ii + off) keep = false;
          if (causal == CausalAlign::top_left && jj > ii) keep = false;
          if (wl >= 0 && jj < ii + off - wl) keep = false;
          if (wr >= 0 && jj > ii + off + wr) keep = false;
          if (!keep) s = -inf;
          r.logits[row * sk + j] = s;
          mx = std::max(mx, s);
        }
        double sum = sinks ? std::exp((*sinks)[h] - mx) : 0.0;
        for (std::size_t j = 0; j < sk; ++j)
          sum += mx == -inf ? 0 : std::exp(r.logits[row * sk + j] - mx);
        bool empty = mx == -inf;
        for (std::size_t j = 0; j < sk; ++j) {
          r.probs[row * sk + j] =
              empty ? (nan_rows ? NAN : 0.0) : std::exp(r.logits[row * sk + j] - mx) / sum;
        }
        for (std::size_t c = 0; c < dv; ++c) {
          double o = 0;
          for (std::size_t j = 0; j < sk; ++j)
            o += r.probs[row * sk + j] * v.get(((bi * hk + kh) * sk + j) * dv + c);
          r.out[row * dv + c] = o;
        }
        r.lse[row] = empty ? -inf : mx + std::log(sum);
      }
  return r;
}

void expect_close(const Tensor& t, const std::vector<double>& ref, double rtol, double atol,
                  const char* what) {
  ASSERT_EQ(t.numel(), ref.size()) << what;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    double a = t.get(i), e = ref[i];
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(a)) << what << " at " << i;
    } else if (std::isinf(e)) {
      EXPECT_EQ(a, e) << what << " at " << i;
    } else {
      EXPECT_NEAR(a, e, atol + rtol * std::abs(e)) << what << " at " << i;
    }
    if (::testing::Test::HasFailure()) return;
  }
}

AttentionOptions all_emits() {
  AttentionOptions o;
  o.emit = {AttentionEmit::logits, AttentionEmit::probs, AttentionEmit::output, AttentionEmit::lse};
  return o;
}

TEST(Attention, PlainF64MatchesNaive) {
  Tensor q = random_tensor({2, 3, 5, 8}, 1), k = random_tensor({2, 3, 7, 8}, 2),
         v = random_tensor({2, 3, 7, 4}, 3);
  AttentionResult r = attention(q, k, &v, all_emits());
  Ref e = naive(q, k, v, 1 / std::sqrt(8.0), CausalAlign::none, -1, -1, nullptr, 0, false);
  expect_close(r.logits, e.logits, 1e-12, 1e-12, "logits");
  expect_close(r.probs, e.probs, 1e-12, 1e-14, "probs");
  expect_close(r.output, e.out, 1e-12, 1e-13, "output");
  expect_close(r.lse, e.lse, 1e-12, 1e-13, "lse");
  EXPECT_EQ(r.output.shape(), (Shape{2, 3, 5, 4}));
  EXPECT_EQ(r.lse.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(r.lse.dtype(), DType::f64);
}

// The default arithmetic is f64 whatever the inputs' dtype: the bits of the run on the
// same values as f64 inputs with outputs of the input dtype, recorded as precision f64.
// precision f32 is another arithmetic, and recorded as such.
TEST(Attention, DefaultArithmeticIsF64ForEveryInputDtype) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor q = random_tensor({1, 4, 3, 16}, 70, DType::f32).astype(dt),
           k = random_tensor({1, 2, 1500, 16}, 71, DType::f32).astype(dt),
           v = random_tensor({1, 2, 1500, 8}, 72, DType::f32).astype(dt);
    Tensor q64 = q.astype(DType::f64), k64 = k.astype(DType::f64), v64 = v.astype(DType::f64);
    for (bool streamed : {false, true}) {
      AttentionOptions o = all_emits();
      if (streamed) o.emit = {AttentionEmit::output, AttentionEmit::lse};
      AttentionOptions o64 = o;
      o64.dtype = dt;
      const AttentionResult a = attention(q, k, &v, o), b = attention(q64, k64, &v64, o64);
      for (AttentionEmit e : o.emit) {
        const Tensor &x = a.get(e), &y = b.get(e);
        EXPECT_EQ(x.dtype(), e == AttentionEmit::lse ? DType::f32 : dt);
        ASSERT_EQ(x.nbytes(), y.nbytes());
        EXPECT_EQ(std::memcmp(x.bytes(), y.bytes(), x.nbytes()), 0)
            << dtype_name(dt) << " " << attention_emit_name(e);
      }
      auto precision = [](const AttentionResult& r) {
        for (const Attr& at : r.attrs)
          if (at.name == "precision") return std::get<std::string>(at.value);
        return std::string("(none)");
      };
      EXPECT_EQ(precision(a), "f64") << dtype_name(dt);
      o.precision = Precision::f32;
      const AttentionResult c = attention(q, k, &v, o);
      EXPECT_EQ(precision(c), "f32") << dtype_name(dt);
      if (dt == DType::f32) {  // (f16 and bf16 outputs mostly round both alike)
        EXPECT_NE(std::memcmp(c.output.bytes(), a.output.bytes(), a.output.nbytes()), 0);
      }
    }
  }
}

TEST(Attention, GqaCausalWindowSinksSoftcap) {
  Tensor q = random_tensor({1, 4, 6, 8}, 4), k = random_tensor({1, 2, 9, 8}, 5),
         v = random_tensor({1, 2, 9, 8}, 6);
  Tensor sinks = random_tensor({4}, 7);
  std::vector<double> sv(4);
  for (int i = 0; i < 4; ++i) sv[i] = sinks.get(i);
  for (auto causal : {CausalAlign::bottom_right, CausalAlign::top_left}) {
    AttentionOptions o = all_emits();
    o.causal = causal;
    o.window_left = 3;
    o.sinks = &sinks;
    o.softcap = 2.5;
    o.scale = 0.7;
    AttentionResult r = attention(q, k, &v, o);
    Ref e = naive(q, k, v, 0.7, causal, 3, -1, &sv, 2.5, false);
    expect_close(r.probs, e.probs, 1e-12, 1e-14, "probs");
    expect_close(r.output, e.out, 1e-12, 1e-13, "output");
    expect_close(r.lse, e.lse, 1e-12, 1e-13, "lse");
  }
}

// Gemma-3n audio: per_dim_scale and relative_proj against the score written out:
// s = scale (q'.k + q'.R_h[i - j]), q'_c = q_c softplus(p_c), R = pos_proj timing(i - j),
// soft-capped, in a window of 3 back and 1 ahead (the relative rows' window).
TEST(Attention, Gemma3nPerDimScaleAndTimingProjection) {
  const std::size_t hq = 2, s = 9, d = 4, D = 6;
  Tensor q = random_tensor({1, hq, s, d}, 31), k = random_tensor({1, hq, s, d}, 32),
         v = random_tensor({1, hq, s, d}, 33), p = random_tensor({d}, 34),
         w = random_tensor({hq * d, D}, 35);
  AttentionOptions o = all_emits();
  o.per_dim_scale = &p;
  o.relative_proj = &w;
  o.relative_window = RelativeWindow{3, 1, false, true};
  o.window_left = 3;
  o.window_right = 1;
  o.softcap = 1.5;
  const AttentionResult r = attention(q, k, &v, o);
  const double scale = 1 / (std::sqrt(double(d)) * std::log(2.0));
  std::vector<double> logits(hq * s * s, -INFINITY);
  for (std::size_t h = 0; h < hq; ++h)
    for (std::size_t i = 0; i < s; ++i)
      for (std::size_t j = 0; j < s; ++j) {
        const long t = long(i) - long(j);  // query minus key
        if (t > 3 || t < -1) continue;
        std::vector<double> sig(D);
        for (std::size_t e = 0; e < D / 2; ++e) {
          const double a = double(t) * std::exp(-double(e) * std::log(1e4) / double(D / 2 - 1));
          sig[e] = std::sin(a);
          sig[D / 2 + e] = std::cos(a);
        }
        double x = 0;
        for (std::size_t c = 0; c < d; ++c) {
          double rel = 0;
          for (std::size_t e = 0; e < D; ++e) rel += w.get((h * d + c) * D + e) * sig[e];
          const double qc = q.get((h * s + i) * d + c) * std::log1p(std::exp(p.get(c)));
          x += qc * (k.get((h * s + j) * d + c) + rel);
        }
        x *= scale;
        logits[(h * s + i) * s + j] = 1.5 * std::tanh(x / 1.5);
      }
  expect_close(r.logits, logits, 1e-12, 1e-13, "logits");
  EXPECT_EQ(r.output.shape(), (Shape{1, hq, s, d}));
  // Refused: no window, with relative_k, --arith hf; a per_dim_scale of the wrong size.
  AttentionOptions bad = all_emits();
  bad.relative_proj = &w;
  EXPECT_THROW(attention(q, k, &v, bad), UsageError);  // no window
  bad.relative_window = RelativeWindow{3, 1, false, true};
  const Tensor table = random_tensor({5, d}, 37);
  bad.relative_k = &table;
  EXPECT_THROW(attention(q, k, &v, bad), UsageError);  // with relative_k
  bad.relative_k = nullptr;
  bad.arith = Arith::hf;
  EXPECT_THROW(attention(q, k, &v, bad), UsageError);
  Tensor p3 = random_tensor({d + 1}, 36);
  AttentionOptions bad_p = all_emits();
  bad_p.per_dim_scale = &p3;
  EXPECT_THROW(attention(q, k, &v, bad_p), InputError);
}

// A per-head relative_k table [rows, hq, d] with grouped-query decoding (few query rows,
// query heads of one KV head sharing work items): head h adds q.R[row, h].
TEST(Attention, PerHeadRelativeKeysGqaDecode) {
  const std::size_t hq = 4, hk = 2, sq = 3, sk = 11, d = 8;
  const Tensor q = random_tensor({2, hq, sq, d}, 41), k = random_tensor({2, hk, sk, d}, 42),
               v = random_tensor({2, hk, sk, d}, 43), t = random_tensor({6, hq, d}, 44);
  AttentionOptions o = all_emits();
  o.relative_k = &t;
  o.relative_window = RelativeWindow{4, 1, false, false};  // clip(j - pos(i), -4, 1) + 4
  const AttentionResult r = attention(q, k, &v, o);
  std::vector<double> logits(2 * hq * sq * sk);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < hq; ++h)
      for (std::size_t i = 0; i < sq; ++i)
        for (std::size_t j = 0; j < sk; ++j) {
          const long rel = std::clamp(long(j) - long(i + sk - sq), -4L, 1L) + 4;
          double x = 0;
          for (std::size_t c = 0; c < d; ++c) {
            const double qc = q.get(((b * hq + h) * sq + i) * d + c);
            x += qc * (k.get(((b * hk + h / 2) * sk + j) * d + c) +
                       t.get((std::size_t(rel) * hq + h) * d + c));
          }
          logits[((b * hq + h) * sq + i) * sk + j] = x / std::sqrt(double(d));
        }
  expect_close(r.logits, logits, 1e-12, 1e-13, "logits");
  o.emit = {AttentionEmit::output};  // the blocked path without scores
  const AttentionResult out = attention(q, k, &v, o);
  for (std::size_t i = 0; i < out.output.numel(); ++i) {
    EXPECT_NEAR(out.output.get(i), r.output.get(i), 1e-14);
  }
}

TEST(Attention, StreamedMatchesMaterialisedF32) {
  Tensor q = random_tensor({1, 2, 37, 16}, 8, DType::f32),
         k = random_tensor({1, 2, 300, 16}, 9, DType::f32),
         v = random_tensor({1, 2, 300, 8}, 10, DType::f32);
  AttentionOptions o;
  o.causal = CausalAlign::bottom_right;
  o.window_left = 100;
  o.emit = {AttentionEmit::output, AttentionEmit::lse};
  o.key_block = 64;  // several key blocks, some skipped
  o.query_block = 16;
  AttentionResult s = attention(q, k, &v, o);
  Ref e = naive(q.astype(DType::f64), k.astype(DType::f64), v.astype(DType::f64), 0.25,
                CausalAlign::bottom_right, 100, -1, nullptr, 0, false);
  EXPECT_EQ(s.output.dtype(), DType::f32);
  expect_close(s.output, e.out, 1e-5, 1e-6, "streamed output");
  expect_close(s.lse, e.lse, 1e-5, 1e-6, "streamed lse");
}

// Keeps what attention writes through write_at, and how often each entry was written.
class RecordingSink final : public TensorSink {
 public:
  explicit RecordingSink(const TensorInfo& info)
      : info_(info), data_(info.dtype, info.shape), times_(data_.numel()) {}
  void write_rows(const void*, std::size_t) override { FAIL() << "sequential write"; }
  bool writes_at() const override { return true; }
  void write_at(std::size_t first, const void* src, std::size_t count) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ASSERT_LE(first + count, data_.numel());
    const std::size_t item = dtype_size(info_.dtype);
    std::memcpy(data_.bytes() + first * item, src, count * item);
    for (std::size_t i = first; i < first + count; ++i) ++times_[i];
    ++calls_;
  }
  void commit() override {}
  TensorInfo info_;
  Tensor data_;
  std::vector<int> times_;
  int calls_ = 0;
  std::mutex mutex_;
};

TEST(Attention, OutputSinkGetsEveryRowOnce) {
  Tensor q = random_tensor({2, 3, 70, 16}, 40, DType::f32),
         k = random_tensor({2, 3, 90, 16}, 41, DType::f32),
         v = random_tensor({2, 3, 90, 8}, 42, DType::f32);
  Ref e = naive(q.astype(DType::f64), k.astype(DType::f64), v.astype(DType::f64), 0.25,
                CausalAlign::bottom_right, -1, -1, nullptr, 0, false);
  for (auto dtype : {DType::f32, DType::f16}) {
    AttentionOptions o;
    o.causal = CausalAlign::bottom_right;
    o.emit = {AttentionEmit::output, AttentionEmit::lse};
    o.query_block = 16;  // several items per head, the last one short
    o.key_block = 32;
    o.dtype = dtype;
    std::unique_ptr<RecordingSink> sink;
    o.output_sink = [&](const TensorInfo& info) {
      sink = std::make_unique<RecordingSink>(info);
      return sink.get();
    };
    AttentionResult r = attention(q, k, &v, o);
    ASSERT_TRUE(sink);
    EXPECT_TRUE(r.output_streamed);
    EXPECT_EQ(r.output.numel(), 0u);
    EXPECT_EQ(r.lse.numel(), 2u * 3 * 70);
    EXPECT_EQ(sink->info_.dtype, dtype);
    EXPECT_EQ(sink->info_.shape, (Shape{2, 3, 70, 8}));
    EXPECT_EQ(sink->calls_, 2 * 3 * 5);  // one per item
    for (int t : sink->times_) ASSERT_EQ(t, 1);
    // f16 rounds to 2^-11 relative.
    const double tol = dtype == DType::f16 ? 2e-3 : 1e-5;
    expect_close(sink->data_, e.out, tol, tol, "sink output");
    // The same bits as the output kept in memory.
    o.output_sink = nullptr;
    AttentionResult m = attention(q, k, &v, o);
    EXPECT_FALSE(m.output_streamed);
    EXPECT_EQ(std::memcmp(m.output.bytes(), sink->data_.bytes(), m.output.nbytes()), 0);
  }
}

TEST(Attention, OutputSinkDeclinedOrNotOffered) {
  Tensor q = random_tensor({1, 5, 2, 8}, 43), k = random_tensor({1, 5, 2, 8}, 44),
         v = random_tensor({1, 5, 2, 8}, 45);
  AttentionOptions o;
  int asked = 0;
  o.output_sink = [&](const TensorInfo&) -> TensorSink* {
    ++asked;
    return nullptr;
  };
  // A null sink keeps the output in memory.
  AttentionResult r = attention(q, k, &v, o);
  EXPECT_EQ(asked, 1);
  EXPECT_FALSE(r.output_streamed);
  EXPECT_EQ(r.output.shape(), (Shape{1, 5, 2, 8}));
  // bshd: an item's rows are not contiguous, so no sink is asked for.
  o.axes = "bshd";
  r = attention(q, k, &v, o);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(r.output.shape(), (Shape{1, 5, 2, 8}));
}

TEST(Attention, FullyMaskedRows) {
  Tensor q = random_tensor({1, 1, 3, 4}, 11), k = random_tensor({1, 1, 3, 4}, 12),
         v = random_tensor({1, 1, 3, 4}, 13);
  Tensor len(DType::i64, {1});
  len.set(0, 0);  // every key is padding
  for (auto mode : {MaskedRows::zero, MaskedRows::nan}) {
    for (std::size_t kb : {0, 1}) {
      AttentionOptions o = kb ? AttentionOptions{} : all_emits();
      if (kb) {
        o.emit = {AttentionEmit::output, AttentionEmit::lse};
        o.key_block = 1;
      }
      o.key_lengths = &len;
      o.masked_rows = mode;
      AttentionResult r = attention(q, k, &v, o);
      for (std::size_t i = 0; i < r.output.numel(); ++i) {
        if (mode == MaskedRows::zero) {
          EXPECT_EQ(r.output.get(i), 0.0);
        } else {
          EXPECT_TRUE(std::isnan(r.output.get(i)));
        }
      }
      for (std::size_t i = 0; i < r.lse.numel(); ++i) EXPECT_EQ(r.lse.get(i), -INFINITY);
      for (std::size_t i = 0; i < r.probs.numel(); ++i) {
        if (mode == MaskedRows::zero) {
          EXPECT_EQ(r.probs.get(i), 0.0);
        }
      }
    }
  }
}

TEST(Attention, BshdEqualsBhsd) {
  Tensor q = random_tensor({2, 3, 5, 8}, 14), k = random_tensor({2, 3, 5, 8}, 15),
         v = random_tensor({2, 3, 5, 6}, 16);
  auto to_bshd = [](const Tensor& t) {
    Shape s = t.shape();
    Tensor o(t.dtype(), {s[0], s[2], s[1], s[3]});
    for (std::size_t b = 0; b < s[0]; ++b)
      for (std::size_t h = 0; h < s[1]; ++h)
        for (std::size_t i = 0; i < s[2]; ++i)
          for (std::size_t c = 0; c < s[3]; ++c)
            o.set(((b * s[2] + i) * s[1] + h) * s[3] + c,
                  t.get(((b * s[1] + h) * s[2] + i) * s[3] + c));
    return o;
  };
  AttentionOptions o;
  o.emit = {AttentionEmit::output, AttentionEmit::probs};
  AttentionResult a = attention(q, k, &v, o);
  o.axes = "bshd";
  Tensor qt = to_bshd(q), kt = to_bshd(k), vt = to_bshd(v);
  AttentionResult b = attention(qt, kt, &vt, o);
  Tensor expect = to_bshd(a.output);
  ASSERT_EQ(b.output.shape(), expect.shape());
  for (std::size_t i = 0; i < expect.numel(); ++i)
    EXPECT_NEAR(b.output.get(i), expect.get(i), 1e-14);
  for (std::size_t i = 0; i < a.probs.numel(); ++i)
    EXPECT_NEAR(b.probs.get(i), a.probs.get(i), 1e-15);
}

TEST(Attention, BadShapesAndOptions) {
  Tensor q = random_tensor({1, 4, 5, 8}, 17), k3 = random_tensor({1, 3, 5, 8}, 18),
         k = random_tensor({1, 2, 5, 8}, 19), kd = random_tensor({1, 2, 5, 6}, 20),
         v6 = random_tensor({1, 2, 6, 8}, 21), v = random_tensor({1, 2, 5, 8}, 22);
  AttentionOptions o;
  EXPECT_THROW(attention(q, k3, &v, o), InputError);  // 3 heads do not divide 4
  EXPECT_THROW(attention(q, kd, &v, o), InputError);  // d mismatch
  EXPECT_THROW(attention(q, k, &v6, o), InputError);  // V length != K length
  Tensor bad_mask(DType::b1, {3, 5});
  o.mask = &bad_mask;
  EXPECT_THROW(attention(q, k, &v, o), InputError);  // (3, 5) vs (1, 4, 5, 5)
  o.mask = nullptr;
  o.scale = -1;
  EXPECT_THROW(attention(q, k, &v, o), UsageError);
  o.scale = 0;
  EXPECT_THROW(parse_attention_emit("probs,weights", true), UsageError);
  EXPECT_THROW(parse_attention_emit("output", false), UsageError);
  EXPECT_EQ(parse_attention_emit("", false), std::vector<AttentionEmit>{AttentionEmit::probs});
  o.emit = {AttentionEmit::probs};
  o.max_memory = 100;
  try {
    attention(q, k, &v, o);
    FAIL() << "no max-memory error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("probs would need"), std::string::npos) << e.what();
  }
}

// vLLM's per-tensor fp8 scales, called from C++: the bytes of the descales [b, hk] filled
// with them; out-of-range values and a scale beside its operand's descales are refused by
// attention() itself, in the library's names.
TEST(Attention, KvScalesAreFilledDescales) {
  Tensor q = random_tensor({2, 4, 3, 8}, 23), k = random_tensor({2, 2, 6, 8}, 24),
         v = random_tensor({2, 2, 6, 4}, 25);
  Tensor kd(DType::f64, {2, 2}), vd(DType::f64, {2, 2});
  for (std::size_t i = 0; i < 4; ++i) {
    kd.set(i, 0.37);
    vd.set(i, 2.5);
  }
  AttentionOptions scaled, descaled, plain;
  scaled.k_scale = 0.37;
  scaled.v_scale = 2.5;
  descaled.k_descale = &kd;
  descaled.v_descale = &vd;
  const Tensor a = attention(q, k, &v, scaled).output, b = attention(q, k, &v, descaled).output;
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), a.nbytes()), 0);
  const Tensor c = attention(q, k, &v, plain).output;
  EXPECT_NE(std::memcmp(a.bytes(), c.bytes(), a.nbytes()), 0);
  auto refused = [&](AttentionOptions o, const Tensor* vp, const std::string& want) {
    try {
      attention(q, k, vp, o);
      ADD_FAILURE() << "not refused: " << want;
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  };
  AttentionOptions o;
  o.k_scale = -1;
  refused(o, &v, "k_scale -1: must be a positive number");
  o.k_scale = std::numeric_limits<double>::quiet_NaN();
  refused(o, &v, "k_scale nan: must be a positive number");
  o.k_scale = 1e39;
  refused(o, &v,
          "k_scale 1e+39: must be a float32 from 1e-45 to 3.4028235e+38 (the scale is float32, "
          "as the descales are)");
  o.k_scale = 0.5;
  o.k_descale = &kd;
  refused(o, &v, "k_scale: not with k_descale (the scale is the descale of every entry; give one)");
  o = AttentionOptions{};
  o.v_scale = 2;
  o.emit = {AttentionEmit::probs};
  refused(o, nullptr, "v_scale: needs V");
}

TEST(Attention, BroadcastMasks) {
  Tensor q = random_tensor({2, 2, 4, 8}, 23), k = random_tensor({2, 2, 4, 8}, 24),
         v = random_tensor({2, 2, 4, 8}, 25);
  // A [sq, sk] boolean mask equal to top-left causal gives the causal result.
  Tensor m(DType::b1, {4, 4});
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) m.set(i * 4 + j, j <= i);
  AttentionOptions o = all_emits();
  o.mask = &m;
  AttentionResult a = attention(q, k, &v, o);
  Ref e = naive(q, k, v, 1 / std::sqrt(8.0), CausalAlign::top_left, -1, -1, nullptr, 0, false);
  expect_close(a.probs, e.probs, 1e-12, 1e-14, "bool mask probs");
  // The same as an additive [b, 1, 1, sk]-broadcast... here [sq, sk] with -inf.
  Tensor add(DType::f64, {1, 1, 4, 4});
  for (std::size_t i = 0; i < 16; ++i) add.set(i, m.get(i) != 0 ? 0.0 : -INFINITY);
  o.mask = &add;
  AttentionResult b = attention(q, k, &v, o);
  expect_close(b.output, e.out, 1e-12, 1e-13, "additive mask output");
}


// SAM's decomposed relative positions on equal query and key grids with tables of
// 2 H - 1 and 2 W - 1 rows (no resizing): the term is q.Rh[a - c + H - 1] +
// q.Rw[b - e + W - 1], written out here as a score bias, in several query and key
// blocks (the online softmax across blocks).
TEST(Attention, DecomposedRelPosEqualsItsScoreBias) {
  const std::size_t H = 3, W = 4, S = H * W, d = 8;
  Tensor q = random_tensor({2, 2, S, d}, 31), k = random_tensor({2, 1, S, d}, 32),
         v = random_tensor({2, 1, S, 5}, 33);
  Tensor rh = random_tensor({2 * H - 1, d}, 34), rw = random_tensor({2 * W - 1, d}, 35);
  Tensor bias(DType::f64, Shape{2, 2, S, S});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < S; ++i)
        for (std::size_t j = 0; j < S; ++j) {
          double th = 0, tw = 0;
          for (std::size_t c = 0; c < d; ++c) {
            const double qc = q.get(((b * 2 + h) * S + i) * d + c);
            th += qc * rh.get((i / W + H - 1 - j / W) * d + c);
            tw += qc * rw.get((i % W + W - 1 - j % W) * d + c);
          }
          bias.data<double>()[((b * 2 + h) * S + i) * S + j] = th + tw;
        }
  AttentionOptions with = all_emits(), ref = all_emits();
  with.rel_pos_h = &rh;
  with.rel_pos_w = &rw;
  with.grid_h = H;
  with.grid_w = W;
  with.causal = ref.causal = CausalAlign::bottom_right;
  ref.score_bias = &bias;
  const AttentionResult e = attention(q, k, &v, ref);
  for (std::size_t kb : {std::size_t{0}, std::size_t{5}}) {
    with.key_block = kb;
    with.query_block = kb ? 3 : 0;
    const AttentionResult r = attention(q, k, &v, with);
    std::vector<double> lg(e.logits.numel()), out(e.output.numel());
    for (std::size_t i = 0; i < lg.size(); ++i) lg[i] = e.logits.get(i);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = e.output.get(i);
    expect_close(r.logits, lg, 1e-12, 1e-12, "logits");
    expect_close(r.output, out, 1e-12, 1e-12, "output");
  }
  // Misuse: one table, no grid, a grid that does not hold the queries.
  AttentionOptions bad = with;
  bad.rel_pos_w = nullptr;
  EXPECT_THROW(attention(q, k, &v, bad), UsageError);
  bad = with;
  bad.grid_h = bad.grid_w = 0;
  EXPECT_THROW(attention(q, k, &v, bad), UsageError);
  bad = with;
  bad.grid_w = 5;
  EXPECT_THROW(attention(q, k, &v, bad), InputError);
}

// The budget counts what the plan holds: WavLM's gate factors (float64, then their copy
// in the working type) and a float mask's copy, so --max-memory refuses before either
// is allocated.
TEST(Attention, BudgetCountsTheGateAndTheMask) {
  const std::size_t b = 2, hq = 4, sq = 300, sk = 5, d = 8, e = 3;
  const Shape qs{b, hq, sq, d}, ks{b, hq, sk, d}, vs{b, hq, sk, d};
  AttentionOptions opt;
  opt.emit = {AttentionEmit::output};
  opt.precision = Precision::f32;
  const std::size_t plain = attention_memory(qs, ks, &vs, DType::f32, opt).first;
  Tensor t5 = random_tensor({32, hq}, 1), x = random_tensor({b, sq, hq * e}, 2),
         w = random_tensor({8, e}, 3), bias = random_tensor({8}, 4), c = random_tensor({hq}, 5);
  opt.t5_bias = &t5;
  const std::size_t with_t5 = attention_memory(qs, ks, &vs, DType::f32, opt).first;
  EXPECT_EQ(with_t5 - plain, (32 * hq + hq * (sq + sk)) * sizeof(float));
  opt.gate_input = &x, opt.gate_weight = &w, opt.gate_bias = &bias, opt.gate_const = &c;
  const std::size_t gated = attention_memory(qs, ks, &vs, DType::f32, opt).first;
  EXPECT_EQ(gated - with_t5, b * hq * sq * (sizeof(double) + sizeof(float)));
  AttentionOptions masked;
  masked.emit = {AttentionEmit::output};
  masked.precision = Precision::f32;
  Tensor m = random_tensor({b, 1, sq, sk}, 6);  // f64, copied as f32
  masked.mask = &m;
  EXPECT_EQ(attention_memory(qs, ks, &vs, DType::f32, masked).first - plain,
            b * sq * sk * sizeof(float));
}

// The budget counts a whole copy of K or V only when the run makes one: not for K and V
// in the arithmetic type or in f16/bf16 (widened per key block) with d last, nor f32 in
// the default f64 arithmetic (widened too); for a dtype it must convert (f64 into float32
// arithmetic, which also makes the run convert an f16 V), and for d not last.
TEST(Attention, BudgetCountsOnlyTheCopiesMade) {
  const std::size_t b = 1, h = 2, sq = 3, sk = 50, d = 8;
  const Shape qs{b, h, sq, d}, ks{b, h, sk, d};
  AttentionOptions f64;
  f64.emit = {AttentionEmit::output};
  auto need64 = [&](DType k, DType v) {
    return attention_memory(qs, ks, &ks, DType::f32, f64, k, v).first;
  };
  EXPECT_EQ(attention_memory(qs, ks, &ks, DType::f32, f64).first - need64(DType::f32, DType::f32),
            2 * b * h * sk * d * sizeof(double));
  for (DType k : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    EXPECT_EQ(need64(k, DType::f32), need64(DType::f64, DType::f64)) << dtype_name(k);
  }
  AttentionOptions opt;
  opt.emit = {AttentionEmit::output};
  opt.precision = Precision::f32;
  const std::size_t kv = b * h * sk * d * sizeof(float);
  const std::size_t worst = attention_memory(qs, ks, &ks, DType::f32, opt).first;
  auto need = [&](DType k, DType v) {
    return attention_memory(qs, ks, &ks, DType::f32, opt, k, v).first;
  };
  EXPECT_EQ(worst - need(DType::f32, DType::f32), 2 * kv);
  EXPECT_EQ(need(DType::f16, DType::bf16), need(DType::f32, DType::f32));
  EXPECT_EQ(need(DType::f16, DType::f32), need(DType::f32, DType::f32));
  EXPECT_EQ(need(DType::f64, DType::f32) - need(DType::f32, DType::f32), kv);
  EXPECT_EQ(need(DType::f32, DType::f64) - need(DType::f32, DType::f32), kv);
  EXPECT_EQ(need(DType::f64, DType::f16), worst);
  AttentionOptions dmid = opt;
  dmid.axes = "bhds";
  const Shape kt{b, h, d, sk}, qt{b, h, d, sq};
  EXPECT_EQ(attention_memory(qt, kt, &kt, DType::f32, dmid, DType::f32, DType::f32).first,
            attention_memory(qt, kt, &kt, DType::f32, dmid).first);
}

// K and V in memory as f16 or bf16 (or f32 in f64 arithmetic) are used in place, each key
// block widened as it is used: the bits of the same run on K and V converted whole to the
// arithmetic type, for every emit, the bhsd and bshd layouts, decoding (query heads
// sharing items) and prefill, in f64 (the default) and f32 arithmetic.
TEST(Attention, WidenedInPlaceEqualsConvertedFirst) {
  for (auto [kv, arith] : {std::pair{DType::f16, DType::f64}, {DType::bf16, DType::f64},
                           {DType::f32, DType::f64}, {DType::f16, DType::f32},
                           {DType::bf16, DType::f32}}) {
    for (std::size_t sq : {std::size_t{1}, std::size_t{40}}) {
      for (const char* axes : {"bhsd", "bshd"}) {
        const bool bshd = axes[1] == 's';
        auto shape = [&](std::size_t h, std::size_t s, std::size_t d) {
          return bshd ? Shape{2, s, h, d} : Shape{2, h, s, d};
        };
        Tensor q = random_tensor(shape(4, sq, 16), 50, DType::f32);
        Tensor k = random_tensor(shape(2, 2500, 16), 51, DType::f32).astype(kv);
        Tensor v = random_tensor(shape(2, 2500, 8), 52, DType::f32).astype(kv);
        Tensor kw = k.astype(arith), vw = v.astype(arith);
        for (auto emit : {std::vector<AttentionEmit>{AttentionEmit::output, AttentionEmit::lse},
                          std::vector<AttentionEmit>{AttentionEmit::probs,
                                                     AttentionEmit::output}}) {
          AttentionOptions o;
          o.axes = axes;
          o.causal = CausalAlign::bottom_right;
          o.window_left = 1500;
          o.emit = emit;
          if (arith == DType::f32) o.precision = Precision::f32;
          AttentionResult a = attention(q, k, &v, o), b = attention(q, kw, &vw, o);
          for (AttentionEmit e : emit) {
            const Tensor &x = a.get(e), &y = b.get(e);
            ASSERT_EQ(x.nbytes(), y.nbytes());
            EXPECT_EQ(std::memcmp(x.bytes(), y.bytes(), x.nbytes()), 0)
                << dtype_name(kv) << " in " << dtype_name(arith) << " sq " << sq << " "
                << axes << " "
                << attention_emit_name(e);
          }
        }
      }
    }
  }
}

// A file's source, passed through, that counts how K or V was used: mapped_data() or
// read_raw().
class KvProbe final : public TensorSource {
 public:
  explicit KvProbe(std::unique_ptr<TensorSource> s) : s_(std::move(s)) {}
  const TensorInfo& info() const override { return s_->info(); }
  void read_rows(std::size_t first, std::size_t count, void* dst) override {
    s_->read_rows(first, count, dst);
  }
  bool seekable() const override { return s_->seekable(); }
  void read_slab(std::size_t axis, std::size_t first, std::size_t count, void* dst) override {
    s_->read_slab(axis, first, count, dst);
  }
  const std::byte* mapped_data() override {
    ++maps;
    return s_->mapped_data();
  }
  void read_elements(std::size_t first, std::size_t count, void* dst) override {
    s_->read_elements(first, count, dst);
  }
  bool raw_reads() override { return s_->raw_reads(); }
  void read_raw(std::size_t offset, std::size_t n, void* dst) override {
    ++raws;
    s_->read_raw(offset, n, dst);
  }
  int maps = 0;
  std::atomic<int> raws{0};

 private:
  std::unique_ptr<TensorSource> s_;
};

// Decode (and a few query rows) with K and V read block by block from their files (NPY
// f32 and f16, a contiguous HDF5 bf16 dataset) gives the bytes of K and V used in their
// mappings, in chunks and of the run in memory, for MHA and GQA, on 1 and 2 threads.
// The way: mapped by default, read with POSENC_KV_IO=read or by default under a budget
// below K and V, chunks with POSENC_KV_IO=map under that budget.
TEST(Attention, KvReadOrMappedGiveTheSameBytes) {
  char tmpl[] = "/tmp/posenc-kvread-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const int threads_before = omp_get_max_threads();
  for (DType kv : {DType::f32, DType::f16, DType::bf16}) {
    for (std::size_t hk : {std::size_t{4}, std::size_t{2}}) {
      for (std::size_t sq : {std::size_t{1}, std::size_t{3}}) {
        const std::string what = fmt::format("{} hk {} sq {}", dtype_name(kv), hk, sq);
        Tensor q = random_tensor({1, 4, sq, 32}, 60, DType::f32);
        Tensor k = random_tensor({1, hk, 9000, 32}, 61, DType::f32).astype(kv);
        Tensor v = random_tensor({1, hk, 9000, 16}, 62, DType::f32).astype(kv);
        const bool h5 = kv == DType::bf16;
        const std::string ext = h5 ? ".h5:/x" : ".npy";
        const std::string qf = dir + "/q.npy", kf = dir + "/k" + ext, vf = dir + "/v" + ext;
        write_tensor(parse_ref(qf), q);
        WriteOptions force;
        force.force = true;
        write_tensor(parse_ref(kf), k, {}, force);
        write_tensor(parse_ref(vf), v, {}, force);
        AttentionOptions o;
        o.emit = {AttentionEmit::output, AttentionEmit::lse};
        o.key_block = 512;  // several blocks, the last one short
        const AttentionResult want = attention(q, k, &v, o);
        for (int threads : {1, 2}) {
          omp_set_num_threads(threads);
          // (env, budget, way): 'm' mapped, 'r' read, 'c' chunks. 1600K holds the workers'
          // block buffers (512 keys of 48 doubles and 512K of pieces each) but not K and V.
          struct Way {
            const char* env;
            std::size_t budget;
            char way;
          };
          for (const Way w : {Way{nullptr, 0, 'm'}, Way{"read", 0, 'r'}, Way{"map", 0, 'm'},
                              Way{nullptr, 1600 << 10, 'r'}, Way{"map", 1600 << 10, 'c'}}) {
            if (w.env) {
              ::setenv("POSENC_KV_IO", w.env, 1);
            } else {
              ::unsetenv("POSENC_KV_IO");
            }
            AttentionOptions ob = o;
            ob.max_memory = w.budget;
            auto qs = open_source(parse_ref(qf));
            KvProbe ks(open_source(parse_ref(kf))), vs(open_source(parse_ref(vf)));
            const AttentionResult got = attention(*qs, ks, &vs, ob);
            ::unsetenv("POSENC_KV_IO");
            const std::string how = fmt::format("{} -j {} POSENC_KV_IO={} budget {}", what, threads,
                                                w.env ? w.env : "", w.budget);
            EXPECT_EQ(ks.raws.load() > 0 && vs.raws.load() > 0, w.way == 'r') << how;
            EXPECT_EQ(ks.maps > 0, w.way == 'm') << how;
            for (AttentionEmit e : o.emit) {
              const Tensor &x = got.get(e), &y = want.get(e);
              ASSERT_EQ(x.nbytes(), y.nbytes()) << how;
              EXPECT_EQ(std::memcmp(x.bytes(), y.bytes(), x.nbytes()), 0)
                  << how << " " << attention_emit_name(e);
            }
          }
        }
      }
    }
  }
  omp_set_num_threads(threads_before);
  for (const char* f : {"/q.npy", "/k.npy", "/v.npy", "/k.h5", "/v.h5"})
    ::unlink((dir + f).c_str());
  ::rmdir(dir.c_str());
}

// A K file shrunk after its header was read (another process truncating it) is one
// InputError from the reads, naming the file and the data bytes it still holds, however
// many threads meet its end.
TEST(Attention, KvReadOfTruncatedFile) {
  ::setenv("POSENC_KV_IO", "read", 1);
  char tmpl[] = "/tmp/posenc-kvread-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string qf = dir + "/q.npy", kf = dir + "/k.npy", vf = dir + "/v.npy";
  const Tensor k = random_tensor({1, 2, 3000, 16}, 64, DType::f16);
  write_tensor(parse_ref(qf), random_tensor({1, 2, 1, 16}, 63, DType::f32));
  write_tensor(parse_ref(vf), random_tensor({1, 2, 3000, 16}, 65, DType::f16));
  WriteOptions force;
  force.force = true;
  const std::size_t data = k.nbytes();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    write_tensor(parse_ref(kf), k, {}, force);
    struct stat st {};
    ASSERT_EQ(::stat(kf.c_str(), &st), 0);
    const auto header = static_cast<std::size_t>(st.st_size) - data;
    auto qs = open_source(parse_ref(qf));
    KvProbe ks(open_source(parse_ref(kf))), vs(open_source(parse_ref(vf)));
    ASSERT_EQ(::truncate(kf.c_str(), static_cast<off_t>(header + data / 3)), 0);
    AttentionOptions o;
    o.emit = {AttentionEmit::output};
    o.key_block = 256;
    try {
      attention(*qs, ks, &vs, o);
      ADD_FAILURE() << "no error for a truncated K";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()),
                fmt::format("{}: truncated data: expected {} bytes, got {}", kf, data, data / 3));
    }
    EXPECT_GT(ks.raws.load(), 0);
  }
  ::unsetenv("POSENC_KV_IO");
  for (const char* f : {"/q.npy", "/k.npy", "/v.npy"}) ::unlink((dir + f).c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace posenc
