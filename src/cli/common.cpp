#include "cli/common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <variant>

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "posenc/error.hpp"

namespace posenc::cli {

Globals& globals() {
  static Globals g;
  return g;
}

int& exit_code() {
  static int code = 0;
  return code;
}

void add_output_options(CLI::App* sub, OutputOptions& o, bool multiple, bool required,
                        const char* help) {
  auto* opt = sub->add_option(
      "-o,--output", o.outputs,
      help != nullptr ? help
                      : "output tensor reference (x.npy, x.h5:/d, x.csv, x.tsv, x.json, - for "
                        "stdout)");
  if (!multiple) opt->expected(1);
  if (required) opt->required();
  sub->add_option("--to", o.to, "output format, overriding the extension")
      ->check(CLI::IsMember({"npy", "h5", "hdf5", "csv", "tsv", "json", "text"}));
  sub->add_flag("-f,--force", o.force, "write binary output to a terminal");
  sub->add_option("--compression", o.compression, "HDF5 gzip level 0-9 (default 0)")
      ->check(CLI::Range(0, 9));
  sub->add_flag("--no-clobber", o.no_clobber, "fail instead of replacing an existing output");
  sub->add_flag("--sync", o.sync, "fsync outputs before renaming them into place");
}

std::size_t parse_memory_size(const std::string& text, const std::string& option) {
  std::size_t i = 0;
  std::size_t digits = 0;
  bool dot = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      ++digits;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  std::string unit = text.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();  // KiB = K
  double mult = 0;
  if (unit.empty()) mult = 1;
  const std::string kUnits = "KMGT";
  if (unit.size() == 1 && kUnits.find(unit[0]) != std::string::npos) {
    mult = std::ldexp(1.0, 10 * static_cast<int>(kUnits.find(unit[0]) + 1));
  }
  const double value = digits > 0 ? std::strtod(text.substr(0, i).c_str(), nullptr) : 0;
  const double bytes = value * mult;
  if (digits == 0 || mult == 0 || !(bytes >= 1)) {
    throw UsageError(
        fmt::format("{}: expected a size such as 512M, 2G, 1.5GiB or a byte count "
                    "(K, M, G, T are powers of 1024), got '{}'",
                    option, text));
  }
  if (bytes >= std::ldexp(1.0, 63)) {
    throw UsageError(fmt::format("{}: size '{}' is too large", option, text));
  }
  return static_cast<std::size_t>(bytes);
}

std::optional<long long> parse_integer(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  long long v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t at = text.find(',', pos);
    out.push_back(text.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
    if (at == std::string::npos) return out;
    pos = at + 1;
  }
}

void verbose(const std::string& msg) {
  if (globals().verbose) fmt::print(stderr, "posenc: {}\n", msg);
}

void verbose_attrs(const Attrs& attrs) {
  if (!globals().verbose) return;
  for (const auto& a : attrs) {
    std::string v = std::visit(
        [](const auto& x) -> std::string {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<double>>) {
            return fmt::format("[{}]", fmt::join(x, ", "));
          } else {
            return fmt::format("{}", x);
          }
        },
        a.value);
    fmt::print(stderr, "posenc: {} = {}\n", a.name, v);
  }
}

}  // namespace posenc::cli

namespace posenc::cli {

namespace {

// The option a library parameter name stands for on `cmd` or its parents, or "".
std::string option_for(const CLI::App* cmd, std::string name) {
  // Library names that differ from their option.
  if (name == "head_dim") name = "dim";
  if (name == "grid_ids") name = "rope2d_ids";
  std::replace(name.begin(), name.end(), '_', '-');
  const std::string flag = "--" + name;
  for (const CLI::App* a = cmd; a != nullptr; a = a->get_parent()) {
    if (a->get_option_no_throw(flag) != nullptr) return flag;
  }
  return "";
}

bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

}  // namespace

std::string cli_terms(const CLI::App* cmd, const std::string& msg) {
  if (cmd == nullptr) return msg;
  const std::size_t colon = msg.find(": ");
  std::string out;
  bool last_mapped = false;  // "q_len/k_len": a name after '/' only follows a name
  std::size_t i = 0;
  while (i < msg.size()) {
    const char before = i == 0 ? ' ' : msg[i - 1];
    const bool starts = is_name_char(msg[i]) &&
                        (before == ' ' || before == '(' || (before == '/' && last_mapped) ||
                         i == 0);
    if (!starts) {
      if (is_name_char(msg[i]) || msg[i] != '/') last_mapped = false;
      out += msg[i++];
      continue;
    }
    std::size_t j = i;
    while (j < msg.size() && is_name_char(msg[j])) ++j;
    const std::string word = msg.substr(i, j - i);
    const char after = j < msg.size() ? msg[j] : ' ';
    const bool ends = after == ' ' || after == ':' || after == ',' || after == ')' || after == '/';
    // The message's first name (and names joined to it by '/') names the parameter.
    const bool in_prefix = colon != std::string::npos && j <= colon &&
                           (i == 0 || (before == '/' && last_mapped));
    std::string flag;
    if (ends && (in_prefix || word.find('_') != std::string::npos)) flag = option_for(cmd, word);
    out += flag.empty() ? word : flag;
    last_mapped = !flag.empty();
    i = j;
  }
  return out;
}

}  // namespace posenc::cli
