// RoPE applied to tensors: the variant is reduced to a cos/sin table per distinct
// position and a kernel chosen once (rope_kernel_*.cpp); see include/posenc/ops/rope.hpp.

#include "posenc/ops/rope.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/core.h>

#include "ops/rope_framework.hpp"
#include "ops/rope_kernel.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/error.hpp"

namespace posenc {

int Axes::index(char c) const {
  const auto p = letters.find(c);
  return p == std::string::npos ? -1 : static_cast<int>(p);
}

Axes resolve_axes(const std::string& user, std::size_t rank, const std::string& what) {
  if (user.empty()) {
    switch (rank) {
      case 2: return Axes{"sd"};
      case 3: return Axes{"bsd"};
      case 4: return Axes{"bhsd"};
      default:
        throw InputError(fmt::format("{}: expected a 2-D, 3-D or 4-D tensor (axes sd, bsd or "
                                     "bhsd), got {}-D",
                                     what, rank));
    }
  }
  std::string seen;
  for (char c : user) {
    if (std::string("bhsd").find(c) == std::string::npos) {
      throw UsageError(fmt::format("axes: unknown axis letter '{}' in '{}' (letters are b, "
                                   "h, s, d)",
                                   c, user));
    }
    if (seen.find(c) != std::string::npos) {
      throw UsageError(fmt::format("axes: letter '{}' appears twice in '{}'", c, user));
    }
    seen += c;
  }
  if (seen.find('s') == std::string::npos || seen.find('d') == std::string::npos) {
    throw UsageError(fmt::format("axes: '{}' must name both s (sequence) and d (head dim)",
                                 user));
  }
  if (user.size() != rank) {
    throw InputError(fmt::format("{}: axes {} names {} axes but the tensor is {}-D", what,
                                 user, user.size(), rank));
  }
  return Axes{user};
}

DType rope_default_out_dtype(DType in) { return is_float(in) ? in : DType::f64; }

namespace {

std::size_t product(const Shape& s, std::size_t from, std::size_t to) {
  std::size_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

/// Copies a tensor of `shape` (C order) to `dst` with axis `d` moved last, or back
/// (`to_last` false: `src` has d last, `dst` the original order). Element size `es`.
void move_d_axis(const std::byte* src, std::byte* dst, const Shape& shape, std::size_t d,
                 std::size_t es, bool to_last) {
  const std::size_t outer = product(shape, 0, d);
  const std::size_t len = shape[d];
  const std::size_t inner = product(shape, d + 1, shape.size());
#pragma omp parallel for schedule(static) if (outer * len * inner >= rope_detail::kParallelElements)
  for (std::ptrdiff_t o = 0; o < static_cast<std::ptrdiff_t>(outer); ++o) {
    for (std::size_t k = 0; k < len; ++k) {
      for (std::size_t i = 0; i < inner; ++i) {
        const std::size_t orig = (static_cast<std::size_t>(o) * len + k) * inner + i;
        const std::size_t last = (static_cast<std::size_t>(o) * inner + i) * len + k;
        if (to_last) {
          std::memcpy(dst + last * es, src + orig * es, es);
        } else {
          std::memcpy(dst + orig * es, src + last * es, es);
        }
      }
    }
  }
}

/// Reorders the elements of each of `nvec` contiguous vectors of `D` elements of size
/// `es`: gather (dst[k] = src[perm[k]]) or scatter (dst[perm[k]] = src[k]).
void permute_vectors(const std::byte* src, std::byte* dst, std::size_t nvec, std::size_t D,
                     std::size_t es, const std::vector<std::size_t>& perm, bool gather) {
#pragma omp parallel for schedule(static) if (nvec * D >= rope_detail::kParallelElements)
  for (std::ptrdiff_t v = 0; v < static_cast<std::ptrdiff_t>(nvec); ++v) {
    const std::size_t base = static_cast<std::size_t>(v) * D;
    for (std::size_t k = 0; k < D; ++k) {
      const std::size_t from = gather ? base + perm[k] : base + k;
      const std::size_t to = gather ? base + k : base + perm[k];
      std::memcpy(dst + to * es, src + from * es, es);
    }
  }
}

}  // namespace

struct RopeApplier::Impl {
  std::string what;
  Shape shape;
  DType in = DType::f32, kin = DType::f32, out = DType::f32;
  std::string letters;
  int id = -1;
  std::size_t B = 1, S = 1, D = 0, R = 0, half = 0;
  // The slab axis (leading axes before it have extent 1) and its letter.
  std::size_t lead = 0;
  char axis0 = 's';
  // Conventions as data: each frequency pair j uses position component pair_comp[j]
  // (0 for plain RoPE; x/y for 2-D; t/h/w for M-RoPE) and frequency pair_freq[j].
  int comps = 1;
  std::vector<int> pair_comp;
  std::vector<double> pair_freq;
  std::size_t tb = 1;  // 1, or B when positions differ per batch row
  // Where positions come from. Only explicit ids are held per token (tokpos, [tb][S]
  // [comps], as large as the ids tensor that exists); the other forms are computed per
  // token, so nothing is sized by the input's extents before its data arrive.
  enum class Source { start, packed, grid, ids } source = Source::start;
  std::int64_t start = 0;
  std::vector<std::int64_t> cu;      // packed boundaries
  std::size_t grid_w = 1;
  bool grid_yx = false;
  std::vector<std::int64_t> tokpos;  // explicit ids, + start

