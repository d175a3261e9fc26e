// Fuzzes every option-value parser; the first input byte picks one, the rest is the
// value text:
//   0 --slice, resolved against a small shape taken from the next bytes, each axis
//     checked against Python's slice.indices computed here in 128-bit arithmetic (and
//     index lists entry by entry);
//   1 --window, through its declaration (attention_fields.hpp) as the command line
//     binds it; 2 sizes (--max-memory); 3 factor lists (--short-factor);
//   4 integer option text (canonical form must parse back to the same value);
//   5 real-number option text; 6 --mrope-section;
//   7 --hf-config JSON, applied and reduced to frequencies, which must be finite (a
//     RoPE layout the config implies must resolve);
//   8 --coords (extents in range); 9 --layout (resolved against a small RopeFreqs:
//     a layout that resolves passes check_rope_layout); 10 --freq-scale, through its
//     declaration (positive).
// Contract: only UsageError / InputError, and the checks above.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/parse.hpp"
#include "fuzz_util.hpp"
#include "posenc/encodings/rope.hpp"
#include "posenc/encodings/rope_fields.hpp"
#include "posenc/encodings/rope_layout.hpp"
#include "posenc/error.hpp"
#include "posenc/ops/attention_fields.hpp"
#include "posenc/ops/select.hpp"

