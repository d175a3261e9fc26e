#pragma once
/// \file
/// `posenc table`'s requests read by keyword (posenc/keywords.hpp): the tables of one
/// kind as a keyword caller (the Python package's posenc.table) names them, with the
/// rules the command checks between the fields before any array is read.

#include <string>
#include <vector>

#include "posenc/encodings/tables.hpp"
#include "posenc/keywords.hpp"

namespace posenc {

/// The tables of kind `kind` that the keywords give, described, not computed: one per
/// name of a request's `emit`. `d` holds the kind's own keywords (its declared fields,
/// table_fields.hpp; rope's dim, positions, inverse, precision, emit and layout), `rope`
/// the ROPE OPTIONS and `pos` the positions of kind rope (rope_keywords.hpp). An unknown
/// kind is a UsageError naming "kind"; a spread member's table in error is said as the
/// caller's keyword.
std::vector<Table> tables_by_keyword(const std::string& kind, const Keywords& d,
                                     const Keywords& rope, const Keywords& pos);

}  // namespace posenc
