#include "cli/common.hpp"

#include <unistd.h>

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

void add_output_options(CLI::App* sub, OutputOptions& o, bool multiple, bool required) {
  auto* opt = sub->add_option(
      "-o,--output", o.outputs,
      multiple ? "output tensor reference, once per input (x.npy, x.h5:/d, x.csv, x.json, -)"
               : "output tensor reference (x.npy, x.h5:/d, x.csv, x.tsv, x.json, - for stdout)");
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

CLI::Validator integer_text(bool is_signed) {
  return CLI::Validator([is_signed](std::string& s) { return integer_text_error(s, is_signed); },
                        "");
}

void check_numeric_options(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    // CLI11 names the value type first ("INT", "UINT:..." with a range check, "FLOAT").
    const std::string type = opt->get_type_name();
    const bool is_unsigned = type.rfind("UINT", 0) == 0;
    if (is_unsigned || type.rfind("INT", 0) == 0) {
      opt->transform(integer_text(!is_unsigned));
    } else if (type.rfind("FLOAT", 0) == 0) {
      opt->check(CLI::Validator([](std::string& s) { return number_text_error(s); }, ""));
    }
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    check_numeric_options(*sub);
  }
}

std::size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
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
