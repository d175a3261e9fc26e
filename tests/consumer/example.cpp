// Llama 3.1's RoPE from C++: the cos/sin table and q rotated in place.
#include <posenc/posenc.hpp>

#include <cstdio>

int main() {
  posenc::RopeParams p;  // the fields of rope_scaling in a HF config
  p.head_dim = 128;
  p.base = 500000.0;
  p.scaling = posenc::RopeScaling::llama3;
  p.factor = 8.0;
  p.original_max_pos = 8192;

  auto [cos, sin] = posenc::table::rope_cos_sin(p, 4096);  // [4096, 128] each

  xt::xtensor<float, 4> q = xt::ones<float>({1, 32, 4096, 128});  // [b, h, s, d]
  posenc::apply_rope(q, "bhsd", p);                              // in place

  std::printf("cos[1, 0] = %.17g, q[0, 0, 1, 0] = %.9g\n", cos(1, 0), q(0, 0, 1, 0));
  return 0;
}
