#pragma once
// Tables with named columns (analyses, compare --by) as every command writes them: to a
// tensor output (-o), drawn (--plot), or printed as aligned text.

#include <CLI/CLI.hpp>
#include <string>

#include "cli/common.hpp"
#include "cli/figure_output.hpp"
#include "posenc/analysis.hpp"

namespace posenc::cli {

/// Where a table goes: -o and its options, --plot and the picture options.
struct TableOutputOptions {
  OutputOptions out;
  std::string plot;
  FigureOptions fig;
  /// Whether -o - or --plot - takes standard output.
  bool stdout_taken() const {
    return (!out.outputs.empty() && out.outputs[0] == "-") || plot == "-";
  }
};

/// Adds -o (optional, `out_help` its text) and the output options, --plot (`plot_help`)
/// and the picture options.
void add_table_output_options(CLI::App* sub, TableOutputOptions& o, const char* out_help,
                              const char* plot_help);

/// The table as aligned text with the column names on top.
std::string table_text(const AnalysisTable& t);

/// Writes the table (-o), draws it (--plot), or prints it on standard output when
/// neither is asked for and `print` is set. The picture is rendered before anything is
/// written and published after the table, so a failure of either leaves both targets as
/// they were. -o - with --plot - is a UsageError.
void emit_table(const AnalysisTable& t, const TableOutputOptions& c, bool print = true);

}  // namespace posenc::cli
