#pragma once
// Helpers of the analyses (not part of the public API).

#include <string>
#include <vector>

#include "posenc/analysis.hpp"

namespace posenc::analysis_detail {

/// A table with the named columns (all of one length) and the parameters `attrs`, to
/// which the attribute "columns" is added. The figure is left empty.
AnalysisTable make_table(std::vector<std::string> names,
                         const std::vector<std::vector<double>>& columns, Attrs attrs);

/// "name=value ..." of the parameters in `keys` that every curve records with the same
/// value (what the legend labels need not repeat).
std::string shared_params(const std::vector<RopeCurve>& curves);

/// The parameters of every curve, prefixed "LABEL: " when there are several.
Attrs curve_attrs(const std::vector<RopeCurve>& curves);

/// Throws UsageError unless there is at least one curve.
void require_curves(const std::vector<RopeCurve>& curves);

}  // namespace posenc::analysis_detail
