#include "cli/common.hpp"

#include <cstdio>
#include <variant>

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

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
