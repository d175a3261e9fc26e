// posenc used from an installed prefix: a Llama 3 RoPE table and a rotation through
// the C++ API, checked against the files the posenc command writes (the same bytes)
// and against an independent numpy reference (reference.py, float64).

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <posenc/posenc.hpp>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

namespace fs = std::filesystem;

namespace {

posenc::RopeParams llama3() {
  posenc::RopeParams p;
  p.head_dim = 64;
  p.base = 500000.0;
  p.scaling = posenc::RopeScaling::llama3;
  p.factor = 8.0;
  p.original_max_pos = 8192;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;
  return p;
}

constexpr const char* kRopeFlags =
    "--base 500000 --scaling llama3 --factor 8 --original-max-pos 8192 "
    "--low-freq-factor 1 --high-freq-factor 4";

class Consumer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("posenc-consumer-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static void run(const std::string& cmd) {
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  fs::path dir_;
};

// A random [b, h, s, d] query in f32.
xt::xtensor<float, 4> random_q(std::size_t s) {
  std::mt19937 gen(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  xt::xtensor<float, 4> q = xt::empty<float>({std::size_t{2}, std::size_t{3}, s, std::size_t{64}});
  for (auto& v : q) v = n(gen);
  return q;
}

TEST_F(Consumer, TableMatchesCliAndReference) {
  const std::int64_t n = 3000, start = 5000;  // across the llama3 context edge
  auto [cos, sin] = posenc::table::rope_cos_sin(llama3(), n, start);
  ASSERT_EQ(cos.shape()[0], static_cast<std::size_t>(n));
  ASSERT_EQ(cos.shape()[1], 64u);

  run(fmt::format("{} table rope --dim 64 --positions {} --start {} {} --dtype f64 -o {}",
                  POSENC_BIN, n, start, kRopeFlags, path("cli.h5:/cs")));
  const auto cli = posenc::to_xarray<double>(posenc::read_tensor(path("cli.h5:/cs")));
  EXPECT_TRUE(xt::view(cli, 0) == cos);  // the same bytes as the command
  EXPECT_TRUE(xt::view(cli, 1) == sin);

  const xt::xtensor<float, 4> q = random_q(static_cast<std::size_t>(n));
  posenc::write_tensor(posenc::parse_ref(path("q.npy")), posenc::to_tensor(q));
  run(fmt::format("{} {} {} {} {}", POSENC_PYTHON, REFERENCE_PY, path("q.npy"), dir_.string(),
                  start));
  const auto ref_cos = posenc::to_xarray<double>(posenc::read_tensor(path("ref_cos.npy")));
  const auto ref_sin = posenc::to_xarray<double>(posenc::read_tensor(path("ref_sin.npy")));
  // Angles up to 8000 rad from inverse frequencies a few ulps apart (see below).
  EXPECT_LE(xt::amax(xt::abs(cos - ref_cos))(), 1e-10);
  EXPECT_LE(xt::amax(xt::abs(sin - ref_sin))(), 1e-10);
}

TEST_F(Consumer, ApplyRopeMatchesCliAndReference) {
  const std::int64_t start = 8190;
  const xt::xtensor<float, 4> q = random_q(96);
  xt::xtensor<double, 4> q64 = xt::cast<double>(q);
  posenc::Positions pos;
  pos.start = start;
  posenc::apply_rope(q64, "bhsd", llama3(), pos);  // float64, in place

  xt::xtensor<float, 4> q32 = q;
  posenc::apply_rope(q32, "", llama3(), pos);  // default axes for rank 4: bhsd

  posenc::write_tensor(posenc::parse_ref(path("q.npy")), posenc::to_tensor(q));
  run(fmt::format("{} rope {} --start {} {} -o {}", POSENC_BIN, path("q.npy"), start, kRopeFlags,
                  path("cli.npy")));
  const auto cli = posenc::to_xarray<float>(posenc::read_tensor(path("cli.npy")));
  EXPECT_TRUE(cli == q32);  // f32 results rounded once from float64, as the command

  run(fmt::format("{} {} {} {} {}", POSENC_PYTHON, REFERENCE_PY, path("q.npy"), dir_.string(),
                  start));
  const auto ref = posenc::to_xarray<double>(posenc::read_tensor(path("ref_q.npy")));
  // The reference's llama3 smoothing rounds in another order: inverse frequencies a few
  // ulps apart, times positions near 8300, give angles about 1e-12 apart.
  EXPECT_LE(xt::amax(xt::abs(q64 - ref))(), 1e-10);
  // f32 result: the float64 value rounded once, so within half an f32 ulp of it.
  const xt::xtensor<float, 4> rounded = xt::cast<float>(q64);
  EXPECT_TRUE(rounded == q32);
}

TEST_F(Consumer, AttentionAndFilesThroughXtensor) {
  std::mt19937 gen(11);
  std::normal_distribution<double> nd(0.0, 1.0);
  xt::xtensor<double, 4> q = xt::empty<double>({2u, 4u, 5u, 16u});
  xt::xtensor<double, 4> k = xt::empty<double>({2u, 4u, 9u, 16u});
  xt::xtensor<double, 4> v = xt::empty<double>({2u, 4u, 9u, 8u});
  for (auto* t : {&q, &k, &v}) {
    for (auto& x : *t) x = nd(gen);
  }
  posenc::AttentionOptions opt;
  opt.causal = posenc::CausalAlign::bottom_right;
  const auto r = posenc::attention(q, k, v, opt);
  ASSERT_TRUE(r.output && r.probs);  // the default emit: probs, output
  EXPECT_FALSE(r.logits || r.lse);
  ASSERT_EQ(r.output->dimension(), 4u);
  EXPECT_EQ(r.output->shape()[3], 8u);

  posenc::write_array(q, path("q.h5:/layer0/q"));
  EXPECT_TRUE(posenc::read_array<double>(path("q.h5:/layer0/q")) == q);
  posenc::write_array(k, path("k.npy"));
  posenc::write_array(v, path("v.npy"));
  posenc::write_array(q, path("q.npy"));
  EXPECT_TRUE(posenc::read_array<double>(path("q.npy")) == q);
  run(fmt::format("{} {} attention {} {} {} {}", POSENC_PYTHON, REFERENCE_PY, path("q.npy"),
                  path("k.npy"), path("v.npy"), path("ref.npy")));
  const auto ref = posenc::read_array<double>(path("ref.npy"));
  EXPECT_LE(xt::amax(xt::abs(*r.output - ref))(), 1e-12);
}

TEST_F(Consumer, ErrorsAreTyped) {
  xt::xtensor<float, 2> odd = xt::zeros<float>({4, 7});
  EXPECT_THROW(posenc::apply_rope(odd, "sd", posenc::RopeParams{}), posenc::UsageError);
  posenc::RopeParams p = llama3();
  p.factor.reset();
  EXPECT_THROW(posenc::table::rope_cos_sin(p, 8), posenc::UsageError);
}

}  // namespace
