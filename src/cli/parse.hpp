#pragma once
// Checked parsing of option values: every integer the command line hands to posenc
// goes through here, range-checked with no signed overflow, so a hostile value is a
// one-line usage error rather than a wrapped number. No CLI11 here: the fuzz harness
// for option values (tests/fuzz/fuzz_options.cpp) links this file alone.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "posenc/tensor.hpp"

namespace posenc::cli {

/// The integer `s` spells exactly: an optional sign and decimal digits, nothing else
/// (no octal or hex prefix, no spaces), within the range of long long; nullopt
/// otherwise (18446744073709551616 is refused, never clamped).
std::optional<long long> parse_integer(std::string_view s);

/// `text` as an integer in [lo, hi]; UsageError naming `option` otherwise.
long long parse_int_option(std::string_view text, std::string_view option, long long lo,
                           long long hi);

/// Why `text` is not a value for an integer option ("" when it is one): decimal digits
/// with an optional sign ('-' only when `is_signed`), in the range of a 64-bit integer.
/// A valid `text` is rewritten in canonical form ("+010" becomes "10"): CLI11's own
/// conversion would take "010" as octal, clamp 18446744073709551616 and wrap "-1" for
/// an unsigned option.
std::string integer_text_error(std::string& text, bool is_signed);

/// Why `text` is not a value for a real-number option ("" when it is one): a decimal
/// number whose value is finite (no nan, inf, or 1e400).
std::string number_text_error(const std::string& text);

/// A comma list of integers ("4,0"), or nullopt when an item is no integer.
std::optional<std::vector<std::int64_t>> parse_integer_list(const std::string& text);

}  // namespace posenc::cli
