// RoPE applied to tensors: the variant is reduced to a cos/sin table per distinct
// position and a kernel chosen once (rope_kernel_*.cpp); see include/posenc/ops/rope.hpp.

#include "posenc/ops/rope.hpp"

#include <fmt/core.h>
#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <utility>

#include "ops/huge_pages.hpp"
#include "ops/rope_framework.hpp"
#include "ops/rope_kernel.hpp"
#include "ops/transpose.hpp"
#include "posenc/encodings/arith.hpp"
#include "posenc/encodings/rope_fields.hpp"
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

DType rope_default_out_dtype(DType in) {
  if (is_fp8(in)) return DType::bf16;  // as FlashAttention-3's fp8 attention outputs
  return is_float(in) ? in : DType::f64;
}

namespace {

std::size_t product(const Shape& s, std::size_t from, std::size_t to) {
  std::size_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

/// Copies a tensor of `shape` (C order) to `dst` with axis `d` moved last, or back
/// (`to_last` false: `src` has d last, `dst` the original order). Element size `es`.
/// Register blocks unless the base kernel variant runs (POSENC_ROPE_ISA=base): 256 MiB
/// bhds f32 moved both ways in 0.2 s of CPU one element at a time.
void move_d_axis(const std::byte* src, std::byte* dst, const Shape& shape, std::size_t d,
                 std::size_t es, bool to_last) {
  const std::size_t outer = product(shape, 0, d);
  const std::size_t len = shape[d];
  const std::size_t inner = product(shape, d + 1, shape.size());
  const bool simd = std::strcmp(rope_detail::kernel_isa(), "base") != 0;
  if (to_last) {
    detail::transpose_matrices(src, dst, outer, len, inner, es, simd);
  } else {
    detail::transpose_matrices(src, dst, outer, inner, len, es, simd);
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

template <class U>
void canonical_nans_as(std::byte* p, std::size_t n, U abs_mask, U inf, U quiet) {
  for (std::size_t i = 0; i < n; ++i) {
    U u;
    std::memcpy(&u, p + i * sizeof(U), sizeof(U));
    if ((u & abs_mask) > inf) std::memcpy(p + i * sizeof(U), &quiet, sizeof(U));
  }
}

/// Every NaN among n elements of type t becomes the type's positive quiet NaN. IEEE 754
/// leaves the sign and payload of a NaN result to the hardware, and the kernel variants
/// (base, AVX2, AVX-512, the split path) reach a NaN through different instructions:
/// without this, rotating NaN inputs gave other bytes on another machine.
void canonical_nans(std::byte* p, std::size_t n, DType t) {
  switch (t) {
    case DType::f64:
      canonical_nans_as<std::uint64_t>(p, n, 0x7fffffffffffffffull, 0x7ff0000000000000ull,
                                       0x7ff8000000000000ull);
      break;
    case DType::f32:
      canonical_nans_as<std::uint32_t>(p, n, 0x7fffffffu, 0x7f800000u, 0x7fc00000u);
      break;
    case DType::f16:
      canonical_nans_as<std::uint16_t>(p, n, 0x7fff, 0x7c00, 0x7e00);
      break;
    case DType::bf16:
      canonical_nans_as<std::uint16_t>(p, n, 0x7fff, 0x7f80, 0x7fc0);
      break;
    default:
      break;
  }
}

/// Whether n elements of type t hold a NaN, or (unless nan_only) an infinity.
template <class U>
bool has_nonfinite_as(const std::byte* p, std::size_t n, U abs_mask, U inf, bool nan_only) {
  const U above = nan_only ? inf : static_cast<U>(inf - 1);
  unsigned found = 0;
  for (std::size_t i = 0; i < n; ++i) {
    U u;
    std::memcpy(&u, p + i * sizeof(U), sizeof(U));
    found |= static_cast<unsigned>((u & abs_mask) > above);
  }
  return found != 0;
}

bool has_nonfinite(const std::byte* p, std::size_t n, DType t, bool nan_only) {
  switch (t) {
    case DType::f64:
      return has_nonfinite_as<std::uint64_t>(p, n, 0x7fffffffffffffffull,
                                             0x7ff0000000000000ull, nan_only);
    case DType::f32:
      return has_nonfinite_as<std::uint32_t>(p, n, 0x7fffffffu, 0x7f800000u, nan_only);
    case DType::f16:
      return has_nonfinite_as<std::uint16_t>(p, n, 0x7fff, 0x7c00, nan_only);
    case DType::bf16:
      return has_nonfinite_as<std::uint16_t>(p, n, 0x7fff, 0x7f80, nan_only);
    default:
      return false;
  }
}

// A dense cos/sin table of every position of a tensor, shared between calls (see
// RopeApplier::Impl::build_table): `key` holds, as bits, everything its rows depend on.
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <class W>
using TableMemory = std::unique_ptr<W[], FreeDeleter>;

// n values of fresh memory, in 2 MiB pages where the kernel gives them on request
// (advise_huge_pages).
template <class W>
TableMemory<W> table_memory(std::size_t n) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes = std::max<std::size_t>(n * sizeof(W), 1);
  const std::size_t align = bytes >= kHuge ? kHuge : alignof(std::max_align_t);
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  if (align == kHuge) detail::advise_huge_pages(p, (bytes + align - 1) / align * align);
  return TableMemory<W>(static_cast<W*>(p));
}

struct SharedTable {
  std::vector<std::uint64_t> key;
  TableMemory<double> t64;
  TableMemory<float> t32, split;
  bool split_ok = false;
  std::size_t bytes = 0;
};

// The tables of the last few position sets rotated in whole tensors, most recent first:
// a model applies RoPE to q and k of each layer at the same positions, and every call
// would otherwise compute the same cos and sin again (65,536 positions of 64 pairs: 8.4
// million of them, about ten times the rotation of 256 MiB itself). At most
// kSharedEntries tables of kSharedBytes together are kept.
constexpr std::size_t kSharedEntries = 2;
constexpr std::size_t kSharedBytes = std::size_t{256} << 20;

struct SharedTables {
  std::mutex m;
  std::list<std::shared_ptr<const SharedTable>> l;
};
SharedTables* g_shared = nullptr;  // never destroyed: tables may be in use at exit

// A child of fork has only the forking thread: another thread of the parent may have
// held the mutex (or been mid-splice), so the child starts from an empty cache and
// leaves the parent's copy alone.
extern "C" void fresh_shared_tables_in_child() { g_shared = new SharedTables; }

SharedTables& shared_tables() {
  static const bool once = [] {
    g_shared = new SharedTables;
    ::pthread_atfork(nullptr, nullptr, fresh_shared_tables_in_child);
    return true;
  }();
  (void)once;
  return *g_shared;
}

std::shared_ptr<const SharedTable> find_shared(const std::vector<std::uint64_t>& key) {
  SharedTables& st = shared_tables();
  std::lock_guard<std::mutex> lock(st.m);
  auto& l = st.l;
  for (auto it = l.begin(); it != l.end(); ++it) {
    if ((*it)->key == key) {
      l.splice(l.begin(), l, it);
      return l.front();
    }
  }
  return nullptr;
}

void keep_shared(std::shared_ptr<const SharedTable> t) {
  SharedTables& st = shared_tables();
  std::lock_guard<std::mutex> lock(st.m);
  auto& l = st.l;
  l.push_front(std::move(t));
  std::size_t bytes = 0;
  auto it = l.begin();
  for (std::size_t n = 0; it != l.end(); ++it, ++n) {
    if (n == kSharedEntries || bytes + (*it)->bytes > kSharedBytes) break;
    bytes += (*it)->bytes;
  }
  l.erase(it, l.end());
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
  // Conventions as data (RopeLayout): angle j of a token is the sum over its terms
  // term_start[j] <= t < term_start[j + 1] of coordinate term_axis[t] times term_freq[t]
  // (one term for every preset, so those compute the one product p * f).
  int comps = 1;
  std::vector<std::size_t> term_start, term_axis;
  std::vector<double> term_freq;
  RopePairing pairing = RopePairing::style;
  // Angles per token: R/2, or R for the split pairing (one per rotated dim). A table row
  // holds nang cos then nang sin.
  std::size_t nang = 0;
  // Pairings other than style (tiled, split), executed element by element: rotated dim k
  // takes angle dim_angle[k] and partner dim dim_partner[k], and is x cos - partner sin
  // where dim_first[k], else x cos + partner sin.
  std::vector<std::size_t> dim_angle, dim_partner;
  std::vector<char> dim_first;
  std::size_t tb = 1;  // 1, or B when positions differ per batch row
  // Where coordinates come from. Only explicit ids, coordinates and angles are held per
  // token (tokpos [tb][S][comps], tokang [tb][S][R/2], as large as the tensors that
  // exist); the other forms are computed per token, so nothing is sized by the input's
  // extents before its data arrive.
  enum class Source { start, packed, grid, ids, angles } source = Source::start;
  bool integral = true;  // every coordinate is an integer (dense tables possible)
  std::int64_t start = 0;
  std::vector<std::int64_t> cu;  // packed boundaries
  CoordGrid grid;                // generated coordinates
  bool grid_reverse = false;     // coordinate c is grid axis n-1-c (rope2d's x, y order)
  std::vector<double> tokpos;    // explicit ids (+ start) or coordinates
  std::vector<double> tokang;    // explicit angles
  bool text_default = false;     // M-RoPE: without ids every axis takes the position
  // The caller's cos/sin tables (Positions::table_cos): row p holds cos then sin of the
  // nang angles of position p, in float64 (exact for every float type they came in);
  // gmax is their largest magnitude.
  bool caller_table = false;
  bool torch_ops = false;
  DType opdt = DType::f64;  // the type torch's operations round to (torch_ops)
  std::vector<double> gtab;
  std::size_t grows = 0;
  double gmax = 0;

  /// The coordinates of the token at (b, s) into out[0..comps); b counts only when tb > 1.
  void token_coords(std::size_t b, std::size_t s, double* out) const {
    switch (source) {
      case Source::ids: {
        const double* p = tokpos.data() + (b * S + s) * static_cast<std::size_t>(comps);
        std::copy(p, p + comps, out);
        return;
      }
      case Source::grid:
        grid_coords(s, out);
        return;
      case Source::packed: {
        const auto si = static_cast<std::int64_t>(s);
        const auto k = std::upper_bound(cu.begin(), cu.end(), si) - cu.begin() - 1;
        // M-RoPE's text default: every axis at the token's position.
        std::fill(out, out + comps,
                  static_cast<double>(start + si - cu[static_cast<std::size_t>(k)]));
        return;
      }
      case Source::start:
      case Source::angles:
        break;
    }
    std::fill(out, out + comps, static_cast<double>(start + static_cast<std::int64_t>(s)));
  }
  /// CoordGrid's coordinates of token s.
  void grid_coords(std::size_t s, double* out) const {
    const std::size_t n = grid.extent.size();
    const auto prefix = static_cast<std::size_t>(grid.prefix);
    if (s < prefix) {
      std::fill(out, out + n, 0.0);
      return;
    }
    std::size_t idx = s - prefix;
    std::size_t at[kMaxRopeAxes] = {};
    const auto m = static_cast<std::size_t>(grid.merge);
    std::size_t inner = n;  // axes below this one are peeled off row-major
    if (m > 1) {
      // Qwen2-VL's vision order over (H, W): windows (hb, wb), then (mh, mw) inside.
      const auto h = static_cast<std::size_t>(grid.extent[n - 2]);
      const auto w = static_cast<std::size_t>(grid.extent[n - 1]);
      const std::size_t mw = idx % m, mh = (idx / m) % m;
      idx /= m * m;
      const std::size_t wb = idx % (w / m);
      idx /= w / m;
      const std::size_t hb = idx % (h / m);
      idx /= h / m;
      at[n - 2] = hb * m + mh;
      at[n - 1] = wb * m + mw;
      inner = n - 2;
    }
    for (std::size_t k = inner; k-- > 0;) {
      const auto e = static_cast<std::size_t>(grid.extent[k]);
      at[k] = idx % e;
      idx /= e;
    }
    for (std::size_t c = 0; c < n; ++c) {
      const std::size_t k = grid_reverse ? n - 1 - c : c;
      const auto i = static_cast<double>(at[k]);
      out[c] = grid.centres ? (i + 0.5) / static_cast<double>(grid.extent[k]) * 2.0 - 1.0 : i;
    }
  }
  Precision prec = Precision::f64;
  bool inverse = false, allow_nonfinite = false;
  double af = 1.0;
  rope_detail::KernelFn kernel = nullptr;
  // --arith hf|meta|ggml: the framework's float32 table rows and rotation instead.
  std::shared_ptr<const FrameworkRope> fw;
  // --arith hf with a layout of several axes: the HF model's rows for it (fw_layout).
  RopeLayoutSpec lspec;
  bool fw_layout = false;
  rope_detail::FrameworkLayout fl;
  std::size_t H = 1;
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
  // f16 / bf16 with float64 arithmetic on AVX-512: table64 split into float32 pairs for
  // the kernel's float32 path (rope_kernel.hpp); split_ok is false when a value is out
  // of the range it accepts, and the kernel then runs in float64.
  bool want_split = false, split_ok = false;
  RopeStyle kstyle = RopeStyle::neox;
  std::vector<float> split;
  std::vector<std::int32_t> rowidx;
  // Working copies with d moved last (rotate), reused by the next slab.
  Buffer moved_in, moved_out;
  // The table when it is shared between calls (build_table); the vectors above hold it
  // otherwise.
  std::shared_ptr<const SharedTable> shared;
  const void* table_data() const {
    if (shared) {
      return prec == Precision::f64 ? static_cast<const void*>(shared->t64.get())
                                    : static_cast<const void*>(shared->t32.get());
    }
    return prec == Precision::f64 ? static_cast<const void*>(table64.data())
                                  : static_cast<const void*>(table32.data());
  }
  const float* split_data() const {
    if (!want_split) return nullptr;
    if (shared) return shared->split_ok ? shared->split.get() : nullptr;
    return split_ok ? split.data() : nullptr;
  }
  // Whether the rows of a dense table are cos and sin of the frequencies (term_freq)
  // times the position alone, so that the same parameters and positions give the same
  // table: a source of rows other than these must return false here.
  bool table_shareable() const { return !fw && comps == 1 && !caller_table; }

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
  void set_grid(const CoordGrid& g, const Positions& pos, const char* name);
  void set_angles(const Positions& pos);
  void set_offsets(const Positions& pos);
  void set_table(const Positions& pos, const RopeFreqs& f);
  std::int64_t largest_position() const;
  // Non-finite results of finite inputs (rope_ranges below): what the parameters decide
  // is refused up front; a rotation that may overflow only for some values has its
  // output checked (check_out) where the kernel reports non-finite inputs.
  bool check_out = false, out_nan_only = false;
  double scale_eff = 1.0;  // what the rotation multiplies by (af, or 1/af inverse)
  double max_coordinate() const;
  template <class W>
  void check_angles(const RopeFreqs& f, const RopeApplyOptions& opt) const;
  void check_ranges(const RopeFreqs& f, const RopeApplyOptions& opt);
  void refuse_overflow() const;
  void use_framework(const RopeFreqs& f, DType in_dtype);
  bool run_framework(const rope_detail::KernelArgs& a, const Range& r, const char* roles) const;
  void set_layout(const RopeFreqs& f, const RopeApplyOptions& opt);
  bool rotate_per_dim(const rope_detail::KernelArgs& a) const;
  bool rotate_torch_ops(const rope_detail::KernelArgs& a) const;
  template <class W>
  bool rotate_per_dim_in(const rope_detail::KernelArgs& a) const;
  template <class F>
  bool per_vector(const rope_detail::KernelArgs& a, F&& op) const;
  void set_permutation(const RopeFreqs& f);
  void build_table(const Range& r, bool whole);
  template <class W>
  void fill_table(W* t, std::size_t rows, const Range& r, bool dense,
                  std::int64_t pmin);
};

void RopeApplier::Impl::set_positions(const Positions& pos, const RopeApplyOptions& opt) {
  const bool rope2d = opt.grid_h > 0 || opt.grid_w > 0;
  validate(pos);
  validate(pos.grid);
  const int forms = !pos.ids.empty() + !pos.coords.empty() + !pos.cu_seqlens.empty() +
                    !pos.grid.extent.empty() + !pos.angles.empty() + rope2d;
  if (forms > 1) {
    throw UsageError("positions: give at most one of position_ids, coordinates, cu_seqlens, "
                     "a coordinate grid, angles and rope2d");
  }
  start = pos.start;
  const bool offsets = !pos.seqlen_offsets.empty();
  if (offsets && (rope2d || !pos.grid.extent.empty() || !pos.angles.empty() ||
                  !pos.ids.empty() || !pos.coords.empty() || comps > 1)) {
    throw UsageError(pos.offsets_what +
                     ": shifts consecutive or packed positions; not with position ids, "
                     "coordinates, a grid, angles or a RoPE layout of several axes");
  }
  if (rope2d) {
    if (opt.grid_h <= 0 || opt.grid_w <= 0) {
      throw UsageError(fmt::format("rope2d: height and width must be positive (got {} {})",
                                   opt.grid_h, opt.grid_w));
    }
    CoordGrid g;
    g.extent = {opt.grid_h, opt.grid_w};
    grid_reverse = !opt.grid_yx;  // xy: coordinate 0 is x, the column
    set_grid(g, pos, "rope2d grid");
    return;
  }
  if (!pos.grid.extent.empty()) {
    set_grid(pos.grid, pos, "coordinate grid");
    return;
  }
  if (!pos.angles.empty()) {
    set_angles(pos);
    return;
  }
  if (opt.grid_ids && pos.ids.empty() && pos.coords.empty()) {
    throw UsageError("grid_ids: needs position ids of shape [2, s] or [2, b, s]");
  }
  const bool real = !pos.coords.empty();
  if (real && pos.start != 0) {
    throw UsageError("start: applies to integer position ids, not to real coordinates");
  }
  if (!pos.ids.empty() || real) {
    const Shape& is = real ? pos.coords_shape : pos.ids_shape;
    const std::size_t count = real ? pos.coords.size() : pos.ids.size();
    if (product(is, 0, is.size()) != count) {
      throw InputError(fmt::format("{}: shape {} does not match its {} values", pos.ids_what,
                                   shape_str(is), count));
    }
    // Which leading dims mean what: [s], [b, s], and with n coordinate axes [n, s],
    // [n, b, s] ([s] also gives every axis the same position: text tokens of M-RoPE).
    const bool multi = comps > 1;
    const auto nc = static_cast<std::size_t>(comps);
    std::size_t lead = 0, bdim = 1;
    bool ok = false;
    if (is.size() == 1) {
      ok = is[0] == S && !opt.grid_ids;
    } else if (multi && is.size() == 2) {
      lead = nc, ok = is[0] == nc && is[1] == S;
    } else if (multi && is.size() == 3) {
      lead = nc, bdim = is[1], ok = is[0] == nc && (is[1] == 1 || is[1] == B) && is[2] == S;
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
    integral = !real;
    tokpos.resize(tb * S * nc);
    for (std::size_t b = 0; b < tb; ++b) {
      for (std::size_t s = 0; s < S; ++s) {
        for (std::size_t c = 0; c < nc; ++c) {
          const std::size_t at = lead ? (c * tb + b) * S + s : b * S + s;
          double v = 0;
          if (real) {
            v = pos.coords[at];
            if (!std::isfinite(v) || std::fabs(v) > static_cast<double>(kMaxPosition)) {
              throw InputError(fmt::format("{}: coordinate {} at flat index {} is not finite "
                                           "or beyond 2^53",
                                           pos.ids_what, v, at));
            }
          } else {
            const std::int64_t id = pos.ids[at];
            if (id < 0) {
              throw InputError(fmt::format("{}: negative position {} at flat index {}",
                                           pos.ids_what, id, at));
            }
            if (id > kMaxPosition - pos.start) {
              throw InputError(fmt::format("{}: position {} + start {} is beyond 2^53 = {}",
                                           pos.ids_what, id, pos.start, kMaxPosition));
            }
            v = static_cast<double>(id + pos.start);  // exact: at most 2^53
          }
          tokpos[(b * S + s) * nc + c] = v;
        }
      }
    }
    return;
  }
  // M-RoPE without ids: HF's text default (get_rope_index without images), every axis
  // at the token's position. Other layouts of several axes need their coordinates.
  if (comps > 1 && !text_default) {
    throw UsageError(fmt::format("positions: the RoPE layout has {} coordinate axes; give "
                                 "position ids or coordinates with {} rows, or a coordinate "
                                 "grid",
                                 comps, comps));
  }
  // Consecutive positions (restarting per packed sequence): the last one is at most
  // start + S - 1.
  if (S > 0 && S - 1 > static_cast<std::uint64_t>(kMaxPosition - pos.start)) {
    throw InputError(fmt::format("{}: positions --start {} + {} tokens go beyond 2^53 = {}", what,
                                 pos.start, S, kMaxPosition));
  }
  if (offsets) {
    set_offsets(pos);
    return;
  }
  if (!pos.cu_seqlens.empty()) {
    check_cu_seqlens(pos.cu_seqlens, S, pos.cu_what);
    cu = pos.cu_seqlens;
    source = Source::packed;
  }
}

void RopeApplier::Impl::set_grid(const CoordGrid& g, const Positions& pos,
                                 const char* name) {
  if (pos.start != 0) {
    throw UsageError(fmt::format("start: positions come from the {}; start does not apply", name));
  }
  const std::size_t n = g.extent.size();
  if (n != static_cast<std::size_t>(comps)) {
    throw UsageError(fmt::format("{}: {} extents for a RoPE layout of {} coordinate axes", name,
                                 n, comps));
  }
  std::size_t cells = 1;
  for (std::int64_t e : g.extent) {
    if (e <= 0 || __builtin_mul_overflow(cells, static_cast<std::size_t>(e), &cells)) {
      throw UsageError(fmt::format("{}: extents must be positive and their product must fit "
                                   "(got {})",
                                   name, e));
    }
  }
  if (g.merge < 1 || (g.merge > 1 && (n < 2 || g.extent[n - 1] % g.merge != 0 ||
                                       g.extent[n - 2] % g.merge != 0))) {
    throw UsageError(fmt::format("{}: the merge window {} must be >= 1 and divide the last two "
                                 "extents",
                                 name, g.merge));
  }
  std::size_t total = 0;
  if (g.prefix < 0 || __builtin_add_overflow(cells, static_cast<std::size_t>(g.prefix), &total) ||
      total != S) {
    throw InputError(fmt::format("{}: a {} of {} tokens{} does not match the {} tokens along s",
                                 what, name, cells,
                                 g.prefix > 0 ? fmt::format(" after {} prefix tokens", g.prefix)
                                              : std::string(),
                                 S));
  }
  grid = g;
  source = Source::grid;
  integral = !g.centres;
}

void RopeApplier::Impl::set_angles(const Positions& pos) {
  if (comps != 1 || term_freq.size() != half || pairing != RopePairing::style) {
    throw UsageError("angles: replace the frequency assignment; not with a RoPE layout");
  }
  if (pos.start != 0) throw UsageError("start: does not apply to explicit angles");
  const Shape& as = pos.angles_shape;
  if (product(as, 0, as.size()) != pos.angles.size()) {
    throw InputError(fmt::format("{}: shape {} does not match its {} values", pos.angles_what,
                                 shape_str(as), pos.angles.size()));
  }
  const bool ok = (as.size() == 2 && as[0] == S && as[1] == half) ||
                  (as.size() == 3 && (as[0] == 1 || as[0] == B) && as[1] == S && as[2] == half);
  if (!ok) {
    throw InputError(fmt::format("{}: shape {} does not match the input {} (expected [s, R/2] "
                                 "or [b, s, R/2], with b = {}, s = {}, R/2 = {})",
                                 pos.angles_what, shape_str(as), shape_str(shape), B, S, half));
  }
  for (std::size_t i = 0; i < pos.angles.size(); ++i) {
    if (!std::isfinite(pos.angles[i])) {
      throw InputError(fmt::format("{}: angle at flat index {} is not finite", pos.angles_what, i));
    }
  }
  tb = as.size() == 3 ? as[0] : 1;
  tokang = pos.angles;
  source = Source::angles;
  integral = false;
}

// flash-attn's seqlen_offsets: token s of entry b (or of packed sequence k) at
// start + offset + its index in the entry, held per token like explicit ids.
void RopeApplier::Impl::set_offsets(const Positions& pos) {
  const bool packed = !pos.cu_seqlens.empty();
  if (packed) check_cu_seqlens(pos.cu_seqlens, S, pos.cu_what);
  const std::size_t n = packed ? pos.cu_seqlens.size() - 1 : B;
  if (pos.seqlen_offsets.size() != n) {
    throw InputError(fmt::format("{}: {} values, expected one per {} ({})", pos.offsets_what,
                                 pos.seqlen_offsets.size(),
                                 packed ? "packed sequence of cu_seqlens" : "batch entry (axis b)",
                                 n));
  }
  // Every position is at most start + offset + S - 1 <= 2^53 (S - 1 <= 2^53 - start is
  // checked by the caller).
  const std::int64_t room = kMaxPosition - pos.start - static_cast<std::int64_t>(S > 0 ? S - 1 : 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t v = pos.seqlen_offsets[i];
    if (v < 0 || v > room) {
      throw InputError(fmt::format("{}: offset {} at index {} is negative or puts positions "
                                   "(+ start {}) beyond 2^53 = {}",
                                   pos.offsets_what, v, i, pos.start, kMaxPosition));
    }
  }
  tb = packed ? 1 : B;
  tokpos.assign(tb * S, 0.0);
  if (packed) {
    for (std::size_t k = 0; k < n; ++k) {
      const auto lo = static_cast<std::size_t>(pos.cu_seqlens[k]);
      const auto hi = static_cast<std::size_t>(pos.cu_seqlens[k + 1]);
      for (std::size_t s = lo; s < hi; ++s) {
        tokpos[s] = static_cast<double>(pos.start + pos.seqlen_offsets[k] +
                                        static_cast<std::int64_t>(s - lo));
      }
    }
  } else {
    for (std::size_t b = 0; b < B; ++b) {
      for (std::size_t s = 0; s < S; ++s) {
        tokpos[b * S + s] = static_cast<double>(pos.start + pos.seqlen_offsets[b] +
                                                static_cast<std::int64_t>(s));
      }
    }
  }
  source = Source::ids;
  integral = true;
}

/// The largest integer position a token takes (-1 without tokens).
std::int64_t RopeApplier::Impl::largest_position() const {
  if (S == 0 || B == 0) return -1;
  switch (source) {
    case Source::ids: {
      double m = 0;
      for (double v : tokpos) m = std::max(m, v);
      return static_cast<std::int64_t>(m);
    }
    case Source::packed: {
      std::int64_t longest = 0;
      for (std::size_t i = 1; i < cu.size(); ++i) longest = std::max(longest, cu[i] - cu[i - 1]);
      return start + longest - 1;
    }
    default:
      break;
  }
  return start + static_cast<std::int64_t>(S) - 1;
}

// The caller's cos/sin tables. [rows, R/2] is flash-attn's rotary_cos (pair j takes
// column j); [rows, R] is HF's (one column per rotated dim, the pair's two columns
// equal as HF builds them). A [rows, R] table whose pairs differ is applied per dim
// as HF's x * cos + rotate_half(x) * sin does (the split pairing), which is no rotation.
void RopeApplier::Impl::set_table(const Positions& pos, const RopeFreqs& f) {
  const bool any = !pos.table_cos.empty() || !pos.table_sin.empty() || !pos.table_shape.empty();
  if (!any) return;
  if (comps != 1 || pairing != RopePairing::style || term_freq.size() != half) {
    throw UsageError("cos/sin tables: replace the frequencies; not with a RoPE layout");
  }
  if (source == Source::angles || source == Source::grid || !integral) {
    throw UsageError("cos/sin tables: are indexed by integer positions; not with angles, "
                     "real coordinates or a coordinate grid");
  }
  if (af != 1.0) {
    throw UsageError("attention_factor: not with cos/sin tables (scale the tables instead)");
  }
  const Shape& ts = pos.table_shape;
  const std::size_t w = ts.size() == 2 ? ts[1] : 0;
  if (ts.size() != 2 || (w != half && w != R) || w == 0) {
    throw InputError(fmt::format("{}: shape {} does not match the rotary dim {} of the input {} "
                                 "(expected [rows, {}] or [rows, {}])",
                                 pos.cos_what, shape_str(ts), R, shape_str(shape), half, R));
  }
  const std::size_t n = product(ts, 0, 2);
  if (pos.table_cos.size() != n || pos.table_sin.size() != n) {
    const bool c = pos.table_cos.size() != n;
    throw InputError(fmt::format("{}: {} values, but the tables have shape {}",
                                 c ? pos.cos_what : pos.sin_what,
                                 c ? pos.table_cos.size() : pos.table_sin.size(), shape_str(ts)));
  }
  for (int k = 0; k < 2; ++k) {
    const std::vector<double>& t = k == 0 ? pos.table_cos : pos.table_sin;
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(t[i])) {
        throw InputError(fmt::format("{}: value {} at row {}, column {} is not finite",
                                     k == 0 ? pos.cos_what : pos.sin_what, t[i], i / w, i % w));
      }
      gmax = std::max(gmax, std::fabs(t[i]));
    }
  }
  grows = ts[0];
  const std::int64_t pmax = largest_position();
  if (pmax >= 0 && static_cast<std::uint64_t>(pmax) >= grows) {
    throw InputError(fmt::format("{}: position {} is beyond the table's {} rows (positions "
                                 "0 to {})",
                                 pos.cos_what, pmax, grows, grows == 0 ? -1 : static_cast<std::int64_t>(grows) - 1));
  }
  const bool gptj = f.style == RopeStyle::gptj && !f.rope_interleave;
  // The column of pair j's first and second dim in a [rows, R] table.
  auto first = [&](std::size_t j) { return gptj ? 2 * j : j; };
  auto second = [&](std::size_t j) { return gptj ? 2 * j + 1 : j + half; };
  bool paired = w == half;
  if (!paired) {
    paired = true;
    for (std::size_t r = 0; paired && r < grows; ++r) {
      for (std::size_t j = 0; paired && j < half; ++j) {
        const std::size_t a = r * w + first(j), b = r * w + second(j);
        paired = pos.table_cos[a] == pos.table_cos[b] && pos.table_sin[a] == pos.table_sin[b];
      }
    }
  }
  if (paired && !torch_ops) {
    nang = half;
  } else if (paired) {
    // torch's operations element by element: each rotated dim k on its pair's column.
    nang = half;
    pairing = RopePairing::split;
    const bool il = gptj;
    for (std::size_t k = 0; k < R; ++k) {
      dim_angle[k] = il ? k / 2 : k % half;
      dim_partner[k] = il ? k ^ 1 : k < half ? k + half : k - half;
      dim_first[k] = il ? k % 2 == 0 : k < half;
    }
  } else {
    if (inverse) {
      throw UsageError(fmt::format("inverse: the {} table's pairs differ (column j and its "
                                   "partner), so it is no rotation and has no inverse",
                                   pos.cos_what));
    }
    if (f.rope_interleave || permute) {
      throw UsageError(fmt::format("{}: a table whose pairs differ is applied per dim; not with "
                                   "rope_interleave or rotary_last",
                                   pos.cos_what));
    }
    pairing = RopePairing::split;
    nang = R;
    for (std::size_t k = 0; k < R; ++k) {
      dim_angle[k] = k;
      dim_partner[k] = gptj ? k ^ 1 : k < half ? k + half : k - half;
      dim_first[k] = gptj ? k % 2 == 0 : k < half;
    }
  }
  if (torch_ops && (f.rope_interleave || permute)) {
    throw UsageError("torch_ops: not with rope_interleave or rotary_last");
  }
  gtab.resize(grows * 2 * nang);
  for (std::size_t r = 0; r < grows; ++r) {
    double* c = gtab.data() + r * 2 * nang;
    for (std::size_t j = 0; j < nang; ++j) {
      const std::size_t at = r * w + (paired && w == R ? first(j) : j);
      c[j] = pos.table_cos[at];
      c[nang + j] = pos.table_sin[at];
    }
  }
  caller_table = true;
}

// Non-finite results of finite inputs. Every angle is a sum of coordinate times
// frequency, so the largest coordinate and the frequencies bound them all: checked once
// here, the hot loops never look. cos and sin of a finite angle are finite; the table
// multiplies them by the attention factor; the kernel multiplies the table by values
// of the input's type. Where that product can overflow the working type for some
// values only, the output is checked after the kernel instead (check_out).

/// The largest |coordinate| any token takes (0 for explicit angles).
double RopeApplier::Impl::max_coordinate() const {
  switch (source) {
    case Source::ids: {
      double m = 0;
      for (double v : tokpos) m = std::max(m, std::fabs(v));
      return m;
    }
    case Source::grid: {
      if (grid.centres) return 1.0;
      const std::int64_t e = *std::max_element(grid.extent.begin(), grid.extent.end());
      return static_cast<double>(e - 1);
    }
    case Source::angles:
      return 0;
    case Source::start:
    case Source::packed:
      break;
  }
  return static_cast<double>(start) + static_cast<double>(S > 0 ? S - 1 : 0);
}

namespace {

/// The options a frequency comes from, as the message's prefix ("factor/freq_scale").
std::string frequency_sources(const RopeFreqs& f, const RopeApplyOptions& opt) {
  std::vector<std::string> names;
  auto has = [&](const char* name) {
    return std::any_of(f.attrs.begin(), f.attrs.end(), [&](const Attr& a) { return a.name == name; });
  };
  const bool matrix = opt.layout.preset == RopeLayoutPreset::matrix ||
                      f.layout.preset == RopeLayoutPreset::matrix;
  if (matrix) names.push_back("inv_freq");
  if (opt.layout.scale != 1.0 || f.layout.scale != 1.0) names.push_back("freq_scale");
  if (has("factor")) names.push_back("factor");
  if (has("long_factor")) names.push_back("long_factor");
  if (has("short_factor")) names.push_back("short_factor");
  if (has("alpha")) names.push_back("alpha");
  if (names.empty() || (f.inv_freq.size() > 1 && f.inv_freq.back() > f.inv_freq.front())) {
    names.push_back("base");  // a base below 1 makes the last frequencies the largest
  }
  // Values a config gave are said as its keys ("config.json: 'rope_theta'").
  std::string out, file;
  for (const std::string& n : names) {
    const ValueSource* s = f.sources.find(n);
    if (s != nullptr) file = s->file;
    out += (out.empty() ? "" : "/") + (s != nullptr ? "'" + s->key + "'" : n);
  }
  return file.empty() ? out : file + ": " + out;
}

double largest(DType t) {
  switch (t) {
    case DType::f16: return 65504.0;
    case DType::bf16: return 0x1.fep127;
    case DType::f32: return std::numeric_limits<float>::max();
    case DType::f64: return std::numeric_limits<double>::max();
    default: return std::ldexp(1.0, 64);  // integers: at most 2^64 in magnitude
  }
}

}  // namespace

/// Refuses angles beyond the working type W: computed in W from the largest coordinate
/// and |frequency|, which bounds every angle's rounding as well (rounding is monotone).
template <class W>
void RopeApplier::Impl::check_angles(const RopeFreqs& f, const RopeApplyOptions& opt) const {
  const char* wname = std::is_same_v<W, float> ? "f32" : "f64";
  if (source == Source::angles) {
    double m = 0;
    for (double a : tokang) m = std::max(m, std::fabs(a));
    if (!std::isfinite(static_cast<W>(m))) {
      throw InputError(fmt::format("angles: {:g} is beyond the {} arithmetic's range ({:g}); "
                                   "rotate in f64",
                                   m, wname, std::numeric_limits<W>::max()));
    }
    return;
  }
  const W p = static_cast<W>(max_coordinate());
  for (std::size_t j = 0; j + 1 < term_start.size(); ++j) {
    W a = 0;
    double fmax = 0;
    for (std::size_t k = term_start[j]; k < term_start[j + 1]; ++k) {
      a += p * static_cast<W>(std::fabs(term_freq[k]));
      fmax = std::max(fmax, std::fabs(term_freq[k]));
    }
    if (!std::isfinite(a) || !std::isfinite(static_cast<W>(fmax))) {
      throw InputError(fmt::format(
          "{}: frequency {:g} (angle {}) times positions up to {:g} gives angles beyond the {} "
          "arithmetic's range ({:g})",
          frequency_sources(f, opt), fmax, j, max_coordinate(), wname,
          std::numeric_limits<W>::max()));
    }
  }
}

void RopeApplier::Impl::check_ranges(const RopeFreqs& f, const RopeApplyOptions& opt) {
  // The framework modes compute in float32 whatever the precision.
  const bool f32 = prec == Precision::f32 || f.framework != nullptr;
  if (caller_table) {
    // No angles: the table's values themselves must fit the working type.
    if (f32 && !std::isfinite(static_cast<float>(gmax))) {
      throw InputError(fmt::format("cos/sin tables: value {:g} is beyond the f32 arithmetic's "
                                   "range; rotate in f64",
                                   gmax));
    }
  } else if (f32) {
    check_angles<float>(f, opt);
  } else {
    check_angles<double>(f, opt);
  }
  const double wmax = f32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
  const char* wname = f32 ? "f32" : "f64";
  scale_eff = inverse ? 1.0 / af : af;
  const double table = f32 ? static_cast<double>(static_cast<float>(scale_eff)) : scale_eff;
  // The input's values in the working type: those of a type wider than it overflow.
  const double in_max = largest(in) <= wmax ? largest(in) : HUGE_VAL;
  if (!std::isfinite(table) || (in_max <= std::sqrt(wmax) && in_max * scale_eff > wmax)) {
    // A type far narrower than the arithmetic: only the factor can make it overflow.
    throw InputError(fmt::format(
        "attention_factor: {}{:g} times values of {} (up to {:g}) overflows the {} arithmetic",
        inverse ? "the inverse's 1 / " : "", af, dtype_name(in), largest(in), wname));
  }
  check_out = in_max * scale_eff > wmax;
  // x cos - y sin with table values up to gmax: at most 2 gmax |x|.
  if (caller_table && gmax > 0 && in_max * 2.0 * gmax > wmax) check_out = true;
  // Rounding to a narrower output type overflows to +-Inf by definition (as convert's
  // does); only NaN then tells an overflow of the arithmetic.
  out_nan_only = dtype_size(out) < (f32 ? 4u : 8u);
}

/// After a kernel ran on finite inputs with check_out: its output has a NaN (or Inf).
void RopeApplier::Impl::refuse_overflow() const {
  const bool f32 = prec == Precision::f32 || fw != nullptr;
  const char* wname = f32 ? "f32" : "f64";
  const double wmax = f32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
  if (caller_table && gmax > 1.0) {
    throw InputError(fmt::format("cos/sin tables: values up to {:g} make the rotation of {} "
                                 "overflow the {} arithmetic ({:g})",
                                 gmax, what, wname, wmax));
  }
  if (scale_eff > 1.0) {
    throw InputError(fmt::format("attention_factor: {:g} makes the rotation of {} overflow the "
                                 "{} arithmetic (a value times {:g} beyond {:g})",
                                 af, what, wname, scale_eff, wmax));
  }
  throw InputError(fmt::format("precision: {} holds values beyond the {} arithmetic's range "
                               "({:g}); rotate it in f64",
                               what, wname, wmax));
}

// --arith hf|meta|ggml: float32 table rows from the framework and its own rotation, in
// the framework's storage type (the input's) before the output conversion.
void RopeApplier::Impl::use_framework(const RopeFreqs& f, DType in_dtype) {
  fw = f.framework;
  const std::string mode = "--arith " + arith_name(fw->arith);
  fw_layout = lspec.custom();
  if (fw_layout && fw->arith != Arith::hf) {
    throw UsageError(mode + ": 2-D RoPE, M-RoPE sections and RoPE layouts are computed "
                            "exactly only");
  }
  if (caller_table) {
    throw UsageError(mode + ": cos/sin tables are applied exactly only (--precision f32 rotates "
                            "in float32)");
  }
  const bool centres = source == Source::grid && grid.centres;
  if (source == Source::angles || (!integral && !(centres && fw_layout))) {
    throw UsageError(mode +
                     ": real coordinates and explicit angles are computed exactly "
                     "only");
  }
  if (fw_layout) {
    // The model's own rows, and its rotation (the vision towers' is in float32).
    fl = rope_detail::hf_framework_layout(*fw, f, lspec, source == Source::grid ? &grid : nullptr);
    auto g = std::make_shared<FrameworkRope>(*fw);
    g->hf_rotation = fl.rotation;
    fw = std::move(g);
  }
  if (permute) {
    throw UsageError(mode + ": RoPE on the last dims and rope_interleave are computed "
                            "exactly only");
  }
  const bool ggml = fw->arith == Arith::ggml;
  if (is_fp8(in_dtype)) {
    throw UsageError(fmt::format("{}: {} has no fp8 arithmetic; fp8 inputs take the exact mode",
                                 what, mode));
  }
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

void RopeApplier::Impl::set_layout(const RopeFreqs& f, const RopeApplyOptions& opt) {
  const bool grid = opt.grid_h > 0 || opt.grid_w > 0 || opt.grid_ids;
  const bool own = !opt.mrope_section.empty();
  const std::vector<int>& sections = own ? opt.mrope_section : f.mrope_section;
  const bool interleaved = own ? opt.mrope_interleaved : f.mrope_interleaved;
  const bool custom = opt.layout.custom();
  if (grid && !sections.empty()) {
    throw UsageError("rope2d and mrope_section: give at most one of them");
  }
  if (opt.grid_ids && (opt.grid_h > 0 || opt.grid_w > 0)) {
    throw UsageError("rope2d: give the grid size or grid_ids, not both");
  }
  if (custom && (grid || !sections.empty())) {
    throw UsageError(fmt::format("rope layout: replaces {}; give one of them",
                                 grid ? "rope2d" : own ? "mrope_section"
                                                       : "the M-RoPE sections of the config"));
  }
  // A layout the parameters imply (ERNIE-4.5-VL's) is treated as their M-RoPE sections
  // above: the options' sections replace it, a layout or 2-D grid is refused with it.
  if (f.layout.custom() && (custom || grid)) {
    throw UsageError(fmt::format("{}: replaces the RoPE layout '{}' of the parameters; give "
                                 "one of them",
                                 custom ? "rope layout" : "rope2d",
                                 rope_layout_preset_name(f.layout.preset)));
  }
  if (grid && R % 4 != 0) {
    throw UsageError(fmt::format("rope2d: the rotary dim must be a multiple of 4 (got {})", R));
  }
  // The options' presets: 2-D RoPE (grid, grid_ids) and M-RoPE sections.
  RopeLayoutSpec spec = f.layout.custom() && !own ? f.layout : opt.layout;
  if (grid) spec.preset = RopeLayoutPreset::axial;
  if (!sections.empty()) {
    spec.preset = interleaved ? RopeLayoutPreset::interleaved : RopeLayoutPreset::sections;
    spec.sections = sections;
  }
  const RopeLayout l = resolve_rope_layout(spec, f);
  text_default =
      spec.preset == RopeLayoutPreset::sections || spec.preset == RopeLayoutPreset::interleaved;
  lspec = spec;
  comps = static_cast<int>(l.axes);
  pairing = l.pairing;
  nang = l.angles();
  term_start.assign(1, 0);
  term_axis.clear();
  term_freq.clear();
  for (std::size_t j = 0; j < nang; ++j) {
    for (std::size_t a = 0; a < l.axes; ++a) {
      const double v = l.freq[a * nang + j];
      if (v == 0.0) continue;
      term_axis.push_back(a);
      term_freq.push_back(v);
    }
    term_start.push_back(term_axis.size());
  }
  if (pairing != RopePairing::style && (inverse || f.rope_interleave)) {
    const std::string name = rope_pairing_name(pairing);
    throw UsageError(inverse ? fmt::format("inverse: the {} pairing is not a rotation (the two "
                                           "dims of a pair use different angles), so it has no "
                                           "inverse rotation",
                                           name)
                             : fmt::format("rope_interleave: not with the {} pairing", name));
  }
  dim_angle.assign(R, 0);
  dim_partner.assign(R, 0);
  dim_first.assign(R, 0);
  for (std::size_t k = 0; k < R && pairing != RopePairing::style; ++k) {
    if (pairing == RopePairing::tiled) {
      // V-JEPA2: adjacent pairs, dim l of a chunk of width c on the chunk's angle l mod c/2.
      const std::size_t c = R / l.chunks, ch = c / 2, lk = k % c;
      dim_angle[k] = (k / c) * ch + lk % ch;
      dim_partner[k] = k ^ 1;
      dim_first[k] = lk % 2 == 0;
    } else {
      // Split: the style's pairs, each dim on its own angle k.
      const bool gptj = f.style == RopeStyle::gptj;
      dim_angle[k] = k;
      dim_partner[k] = gptj ? k ^ 1 : k < half ? k + half : k - half;
      dim_first[k] = gptj ? k % 2 == 0 : k < half;
    }
  }
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
void RopeApplier::Impl::fill_table(W* t, std::size_t rows, const Range& r, bool dense,
                                   std::int64_t pmin) {
  const std::size_t width = 2 * nang;
  const std::size_t gb0 = tb > 1 ? r.b0 : 0;
  // The inverse of the scaled rotation a·R(θ) is R(-θ)/a.
  const double cscale = inverse ? 1.0 / af : af;
  const double sscale = inverse ? -1.0 / af : af;
#pragma omp parallel for schedule(static) if (rows * width >= rope_detail::kParallelElements)
  for (std::ptrdiff_t row = 0; row < static_cast<std::ptrdiff_t>(rows); ++row) {
    const auto u = static_cast<std::size_t>(row);
    const std::size_t lb = u / std::max<std::size_t>(r.ns, 1), ls = u % std::max<std::size_t>(r.ns, 1);
    double tp[kMaxRopeAxes] = {};
    if (dense) {
      tp[0] = static_cast<double>(pmin + row);
    } else if (source != Source::angles) {
      token_coords(gb0 + lb, r.s0 + ls, tp);
    }
    W* c = t + u * width;
    W* s = c + nang;
    if constexpr (std::is_same_v<W, float>) {
      if (fw) {
        std::vector<float> angle(half);
        if (fw_layout) {
          rope_detail::framework_layout_row(*fw, fl, tp, inverse, angle.data(), c, s);
        } else {
          framework_rope_row(*fw, static_cast<std::int64_t>(tp[0]), inverse, angle.data(), c, s);
        }
        continue;
      }
    }
    if (caller_table) {
      // The caller's row, used as given (cscale and sscale are 1 and +-1: exact).
      const double* g = gtab.data() + static_cast<std::size_t>(tp[0]) * 2 * nang;
      for (std::size_t j = 0; j < nang; ++j) {
        c[j] = static_cast<W>(g[j] * cscale);
        s[j] = static_cast<W>(g[nang + j] * sscale);
      }
      continue;
    }
    const double* given =
        source == Source::angles ? tokang.data() + ((gb0 + lb) * S + r.s0 + ls) * half : nullptr;
    for (std::size_t j = 0; j < nang; ++j) {
      // Angle j: the sum of its terms, the first one alone when there is one.
      W a = 0;
      if (given != nullptr) {
        a = static_cast<W>(given[j]);
      } else {
        for (std::size_t k = term_start[j]; k < term_start[j + 1]; ++k) {
          // Precision f32: f32 coordinate, f32 frequency, f32 products and sums.
          const W term = static_cast<W>(tp[term_axis[k]]) * static_cast<W>(term_freq[k]);
          a = k == term_start[j] ? term : a + term;
        }
      }
      c[j] = std::cos(a) * static_cast<W>(cscale);
      s[j] = std::sin(a) * static_cast<W>(sscale);
    }
  }
}

// The paths without a SIMD kernel (the per-dimension pairings, torch's operations): the
// slab goes through float64 copies (exact for every input type), `op(xv, yv, row)` writes
// the result yv of the vector xv at table row `row`, and the result is rounded once to
// the output type. True when an input element is not finite.
template <class F>
bool RopeApplier::Impl::per_vector(const rope_detail::KernelArgs& a, F&& op) const {
  const std::size_t nvec = a.n0 * a.n1 * a.n2;
  Tensor x(kin, {nvec * D});
  if (x.nbytes() > 0) std::memcpy(x.bytes(), a.src, x.nbytes());
  const Tensor x64 = x.astype(DType::f64);
  Tensor y64(DType::f64, {nvec * D});
  const double* xs = x64.data<double>();
  double* ys = y64.data<double>();
  int bad = 0;
#pragma omp parallel for collapse(2) schedule(static) reduction(| : bad) if (nvec * D >= rope_detail::kParallelElements)
  for (std::ptrdiff_t i0 = 0; i0 < static_cast<std::ptrdiff_t>(a.n0); ++i0) {
    for (std::ptrdiff_t i1 = 0; i1 < static_cast<std::ptrdiff_t>(a.n1); ++i1) {
      for (std::size_t i2 = 0; i2 < a.n2; ++i2) {
        const std::ptrdiff_t at = i0 * a.st0 + i1 * a.st1 + static_cast<std::ptrdiff_t>(i2) * a.st2;
        const std::ptrdiff_t t = i0 * a.t0 + i1 * a.t1 + static_cast<std::ptrdiff_t>(i2) * a.t2;
        const double* xv = xs + at;
        for (std::size_t k = 0; k < D; ++k) bad |= std::isfinite(xv[k]) ? 0 : 1;
        op(xv, ys + at, static_cast<std::size_t>(a.rowidx[t]));
      }
    }
  }
  const Tensor y = y64.astype(out);
  if (y.nbytes() > 0) std::memcpy(a.dst, y.bytes(), y.nbytes());
  return bad != 0;
}

// The tiled and split pairings (RopePairing) are not rotations of pairs, so they have no
// SIMD kernel: each element is computed in the working precision W from its own input,
// its partner and its angle (dim_angle, dim_partner, dim_first).
template <class W>
bool RopeApplier::Impl::rotate_per_dim_in(const rope_detail::KernelArgs& a) const {
  const W* table = static_cast<const W*>(a.table);
  return per_vector(a, [&](const double* xv, double* yv, std::size_t row) {
    const W* cs = table + row * 2 * nang;
    const W* sn = cs + nang;
    for (std::size_t k = 0; k < R; ++k) {
      const std::size_t j = dim_angle[k];
      const W xk = static_cast<W>(xv[k]), xp = static_cast<W>(xv[dim_partner[k]]);
      yv[k] = static_cast<double>(dim_first[k] ? xk * cs[j] - xp * sn[j] : xk * cs[j] + xp * sn[j]);
    }
    for (std::size_t k = R; k < D; ++k) yv[k] = static_cast<double>(static_cast<W>(xv[k]));
  });
}

bool RopeApplier::Impl::rotate_per_dim(const rope_detail::KernelArgs& a) const {
  if (torch_ops) return rotate_torch_ops(a);
  return prec == Precision::f64 ? rotate_per_dim_in<double>(a) : rotate_per_dim_in<float>(a);
}

namespace {

/// One of torch's CPU elementwise results in `t`: f64 as is, f32 as float, f16 and bf16
/// computed in float32 and rounded to the type (Vectorized<Half/BFloat16>).
float round_op(float v, DType t) {
  if (t == DType::bf16) return bf16_to_float(float_to_bf16(v));
  if (t == DType::f16) return half_to_float(float_to_half(v));
  return v;
}

}  // namespace

// apply_rotary_emb_torch: x[k] * cos[j] + rotate_half(x)[k] * sin[j], rotate_half(x)[k] =
// -x[partner] for the first dim of a pair and x[partner] for the second, each product and
// the sum a torch operation in opdt. The passed dims are x itself (torch.cat), in opdt.
bool RopeApplier::Impl::rotate_torch_ops(const rope_detail::KernelArgs& a) const {
  const auto* table = static_cast<const double*>(a.table);
  const bool f64 = opdt == DType::f64;
  return per_vector(a, [&](const double* xv, double* yv, std::size_t row) {
    const double* cs = table + row * 2 * nang;
    const double* sn = cs + nang;
    for (std::size_t k = 0; k < R; ++k) {
      const std::size_t j = dim_angle[k];
      const double rh = dim_first[k] ? -xv[dim_partner[k]] : xv[dim_partner[k]];
      if (f64) {
        yv[k] = xv[k] * cs[j] + rh * sn[j];
      } else {
        // Inputs and tables are values of opdt or narrower: exact in float.
        const float p = round_op(static_cast<float>(xv[k]) * static_cast<float>(cs[j]), opdt);
        const float q = round_op(static_cast<float>(rh) * static_cast<float>(sn[j]), opdt);
        yv[k] = round_op(p + q, opdt);
      }
    }
    for (std::size_t k = R; k < D; ++k) yv[k] = xv[k];
  });
}

void RopeApplier::Impl::build_table(const Range& r, bool whole) {
  const std::size_t ntb = tb > 1 ? r.nb : 1;
  const std::size_t gb0 = tb > 1 ? r.b0 : 0;
  const std::size_t ntok = ntb * r.ns;
  rowidx.resize(ntok);
  bool dense = false;
  std::int64_t pmin = 0, pmax = -1;
  // Integer positions of one axis: [token] -> position.
  auto pos_of = [&](std::size_t lb, std::size_t ls) {
    double p = 0;
    token_coords(gb0 + lb, r.s0 + ls, &p);
    return static_cast<std::int64_t>(p);
  };
  if (comps == 1 && integral && source != Source::grid && ntok > 0) {
    pmin = std::numeric_limits<std::int64_t>::max();
    pmax = std::numeric_limits<std::int64_t>::min();
    for (std::size_t lb = 0; lb < ntb; ++lb) {
      for (std::size_t ls = 0; ls < r.ns; ++ls) {
        const std::int64_t p = pos_of(lb, ls);
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
          dense ? pos_of(lb, ls) - pmin : static_cast<std::int64_t>(tok));
    }
  }
  const std::int64_t k[5] = {dense ? 1 : 0,
                             dense ? pmin : static_cast<std::int64_t>(gb0),
                             dense ? pmax : static_cast<std::int64_t>(ntb),
                             dense ? 0 : static_cast<std::int64_t>(r.s0),
                             dense ? 0 : static_cast<std::int64_t>(r.ns)};
  if (have_key && std::equal(k, k + 5, key)) return;
  std::copy(k, k + 5, key);
  have_key = true;
  // The dense table of a whole tensor's positions is shared with later calls (the
  // slabs of a stream each need their own rows, which the vectors hold, reused).
  const std::size_t split_w = want_split ? rope_detail::split_row_floats(R, kstyle) : 0;
  const std::size_t bytes = rows * (2 * nang * wsize() + split_w * sizeof(float));
  if (whole && dense && table_shareable() && bytes <= kSharedBytes) {
    std::vector<std::uint64_t> sk = {static_cast<std::uint64_t>(prec),
                                     inverse,
                                     __builtin_bit_cast(std::uint64_t, af),
                                     nang,
                                     R,
                                     static_cast<std::uint64_t>(kstyle),
                                     want_split,
                                     static_cast<std::uint64_t>(pmin),
                                     static_cast<std::uint64_t>(pmax)};
    sk.insert(sk.end(), term_start.begin(), term_start.end());
    sk.insert(sk.end(), term_axis.begin(), term_axis.end());
    for (double f : term_freq) sk.push_back(__builtin_bit_cast(std::uint64_t, f));
    shared = find_shared(sk);
    if (shared) return;
    // Built into fresh memory that nothing zero-fills first: each thread's rows fault in
    // its own pages.
    auto t = std::make_shared<SharedTable>();
    t->key = std::move(sk);
    t->bytes = bytes;
    if (prec == Precision::f64) {
      t->t64 = table_memory<double>(rows * 2 * nang);
      fill_table(t->t64.get(), rows, r, dense, pmin);
      if (want_split) {
        t->split = table_memory<float>(rows * split_w);
        t->split_ok =
            rope_detail::build_split_table(t->t64.get(), rows, R, kstyle, t->split.get());
      }
    } else {
      t->t32 = table_memory<float>(rows * 2 * nang);
      fill_table(t->t32.get(), rows, r, dense, pmin);
    }
    keep_shared(t);
    shared = std::move(t);
    return;
  }
  shared.reset();
  if (prec == Precision::f64) {
    table64.resize(rows * 2 * nang);
    fill_table(table64.data(), rows, r, dense, pmin);
    if (want_split) {
      split.resize(rows * split_w);
      split_ok = rope_detail::build_split_table(table64.data(), rows, R, kstyle, split.data());
    }
  } else {
    table32.resize(rows * 2 * nang);
    fill_table(table32.data(), rows, r, dense, pmin);
  }
}

namespace {
// "--cos: c.npy" -> "--cos": a tensor's name without its file.
std::string name_of(const std::string& what) { return what.substr(0, what.find(':')); }
}  // namespace

void check_positions(const Positions& pos, const std::string& start) {
  if (!pos.ids.empty() || !pos.ids_shape.empty()) {
    if (pos.ids_shape.empty() || pos.ids_shape.size() > 3) {
      throw InputError(fmt::format("{}: expected shape [s] or [b, s], got {}", pos.ids_what,
                                   shape_str(pos.ids_shape)));
    }
    for (std::int64_t v : pos.ids) {
      if (v < 0) throw InputError(fmt::format("{}: negative position {}", pos.ids_what, v));
      if (v > kMaxPosition - pos.start) {
        throw InputError(fmt::format("{}: position {} (+ {} {}) is beyond 2^53 = {}", pos.ids_what,
                                     v, start, pos.start, kMaxPosition));
      }
    }
  }
  if (!pos.coords.empty() || !pos.coords_shape.empty()) {
    if (pos.coords_shape.empty() || pos.coords_shape.size() > 3) {
      throw InputError(fmt::format("{}: expected shape [s], [b, s], [n, s] or [n, b, s], got {}",
                                   pos.ids_what, shape_str(pos.coords_shape)));
    }
  }
  if (!pos.cu_seqlens.empty() || !pos.cu_seqlens_shape.empty()) {
    const std::vector<std::int64_t>& cu = pos.cu_seqlens;
    if (pos.cu_seqlens_shape.size() != 1 || cu.empty() || cu[0] != 0) {
      throw InputError(fmt::format("{}: expected a 1-D tensor starting at 0, got shape {}",
                                   pos.cu_what, shape_str(pos.cu_seqlens_shape)));
    }
    for (std::size_t i = 1; i < cu.size(); ++i) {
      if (cu[i] > kMaxPosition - pos.start) {
        throw InputError(fmt::format("{}: boundary {} (+ {} {}) is beyond 2^53 = {}", pos.cu_what,
                                     cu[i], start, pos.start, kMaxPosition));
      }
      if (cu[i] < cu[i - 1]) {
        throw InputError(fmt::format("{}: boundaries must not decrease ({} after {})", pos.cu_what,
                                     cu[i], cu[i - 1]));
      }
    }
  }
  if (!pos.seqlen_offsets.empty() || !pos.seqlen_offsets_shape.empty()) {
    if (pos.seqlen_offsets_shape.size() != 1) {
      throw InputError(fmt::format("{}: expected shape [b], got {}", pos.offsets_what,
                                   shape_str(pos.seqlen_offsets_shape)));
    }
  }
  if (!pos.table_cos.empty() || !pos.table_shape.empty()) {
    if (pos.sin_dtype && *pos.sin_dtype != pos.table_dtype) {
      throw InputError(fmt::format("{}: dtype {} differs from {}'s {}", pos.sin_what,
                                   dtype_name(*pos.sin_dtype), name_of(pos.cos_what),
                                   dtype_name(pos.table_dtype)));
    }
    for (const auto& [what, shape] :
         {std::pair(&pos.cos_what, &pos.table_shape), std::pair(&pos.sin_what, &pos.sin_shape)}) {
      if (shape->size() != 2) {
        throw InputError(fmt::format("{}: expected shape [rows, R/2] or [rows, R], got {}", *what,
                                     shape_str(*shape)));
      }
    }
    if (pos.sin_shape != pos.table_shape) {
      throw InputError(fmt::format("{}: shape {} differs from {}'s {}", pos.sin_what,
                                   shape_str(pos.sin_shape), name_of(pos.cos_what),
                                   shape_str(pos.table_shape)));
    }
  }
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
  // fp8 has no kernel of its own: widened exactly to f32 as it is read.
  m.kin = is_fp8(in_dtype) ? DType::f32 : is_float(in_dtype) ? in_dtype : DType::f64;
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
  m.set_layout(f, opt);
  m.set_permutation(f);
  m.set_positions(pos, opt);
  if (opt.torch_ops) {
    if (pos.table_shape.empty()) throw UsageError("torch_ops: needs cos/sin tables");
    if (opt.precision != Precision::f64) {
      throw UsageError("torch_ops: computes as torch does; not with precision f32");
    }
    if (!is_float(in_dtype) || !is_float(pos.table_dtype)) {
      throw InputError(fmt::format("{}: torch_ops takes float inputs and tables, not {}", m.what,
                                   dtype_name(is_float(in_dtype) ? pos.table_dtype : in_dtype)));
    }
    m.torch_ops = true;
    // torch's promotion of two float types: the wider; f16 with bf16 gives f32.
    const DType a = in_dtype, b = pos.table_dtype;
    m.opdt = a == b                                   ? a
             : dtype_size(a) != dtype_size(b)         ? (dtype_size(a) > dtype_size(b) ? a : b)
                                                      : DType::f32;
  }
  m.set_table(pos, f);
  m.check_ranges(f, opt);
  m.H = size_of('h');
  if (f.framework) {
    m.use_framework(f, in_dtype);
    return;
  }
  if (m.pairing != RopePairing::style) return;  // rotate_per_dim, below
  // rope_interleave rotates the gathered (de-interleaved) pairs in the neox order.
  m.kstyle = f.rope_interleave ? RopeStyle::neox : f.style;
  m.kernel = rope_detail::find_kernel(m.kin, m.out, m.prec, m.kstyle);
  m.want_split = rope_detail::split_table_wanted(m.kin, m.out, m.prec);
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
  if (m.pairing != RopePairing::style) extra += elems * (8 + 8 + dtype_size(m.out));
  if (m.want_split) extra += ntok * rope_detail::split_row_floats(m.R, m.kstyle) * sizeof(float);
  return ntok * (2 * m.nang * m.wsize() + sizeof(std::int32_t)) + extra +
         (m.tokpos.size() + m.tokang.size() + m.gtab.size()) * sizeof(double);
}

void RopeApplier::rows(const void* src, void* dst, std::size_t first, std::size_t count) {
  rotate(src, dst, first, count, 0, 0);
}

std::size_t RopeApplier::parts() const {
  const Impl& m = *impl_;
  const std::size_t next = m.lead + 1;
  if (m.fw || next >= m.shape.size() || m.id == static_cast<int>(next) ||
      m.id == static_cast<int>(m.lead)) {
    return 1;
  }
  return m.shape[next];
}

void RopeApplier::part(const void* src, void* dst, std::size_t row, std::size_t first,
                       std::size_t count) {
  const std::size_t n = parts();
  if (n < 2 || row >= rows_total() || first > n || count > n - first) {
    throw std::logic_error(fmt::format("RopeApplier::part: entries {}..{} of row {} with {} part(s)",
                                       first, first + count, row, n));
  }
  if (count > 0) rotate(src, dst, row, 1, first, count);
}

void RopeApplier::rotate(const void* src, void* dst, std::size_t first, std::size_t count,
                         std::size_t sub_first, std::size_t sub_count) {
  Impl& m = *impl_;
  if (count == 0) return;
  if (first + count > m.shape[m.lead]) {
    throw InputError(fmt::format("{}: rows {}..{} out of range", m.what, first, first + count));
  }
  Impl::Range r = m.slab_range(first, count);
  Shape slab = m.shape;
  slab[m.lead] = count;
  if (sub_count > 0) {
    // A part of one row: the positions of its tokens are those of its entries along
    // the next axis when that is b or s (the other axes carry none).
    const char c = m.letters[m.lead + 1];
    if (c == 'b') r.b0 = sub_first, r.nb = sub_count;
    if (c == 's') r.s0 = sub_first, r.ns = sub_count;
    slab[m.lead + 1] = sub_count;
  }
  m.build_table(r, sub_count == 0 && first == 0 && count == rows_total());
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
  auto* out = static_cast<std::byte*>(dst);
  if (!d_last) {
    // Kept from slab to slab: fresh working copies for every slab of a stream cost more
    // in page faults than the rotation (over 100,000 faults for 256 MiB in 1 MiB slabs).
    const std::size_t in_bytes = elems * dtype_size(m.kin), out_bytes = elems * dtype_size(m.out);
    if (m.moved_in.size() < in_bytes) m.moved_in = Buffer(in_bytes);
    if (m.moved_out.size() < out_bytes) m.moved_out = Buffer(out_bytes);
    move_d_axis(in, m.moved_in.data(), slab, id, dtype_size(m.kin), true);
    in = m.moved_in.data();
    out = m.moved_out.data();
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
  a.table = m.table_data();
  a.split = m.split_data();
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
    const std::size_t row_bytes = 2 * m.nang * m.wsize();
    a.block2 = std::clamp<std::size_t>((std::size_t{256} << 10) / std::max<std::size_t>(row_bytes, 1),
                                       16, std::max<std::size_t>(a.n2, 1));
  }
  // Past the size of a large last-level cache the output is written around the cache.
  a.stream = !m.permute && elems * dtype_size(m.out) >= (std::size_t{32} << 20);
  const bool bad = m.fw                              ? m.run_framework(a, r, role)
                   : m.pairing != RopePairing::style ? m.rotate_per_dim(a)
                                                     : m.kernel(a);
  if (bad && !m.allow_nonfinite) {
    throw InputError(fmt::format("{}: input contains NaN or Inf (use allow_nonfinite to "
                                 "rotate it anyway)",
                                 m.what));
  }
  if (!bad && m.check_out && has_nonfinite(kout, elems, m.out, m.out_nan_only)) {
    m.refuse_overflow();
  }
  if (bad) canonical_nans(kout, elems, m.out);
  if (m.permute) permute_vectors(kout, out, nvec, m.D, dtype_size(m.out), m.out_perm, false);
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
  if (!pos.seqlen_offsets.empty()) {
    // Every entry's positions end below its offset + s (the longest packed sequence is
    // at most s): what the offsets reach, not more than one beyond.
    const std::int64_t off = std::max<std::int64_t>(
        0, *std::max_element(pos.seqlen_offsets.begin(), pos.seqlen_offsets.end()));
    return pos.start + off + static_cast<std::int64_t>(std::max<std::size_t>(seq, 1));
  }
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
  if (!pos.table_shape.empty() && p.rotary_dim == 0 && p.partial == 1.0) {
    // The caller's tables give the rotary dim: [rows, R/2] (flash-attn) when twice the
    // width fits the head dim, else [rows, R] (HF's [s, d]).
    const Shape& ts = pos.table_shape;
    const std::size_t w = ts.size() == 2 ? ts[1] : 0;
    if (ts.size() != 2 || w == 0 || w > head_dim || (2 * w > head_dim && w % 2 != 0)) {
      throw InputError(fmt::format("{}: shape {} fits neither [rows, R/2] nor [rows, R] with an "
                                   "even R up to the head dim {} of {} {}",
                                   pos.cos_what, shape_str(ts), head_dim, what, shape_str(shape)));
    }
    p.rotary_dim = static_cast<int>(2 * w <= head_dim ? 2 * w : w);
  }
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
