// Reference for `posenc rope --arith ggml`: ggml's CPU rope (ggml/src/ggml-cpu/ops.cpp:
// rope_yarn_ramp, rope_yarn, ggml_rope_cache_init, rotate_pairs and the row loop of
// ggml_compute_forward_rope_flt; ggml/src/ggml.c: ggml_rope_yarn_corr_dims), written
// out as ggml's code has it, for one thread, and built the way ggml's CPU backend is
// built by default (GCC, -O3 -march=native, contraction on) by tests/CMakeLists.txt.
//
// Usage: ggml_rope_ref TYPE MODE N_DIMS NE0 NE1 NE2 NE3 FREQ_BASE FREQ_SCALE EXT_FACTOR
//                      ATTN_FACTOR BETA_FAST BETA_SLOW N_CTX_ORIG FORWARD IN POS FF OUT
// TYPE f32|f16; MODE 0 (normal) or 2 (neox); IN raw src [ne3][ne2][ne1][ne0] of TYPE;
// POS raw int32 [ne2]; FF raw float32 freq factors or "-" for none; OUT gets dst.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

typedef uint16_t ggml_fp16_t;

template <typename T>
struct type_conversion_table;
template <>
struct type_conversion_table<float> {
  static float to_f32(float x) { return x; }
  static float from_f32(float x) { return x; }
};
template <>
struct type_conversion_table<ggml_fp16_t> {
  // ggml-cpu's GGML_CPU_FP16_TO_FP32 / FP32_TO_FP16 with F16C
  static float to_f32(ggml_fp16_t x) { return _cvtsh_ss(x); }
  static ggml_fp16_t from_f32(float x) { return _cvtss_sh(x, 0); }
};

