#pragma once
/// \file
/// Naming the axes of a breakdown of compare's errors (`compare --by h,s`): a list of
/// axis letters of the tensor's layout (b, h, s, d as `--axes` gives them), axis
/// numbers (0-based; negative counts from the end, as numpy's axis=-1), and `pair`, the
/// dimension pairs of the head-dim axis (see PairStyle).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "posenc/ops/compare.hpp"
#include "posenc/tensor.hpp"

namespace posenc {

/// One entry of a --by list as written.
struct ByItem {
  std::string text;                    ///< as written, for messages
  char letter = 0;                     ///< b, h, s or d; 0 otherwise
  std::optional<std::int64_t> number;  ///< an axis number
  bool pair = false;                   ///< "pair"
};

/// Parses a comma list of entries (any number). Throws UsageError naming `--by` for an
/// empty list or entry, an unknown entry, or an entry written twice.
std::vector<ByItem> parse_by(const std::string& text);

/// The axis letters of a tensor of rank `rank`: `axes` when given (letters b, h, s, d,
/// each at most once: UsageError naming `--axes`; as many as the rank: InputError
/// naming `what`), else the defaults by rank (2: sd, 3: bsd, 4: bhsd; other ranks
/// have no letters and "" is returned).
std::string compare_layout(const std::string& axes, std::size_t rank, const std::string& what);

/// The entries of a --by list as axes of a tensor of rank `rank` with axis letters
/// `layout` ("" for none): a letter must be in the layout, a number in [-rank, rank)
/// (InputError naming `what` otherwise); `pair` is the pairs of axis d, or of the last
/// axis when the layout has no d. Two entries naming the same axis (`s,2` in bhsd,
/// `d,pair`) are a UsageError.
std::vector<ByAxis> resolve_by(const std::vector<ByItem>& items, const std::string& layout,
                               std::size_t rank, const std::string& what);

/// A column name for `axis`: "pair", the layout's letter, or "axisK".
std::string by_axis_name(const ByAxis& axis, const std::string& layout);

/// Parses neox|gptj (aliases half, interleaved, as --style). UsageError naming --pairs.
PairStyle parse_pair_style(const std::string& text);
/// "neox" or "gptj".
std::string pair_style_name(PairStyle s);

}  // namespace posenc
