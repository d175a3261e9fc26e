// Helpers of the analyses: building tables and describing the compared RoPE variants.

#include "analysis/analysis_common.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "posenc/error.hpp"

namespace posenc::analysis_detail {

namespace {

std::string attr_text(const AttrValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (const auto* i = std::get_if<long long>(&v)) return fmt::format("{}", *i);
  return "[...]";
}

const AttrValue* find_attr(const Attrs& attrs, const std::string& name) {
  for (const auto& a : attrs) {
    if (a.name == name) return &a.value;
  }
  return nullptr;
}

}  // namespace

AnalysisTable make_table(std::vector<std::string> names,
                         const std::vector<std::vector<double>>& columns, Attrs attrs) {
  const std::size_t rows = columns.empty() ? 0 : columns[0].size();
  AnalysisTable t;
  t.data = Tensor(DType::f64, Shape{rows, columns.size()});
  double* out = t.data.data<double>();
  for (std::size_t c = 0; c < columns.size(); ++c) {
    for (std::size_t r = 0; r < rows; ++r) out[r * columns.size() + c] = columns[c][r];
  }
  attrs.push_back({"columns", fmt::format("{}", fmt::join(names, ","))});
  t.columns = std::move(names);
  t.attrs = std::move(attrs);
  return t;
}

std::string shared_params(const std::vector<RopeCurve>& curves) {
  static const char* const kKeys[] = {"rotary_dim", "rope_theta", "rope_type", "factor",
                                      "original_max_position_embeddings"};
  std::vector<std::string> parts;
  for (const char* key : kKeys) {
    const AttrValue* first = find_attr(curves.at(0).freqs.attrs, key);
    if (first == nullptr) continue;
    const bool same = std::all_of(curves.begin(), curves.end(), [&](const RopeCurve& c) {
      const AttrValue* v = find_attr(c.freqs.attrs, key);
      return v != nullptr && *v == *first;
    });
    if (same) parts.push_back(fmt::format("{}={}", key, attr_text(*first)));
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

Attrs curve_attrs(const std::vector<RopeCurve>& curves) {
  Attrs out;
  for (const auto& c : curves) {
    for (const auto& a : c.freqs.attrs) {
      out.push_back({curves.size() == 1 ? a.name : c.label + ": " + a.name, a.value});
    }
  }
  return out;
}

void require_curves(const std::vector<RopeCurve>& curves) {
  if (curves.empty()) throw UsageError("analysis: no RoPE variant to analyse");
}

}  // namespace posenc::analysis_detail