static float ggml_rope_yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void ggml_rope_yarn_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast,
                              float beta_slow, float dims[2]) {
  float start = floorf(ggml_rope_yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
  float end = ceilf(ggml_rope_yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
  dims[0] = MAX(0, start);
  dims[1] = MIN(n_dims - 1, end);
}

static float rope_yarn_ramp(const float low, const float high, const int i0) {
  const float y = (i0 / 2 - low) / MAX(0.001f, high - low);
  return 1 - MIN(1, MAX(0, y));
}

static void rope_yarn(float theta_extrap, float freq_scale, float corr_dims[2], int64_t i0,
                      float ext_factor, float mscale, float* cos_theta, float* sin_theta) {
  float theta_interp = freq_scale * theta_extrap;
  float theta = theta_interp;
  if (ext_factor != 0.0f) {
    float ramp_mix = rope_yarn_ramp(corr_dims[0], corr_dims[1], i0) * ext_factor;
    theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
    mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
  }
  *cos_theta = cosf(theta) * mscale;
  *sin_theta = sinf(theta) * mscale;
}

static void ggml_rope_cache_init(float theta_base, float freq_scale, const float* freq_factors,
                                 float corr_dims[2], int64_t ne0, float ext_factor, float mscale,
                                 float* cache, float sin_sign, float theta_scale) {
  float theta = theta_base;
  for (int64_t i0 = 0; i0 < ne0; i0 += 2) {
    const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
    rope_yarn(theta / ff, freq_scale, corr_dims, i0, ext_factor, mscale, &cache[i0 + 0],
              &cache[i0 + 1]);
    cache[i0 + 1] *= sin_sign;
    theta *= theta_scale;
  }
}

template <typename T>
static void rotate_pairs(const int64_t n, const int64_t n_offset, const float* cache,
                         const T* src_data, T* dst_data, const int scale = 2) {
  for (int64_t i0 = 0; i0 < n; i0 += 2) {
    const int64_t ic = i0 / scale;
    const float cos_theta = cache[i0 + 0];
    const float sin_theta = cache[i0 + 1];
    const T* const src = src_data + ic;
    T* dst = dst_data + ic;
    const float x0 = type_conversion_table<T>::to_f32(src[0]);
    const float x1 = type_conversion_table<T>::to_f32(src[n_offset]);
    dst[0] = type_conversion_table<T>::from_f32(x0 * cos_theta - x1 * sin_theta);
    dst[n_offset] = type_conversion_table<T>::from_f32(x0 * sin_theta + x1 * cos_theta);
  }
}

struct Params {
  int mode, n_dims;
  int64_t ne0, ne1, ne2, ne3;
  float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
  int n_ctx_orig;
  bool forward;
};

// The row loop of ggml_compute_forward_rope_flt for one thread (ith 0 of nth 1).
template <typename T>
static void rope_flt(const Params& P, const T* src0, const int32_t* pos, const float* freq_factors,
                     T* dst) {
  const int64_t ne0 = P.ne0, ne1 = P.ne1, ne2 = P.ne2, ne3 = P.ne3;
  const float theta_scale = powf(P.freq_base, -2.0f / P.n_dims);
  float corr_dims[2];
  ggml_rope_yarn_corr_dims(P.n_dims, P.n_ctx_orig, P.freq_base, P.beta_fast, P.beta_slow,
                           corr_dims);
  const float sin_sign = P.forward ? 1.0f : -1.0f;
  std::vector<float> cache(ne0);
  int64_t last_i2 = -1;
  for (int64_t i3 = 0; i3 < ne3; i3++) {
    for (int64_t i2 = 0; i2 < ne2; i2++) {
      for (int64_t i1 = 0; i1 < ne1; i1++) {
        if (last_i2 != i2) {
          const int64_t p = pos[i2];
          ggml_rope_cache_init(p, P.freq_scale, freq_factors, corr_dims, ne0, P.ext_factor,
                               P.attn_factor, cache.data(), sin_sign, theta_scale);
          last_i2 = i2;
        }
        const T* src = src0 + ((i3 * ne2 + i2) * ne1 + i1) * ne0;
        T* dst_data = dst + ((i3 * ne2 + i2) * ne1 + i1) * ne0;
        if (P.mode == 0) {
          rotate_pairs<T>(P.n_dims, 1, cache.data(), src, dst_data, 1);
        } else {
          rotate_pairs<T>(P.n_dims, P.n_dims / 2, cache.data(), src, dst_data);
        }
        for (int64_t i0 = P.n_dims; i0 < ne0; i0 += 2) {
          dst_data[i0] = src[i0];
          dst_data[i0 + 1] = src[i0 + 1];
        }
      }
    }
  }
}

static std::vector<char> slurp(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) {
    std::perror(path);
    std::exit(2);
  }
  std::vector<char> v;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
  std::fclose(f);
  return v;
}

int main(int argc, char** argv) {
  if (argc != 20) {
    std::fprintf(stderr, "usage: see the header of ggml_rope_ref.cpp\n");
    return 2;
  }
  const bool f16 = std::strcmp(argv[1], "f16") == 0;
  Params P;
  P.mode = std::atoi(argv[2]);
  P.n_dims = std::atoi(argv[3]);
  P.ne0 = std::atoll(argv[4]);
  P.ne1 = std::atoll(argv[5]);
  P.ne2 = std::atoll(argv[6]);
  P.ne3 = std::atoll(argv[7]);
  P.freq_base = std::strtof(argv[8], nullptr);
  P.freq_scale = std::strtof(argv[9], nullptr);
  P.ext_factor = std::strtof(argv[10], nullptr);
  P.attn_factor = std::strtof(argv[11], nullptr);
  P.beta_fast = std::strtof(argv[12], nullptr);
  P.beta_slow = std::strtof(argv[13], nullptr);
  P.n_ctx_orig = std::atoi(argv[14]);
  P.forward = std::atoi(argv[15]) != 0;
  std::vector<char> in = slurp(argv[16]);
  std::vector<char> pos = slurp(argv[17]);
  std::vector<char> ff;
  if (std::strcmp(argv[18], "-") != 0) ff = slurp(argv[18]);
  const float* freq_factors = ff.empty() ? nullptr : reinterpret_cast<const float*>(ff.data());
  std::vector<char> out(in.size());
  if (f16) {
    rope_flt<ggml_fp16_t>(P, reinterpret_cast<const ggml_fp16_t*>(in.data()),
                          reinterpret_cast<const int32_t*>(pos.data()), freq_factors,
                          reinterpret_cast<ggml_fp16_t*>(out.data()));
  } else {
    rope_flt<float>(P, reinterpret_cast<const float*>(in.data()),
                    reinterpret_cast<const int32_t*>(pos.data()), freq_factors,
                    reinterpret_cast<float*>(out.data()));
  }
  FILE* f = std::fopen(argv[19], "wb");
  if (!f || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::perror(argv[19]);
    return 4;
  }
  return 0;
}