  /// Position component c of the token at (b, s); b counts only when tb > 1.
  std::int64_t token_pos(std::size_t b, std::size_t s, int c) const {
    switch (source) {
      case Source::ids:
        return tokpos[(b * S + s) * static_cast<std::size_t>(comps) + static_cast<std::size_t>(c)];
      case Source::grid: {
        const auto x = static_cast<std::int64_t>(s % grid_w);
        const auto y = static_cast<std::int64_t>(s / grid_w);
        return (c == 0) != grid_yx ? x : y;
      }
      case Source::packed: {
        const auto si = static_cast<std::int64_t>(s);
        const auto k = std::upper_bound(cu.begin(), cu.end(), si) - cu.begin() - 1;
        return start + si - cu[static_cast<std::size_t>(k)];
      }
      case Source::start:
        break;
    }
    return start + static_cast<std::int64_t>(s);
  }
  Precision prec = Precision::f64;
  bool inverse = false, allow_nonfinite = false;
  double af = 1.0;
  rope_detail::KernelFn kernel = nullptr;
  // --arith hf|meta|ggml: the framework's float32 table rows and rotation instead.
  std::shared_ptr<const FrameworkRope> fw;
  std::size_t H = 1;
  // Position components carried by explicit ids: 3 (M-RoPE), 2 (axial ids) or 1.
  int id_comps = 1;
  // The rotated dims are not the first R in the kernel's pair order (rotary_last,
  // rope_interleave): each vector is gathered into [rotated | passed] for the kernel
  // and scattered back.
  bool permute = false;
  std::vector<std::size_t> in_perm, out_perm;

  // The table of the previous slab, reused when the next one needs the same rows.
  bool have_key = false;
  std::int64_t key[5] = {0, 0, 0, 0, 0};
  std::vector<double> table64;
  std::vector<float> table32;
  std::vector<std::int32_t> rowidx;

  std::size_t wsize() const { return prec == Precision::f64 ? 8 : 4; }

  struct Range {
    std::size_t b0, nb, s0, ns;
  };
  Range slab_range(std::size_t first, std::size_t count) const {
    Range r{0, B, 0, S};
    if (axis0 == 'b') r = {first, count, 0, S};
    if (axis0 == 's') r = {0, B, first, count};
    return r;
  }
  std::size_t slab_tokens(std::size_t first, std::size_t count) const {
    const Range r = slab_range(first, count);
    return (tb > 1 ? r.nb : 1) * r.ns;
  }

