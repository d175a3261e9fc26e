#pragma once
/// \file
/// A RoPE variant as data: which coordinate of a token drives which angle with which
/// frequency (the frequency assignment), and which dims pair up with which angle (the
/// pairing). The rotation (posenc/ops/rope.hpp) executes any such value; the named
/// layouts below are presets of it, one per convention of the model zoo:
///
///     angle j of a token = sum over axes a of coord[a] * freq[a][j],   j < R/2
///
/// Coordinates come from Positions (integer ids, real coordinates, or a generated grid).
/// A column of `freq` with one non-zero entry is computed as that one product, so the
/// presets give the same bits as the branch-per-variant code they replace.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace posenc {

struct RopeFreqs;

/// Which rotated dims pair up and which angle each dim uses.
enum class RopePairing {
  /// The RopeFreqs' style: neox pairs (j, j + R/2), gptj pairs (2j, 2j + 1); both dims
  /// of pair j use angle j.
  style,
  /// V-JEPA2 (`rotate_queries_or_keys`): the rotary dims split into `chunks` equal
  /// chunks of width c; within a chunk, adjacent dims (2i, 2i + 1) pair up, and dim l of
  /// the chunk uses the chunk's angle l mod (c/2) (a table tiled twice), so the two dims
  /// of a pair use different angles: y[2i] = x[2i] cos θ_(2i mod c/2) - x[2i+1] sin θ_(2i mod c/2),
  /// y[2i+1] = x[2i+1] cos θ_((2i+1) mod c/2) + x[2i] sin θ_((2i+1) mod c/2).
  tiled,
  /// HunYuan-VL (xdrope): the style's pairs, but each rotated dim k < R has its own angle
  /// θ_k (R angles per token, `freq` [axes, R]); neox: y[k] = x[k] cos θ_k -
  /// x[k + R/2] sin θ_k and y[k + R/2] = x[k + R/2] cos θ_(k+R/2) + x[k] sin θ_(k+R/2)
  /// for k < R/2. Not a rotation unless both angles of a pair agree.
  split
};

/// "style", "tiled" or "split".
std::string rope_pairing_name(RopePairing p);

/// The frequency assignment and the pairing of a RoPE variant. An empty layout (axes 0)
/// means plain RoPE: one coordinate, the RopeFreqs' own frequencies, its style.
struct RopeLayout {
  std::size_t axes = 0;         ///< coordinates per token (1 to kMaxRopeAxes); 0 = plain
  /// [axes, R/2] row-major, freq[a * R/2 + j]; [axes, R] for the split pairing
  std::vector<double> freq;
  RopePairing pairing = RopePairing::style;  ///< see RopePairing
  std::size_t chunks = 1;       ///< tiled: equal chunks of the rotary width

  /// The angles per token: R/2, R for the split pairing (0 for a plain layout).
  std::size_t angles() const { return axes == 0 ? 0 : freq.size() / axes; }
};

/// 2 pi as Python's 2 * math.pi (the double nearest pi, doubled exactly): DINOv3's
/// frequency scale (RopeLayoutSpec::scale).
inline constexpr double kRopeTwoPi = 2.0 * 3.14159265358979323846;

/// Largest number of coordinate axes a layout may have.
inline constexpr std::size_t kMaxRopeAxes = 8;

/// Generated coordinates: the tokens along s are `prefix` tokens at coordinate 0 (class
/// and register tokens, left unrotated) followed by a grid of extents `extent` (e.g.
/// {H, W} or {T, H, W}) in row-major order, or in `merge` x `merge` windows over the last
/// two axes (Qwen2-VL's vision patch order). Token coordinates are the grid indices, one
/// axis each, or with `centres` the patch centres (i + 0.5) / n * 2 - 1 in [-1, 1]
/// (DINOv3's `get_patches_center_coordinates`).
struct CoordGrid {
  std::vector<std::int64_t> extent;  ///< grid extents, outer to inner; empty = no grid
  bool centres = false;              ///< normalised patch centres instead of indices
  std::int64_t prefix = 0;           ///< tokens before the grid, at coordinate 0
  std::int64_t merge = 1;            ///< spatial-merge window side over the last two axes
};

/// Parses `grid:E1,E2,...` (grid indices in row-major order) or `centres:E1,E2,...`
/// (DINOv3's normalised patch centres): 1 to kMaxRopeAxes extents, each from 1 to 2^31
/// (prefix and merge stay 0 and 1). Throws UsageError naming `what` otherwise.
CoordGrid parse_coord_grid(const std::string& text, const std::string& what = "coords");

/// Throws UsageError unless `l` is consistent for a rotary width `rotary_dim`: axes in
/// 1..kMaxRopeAxes, freq of axes * R/2 (split: axes * R) finite values, and for tiled
/// pairing R divisible by 2 * chunks.
void check_rope_layout(const RopeLayout& l, std::size_t rotary_dim);

/// Plain RoPE as a layout: one axis with the frequencies of `f`.
RopeLayout rope_layout_plain(const RopeFreqs& f);

/// Axial 2-D RoPE (RoPE-ViT, `table rope2d`, Qwen2-VL's vision tower): pairs j < R/4
/// take axis 0 and frequency inv_freq[2j], the next R/4 take axis 1 with the same
/// frequencies (the even-indexed frequencies of width R, i.e. those of width R/2).
RopeLayout rope_layout_axial(const RopeFreqs& f);

/// Pixtral (`PixtralRotaryEmbedding`): pairs j < R/4 take axis 0 (height) and the
/// even-indexed frequency inv_freq[2j], the next R/4 take axis 1 (width) and the
/// odd-indexed inv_freq[2j + 1].
RopeLayout rope_layout_even_odd(const RopeFreqs& f);

