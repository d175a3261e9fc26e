// RoPE parameters given explicitly, completed from a HF config (hf_config.hpp).

#include <algorithm>
#include <string>
#include <vector>

#include "posenc/encodings/hf_config.hpp"
#include "posenc/encodings/rope.hpp"

namespace posenc {

RopeParams merge_hf_config(const RopeParams& given, const std::vector<std::string>& names,
                           const std::string& path, const HfLayer& layer,
                           const HfVersion& version) {
  auto has = [&names](const char* n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  RopeParams p = given;
  if (has("attention_factor")) {
    p.short_mscale.reset();
    p.long_mscale.reset();
  }
  if (path.empty()) return p;
  // Fields the config must not overwrite: the explicit ones it would otherwise set.
  static const char* const kKeepable[] = {"style",           "base",
                                          "partial",         "scaling",
                                          "factor",          "beta_fast",
                                          "beta_slow",       "mscale",
                                          "mscale_all_dim",  "attention_factor",
                                          "low_freq_factor", "high_freq_factor",
                                          "truncate",        "short_factor",
                                          "long_factor",     "rope_interleave",
                                          "rotary_dim"};
  std::vector<std::string> keep;
  if (given.head_dim > 0) keep.push_back("head_dim");
  for (const char* n : kKeepable) {
    if (has(n)) keep.push_back(n);
  }
  apply_hf_config(path, p, keep, layer, version);
  // The lengths and placement are not the config's to decide when given.
  if (has("original_max_pos")) p.original_max_pos = given.original_max_pos;
  if (has("max_pos")) p.max_pos = given.max_pos;
  if (has("seq_len")) p.seq_len = given.seq_len;
  if (has("rotary_last")) p.rotary_last = given.rotary_last;
  // An explicit partial factor decides R even if a config named another width.
  if (has("partial") && !has("rotary_dim")) p.rotary_dim = 0;
  if (has("attention_factor")) {
    p.attention_factor = given.attention_factor;
    p.short_mscale.reset();
    p.long_mscale.reset();
  }
  // What was given is the caller's: its checks name the option or keyword.
  for (const std::string& n : names) p.sources.erase(n);
  if (given.head_dim > 0) p.sources.erase("head_dim");
  return p;
}

}  // namespace posenc