namespace {

using posenc::fuzz::expect;
__extension__ typedef __int128 i128;  // the reference cannot overflow

// Python's slice.indices(n) and the selected indices, for axes of at most 64.
std::vector<i128> python_indices(const posenc::SliceItem& e, i128 n) {
  std::vector<i128> out;
  if (e.kind == posenc::SliceItem::Kind::index) {
    const i128 i = e.index < 0 ? e.index + n : e.index;
    if (i >= 0 && i < n) out.push_back(i);
    return out;
  }
  if (e.kind == posenc::SliceItem::Kind::list) {  // every entry, in order
    for (std::int64_t v : e.list) out.push_back(v < 0 ? v + n : v);
    return out;
  }
  const i128 step = e.step;
  auto fix = [&](const std::optional<std::int64_t>& b, i128 dflt) {
    if (!b) return dflt;
    i128 v = *b;
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    return v;
  };
  const i128 start = fix(e.start, step < 0 ? n - 1 : 0);
  const i128 stop = fix(e.stop, step < 0 ? -1 : n);
  for (i128 i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
  return out;
}

// The library's --slice (ops/select.hpp) against Python's rules.
void check_slice(const std::string& text, const std::uint8_t* dims, std::size_t ndims) {
  posenc::Shape shape;
  for (std::size_t k = 0; k < ndims; ++k) shape.push_back(dims[k] % 65);
  posenc::SliceSpec spec;
  try {
    spec = posenc::parse_slice(text);
  } catch (const posenc::UsageError&) {
    return;
  }
  posenc::Selection sel;
  try {
    sel = posenc::resolve_selection(spec, shape);
  } catch (const posenc::InputError&) {
    return;
  }
  expect(sel.axes.size() == shape.size(), "one range per axis");
  // The entries as the selection expands them ("..." and missing axes are ":").
  using Kind = posenc::SliceItem::Kind;
  std::vector<posenc::SliceItem> full;
  std::size_t explicit_axes = 0;
  for (const auto& p : spec.items) explicit_axes += p.kind != Kind::ellipsis;
  for (const auto& p : spec.items) {
    if (p.kind != Kind::ellipsis) {
      full.push_back(p);
    } else {
      full.insert(full.end(), shape.size() - explicit_axes, posenc::SliceItem{});
    }
  }
  full.resize(shape.size());
  for (std::size_t ax = 0; ax < shape.size(); ++ax) {
    const std::vector<i128> want = python_indices(full[ax], static_cast<i128>(shape[ax]));
    const posenc::AxisSelection& a = sel.axes[ax];
    expect(a.size == want.size(), "slice count differs from Python's");
    expect(a.drop == (full[ax].kind == Kind::index), "index axes are dropped, slices kept");
    for (std::size_t k = 0; k < want.size(); ++k) {
      expect(want[k] >= 0 && want[k] < static_cast<i128>(shape[ax]), "index outside the axis");
      expect(static_cast<i128>(a.at(k)) == want[k], "slice index differs from Python's");
    }
    if (!a.indices.empty()) expect(a.indices.size() == a.size, "index list size");
  }
}

void check_hf_config(const std::uint8_t* p, std::size_t n) {
  const std::string path = posenc::fuzz::temp_file(".json", p, n);
  posenc::RopeParams params;
  params.head_dim = 64;
  try {
    posenc::apply_hf_config(path, params);
    params.seq_len = 4096;
    const posenc::RopeFreqs f = posenc::compute_rope_freqs(params);
    for (double v : f.inv_freq) expect(std::isfinite(v) && v >= 0, "non-finite frequency");
    expect(std::isfinite(f.attention_factor) && f.attention_factor > 0, "bad attention factor");
    expect(f.rotary_dim > 0 && f.rotary_dim <= f.head_dim, "rotary dim out of range");
    if (f.layout.custom()) {
      // A layout from the config is checked as the config is read: it must resolve.
      try {
        posenc::resolve_rope_layout(f.layout, f);
      } catch (const posenc::UsageError&) {
        expect(false, "the config's RoPE layout does not resolve");
      }
    }
  } catch (const posenc::UsageError&) {
  } catch (const posenc::InputError&) {
  }
}

// --window's text set as declared_options.hpp sets it: the integers, then the declared
// Sides' range check.
constexpr std::int64_t kMaxSide = std::int64_t{1} << 53;
struct WindowText {
  std::string text;
  template <class T>
  void operator()(const posenc::Field&, T&&) {}
  void operator()(const posenc::Field& f, posenc::Sides s) {
    if (f.name != "window") return;
    const auto v = posenc::cli::parse_integer_list(text);
    if (!v) throw posenc::UsageError("window: integers");
    s.set(f, *v);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t which = data[0] % 11;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  namespace cli = posenc::cli;
  try {
    switch (which) {
      case 0: {
        // "dims|slice": up to 4 dims from the bytes before the first '|'.
        const auto bar = text.find('|');
        if (bar == std::string::npos || bar > 4) return 0;
        check_slice(text.substr(bar + 1), data + 1, bar);
        break;
      }
      case 1: {
        posenc::AttentionOptions o;
        WindowText w{text};
        posenc::declare(w, o);
        expect(o.window_left >= -1 && o.window_right >= -1 && o.window_left <= kMaxSide &&
                   o.window_right <= kMaxSide,
               "window out of range");
        break;
      }
      case 2: {
        const std::size_t bytes = posenc::memory_size(text, "--max-memory");
        expect(bytes >= 1 && bytes < (std::size_t{1} << 63), "size out of range");
        break;
      }
      case 3: {  // through its declaration (rope_fields.hpp); no file is read here
        std::vector<double> v;
        posenc::number_list(v, [](const std::string&) -> xt::xarray<double> {
          throw posenc::UsageError("not read");
        }).set(posenc::field("short_factor", ""), text);
        for (double x : v) expect(std::isfinite(x), "non-finite factor");
        break;
      }
      case 4: {
        for (bool is_signed : {true, false}) {
          std::string t = text;
          if (cli::integer_text_error(t, is_signed).empty()) {
            // The canonical text is what CLI11 converts: plain decimal digits.
            const auto v = cli::parse_integer(t);
            expect(t == "0" || (t[0] != '0' && t[0] != '+'), "not canonical");
            expect(!is_signed || (v && std::to_string(*v) == t), "canonical text changed value");
          }
        }
        break;
      }
      case 5:
        if (cli::number_text_error(text).empty()) {
          expect(std::isfinite(std::strtod(text.c_str(), nullptr)), "non-finite number accepted");
        }
        break;
      case 6: {
        std::vector<int> v;  // through its declaration (rope_fields.hpp)
        posenc::counts(v, 3, 0, 1 << 20, "three counts").set(posenc::field("mrope_section", ""),
                                                             text);
        expect(v.size() == 3, "sections are three counts");
        break;
      }
      case 8: {
        const posenc::CoordGrid g = posenc::parse_coord_grid(text);
        expect(!g.extent.empty() && g.extent.size() <= posenc::kMaxRopeAxes, "extent count");
        for (std::int64_t e : g.extent) expect(e >= 1 && e <= (std::int64_t{1} << 31), "extent");
        break;
      }
      case 9: {
        const posenc::RopeLayoutSpec spec = posenc::parse_rope_layout(text);
        posenc::RopeParams p;
        p.head_dim = 64;
        const posenc::RopeFreqs f = posenc::compute_rope_freqs(p);
        const posenc::RopeLayout l = posenc::resolve_rope_layout(spec, f);
        // 32 angles per token, 64 for the split pairing (one per rotated dim).
        const std::size_t angles = l.pairing == posenc::RopePairing::split ? 64 : 32;
        expect(l.axes >= 1 && l.freq.size() == l.axes * angles, "resolved layout shape");
        break;
      }
      case 10: {  // through its declaration (rope_fields.hpp), as both front ends set it
        double v = 1.0;
        posenc::number_or_word(v, posenc::fields::freq_scale_words())
            .set(posenc::field("freq_scale", ""), text);
        expect(v > 0 && std::isfinite(v), "scale out of range");
        break;
      }
      default:
        check_hf_config(data + 1, size - 1);
    }
  } catch (const posenc::UsageError&) {
  } catch (const posenc::InputError&) {
  }
  return 0;
}