/// M-RoPE: pair j takes the axis mrope_components gives (contiguous sections, or
/// Qwen3-VL's interleave) and its own frequency inv_freq[j]. Three sections, t h w.
RopeLayout rope_layout_sections(const RopeFreqs& f, const std::vector<int>& sections,
                                bool interleaved);

/// ERNIE-4.5-VL (`Ernie4_5_VL_MoeTextRotaryEmbedding`): `sections` are the config's
/// mrope_section (h, w, t) in frequency pairs, h == w, summing to R/2. Its
/// compute_default_rope_parameters pre-permutes inv_freq and recomposition_to_3d
/// interleaves h and w pair by pair, then appends t; followed through, pair j keeps its
/// own frequency inv_freq[j] and takes axis 1 (h) for even j < h + w, axis 2 (w) for odd
/// j < h + w, and axis 0 (t) from h + w on (axes t, h, w as the position ids' rows). ERNIE
/// pairs (2j, 2j + 1) (rotate_half_text): use it with the gptj style.
RopeLayout rope_layout_ernie_vl(const RopeFreqs& f, const std::vector<int>& sections);

/// HunYuan-VL's xdrope (`apply_rotary_pos_emb_xdrope`): one section per coordinate axis
/// (2 to kMaxRopeAxes of them, in half-head sizes summing to R/2); the rotated dims in
/// the neox order (cos = cat(freqs, freqs)) split into consecutive chunks of 2 * s_i
/// dims, chunk i on axis i, dim k with frequency inv_freq[k mod R/2]; split pairing.
/// HunYuan's 4 axes are (position, width, height, image index), 3 (width, height, image
/// index).
RopeLayout rope_layout_xdrope(const RopeFreqs& f, const std::vector<int>& sections);

/// V-JEPA2: `axes` chunks of width c = R / axes (even), chunk a on axis a with the
/// frequencies of width c (1 / base^(2k / c) = inv_freq[axes * k], k < c/2), tiled
/// pairing. Throws UsageError unless R splits so.
RopeLayout rope_layout_chunks(const RopeFreqs& f, std::size_t axes);

/// The rotary width V-JEPA2 gives `axes` chunks of a head of `head_dim`: axes chunks of
/// 2 * ((head_dim / axes) / 2) dims (the rest passes through). 0 for axes 0.
int rope_chunks_width(int head_dim, std::size_t axes);

/// Any assignment: `freq` [axes, R/2] row-major (from a file); each angle is the sum of
/// coordinate times frequency over the axes (LightGlue's learned projection is one).
RopeLayout rope_layout_matrix(std::size_t axes, std::vector<double> freq);

/// The named layouts (RopeLayoutSpec::preset).
enum class RopeLayoutPreset {
  plain,        ///< rope_layout_plain
  axial,        ///< rope_layout_axial
  even_odd,     ///< rope_layout_even_odd (Pixtral)
  sections,     ///< rope_layout_sections, contiguous (Qwen2-VL)
  interleaved,  ///< rope_layout_sections, interleaved (Qwen3-VL)
  chunks,       ///< rope_layout_chunks (V-JEPA2)
  ernie_vl,     ///< rope_layout_ernie_vl (ERNIE-4.5-VL)
  xdrope,       ///< rope_layout_xdrope (HunYuan-VL)
  matrix        ///< rope_layout_matrix (from a file)
};

/// A layout as asked for, before the head dimension is known: the preset and its
/// arguments. resolve_rope_layout turns it into a RopeLayout for one RopeFreqs.
struct RopeLayoutSpec {
  RopeLayoutPreset preset = RopeLayoutPreset::plain;  ///< which layout
  /// sections, interleaved: pairs per t, h, w; ernie_vl: pairs per h, w, t (its config's
  /// mrope_section order); xdrope: half-head sizes, one per axis
  std::vector<int> sections;
  std::size_t axes = 0;       ///< chunks: the number of chunks; matrix: rows of `freq`
  std::vector<double> freq;   ///< matrix: [axes, R/2] row-major
  double scale = 1.0;         ///< multiplies every frequency (DINOv3's 2*pi)
  bool tiled = false;         ///< tiled pairing (always with chunks)

  /// True when the spec asks for anything beyond plain RoPE.
  bool custom() const { return preset != RopeLayoutPreset::plain || scale != 1.0 || tiled; }
};

/// Parses a preset name: plain, axial, even-odd, sections, interleaved, chunks, ernie-vl,
/// xdrope, matrix. Throws UsageError for others.
RopeLayoutPreset parse_rope_layout_preset(const std::string& name);
/// The name parse_rope_layout_preset reads.
std::string rope_layout_preset_name(RopeLayoutPreset p);

/// Parses `NAME[:ARGS]`: plain, axial, even-odd, sections:T,H,W, interleaved:T,H,W,
/// ernie-vl:H,W,T, xdrope:S1,...,Sn (n in 2..kMaxRopeAxes), chunks[:N] (N in
/// 1..kMaxRopeAxes, default 3); counts from 0 to 2^20. Throws UsageError naming `what`
/// otherwise (a matrix layout has no text form: its frequencies come as a tensor).
RopeLayoutSpec parse_rope_layout(const std::string& text, const std::string& what = "layout");

/// The layout `spec` asks for, with the frequencies of `f`; checked by check_rope_layout.
RopeLayout resolve_rope_layout(const RopeLayoutSpec& spec, const RopeFreqs& f);

}  // namespace posenc