  void set_positions(const Positions& pos, const RopeApplyOptions& opt);
  void use_framework(const RopeFreqs& f, DType in_dtype, const RopeApplyOptions& opt);
  bool run_framework(const rope_detail::KernelArgs& a, const Range& r, const char* roles) const;
  void set_pairs(const RopeFreqs& f, const RopeApplyOptions& opt);
  void set_permutation(const RopeFreqs& f);
  void build_table(const Range& r);
  template <class W>
  void fill_table(std::vector<W>& t, std::size_t rows, const Range& r, bool dense,
                  std::int64_t pmin);
};

void RopeApplier::Impl::set_positions(const Positions& pos, const RopeApplyOptions& opt) {
  const bool grid = opt.grid_h > 0 || opt.grid_w > 0;
  const bool multi = id_comps > 1;  // ids carry one row per component
  if (pos.start < 0 || pos.start > kMaxPosition) {
    throw UsageError(
        fmt::format("start: must be from 0 to 2^53 = {} (got {})", kMaxPosition, pos.start));
  }
  if (!pos.ids.empty() && !pos.cu_seqlens.empty()) {
    throw UsageError("position_ids and cu_seqlens: give at most one of them");
  }
  start = pos.start;
  if (grid) {
    if (!pos.ids.empty() || !pos.cu_seqlens.empty() || pos.start != 0) {
      throw UsageError("rope2d: positions come from the grid; start, position_ids and "
                       "cu_seqlens do not apply");
    }
    if (opt.grid_h <= 0 || opt.grid_w <= 0) {
      throw UsageError(fmt::format("rope2d: height and width must be positive (got {} {})",
                                   opt.grid_h, opt.grid_w));
    }
    const auto h = static_cast<std::size_t>(opt.grid_h), w = static_cast<std::size_t>(opt.grid_w);
    std::size_t hw = 0;
    if (__builtin_mul_overflow(h, w, &hw) || hw != S) {
      throw InputError(fmt::format("{}: rope2d grid {} x {} does not match the {} tokens along s", what,
                                   opt.grid_h, opt.grid_w, S));
    }
    comps = 2;
    source = Source::grid;
    grid_w = w;
    grid_yx = opt.grid_yx;
    return;
  }
  comps = id_comps;
  if (opt.grid_ids && pos.ids.empty()) {
    throw UsageError("grid_ids: needs position ids of shape [2, s] or [2, b, s]");
  }
  auto checked_add = [&](std::int64_t v, std::size_t at) {
    if (v < 0) {
      throw InputError(fmt::format("{}: negative position {} at flat index {}", pos.ids_what, v,
                                   at));
    }
    if (v > kMaxPosition - pos.start) {
      throw InputError(fmt::format("{}: position {} + start {} is beyond 2^53 = {}",
                                   pos.ids_what, v, pos.start, kMaxPosition));
    }
    return v + pos.start;
  };
  if (!pos.ids.empty()) {
    const Shape& is = pos.ids_shape;
    if (product(is, 0, is.size()) != pos.ids.size()) {
      throw InputError(fmt::format("{}: shape {} does not match its {} values", pos.ids_what,
                                   shape_str(is), pos.ids.size()));
    }
    // Which leading dims mean what: [s], [b, s], and with n components (M-RoPE 3,
    // axial ids 2) [n, s], [n, b, s].
    const auto nc = static_cast<std::size_t>(id_comps);
    std::size_t lead3 = 0, bdim = 1;
    bool ok = false;
    if (is.size() == 1) {
      ok = is[0] == S && !opt.grid_ids;
    } else if (multi && is.size() == 2) {
      lead3 = nc, ok = is[0] == nc && is[1] == S;
    } else if (multi && is.size() == 3) {
      lead3 = nc, bdim = is[1], ok = is[0] == nc && (is[1] == 1 || is[1] == B) && is[2] == S;
    } else if (!multi && is.size() == 2) {
      bdim = is[0], ok = (is[0] == 1 || is[0] == B) && is[1] == S;
    }
    if (!ok) {
      const std::string expected =
          !multi ? "[s] or [b, s]"
                 : fmt::format("{}[{}, s] or [{}, b, s]", opt.grid_ids ? "" : "[s], ", nc, nc);
      throw InputError(fmt::format(
          "{}: shape {} does not match the input {} (expected {}, with b = {} and s = {})",
          pos.ids_what, shape_str(is), shape_str(shape), expected, B, S));
    }
    tb = bdim;
    source = Source::ids;
    tokpos.resize(tb * S * comps);
    for (std::size_t b = 0; b < tb; ++b) {
      for (std::size_t s = 0; s < S; ++s) {
        for (int c = 0; c < comps; ++c) {
          const std::size_t at = lead3 ? (static_cast<std::size_t>(c) * tb + b) * S + s
                                       : b * S + s;
          tokpos[(b * S + s) * comps + c] = checked_add(pos.ids[at], at);
        }
      }
    }
    return;
  }
  // Consecutive positions (restarting per packed sequence): the last one is at most
  // start + S - 1.
  if (S > 0 && S - 1 > static_cast<std::uint64_t>(kMaxPosition - pos.start)) {
    throw InputError(fmt::format("{}: positions --start {} + {} tokens go beyond 2^53 = {}", what,
                                 pos.start, S, kMaxPosition));
  }
  if (!pos.cu_seqlens.empty()) {
    check_cu_seqlens(pos.cu_seqlens, S, pos.cu_what);
    cu = pos.cu_seqlens;
    source = Source::packed;
  }
}

// --arith hf|meta|ggml: float32 table rows from the framework and its own rotation, in
// the framework's storage type (the input's) before the output conversion.
void RopeApplier::Impl::use_framework(const RopeFreqs& f, DType in_dtype,
                                      const RopeApplyOptions& opt) {
  fw = f.framework;
  const std::string mode = "--arith " + arith_name(fw->arith);
  if (opt.grid_h > 0 || opt.grid_w > 0 || opt.grid_ids || !opt.mrope_section.empty() ||
      !f.mrope_section.empty()) {
    throw UsageError(mode + ": 2-D RoPE and M-RoPE sections are computed exactly only");
  }
  if (permute) {
    throw UsageError(mode + ": RoPE on the last dims and rope_interleave are computed "
                            "exactly only");
  }
  const bool ggml = fw->arith == Arith::ggml;
  if (!is_float(in_dtype) || (ggml && in_dtype != DType::f32 && in_dtype != DType::f16)) {
    throw InputError(fmt::format("{}: {} takes {} tensors, not {}", what, mode,
                                 ggml ? "f32 or f16" : "float", dtype_name(in_dtype)));
  }
  if (ggml && !tokpos.empty() &&
      *std::max_element(tokpos.begin(), tokpos.end()) > std::numeric_limits<std::int32_t>::max()) {
    throw InputError(fmt::format("{}: {}: positions above {} do not fit ggml's int32 positions",
                                 what, mode, std::numeric_limits<std::int32_t>::max()));
  }
  prec = Precision::f32;
}

bool RopeApplier::Impl::run_framework(const rope_detail::KernelArgs& a, const Range& r,
                                      const char* roles) const {
  rope_detail::FrameworkKernelArgs fa;
  fa.k = &a;
  fa.f = fw.get();
  fa.in = kin;
  fa.out = out;
  // Meta's complex multiply loops over [b, s, h, R/2] (the first R dims as a contiguous
  // tensor): with one head torch runs one inner loop over all of s.
  const bool whole_s = H == 1;
  fa.meta_row = whole_s ? S * half : half;
  if (whole_s) {
    for (int i = 0; i < 3; ++i) {
      if (roles[i] == 's') fa.meta_s_axis = i;
    }
    fa.meta_s0 = r.s0;
  }
  return rope_detail::run_framework_kernel(fa);
}

void RopeApplier::Impl::set_pairs(const RopeFreqs& f, const RopeApplyOptions& opt) {
  const bool grid = opt.grid_h > 0 || opt.grid_w > 0 || opt.grid_ids;
  const bool own = !opt.mrope_section.empty();
  const std::vector<int>& sections = own ? opt.mrope_section : f.mrope_section;
  const bool interleaved = own ? opt.mrope_interleaved : f.mrope_interleaved;
  if (grid && !sections.empty()) {
    throw UsageError("rope2d and mrope_section: give at most one of them");
  }
  if (opt.grid_ids && (opt.grid_h > 0 || opt.grid_w > 0)) {
    throw UsageError("rope2d: give the grid size or grid_ids, not both");
  }
  pair_comp.assign(half, 0);
  pair_freq = f.inv_freq;
  if (grid) {
    if (R % 4 != 0) {
      throw UsageError(fmt::format("rope2d: the rotary dim must be a multiple of 4 (got {})", R));
    }
    // Two blocks of R/4 pairs share the frequencies of a rotary width R/2, which are
    // the even-indexed ones of the width-R table: base^(-4j/R).
    const std::size_t q = R / 4;
    for (std::size_t j = 0; j < half; ++j) {
      pair_comp[j] = j < q ? 0 : 1;
      pair_freq[j] = f.inv_freq[2 * (j % q)];
    }
    id_comps = opt.grid_ids ? 2 : 1;
    return;
  }
  if (sections.empty()) return;
  pair_comp = mrope_components(sections, interleaved, half);
  id_comps = 3;
}

void RopeApplier::Impl::set_permutation(const RopeFreqs& f) {
  const auto off = static_cast<std::size_t>(f.rotary_offset);
  if (f.rotary_offset < 0 || off + R > D) {
    throw UsageError(
        fmt::format("rotary_offset: rotated dims {}..{} exceed the head dim {}", off, off + R, D));
  }
  permute = off > 0 || f.rope_interleave;
  if (!permute) return;
  // The kernel rotates dims [0, R) and copies [R, D): gather the rotated dims first.
  std::vector<std::size_t> rot(R), deint(R);
  for (std::size_t k = 0; k < R; ++k) {
    rot[k] = off + k;
    // apply_rotary_pos_emb_interleave: (2i, 2i+1) become (i, i + R/2).
    deint[k] = k < half ? off + 2 * k : off + 2 * (k - half) + 1;
  }
  const bool il = f.rope_interleave;
  in_perm = il && !inverse ? deint : rot;
  out_perm = il && inverse ? deint : rot;
  for (std::size_t k = 0; k < D; ++k) {
    if (k < off || k >= off + R) {
      in_perm.push_back(k);
      out_perm.push_back(k);
    }
  }
}

template <class W>
void RopeApplier::Impl::fill_table(std::vector<W>& t, std::size_t rows, const Range& r,
                                   bool dense, std::int64_t pmin) {
  t.resize(rows * R);
  const std::size_t ntb = tb > 1 ? r.nb : 1;
  const std::size_t gb0 = tb > 1 ? r.b0 : 0;
  // The inverse of the scaled rotation a·R(θ) is R(-θ)/a.
  const double cscale = inverse ? 1.0 / af : af;
  const double sscale = inverse ? -1.0 / af : af;
  (void)ntb;
#pragma omp parallel for schedule(static) if (rows * R >= rope_detail::kParallelElements)
  for (std::ptrdiff_t row = 0; row < static_cast<std::ptrdiff_t>(rows); ++row) {
    const auto u = static_cast<std::size_t>(row);
    std::int64_t tp[3] = {0, 0, 0};
    if (!dense) {
      const std::size_t lb = u / r.ns, ls = u % r.ns;
      for (int k = 0; k < comps; ++k) tp[k] = token_pos(gb0 + lb, r.s0 + ls, k);
    }
    W* c = t.data() + u * R;
    W* s = c + half;
    if constexpr (std::is_same_v<W, float>) {
      if (fw) {
        std::vector<float> angle(half);
        framework_rope_row(*fw, dense ? pmin + row : tp[0], inverse, angle.data(), c, s);
        continue;
      }
    }
    for (std::size_t j = 0; j < half; ++j) {
      const std::int64_t p = dense ? pmin + row : tp[pair_comp[j]];
      if constexpr (std::is_same_v<W, double>) {
        const double a = static_cast<double>(p) * pair_freq[j];
        c[j] = std::cos(a) * cscale;
        s[j] = std::sin(a) * sscale;
      } else {
        // Framework arithmetic: f32 frequency, f32 product, f32 cos/sin and scaling.
        const float a = static_cast<float>(p) * static_cast<float>(pair_freq[j]);
        c[j] = std::cos(a) * static_cast<float>(cscale);
        s[j] = std::sin(a) * static_cast<float>(sscale);
      }
    }
  }
}

void RopeApplier::Impl::build_table(const Range& r) {
  const std::size_t ntb = tb > 1 ? r.nb : 1;
  const std::size_t gb0 = tb > 1 ? r.b0 : 0;
  const std::size_t ntok = ntb * r.ns;
  rowidx.resize(ntok);
  bool dense = false;
  std::int64_t pmin = 0, pmax = -1;
  if (comps == 1 && ntok > 0) {
    pmin = std::numeric_limits<std::int64_t>::max();
    pmax = std::numeric_limits<std::int64_t>::min();
    for (std::size_t lb = 0; lb < ntb; ++lb) {
      for (std::size_t ls = 0; ls < r.ns; ++ls) {
        const std::int64_t p = token_pos(gb0 + lb, r.s0 + ls, 0);
        pmin = std::min(pmin, p);
        pmax = std::max(pmax, p);
      }
    }
    // A dense table over [min, max] shares rows between tokens at the same position
    // (heads, repeated ids, packed documents); sparse ids get a row per token instead.
    dense = static_cast<std::uint64_t>(pmax - pmin) < 2 * static_cast<std::uint64_t>(ntok) + 4096;
  }
  const std::size_t rows = dense ? static_cast<std::size_t>(pmax - pmin + 1) : ntok;
  if (rows > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw InputError(fmt::format("{}: too many distinct positions ({}) for one slab", what, rows));
  }
  for (std::size_t lb = 0; lb < ntb; ++lb) {
    for (std::size_t ls = 0; ls < r.ns; ++ls) {
      const std::size_t tok = lb * r.ns + ls;
      rowidx[tok] = static_cast<std::int32_t>(
          dense ? token_pos(gb0 + lb, r.s0 + ls, 0) - pmin : static_cast<std::int64_t>(tok));
    }
  }
  const std::int64_t k[5] = {dense ? 1 : 0,
                             dense ? pmin : static_cast<std::int64_t>(gb0),
                             dense ? pmax : static_cast<std::int64_t>(ntb),
                             dense ? 0 : static_cast<std::int64_t>(r.s0),
                             dense ? 0 : static_cast<std::int64_t>(r.ns)};
  if (have_key && std::equal(k, k + 5, key)) return;
  if (prec == Precision::f64) {
    fill_table(table64, rows, r, dense, pmin);
  } else {
    fill_table(table32, rows, r, dense, pmin);
  }
  std::copy(k, k + 5, key);
  have_key = true;
}

void check_cu_seqlens(const std::vector<std::int64_t>& cu, std::size_t length,
                      const std::string& what) {
  bool ok = cu.size() >= 2 && cu.front() == 0 && cu.back() == static_cast<std::int64_t>(length);
  for (std::size_t i = 1; ok && i < cu.size(); ++i) ok = cu[i] >= cu[i - 1];
  if (!ok) {
    throw InputError(fmt::format("{}: expected non-decreasing boundaries from 0 to the "
                                 "sequence length {} ({} values given)",
                                 what, length, cu.size()));
  }
}

RopeApplier::RopeApplier(const Shape& shape, DType in_dtype, const Axes& axes,
                         const RopeFreqs& f, const Positions& pos, const RopeApplyOptions& opt,
                         DType out_dtype, std::string what, std::size_t slab_axis)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.what = std::move(what);
  m.shape = shape;
  m.in = in_dtype;
  m.kin = is_float(in_dtype) ? in_dtype : DType::f64;
  m.out = out_dtype;
  m.letters = axes.letters;
  if (m.letters.size() != shape.size()) {
    throw InputError(fmt::format("{}: axes '{}' do not match shape {}", m.what, m.letters,
                                 shape_str(shape)));
  }
  if (!is_float(out_dtype)) {
    throw UsageError(fmt::format("dtype: RoPE output must be a float type (f64, f32, f16, "
                                 "bf16), not {}",
                                 dtype_name(out_dtype)));
  }
  m.id = axes.index('d');
  bool unit_lead = slab_axis < std::max<std::size_t>(shape.size(), 1);
  for (std::size_t k = 0; unit_lead && k < slab_axis; ++k) unit_lead = shape[k] == 1;
  if (!unit_lead) {
    throw UsageError(fmt::format("{}: cannot process shape {} in slabs along axis {}", m.what,
                                 shape_str(shape), slab_axis));
  }
  m.lead = slab_axis;
  m.axis0 = m.letters[m.lead];
  auto size_of = [&](char c) {
    const int i = axes.index(c);
    return i < 0 ? std::size_t{1} : shape[static_cast<std::size_t>(i)];
  };
  m.B = size_of('b');
  m.S = size_of('s');
  m.D = size_of('d');
  m.R = static_cast<std::size_t>(f.rotary_dim);
  m.half = m.R / 2;
  if (f.head_dim != static_cast<int>(m.D)) {
    throw InputError(fmt::format("{}: head dim (axis d) of shape {} is {}, but the RoPE "
                                 "frequencies are for head dim {}",
                                 m.what, shape_str(shape), m.D, f.head_dim));
  }
  if (f.rotary_dim <= 0 || f.rotary_dim % 2 != 0 || m.R > m.D ||
      f.inv_freq.size() != m.half) {
    throw UsageError(fmt::format("rotary_dim: must be even and between 2 and the head dim "
                                 "{} (got {})",
                                 m.D, f.rotary_dim));
  }
  m.prec = opt.precision;
  m.inverse = opt.inverse;
  m.allow_nonfinite = opt.allow_nonfinite;
  m.af = f.attention_factor;
  if (!(m.af > 0) || !std::isfinite(m.af)) {
    throw UsageError(fmt::format("attention_factor: must be positive and finite (got {})",
                                 m.af));
  }
  m.set_pairs(f, opt);
  m.set_permutation(f);
  m.set_positions(pos, opt);
  m.H = size_of('h');
  if (f.framework) {
    m.use_framework(f, in_dtype, opt);
    return;
  }
  // rope_interleave rotates the gathered (de-interleaved) pairs in the neox order.
  m.kernel =
      rope_detail::find_kernel(m.kin, m.out, m.prec, f.rope_interleave ? RopeStyle::neox : f.style);
  if (m.kernel == nullptr) {
    throw UsageError(fmt::format("{}: no RoPE kernel for {} -> {}", m.what, dtype_name(m.kin),
                                 dtype_name(m.out)));
  }
}

RopeApplier::~RopeApplier() = default;

std::size_t RopeApplier::rows_total() const { return impl_->shape[impl_->lead]; }

std::size_t RopeApplier::in_row_bytes() const {
  return product(impl_->shape, impl_->lead + 1, impl_->shape.size()) * dtype_size(impl_->in);
}
std::size_t RopeApplier::out_row_bytes() const {
  return product(impl_->shape, impl_->lead + 1, impl_->shape.size()) * dtype_size(impl_->out);
}
std::size_t RopeApplier::min_rows() const {
  return impl_->id == static_cast<int>(impl_->lead) ? impl_->shape[impl_->lead] : 1;
}
std::size_t RopeApplier::table_bytes(std::size_t rows) const {
  const Impl& m = *impl_;
  const std::size_t ntok = m.slab_tokens(0, rows);
  std::size_t extra = 0;
  const std::size_t elems = product(m.shape, m.lead + 1, m.shape.size()) * rows;
  // Working copies: integer inputs are converted to f64; a d axis that is not last is
  // moved last (input and output copies).
  if (m.kin != m.in) extra += elems * 8;
  if (m.id != static_cast<int>(m.shape.size()) - 1) {
    extra += elems * (dtype_size(m.kin) + dtype_size(m.out));
  }
  if (m.permute) extra += elems * (dtype_size(m.kin) + dtype_size(m.out));
  return ntok * (m.R * m.wsize() + sizeof(std::int32_t)) + extra +
         m.tokpos.size() * sizeof(std::int64_t);
}

void RopeApplier::rows(const void* src, void* dst, std::size_t first, std::size_t count) {
  Impl& m = *impl_;
  if (count == 0) return;
  if (first + count > m.shape[m.lead]) {
    throw InputError(fmt::format("{}: rows {}..{} out of range", m.what, first, first + count));
  }
  const Impl::Range r = m.slab_range(first, count);
  m.build_table(r);

  Shape slab = m.shape;
  slab[m.lead] = count;
  const std::size_t elems = product(slab, 0, slab.size());
  const auto* in = static_cast<const std::byte*>(src);
  Tensor converted;
  if (m.kin != m.in) {
    Tensor raw(m.in, slab);
    std::memcpy(raw.bytes(), src, raw.nbytes());
    converted = raw.astype(m.kin);
    in = converted.bytes();
  }
  // The kernel wants d last; other layouts go through a transposed working copy.
  const std::size_t id = static_cast<std::size_t>(m.id);
  const bool d_last = id == slab.size() - 1;
  Buffer moved_in, moved_out;
  auto* out = static_cast<std::byte*>(dst);
  if (!d_last) {
    moved_in = Buffer(elems * dtype_size(m.kin));
    moved_out = Buffer(elems * dtype_size(m.out));
    move_d_axis(in, moved_in.data(), slab, id, dtype_size(m.kin), true);
    in = moved_in.data();
    out = moved_out.data();
  }

  // Rotated dims that are not the first R in pair order go through gathered copies.
  Buffer perm_in, perm_out;
  std::byte* kout = out;
  const std::size_t nvec = m.D == 0 ? 0 : elems / m.D;
  if (m.permute) {
    perm_in = Buffer(elems * dtype_size(m.kin));
    perm_out = Buffer(elems * dtype_size(m.out));
    permute_vectors(in, perm_in.data(), nvec, m.D, dtype_size(m.kin), m.in_perm, true);
    in = perm_in.data();
    kout = perm_out.data();
  }

  rope_detail::KernelArgs a;
  a.src = in;
  a.dst = kout;
  a.head_dim = m.D;
  a.rotary_dim = m.R;
  a.rowidx = m.rowidx.data();
  a.table = m.prec == Precision::f64 ? static_cast<const void*>(m.table64.data())
                                     : static_cast<const void*>(m.table32.data());
  // Loop axes: the non-d axes in memory order, right-aligned into three slots.
  std::size_t n[3] = {1, 1, 1};
  std::ptrdiff_t st[3] = {0, 0, 0}, tk[3] = {0, 0, 0};
  char role[3] = {'-', '-', '-'};
  {
    std::vector<std::size_t> loop;
    for (std::size_t i = 0; i < slab.size(); ++i) {
      if (i != id) loop.push_back(i);
    }
    const std::size_t ntb = m.tb > 1 ? r.nb : 1;
    std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(m.D);
    for (std::size_t k = loop.size(); k-- > 0;) {
      const std::size_t slot = 3 - (loop.size() - k);
      const char c = m.letters[loop[k]];
      n[slot] = slab[loop[k]];
      st[slot] = stride;
      stride *= static_cast<std::ptrdiff_t>(slab[loop[k]]);
      role[slot] = c;
      tk[slot] = c == 's' ? 1 : (c == 'b' && ntb > 1 ? static_cast<std::ptrdiff_t>(r.ns) : 0);
    }
  }
  a.n0 = n[0], a.n1 = n[1], a.n2 = n[2];
  a.st0 = st[0], a.st1 = st[1], a.st2 = st[2];
  a.t0 = tk[0], a.t1 = tk[1], a.t2 = tk[2];
  a.block2 = a.n2;
  if (role[2] == 's') {
    // About 256 KiB of table rows per work item: they stay in L2 while every head
    // of the block is rotated.
    const std::size_t row_bytes = m.R * m.wsize();
    a.block2 = std::clamp<std::size_t>((std::size_t{256} << 10) / std::max<std::size_t>(row_bytes, 1),
                                       16, std::max<std::size_t>(a.n2, 1));
  }
  // Past the size of a large last-level cache the output is written around the cache.
  a.stream = !m.permute && elems * dtype_size(m.out) >= (std::size_t{32} << 20);
  const bool bad = m.fw ? m.run_framework(a, r, role) : m.kernel(a);
  if (m.permute) permute_vectors(kout, out, nvec, m.D, dtype_size(m.out), m.out_perm, false);
  if (bad && !m.allow_nonfinite) {
    throw InputError(fmt::format("{}: input contains NaN or Inf (use allow_nonfinite to "
                                 "rotate it anyway)",
                                 m.what));
  }
  if (!d_last) move_d_axis(out, static_cast<std::byte*>(dst), slab, id, dtype_size(m.out), false);
}

Tensor apply_rope(const Tensor& x, const Axes& axes, const RopeFreqs& f, const Positions& pos,
                  const RopeApplyOptions& opt, DType out_dtype) {
  RopeApplier ap(x.shape(), x.dtype(), axes, f, pos, opt, out_dtype, "input");
  Tensor y(out_dtype, x.shape());
  ap.rows(x.bytes(), y.bytes(), 0, x.shape().empty() ? 1 : x.shape()[0]);
  return y;
}

namespace {

// The sequence length dynamic NTK and LongRoPE need when seq_len is not given: the
// largest position used, plus one.
std::int64_t positions_extent(const Positions& pos, std::size_t seq, const RopeApplyOptions& a) {
  if (a.grid_h > 0) return std::max(a.grid_h, a.grid_w);
  if (!pos.ids.empty()) {
    return pos.start + *std::max_element(pos.ids.begin(), pos.ids.end()) + 1;
  }
  if (!pos.cu_seqlens.empty()) {
    std::int64_t longest = 0;
    for (std::size_t i = 1; i < pos.cu_seqlens.size(); ++i) {
      longest = std::max(longest, pos.cu_seqlens[i] - pos.cu_seqlens[i - 1]);
    }
    return pos.start + std::max<std::int64_t>(longest, 1);
  }
  return pos.start + static_cast<std::int64_t>(std::max<std::size_t>(seq, 1));
}

}  // namespace

RopeFreqs rope_freqs_for(const Shape& shape, const Axes& axes,
                         const std::function<RopeParams(int head_dim)>& params,
                         const Positions& pos, const RopeApplyOptions& apply,
                         const std::string& what) {
  const std::size_t head_dim = shape[static_cast<std::size_t>(axes.index('d'))];
  const std::size_t seq = shape[static_cast<std::size_t>(axes.index('s'))];
  if (head_dim > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw InputError(fmt::format("{}: head dimension {} is too large", what, head_dim));
  }
  RopeParams p = params(static_cast<int>(head_dim));
  if (p.rotary_dim == 0 && p.partial == 1.0 && head_dim % 2 != 0) {
    // Nothing asked for an odd width: the input's shape is the problem, not an option.
    throw InputError(fmt::format(
        "{}: head dim (axis d) of shape {} is {}, which is odd: RoPE rotates pairs of dims; "
        "rotate the first {} with rotary_dim or a partial rotary factor, or check the axes "
        "({})",
        what, shape_str(shape), head_dim, head_dim - 1, axes.letters));
  }
  if (p.seq_len == 0) p.seq_len = positions_extent(pos, seq, apply);
  return compute_rope_freqs(p);
}

}  // namespace posenc
