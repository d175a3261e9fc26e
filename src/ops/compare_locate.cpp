// Naming the axes of compare's error breakdown: see include/posenc/ops/compare_locate.hpp.
#include "posenc/ops/compare_locate.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "posenc/error.hpp"

namespace posenc {

namespace {

std::optional<std::int64_t> parse_axis_number(const std::string& s) {
  std::size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size() || s.size() - i > 6) return std::nullopt;  // ranks are small
  for (std::size_t j = i; j < s.size(); ++j) {
    if (s[j] < '0' || s[j] > '9') return std::nullopt;
  }
  return std::stoll(s);
}

}  // namespace

std::vector<ByItem> parse_by(const std::string& text) {
  std::vector<ByItem> items;
  std::size_t from = 0;
  while (true) {
    const std::size_t comma = text.find(',', from);
    std::string part =
        text.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    ByItem it;
    it.text = part;
    if (part.empty()) {
      throw UsageError(fmt::format("--by: '{}' has an empty entry", text));
    } else if (part == "pair" || part == "pairs") {
      it.pair = true;
    } else if (part.size() == 1 && std::string("bhsd").find(part[0]) != std::string::npos) {
      it.letter = part[0];
    } else if (auto n = parse_axis_number(part)) {
      it.number = n;
    } else {
      throw UsageError(fmt::format(
          "--by: unknown axis '{}' (give axis letters b, h, s, d, axis numbers or pair)", part));
    }
    for (const auto& prev : items) {
      if (prev.text == it.text || (prev.pair && it.pair)) {
        throw UsageError(fmt::format("--by: axis '{}' is named twice in '{}'", part, text));
      }
    }
    items.push_back(std::move(it));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return items;
}

std::string compare_layout(const std::string& axes, std::size_t rank, const std::string& what) {
  if (axes.empty()) {
    switch (rank) {
      case 2:
        return "sd";
      case 3:
        return "bsd";
      case 4:
        return "bhsd";
      default:
        return "";
    }
  }
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (std::string("bhsd").find(axes[i]) == std::string::npos) {
      throw UsageError(
          fmt::format("--axes: unknown axis letter '{}' in '{}' (letters are b, h, "
                      "s, d)",
                      axes[i], axes));
    }
    if (axes.find(axes[i]) != i) {
      throw UsageError(fmt::format("--axes: letter '{}' appears twice in '{}'", axes[i], axes));
    }
  }
  if (axes.size() != rank) {
    throw InputError(fmt::format("{}: --axes {} names {} axes but the tensor is {}-D", what, axes,
                                 axes.size(), rank));
  }
  return axes;
}

std::vector<ByAxis> resolve_by(const std::vector<ByItem>& items, const std::string& layout,
                               std::size_t rank, const std::string& what) {
  std::vector<ByAxis> out;
  for (const ByItem& it : items) {
    ByAxis a;
    if (it.letter) {
      const auto p = layout.find(it.letter);
      if (p == std::string::npos) {
        throw InputError(
            fmt::format("--by: {} has no axis '{}' ({}-D{}); give --axes or an axis number", what,
                        it.letter, rank, layout.empty() ? std::string() : ", axes " + layout));
      }
      a.axis = p;
    } else if (it.number) {
      const auto r = static_cast<std::int64_t>(rank);
      if (*it.number < -r || *it.number >= r) {
        throw InputError(
            fmt::format("--by: axis {} is out of range for {} ({}-D)", *it.number, what, rank));
      }
      a.axis = static_cast<std::size_t>(*it.number < 0 ? *it.number + r : *it.number);
    } else {
      if (rank == 0) throw InputError(fmt::format("--by: {} has no axes to pair", what));
      const auto d = layout.find('d');
      a.axis = d == std::string::npos ? rank - 1 : d;
      a.pairs = true;
    }
    for (std::size_t j = 0; j < out.size(); ++j) {
      if (out[j].axis == a.axis) {
        throw UsageError(fmt::format("--by: '{}' and '{}' name the same axis ({}) of {}",
                                     items[j].text, it.text, a.axis, what));
      }
    }
    out.push_back(a);
  }
  return out;
}

std::string by_axis_name(const ByAxis& axis, const std::string& layout) {
  if (axis.pairs) return "pair";
  if (axis.axis < layout.size()) return std::string(1, layout[axis.axis]);
  return fmt::format("axis{}", axis.axis);
}

PairStyle parse_pair_style(const std::string& text) {
  if (text == "neox" || text == "half") return PairStyle::neox;
  if (text == "gptj" || text == "interleaved") return PairStyle::gptj;
  throw UsageError(
      fmt::format("--pairs: '{}' is not neox or gptj (aliases half, interleaved)", text));
}

std::string pair_style_name(PairStyle s) { return s == PairStyle::neox ? "neox" : "gptj"; }

}  // namespace posenc
