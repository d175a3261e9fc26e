// The named RoPE layouts as values (posenc/encodings/rope_layout.hpp).

#include "posenc/encodings/rope_layout.hpp"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "posenc/encodings/rope.hpp"
#include "posenc/error.hpp"

namespace posenc {

std::string rope_pairing_name(RopePairing p) {
  switch (p) {
    case RopePairing::tiled: return "tiled";
    case RopePairing::split: return "split";
    case RopePairing::style: break;
  }
  return "style";
}

void check_rope_layout(const RopeLayout& l, std::size_t rotary_dim) {
  if (l.axes == 0 || l.axes > kMaxRopeAxes) {
    throw UsageError(fmt::format("rope layout: 1 to {} coordinate axes, got {}", kMaxRopeAxes,
                                 l.axes));
  }
  const std::size_t half = l.pairing == RopePairing::split ? rotary_dim : rotary_dim / 2;
  if (l.freq.size() != l.axes * half) {
    throw UsageError(fmt::format("rope layout: {} axes x {} angles (rotary dim {}) need {} "
                                 "frequencies, got {}",
                                 l.axes, half, rotary_dim, l.axes * half, l.freq.size()));
  }
  // An angle no axis drives stays 0: its pair passes through unrotated.
  for (std::size_t k = 0; k < l.freq.size(); ++k) {
    if (!std::isfinite(l.freq[k])) {
      throw UsageError(fmt::format("rope layout: frequency [{}, {}] is not finite", k / half,
                                   k % half));
    }
  }
  if (l.pairing == RopePairing::tiled &&
      (l.chunks == 0 || rotary_dim % (2 * l.chunks) != 0)) {
    throw UsageError(fmt::format("rope layout: tiled pairing needs the rotary dim {} to split "
                                 "into {} chunks of even width",
                                 rotary_dim, l.chunks));
  }
}

RopeLayout rope_layout_plain(const RopeFreqs& f) {
  RopeLayout l;
  l.axes = 1;
  l.freq = f.inv_freq;
  l.name = "plain";
  return l;
}

namespace {

/// Two axes of R/4 pairs each: axis 0 with inv_freq[2j], axis 1 with inv_freq[2j + odd].
RopeLayout two_axes(const RopeFreqs& f, std::size_t odd, const char* name) {
  const std::size_t half = f.inv_freq.size();
  if (f.rotary_dim % 4 != 0) {
    throw UsageError(fmt::format("{}: the rotary dim must be a multiple of 4 (got {})", name,
                                 f.rotary_dim));
  }
  const std::size_t q = half / 2;
  RopeLayout l;
  l.axes = 2;
  l.freq.assign(2 * half, 0.0);
  for (std::size_t j = 0; j < q; ++j) {
    l.freq[j] = f.inv_freq[2 * j];
    l.freq[half + q + j] = f.inv_freq[2 * j + odd];
  }
  l.name = name;
  return l;
}

}  // namespace

RopeLayout rope_layout_axial(const RopeFreqs& f) { return two_axes(f, 0, "axial"); }

RopeLayout rope_layout_even_odd(const RopeFreqs& f) { return two_axes(f, 1, "even-odd"); }

RopeLayout rope_layout_sections(const RopeFreqs& f, const std::vector<int>& sections,
                                bool interleaved) {
  const std::size_t half = f.inv_freq.size();
  const std::vector<int> comp = mrope_components(sections, interleaved, half);
  RopeLayout l;
  l.axes = 3;
  l.freq.assign(3 * half, 0.0);
  for (std::size_t j = 0; j < half; ++j) {
    l.freq[static_cast<std::size_t>(comp[j]) * half + j] = f.inv_freq[j];
  }
  l.name = interleaved ? "interleaved" : "sections";
  return l;
}

RopeLayout rope_layout_ernie_vl(const RopeFreqs& f, const std::vector<int>& sections) {
  const std::size_t half = f.inv_freq.size();
  if (sections.size() != 3) {
    throw UsageError(fmt::format("ernie-vl: expected three sections h,w,t (got {})",
                                 sections.size()));
  }
  std::size_t sum = 0;
  for (int v : sections) {
    if (v < 0) throw UsageError("ernie-vl: sections must be >= 0");
    sum += static_cast<std::size_t>(v);
  }
  if (sections[0] != sections[1]) {
    // recomposition_to_3d stacks the h and w parts pair by pair: they must match.
    throw UsageError(fmt::format("ernie-vl: the h and w sections must be equal (got {} and {})",
                                 sections[0], sections[1]));
  }
  if (sum != half) {
    throw UsageError(fmt::format("ernie-vl: sections must sum to rotary_dim/2 = {} (got {})",
                                 half, sum));
  }
  // compute_default_rope_parameters puts inv_freq[0::2] of the first h + w pairs at
  // 0..h-1 (read with row h) and inv_freq[1::2] at h..h+w-1 (row w); recomposition_to_3d
  // takes them back pair by pair (h0 w0 h1 w1 ...): pair j gets inv_freq[j] again.
  const auto hw = static_cast<std::size_t>(sections[0] + sections[1]);
  RopeLayout l;
  l.axes = 3;
  l.freq.assign(3 * half, 0.0);
  for (std::size_t j = 0; j < half; ++j) {
    const std::size_t axis = j >= hw ? 0 : j % 2 == 0 ? 1 : 2;
    l.freq[axis * half + j] = f.inv_freq[j];
  }
  l.name = "ernie-vl";
  return l;
}

RopeLayout rope_layout_xdrope(const RopeFreqs& f, const std::vector<int>& sections) {
  const std::size_t half = f.inv_freq.size(), R = 2 * half;
  if (sections.size() < 2 || sections.size() > kMaxRopeAxes) {
    throw UsageError(fmt::format("xdrope: expected 2 to {} sections (got {})", kMaxRopeAxes,
                                 sections.size()));
  }
  std::size_t sum = 0;
  for (int v : sections) {
    if (v < 0) throw UsageError("xdrope: sections must be >= 0");
    sum += static_cast<std::size_t>(v);
  }
  if (sum != half) {
    throw UsageError(fmt::format("xdrope: sections must sum to rotary_dim/2 = {} (got {})",
                                 half, sum));
  }
  // apply_rotary_pos_emb_xdrope: cos.split([s * 2 for s in sections]) over the R dims of
  // cat(freqs, freqs), chunk i from channel i.
  RopeLayout l;
  l.axes = sections.size();
  l.freq.assign(l.axes * R, 0.0);
  std::size_t k = 0;
  for (std::size_t a = 0; a < l.axes; ++a) {
    for (int n = 0; n < 2 * sections[a]; ++n, ++k) l.freq[a * R + k] = f.inv_freq[k % half];
  }
  l.pairing = RopePairing::split;
  l.name = "xdrope";
  return l;
}

RopeLayout rope_layout_chunks(const RopeFreqs& f, std::size_t axes) {
  const auto R = static_cast<std::size_t>(f.rotary_dim);
  if (axes == 0 || axes > kMaxRopeAxes || R == 0 || R % (2 * axes) != 0) {
    throw UsageError(fmt::format("chunks: the rotary dim {} must split into {} chunks of "
                                 "even width",
                                 R, axes));
  }
  const std::size_t half = R / 2, ch = half / axes;
  RopeLayout l;
  l.axes = axes;
  l.freq.assign(axes * half, 0.0);
  // 2k / c and 2 axes k / R are the same rational, so inv_freq[axes k] is exactly the
  // frequency k of width c.
  for (std::size_t a = 0; a < axes; ++a) {
    for (std::size_t k = 0; k < ch; ++k) l.freq[a * half + a * ch + k] = f.inv_freq[axes * k];
  }
  l.pairing = RopePairing::tiled;
  l.chunks = axes;
  l.name = "chunks";
  return l;
}

RopeLayout rope_layout_matrix(std::size_t axes, std::vector<double> freq) {
  RopeLayout l;
  l.axes = axes;
  l.freq = std::move(freq);
  l.name = "matrix";
  return l;
}

namespace {

constexpr std::pair<RopeLayoutPreset, const char*> kPresetNames[] = {
    {RopeLayoutPreset::plain, "plain"},       {RopeLayoutPreset::axial, "axial"},
    {RopeLayoutPreset::even_odd, "even-odd"}, {RopeLayoutPreset::sections, "sections"},
    {RopeLayoutPreset::interleaved, "interleaved"}, {RopeLayoutPreset::chunks, "chunks"},
    {RopeLayoutPreset::ernie_vl, "ernie-vl"}, {RopeLayoutPreset::xdrope, "xdrope"},
    {RopeLayoutPreset::matrix, "matrix"}};

}  // namespace

RopeLayoutPreset parse_rope_layout_preset(const std::string& name) {
  for (const auto& [p, n] : kPresetNames) {
    if (name == n) return p;
  }
  throw UsageError(fmt::format("layout: unknown RoPE layout '{}' (plain, axial, even-odd, "
                               "sections, interleaved, chunks, ernie-vl, xdrope, matrix)",
                               name));
}

std::string rope_layout_preset_name(RopeLayoutPreset p) {
  for (const auto& [q, n] : kPresetNames) {
    if (p == q) return n;
  }
  return "plain";
}

RopeLayout resolve_rope_layout(const RopeLayoutSpec& spec, const RopeFreqs& f) {
  RopeLayout l;
  switch (spec.preset) {
    case RopeLayoutPreset::plain: l = rope_layout_plain(f); break;
    case RopeLayoutPreset::axial: l = rope_layout_axial(f); break;
    case RopeLayoutPreset::even_odd: l = rope_layout_even_odd(f); break;
    case RopeLayoutPreset::sections:
    case RopeLayoutPreset::interleaved:
      l = rope_layout_sections(f, spec.sections, spec.preset == RopeLayoutPreset::interleaved);
      break;
    case RopeLayoutPreset::chunks: l = rope_layout_chunks(f, spec.axes); break;
    case RopeLayoutPreset::ernie_vl: l = rope_layout_ernie_vl(f, spec.sections); break;
    case RopeLayoutPreset::xdrope: l = rope_layout_xdrope(f, spec.sections); break;
    case RopeLayoutPreset::matrix: l = rope_layout_matrix(spec.axes, spec.freq); break;
  }
  if (!(spec.scale > 0) || !std::isfinite(spec.scale)) {
    throw UsageError(fmt::format("layout: the frequency scale must be positive and finite "
                                 "(got {})",
                                 spec.scale));
  }
  if (spec.scale != 1.0) {
    for (double& v : l.freq) v *= spec.scale;
  }
  if (spec.tiled) l.pairing = RopePairing::tiled;
  check_rope_layout(l, static_cast<std::size_t>(f.rotary_dim));
  return l;
}

}  // namespace posenc
